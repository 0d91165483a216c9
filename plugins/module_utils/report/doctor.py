# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The doctor's checks: one per known failure mode (KF01-KF36) plus a few node-wide ones. Pure: every check
reads the evidence dict the deepep_doctor module gathers (or a test builds) and returns a finding:
id, title, status (ok | problem | not_applicable | unknown), evidence (what it looked at) and fix."""

from __future__ import annotations

import re

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import node_nccl, version_tuple
from ansible_collections.moe_infra.deepep.plugins.module_utils.system.system_layers import (
    driver_branches_needed,
    driver_packages,
)

OK = "ok"
PROBLEM = "problem"
NOT_APPLICABLE = "not_applicable"
UNKNOWN = "unknown"
STATUSES = (OK, PROBLEM, NOT_APPLICABLE, UNKNOWN)

# How each check detects: from the node's state, only from the logs the verification keeps, or across the
# inventory. The README's table is generated from this.
STATE, LOG, FLEET = "state", "log", "fleet"


class Check(object):
    def __init__(self, kf, title, fix, detect, logs=(), state=None, preflight=False):
        self.id = kf
        self.title = title
        self.fix = fix
        self.detect = detect
        self.log_patterns = [re.compile(pattern) for pattern in logs]
        self.state = state
        # Preflight: a problem no layer of the site playbook fixes, so provisioning stops before any change.
        self.preflight = preflight


# Every check, in the order the report lists them: each check function is registered by the decorator above it,
# which carries what the report shows (id, title, fix, how it detects, the log lines it matches).
CHECKS = []


def register(known_failure):
    CHECKS.append(known_failure)
    return known_failure


def check(kf, title, fix, detect, logs=(), preflight=False):
    """Decorator: the function below reads the evidence and returns (status, evidence[, fix])."""
    def decorate(function):
        register(Check(kf, title, fix, detect, logs, function, preflight))
        return function
    return decorate


def _hcas(ev):
    return ev.get("hcas") or []


def _env(ev):
    return (ev.get("env_script") or {}).get("vars") or {}


def _v2_without_nvshmem(ev):
    """DeepEP V2 whose env script carries no NVSHMEM transport (its legacy kernels unused): NVSHMEM's settings
    do not apply, NCCL's do."""
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    return version == "v2" and (ev.get("env_script") or {}).get("exists") and \
        "NVSHMEM_REMOTE_TRANSPORT" not in _env(ev)


def _names(hcas):
    return ",".join(hca["name"] for hca in hcas)


def _deepep_inputs(ev):
    stamp = ev.get("deepep_stamp") or {}
    return (stamp.get("inputs") or {}).get("inputs") or {}


def _nvshmem_version(ev):
    return (ev.get("nvshmem") or {}).get("version") or _deepep_inputs(ev).get("nvshmem") or None


def _no_nvshmem(ev):
    """Status when no NVSHMEM version is known: nothing installed yet, or one this doctor cannot read."""
    if not (ev.get("nvshmem") or {}).get("root") and not ev.get("deepep_stamp"):
        return NOT_APPLICABLE, "no NVSHMEM installed here yet"
    return UNKNOWN, "NVSHMEM version unknown (%s)" % ((ev.get("nvshmem") or {}).get("root") or "no stamp")


def _regkey_live(ev):
    params = ev.get("driver_params") or {}
    return params.get("peermapping_live")


# Each state function returns (status, evidence[, fix]); fix defaults to the check's.


def _loaded_nvshmem(ev):
    python = ev.get("python") or {}
    return (python.get("deep_ep") or {}).get("nvshmem_host_loaded")


# The layer whose run fixes what a check finds (its tag in site.yml): the report page names the command, and the
# layer's cell shows the problem. Checks a layer cannot fix (the node, the image, the job) are absent.
FIXED_BY_LAYER = {
    "KF01": "doca_ofed", "KF14": "doca_ofed", "KF19": "doca_ofed", "KF27": "doca_ofed",
    "KF09": "cuda",
    "DRIVER": "nvidia_driver",
    "KF20": "nvidia_peermapping", "KF23": "nvidia_peermapping",
    "MEMLOCK": "memlock",
    "KF02": "gdrcopy",
    "KF11": "nvshmem_ibgda", "KF15": "nvshmem_ibgda", "KF24": "nvshmem_ibgda", "KF26": "nvshmem_ibgda",
    "KF31": "nccl", "KF37": "nccl",
    "KF03": "deepep", "KF04": "deepep", "KF05": "deepep", "KF06": "deepep", "KF07": "deepep", "KF08": "deepep",
    "KF12": "deepep", "KF16": "deepep", "KF17": "deepep", "KF18": "deepep", "KF21": "deepep", "KF25": "deepep",
    "KF36": "deepep", "GIN": "deepep", "CXXRT": "deepep", "JITCACHE": "deepep",
}


@check("KF01", "HCAs enumerate as rocep*, not mlx5_*",
       "install DOCA-OFED and reboot (or NVSHMEM >= 3.4.5 with NVSHMEM_HCA_PREFIX=rocep)", STATE)
def hcas_named_rocep(ev):
    hcas = _hcas(ev)
    if not hcas:
        return NOT_APPLICABLE, "no RDMA HCA under /sys/class/infiniband"
    rocep = [h for h in hcas if h["family"] == "rocep"]
    if not rocep:
        return OK, "HCAs: %s" % _names(hcas)
    if _v2_without_nvshmem(ev):
        return NOT_APPLICABLE, "DeepEP V2 without its legacy NVSHMEM kernels (HCAs %s)" % _names(rocep)
    prefix = _env(ev).get("NVSHMEM_HCA_PREFIX")
    version = version_tuple(_nvshmem_version(ev))
    if prefix == "rocep" and version and version >= (3, 4, 5):
        return OK, "HCAs %s; NVSHMEM %s with NVSHMEM_HCA_PREFIX=rocep" % (_names(rocep), _nvshmem_version(ev))
    return PROBLEM, "HCAs named %s (ofed_info: %s)" % (_names(rocep), ev.get("ofed_version") or "none")


@check("KF02", "cmake: GDRCOPY_INCLUDE not found",
       "build the GDRCopy library (gdrcopy role) and pass -DGDRCOPY_INCLUDE", STATE,
       logs=[r"GDRCOPY_INCLUDE.*(not found|NOTFOUND)"])
def gdrcopy_header_missing(ev):
    gdrcopy = ev.get("gdrcopy") or {}
    nvshmem = ev.get("nvshmem") or {}
    if not gdrcopy.get("root") and not nvshmem.get("source_build"):
        return NOT_APPLICABLE, "no GDRCopy and no NVSHMEM source build here"
    header = gdrcopy.get("header")
    if header:
        return OK, "%s" % header
    return PROBLEM, "no include/gdrapi.h under %s" % (gdrcopy.get("root") or "the GDRCopy prefix")


@check("KF03", "every GPU uses one NIC (internode ~6.5 GB/s)",
       "GPU-to-NIC mapping: DeepEP PR #466 DEEP_EP_DEVICE_TO_HCA_MAPPING, NVSHMEM_HCA_LIST", STATE)
def gpus_share_one_nic(ev):
    hcas = [h for h in _hcas(ev) if any(p["state"] == "ACTIVE" for p in h["ports"])]
    gpus = ev.get("gpu_count") or 0
    if len(hcas) < 2 or gpus < 2:
        return NOT_APPLICABLE, "%d GPU(s), %d active HCA(s): nothing to spread" % (gpus, len(hcas))
    env = _env(ev)
    if not (ev.get("env_script") or {}).get("exists"):
        return NOT_APPLICABLE, "no env script at %s yet (the deepep role writes it)" % (
            (ev.get("env_script") or {}).get("path"))
    mapping = env.get("DEEP_EP_DEVICE_TO_HCA_MAPPING") or env.get("NVSHMEM_HCA_LIST")
    if not mapping:
        return PROBLEM, "%d GPUs and %d HCAs, env script sets neither DEEP_EP_DEVICE_TO_HCA_MAPPING nor " \
                        "NVSHMEM_HCA_LIST: every GPU uses %s" % (gpus, len(hcas), hcas[0]["name"])
    names = set(h["name"] for h in _hcas(ev))
    parts = [part for entry in re.split(r"[,;\s]+", mapping) for part in entry.split(":") if part]
    missing = sorted(set(part for part in parts if not part.isdigit() and part not in names))
    if missing:
        # A mapping written before the HCAs were renamed (rocep* before DOCA-OFED's reboot, mlx5_* after).
        return PROBLEM, "the mapping names %s, which this node does not have (it has %s): %s" % (
            ",".join(missing), _names(_hcas(ev)), mapping)
    used = set(part for part in parts if part in names)
    if len(used) == 1 and len(hcas) > 1:
        return PROBLEM, "the mapping names one NIC for every GPU: %s" % mapping
    return OK, "mapping %s" % mapping


@check("KF04", "internode dispatch hangs with the CPU NIC handler", "NVSHMEM_IBGDA_NIC_HANDLER=gpu", STATE)
def nic_handler_on_cpu(ev):
    if not (ev.get("env_script") or {}).get("exists"):
        return NOT_APPLICABLE, "no env script"
    handler = _env(ev).get("NVSHMEM_IBGDA_NIC_HANDLER")
    if handler == "cpu":
        return PROBLEM, "env script: NVSHMEM_IBGDA_NIC_HANDLER=cpu"
    return OK, "NVSHMEM_IBGDA_NIC_HANDLER=%s" % (handler or "(unset: gpu)")


@check("KF05", "NVSHMEM device library version does not match",
       "LD_PRELOAD=<nvshmem>/lib/libnvshmem_host.so.3 (deepep_ld_preload)", STATE,
       logs=[r"NVSHMEM device library version does not match"])
def nvshmem_device_library_mismatch(ev):
    if not ev.get("deepep_stamp"):
        return NOT_APPLICABLE, "DeepEP not built by this collection here"
    python = ev.get("python") or {}
    if not python or python.get("error"):
        return UNKNOWN, "no interpreter probed: %s" % ((python or {}).get("error") or "set doctor_python (or deepep_python)")
    wheel = python.get("nvshmem_wheel") or {}
    custom = _deepep_inputs(ev).get("nvshmem_dir")
    if not custom or (wheel and custom == wheel.get("dir")):
        return NOT_APPLICABLE, "DeepEP built against the torch wheel's NVSHMEM %s (%s), loaded %s: no LD_PRELOAD" \
            " needed" % (wheel.get("version") or "", custom or "found by setup.py",
                         ", ".join(_loaded_nvshmem(ev) or []) or "nothing")
    loaded = _loaded_nvshmem(ev)
    if loaded is None:
        return UNKNOWN, "deep_ep did not import, so the loaded libnvshmem_host is unknown"
    if any(path.startswith(custom.rstrip("/") + "/") for path in loaded):
        return OK, "loaded %s" % ", ".join(loaded)
    return PROBLEM, "DeepEP built against %s, but the process loads %s" % (custom, ", ".join(loaded) or "nothing")


@check("KF06", "Permission denied in the DeepEP build tree", "own the tree by the build user", STATE,
       logs=[r"Permission denied: .*/build"])
def build_tree_not_writable(ev):
    tree = ev.get("deepep_tree") or {}
    if not tree.get("root"):
        return NOT_APPLICABLE, "no DeepEP build tree"
    foreign = tree.get("foreign_owned") or []
    if foreign:
        return PROBLEM, "%s owned by uid %s, but %s by uid %s" % (
            tree["root"], tree.get("owner"), foreign[0]["path"], foreign[0]["uid"])
    return OK, "%s and its build files owned by uid %s" % (tree["root"], tree.get("owner"))


@check("KF07", "CUDA error: named symbol not found (arch mismatch)",
       "rebuild with the GPUs' arch (leave deepep_arch_list empty)", STATE,
       logs=[r"named symbol not found"])
def arch_mismatch(ev):
    arches = _deepep_inputs(ev).get("arch_list")
    caps = sorted(set(g.get("compute_cap") for g in ev.get("gpus") or [] if g.get("compute_cap")))
    if not ev.get("deepep_stamp"):
        return NOT_APPLICABLE, "DeepEP not built by this collection here"
    if not caps:
        return UNKNOWN, "GPU compute capability unknown (no GPU found, or an unknown PCI id)"
    if isinstance(arches, str):
        arches = [a for a in re.split(r"[;, ]+", arches) if a]
    missing = [c for c in caps if c not in (arches or [])]
    if missing:
        return PROBLEM, "DeepEP built for %s, GPUs are %s" % (";".join(arches or []) or "nothing", ", ".join(caps))
    return OK, "built for %s; GPUs %s" % (";".join(arches), ", ".join(caps))


@check("KF08", "DeepEP timeout (dispatch CPU), num_recv_tokens -1",
       "rebuild DeepEP with NVSHMEM_DIR of the IBGDA build", STATE,
       logs=[r"timeout \(dispatch CPU\)"])
def deepep_built_without_ibgda_nvshmem(ev):
    custom = _deepep_inputs(ev).get("nvshmem_dir")
    if not ev.get("deepep_stamp"):
        return NOT_APPLICABLE, "DeepEP not built by this collection here"
    if not _hcas(ev):
        return NOT_APPLICABLE, "no RDMA HCA: intranode only, IBGDA unused"
    wheel = ((ev.get("python") or {}).get("nvshmem_wheel") or {})
    if custom and wheel and custom == wheel.get("dir") and not wheel.get("ibgda_transport"):
        return PROBLEM, "DeepEP built against %s, which has no IBGDA transport" % custom
    nvshmem = ev.get("nvshmem") or {}
    if nvshmem.get("ibgda") is False:
        return PROBLEM, "nvshmem-info: NVSHMEM_IBGDA_SUPPORT is OFF in %s" % nvshmem.get("root")
    return OK, "NVSHMEM %s" % (custom or "torch wheel")


@check("KF09", "nvcc not found / CUDA_HOME not set", "install the toolkit (cuda role), /usr/local/cuda link",
       STATE, logs=[r"nvcc: command not found", r"CUDA_HOME is not set"])
def nvcc_missing(ev):
    cuda = ev.get("cuda") or {}
    if cuda.get("nvcc"):
        return OK, "%s (release %s)" % (cuda["nvcc"], cuda.get("release"))
    if not ev.get("gpu_count"):
        return NOT_APPLICABLE, "no NVIDIA GPU and no toolkit under %s" % cuda.get("home")
    return PROBLEM, "no bin/nvcc under %s" % cuda.get("home")


@check("KF10", "nv-p2p.h missing (gdrdrv)", "install nvidia-kernel-source-<ver>; set gdrcopy_nvidia_src_dir",
       STATE, logs=[r"nv-p2p\.h: No such file or directory"], preflight=True)
def nv_p2p_header_missing(ev):
    if not ev.get("want_gdrdrv"):
        return NOT_APPLICABLE, "gdrcopy_kernel_module is false: the library needs no kernel source"
    found = ev.get("nv_p2p_headers") or []
    if found:
        return OK, found[0]
    return PROBLEM, "no nv-p2p.h under /usr/src/nvidia-*"


@check("KF11", "IBGDA silently off (MLX5_lib not found)",
       "install libibverbs-dev and librdmacm-dev, rebuild NVSHMEM, check nvshmem-info -a", STATE,
       logs=[r"Could not find MLX5_lib"])
def ibgda_silently_off(ev):
    nvshmem = ev.get("nvshmem") or {}
    if not _hcas(ev):
        return NOT_APPLICABLE, "no RDMA HCA: IBGDA unused"
    if nvshmem.get("ibgda") is False:
        return PROBLEM, "nvshmem-info -a: NVSHMEM_IBGDA_SUPPORT=OFF (%s)" % nvshmem.get("root")
    if nvshmem.get("ibgda"):
        return OK, "IBGDA on in %s" % nvshmem["root"]
    if ev.get("nvshmem_method") != "source":
        return NOT_APPLICABLE, "NVSHMEM method %s: no source build to lose IBGDA" % (ev.get("nvshmem_method") or "wheel")
    if not ev.get("mlx5dv_header"):
        return PROBLEM, "NVSHMEM method source and no infiniband/mlx5dv.h: the build would silently turn IBGDA off"
    return OK, "infiniband/mlx5dv.h present for the source build"


@check("KF12", "cannot find -lcuda", "link libcuda.so.1 as libcuda.so, or $CUDA_HOME/lib64/stubs in LIBRARY_PATH",
       STATE, logs=[r"cannot find -lcuda"])
def libcuda_not_linkable(ev):
    if not ev.get("gpu_count"):
        return NOT_APPLICABLE, "no NVIDIA GPU"
    libcuda = ev.get("libcuda") or []
    if libcuda:
        return OK, libcuda[0]
    return PROBLEM, "no libcuda.so (unversioned link) in the library directories or the toolkit's stubs"


@check("KF13", "gdrdrv: redefinition of vm_flags_set (kernel >= 6.3)", "make driver from the GDRCopy root",
       LOG, logs=[r"redefinition of .vm_flags_set"])
def gdrdrv_vm_flags_set_redefined(ev):
    if not ev.get("want_gdrdrv"):
        return NOT_APPLICABLE, "gdrcopy_kernel_module is false"
    return UNKNOWN, "only the gdrdrv build log tells (kernel %s)" % ev.get("kernel")


@check("KF14", "No IB devices found", "modprobe mlx5_core mlx5_ib; check lspci | grep -i mellanox", STATE,
       logs=[r"No IB devices found"])
def no_ib_devices(ev):
    pci = ev.get("mellanox_pci") or []
    if not pci:
        return NOT_APPLICABLE, "no Mellanox PCI function (vendor 0x15b3)"
    if _hcas(ev):
        return OK, "HCAs: %s" % _names(_hcas(ev))
    return PROBLEM, "Mellanox PCI functions %s, but /sys/class/infiniband is empty" % ", ".join(pci)


@check("KF15", "ibv_create_ah_from_wc: Unable to create ah on RoCE",
       "the ibv_ah_attr memset patch (nvshmem_ibgda source build applies it), or another NVSHMEM", STATE,
       logs=[r"Unable to create ah", r"ibv_create_ah_from_wc"])
def roce_address_handle_fails(ev):
    roce = [h for h in _hcas(ev) if any(p.get("link_layer") == "Ethernet" for p in h["ports"])]
    if not roce:
        return NOT_APPLICABLE, "no RoCE port"
    version = version_tuple(_nvshmem_version(ev))
    if version is None:
        return _no_nvshmem(ev)
    if (3, 3, 20) <= version <= (3, 4, 5) and not (ev.get("nvshmem") or {}).get("patched_ah_attr"):
        return PROBLEM, "NVSHMEM %s on RoCE (%s) without the ibv_ah_attr patch" % (_nvshmem_version(ev), _names(roce))
    return OK, "NVSHMEM %s" % _nvshmem_version(ev)


@check("KF16", "custom NVSHMEM ignored: the torch wheel's wins",
       "LD_PRELOAD the custom libnvshmem_host, or replace the wheel's IBGDA transport", STATE)
def torch_nvshmem_wheel_wins(ev):
    return nvshmem_device_library_mismatch(ev)


@check("KF17", "NVSHMEM init fails on RoCE: wrong GID index",
       "NVSHMEM_IB_GID_INDEX (V2: NCCL_IB_GID_INDEX) = the RoCE v2 IPv4 GID index (the deepep role's env script "
       "sets it)", STATE)
def roce_gid_index_wrong(ev):
    roce = [(h["name"], p) for h in _hcas(ev) for p in h["ports"] if p.get("link_layer") == "Ethernet"]
    if not roce:
        return NOT_APPLICABLE, "no RoCE port"
    wanted = set(p.get("roce_v2_ipv4_gid_index") for name, p in roce if p.get("state") == "ACTIVE")
    wanted.discard(None)
    if not (ev.get("env_script") or {}).get("exists"):
        return NOT_APPLICABLE, "no env script at %s yet; RoCE v2 IPv4 GID index is %s" % (
            (ev.get("env_script") or {}).get("path"), sorted(wanted) or "none")
    if not wanted:
        return PROBLEM, "no active RoCE port has a RoCE v2 IPv4 GID", "configure an IPv4 address on the NICs"
    # NVSHMEM's variable, or for DeepEP V2 NCCL's (and NVSHMEM's too where the legacy kernels are set up).
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    names = ([] if _v2_without_nvshmem(ev) else ["NVSHMEM_IB_GID_INDEX"]) + (
        ["NCCL_IB_GID_INDEX"] if version == "v2" else [])
    seen = []
    for name in names:
        configured = _env(ev).get(name)
        if configured is None:
            return PROBLEM, "%s unset; RoCE v2 IPv4 GID index is %s" % (name, sorted(wanted))
        if str(configured) not in set(str(w) for w in wanted):
            return PROBLEM, "%s=%s, RoCE v2 IPv4 GID index is %s" % (name, configured, sorted(wanted))
        seen.append("%s=%s" % (name, configured))
    return OK, ", ".join(seen)


@check("KF18", "undefined symbol _ZNK3c10... on import: torch changed",
       "rebuild DeepEP against the current torch (--tags deepep)", STATE,
       logs=[r"undefined symbol: _ZN.?3c10"])
def torch_abi_changed(ev):
    built = _deepep_inputs(ev).get("torch")
    python = ev.get("python") or {}
    installed = (python.get("torch") or {}).get("version")
    if not built:
        return NOT_APPLICABLE, "DeepEP not built by this collection here"
    if not installed:
        wheel = python.get("nccl_wheel") or {}
        half = (": its NCCL wheel %s is half-installed (a pip changing it was stopped before it finished); the nccl "
                "layer installs it again (run playbooks/deepep.yml)" % wheel.get("package")
                if wheel.get("half_installed") else "")
        return UNKNOWN, "torch not importable by %s%s" % (python.get("python") or "the probe", half)
    if (python.get("deep_ep") or {}).get("undefined_symbol") or installed != built:
        return PROBLEM, "DeepEP stamp: torch %s; installed: torch %s" % (built, installed)
    return OK, "torch %s, as built" % installed


@check("KF19", "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT not declared (rdma-core too old)",
       "DOCA-OFED userspace (doca_ofed role; it pins mft)", STATE,
       logs=[r"MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT.*not declared"])
def rdma_core_too_old(ev):
    if not _hcas(ev) and not ev.get("mellanox_pci"):
        return NOT_APPLICABLE, "no Mellanox hardware"
    if ev.get("dmabuf_data_direct"):
        return OK, "%s declares MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT" % ev.get("dmabuf_header")
    return PROBLEM, "%s lacks MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT" % (ev.get("dmabuf_header") or "no mlx5_api.h")


@check("KF20", "PeerMappingOverride not live (internode -1 counters)",
       "regkey + initramfs + reboot (nvidia_peermapping role), verify /proc/driver/nvidia/params", STATE)
def peermapping_not_live(ev):
    params = ev.get("driver_params") or {}
    live = params.get("registry_dwords_live")
    if not params.get("driver_loaded"):
        return UNKNOWN if ev.get("gpu_count") else NOT_APPLICABLE, "NVIDIA driver not loaded (no /proc/driver/nvidia/params)"
    evidence = 'RegistryDwords: "%s"' % (live or "")
    if not _hcas(ev):
        return NOT_APPLICABLE, evidence + "; no RDMA HCA, so not required"
    if params.get("peermapping_live"):
        return OK, evidence
    if params.get("peermapping_configured"):
        return PROBLEM, evidence + "; configured in %s, not live: reboot" % params.get("configured_in"), \
            "reboot (the initramfs must carry the conf file), then check /proc/driver/nvidia/params"
    return PROBLEM, evidence + "; PeerMappingOverride not configured"


@check("KF21", "cuda/std/tuple not found (CUDA 13 CCCL)", "add $CUDA_HOME/include/cccl to CPATH", STATE,
       logs=[r"cuda/std/tuple: No such file"])
def cccl_headers_not_found(ev):
    cuda = ev.get("cuda") or {}
    major = version_tuple(cuda.get("release"))
    if not major or major[0] < 13:
        return NOT_APPLICABLE, "CUDA %s" % (cuda.get("release") or "absent")
    if cuda.get("cccl"):
        return OK, "%s" % cuda["cccl"]
    return PROBLEM, "CUDA %s without include/cccl" % cuda.get("release")


@check("KF22", "neither nv_peer_mem nor nvidia_peermem; IBGDA init failed",
       "load nvidia_peermem persistently, or the regkey + dma-buf", STATE,
       logs=[r"neither nv_peer_mem, or nvidia_peermem detected"])
def peermem_module_missing(ev):
    if not _hcas(ev):
        return NOT_APPLICABLE, "no RDMA HCA"
    if ev.get("nvidia_peermem_loaded"):
        return OK, "nvidia_peermem loaded"
    if _regkey_live(ev):
        return OK, "dma-buf path: PeerMappingOverride live (nvidia_peermem not loaded)"
    return PROBLEM, "nvidia_peermem not loaded and PeerMappingOverride not live"


@check("KF23", "cudaHostRegister IoMemory error 800 / GPU cannot map UAR", "as KF20", STATE,
       logs=[r"cudaHostRegister with IoMemory failed", r"GPU cannot map UAR"])
def gpu_cannot_map_uar(ev):
    return peermapping_not_live(ev)


@check("KF24", "device is not enumerated as an mlx5 device", "NVSHMEM >= 3.4.5 with NVSHMEM_HCA_PREFIX", STATE,
       logs=[r"is not enumerated as an mlx5 device"])
def hca_not_mlx5(ev):
    hcas = _hcas(ev)
    others = [h for h in hcas if h["family"] != "mlx5"]
    prefix = _env(ev).get("NVSHMEM_HCA_PREFIX")
    if prefix and hcas and not any(h["name"].startswith(prefix) for h in hcas):
        return PROBLEM, "NVSHMEM_HCA_PREFIX=%s matches none of %s" % (prefix, _names(hcas)), \
            "set NVSHMEM_HCA_PREFIX to the HCAs' name family (the deepep role's env script does)"
    if not others:
        return NOT_APPLICABLE if not hcas else OK, "HCAs: %s" % (_names(hcas) or "none")
    if _v2_without_nvshmem(ev):
        return NOT_APPLICABLE, "DeepEP V2 without its legacy NVSHMEM kernels (HCAs %s)" % _names(others)
    version = version_tuple(_nvshmem_version(ev))
    if version is None:
        status, evidence = _no_nvshmem(ev)
        return status, "HCAs %s; %s" % (_names(others), evidence)
    if version < (3, 4, 5):
        return PROBLEM, "NVSHMEM %s accepts only mlx5* names; HCAs %s" % (_nvshmem_version(ev), _names(others))
    if not prefix:
        return PROBLEM, "HCAs %s and NVSHMEM_HCA_PREFIX unset" % _names(others)
    return OK, "NVSHMEM %s, NVSHMEM_HCA_PREFIX=%s" % (_nvshmem_version(ev), prefix)


@check("KF25", "first internode dispatch hangs: NVSHMEM >= 3.5.19 with DeepEP V1 without PR #564/#696",
       "a DeepEP ref with PR #564/#696 (deepep_nvshmem_35_fix), or NVSHMEM <= 3.4.5", STATE)
def nvshmem_too_new_for_v1(ev):
    inputs = _deepep_inputs(ev)
    if not inputs:
        return NOT_APPLICABLE, "DeepEP not built by this collection here"
    version = version_tuple(inputs.get("nvshmem"))
    if inputs.get("deepep_version") != "v1" or version is None:
        return NOT_APPLICABLE, "DeepEP %s, NVSHMEM %s" % (inputs.get("deepep_version"), inputs.get("nvshmem"))
    if version >= (3, 5, 19) and not ev.get("deepep_nvshmem_35_fix"):
        return PROBLEM, "DeepEP V1 built against NVSHMEM %s without PR #564/#696" % inputs.get("nvshmem")
    runtime = _loaded_nvshmem(ev) or []
    return OK, "NVSHMEM %s at build%s" % (inputs.get("nvshmem"), "; loaded %s" % runtime[0] if runtime else "")


# Seen only in a build log.
register(Check("KF26", "multiple definition of nvshmemi_ibgda_device_state_d",
               "-D__NVSHMEM_NUMBA_SUPPORT__ for source NVSHMEM >= 3.3.20", LOG,
               logs=[r"multiple definition of .nvshmemi_ibgda_device_state_d"]))


@check("KF27", "no active IB device that supports GPU-initiated communication",
       "DOCA/MOFED libibverbs and libmlx5 (doca_ofed role)", STATE,
       logs=[r"no active IB device that supports GPU-initiated communication"])
def no_ibgda_capable_device(ev):
    if not _hcas(ev):
        return NOT_APPLICABLE, "no RDMA HCA"
    if ev.get("ofed_version"):
        return OK, "DOCA/MOFED userland: %s" % ev["ofed_version"]
    return PROBLEM, "no ofed_info: the distribution's rdma-core (libmlx5) is in use"


@check("KF28", "cannot allocate mlx5dv_devx_uar (works with --privileged)", "regkey on the host; IPC_LOCK",
       STATE, logs=[r"cannot allocate mlx5dv_devx_uar"])
def devx_uar_not_allowed(ev):
    if not ev.get("container"):
        return NOT_APPLICABLE, "not in a container"
    if not _hcas(ev):
        return NOT_APPLICABLE, "container without RDMA HCAs"
    if ev.get("cap_ipc_lock"):
        return OK, "container has CAP_IPC_LOCK"
    return PROBLEM, "container without CAP_IPC_LOCK (CapEff %s)" % ev.get("cap_eff")


@check("KF29", "bootstrap_init: Connection timed out",
       "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME / NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY", STATE,
       logs=[r"bootstrap_init.*Connection timed out"])
def bootstrap_timeout(ev):
    ifname = _env(ev).get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME")
    if not ifname:
        return NOT_APPLICABLE, "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME unset (NVSHMEM picks an interface)"
    names = set(re.split(r"[,\s]+", ifname.lstrip("=^")))
    missing = sorted(n for n in names if n and n not in set(ev.get("netdevs") or []))
    if missing:
        return PROBLEM, "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=%s, but no such interface here" % ",".join(missing)
    return OK, "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=%s exists" % ifname


# Across the inventory (fleet_findings), or in a test log.
register(Check("KF30", "Fatal IPC Failure: two nodes share a hostname", "give every node a unique hostname", FLEET,
               logs=[r"Fatal IPC Failure"], preflight=True))


@check("KF31", "V2: ncclCommProperties undefined / ginType NONE",
       "NCCL >= 2.30.4 wheel (and DOCA libmlx5 MLX5_1.25), or deepep_version: v1", STATE,
       logs=[r"ncclCommProperties.*undefined"])
def v2_nccl_without_gin(ev):
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    if version != "v2":
        return NOT_APPLICABLE, "DeepEP %s" % (version or "not configured")
    python = ev.get("python") or {}
    # What the import loaded (ncclGetVersion) says more than the wheel's metadata: the nccl layer's source build
    # sits in place of the wheel's files.
    nccl = (python.get("torch") or {}).get("nccl")
    wheel = (python.get("nccl_wheel") or {}).get("version")
    found = version_tuple(nccl or wheel)
    # Which library a process gets: a node's mapped before the interpreter's own (LD_PRELOAD; torch 2.11's RPATH
    # beats LD_LIBRARY_PATH, docs/results/nccl-loader-h100).
    shadow = node_nccl(python)
    where = (" from %s, the node's, before the interpreter's nvidia/nccl (LD_PRELOAD or LD_LIBRARY_PATH)"
             % shadow["lib"]) if shadow else ""
    if found is None:
        return UNKNOWN, "NCCL version unknown" + where
    if found < (2, 30, 4):
        return PROBLEM, "NCCL %s (< 2.30.4)%s" % (nccl or wheel, where)
    return OK, "NCCL %s%s" % (nccl or wheel, where)


@check("KF32", "internode normal kernels need 8 GPUs per node", "8 GPUs per node for internode normal mode",
       STATE, logs=[r"num_ranks > NUM_MAX_NVL_PEERS or low_latency_mode"])
def internode_needs_8_gpus(ev):
    if not _hcas(ev):
        return NOT_APPLICABLE, "no RDMA HCA: no internode runs"
    gpus = ev.get("gpu_count") or 0
    if gpus < 8:
        return PROBLEM, "%d GPU(s) per node with RDMA NICs: internode normal mode needs 8 (low-latency only)" % gpus
    return OK, "%d GPUs" % gpus


@check("KF33", "hang after init on SR-IOV VFs", "use the physical functions", STATE,
       preflight=True)
def sriov_virtual_functions(ev):
    hcas = _hcas(ev)
    if not hcas:
        return NOT_APPLICABLE, "no RDMA HCA"
    vfs = [h for h in hcas if h.get("virtual_function")]
    if vfs:
        return PROBLEM, "SR-IOV virtual functions: %s" % _names(vfs)
    return OK, "all physical functions"


@check("KF34", "V2 picks too few SMs on bonded NICs", "set EP_RDMA_GBS to the real rate", STATE)
def bonded_nics_too_few_sms(ev):
    bonded = ev.get("bonded_hcas") or []
    if not bonded:
        return NOT_APPLICABLE, "no HCA netdev in a bond"
    if _env(ev).get("EP_RDMA_GBS"):
        return OK, "EP_RDMA_GBS=%s" % _env(ev)["EP_RDMA_GBS"]
    if (ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")) != "v2":
        return NOT_APPLICABLE, "bonded %s; only DeepEP V2 sizes SMs by NIC rate" % ", ".join(bonded)
    return PROBLEM, "bonded HCA netdevs %s and EP_RDMA_GBS unset" % ", ".join(bonded)


@check("KF35", "gdrdrv-dkms in a container", "library only in containers (gdrcopy_kernel_module: false)",
       STATE, logs=[r"gdrdrv-dkms.*is not configured"], preflight=True)
def gdrdrv_dkms_in_container(ev):
    if not ev.get("container"):
        return NOT_APPLICABLE, "not in a container"
    if ev.get("want_gdrdrv") or ev.get("gdrdrv_dkms_installed"):
        what = "gdrdrv-dkms installed" if ev.get("gdrdrv_dkms_installed") else "gdrcopy_kernel_module=true"
        return PROBLEM, "container with %s" % what
    return OK, "container, library only"


@check("KF36", "static IBGDA env on a node without HCAs",
       "render the IBGDA variables only where HCAs are discovered (the deepep role's env script does)", STATE)
def static_ibgda_env_without_hcas(ev):
    script = ev.get("env_script") or {}
    if not script.get("exists"):
        return NOT_APPLICABLE, "no env script at %s" % script.get("path")
    transport = _env(ev).get("NVSHMEM_REMOTE_TRANSPORT")
    if transport == "ibgda" and not _hcas(ev):
        return PROBLEM, "%s exports NVSHMEM_REMOTE_TRANSPORT=ibgda, no HCA here" % script["path"]
    return OK, "NVSHMEM_REMOTE_TRANSPORT=%s with %d HCA(s)" % (transport or "(unset)", len(_hcas(ev)))


@check("KF37", "two NCCL runtimes in one process (DeepEP V2: Duplicate NCCL runtime)",
       "build DeepEP without EP_NCCL_ROOT_DIR and provide one NCCL where torch loads it (the nccl layer)", STATE,
       logs=[r"Duplicate NCCL runtime"])
def two_nccl_runtimes(ev):
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    if version != "v2":
        return NOT_APPLICABLE, "DeepEP %s" % (version or "not configured")
    persisted = ev.get("deepep_persisted_nccl_root")
    if persisted:
        return PROBLEM, ("deep_ep/envs.py persists EP_NCCL_ROOT_DIR=%s: DeepEP loads that NCCL beside the one torch "
                         "loads" % persisted)
    libs = ((ev.get("python") or {}).get("torch") or {}).get("nccl_libs")
    if libs is None:
        return UNKNOWN, "the interpreter was not probed"
    if len(libs) > 1:
        return PROBLEM, "one import loads %d NCCL libraries: %s" % (len(libs), ", ".join(libs))
    return OK, "one NCCL: %s" % (libs[0] if libs else "none loaded by the import")


@check("GIN", "DeepEP V2: NCCL GIN is unavailable (an ElasticBuffer of more than one rank)",
       "without RDMA ports: EP_DISABLE_GIN=1 (deepep_gin: auto sets it there; V2 then runs within the node); with "
       "them: NCCL >= 2.30.4 and DOCA's libmlx5 (KF31), NCCL_IB_HCA / NCCL_IB_GID_INDEX (the env script), or "
       "allow_hybrid_mode=0 in a multi-plane network", STATE,
       logs=[r"NCCL GIN is unavailable", r"ginType\)? != NCCL_GIN_TYPE_NONE"])
def nccl_gin_unavailable(ev):
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    if version != "v2":
        return NOT_APPLICABLE, "DeepEP %s" % (version or "not configured")
    script = ev.get("env_script") or {}
    if not script.get("exists"):
        return NOT_APPLICABLE, "no env script at %s yet" % script.get("path")
    disabled = str(_env(ev).get("EP_DISABLE_GIN", "0")) not in ("", "0")
    if not _hcas(ev):
        if disabled:
            return OK, "no RDMA HCA: EP_DISABLE_GIN=%s (V2 within this node, over NVLink)" % _env(ev)["EP_DISABLE_GIN"]
        return PROBLEM, ("no RDMA HCA, so NCCL has no Gin network, and EP_DISABLE_GIN is unset: an ElasticBuffer of "
                         "more than one rank stops with 'NCCL GIN is unavailable'")
    if disabled:
        return OK, ("EP_DISABLE_GIN=%s with %d RDMA HCA(s): V2 runs without NCCL's Gin backend"
                    % (_env(ev)["EP_DISABLE_GIN"], len(_hcas(ev))))
    return OK, "NCCL's Gin backend over %d RDMA HCA(s)" % len(_hcas(ev))


@check("CXXRT", "DeepEP's extension carries its own libstdc++ (V2's JIT crashes in std::regex)",
       "rebuild with a compiler whose libstdc++ is shared (deepep_cxx, e.g. /usr/bin/g++)", STATE)
def extension_bundles_libstdcxx(ev):
    copies = ev.get("deepep_cxx_runtime")
    if copies is None:
        return NOT_APPLICABLE, "no DeepEP build"
    if copies:
        return PROBLEM, "; ".join("%s defines %s" % (item["path"], ", ".join(item["defines"])) for item in copies)
    return OK, "DeepEP's shared objects use the shared libstdc++"


@check("V2CUDA", "DeepEP V2 on CUDA < 12.9: __cvta_generic_to_shared undeclared in host code",
       "CUDA 12.9 or 13.0 (cuda_version) for deepep_version v2", STATE,
       logs=[r"__cvta_generic_to_shared.*(undeclared|was not declared|is undefined)"])
def v2_cuda_too_old(ev):
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    if version != "v2":
        return NOT_APPLICABLE, "DeepEP %s" % (version or "not configured")
    release = (ev.get("cuda") or {}).get("release")
    found = version_tuple(release)
    if found is None:
        return UNKNOWN, "no CUDA toolkit found"
    if found[:2] < (12, 9):
        return PROBLEM, "CUDA %s: DeepEP V2's host code does not compile with it" % release
    return OK, "CUDA %s" % release


@check("JITCACHE", "DeepEP V2's JIT cache missing, empty or corrupted (jobs compile, or stop, at start)",
       "rerun the deepep role (--tags deepep): it warms the cache after a build; remove corrupted kernel "
       "directories first", STATE, logs=[r"Corrupted JIT cache directory"])
def jit_cache_unusable(ev):
    version = ev.get("deepep_version") or _deepep_inputs(ev).get("deepep_version")
    if version != "v2":
        return NOT_APPLICABLE, "DeepEP %s" % (version or "not configured")
    stats = ev.get("jit_cache")
    if stats is None:
        return PROBLEM, ("the env script names no EP_JIT_CACHE_DIR: every job compiles its kernels on first use "
                         "into ~/.deep_ep")
    if not stats["exists"]:
        return PROBLEM, "EP_JIT_CACHE_DIR=%s does not exist" % stats["dir"]
    if stats["corrupted"]:
        return PROBLEM, ("%d kernel directories without kernel.cu and kernel.cubin (DeepEP stops on them: Corrupted "
                         "JIT cache directory): %s" % (len(stats["corrupted"]), ", ".join(stats["corrupted"][:3])))
    if not stats["kernels"]:
        return PROBLEM, "%s holds no kernel: not warmed" % stats["dir"]
    size = stats["bytes"] // 1024
    return OK, "%s: %d kernels, %d KiB, mode %s" % (stats["dir"], stats["kernels"], size, stats["mode"])


@check("MEMLOCK", "locked-memory limit (ulimit -l) below unlimited",
       "the memlock layer (system.yml: memlock unlimited in limits.d and systemd's DefaultLimitMEMLOCK, checked as "
       "a user); a service: LimitMEMLOCK=infinity; a container: --ulimit memlock=-1:-1", STATE)
def memlock_limited(ev):
    limit = ev.get("memlock_soft")
    if limit is None:
        return UNKNOWN, "could not read RLIMIT_MEMLOCK"
    if limit == -1:
        return OK, "ulimit -l unlimited"
    if not _hcas(ev):
        return NOT_APPLICABLE, "ulimit -l %d KiB; no RDMA HCA to register memory with" % (limit // 1024)
    return PROBLEM, "ulimit -l %d KiB: RDMA memory registration fails" % (limit // 1024)


@check("PYTAR", "the modules' Python cannot unpack untrusted archives as root",
       "Python 3.9.23, 3.10.18, 3.11.13, 3.12.11, 3.13.4 or later (or the distribution's patched build: apt-get "
       "install --only-upgrade python3) as ansible_python_interpreter, or keep a build user (deepep_build_user)",
       STATE, preflight=True)
def python_tarfile_unsafe(ev):
    """The modules' interpreter unpacks sources and cached builds: as root only with tarfile's data filter."""
    tar = ev.get("tarfile")
    if not tar:
        return UNKNOWN, "the modules' Python was not read"
    build_user = ev.get("build_user") or ""
    if not tar["data_filter"]:
        if not build_user:
            return PROBLEM, ("Python %s has no tarfile data filter and no build user is set: root would unpack "
                             "archives unfiltered, so every unpack is refused" % tar["python"])
        return OK, ("Python %s has no tarfile data filter: archives are unpacked as %s, with the collection's own "
                    "checks" % (tar["python"], build_user))
    if not tar["fixes_2025"]:
        # Not refused (the collection's own checks run with the filter), but said: a patched Python closes the
        # filter's known bypasses.
        return OK, ("Python %s has tarfile's data filter without its June 2025 fixes (Python 3.9.23, 3.10.18, "
                    "3.11.13, 3.12.11, 3.13.4 have them): archives are unpacked %s with the collection's checks too"
                    % (tar["python"], "as " + build_user if build_user else "by root"))
    return OK, "Python %s: tarfile data filter with the June 2025 fixes" % tar["python"]


@check("REACH", "the build user cannot reach the prefix (every build would stop before its first step)",
       "a deepep_prefix every user can reach (the default /opt/deepep), let others search the directory in the way "
       "(chmod o+x), or deepep_build_user: '' to build as root", STATE, preflight=True)
def prefix_unreachable(ev):
    """The layers build, test and probe as the build user: each needs to reach the prefix. Before the layers create
    that user, nobody's rights stand for it (no group of its own on the way)."""
    reach = ev.get("prefix_reach")
    if reach is None:
        return NOT_APPLICABLE, "no build user: the layers build as root"
    if reach.get("error"):
        return UNKNOWN, reach["error"]
    if reach["blocked"]:
        return PROBLEM, reach["text"], (
            "a deepep_prefix every user can reach (the default /opt/deepep), chmod o+x %s, or deepep_build_user: '' "
            "to build as root" % reach["blocked"])
    return OK, "%s reaches %s" % (reach["user"], reach["prefix"])


@check("DRIVER", "NVIDIA GPUs without a loaded NVIDIA driver, or one below the branch they need",
       "an image that ships the driver (GCP: the ubuntu-accelerator images with NVIDIA's driver; a plain "
       "ubuntu-2204-lts has none), or nvidia_driver_install: true (the nvidia_driver layer installs "
       "nvidia-open-<branch> from NVIDIA's CUDA repository and holds it, as Google's A4 blueprint does, then "
       "reboots)", STATE, preflight=True)
def driver_missing_or_old(ev):
    gpus = ev.get("gpu_count") or 0
    if not gpus:
        return NOT_APPLICABLE, "no NVIDIA GPU"
    loaded = (ev.get("driver_params") or {}).get("driver_loaded") or ev.get("driver_version")
    installed = ev.get("driver_packages") or []
    planned = ev.get("driver_install") or ""
    if not loaded:
        if planned and ev.get("preflight_only"):
            needs = driver_branches_needed([g.get("compute_cap") for g in ev.get("gpus") or []],
                                           [(ev.get("cuda") or {}).get("release"), ev.get("cuda_planned")])
            short = [(branch, why) for branch, why in needs if not planned.isdigit() or int(planned) < branch]
            if short:
                branch, why = max(short)
                return PROBLEM, ("no NVIDIA driver loaded, and nvidia_driver_branch %s is below R%d which %s needs"
                                 % (planned, branch, why)), "set nvidia_driver_branch to %d or later" % branch
            return OK, ("no NVIDIA driver loaded: the nvidia_driver layer %s %s (held) and reboots "
                        "(nvidia_driver_install)" % ("finds" if installed else "installs",
                                                     " ".join(installed or driver_packages(planned))))
        if installed:
            return PROBLEM, ("%s installed and no NVIDIA driver loaded: it loads at the next boot"
                             % ", ".join(installed)), (
                "reboot the node (site.yml with deepep_reboot=auto does it once and verifies the driver)")
        return PROBLEM, ("%d NVIDIA GPU(s) and no NVIDIA driver loaded (no /proc/driver/nvidia/params): every layer "
                         "would install and build, and DeepEP's tests fail an hour later" % gpus)
    version = version_tuple(ev.get("driver_version"))
    if version is None:
        return OK, "driver loaded (version not read)"
    needs = driver_branches_needed([g.get("compute_cap") for g in ev.get("gpus") or []],
                                   [(ev.get("cuda") or {}).get("release"), ev.get("cuda_planned")])
    short = [(branch, why) for branch, why in needs if version[0] < branch]
    if short:
        branch, why = max(short)
        return PROBLEM, "driver %s, below R%d which %s needs" % (ev["driver_version"], branch, why), (
            "a driver of branch %d or later: an image that ships it (GCP: the ubuntu-accelerator images with "
            "NVIDIA's driver), or nvidia-open-%d from NVIDIA's CUDA repository, held (as Google's A4 blueprint "
            "installs it), then a reboot" % (branch, branch))
    return OK, "driver %s" % ev["driver_version"]


@check("GPUS", "NVIDIA GPUs present", "run on a GPU node", STATE)
def gpus_present(ev):
    count = ev.get("gpu_count") or 0
    if count:
        return OK, "%d NVIDIA GPU(s)" % count
    return NOT_APPLICABLE, "no NVIDIA GPU: the GPU checks do not apply"


BY_ID = dict((check.id, check) for check in CHECKS)


def match_logs(check, logs):
    """First (path, line) in the logs matching the check's patterns; logs: {path: text}."""
    for path in sorted(logs or {}):
        for line in logs[path].splitlines():
            for pattern in check.log_patterns:
                if pattern.search(line):
                    return path, line.strip()[:300]
    return None


def _finding(check, status, evidence, fix=None):
    return {"id": check.id, "title": check.title, "status": status, "evidence": evidence,
            "fix": (fix or check.fix) if status in (PROBLEM, UNKNOWN) else "", "detect": check.detect}


def run_check(check, ev):
    logs = ev.get("logs") or {}
    state = check.state(ev) if check.state else None
    if state is not None:
        status, evidence = state[0], state[1]
        fix = state[2] if len(state) > 2 else None
    elif check.detect == FLEET:
        status, evidence, fix = UNKNOWN, "needs the inventory (deepep_doctor_fleet)", None
    else:
        status, evidence, fix = UNKNOWN, "no log to read", None
    if status != PROBLEM and check.log_patterns:
        hit = match_logs(check, logs)
        if hit:
            return _finding(check, PROBLEM, "%s: %s" % hit)
        if state is None and check.detect == LOG and logs:
            status, evidence = OK, "no match in %d log(s)" % len(logs)
    return _finding(check, status, evidence, fix)


def diagnose(ev, only=None):
    """Every check (or those in `only`) against the evidence, in id order."""
    unknown = sorted(set(only or []) - set(BY_ID))
    if unknown:
        raise ValueError("checks: unknown id(s) %s; known: %s" % (", ".join(unknown), ", ".join(BY_ID)))
    return [run_check(check, ev) for check in CHECKS if not only or check.id in only]


def fleet_findings(nodes):
    """Checks across the inventory. nodes: [{host, hostname, gpu_count, hca_count}] -> {host: [findings]}."""
    by_name = {}
    for node in nodes:
        by_name.setdefault(node.get("hostname"), []).append(node["host"])
    counts = sorted(set(node.get("gpu_count") or 0 for node in nodes if node.get("hca_count")))
    out = {}
    for node in nodes:
        same = [h for h in by_name.get(node.get("hostname"), []) if h != node["host"]]
        kf30 = BY_ID["KF30"]
        if not node.get("hostname"):
            found = _finding(kf30, UNKNOWN, "hostname not read")
        elif same:
            found = _finding(kf30, PROBLEM, "hostname %s is also %s's" % (node["hostname"], ", ".join(same)))
        elif len(nodes) < 2:
            found = _finding(kf30, NOT_APPLICABLE, "one node in the inventory (hostname %s)" % node["hostname"])
        else:
            found = _finding(kf30, OK, "hostname %s unique among %d nodes" % (node["hostname"], len(nodes)))
        gpus = {"id": "GPUCOUNT", "title": "same GPU count on every RDMA node of the group", "detect": FLEET,
                "fix": ""}
        if len(counts) > 1 and node.get("hca_count"):
            gpus.update(status=PROBLEM, evidence="GPU counts across the group: %s" % counts,
                        fix="internode runs need the same GPU count per node: group nodes by shape")
        elif len([n for n in nodes if n.get("hca_count")]) < 2:
            gpus.update(status=NOT_APPLICABLE, evidence="fewer than 2 nodes with RDMA NICs")
        else:
            gpus.update(status=OK, evidence="%s GPUs on each" % counts[0])
        out[node["host"]] = [found, gpus]
    return out


def merge(findings, extra):
    """Replace findings by id with the fleet's (KF30), append the others."""
    extra_by_id = dict((f["id"], f) for f in extra)
    # A problem the node's own logs showed stays.
    merged = [f if f["status"] == PROBLEM else extra_by_id.pop(f["id"], f) for f in findings]
    for f in findings:
        extra_by_id.pop(f["id"], None)
    return merged + [f for f in extra if f["id"] in extra_by_id]


def summary(findings):
    counts = dict((status, 0) for status in STATUSES)
    for finding in findings:
        counts[finding["status"]] += 1
    return counts


def table(findings, width=60):
    """Plain-text table: id, status, evidence, fix."""
    lines = [("%-9s %-14s %-*s %s" % ("ID", "STATUS", width, "EVIDENCE", "FIX"))]
    for f in findings:
        evidence = f["evidence"] if len(f["evidence"]) <= width else f["evidence"][:width - 3] + "..."
        lines.append(("%-9s %-14s %-*s %s" % (f["id"], f["status"], width, evidence, f["fix"])).rstrip())
    return lines


DETECTED_BY = {STATE: "node state", LOG: "logs only", FLEET: "inventory"}


def coverage():
    """The README's table of checks: one markdown row per check (a unit test keeps the README in step)."""
    rows = []
    for check in CHECKS:
        how = DETECTED_BY[check.detect] + (" + logs" if check.log_patterns and check.detect != LOG else "")
        # The anchor is what the cluster report's "doctor entry" links to (docs/doctor.md#kf15).
        anchor = "<a id=\"%s\"></a>" % check.id.lower()
        rows.append("| %s%s | %s | %s | %s |" % (anchor, check.id, check.title, how, "yes" if check.preflight else ""))
    return rows
