#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: torch_stack_info
short_description: Versions of torch, NCCL, the NVSHMEM wheel and DeepEP as one Python interpreter sees them
version_added: "0.1.0"
description:
  - Runs a short probe with the given Python interpreter and reports the torch version and its CUDA build,
    the NCCL version torch loads (read from the library, not torch's compile-time number), the C(nvidia-nvshmem-cu12/cu13) and C(nvidia-nccl-cu12/cu13) wheels
    (version, directory, whether the wheel ships the IBGDA transport C(nvshmem_transport_ibgda.so.3)),
    numpy, pip, and whether C(deep_ep) imports from C(/) with the given C(PYTHONPATH) (a second interpreter, started
    at the same time as the first).
  - An import failure that names an undefined symbol is flagged, the sign of DeepEP built against another
    torch (KF18).
  - Read-only; never reports a change.
author:
  - moe_infra maintainers (@moe-infra)
options:
  python:
    description:
      - Python interpreter to probe (the one DeepEP is built and run with).
    type: path
    required: true
  pythonpath:
    description:
      - C(PYTHONPATH) for the C(deep_ep) import check (e.g. the DeepEP build directory).
    type: list
    elements: path
    default: []
  environment:
    description:
      - Extra environment for the probe (e.g. C(LD_PRELOAD)).
    type: dict
    default: {}
  cache_dir:
    description:
      - >-
        Where to keep the probe's answers: while the interpreter, the top-level entries of its C(sys.path)
        directories (C(PYTHONPATH) included) with their modification times, the files and directories named in
        C(LD_PRELOAD) / C(LD_LIBRARY_PATH), the running kernel and NVIDIA driver and the environment are what an
        earlier probe saw, its answer is returned without starting torch (C(cached) is true). A pip install or upgrade, a rebuilt extension or
        another environment makes it probe again.
      - Empty (the default) probes every time. Nothing is written in check mode.
    type: path
    default: ""
  missing_ok:
    description:
      - An interpreter that does not exist yet (a venv a later task creates) is an answer, not an error - RV(exists) is
        false and every reading null - so one call both checks for it and probes it.
    type: bool
    default: false
  run_as:
    description:
      - Run the interpreter as this unprivileged user (the build user; see the security model in docs/usage.md), so
        that nothing on O(pythonpath) - a build's C(deep_ep), a planted C(sitecustomize.py) - runs as root. A user not
        on this node yet (a build user before the first build) is replaced by C(nobody). Empty, or a module not run
        as root, runs it as the module's user.
    type: str
    default: ""
extends_documentation_fragment:
  - moe_infra.deepep.info_module
"""

EXAMPLES = r"""
- name: Probe the torch stack
  moe_infra.deepep.torch_stack_info:
    python: /opt/torch/.venv/bin/python3
    pythonpath: [/opt/deepep/deepep/current/src]
  register: stack
"""

RETURN = r"""
python_version:
  description: Interpreter version.
  returned: always
  type: str
  sample: 3.12.3
torch:
  description:
    - C(version), C(cuda) (the CUDA torch was built with); null values when torch is missing or cannot be imported
      (C(error) says why). C(installed) is the version of the torch distribution, read without importing it.
    - C(nccl) is the version of the libnccl the import loaded, from its C(ncclGetVersion) (C(nccl_lib), its path;
      C(nccl_libs) lists every libnccl loaded, two being DeepEP V2's duplicate-runtime failure). When no libnccl
      was loaded it is C(nccl_compiled), the version torch was compiled against (C(torch.cuda.nccl.version()),
      which does not change when a newer NCCL is put in place of the wheel's).
  returned: always
  type: dict
  sample: {version: 2.11.0+cu130, installed: 2.11.0+cu130, cuda: "13.0", nccl: 2.30.7, nccl_compiled: 2.28.9,
           nccl_lib: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2,
           nccl_libs: [/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2]}
nvshmem_wheel:
  description: The NVSHMEM wheel (C(package), C(version), C(dir), C(lib_dir), C(host_lib), C(ibgda_transport));
    null when no NVSHMEM wheel is installed.
  returned: always
  type: dict
nccl_wheel:
  description: The NCCL wheel (C(package), C(version), C(dir), C(real_dir), C(replaced_by), C(upgraded_from),
    C(half_installed), C(pip_stash), C(cut_short)); null when none.
    C(real_dir) is C(dir) with its symlinks resolved (where the loader sees torch's NCCL loaded from).
    C(replaced_by) is the C(version) and C(build_dir) of the NCCL build the nccl layer put in place of the wheel's
    files (from its record, C(.moe_infra_nccl.json)), or null when the files are the wheel's. C(upgraded_from) is
    the version the nccl layer's wheel method upgraded the wheel from (its record, C(.moe_infra_nccl_wheel.json),
    while the wheel is still the version it installed), or null. C(half_installed) is true when no NCCL wheel is
    installed and its directory still holds that record (a pip changing the wheel was stopped between its
    uninstall and its install); C(version) is then null and C(upgraded_from) the version to install again.
    Without the record (a pip that was not the nccl layer's), the same is read from the stash that pip's uninstall
    left of the dist-info it removed, named in C(pip_stash) (C(~vidia_nccl_cu13-2.28.9.dist-info)); else null.
    C(cut_short) is set when the wheel is installed but its C(libnccl.so.2) is not the size its RECORD gives (a
    C(pip install -I), which uninstalls nothing and leaves no stash, stopped while it wrote the library), with C(lib),
    C(size) (null when the file is gone), C(recorded_size), C(package), C(version). C(half_installed) is then true
    too, and C(upgraded_from) the version to install again (the installed one, unless the nccl layer's record names
    the one before its upgrade); else null.
  returned: always
  type: dict
numpy:
  description: numpy version; null when missing.
  returned: always
  type: str
pip:
  description: The version of the interpreter's own pip (C(python -m pip)); null when it has none.
  returned: always
  type: str
deep_ep:
  description: C(importable), C(file), C(error), C(undefined_symbol) for C(import deep_ep) run from C(/), and
    C(nvshmem_host_loaded) (the libnvshmem_host files the process mapped; null when the import failed).
  returned: always
  type: dict
exists:
  description: Whether O(python) exists and is executable (false only with O(missing_ok)).
  returned: always
  type: bool
cached:
  description: Whether the answers came from O(cache_dir) (no interpreter imported torch).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.torch_probe import STACK_OPTIONS, read_stack


def main():
    module = AnsibleModule(argument_spec=STACK_OPTIONS, supports_check_mode=True)
    module.exit_json(changed=False, **read_stack(module, module.params))


if __name__ == "__main__":
    main()
