#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: source_build_status
short_description: State of a M(moe_infra.deepep.source_build) running in the background, with its build phase
version_added: "0.4.0"
description:
  - Reads the job file of a build that M(moe_infra.deepep.source_build)'s action plugin started in the background
    (its O(moe_infra.deepep.source_build#module:build_timeout)) and the tail of the build's log. While the build
    runs it returns the phase (the command running and the build tool's last progress line); once it finished,
    the build's result.
  - Called by the action plugin between checks; a playbook has no need to call it.
author:
  - moe_infra maintainers (@moe-infra)
options:
  results_file:
    description: The background job's file (the C(results_file) the job's start returned).
    type: path
    required: true
  log:
    description: The build's log (source_build's C(log) of this fingerprint); a missing log is the phase C(starting).
    type: path
  cleanup:
    description: Remove the job file once the job finished.
    type: bool
    default: true
  heartbeat:
    description:
      - The build's heartbeat file (M(moe_infra.deepep.source_build)'s O(moe_infra.deepep.source_build#module:heartbeat)),
        touched while the job runs (the run still looks after it).
    type: path
  wait:
    description:
      - Seconds to wait on the node for the job to end, looking at its file four times a second, before answering
        that it still runs; it answers as soon as the job has ended. The action plugin's check interval, so that a
        build's end is seen within a quarter of a second rather than at the next check. 0 answers at once.
    type: float
    default: 0
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Check on a background build
  moe_infra.deepep.source_build_status:
    results_file: /root/.ansible_async/j123.456
    log: /opt/deepep/nvshmem/builds/3f9a0c1d2b4e5f60/build.log
  register: progress
"""

RETURN = r"""
finished:
  description: Whether the job ended (its result is in RV(result)).
  returned: always
  type: bool
phase:
  description: The command running and the build tool's last progress line.
  returned: always
  type: str
  sample: "cmake --build build -j16: [ 45%] Building CUDA object src/CMakeFiles/nvshmem.dir/host/init.cu.o"
result:
  description: The build's result once it finished (what source_build returns); empty before.
  returned: always
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_progress import build_phase

TAIL_BYTES = 16384


def read_tail(path):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - TAIL_BYTES, 0))
            return handle.read().decode("utf-8", "replace")
    except (OSError, IOError):
        return ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_file=dict(type="path", required=True),
            log=dict(type="path"),
            cleanup=dict(type="bool", default=True),
            heartbeat=dict(type="path"),
            wait=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    path = module.params["results_file"]
    deadline = time.time() + max(module.params["wait"], 0)
    while True:
        if not os.path.isfile(path):
            module.fail_json(msg="results_file: %s does not exist: the background build is gone (the node rebooted, or "
                                 "its job file was removed); run the play again" % path)
        try:
            with open(path) as handle:
                data = json.load(handle)
        except ValueError:
            data = {"started": 1, "finished": 0}  # being written
        if not (data.get("started") and not data.get("finished")) or time.time() >= deadline:
            break
        time.sleep(0.25)
    # The wrapper's own record says started/finished; once the build ended the file holds the build's result.
    finished = not (data.get("started") and not data.get("finished"))
    if finished and module.params["cleanup"] and not module.check_mode:
        os.unlink(path)
    heartbeat = module.params["heartbeat"]
    if heartbeat and not finished and not module.check_mode and os.path.isfile(heartbeat):
        os.utime(heartbeat, None)  # the run is still looking after this build
    phase = build_phase(read_tail(module.params["log"])) if module.params["log"] else "starting"
    module.exit_json(changed=False, finished=finished, phase=phase, result=data if finished else {})


if __name__ == "__main__":
    main()
