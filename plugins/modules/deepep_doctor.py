#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_doctor
short_description: Diagnose the known failure modes of the DeepEP stack on a node (read-only)
version_added: "0.3.0"
description:
  - Reads the node's state (sysfs names, port states and GID tables, C(/proc/driver/nvidia/params) against the
    modprobe.d conf files, loaded modules, rdma-core headers, the CUDA toolkit, the NVSHMEM build and
    C(nvshmem-info -a), the env script, the stamps of the builds, the DeepEP build tree's owners, the
    libnvshmem_host a Python process with torch and deep_ep really loads, container markers and capabilities,
    C(ulimit -l)) and the logs the verification keeps, then runs one check per known failure (KF01-KF36).
  - Every check returns C(ok), C(problem), C(not_applicable) or C(unknown) (could not tell), with the evidence
    and the fix. Works on a machine without GPUs, where the checks that do not apply say so.
  - Changes nothing, in check mode or not. Never fails because of what it finds.
  - Checks across the inventory (hostnames unique, KF30; GPU counts) are the doctor role's, run by
    C(playbooks/doctor.yml).
options:
  sysfs_root:
    description: Root of sysfs (a fixture tree in tests).
    type: path
    default: /sys
  procfs_root:
    description: Root of procfs.
    type: path
    default: /proc
  root:
    description: Root of the other paths read (C(/usr/src), library directories, container markers, dpkg status).
    type: path
    default: /
  modprobe_dir:
    description: Where the driver's C(options nvidia) conf files are.
    type: path
    default: /etc/modprobe.d
  include_dirs:
    description: Where the rdma-core headers are looked for (C(infiniband/mlx5_api.h), C(infiniband/mlx5dv.h)).
    type: list
    elements: path
    default: [/usr/include]
  cuda_home:
    description: The CUDA toolkit to check.
    type: path
    default: /usr/local/cuda
  deepep_prefix:
    description: Prefix the deepep, nvshmem_ibgda and gdrcopy roles install under.
    type: path
    default: /opt/deepep
  env_script:
    description: The env script DeepEP processes source; empty for I(deepep_prefix)/env.sh.
    type: str
    default: ""
  nvshmem_root:
    description:
      - NVSHMEM install to check; empty for the one DeepEP's stamp records, else I(nvshmem_prefix)/current.
    type: str
    default: ""
  nvshmem_prefix:
    description: The nvshmem_ibgda role's prefix (its C(nvshmem_ibgda_prefix)); empty for I(deepep_prefix)/nvshmem.
    type: str
    default: ""
  gdrcopy_root:
    description: GDRCopy install to check; empty for I(gdrcopy_prefix)/current.
    type: str
    default: ""
  gdrcopy_prefix:
    description: The gdrcopy role's prefix (its C(gdrcopy_prefix)); empty for I(deepep_prefix)/gdrcopy.
    type: str
    default: ""
  python:
    description:
      - Interpreter with torch (and deep_ep) to probe; empty for I(deepep_prefix)/venv/bin/python when it exists.
      - It imports torch and deep_ep from C(/) with the env script's variables, as a DeepEP process would.
    type: str
    default: ""
  probe_cache_dir:
    description:
      - >-
        Where the interpreter probe's answers are kept (see M(moe_infra.deepep.torch_stack_info)'s C(cache_dir)):
        while the interpreter's installed packages, the env script's paths and variables are unchanged, the
        answer is read instead of importing torch again. Empty probes every time.
    type: path
    default: ""
  probe_user:
    description:
      - Who runs the interpreter probe (it imports the build's C(deep_ep) from the env script's C(PYTHONPATH)) - this
        unprivileged user (the build user), or C(nobody) where it is not on the node, never root. Empty runs it as
        the module's user.
    type: str
    default: deepep-build
  build_user:
    description:
      - The build user the layers unpack archives as (C(deepep_build_user)); empty when root unpacks them, which
        needs this Python's tarfile data filter (C(PYTAR)).
    type: str
    default: deepep-build
  log_dirs:
    description: Directories whose C(*.log) files are matched against the known messages; empty for
      I(deepep_prefix)/reports.
    type: list
    elements: path
    default: []
  gdrcopy_kernel_module:
    description: Whether the gdrdrv kernel module is wanted here (the gdrcopy role's variable).
    type: bool
    default: false
  nvshmem_method:
    description: How the nvshmem_ibgda role installs NVSHMEM (its C(nvshmem_ibgda_method)); C(source) needs the rdma-core
      headers (KF11).
    type: str
    choices: [wheel, source]
    default: wheel
  deepep_version:
    description: DeepEP generation configured (v1 or v2); empty for the one DeepEP's stamp records.
    type: str
    default: ""
  cuda_version:
    description:
      - The CUDA toolkit release the cuda layer installs (its C(cuda_version)); with the one on the node it sets the
        driver branch the C(DRIVER) check asks for (R580 for CUDA 13). Empty, the node's toolkit alone.
    type: str
    default: ""
  nvidia_driver_branch:
    description:
      - The driver branch the nvidia_driver layer installs in this run (its C(nvidia_driver_branch) when
        C(nvidia_driver_install) is on); empty, none. With O(preflight_only) and no driver loaded, the C(DRIVER)
        check then reports the plan instead of stopping the node.
    type: str
    default: ""
  deepep_nvshmem_35_fix:
    description: "Whether the DeepEP ref carries PR #564/#696 (the deepep role's variable)."
    type: bool
    default: true
  checks:
    description: Ids of the checks to run (e.g. C([KF10, KF33, KF35])); empty for all.
    type: list
    elements: str
    default: []
  preflight_only:
    description:
      - Run only the checks for problems no layer of the site playbook fixes (gdrdrv without kernel source,
        SR-IOV VFs, gdrdrv in a container; KF30 is the fleet filter's), so provisioning can stop before any change.
    type: bool
    default: false
author:
  - moe_infra maintainers (@moe-infra)
"""

EXAMPLES = r"""
- name: Diagnose this node
  moe_infra.deepep.deepep_doctor:
  register: doctor

- name: Show the problems
  ansible.builtin.debug:
    msg: "{{ doctor.findings | selectattr('status', 'eq', 'problem') | list }}"
"""

RETURN = r"""
findings:
  description: One entry per check, in id order.
  returned: always
  type: list
  elements: dict
  sample:
    - {id: KF20, title: PeerMappingOverride not live, status: not_applicable,
       evidence: 'RegistryDwords: ""; no RDMA HCA, so not required', fix: "", detect: state}
summary:
  description: How many checks ended in each status.
  returned: always
  type: dict
  sample: {ok: 12, problem: 1, not_applicable: 22, unknown: 3}
node:
  description: What the fleet checks need, C(hostname), C(gpu_count), C(hca_count).
  returned: always
  type: dict
evidence:
  description: Everything the checks read (for the JSON report).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import BY_ID, CHECKS, diagnose, summary
from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor_evidence import OPTIONS, gather


def main():
    module = AnsibleModule(
        argument_spec=dict(
            OPTIONS,
            checks=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    if module.params["deepep_version"] not in ("", "v1", "v2"):
        module.fail_json(msg="deepep_version: %r is neither v1 nor v2 (or empty for the built one)"
                             % module.params["deepep_version"])
    unknown = sorted(set(module.params["checks"]) - set(BY_ID))
    if unknown:
        module.fail_json(msg="checks: unknown id(s) %s; known: %s" % (", ".join(unknown), ", ".join(BY_ID)))
    only = module.params["checks"]
    if module.params["preflight_only"]:
        only = [check.id for check in CHECKS if check.preflight and (not only or check.id in only)]
    evidence = gather(module, module.params, probe=not module.params["preflight_only"])
    findings = diagnose(evidence, only)
    node = {"hostname": evidence["hostname"], "gpu_count": evidence["gpu_count"], "hca_count": len(evidence["hcas"])}
    evidence["logs"] = sorted(evidence["logs"])  # the paths; the text stays on the node
    module.exit_json(changed=False, findings=findings, summary=summary(findings), node=node, evidence=evidence)


if __name__ == "__main__":
    main()
