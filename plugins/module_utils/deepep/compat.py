# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""DeepEP build compatibility gate (docs/compatibility.md): problems found before building, and the
build environment the versions call for. Pure: takes versions, returns findings."""

from __future__ import annotations

import os

import re

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.cuda_arch import ArchError, arch_list

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
    """facts: deepep_version ('v1'|'v2'), torch, torch_cuda (CUDA torch was built with), nccl, cuda_release, cccl_include_dir, gpu_compute_caps,
    arch_list (may be empty: from the GPUs), nvshmem_version, nvshmem_35_fix (bool), hca_families;
    nccl_wheel_half_installed: the interpreter's nccl_wheel when a pip changing it was stopped half-way (torch then
    cannot be imported), else None; nccl_layer_ahead: whether this run's nccl layer, still to come, installs that
    wheel again (the deepep role checks torch again after it).

    Returns {problems: [...], arch_list, build_env: {...}, message}: message says every problem with its fix in one
    line ('' when there is none).
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
    half = facts.get("nccl_wheel_half_installed")
    if torch is None and half and not facts.get("nccl_layer_ahead"):
        problems.append(_problem(
            None, "torch cannot load its own NCCL in the build interpreter: its NCCL wheel %s is half-installed (a pip "
                  "changing it was stopped before it finished; %s %s)"
                  % (half["package"], "it was replacing" if half.get("pip_stash") else "its metadata names"
                     if half.get("cut_short") and half["upgraded_from"] == half.get("version") else "torch came with",
                     half["upgraded_from"]),
            "run again with the nccl layer (without --tags, or with --tags nccl): it installs the wheel again "
            "(DeepEP V1: %s==%s; V2: nccl_version, with nccl_method wheel or source)"
            % (half["package"], half["upgraded_from"])))
    elif torch is None and not half:
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

    torch_cuda = version_tuple(facts.get("torch_cuda"))
    if torch_cuda is not None and cuda is not None and torch_cuda[0] != cuda[0]:
        problems.append(_problem(
            None, "torch %s is built for CUDA %s but the toolkit is CUDA %s: torch's extension build refuses "
                  "mismatched major versions" % (facts.get("torch"), facts.get("torch_cuda"), facts.get("cuda_release")),
            "pin a torch built for CUDA %d (index .../cu%d*) or point deepep_cuda_home at a CUDA %d toolkit"
            % (cuda[0], cuda[0], torch_cuda[0])))

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
    message = ("DeepEP %s cannot be built here: %s" % (version, " ".join(
        "[%s] %s. Fix: %s." % (problem["id"] or "input", problem["message"], problem["fix"]) for problem in problems))
        if problems else "")
    return {"problems": problems, "arch_list": arches, "build_env": env, "message": message}


LOCAL_CUDA_TAG_RE = re.compile(r"\+(cu\d+|cpu)$")
INDEX_TAG_RE = re.compile(r"/(cu\d+|cpu)/?$")


def torch_pin_problems(torch_version, index_url, pip_extra_args=""):
    """Problems with a torch pin the deepep role is to install (deepep_torch_version / deepep_torch_index_url).

    The pin needs an index serving its CUDA build: PyPI's default torch is built for one CUDA release only.
    """
    problems = []
    text = str(torch_version or "").strip()
    if not text:
        return [_problem(None, "deepep_python is empty, so the role installs torch, but deepep_torch_version is "
                               "empty", "set deepep_torch_version (e.g. 2.9.1+cu129) or deepep_python")]
    if not re.match(r"^\d+\.\d+(\.\d+)?([a-z0-9.]*)?(\+[A-Za-z0-9.]+)?$", text):
        return [_problem(None, "deepep_torch_version %r is not a version" % text,
                         "set it like 2.9.1+cu129 (version and CUDA tag)")]
    tag = LOCAL_CUDA_TAG_RE.search(text)
    index = str(index_url or "").strip()
    offline = "--find-links" in str(pip_extra_args or "") or "-f " in str(pip_extra_args or "")
    if not index and not offline:
        problems.append(_problem(
            None, "torch %s pinned without an index for its CUDA build" % text,
            "set deepep_torch_index_url, e.g. https://download.pytorch.org/whl/%s"
            % (tag.group(1) if tag else "cu129")))
    index_tag = INDEX_TAG_RE.search(index)
    if tag and index_tag and tag.group(1) != index_tag.group(1):
        problems.append(_problem(
            None, "torch %s is a %s build but deepep_torch_index_url serves %s (%s)"
                  % (text, tag.group(1), index_tag.group(1), index),
            "use https://download.pytorch.org/whl/%s or change the pin" % tag.group(1)))
    return problems


def node_nccl(stack):
    """{lib, version} when the libnccl torch's import loaded is not the interpreter's nvidia/nccl one (a node
    library that LD_LIBRARY_PATH or ld.so.conf puts first), else None."""
    torch = stack.get("torch") or {}
    lib = torch.get("nccl_lib")
    wheel_dir = (stack.get("nccl_wheel") or {}).get("dir")
    if not lib or not wheel_dir:
        return None
    # Its real path too: the loader names the library by it, and site-packages may be reached through a symlink.
    real_dir = (stack.get("nccl_wheel") or {}).get("real_dir")
    if any(os.path.normpath(lib).startswith(os.path.normpath(path) + os.sep) for path in (wheel_dir, real_dir) if path):
        return None
    return {"lib": lib, "version": torch.get("nccl")}
