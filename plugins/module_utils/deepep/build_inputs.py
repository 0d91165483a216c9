# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""DeepEP's inputs on one node, worked out once from the node's reading (ansible_facts.deepep): what stops a build
(no reading, a given interpreter that does not exist, V1 without an NVSHMEM, the compatibility rules) and the options
the fan-out builds with.

The deepep role's `_deepep_inputs` filter calls ``work_out`` with the role's settings; its input check and its build
take the answer whole, instead of rendering a chain of derived variables again for each reference."""

from __future__ import annotations

import posixpath

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_commands import deepep_commands
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import check

# The role's settings work_out reads (the deepep role's __deepep_settings, one entry per role variable).
SETTINGS = ("version", "python", "given_python", "interpreter_known", "cuda_known", "prefix", "cuda_home", "arch_list",
            "nvshmem_dir", "nvshmem_version", "nvshmem_planned", "nvshmem_35_fix", "src", "git_url", "git_ref",
            "build_user", "build_jobs", "cxx", "gcc", "nccl_ahead")

NO_READING = "Run the preflight role first (playbooks/deepep.yml and playbooks/site.yml do)."


class InputsError(Exception):
    pass


def _truthy(value):
    return str(value).strip().lower() in ("true", "yes", "1", "on", "y", "t")


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def work_out(node, settings, cuda_probed=None, nccl_planned=None):
    """node: ansible_facts.deepep (None before the preflight role); settings: SETTINGS (python: the build
    interpreter, the given deepep_python or the role's venv's; interpreter_known, cuda_known: whether the reading
    is of that interpreter, as the role reads it, and of the toolkit at cuda_home; gcc: the compiler version this
    run read; nccl_ahead: whether the nccl layer runs after this check in this run); cuda_probed: the role's own
    toolkit reading (deepep_facts, gather_subset cuda), used when the reading's toolkit is another;
    nccl_planned: the NCCL version the nccl layer of this run will provide (V2), else None.

    Returns {python_exists, problems: [one sentence each, with its fix], gate: deepep_compat's answer (None without
    a reading or an interpreter), build: source_build's options (None likewise)}."""
    missing = [key for key in SETTINGS if key not in (settings or {})]
    if missing:
        raise InputsError("settings lack %s" % ", ".join(missing))
    python = settings["python"]
    answer = {"python_exists": False, "problems": [], "gate": None, "build": None}
    if not isinstance(node, dict):
        answer["problems"].append(NO_READING)
        return answer
    stack = node.get("interpreter") or {}
    answer["python_exists"] = bool(stack.get("exists"))
    if not answer["python_exists"]:
        if settings["given_python"]:
            answer["problems"].append(
                "deepep_python %s does not exist; point it at the interpreter with the pinned torch, or leave it empty "
                "for a venv the role owns." % settings["given_python"])
        # The role's venv is not there yet (check mode on a fresh node): nothing is checked against it.
        return answer

    version = settings["version"]
    wheel_nvshmem = (stack.get("nvshmem_wheel") if _truthy(settings["interpreter_known"]) else None) or {}
    nvshmem_dir = settings["nvshmem_dir"] or wheel_nvshmem.get("dir") or ""
    nvshmem_version = str(settings["nvshmem_version"] or settings["nvshmem_planned"]
                          or wheel_nvshmem.get("version") or "").strip()
    cuda = (node.get("cuda") if _truthy(settings["cuda_known"]) else cuda_probed) or {}
    torch = stack.get("torch") or {}
    nccl_wheel = stack.get("nccl_wheel")
    gate = check({
        "deepep_version": version,
        "torch": torch.get("version"),
        "torch_cuda": torch.get("cuda"),
        "nccl": nccl_planned or torch.get("nccl") or (nccl_wheel.get("version") if nccl_wheel else None),
        "cuda_release": cuda.get("release"),
        "cccl_include_dir": cuda.get("cccl_include_dir"),
        "gpu_compute_caps": (node.get("gpu") or {}).get("compute_caps") or [],
        "arch_list": settings["arch_list"] or [],
        "nvshmem_version": nvshmem_version if version == "v1" else None,
        "nvshmem_35_fix": _truthy(settings["nvshmem_35_fix"]),
        "hca_families": sorted(set(hca.get("family") for hca in (node.get("rdma") or {}).get("hcas") or [])),
        "nccl_wheel_half_installed": nccl_wheel if (nccl_wheel or {}).get("half_installed") else None,
        # V1's nccl layer installs the version torch came with again; V2's installs or builds its NCCL (a method
        # that provides one: nccl_planned).
        "nccl_layer_ahead": _truthy(settings["nccl_ahead"]) and (version == "v1" or bool(nccl_planned)),
    })
    answer["gate"] = gate
    if version == "v1" and not nvshmem_dir and not settings["nvshmem_planned"]:
        answer["problems"].append(
            "DeepEP V1 builds against NVSHMEM and %s has no nvidia-nvshmem wheel: run the nvshmem_ibgda role "
            "(playbooks/deepep.yml does) or set deepep_nvshmem_dir." % python)
    elif gate["problems"]:
        answer["problems"].append(gate["message"])

    # setup.py finds the interpreter's nvidia-nvshmem wheel itself (and its versioned soname); NVSHMEM_DIR is only
    # for an NVSHMEM installed elsewhere.
    own_wheel = stack.get("nvshmem_wheel")
    nvshmem_is_wheel = bool(own_wheel) and nvshmem_dir == own_wheel.get("dir")
    environment = dict(gate["build_env"], CUDA_HOME=cuda.get("cuda_home") or settings["cuda_home"])
    if version == "v1" and not nvshmem_is_wheel:
        environment["NVSHMEM_DIR"] = nvshmem_dir
    if _int(settings["build_jobs"]) > 0:
        environment["MAX_JOBS"] = str(settings["build_jobs"])
    if settings["cxx"]:
        environment["CXX"] = settings["cxx"]
    commands = deepep_commands(python=python, version=version) if version in ("v1", "v2") else {}
    archive = settings["src"]
    answer["build"] = {
        "name": "deepep",
        "src": "%s/sources/%s" % (settings["prefix"], posixpath.basename(archive)) if archive else "",
        # The archive stays on the controller unless a build needs it (its digest is taken there).
        "controller_src": archive,
        # What the import checks of verify.yml passed for on this node (not part of an exported build).
        "read_files": ["imports.node-record"],
        "git_url": "" if archive else settings["git_url"],
        "git_ref": "" if archive else settings["git_ref"],
        "prefix": "%s/deepep" % settings["prefix"],
        "build_user": settings["build_user"],
        # DeepEP's own install.sh step, bdist_wheel; what it built is copied in place for the tests and the env
        # script.
        "build_command": commands.get("build", ""),
        "verify_command": commands.get("verify", ""),
        "environment": environment,
        # A second C++ runtime inside the extension (a compiler with only libstdc++.a) never goes live.
        "cxx_runtime_check": True,
        "inputs": {
            "deepep_version": version,
            "torch": torch.get("version"),
            "torch_cuda": torch.get("cuda"),
            "python": stack.get("python_version"),
            "cuda": cuda.get("full_version") or cuda.get("release"),
            "gcc": str(settings["gcc"] or "").strip(),
            "nvshmem": nvshmem_version,
            "nvshmem_dir": nvshmem_dir,
            "arch_list": gate["arch_list"],
        },
        # An import of the live build that fails on an undefined symbol means torch moved under it (KF18): that
        # build is made again. Another one (V1's kept build, asked for after V2) is switched to as usual.
        "rebuild_current": bool((stack.get("deep_ep") or {}).get("undefined_symbol")),
    }
    return answer
