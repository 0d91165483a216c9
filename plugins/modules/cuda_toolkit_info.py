#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit_info
short_description: Find the CUDA toolkit and its release
version_added: "0.1.0"
description:
  - Looks for C(nvcc) under O(cuda_home) and then on C(PATH), runs C(nvcc --version) and reports the
    release (C(13.0)), the full version from C(version.json) when present, and whether the CUDA 13
    CCCL include directory (C(include/cccl)) exists, which DeepEP V1 needs on C(CPATH).
  - Read-only; never reports a change.
deprecated:
  removed_in: 1.0.0
  why: moe_infra.deepep.deepep_facts reads this part of a node, and any other, in one module.
  alternative: moe_infra.deepep.deepep_facts with gather_subset [cuda], which returns it under deepep.cuda.
author:
  - moe_infra maintainers (@moe-infra)
options:
  cuda_home:
    description:
      - CUDA installation to look at first.
    type: path
    default: /usr/local/cuda
extends_documentation_fragment:
  - moe_infra.deepep.info_module
"""

EXAMPLES = r"""
- name: Find CUDA
  moe_infra.deepep.cuda_toolkit_info:
  register: cuda

- name: Show the release
  ansible.builtin.debug:
    msg: "CUDA {{ cuda.release | default('absent', true) }} at {{ cuda.cuda_home }}"
"""

RETURN = r"""
found:
  description: Whether an nvcc that runs was found.
  returned: always
  type: bool
nvcc:
  description: Path of the nvcc that was run.
  returned: always
  type: str
  sample: /usr/local/cuda/bin/nvcc
cuda_home:
  description: Toolkit root the nvcc belongs to (the parent of its C(bin) directory).
  returned: always
  type: str
release:
  description: Release as C(major.minor) from C(nvcc --version).
  returned: always
  type: str
  sample: "13.0"
major:
  description: Major release, for C(cu12)/C(cu13) package names.
  returned: always
  type: int
  sample: 13
full_version:
  description: Full version from C(version.json); null when that file is absent.
  returned: always
  type: str
  sample: "13.0.2"
cccl_include_dir:
  description: C(<cuda_home>/include/cccl) when it exists (CUDA 13), else null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.node_info import cuda_info


def main():
    module = AnsibleModule(
        argument_spec=dict(cuda_home=dict(type="path", default="/usr/local/cuda")),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **cuda_info(module, module.params["cuda_home"]))


if __name__ == "__main__":
    main()
