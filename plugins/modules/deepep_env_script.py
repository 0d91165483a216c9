#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_env_script
short_description: Write DeepEP's env script when its content or mode differs, in one call
version_added: "0.3.0"
description:
  - >-
    Writes O(content) to O(dest) (atomically, through a temporary file in the same directory and a rename) and
    sets O(mode), only when the file's content or mode differs. The C(deepep) role renders the script on the
    controller (moe_infra.deepep._deepep_env_script_text) and hands it here.
  - >-
    Why not M(ansible.builtin.template): an unchanged file costs it two module runs on the node (a stat, then the
    file module for the mode); here an unchanged script is one read.
  - Check mode says whether the script would change and writes nothing; diff mode shows the old and new text.
author:
  - moe_infra maintainers (@moe-infra)
options:
  dest:
    description:
      - The script's path. Missing parent directories are created (mode 0755), as M(ansible.builtin.template)
        does.
    type: path
    required: true
  content:
    description:
      - The whole script.
    type: str
    required: true
  mode:
    description:
      - Octal permissions, as a string like C("0644").
    type: str
    default: "0644"
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
"""

EXAMPLES = r"""
- name: Write the env script
  moe_infra.deepep.deepep_env_script:
    dest: /opt/deepep/env.sh
    content: "{{ deepep_env | moe_infra.deepep._deepep_env_script_text(inventory_hostname, '/opt/deepep/env.sh') }}"
"""

RETURN = r"""
dest:
  description: The script's path.
  returned: always
  type: str
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.files import write_atomic


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            content=dict(type="str", required=True),
            mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    dest, content = module.params["dest"], module.params["content"]
    try:
        mode = int(module.params["mode"], 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o7777:
        module.fail_json(msg="mode: %r is not octal permissions like '0644'" % module.params["mode"])
    directory = os.path.dirname(dest) or "."
    if os.path.isdir(dest):
        module.fail_json(msg="dest: %s is a directory; set deepep_env_script to a file path" % dest)
    before, before_mode = None, None
    if os.path.exists(dest):
        with open(dest) as handle:
            before = handle.read()
        before_mode = stat.S_IMODE(os.stat(dest).st_mode)
    changed = before != content or before_mode != mode
    result = dict(changed=changed, dest=dest)
    if module._diff and changed:
        result["diff"] = dict(before=before or "", after=content, before_header=dest, after_header=dest)
    if changed and not module.check_mode:
        try:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            write_atomic(module, dest, content, mode)
            os.chmod(dest, mode)  # atomic_move keeps an existing file's mode
        except OSError as exc:
            module.fail_json(msg="cannot write %s: %s" % (dest, exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
