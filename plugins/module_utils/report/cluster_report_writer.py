# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Writing the cluster report: what M(deepep_cluster_report) does, shared by the module and its action plugin (which
runs it in the controller's own process: the report is the controller's, and a module process there costs a
Python start and the module's packaging on every run)."""

from __future__ import annotations

import datetime
import json
import os
import tempfile

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.cluster_report import (
    LAYERS,
    SOURCES,
    agreeing_cells,
    merge,
    render_html,
)

ARGUMENT_SPEC = dict(
    dest=dict(type="path"),
    records_dir=dict(type="path"),
    source=dict(type="str", required=True, choices=list(SOURCES)),
    hosts=dict(type="dict", required=True),
    targeted=dict(type="list", elements="str", default=[]),
    playbook=dict(type="str", default=""),
    reasons=dict(type="dict", default={}),
    inventory=dict(type="str", default=""),
)
REQUIRED_ONE_OF = [("dest", "records_dir")]


class ReportError(Exception):
    """The report cannot be written; result: what the module returns with the failure."""

    def __init__(self, msg, result=None):
        super(ReportError, self).__init__(msg)
        self.result = result or {}


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


def write_report(params, check_mode):
    """Merge params' hosts into the report and write it (nothing in check mode); the module's result. Raises
    ReportError when a path is not a directory or a file cannot be written."""
    source = params["source"]
    dest = os.path.abspath(params["dest"]) if params["dest"] else None
    records_dir = os.path.abspath(params["records_dir"]) if params["records_dir"] else None
    paths = {"json": os.path.join(dest, "report.json"), "html": os.path.join(dest, "report.html")} if dest else {}
    for option, path, variable in (("dest", dest, "deepep_cluster_report_dir"),
                                   ("records_dir", records_dir, "deepep_site_report_dir")):
        if path and os.path.exists(path) and not os.path.isdir(path):
            raise ReportError("%s %s exists and is not a directory: set %s to a directory" % (option, path, variable))
    hosts = dict((name, record) for name, record in params["hosts"].items() if isinstance(record, dict))
    previous = None
    if paths and os.path.isfile(paths["json"]):
        try:
            with open(paths["json"]) as handle:
                previous = json.load(handle)
        except ValueError:
            previous = None  # a report cut off half-written: start again
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    report = merge(previous, source, params["playbook"], at, hosts, params["targeted"],
                   check_mode=check_mode, reasons=dict((str(k), str(v)) for k, v in params["reasons"].items()),
                   inventory=params["inventory"])
    records = dict((os.path.join(records_dir, "%s-%s.json" % (name, source)), record)
                   for name, record in sorted(hosts.items())) if records_dir else {}
    result = dict(changed=True, html=paths.get("html"), json=paths.get("json"), records=sorted(records),
                  dropped=report["runs"][-1]["dropped"],
                  summary=summary_lines(report, set(hosts) | set(report["runs"][-1]["dropped"])))
    if check_mode:
        return result
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
        raise ReportError("cannot write the report: %s" % exc, result)
    return result
