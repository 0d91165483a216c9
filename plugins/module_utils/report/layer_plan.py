# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""What each layer of the stack would do on a node, from discovery results alone (pure)."""

from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import V2_MIN_NCCL, version_tuple

LAYERS = ("doca_ofed", "cuda", "nvidia_peermapping", "gdrcopy", "nvshmem_ibgda", "nccl", "deepep")

# ok: nothing to do; change: the layer would change the node; reboot: it would change it and need a
# reboot; skip: does not apply here; blocked: cannot run until something missing is there.
STATUSES = ("ok", "change", "reboot", "skip", "blocked")


def _entry(layer, status, found, action):
    return {"layer": layer, "status": status, "found": found, "action": action}


def _hca_summary(hcas):
    active = [h for h in hcas if any(p["state"] == "ACTIVE" for p in h["ports"])]
    families = sorted(set(h["family"] for h in hcas))
    return "%d HCAs (%s), %d with an ACTIVE port" % (len(hcas), "/".join(families), len(active))


def plan_doca_ofed(rdma):
    hcas = rdma["hcas"]
    if not hcas:
        return _entry("doca_ofed", "skip", "no RDMA HCA under /sys/class/infiniband", "nothing: no Mellanox HCA")
    found = "%s; OFED %s; %s %s MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT" % (
        _hca_summary(hcas), rdma.get("ofed_version") or "not installed",
        rdma.get("mlx5_api_header") or "no infiniband/mlx5_api.h",
        "declares" if rdma.get("dmabuf_data_direct") else "lacks")
    reasons = []
    if any(h["family"] == "rocep" for h in hcas):
        reasons.append("rocep* names (KF01)")
    if not rdma.get("dmabuf_data_direct"):
        reasons.append("rdma-core headers lack the IBGDA dma-buf symbol (KF19)")
    if reasons:
        return _entry("doca_ofed", "reboot", found, "install DOCA-OFED and reboot: %s" % "; ".join(reasons))
    return _entry("doca_ofed", "ok", found, "nothing: mlx5 names and IBGDA-capable rdma-core")


def plan_cuda(cuda, pinned=""):
    """pinned: the cuda role's cuda_version; empty when not known (then a found toolkit cannot be judged)."""
    if not cuda.get("found"):
        return _entry("cuda", "change", "no nvcc under /usr/local/cuda or on PATH",
                      "install CUDA %s and link /usr/local/cuda (KF09)" % (pinned or "(the pinned release)"))
    found = "CUDA %s at %s" % (cuda["release"], cuda["cuda_home"])
    if not pinned:
        return _entry("cuda", "change", found, "unknown: no pinned release given to compare with")
    if cuda["release"] != pinned:
        return _entry("cuda", "change", found, "install CUDA %s (the pin, cuda_version) and link /usr/local/cuda "
                      "to it; %s stays installed" % (pinned, cuda["release"]))
    return _entry("cuda", "ok", found, "nothing: %s is the pinned release" % pinned)


def plan_peermapping(gpu, rdma, params):
    if not gpu["gpus"]:
        return _entry("nvidia_peermapping", "blocked", "no NVIDIA GPU", "nothing until GPUs are present")
    found = "RegistryDwords live: %r" % params.get("registry_dwords_live") if params.get("driver_loaded") \
        else "NVIDIA driver not loaded (no /proc/driver/nvidia/params)"
    if not rdma["hcas"]:
        return _entry("nvidia_peermapping", "skip", found,
                      "not required: no RDMA NIC, so no IBGDA")
    if params.get("live"):
        return _entry("nvidia_peermapping", "ok", found, "nothing: PeerMappingOverride=1 is live")
    if params.get("reboot_required"):
        return _entry("nvidia_peermapping", "reboot", found, "configured, not live: refresh initramfs and reboot")
    return _entry("nvidia_peermapping", "reboot", found,
                  "write the modprobe.d regkey, refresh initramfs, reboot (KF20/KF23)")


def plan_build_layers(gpu, rdma, topology):
    if not gpu["gpus"]:
        reason = "no NVIDIA GPU found"
        return [_entry(layer, "blocked", reason, "nothing until GPUs are present")
                for layer in ("gdrcopy", "nvshmem_ibgda", "deepep")]
    arch = gpu.get("torch_cuda_arch_list") or "unknown (set the arch list)"
    gpus = "%d x %s, arch %s" % (len(gpu["gpus"]), gpu["gpus"][0].get("name") or gpu["gpus"][0]["pci_device_id"],
                                 arch)
    if topology.get("mapping"):
        transport = "IBGDA over %s (%s), mapping %s" % (
            topology.get("link_layer"), rdma.get("hca_prefix"), topology["deepep_device_to_hca_mapping"])
    else:
        transport = "no usable RDMA port: NVLink only, IBGDA variables left out of the env script (KF36)"
    return [
        _entry("gdrcopy", "change", gpus, "build the GDRCopy library (kernel module off by default)"),
        _entry("nvshmem_ibgda", "change", transport, "provide NVSHMEM with IBGDA for arch %s" % arch),
        _entry("deepep", "change", gpus, "build DeepEP with TORCH_CUDA_ARCH_LIST=%s, then test" % arch),
    ]


def plan_nccl(interpreter, deepep_version, method, version):
    """The nccl layer (roles/nccl) on the interpreter's reading (None: not read): V1 gets torch's own NCCL back where
    a V2 run changed it; V2 gets NCCL >= 2.30.4 where torch loads it, by method (wheel, source, none) at version (the
    one that method provides; None for none)."""
    minimum = ".".join(str(part) for part in V2_MIN_NCCL)
    if interpreter is None:
        if deepep_version != "v2":
            return _entry("nccl", "skip", "interpreter not read", "nothing known to undo: DeepEP V1 uses torch's "
                          "own NCCL (a V2 run's change is read with the interpreter, deepep_python)")
        return _entry("nccl", "change", "interpreter not read",
                      "unknown: provide NCCL %s for DeepEP V2 (nccl_method %s); give deepep_python to have it read"
                      % (version or ">= %s" % minimum, method))
    wheel = interpreter.get("nccl_wheel") or {}
    loaded = (interpreter.get("torch") or {}).get("nccl")
    replaced, upgraded_from = wheel.get("replaced_by"), wheel.get("upgraded_from")
    found = "torch loads NCCL %s%s" % (loaded or "?", "; %s %s%s" % (
        wheel["package"], wheel.get("version"), ", files replaced by the build of NCCL %s" % replaced.get("version")
        if replaced else ", upgraded from %s" % upgraded_from if upgraded_from else "") if wheel else "; no NCCL wheel")
    # The version to install again: from the nccl layer's record (torch's own), or from the stash of another pip.
    cut = wheel.get("cut_short")
    came_with = ("it was replacing" if wheel.get("pip_stash") else "its metadata names" if cut and upgraded_from ==
                 wheel.get("version") else "torch came with")
    if wheel.get("half_installed"):
        found = ("torch is missing its own NCCL; %s half-installed (a pip changing it was stopped before it finished; %s %s)"
                 % (wheel["package"], came_with, upgraded_from))
    # The layer installs a wheel with the interpreter's own pip (python -m pip); a probe that read none says so.
    no_pip = "pip" in interpreter and not interpreter["pip"]
    if deepep_version != "v2":
        if replaced:
            return _entry("nccl", "change", found, "put the wheel's own NCCL files back (DeepEP V1 after V2)")
        if upgraded_from and no_pip:
            return _entry("nccl", "blocked", found, "the interpreter has no pip to install %s==%s again with: add "
                          "it (python -m ensurepip)" % (wheel["package"], upgraded_from))
        if upgraded_from:
            why = ("the version a stopped pip was replacing" if wheel.get("pip_stash") else
                   "the version its metadata names, over its cut-short library" if came_with == "its metadata names"
                   else "the version torch came with (DeepEP V1 after V2)")
            return _entry("nccl", "change", found, "pip-install %s==%s again, %s" % (wheel["package"], upgraded_from,
                                                                                     why))
        return _entry("nccl", "ok", found, "nothing: DeepEP V1 uses torch's own NCCL")
    at_least = (version_tuple(loaded) or ()) >= V2_MIN_NCCL
    if method == "none":
        if at_least:
            return _entry("nccl", "ok", found, "nothing: nccl_method none, and torch's NCCL is >= %s" % minimum)
        return _entry("nccl", "blocked", found, "DeepEP V2 needs NCCL >= %s where torch loads it: set nccl_method "
                      "wheel or source" % minimum)
    if method == "wheel":
        if wheel and not replaced and wheel.get("version") == version and loaded == version:
            return _entry("nccl", "ok", found, "nothing: the wheel is NCCL %s" % version)
        if no_pip and not (wheel.get("version") == version and not replaced and not cut):
            return _entry("nccl", "blocked", found, "the interpreter has no pip to install NCCL %s with: add it "
                          "(python -m ensurepip), or set nccl_method: source" % version)
        if cut and cut["version"] == version:
            return _entry("nccl", "change", found, "pip-install %s==%s again, over its cut-short library (the version "
                          "before kept for DeepEP V1)" % (cut["package"], version))
        return _entry("nccl", "change", found, "%spip-install %s==%s where torch loads NCCL (the version before kept "
                      "for DeepEP V1)" % ("put the wheel's own files back, then " if replaced else "",
                                          wheel.get("package") or "the nvidia-nccl wheel", version))
    if replaced and replaced.get("version") == version and loaded == version:
        return _entry("nccl", "ok", found, "nothing: NCCL %s built from source is where torch loads it" % version)
    if cut:
        return _entry("nccl", "blocked", found, "the source method would keep the cut-short library as the wheel's "
                      "to put back for DeepEP V1: set nccl_method: wheel, or install %s==%s again first"
                      % (cut["package"], cut["version"]))
    return _entry("nccl", "change", found, "build NCCL %s from source for the GPUs' archs and put it in place of the "
                  "wheel's files (kept for DeepEP V1)" % (version or "(the source's version)"))


def with_nccl(plan, interpreter, deepep_version, method, version):
    """The plan with the nccl layer's entry before DeepEP's."""
    entry = plan_nccl(interpreter, deepep_version, method, version)
    at = next((index for index, item in enumerate(plan) if item["layer"] == "deepep"), len(plan))
    return plan[:at] + [entry] + plan[at:]


def layer_plan(node, cuda_version=""):
    """node: {gpu, rdma, topology, driver_params, cuda} as the discovery modules return them; cuda_version: the
    pinned CUDA release."""
    gpu, rdma = node["gpu"], node["rdma"]
    plan = [
        plan_doca_ofed(rdma),
        plan_cuda(node["cuda"], str(cuda_version or "")),
        plan_peermapping(gpu, rdma, node["driver_params"]),
    ]
    plan.extend(plan_build_layers(gpu, rdma, node["topology"]))
    return plan


def report_lines(node, plan):
    """A readable per-node report: GPUs, HCAs and ports, mapping, driver params, layers."""
    gpu, rdma, topology, params = node["gpu"], node["rdma"], node["topology"], node["driver_params"]
    lines = ["GPUs: %d (arch %s, driver %s)" % (
        len(gpu["gpus"]), gpu.get("torch_cuda_arch_list") or "unknown", gpu.get("driver_version") or "unknown")]
    for item in gpu["gpus"]:
        lines.append("  GPU%d %s %s numa %s cc %s" % (
            item["index"], item["pci_address"], item.get("name") or item["pci_device_id"], item["numa_node"],
            item.get("compute_cap") or "?"))
    lines.append("HCAs: %d (prefix %s, OFED %s)" % (
        len(rdma["hcas"]), rdma.get("hca_prefix") or "-", rdma.get("ofed_version") or "none"))
    for hca in rdma["hcas"]:
        for port in hca["ports"]:
            lines.append("  %s:%d %s %s %s %s gid_index %s netdevs %s" % (
                hca["name"], port["port"], hca["pci_address"], port["state"], port["link_layer"], port["rate"],
                port.get("roce_v2_ipv4_gid_index"), ",".join(hca["netdevs"]) or "-"))
    lines.append("Mapping: %s" % (topology.get("deepep_device_to_hca_mapping") or topology.get("msg")))
    for entry in topology.get("mapping", []):
        lines.append("  GPU%d -> %s:%d (%s)" % (entry["gpu"], entry["hca"], entry["port"], entry["distance"]))
    if params.get("driver_loaded"):
        lines.append("Driver params: RegistryDwords %r; %s" % (params.get("registry_dwords_live"), params["msg"]))
    else:
        lines.append("Driver params: %s" % params["msg"])
    lines.append("Layers:")
    for entry in plan:
        lines.append("  %-18s %-7s %s -- %s" % (entry["layer"], entry["status"], entry["found"], entry["action"]))
    return lines
