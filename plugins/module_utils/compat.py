# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""DeepEP build compatibility gate (REFERENCE.md section 3): problems found before building, and the
build environment the versions call for. Pure: takes versions, returns findings."""

from __future__ import annotations

import re

from ansible_collections.moe_infra.deepep.plugins.module_utils.cuda_arch import ArchError, arch_list

V2_MIN_TORCH = (2, 10)
V2_MIN_NCCL = (2, 30, 4)
NVSHMEM_RC_QP_CHANGE = (3, 5, 19)
NVSHMEM_HCA_PREFIX_SINCE = (3, 4, 5)


def version_tuple(text):
    """'2.11.0+cu130' -> (2, 11, 0); 'v3.5.19-1' -> (3, 5, 19); None when there is no version."""
    match = re.search(r"(\d+(?:\.\d+)+)", str(text or ""))
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def _fmt(version):
    return ".".join(str(part) for part in version)


def _problem(kf, message, fix):
    return {"id": kf, "message": message, "fix": fix}


def check(facts):
    """facts: deepep_version ('v1'|'v2'), torch, nccl, cuda_release, cccl_include_dir, gpu_compute_caps,
    arch_list (may be empty: from the GPUs), nvshmem_version, nvshmem_35_fix (bool), hca_families.

    Returns {problems: [...], arch_list, build_env: {...}}.
    """
    problems = []
    env = {}
    version = facts.get("deepep_version")
    torch = version_tuple(facts.get("torch"))
    nccl = version_tuple(facts.get("nccl"))
    cuda = version_tuple(facts.get("cuda_release"))
    nvshmem = version_tuple(facts.get("nvshmem_version"))

    if version not in ("v1", "v2"):
        problems.append(_problem(None, "deepep_version %r is neither v1 nor v2" % (version,),
                                 "set deepep_version to v1 (NVSHMEM, PR #466) or v2 (NCCL Gin)"))
    if torch is None:
        problems.append(_problem(None, "torch is not importable by the build interpreter",
                                 "install the pinned torch or point deepep_python at the interpreter that has it"))

    if version == "v2":
        if torch is not None and torch[:2] < V2_MIN_TORCH:
            problems.append(_problem(None, "DeepEP V2 needs torch >= %s; found %s" % (_fmt(V2_MIN_TORCH), facts["torch"]),
                                     "pin torch >= 2.10 or set deepep_version: v1"))
        if nccl is None or nccl < V2_MIN_NCCL:
            problems.append(_problem(
                "KF31", "DeepEP V2 needs NCCL >= %s; found %s" % (_fmt(V2_MIN_NCCL), facts.get("nccl") or "none"),
                "install nvidia-nccl-cu%s >= 2.30.4 into the interpreter, or set deepep_version: v1"
                % (cuda[0] if cuda else "XX")))

    if cuda is not None and cuda[0] >= 13 and version == "v1":
        if facts.get("cccl_include_dir"):
            env["CPATH"] = facts["cccl_include_dir"]
        else:
            problems.append(_problem("KF21", "CUDA %s without include/cccl: cuda/std/tuple will not be found"
                                     % facts.get("cuda_release"), "install the full CUDA 13 toolkit (cccl headers)"))

    gpu_caps = sorted(set(facts.get("gpu_compute_caps") or []))
    requested = facts.get("arch_list") or []
    try:
        arches = arch_list(requested) if requested else arch_list(gpu_caps) if gpu_caps else []
    except ArchError as exc:
        problems.append(_problem("KF07", str(exc), "set deepep_arch_list to the GPUs' compute capabilities"))
        arches = []
    if not arches:
        problems.append(_problem("KF07", "no CUDA arch to build for: the GPUs' compute capability is unknown",
                                 "set deepep_arch_list, e.g. ['9.0']"))
    elif gpu_caps and not set(gpu_caps) <= set(arches):
        problems.append(_problem("KF07", "arch list %s does not cover the GPUs here (%s): 'named symbol not found' "
                                 "at run time" % (";".join(arches), ", ".join(gpu_caps)),
                                 "set deepep_arch_list to %s or leave it empty" % gpu_caps))
    if arches:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(arches)
        if arches != ["9.0"]:
            env["DISABLE_AGGRESSIVE_PTX_INSTRS"] = "1"
        if any(version_tuple(a) < (9, 0) for a in arches):
            env["DISABLE_SM90_FEATURES"] = "1"

    if version == "v1" and nvshmem is not None and nvshmem >= NVSHMEM_RC_QP_CHANGE and not facts.get("nvshmem_35_fix"):
        problems.append(_problem(
            "KF25", "NVSHMEM %s changed the RC-QP layout; this DeepEP V1 ref lacks PR #564/#696 and hangs on the "
                    "first internode dispatch" % facts.get("nvshmem_version"),
            "use a DeepEP ref with PR #564 (e.g. PR #466 head) and set deepep_nvshmem_35_fix: true, or NVSHMEM <= 3.4.5"))
    families = set(facts.get("hca_families") or [])
    if nvshmem is not None and nvshmem < NVSHMEM_HCA_PREFIX_SINCE and families - {"mlx5"}:
        found = ", ".join(sorted(families))
        problems.append(_problem(
            "KF24", "NVSHMEM %s accepts only mlx5* HCA names; found %s" % (facts.get("nvshmem_version"), found),
            "install DOCA-OFED (renames HCAs to mlx5_*) or use NVSHMEM >= 3.4.5 with NVSHMEM_HCA_PREFIX"))
    return {"problems": problems, "arch_list": arches, "build_env": env}
