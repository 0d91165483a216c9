# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Pure filters for the system layers and the reboot contract (module_utils/system/system_layers.py).

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _dict(value, what):
    if not isinstance(value, dict):
        raise AnsibleFilterError("expected %s (a dict), got %r" % (what, value))
    return value


def nvidia_peermapping_decision(params, hca_count=0, force=False, report_only=False, driver_reboot_pending=False,
                                conf_file="", settings=None):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    return system_layers.peermapping_decision(
        int(hca_count), _dict(params, "nvidia_driver_params' result"), _truth(force), _truth(report_only),
        _truth(driver_reboot_pending), str(conf_file or ""), [str(name) for name in settings or []])


def nvidia_driver_decision(gpu, params, cuda_releases=None, install=False, branch="580", report_only=False):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    try:
        return system_layers.driver_decision(
            _dict(gpu, "the GPU reading (gpu of deepep_facts)"), _dict(params, "nvidia_driver_params' result"),
            [str(r) for r in cuda_releases or [] if r], _truth(install), str(branch or ""), _truth(report_only))
    except system_layers.DecisionError as exc:
        raise AnsibleFilterError(str(exc))


def nvidia_driver_params_subset(params, registry_dwords=None, module_params=None):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.node.nvidia_params import desired_settings, subset_driver_params

    params = _dict(params, "nvidia_driver_params' result (state=query)")
    wanted = {}
    for option, values in (("registry_dwords", registry_dwords), ("module_params", module_params)):
        wanted[option], error = desired_settings(option, _dict(values or {}, option))
        if error:
            raise AnsibleFilterError(error)
    return subset_driver_params(params, wanted["registry_dwords"], wanted["module_params"])


def doca_ofed_decision(rdma, policy="auto"):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    try:
        return system_layers.doca_decision(_dict(rdma, "the RDMA reading (rdma of deepep_facts)"), policy)
    except system_layers.DecisionError as exc:
        raise AnsibleFilterError(str(exc))


def doca_ofed_state(rdma):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    rdma = _dict(rdma, "the RDMA reading (rdma of deepep_facts)")
    return {"reboot_reason": system_layers.doca_reboot_reason(rdma), "problems": system_layers.doca_verify_problems(rdma)}


def dkms_missing(status_output, kernel, modules):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    return system_layers.dkms_problems(status_output, kernel, list(modules or []))


def deepep_reboot_plan(reasons, policy="auto", rebooted=False):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    try:
        return system_layers.reboot_plan(policy, _dict(reasons or {}, "{layer: reason}"), bool(rebooted))
    except system_layers.DecisionError as exc:
        raise AnsibleFilterError(str(exc))


def gdrdrv_blockers(container_markers, nvidia_src_dirs=None, kernel_headers=False):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    return system_layers.gdrdrv_problems(list(container_markers or []), list(nvidia_src_dirs or []), bool(kernel_headers))


def apt_origin(url):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers

    return system_layers.apt_origin(url)


def _truth(value):
    # Nested role defaults may arrive as the strings "True"/"False".
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "yes", "1")


def deepep_build_prerequisites(layers, os_family=""):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.system.prerequisites import prerequisite_packages

    layers = _dict(layers, "{gdrcopy: {build, git}, nvshmem: {build, git}, deepep: {build, git, venv}}")
    unknown = sorted(set(layers) - {"gdrcopy", "nvshmem", "deepep"})
    if unknown:
        raise AnsibleFilterError("_deepep_build_prerequisites: unknown layer(s) %s" % ", ".join(unknown))
    clean = dict((layer, dict((key, _truth(value)) for key, value in _dict(spec, layer).items()))
                 for layer, spec in layers.items())
    return prerequisite_packages(clean, str(os_family or ""))


class FilterModule(object):
    def filters(self):
        return {
            "_nvidia_peermapping_decision": nvidia_peermapping_decision,
            "_nvidia_driver_params_subset": nvidia_driver_params_subset,
            "_nvidia_driver_decision": nvidia_driver_decision,
            "_doca_ofed_decision": doca_ofed_decision,
            "_doca_ofed_state": doca_ofed_state,
            "_dkms_missing": dkms_missing,
            "_apt_origin": apt_origin,
            "_deepep_reboot_plan": deepep_reboot_plan,
            "_gdrdrv_blockers": gdrdrv_blockers,
            "_deepep_build_prerequisites": deepep_build_prerequisites,
        }
