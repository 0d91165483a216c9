# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Validation of the site's variables before any host is touched (kubespray style). Pure: takes the variables
as the play sees them, returns one problem per bad value, each naming the variable, the value and what is
accepted."""

from __future__ import annotations

import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import (
    V2_MIN_NCCL,
    node_nccl,
    torch_pin_problems,
    version_tuple,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.cuda_arch import ArchError, arch_list
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.deepep_output import THRESHOLD_KEYS
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.envscript import NAME_RE, PATH_VARIABLES
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.inputs import (
    GIT_REF_ACCEPTED, GIT_URL_ACCEPTED, PATH_ACCEPTED, PREFIX_ACCEPTED, SAFE_PATH_RE, git_ref_problem,
    git_url_problem, path_problem, prefix_problem)
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nvshmem import OPTION_NAME_RE, defines_data_direct
from ansible_collections.moe_infra.deepep.plugins.module_utils.system.system_layers import DOCA_POLICIES, doca_decision

CHOICES = {
    "deepep_version": ("v1", "v2"),
    "nvshmem_ibgda_method": ("wheel", "source"),
    "nccl_method": ("wheel", "source", "none"),
    "doca_ofed_policy": ("auto", "always", "never"),
    "deepep_reboot": ("auto", "never"),
    "nvidia_peermapping_initramfs": ("auto", "update-initramfs", "dracut", "none"),
}
CUDA_VERSIONS = ("12.9", "13.0")
V2_MIN_TORCH = (2, 10)
# A pinned DeepEP ref: a commit, a release tag, or a pull request head.
COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")
TAG_RE = re.compile(r"^v(\d+)\.\d+(\.\d+)?$")
PULL_RE = re.compile(r"^refs/pull/\d+/head$")


def _problem(var, value, accepted, why=""):
    return {"var": var, "value": value, "accepted": accepted,
            "msg": "%s: %r is not accepted%s; accepted: %s" % (var, value, " (%s)" % why if why else "", accepted)}


def deepep_ref_generation(ref):
    """'v1' / 'v2' for a tag, None for a commit or PR head (generation unknown from the name), False if malformed."""
    ref = str(ref or "").strip()
    tag = TAG_RE.match(ref)
    if tag:
        return "v1" if tag.group(1) == "1" else "v2"
    if COMMIT_RE.match(ref) or PULL_RE.match(ref):
        return None
    return False


SPEC_KEYS = ("type", "elements", "choices", "options")
# The settings role's counts (seconds or tries): its spec says int, these must also be 0 or more.
SITE_COUNTS = ("deepep_lock_timeout", "deepep_network_retries", "deepep_network_retry_delay")
# The settings role's proxies (play-level environment: apt, pip, git and downloads use them), as URLs.
SITE_PROXIES = ("deepep_http_proxy", "deepep_https_proxy")
PROXY_RE = re.compile(r"^https?://[^\s/'\"]+/?$")
NO_PROXY_RE = re.compile(r"^[A-Za-z0-9.*:/_\[\]-]+(,[A-Za-z0-9.*:/_\[\]-]+)*$")


def site_wide_problems(site_vars):
    """What the settings role's spec cannot say of its counts and proxies (0 or more; a URL; a host list)."""
    problems = []
    for var in SITE_COUNTS:
        if var in site_vars and not re.match(r"^\d+$", str(site_vars[var]).strip()):
            problems.append(_problem(var, site_vars[var], "a whole number, 0 or more"))
    for var in SITE_PROXIES:
        value = str(site_vars.get(var) or "").strip()
        if value and not PROXY_RE.match(value):
            problems.append(_problem(var, site_vars[var], "a proxy URL like http://proxy.example.com:3128, or ''"))
    value = str(site_vars.get("deepep_no_proxy") or "").strip()
    if value and not NO_PROXY_RE.match(value):
        problems.append(_problem("deepep_no_proxy", site_vars["deepep_no_proxy"],
                                 "comma-separated hosts, domains or addresses (e.g. localhost,.internal,10.0.0.0/8)"))
    return problems + ssh_path_problems(site_vars)


# The inventories' SSH path (inventories/*/group_vars): ssh runs a ProxyCommand through a shell, so every value
# that goes into it must be a plain name. Checked on the controller before the first connection.
SSH_VIA = ("direct", "iap", "jump")
GCP_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
GCP_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
GCP_PROJECT_RE = re.compile(r"^([a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_HOP = r"([A-Za-z0-9_][A-Za-z0-9._-]*@)?[A-Za-z0-9_][A-Za-z0-9._-]*(:[0-9]{1,5})?"
JUMP_HOST_RE = re.compile(r"^%s(,%s)*$" % (_HOP, _HOP))


def ssh_path_problems(site_vars):
    via = site_vars.get("deepep_ssh_via")
    if via is None:
        return []
    if via not in SSH_VIA:
        return [_problem("deepep_ssh_via", via, " | ".join(SSH_VIA))]
    problems = []
    if via == "jump" and not JUMP_HOST_RE.match(str(site_vars.get("deepep_ssh_jump_host") or "")):
        problems.append(_problem("deepep_ssh_jump_host", site_vars.get("deepep_ssh_jump_host"),
                                 "[user@]host[:port] of the bastion (comma-separated for several hops)",
                                 "deepep_ssh_via is jump"))
    if via == "iap":
        for var, pattern, accepted in (
                ("gcp_name", GCP_NAME_RE, "the instance name (lower-case letters, digits, '-')"),
                ("gcp_zone", GCP_ZONE_RE, "a GCP zone like us-central1-b"),
                ("gcp_project", GCP_PROJECT_RE, "a GCP project id like my-project-123")):
            value = site_vars.get(var)
            if value is None and var == "gcp_name":
                continue  # the inventory host name stands for it (checked by ansible's inventory)
            if not pattern.match(str(value or "")):
                problems.append(_problem(var, value, accepted, "deepep_ssh_via is iap: it goes into ssh's ProxyCommand"))
    return problems


def _validator_spec(option):
    """An argument_specs.yml option as ArgumentSpecValidator takes it: what it accepts, no default or docs."""
    spec = dict((key, option[key]) for key in SPEC_KEYS if key in option)
    if "options" in spec:
        spec["options"] = dict((name, _validator_spec(sub)) for name, sub in (spec["options"] or {}).items())
    return spec


def spec_problems(site_vars, options):
    """Each given variable that a role's argument_specs.yml documents, checked against its type, elements and
    choices before any host is touched (the roles' own check would stop the host only when the role starts,
    after the layers before it changed the node). options: {name: option} merged from the roles' specs."""
    problems = []
    for var in sorted(set(site_vars) & set(options or {})):
        spec = _validator_spec(options[var])
        result = ArgumentSpecValidator({var: spec}).validate({var: site_vars[var]})
        if result.error_messages:
            accepted = spec.get("type", "str")
            if spec.get("elements"):
                accepted = "a %s of %s" % (accepted, spec["elements"])
            if spec.get("choices"):
                accepted = " | ".join(str(choice) for choice in spec["choices"])
            problems.append(_problem(var, site_vars[var], accepted, "; ".join(result.error_messages)))
    return problems


def validate(site_vars, isdir=None, exists=None, options=None):
    """Problems with the variables the site playbook is about to use. site_vars: {name: value}; absent names
    take the roles' defaults and are not checked. isdir / exists: path tests on the controller (where the cache
    and the source archives live); None skips those checks. options: the roles' documented options, for the
    type checks."""
    problems = []
    for var, accepted in sorted(CHOICES.items()):
        if var in site_vars and site_vars[var] not in accepted:
            problems.append(_problem(var, site_vars[var], " | ".join(accepted)))
    if "cuda_version" in site_vars and str(site_vars["cuda_version"]) not in CUDA_VERSIONS:
        problems.append(_problem("cuda_version", site_vars["cuda_version"], " | ".join(CUDA_VERSIONS),
                                 "a CUDA release as major.minor"))
    if "nvidia_driver_branch" in site_vars and not re.match(r"^\d{3}$", str(site_vars["nvidia_driver_branch"]).strip()):
        problems.append(_problem("nvidia_driver_branch", site_vars["nvidia_driver_branch"],
                                 "a driver branch like 570 or 580 (nvidia-open-<branch>)"))

    version = site_vars.get("deepep_version", "v1")
    if not site_vars.get("deepep_src") and "deepep_git_ref" in site_vars:
        ref = site_vars["deepep_git_ref"]
        generation = deepep_ref_generation(ref)
        if generation is False:
            problems.append(_problem("deepep_git_ref", ref, "a commit (7-40 hex digits), a tag like v1.2.1, or "
                                     "refs/pull/<n>/head", "neither V1 nor V2-shaped; unpinned DeepEP is V2 now"))
        elif generation and version in CHOICES["deepep_version"] and generation != version:
            problems.append(_problem("deepep_git_ref", ref, "a %s ref for deepep_version=%s" % (version, version),
                                     "tag of DeepEP %s" % generation.upper()))

    if version == "v2" and site_vars.get("nccl_method", "wheel") == "wheel" and "nccl_version" in site_vars:
        pinned_nccl = version_tuple(site_vars["nccl_version"])
        if pinned_nccl is None or pinned_nccl < V2_MIN_NCCL:
            problems.append(_problem("nccl_version", site_vars["nccl_version"], "2.30.4 or later with deepep_version=v2",
                                     "DeepEP V2 needs NCCL >= 2.30.4 (KF31)"))

    torch = site_vars.get("deepep_torch_version")
    role_owns_torch = not site_vars.get("deepep_python")
    if role_owns_torch and torch is not None:
        for problem in torch_pin_problems(torch, site_vars.get("deepep_torch_index_url", ""),
                                          site_vars.get("deepep_pip_extra_args", "")):
            problems.append({"var": "deepep_torch_version", "value": torch, "accepted": problem["fix"],
                             "msg": "%s; %s" % (problem["message"], problem["fix"])})
        pinned = version_tuple(torch)
        if version == "v2" and pinned and pinned[:2] < V2_MIN_TORCH:
            problems.append(_problem("deepep_torch_version", torch, "torch >= 2.10 with deepep_version=v2",
                                     "DeepEP V2 needs torch >= 2.10"))
        tag = re.search(r"\+cu(\d+)$", str(torch))
        cuda = version_tuple(site_vars.get("cuda_version"))
        if tag and cuda and int(tag.group(1)[:2]) != cuda[0]:
            problems.append(_problem("deepep_torch_version", torch, "a torch built for CUDA %d (+cu%d*)"
                                     % (cuda[0], cuda[0]), "its CUDA major differs from cuda_version %s"
                                     % site_vars.get("cuda_version")))

    if "deepep_serial" in site_vars:
        serial = str(site_vars["deepep_serial"]).strip()
        match = re.match(r"^(\d+)(%?)$", serial)
        if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(1)) > 100):
            problems.append(_problem("deepep_serial", site_vars["deepep_serial"],
                                     "a batch size >= 1 (e.g. 4) or a percentage 1%-100% (e.g. 25%)"))
    if "deepep_max_fail_percentage" in site_vars:
        value = str(site_vars["deepep_max_fail_percentage"]).strip()
        if not value.isdigit() or int(value) > 100:
            problems.append(_problem("deepep_max_fail_percentage", site_vars["deepep_max_fail_percentage"],
                                     "an integer 0-100 (the share of a batch that may fail)"))

    problems.extend(_source_problems(site_vars, isdir, exists))

    problems.extend(value_problems(site_vars))

    for var in ("deepep_arch_list", "nvshmem_ibgda_arch_list"):
        values = site_vars.get(var) or []
        if isinstance(values, (str, int, float)):
            values = [values]
        for value in values:
            try:
                arch_list([value])
            except ArchError as exc:
                problems.append(_problem(var, value, "compute capabilities like 9.0 or 10.0, or GPU names",
                                         str(exc)))
    # The settings role's counts and proxies.
    problems.extend(site_wide_problems(site_vars))
    # Type checks last, for the variables no check above named (one problem per variable is enough).
    named = set(problem["var"] for problem in problems)
    problems.extend(problem for problem in spec_problems(site_vars, options) if problem["var"] not in named)
    return problems


TRUE = (True, "true", "True", "yes", "1")
# The source archives on the controller, and when each is used (the layer is on and builds from source).
SOURCES = (
    ("deepep_src", "deepep_git_url", lambda v: True),
    ("gdrcopy_src", "gdrcopy_git_url", lambda v: v.get("gdrcopy_enabled", True) in TRUE),
    ("nvshmem_ibgda_src", "nvshmem_ibgda_git_url", lambda v: v.get("nvshmem_ibgda_method") == "source"),
    ("nccl_src", "nccl_git_url", lambda v: v.get("deepep_version") == "v2" and v.get("nccl_method") == "source"),
)


def _source_problems(site_vars, isdir, exists):
    """Offline mode and the controller-side paths: the cache must exist, every layer that builds must have its
    source archive (offline means no git), and a source archive that is named must be there."""
    problems = []
    offline = site_vars.get("deepep_offline") in TRUE
    cache = site_vars.get("deepep_cache_dir")
    if offline and not cache:
        problems.append(_problem("deepep_offline", site_vars["deepep_offline"], "true only with deepep_cache_dir set "
                                 "(the controller directory of the builds the nodes install)", "no cache to use"))
    elif offline and isdir is not None and not isdir(cache):
        problems.append(_problem("deepep_cache_dir", cache, "an existing controller directory holding the builds "
                                 "(<component>-<fingerprint>.tar.gz) with deepep_offline=true",
                                 "it does not exist on the controller"))
    for var, git_var, used in SOURCES:
        # Checked whether used or not: a URL that reads as an option must never reach a node.
        url = site_vars.get(git_var)
        why = git_url_problem(url) if url is not None else None
        if why:
            problems.append(_problem(git_var, url, GIT_URL_ACCEPTED, why))
        ref_var = git_var.replace("_url", "_ref")
        ref = site_vars.get(ref_var)
        why = git_ref_problem(ref) if ref is not None and ref_var != "deepep_git_ref" else None
        if why:
            problems.append(_problem(ref_var, ref, GIT_REF_ACCEPTED, why))
        src = site_vars.get(var)
        if src and exists is not None and not exists(src):
            problems.append(_problem(var, src, "a source archive or directory on the controller, or '' for %s"
                                     % git_var, "it does not exist on the controller"))
        elif offline and not src and used(site_vars):
            problems.append(_problem(var, src or "", "a source archive on the controller with deepep_offline=true "
                                     "(e.g. `git archive` of the pinned ref)", "offline: %s cannot be fetched" % git_var))
    if offline and not site_vars.get("deepep_python"):
        extra = str(site_vars.get("deepep_pip_extra_args", ""))
        if "--no-index" not in extra:
            problems.append(_problem("deepep_pip_extra_args", extra, "--no-index --find-links <wheel directory> "
                                     "with deepep_offline=true, or set deepep_python to an interpreter with torch",
                                     "offline: the role's venv would install torch from an index"))
    return problems


def source_nvshmem_problems(method, rdma, doca_policy="auto", include_dirs=(), source=None):
    """nvshmem_ibgda_method=source builds NVSHMEM's IBGDA transport, which needs rdma-core's mlx5 headers (KF11)
    and, for sources that do not define it themselves, MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT in
    infiniband/mlx5_api.h (KF19: Ubuntu 24.04's rdma-core 50 lacks it). They must be on the node already, or
    DOCA-OFED must be about to install them in this run. rdma: rdma_hca_info's result. source: {src, ref, version}
    of the NVSHMEM to build (src read when it is on this machine). Returns [problem] (empty when fine), so the site
    stops before any layer changes the node."""
    if method != "source" or rdma.get("dmabuf_data_direct"):
        return []
    defines, how = defines_data_direct(**(source or {}))
    if defines and rdma.get("mlx5_api_header"):
        return []  # the headers are there, and this source brings the symbol itself (v3.4.5-0 does)
    decision = doca_decision(rdma, doca_policy if doca_policy in DOCA_POLICIES else "auto")
    if decision["install"]:
        return []
    header = rdma.get("mlx5_api_header")
    found = ("%s does not declare MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, which this NVSHMEM source does not "
             "define itself (%s)" % (header, how) if header else
             "no infiniband/mlx5_api.h under %s" % ", ".join(include_dirs or ["the include directories"]))
    why = "IBGDA needs DOCA-OFED's rdma-core headers (KF11, KF19): %s, and the doca_ofed layer will not install " \
          "them (%s)" % (found, decision["msg"])
    return [_problem("nvshmem_ibgda_method", method, "wheel (the torch wheel's NVSHMEM); or source where DOCA-OFED's "
                     "rdma-core is installed or doca_ofed_policy lets this run install it (Mellanox hardware "
                     "present); preflight_rdma_include_dirs names where the headers are", why)]


def pip_problems(stack, deepep_version, python, nccl_method, nccl_planned=None):
    """The nccl layer runs the interpreter's own pip (python -m pip) where it installs a wheel: V2's wheel method
    when the wheel is not at nccl_planned yet, V1 putting back the version a V2 run or a stopped pip replaced. An
    interpreter with no pip is named before the system layers change the node, not at the nccl layer after them.
    nccl_method: the nccl layer's method when this run includes that layer, else None. Returns [problem]."""
    if nccl_method is None or "pip" not in stack or stack["pip"]:
        return []
    wheel = stack.get("nccl_wheel") or {}
    if deepep_version == "v2":
        if nccl_method != "wheel" or (wheel.get("version") == nccl_planned and not wheel.get("replaced_by")
                                      and not wheel.get("cut_short")):
            return []
        return [_problem("deepep_python", python, "an interpreter with pip (python -m ensurepip), or nccl_method: "
                         "source", "it has no pip, which nccl_method wheel runs (python -m pip) to install NCCL %s"
                         % nccl_planned)]
    if not wheel.get("upgraded_from") or wheel.get("replaced_by"):
        return []
    return [_problem("deepep_python", python, "an interpreter with pip (python -m ensurepip)",
                     "it has no pip, which the nccl layer runs (python -m pip) to install %s==%s again for DeepEP V1"
                     % (wheel.get("package"), wheel["upgraded_from"]))]


def interpreter_problems(stack, deepep_version, python, nccl_planned=None, nccl_method=None):
    """A given interpreter (deepep_python) that cannot build the DeepEP generation asked for, read before any
    layer runs: V2 needs torch >= 2.10 and NCCL >= 2.30.4 (KF31); every generation needs torch; the nccl layer
    needs pip where it installs a wheel (pip_problems). stack: torch_stack_info's result. nccl_planned: the NCCL
    the nccl layer of this run puts there (nccl_planned_version), which is what DeepEP will be built against;
    nccl_method: that layer's method (both None when the run does not include it). Returns [problem]."""
    torch = (stack.get("torch") or {}).get("version")
    wheel = stack.get("nccl_wheel") or {}
    if torch is None and wheel.get("half_installed"):
        # Installed but not imported (a pip changing its NCCL wheel was stopped half-way): the nccl layer installs
        # the wheel again (V1: the version before, from its record or pip's stash; V2: what nccl_planned says) and
        # the deepep role reads torch after it. Only V2 without an NCCL from this run is stopped here.
        torch = (stack.get("torch") or {}).get("installed")
        if deepep_version == "v2" and torch and not nccl_planned:
            return [_problem("deepep_python", python, "a run with the nccl layer (without --tags, or with --tags "
                             "nccl) and nccl_method wheel or source, which installs the NCCL wheel again, or "
                             "deepep_version=v1",
                             "its NCCL wheel %s is half-installed (a pip changing it was stopped before it "
                             "finished): torch cannot load its own NCCL, and this run provides none" % wheel.get("package"))]
    if torch is None:
        return [_problem("deepep_python", python, "an interpreter with torch installed, or '' for the role's venv "
                         "with deepep_torch_version",
                         "it does not exist" if stack.get("exists") is False else "it has no torch")]
    problems = pip_problems(stack, deepep_version, python, nccl_method, nccl_planned)
    cut = wheel.get("cut_short")
    if cut and deepep_version == "v2" and nccl_method == "source":
        # The source method keeps the wheel's files to put back for DeepEP V1: this library would be the one kept.
        problems.append(_problem("deepep_python", python, "nccl_method: wheel (it installs the wheel again), or the "
                                 "wheel installed again first (python -m pip install --force-reinstall --no-deps "
                                 "%s==%s)" % (cut["package"], cut["version"]),
                                 "%s %s's %s is %s bytes where its RECORD says %d (a pip writing it was stopped "
                                 "before it finished), and nccl_method source would keep it as the wheel's library "
                                 "to put back for DeepEP V1" % (cut["package"], cut["version"], cut["lib"],
                                                                "no" if cut["size"] is None else cut["size"],
                                                                cut["recorded_size"])))
    if deepep_version != "v2":
        return problems
    if version_tuple(torch)[:2] < V2_MIN_TORCH:
        problems.append(_problem("deepep_python", python, "an interpreter with torch >= 2.10 for deepep_version=v2, "
                                 "or deepep_version=v1", "its torch is %s; DeepEP V2 needs torch >= 2.10" % torch))
    shadow = node_nccl(stack)
    if shadow:
        # A node library mapped before the interpreter's (LD_PRELOAD, or a torch with RUNPATH under GCP gIB's
        # LD_LIBRARY_PATH): what the nccl layer puts in the interpreter is not what torch loads; only it counts.
        found = version_tuple(shadow["version"])
        if found is None or found < V2_MIN_NCCL:
            problems.append(_problem(
                "deepep_python", python, "a node NCCL >= 2.30.4 where torch finds it first (gIB >= 1.1.2 bundles "
                "2.30.4), or that library off LD_PRELOAD / LD_LIBRARY_PATH for the jobs and Ansible, or "
                "deepep_version=v1",
                "torch loads %s (NCCL %s) from outside the interpreter, before its own nvidia/nccl: the NCCL the "
                "nccl layer installs there would not be used; DeepEP V2 needs NCCL >= 2.30.4 (KF31)"
                % (shadow["lib"], shadow["version"] or "unknown")))
        return problems
    if nccl_planned:
        found = version_tuple(nccl_planned)
        if found is None or found < V2_MIN_NCCL:
            problems.append(_problem("nccl_version", nccl_planned, "2.30.4 or later for deepep_version=v2",
                                     "the nccl layer would provide NCCL %s; DeepEP V2 needs NCCL >= 2.30.4 (KF31)"
                                     % nccl_planned))
        return problems
    nccl = (stack.get("torch") or {}).get("nccl") or (stack.get("nccl_wheel") or {}).get("version")
    found = version_tuple(nccl)
    if found is None or found < V2_MIN_NCCL:
        problems.append(_problem("deepep_python", python, "an interpreter whose NCCL is >= 2.30.4 for "
                                 "deepep_version=v2 (nvidia-nccl-cu12/cu13; the nccl layer provides it unless "
                                 "nccl_method=none), or deepep_version=v1",
                                 "its NCCL is %s; DeepEP V2 needs NCCL >= 2.30.4 (KF31)" % (nccl or "missing")))
    return problems


# The layer tags of site.yml / system.yml / deepep.yml, and Ansible's own special tags.
LAYER_TAGS = ("preflight", "system", "doca_ofed", "cuda", "nvidia_driver", "nvidia_peermapping", "memlock", "gdrcopy",
              "nvshmem_ibgda", "nccl", "deepep",
              "deepep_python", "deepep_preflight", "deepep_build", "deepep_env", "deepep_verify")
# Ansible's special tags, and molecule's (it skips notest and molecule-* tags on converge and idempotence).
SPECIAL_TAGS = ("all", "always", "never", "tagged", "untagged", "notest")


# Each layer's own tags as the playbooks set them, and the step tags inside it (--tags deepep_build runs DeepEP).
LAYERS = (
    ("doca_ofed", ("doca_ofed", "system"), ()),
    ("cuda", ("cuda", "system"), ()),
    ("nvidia_driver", ("nvidia_driver", "system"), ()),
    ("nvidia_peermapping", ("nvidia_peermapping", "system"), ()),
    ("memlock", ("memlock", "system"), ()),
    ("gdrcopy", ("gdrcopy", "system"), ()),
    ("nvshmem_ibgda", ("nvshmem_ibgda",), ()),
    # DeepEP V2's NCCL: part of a --tags deepep run (a torch upgrade puts torch's own NCCL wheel back).
    ("nccl", ("nccl", "deepep"), ()),
    ("deepep", ("deepep",), ("deepep_python", "deepep_preflight", "deepep_build", "deepep_env", "deepep_verify")),
)

LAYER_NAMES = tuple(layer for layer, _tags, _steps in LAYERS)


def run_layers(run_tags, skip_tags):
    """The layers whose tasks a run with these --tags / --skip-tags runs, in order (Ansible's rules: "all" and
    "tagged" select every layer; a layer is left out when --skip-tags names one of its own tags). Lets the
    checks that guard only the layers under DeepEP stay out of a --tags deepep run."""
    run, skip = set(run_tags or ["all"]), set(skip_tags or [])
    selected = []
    for layer, tags, steps in LAYERS:
        if skip & set(tags):
            continue
        if run & {"all", "tagged"} or run & set(tags + steps):
            selected.append(layer)
    return selected


def tag_problems(run_tags, skip_tags):
    """--tags / --skip-tags naming no layer: Ansible would silently run only the always-tagged plays (or skip
    nothing) and report success. Returns [problem]."""
    problems = []
    for option, tags in (("--tags", run_tags), ("--skip-tags", skip_tags)):
        for tag in tags or []:
            if tag not in LAYER_TAGS + SPECIAL_TAGS and not tag.startswith("molecule-"):
                problems.append({"var": option, "value": tag, "accepted": " | ".join(LAYER_TAGS),
                                 "msg": "%s %s: no layer or step has that tag; accepted: %s" % (
                                     option, tag, ", ".join(LAYER_TAGS))})
    return problems


# Directories the roles own and build into.
PREFIX_VARS = ("deepep_prefix", "gdrcopy_prefix", "nvshmem_ibgda_prefix", "nccl_prefix", "deepep_venv")
# Node paths that reach commands or the env script; '' means "not set" where the role allows it.
PATH_VARS = ("deepep_python", "deepep_env_script", "deepep_report_dir", "deepep_cuda_home", "nvshmem_ibgda_cuda_home",
             "nvshmem_ibgda_rdma_include_dir", "nvshmem_ibgda_python", "gdrcopy_nvidia_src_dir",
             "deepep_probe_cache_dir")
# (variable, smallest accepted value, what it means)
COUNTS = (
    ("deepep_verify_timeout", 1, "seconds before a test counts as hung"),
    ("deepep_verify_num_processes", 0, "test processes, 0 for one per GPU"),
    ("deepep_build_jobs", 0, "build jobs, 0 to let torch decide"),
    ("gdrcopy_build_jobs", 0, "make jobs, 0 for one per CPU"),
    ("nvshmem_ibgda_build_jobs", 0, "build jobs, 0 for one per CPU"),
    ("deepep_build_poll", 1, "seconds between checks on a running build"),
    ("gdrcopy_build_poll", 1, "seconds between checks on a running build"),
    ("nvshmem_ibgda_build_poll", 1, "seconds between checks on a running build"),
    ("deepep_internode_timeout", 1, "seconds the internode test may take"),
)
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
RELEASE_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")


def _integer(value):
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def value_problems(site_vars):
    """Paths, counts, thresholds and names that the roles would refuse (or, worse, use) only once they run:
    checked here, before any host is touched."""
    problems = []
    for var in PREFIX_VARS:
        if var in site_vars:
            why = prefix_problem(site_vars[var])
            if why:
                problems.append(_problem(var, site_vars[var], PREFIX_ACCEPTED, why))
    for var in PATH_VARS:
        value = site_vars.get(var)
        if value not in (None, ""):
            why = path_problem(value)
            if why:
                problems.append(_problem(var, value, PATH_ACCEPTED + ", or '' where the role allows it", why))
    venv_python = site_vars.get("deepep_venv_python")
    if venv_python is not None and not SAFE_PATH_RE.match(str(venv_python)):
        problems.append(_problem("deepep_venv_python", venv_python, "an interpreter's name (python3.12) or absolute "
                                 "path, of letters, digits and . _ / + @ -", "it holds a character a shell would "
                                 "interpret"))
    for var in ("deepep_build_user", "gdrcopy_build_user", "nvshmem_ibgda_build_user"):
        user = site_vars.get(var)
        if user not in (None, "") and not USER_RE.match(str(user)):
            problems.append(_problem(var, user, "a user name (lower-case letters, digits, _ -), or '' to build as "
                                     "root", "not a user name"))
    for var, least, meaning in COUNTS:
        if var in site_vars:
            number = _integer(site_vars[var])
            if number is None or number < least:
                problems.append(_problem(var, site_vars[var], "a whole number >= %d (%s)" % (least, meaning)))
    if "doca_ofed_version" in site_vars and not RELEASE_RE.match(str(site_vars["doca_ofed_version"])):
        problems.append(_problem("doca_ofed_version", site_vars["doca_ofed_version"],
                                 "a DOCA release like 3.2.1 (the repository's path)"))
    for var, kind in (("deepep_intranode_thresholds", "intranode"), ("deepep_low_latency_thresholds", "low_latency"),
                      ("deepep_internode_thresholds", "internode")):
        thresholds = site_vars.get(var)
        if thresholds is None:
            continue
        keys = THRESHOLD_KEYS[kind]
        accepted = "a mapping of %s to GB/s > 0" % " | ".join(keys)
        if not isinstance(thresholds, dict):
            problems.append(_problem(var, thresholds, accepted))
            continue
        for key, minimum in sorted(thresholds.items(), key=lambda kv: str(kv[0])):
            if key not in keys:
                problems.append(_problem(var, {key: minimum}, accepted, "unknown key %s" % key))
                continue
            try:
                ok = float(minimum) > 0 and not isinstance(minimum, bool)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                problems.append(_problem(var, {key: minimum}, accepted, "not a bandwidth > 0"))
    extra = site_vars.get("deepep_env_extra")
    if isinstance(extra, dict):
        for name in sorted(extra, key=str):
            if not NAME_RE.match(str(name)):
                problems.append(_problem("deepep_env_extra", name, "variable names (letters, digits, _)",
                                         "not a variable name"))
            elif name in PATH_VARIABLES:
                problems.append(_problem("deepep_env_extra", name, "variables other than %s"
                                         % ", ".join(PATH_VARIABLES), "managed by the role"))
    elif extra is not None:
        problems.append(_problem("deepep_env_extra", extra, "a mapping of variable names to values"))
    options = site_vars.get("nvshmem_ibgda_cmake_options")
    if isinstance(options, dict):
        for name in sorted(options, key=str):
            if not OPTION_NAME_RE.match(str(name)):
                problems.append(_problem("nvshmem_ibgda_cmake_options", name, "cmake variable names like "
                                         "NVSHMEM_MPI_SUPPORT", "not a cmake variable name"))
    elif options is not None:
        problems.append(_problem("nvshmem_ibgda_cmake_options", options, "a mapping of cmake variables to values"))
    return problems
