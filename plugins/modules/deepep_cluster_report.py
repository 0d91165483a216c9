#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_cluster_report
short_description: Write the cluster report (one HTML page and its JSON) from what a run found per host
version_added: "0.3.0"
description:
  - >-
    Merges one run's per-host records into O(dest)C(/report.json) and renders O(dest)C(/report.html) from it: a
    self-contained page (inline CSS, no script, nothing fetched) with a node x layer matrix (state, version,
    fingerprint; changed, failed, reboot pending; a layer the doctor finds broken is not shown as fine), the
    doctor's problems first, grouped by failure across nodes, worst first, each with its fix, the command that
    reruns the layer that fixes it and a link to its doctor entry, DeepEP's bandwidths per node as bars against
    their thresholds and the best seen on that node, internode traffic per NIC (one-way or no traffic is not
    green), and the hosts that dropped out, with when and why.
  - Earlier runs stay in the report; a host's record of one kind (site, doctor, internode) is replaced by the
    newest. Hosts in O(targeted) but not in O(hosts) are marked as dropped out of this run.
  - Meant to run once per play on the controller (C(run_once), C(delegate_to) C(localhost)); the playbooks of this
    collection do so at their end.
  - In check mode nothing is written, neither the page nor the records.
options:
  dest:
    description: Directory of the report (created). A relative path is taken from the controller's working
      directory. Leave it out to write only O(records_dir).
    type: path
  records_dir:
    description: Also write each record of O(hosts) as O(records_dir)C(/<host>-<source>.json) (created; the
      C(site.yml) summaries other tools read), in the same call instead of one file task per host. At least one of
      O(dest) and O(records_dir) is needed.
    type: path
  source:
    description: What the records are.
    type: str
    required: true
    choices: [site, doctor, internode]
  hosts:
    description: "The run's records: {host: record}. C(site): the C(deepep_site_summary) of C(site.yml);
      C(doctor): the doctor's report (C(summary), C(findings)); C(internode): C(deepep_internode_result)."
    type: dict
    required: true
  targeted:
    description: Every host the run was meant for (those not in O(hosts) dropped out).
    type: list
    elements: str
    default: []
  playbook:
    description: The playbook's name, shown in the report.
    type: str
    default: ""
  reasons:
    description: >-
      Why hosts of O(targeted) stopped, where the playbook knows it (C({host: message}); C(site.yml) passes what
      stopped a host in preflight). Shown with the host that dropped out; without one the page says the error is in
      that run's output.
    type: dict
    default: {}
  inventory:
    description: The inventory the page's commands name (C(-i)); empty keeps the one recorded before, else
      C(<inventory>).
    type: str
    default: ""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode nothing is written; the result says where the report would go.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
author:
  - moe_infra maintainers (@moe-infra)
"""

EXAMPLES = r"""
- name: Write the cluster report on the controller
  moe_infra.deepep.deepep_cluster_report:
    dest: "{{ deepep_cluster_report_dir }}"
    source: site
    hosts: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'deepep_site_summary'))) }}"
    targeted: "{{ ansible_play_hosts_all }}"
    playbook: site.yml
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
html:
  description: Path of the page; null without O(dest).
  returned: always
  type: str
json:
  description: Path of the JSON the page is made from; null without O(dest).
  returned: always
  type: str
records:
  description: Paths of the per-host records written (or, in check mode, that would be) under O(records_dir).
  returned: always
  type: list
  elements: str
dropped:
  description: Hosts of O(targeted) without a record in this run.
  returned: always
  type: list
  elements: str
summary:
  description: One line per host (layer states), for the end-of-run message.
  returned: always
  type: list
  elements: str
"""

import datetime
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.cluster_report import (
    LAYERS,
    SOURCES,
    agreeing_cells,
    merge,
    render_html,
)


def _write(path, text):
    handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".report.")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def summary_lines(report, names):
    lines = []
    for name in sorted(names):
        entry = report["hosts"].get(name) or {}
        if entry.get("dropped"):
            lines.append("%s: dropped out" % name)
            continue
        if not entry.get("site"):
            continue
        cells = agreeing_cells(entry)
        lines.append("%s: %s" % (name, ", ".join("%s %s" % (title, cells[layer]["text"] if cells[layer]["state"] in
                                                            ("ok", "skipped") else "%s (%s)" % (cells[layer]["text"],
                                                            cells[layer]["state"]))
                                                 for layer, title in LAYERS)))
    return lines


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path"),
            records_dir=dict(type="path"),
            source=dict(type="str", required=True, choices=list(SOURCES)),
            hosts=dict(type="dict", required=True),
            targeted=dict(type="list", elements="str", default=[]),
            playbook=dict(type="str", default=""),
            reasons=dict(type="dict", default={}),
            inventory=dict(type="str", default=""),
        ),
        required_one_of=[("dest", "records_dir")],
        supports_check_mode=True,
    )
    source = module.params["source"]
    dest = os.path.abspath(module.params["dest"]) if module.params["dest"] else None
    records_dir = os.path.abspath(module.params["records_dir"]) if module.params["records_dir"] else None
    paths = {"json": os.path.join(dest, "report.json"), "html": os.path.join(dest, "report.html")} if dest else {}
    for option, path, variable in (("dest", dest, "deepep_cluster_report_dir"),
                                   ("records_dir", records_dir, "deepep_site_report_dir")):
        if path and os.path.exists(path) and not os.path.isdir(path):
            module.fail_json(msg="%s %s exists and is not a directory: set %s to a directory" % (option, path, variable))
    hosts = dict((name, record) for name, record in module.params["hosts"].items() if isinstance(record, dict))
    previous = None
    if paths and os.path.isfile(paths["json"]):
        try:
            with open(paths["json"]) as handle:
                previous = json.load(handle)
        except ValueError:
            previous = None  # a report cut off half-written: start again
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    report = merge(previous, source, module.params["playbook"], at, hosts, module.params["targeted"],
                   check_mode=module.check_mode, reasons=dict((str(k), str(v)) for k, v in
                                                              module.params["reasons"].items()),
                   inventory=module.params["inventory"])
    records = dict((os.path.join(records_dir, "%s-%s.json" % (name, source)), record)
                   for name, record in sorted(hosts.items())) if records_dir else {}
    result = dict(changed=True, html=paths.get("html"), json=paths.get("json"), records=sorted(records),
                  dropped=report["runs"][-1]["dropped"],
                  summary=summary_lines(report, set(hosts) | set(report["runs"][-1]["dropped"])))
    if module.check_mode:
        module.exit_json(**result)
    try:
        if records_dir:
            os.makedirs(records_dir, exist_ok=True)
            for path, record in records.items():
                _write(path, json.dumps(record, indent=4, sort_keys=True) + "\n")
        if dest:
            os.makedirs(dest, exist_ok=True)
            _write(paths["json"], json.dumps(report, indent=2, sort_keys=True) + "\n")
            _write(paths["html"], render_html(report))
    except OSError as exc:
        module.fail_json(msg="cannot write the report: %s" % exc, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
