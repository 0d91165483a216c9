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
    collection do so at their end. Its action plugin writes the report in the controller's own process with this
    module's code (no module process starts); the report is always written on the controller.
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
    description: "The run's records: {host: record}. C(site): each host's site summary at the end of C(site.yml)
      (P(moe_infra.deepep._deepep_site_summaries#filter));
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
    hosts: "{{ hostvars | moe_infra.deepep._deepep_site_summaries(ansible_play_hosts) }}"
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.cluster_report_writer import (
    ARGUMENT_SPEC,
    REQUIRED_ONE_OF,
    ReportError,
    write_report,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF, supports_check_mode=True)
    try:
        module.exit_json(**write_report(module.params, module.check_mode))
    except ReportError as exc:
        module.fail_json(msg=str(exc), **exc.result)


if __name__ == "__main__":
    main()
