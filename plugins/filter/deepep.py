# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Pure filters of the build layers: CUDA arch strings, GPU-to-NIC mapping strings, the DeepEP inputs and env, the
NVSHMEM and NCCL source plans, the build commands. No I/O.

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def deepep_build_commands(component, **options):
    """'gdrcopy' or 'deepep' -> {build, verify}: the commands source_build runs, every site value quoted."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build import build_commands

    builders = {"gdrcopy": build_commands.gdrcopy_commands, "deepep": build_commands.deepep_commands}
    if component not in builders:
        raise AnsibleFilterError("_deepep_build_commands: %r is not one of %s" % (component, ", ".join(builders)))
    try:
        return builders[component](**options)
    except (build_commands.CommandError, TypeError) as exc:
        raise AnsibleFilterError("_deepep_build_commands(%s): %s" % (component, exc))


def _arch(function_name, values):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.node import cuda_arch

    try:
        return getattr(cuda_arch, function_name)(values)
    except cuda_arch.ArchError as exc:
        raise AnsibleFilterError(str(exc))


def compute_cap(value):
    return _arch("compute_cap_of", value)


def torch_arch_list(values):
    return _arch("torch_cuda_arch_list", values)


def cmake_arch(values):
    return _arch("cmake_cuda_architectures", values)


def _check_mapping(mapping):
    if not isinstance(mapping, list) or not all(
            isinstance(entry, dict) and {"gpu", "hca", "port"} <= set(entry) for entry in mapping):
        raise AnsibleFilterError(
            "expected a list of {gpu, hca, port} entries (gpu_nic_topology_info's mapping), got %r" % (mapping,))
    return mapping


def deepep_hca_mapping(mapping):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.node.topology import deepep_mapping_string

    return deepep_mapping_string(_check_mapping(mapping))


def nvshmem_hca_list_filter(mapping):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.node.topology import nvshmem_hca_list

    return nvshmem_hca_list(_check_mapping(mapping))


def deepep_compat(facts):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import check

    if not isinstance(facts, dict):
        raise AnsibleFilterError("deepep_compat expects a dict of versions, got %r" % (facts,))
    return check(facts)


NODE_KEYS = ("gpu", "rdma", "topology", "driver_params", "cuda")


def _check_node(node):
    if not isinstance(node, dict) or not all(key in node for key in NODE_KEYS):
        raise AnsibleFilterError("expected a dict with the discovery results %s (the preflight role's "
                                 "ansible_facts.deepep), got keys %r" % (", ".join(NODE_KEYS), sorted(node or {})))
    return node


def deepep_node_report(node, plan=None):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.layer_plan import layer_plan, report_lines

    node = _check_node(node)
    return report_lines(node, plan if plan is not None else layer_plan(node))


def deepep_env(node, pythonpath="", ld_preload="", extra=None, force_ibgda=False, ld_library_path="",
               jit_cache_dir="", generation="v1", legacy_kernels=False, gin="auto"):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep import envscript

    node = _check_node(node)
    if generation not in ("v1", "v2"):
        raise AnsibleFilterError("deepep_env: generation %r is not v1 or v2 (deepep_version)" % (generation,))
    try:
        result = envscript.build_env(node, pythonpath, ld_preload, extra, force_ibgda, ld_library_path,
                                     jit_cache_dir, generation, bool(legacy_kernels), gin)
    except envscript.EnvError as exc:
        raise AnsibleFilterError(str(exc))
    result["lines"] = envscript.render_lines(result)
    result["process_env"] = envscript.process_env(result)
    return result


def deepep_env_script_text(env, host, script, generation="v1", legacy_kernels=False):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep import envscript

    if not isinstance(env, dict) or "env" not in env or "path_env" not in env:
        raise AnsibleFilterError("_deepep_env_script_text expects the result of moe_infra.deepep.deepep_env, got %r"
                                 % (env,))
    return envscript.script_text(env, host, script, generation, bool(legacy_kernels))


def deepep_inputs(node, settings, cuda_probed=None, nccl_planned=None):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep import build_inputs

    if not isinstance(settings, dict):
        raise AnsibleFilterError("_deepep_inputs expects a dict of the deepep role's settings, got %r" % (settings,))
    try:
        return build_inputs.work_out(node, settings, cuda_probed if isinstance(cuda_probed, dict) else None,
                                     nccl_planned)
    except build_inputs.InputsError as exc:
        raise AnsibleFilterError("_deepep_inputs: %s" % exc)


def deepep_tests(version, warmup=True, warmup_args=None, elastic_ep_args=None, elastic_ep_thresholds=None,
                 intranode_thresholds=None, low_latency_thresholds=None):
    """The tests the deepep role runs for a version, in order: [{test, args, thresholds}]. V1: intranode and
    low-latency. V2: the JIT warm-up (unless turned off), then tests/elastic's two."""
    if version == "v1":
        return [{"test": "intranode", "args": [], "thresholds": intranode_thresholds or {}},
                {"test": "low_latency", "args": [], "thresholds": low_latency_thresholds or {}}]
    if version != "v2":
        raise AnsibleFilterError("_deepep_tests: expected the DeepEP version v1 or v2, got %r" % (version,))
    tests = [{"test": "jit_warmup", "args": list(warmup_args or []), "thresholds": {}}] if warmup else []
    return tests + [{"test": "elastic_ep", "args": list(elastic_ep_args or []), "thresholds": elastic_ep_thresholds or {}},
                    {"test": "elastic_barrier", "args": [], "thresholds": {}}]


def deepep_jit_cache_dirs(root, group="", reading=None):
    """V2's JIT cache directories the deepep role still has to create or set, from the node's reading of them."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.jit_cache import directories_to_set

    if not isinstance(reading, Mapping) and reading is not None:
        raise AnsibleFilterError("_deepep_jit_cache_dirs: the reading must be a mapping of path to {mode, group}, got %r"
                                 % (reading,))
    return directories_to_set(root, group or "", reading)


def deepep_torch_pin(torch_version, index_url="", pip_extra_args=""):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import torch_pin_problems

    return torch_pin_problems(torch_version, index_url, pip_extra_args)


# Where cmake and the build look after the directories a role puts first (a pip-installed cmake's bin).
SYSTEM_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]


def nvshmem_source_tool_problems(compute_caps, found, cuda_home="", build_path=None, rdma_include_dir=""):
    """What stops a source build on this node before it starts, one sentence each naming what to install or set:
    no arch list, no nvcc, no cmake, no rdma-core mlx5 header (cmake would turn IBGDA off without a word, KF11)."""
    from ansible.module_utils.parsing.convert_bool import boolean

    found = dict((name, boolean(found.get(name, False), strict=False)) for name in ("nvcc", "cmake", "mlx5dv_header"))
    problems = []
    if not compute_caps:
        problems.append("No GPU architecture to build for: the node's reading has no GPUs (the preflight role reads "
                        "them; playbooks/deepep.yml runs it) and nvshmem_ibgda_arch_list is empty; set it, e.g. "
                        "['9.0'].")
    if not found["nvcc"]:
        problems.append("No nvcc under %s or on PATH; install the CUDA toolkit (cuda role) or set "
                        "nvshmem_ibgda_cuda_home." % cuda_home)
    if not found["cmake"]:
        problems.append("cmake (>= 3.19) not found on PATH%s: install it (apt-get install cmake, or pip install cmake "
                        "into a venv and add its bin to nvshmem_ibgda_build_path)."
                        % (" or in " + ", ".join(build_path) if build_path else ""))
    if not found["mlx5dv_header"]:
        problems.append("[KF11] %s/infiniband/mlx5dv.h not found: NVSHMEM's IBGDA transport needs rdma-core's "
                        "headers. Install libibverbs-dev and librdmacm-dev (or DOCA-OFED), set "
                        "nvshmem_ibgda_rdma_include_dir, or use nvshmem_ibgda_method: wheel." % rdma_include_dir)
    return problems


def nvshmem_source_plan(source, compute_caps, version=None, gdrcopy_root="", cmake_options=None, jobs=0,
                        patch_dir="", cuda=None, cuda_home="", build_path=None, found=None, rdma_include_dir=""):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build import nvshmem

    if cuda is not None and not isinstance(cuda, Mapping):
        raise AnsibleFilterError("_nvshmem_source_plan: cuda: expected the CUDA toolkit's reading (dict), got %r"
                                 % (cuda,))
    if found is not None:
        if not isinstance(found, Mapping):
            raise AnsibleFilterError("_nvshmem_source_plan: found: expected {nvcc, cmake, mlx5dv_header} (dict), got %r"
                                     % (found,))
        problems = nvshmem_source_tool_problems(compute_caps, found, cuda_home, build_path, rdma_include_dir)
        if problems:
            return {"problems": problems}
    try:
        plan = nvshmem.build_plan(source, compute_caps, version, gdrcopy_root, cmake_options, jobs)
    except nvshmem.PlanError as exc:
        raise AnsibleFilterError(str(exc))
    cuda = cuda or {}
    # The toolkit found wins over the role's setting; build_path (if any) goes before the system's PATH.
    plan["environment"] = dict({"CUDA_HOME": cuda.get("cuda_home") or cuda_home},
                               **({"PATH": ":".join(list(build_path) + SYSTEM_PATH)} if build_path else {}))
    # What the fingerprint is taken over besides the source, the commands and the patches.
    plan["inputs"] = {"version": plan["version"], "cuda": cuda.get("full_version") or cuda.get("release"),
                      "gdrcopy_root": gdrcopy_root}
    plan["patches"] = [dict(patch, label="%s (%s: %s)" % (patch["name"], patch["id"], patch["why"]),
                            **({"path": "%s/%s" % (patch_dir.rstrip("/"), patch["name"])} if patch_dir else {}))
                       for patch in plan["patches"]]
    plan["problems"] = []
    return plan


def nvshmem_source_version(source, version=None):
    """The NVSHMEM version a source build gives: the one declared (version), else read from the archive name or git
    ref; '' when neither says."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nvshmem import source_version

    return source_version(version) if version else (source_version(source) or "")


def nccl_source_plan(source, compute_caps, python, version=None, jobs=0):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build import nccl

    try:
        return nccl.build_plan(source, compute_caps, python, version, jobs)
    except nccl.PlanError as exc:
        raise AnsibleFilterError(str(exc))


def nccl_planned_version(settings):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nccl import planned_version

    if not isinstance(settings, dict):
        raise AnsibleFilterError("_nccl_planned_version expects a dict of nccl_* variables, got %r" % (settings,))
    return planned_version(settings)


class FilterModule(object):
    def filters(self):
        return {
            "compute_cap": compute_cap,
            "torch_arch_list": torch_arch_list,
            "cmake_arch": cmake_arch,
            "deepep_hca_mapping": deepep_hca_mapping,
            "nvshmem_hca_list": nvshmem_hca_list_filter,
            "deepep_compat": deepep_compat,
            "deepep_env": deepep_env,
            "_deepep_env_script_text": deepep_env_script_text,
            "_deepep_node_report": deepep_node_report,
            "_nvshmem_source_plan": nvshmem_source_plan,
            "_nvshmem_source_version": nvshmem_source_version,
            "_nccl_source_plan": nccl_source_plan,
            "_nccl_planned_version": nccl_planned_version,
            "_deepep_torch_pin": deepep_torch_pin,
            "_deepep_inputs": deepep_inputs,
            "_deepep_tests": deepep_tests,
            "_deepep_jit_cache_dirs": deepep_jit_cache_dirs,
            "_deepep_build_commands": deepep_build_commands,
        }
