# -*- coding: utf-8 -*-
"""What the doctor's checks read on a node (deepep_doctor's evidence), for deepep_doctor and for deepep_facts,
which runs the checks no layer fixes on the node it has just read."""
from __future__ import annotations

import glob
import json
import os
import platform
import pwd
import re
import resource
import socket
import stat
import tarfile

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import CHECKS, diagnose, summary
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.elf_symbols import cxx_runtime_copies
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.envscript import parse_env_script, sourced_env
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.jit_cache import jit_cache_stats
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.gpu import discover_gpus
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.nvidia_params import (
    effective_options,
    format_registry_dwords,
    live_registry_value,
    parse_params,
    parse_registry_dwords,
    read_modprobe_options,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.rdma import (
    discover_hcas,
    header_has_dmabuf_data_direct,
    mellanox_pci_devices,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.sysfs import list_dir, read_attr
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.torch_probe import (
    IMPORT_PROBE,
    PROBE,
    run_probes_cached,
    runner,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import (
    FALLBACK_USER, first_unsearchable, probe_account)

# The options of deepep_doctor that say where to read (and, with preflight_only, what the checks need to know).
OPTIONS = dict(
    sysfs_root=dict(type="path", default="/sys"),
    procfs_root=dict(type="path", default="/proc"),
    root=dict(type="path", default="/"),
    modprobe_dir=dict(type="path", default="/etc/modprobe.d"),
    include_dirs=dict(type="list", elements="path", default=["/usr/include"]),
    cuda_home=dict(type="path", default="/usr/local/cuda"),
    deepep_prefix=dict(type="path", default="/opt/deepep"),
    env_script=dict(type="str", default=""),
    nvshmem_root=dict(type="str", default=""),
    gdrcopy_root=dict(type="str", default=""),
    nvshmem_prefix=dict(type="str", default=""),
    gdrcopy_prefix=dict(type="str", default=""),
    python=dict(type="str", default=""),
    probe_cache_dir=dict(type="path", default=""),
    probe_user=dict(type="str", default="deepep-build"),
    build_user=dict(type="str", default="deepep-build"),
    log_dirs=dict(type="list", elements="path", default=[]),
    gdrcopy_kernel_module=dict(type="bool", default=False),
    nvshmem_method=dict(type="str", default="wheel", choices=["wheel", "source"]),
    deepep_version=dict(type="str", default=""),
    cuda_version=dict(type="str", default=""),
    nvidia_driver_branch=dict(type="str", default=""),
    deepep_nvshmem_35_fix=dict(type="bool", default=True),
    preflight_only=dict(type="bool", default=False),
)

CAP_IPC_LOCK = 14
LOG_TAIL_BYTES = 2 * 1024 * 1024
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/nvidia/lib64")
AH_ATTR_PATCH = "ibgda-roce-ah-attr-memset.patch"


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def driver_params(procfs_root, modprobe_dir):
    text = read_attr(os.path.join(procfs_root, "driver", "nvidia", "params"))
    params, registry = parse_params(text)
    configured = effective_options(read_modprobe_options(modprobe_dir)).get("NVreg_RegistryDwords")
    configured_dwords = parse_registry_dwords(configured[0]) if configured else {}
    return {
        "driver_loaded": text is not None,
        "registry_dwords_live": format_registry_dwords(registry),
        "peermapping_live": live_registry_value(params, registry, "PeerMappingOverride") == 1,
        "peermapping_configured": str(configured_dwords.get("PeerMappingOverride")) == "1",
        "configured_in": configured[1] if configured else None,
    }


def cuda_info(module, cuda_home):
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    release = None
    version = read_json(os.path.join(cuda_home, "version.json")) or {}
    full = (version.get("cuda") or {}).get("version")
    if full:
        release = ".".join(full.split(".")[:2])
    elif os.access(nvcc, os.X_OK):
        rc, out, dummy = module.run_command([nvcc, "--version"])
        match = re.search(r"release (\d+\.\d+)", out or "")
        release = match.group(1) if match else None
    cccl = os.path.join(cuda_home, "include", "cccl")
    return {"home": cuda_home, "nvcc": nvcc if os.access(nvcc, os.X_OK) else None, "release": release,
            "cccl": cccl if os.path.isdir(cccl) else None}


def tree_owners(root):
    """The DeepEP source tree's owner and the files under it (top level and build/) owned by someone else."""
    try:
        owner = os.stat(root).st_uid
    except OSError:
        return {"root": None}
    foreign = []
    candidates = [os.path.join(root, name) for name in list_dir(root)]
    for base, dirs, files in os.walk(os.path.join(root, "build")):
        candidates.extend(os.path.join(base, name) for name in dirs + files)
        if len(candidates) > 5000:
            break
    for path in candidates:
        try:
            uid = os.lstat(path).st_uid
        except OSError:
            continue
        if uid != owner:
            foreign.append({"path": path, "uid": uid})
            if len(foreign) >= 5:
                break
    return {"root": root, "owner": owner, "foreign_owned": foreign}


def read_recorded(path, limit=1 << 20):
    """The text of a regular file not reached through a symlink at its last component, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read(limit).decode("utf-8", "replace")


def nvshmem_info(module, root, wheel):
    info = {"root": root or None, "version": None, "ibgda": None, "source_build": False, "patched_ah_attr": False,
            "info_from": None}
    if not root:
        return info
    stamp = read_json(os.path.join(root, ".moe_infra_stamp.json"))
    if stamp:
        inputs = stamp.get("inputs") or {}
        info["source_build"] = stamp.get("name") == "nvshmem"
        info["version"] = (inputs.get("inputs") or {}).get("version")
        info["patched_ah_attr"] = AH_ATTR_PATCH in (inputs.get("patches") or {})
    if wheel and os.path.realpath(root) == os.path.realpath(wheel.get("dir") or ""):
        info["version"] = info["version"] or wheel.get("version")
        info["ibgda"] = bool(wheel.get("ibgda_transport"))
    tool = os.path.join(root, "bin", "nvshmem-info")
    # A build this collection verified kept what nvshmem-info -a printed then (its tree never changes after):
    # read, not run again (the tool loads NVSHMEM's and CUDA's libraries).
    recorded = os.path.join(root, "nvshmem-info.txt")
    out = read_recorded(recorded) if info["source_build"] else None
    if out is not None:
        info["info_from"] = recorded
    elif os.access(tool, os.X_OK):
        rc, out, dummy = module.run_command([tool, "-a"])
        info["info_from"] = tool
    if out is not None:
        match = re.search(r"NVSHMEM_IBGDA_SUPPORT\s*[:=]?\s*(ON|OFF|\w+)", out or "")
        if match:
            info["ibgda"] = match.group(1) == "ON"
        version = re.search(r"NVSHMEM v?(\d+\.\d+\.\d+)", out or "")
        if version and not info["version"]:
            info["version"] = version.group(1)
    return info


def probe_python(module, python, env_script, cache_dir="", user=""):
    if not python:
        return None
    if not os.access(python, os.X_OK):
        return {"python": python, "error": "%s is not an executable interpreter" % python}
    env = dict(sourced_env(env_script["vars"]), LC_ALL="C")
    out = {"python": python, "error": None}
    try:
        run = runner(module, probe_account(user))
    except KeyError:
        return {"python": python, "error": "probe_user: neither %s nor %s is a user on this node" % (user, FALLBACK_USER)}
    # The two probes side by side (two interpreters importing torch at once).
    probes = run_probes_cached(module, python, [(PROBE, env), (IMPORT_PROBE, env)], cache_dir, run)
    for key, (rc, stdout, stderr, dummy) in zip(("stack", "deep_ep"), probes):
        try:
            result = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out["error"] = "probe failed (rc %s): %s" % (rc, (stderr or stdout).strip()[-500:])
            return out
        if key == "stack":
            out.update(result)
        else:
            result["undefined_symbol"] = bool(result["error"] and "undefined symbol" in result["error"])
            out["deep_ep"] = result
    return out


def read_logs(log_dirs):
    logs = {}
    for directory in log_dirs:
        for path in sorted(glob.glob(os.path.join(directory, "*.log")) + glob.glob(os.path.join(directory, "*", "*.log"))):
            try:
                with open(path, "rb") as handle:
                    handle.seek(0, os.SEEK_END)
                    handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
                    logs[path] = handle.read().decode("utf-8", "replace")
            except OSError:
                continue
    return logs


def container_state(root, procfs_root):
    markers = [m for m in (".dockerenv", "run/.containerenv") if os.path.exists(os.path.join(root, m))]
    cgroup = read_attr(os.path.join(procfs_root, "1", "cgroup"), "") or ""
    if re.search(r"docker|kubepods|libpod|containerd", cgroup):
        markers.append("/proc/1/cgroup")
    status = read_attr(os.path.join(procfs_root, "self", "status"), "") or ""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, re.M)
    cap_eff = match.group(1) if match else None
    return {"container": bool(markers), "container_markers": markers, "cap_eff": cap_eff,
            "cap_ipc_lock": bool(cap_eff and int(cap_eff, 16) >> CAP_IPC_LOCK & 1)}


def dpkg_installed(root, package):
    text = read_attr(os.path.join(root, "var", "lib", "dpkg", "status"), "") or ""
    for stanza in text.split("\n\n"):
        if re.search(r"^Package: %s$" % re.escape(package), stanza, re.M):
            return bool(re.search(r"^Status: \S+ ok installed$", stanza, re.M))  # install or hold
    return False


def dpkg_driver_packages(root):
    """The NVIDIA driver packages dpkg has installed (nvidia-open-<branch>, nvidia-driver-<branch>[-open])."""
    text = read_attr(os.path.join(root, "var", "lib", "dpkg", "status"), "") or ""
    found = []
    for stanza in text.split("\n\n"):
        match = re.search(r"^Package: (nvidia-(?:open|driver)-\d+(?:-open|-server|-server-open)?)$", stanza, re.M)
        if match and re.search(r"^Status: \S+ ok installed$", stanza, re.M):  # install or hold
            found.append(match.group(1))
    return sorted(found)


def persisted_nccl_root(path):
    """The EP_NCCL_ROOT_DIR DeepEP V2's setup.py wrote into deep_ep/envs.py (KF37), or None."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (OSError, IOError):
        return None
    match = re.search(r"persistent_envs\['EP_NCCL_ROOT_DIR'\] = '([^']*)'", text)
    return match.group(1) if match else None


def prefix_reach(prefix, build_user):
    """Whether the build user can reach prefix (as far as it exists): {user, prefix, blocked, mode, owner}; nobody
    stands for a build user the layers have not created yet. None without a build user or when not root (the
    layers then build as this user)."""
    if not build_user or os.geteuid() != 0:
        return None
    user = build_user
    try:
        account = pwd.getpwnam(build_user)
    except KeyError:
        user = FALLBACK_USER
        try:
            account = pwd.getpwnam(FALLBACK_USER)
        except KeyError:
            return None
    try:
        blocked = first_unsearchable(prefix, account.pw_uid, account.pw_gid)
    except OSError as exc:
        return {"user": user, "prefix": prefix, "blocked": None, "error": str(exc)}
    if blocked is None:
        return {"user": user, "prefix": prefix, "blocked": None}
    return {"user": user, "prefix": prefix, "blocked": blocked.directory, "text": blocked.text(user, prefix)}


def gather(module, p, probe=True):
    """The node's evidence. probe=False (preflight_only: no preflight check reads them) leaves out the two
    interpreter probes and nvshmem-info, each a few seconds on a GPU node where they import torch.
    p: the options of deepep_doctor (OPTIONS), as the module got them."""
    sysfs, procfs, root = p["sysfs_root"], p["procfs_root"], p["root"]
    prefix = p["deepep_prefix"]
    gpus = discover_gpus(sysfs)
    hcas = discover_hcas(sysfs)
    header, dmabuf = header_has_dmabuf_data_direct(p["include_dirs"])
    env_script = parse_env_script(p["env_script"] or os.path.join(prefix, "env.sh"))
    deepep_stamp = read_json(os.path.join(prefix, "deepep", "current", ".moe_infra_stamp.json"))
    deepep_src = os.path.join(prefix, "deepep", "current", "src")
    stamp_inputs = ((deepep_stamp or {}).get("inputs") or {}).get("inputs") or {}
    python = p["python"] or (os.path.join(prefix, "venv", "bin", "python")
                             if os.path.exists(os.path.join(prefix, "venv", "bin", "python")) else "")
    py = probe_python(module, python, env_script, p["probe_cache_dir"], p["probe_user"]) if probe else None
    nvshmem_current = os.path.join(p["nvshmem_prefix"] or os.path.join(prefix, "nvshmem"), "current")
    nvshmem_root = p["nvshmem_root"] or stamp_inputs.get("nvshmem_dir") or (
        nvshmem_current if os.path.isdir(nvshmem_current) else "")
    gdrcopy_root = p["gdrcopy_root"] or os.path.join(p["gdrcopy_prefix"] or os.path.join(prefix, "gdrcopy"), "current")
    gdrcopy_header = os.path.join(gdrcopy_root, "include", "gdrapi.h")
    net = os.path.join(sysfs, "class", "net")
    hca_netdevs = set(dev for hca in hcas for dev in hca["netdevs"])
    bonded = []
    for name in list_dir(net):
        slaves = (read_attr(os.path.join(net, name, "bonding", "slaves"), "") or "").split()
        bonded.extend("%s in %s" % (slave, name) for slave in slaves if slave in hca_netdevs)
    libcuda = [path for path in [os.path.join(root, d, "libcuda.so") for d in LIB_DIRS]
               + [os.path.join(p["cuda_home"], "lib64", "stubs", "libcuda.so")] if os.path.exists(path)]
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    evidence = {
        "hostname": socket.gethostname(),
        "kernel": os.uname()[2],
        "gpus": gpus,
        "gpu_count": len(gpus),
        "hcas": hcas,
        "mellanox_pci": mellanox_pci_devices(sysfs),
        "dmabuf_header": header,
        "dmabuf_data_direct": dmabuf,
        "mlx5dv_header": any(os.path.exists(os.path.join(d, "infiniband", "mlx5dv.h")) for d in p["include_dirs"]),
        "ofed_version": None,
        "driver_params": driver_params(procfs, p["modprobe_dir"]),
        # The loaded NVIDIA kernel module's version (MODULE_VERSION), read where preflight reads the GPUs.
        "driver_version": read_attr(os.path.join(sysfs, "module", "nvidia", "version")),
        "cuda_planned": p["cuda_version"],
        "driver_install": p["nvidia_driver_branch"],
        "driver_packages": dpkg_driver_packages(root),
        "preflight_only": p["preflight_only"],
        "nvidia_peermem_loaded": os.path.isdir(os.path.join(sysfs, "module", "nvidia_peermem")),
        "cuda": cuda_info(module, p["cuda_home"]),
        "libcuda": libcuda,
        "env_script": env_script,
        "deepep_stamp": deepep_stamp,
        "deepep_version": p["deepep_version"] or stamp_inputs.get("deepep_version"),
        "deepep_nvshmem_35_fix": p["deepep_nvshmem_35_fix"],
        "deepep_tree": tree_owners(os.path.join(prefix, "deepep", "current", "src")),
        "deepep_cxx_runtime": cxx_runtime_copies(deepep_src) if os.path.isdir(deepep_src) else None,
        "jit_cache": (jit_cache_stats(env_script["vars"]["EP_JIT_CACHE_DIR"])
                      if env_script["vars"].get("EP_JIT_CACHE_DIR") else None),
        "deepep_persisted_nccl_root": persisted_nccl_root(os.path.join(deepep_src, "deep_ep", "envs.py")),
        "nvshmem": nvshmem_info(module, nvshmem_root if probe else "", (py or {}).get("nvshmem_wheel")),
        "gdrcopy": {"root": gdrcopy_root if os.path.isdir(gdrcopy_root) else None,
                    "header": gdrcopy_header if os.path.exists(gdrcopy_header) else None},
        "python": py,
        "want_gdrdrv": p["gdrcopy_kernel_module"],
        "nvshmem_method": p["nvshmem_method"],
        "nv_p2p_headers": sorted(glob.glob(os.path.join(root, "usr", "src", "nvidia-*", "nvidia", "nv-p2p.h"))
                                 + glob.glob(os.path.join(root, "usr", "src", "nvidia-*", "nv-p2p.h"))),
        "gdrdrv_dkms_installed": dpkg_installed(root, "gdrdrv-dkms"),
        "netdevs": list_dir(net),
        "bonded_hcas": bonded,
        "memlock_soft": -1 if memlock == resource.RLIM_INFINITY else memlock,
        # The interpreter these modules run with unpacks every archive (source_build): its tarfile filter.
        "tarfile": {"python": platform.python_version(), "data_filter": hasattr(tarfile, "data_filter"),
                    "fixes_2025": hasattr(os.path, "ALLOW_MISSING")},
        "build_user": p["build_user"],
        "prefix_reach": prefix_reach(prefix, p["build_user"]),
        "logs": read_logs(p["log_dirs"] or [os.path.join(prefix, "reports")]),
    }
    # The process's own capabilities and cgroup: always the real /proc, even with a fixture procfs_root.
    evidence.update(container_state(root, "/proc"))
    ofed_info = module.get_bin_path("ofed_info")
    if ofed_info:
        rc, out, dummy = module.run_command([ofed_info, "-s"])
        evidence["ofed_version"] = out.strip().splitlines()[0].rstrip(":") if rc == 0 and out.strip() else None
    return evidence


# What the checks no layer fixes need to know besides the trees deepep_facts reads (its preflight_checks option).
PREFLIGHT_OPTIONS = dict(
    root=OPTIONS["root"],
    deepep_prefix=OPTIONS["deepep_prefix"],
    build_user=OPTIONS["build_user"],
    gdrcopy_kernel_module=OPTIONS["gdrcopy_kernel_module"],
    nvshmem_method=OPTIONS["nvshmem_method"],
    nvidia_driver_branch=OPTIONS["nvidia_driver_branch"],
)


def preflight_checks(module, read_from, options):
    """The doctor's checks for what no layer fixes (those marked preflight; KF30 needs the inventory: the
    _deepep_preflight_checks filter), on the trees a deepep_facts reading came from. No interpreter starts.
    Returns {findings, summary, node}."""
    p = dict((name, spec.get("default")) for name, spec in OPTIONS.items())
    read = ("sysfs_root", "procfs_root", "modprobe_dir", "include_dirs", "cuda_home", "cuda_version")
    p.update((name, read_from[name]) for name in read)
    p.update(options)
    p["preflight_only"] = True
    evidence = gather(module, p, probe=False)
    findings = diagnose(evidence, [check.id for check in CHECKS if check.preflight])
    node = {"hostname": evidence["hostname"], "gpu_count": evidence["gpu_count"], "hca_count": len(evidence["hcas"])}
    return {"findings": findings, "summary": summary(findings), "node": node}
