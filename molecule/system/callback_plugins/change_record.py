# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Test-only callback: appends one JSON line per playbook run to $CHANGE_RECORD with, per host, the names of the
tasks that reported a change, whether the run was --check, and its wall time. The system scenario's verify compares
the --check run on fresh nodes with the converge that follows it; the site scenario's reads the timings."""

from __future__ import annotations

DOCUMENTATION = r"""
name: change_record
type: aggregate
short_description: Record the changed tasks per host and run (molecule system scenario)
description:
  - Appends one JSON line per run (check flag, changed task names per host, failed and unreachable hosts, wall
    seconds from the playbook's start) to the file named by C(CHANGE_RECORD).
requirements:
  - CHANGE_RECORD set in the environment
"""

import json
import os
import time

from ansible import context
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "change_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.changed = {}
        self.hosts = set()
        self.started = time.time()

    def v2_playbook_on_start(self, playbook):
        self.started = time.time()

    def v2_runner_on_ok(self, result):
        host = result._host.get_name()
        self.hosts.add(host)
        if result._result.get("changed"):
            names = self.changed.setdefault(host, [])
            name = result._task.get_name()
            if name not in names:
                names.append(name)

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("CHANGE_RECORD")
        if not path:
            return
        record = {"check": bool(context.CLIARGS.get("check")), "hosts": sorted(self.hosts),
                  "changed": {host: self.changed.get(host, []) for host in sorted(self.hosts)},
                  "failed": sorted(stats.failures), "unreachable": sorted(stats.dark),
                  "seconds": round(time.time() - self.started, 1)}
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
