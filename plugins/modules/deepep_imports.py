#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_imports
short_description: Check that a DeepEP build imports as the env script's shell and the installed wheel give it
version_added: "0.3.0"
description:
  - Imports C(deep_ep) from C(/) with the given interpreter twice at once, in one task - with the build tree first on
    C(PYTHONPATH) (what the env script's shell gets) and, with O(wheel_site_dir), without it (the installed wheel,
    which must be where C(deep_ep) then comes from) - and fails naming the import error or the file that imported
    instead.
  - With O(record), writes O(record_key) there once both imports passed, so that a later run with the same build,
    environment and wheel does not import again (the deepep role reads it with the build's plan). Writing the record
    is not reported as a change, like a test report.
  - With O(read_interpreter), reads the interpreter as M(moe_infra.deepep.deepep_facts) does with its
    O(moe_infra.deepep.deepep_facts#module:interpreter) option for the same O(python), O(src_dir), O(cache_dir) and
    O(run_as) (the torch, NCCL and NVSHMEM probe and the build tree's import, without O(environment)) side by side
    with the imports, so that the reading after a build answers from the probe cache instead of starting two more
    interpreters.
  - In check mode nothing is imported or written (the build may not be there yet).
author:
  - moe_infra maintainers (@moe-infra)
options:
  python:
    description:
      - Python interpreter DeepEP was built for.
    type: path
    required: true
  src_dir:
    description:
      - The build tree put first on C(PYTHONPATH) for the first import.
    type: path
    required: true
  wheel_site_dir:
    description:
      - The site directory the DeepEP wheel was installed into; the second import (no C(PYTHONPATH)) must import
        C(deep_ep) from below it. Empty skips the second import.
    type: path
    default: ""
  environment:
    description:
      - The environment of both imports (the env script's, without C(PYTHONPATH)), as a shell that sources the
        script has it - its search paths (C(LD_LIBRARY_PATH), C(PATH), C(CPATH)) in front of those the module
        inherited, as M(moe_infra.deepep.deepep_doctor)'s probe has them.
    type: dict
    default: {}
  cache_dir:
    description:
      - The probe cache of M(moe_infra.deepep.torch_stack_info) (an answer is reused while nothing it depends on
        changed). Empty imports every time.
    type: path
    default: ""
  run_as:
    description:
      - Run the interpreter as this unprivileged user (see M(moe_infra.deepep.torch_stack_info)); empty runs it as
        the task's user.
    type: str
    default: ""
  record:
    description:
      - File to write O(record_key) to once every import passed; empty writes nothing.
    type: path
    default: ""
  record_key:
    description:
      - What the imports were checked for (the deepep role's digest of the build, the environment and the wheel's
        site directory).
    type: str
    default: ""
  read_interpreter:
    description:
      - Also read the interpreter as M(moe_infra.deepep.deepep_facts) reads it after a build (needs O(cache_dir) to
        be of use to that reading), returned as RV(interpreter).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Check the imports
  moe_infra.deepep.deepep_imports:
    python: /opt/torch/venv/bin/python
    src_dir: /opt/deepep/deepep/current/src
    wheel_site_dir: /opt/torch/venv/lib/python3.12/site-packages
    environment:
      LD_LIBRARY_PATH: /opt/deepep/gdrcopy/current/lib
    record: /opt/deepep/deepep/current/imports.node-record
    record_key: 3f6c0a
    cache_dir: /var/cache/moe_infra_deepep/probes
    read_interpreter: true
"""

RETURN = r"""
checked:
  description: Whether the imports ran (false in check mode).
  returned: always
  type: bool
with_build_tree:
  description: The first import (build tree on C(PYTHONPATH)) as M(moe_infra.deepep.torch_stack_info) reports C(deep_ep).
  returned: when RV(checked) is true
  type: dict
installed_wheel:
  description: The second import (no C(PYTHONPATH)); null without O(wheel_site_dir).
  returned: when RV(checked) is true
  type: dict
interpreter:
  description: With O(read_interpreter), the reading as M(moe_infra.deepep.torch_stack_info) returns it (with
    C(exists) and C(cached)).
  returned: when RV(checked) and O(read_interpreter) are true
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.envscript import sourced_env
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.torch_probe import read_deep_ep


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            src_dir=dict(type="path", required=True),
            wheel_site_dir=dict(type="path", default=""),
            environment=dict(type="dict", default={}),
            cache_dir=dict(type="path", default=""),
            run_as=dict(type="str", default=""),
            record=dict(type="path", default=""),
            record_key=dict(type="str", default="", no_log=False),
            read_interpreter=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, checked=False)
    # As a shell that sourced the env script has them (search paths in front of this process's): what its users get,
    # and the environment of the doctor's probe, which then reads this answer from the cache.
    environment = sourced_env(dict((key, value) for key, value in (p["environment"] or {}).items()
                                   if key != "PYTHONPATH"))
    params = dict(python=p["python"], environment=environment, cache_dir=p["cache_dir"], run_as=p["run_as"])
    # Both imports at once (each is an interpreter importing torch and deep_ep: seconds each with DeepEP V2), and the
    # interpreter read beside them.
    pythonpaths = [[p["src_dir"]]] + ([[]] if p["wheel_site_dir"] else [])
    interpreter = None
    if p["read_interpreter"]:
        stack = dict(params, environment={}, pythonpath=[p["src_dir"]], missing_ok=False)
        answers, interpreter = read_deep_ep(module, params, pythonpaths, stack)
    else:
        answers = read_deep_ep(module, params, pythonpaths)
    tree, wheel = answers[0], (answers[1] if p["wheel_site_dir"] else None)
    if not tree["importable"]:
        module.fail_json(msg="import deep_ep failed from / with %s on PYTHONPATH: %s" % (p["src_dir"], tree["error"]),
                         with_build_tree=tree)
    if p["wheel_site_dir"]:
        site = p["wheel_site_dir"].rstrip("/") + "/"
        if not wheel["importable"] or not (wheel["file"] or "").startswith(site):
            module.fail_json(msg="import deep_ep without PYTHONPATH: %s, not the wheel installed in %s"
                                 % (wheel["error"] or wheel["file"], p["wheel_site_dir"]),
                             with_build_tree=tree, installed_wheel=wheel)
    if p["record"]:
        part = p["record"] + ".part"
        with open(part, "w") as handle:
            handle.write(p["record_key"] + "\n")
        os.chmod(part, 0o644)
        os.replace(part, p["record"])
    result = dict(changed=False, checked=True, with_build_tree=tree, installed_wheel=wheel)
    if p["read_interpreter"]:
        result["interpreter"] = interpreter
    module.exit_json(**result)


if __name__ == "__main__":
    main()
