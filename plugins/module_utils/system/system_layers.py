# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Decisions of the system layers (doca_ofed, nvidia_driver, nvidia_peermapping) and the reboot contract. Pure: inputs are
what the discovery modules return, outputs say what to do and why, so every branch has a unit test."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

DOCA_POLICIES = ("auto", "always", "never")
REBOOT_POLICIES = ("auto", "never")


class DecisionError(ValueError):
    """Input a decision cannot be made from; the message names the variable and what is accepted."""


# The oldest driver branch each case needs: Blackwell GPUs (compute capability 10.x) came with R570; a CUDA 13
# toolkit needs R580 and CUDA 12 toolkits R525 (NVIDIA's CUDA Compatibility guide, minor-version compatibility).
DRIVER_FOR_ARCH = ((10, 570), (9, 525))
DRIVER_FOR_CUDA_MAJOR = {13: 580, 12: 525}


def _major(text):
    match = re.match(r"\s*(\d+)", str(text or ""))
    return int(match.group(1)) if match else None


def driver_branches_needed(compute_caps, cuda_releases):
    """[(branch, why)] the GPUs (compute capabilities like '10.0') and the CUDA releases (the node's, the pinned
    one) need; the largest branch is the one to have."""
    needs = []
    majors = [_major(cap) for cap in compute_caps or []]
    for major, branch in DRIVER_FOR_ARCH:
        if any(found is not None and found >= major for found in majors):
            needs.append((branch, "compute capability %d.x" % major))
            break
    for release in cuda_releases or []:
        major = _major(release)
        if release and major in DRIVER_FOR_CUDA_MAJOR:
            needs.append((DRIVER_FOR_CUDA_MAJOR[major], "CUDA %s" % release))
    return needs


def driver_packages(branch):
    """What the nvidia_driver layer installs from NVIDIA's CUDA repository, as Google's A4 VM blueprint does for
    plain images: the open kernel modules and the utilities (nvidia-smi) of one branch."""
    return ["nvidia-open-%s" % branch, "nvidia-utils-%s" % branch]


def driver_decision(gpu, params, cuda_releases=(), install=False, branch="", report_only=False):
    """The decision below, with the layer's report line (report) and the reason it gives the reboot play
    (reboot_reason, '' for none: an install loads only with a reboot; nothing is installed in report-only)."""
    decision = _driver_decision(gpu, params, cuda_releases, install, branch)
    installs = decision["action"] == "install" and not report_only
    return dict(decision, report=("would: " if decision["action"] == "install" and report_only else "") + decision["msg"],
                reboot_reason="%s installed, no NVIDIA driver loaded" % " ".join(decision["packages"]) if installs else "")


def _driver_decision(gpu, params, cuda_releases=(), install=False, branch=""):
    """What the nvidia_driver layer does on this node.

    gpu: nvidia_gpu_info's result (gpus with compute_cap, driver_version); params: nvidia_driver_params' query
    (driver_loaded); cuda_releases: the node's toolkit and the pinned one; install: nvidia_driver_install;
    branch: nvidia_driver_branch. action: skip | nothing | install (then reboot) | refuse (preflight's DRIVER check
    stops such a node before any change; said here too for a run of this layer alone).
    """
    gpus = gpu.get("gpus") or []
    needs = driver_branches_needed([g.get("compute_cap") for g in gpus], cuda_releases)
    need = max(needs) if needs else None
    wanted = _major(branch)
    if install and (wanted is None or str(branch).strip() != str(wanted)):
        raise DecisionError("nvidia_driver_branch: %r is not a driver branch like 580" % (branch,))
    if install and need and wanted < need[0]:
        raise DecisionError("nvidia_driver_branch: %s is below R%d, which %s needs: set %d or later"
                            % (wanted, need[0], need[1], need[0]))
    base = {"branch": wanted if install else None, "packages": driver_packages(wanted) if install else [],
            "needed": need[0] if need else None, "why": need[1] if need else ""}
    if not gpus:
        return dict(base, action="skip", packages=[], msg="skipped: no NVIDIA GPU")
    version = gpu.get("driver_module_version") or gpu.get("driver_version")
    loaded = params.get("driver_loaded") or version
    if loaded:
        major = _major(version)
        if need and major is not None and major < need[0]:
            return dict(base, action="refuse", packages=[],
                        msg="driver %s loaded, below R%d which %s needs: not replaced by this layer (use an image "
                            "with a newer driver, or remove it and set nvidia_driver_install)"
                            % (version, need[0], need[1]))
        return dict(base, action="nothing", packages=[],
                    msg="nothing: driver %s loaded" % (version or "(version not read)"))
    if not install:
        return dict(base, action="refuse",
                    msg="no NVIDIA driver loaded: use an image with NVIDIA's driver, or set nvidia_driver_install "
                        "to install it")
    return dict(base, action="install",
                msg="no NVIDIA driver loaded: install %s from NVIDIA's CUDA repository, hold them, reboot"
                    % " ".join(base["packages"]))


def peermapping_decision(hca_count, params, force=False, report_only=False, driver_reboot_pending=False,
                         conf_file="", settings=()):
    """Whether PeerMappingOverride is required here and in which state it is; the layer's report line and the reason
    it gives the reboot play ('' for none).

    params: what nvidia_driver_params returned (query, or present after writing the conf file).
    state: live | configured_not_live | absent | driver_not_loaded. driver_reboot_pending: the nvidia_driver layer
    installed a driver in this run that loads at the reboot (then the regkey is checked after it too). conf_file and
    settings (the registry keys and module parameters configured) only word the reboot reason.
    """
    required = bool(force) or int(hca_count) > 0
    why = "forced (nvidia_peermapping_force)" if force else (
        "%d RDMA HCA(s): IBGDA needs the GPU to map the NIC's doorbells" % hca_count if hca_count
        else "no RDMA HCA: IBGDA is not used, so the regkey is not required")
    if not params.get("driver_loaded"):
        state = "driver_not_loaded"
    elif params.get("live"):
        state = "live"
    elif params.get("configured"):
        state = "configured_not_live"
    else:
        state = "absent"
    # The driver applies modprobe.d when it loads, so a driver that is not loaded needs no reboot.
    reboot_required = bool(required and params.get("reboot_required"))
    if state == "live":
        action = "nothing: live in /proc/driver/nvidia/params"
    elif not required:
        action = "nothing: not required"
    elif state == "driver_not_loaded":
        action = "write the conf file; it applies when the driver loads"
    elif reboot_required:
        action = "reboot: configured in modprobe.d, not live"
    else:
        action = "write the conf file, refresh the initramfs, reboot"
    live = params.get("registry_dwords_live")
    reboots = reboot_required or (required and state == "driver_not_loaded" and bool(driver_reboot_pending))
    reboot_reason = ("%s configured in %s, live RegistryDwords %r" % (",".join(settings), conf_file, live)
                     if reboots and not report_only else "")
    report = "%s; %s (%s); RegistryDwords live %s; %s%s" % (
        state, "required" if required else "not required", why, json.dumps(live),
        "would: " if report_only and required and state != "live" else "", action)
    return {"required": required, "why": why, "state": state, "reboot_required": reboot_required,
            "action": action, "registry_dwords_live": live, "reboot_reason": reboot_reason, "report": report}


def _mellanox_present(rdma):
    return bool(rdma.get("hcas")) or bool(rdma.get("mellanox_pci_devices"))


def doca_decision(rdma, policy="auto"):
    """Whether DOCA-OFED is to be installed on this node, and why.

    rdma: what rdma_hca_info returned. policy: auto (install where the node shows it lacks DOCA),
    always (install wherever Mellanox hardware is), never.
    """
    if policy not in DOCA_POLICIES:
        raise DecisionError("doca_ofed_policy: %r is not one of %s" % (policy, ", ".join(DOCA_POLICIES)))
    hcas = rdma.get("hcas") or []
    installed = rdma.get("ofed_version")
    rocep = sorted(h["name"] for h in hcas if h.get("family") == "rocep")
    reasons = []
    if rocep:
        reasons.append("HCAs named %s, not mlx5_* (KF01)" % ",".join(rocep))
    if hcas and not rdma.get("dmabuf_data_direct"):
        reasons.append("rdma-core headers lack MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (KF19)")
    if not _mellanox_present(rdma):
        return {"install": False, "skip": True, "reasons": [], "installed": installed,
                "msg": "skipped: no Mellanox hardware (no HCA under /sys/class/infiniband, no PCI vendor 0x15b3)"}
    if policy == "never":
        would = "; would install for: " + "; ".join(reasons) if reasons else ""
        return {"install": False, "skip": True, "reasons": reasons, "installed": installed,
                "msg": "skipped: doca_ofed_policy=never" + would}
    if policy == "always":
        reasons.append("doca_ofed_policy=always")
    if not reasons:
        return {"install": False, "skip": False, "reasons": [], "installed": installed,
                "msg": "nothing to do: mlx5 names and IBGDA-capable rdma-core (OFED %s)" % (installed or "distro")}
    return {"install": True, "skip": False, "reasons": reasons, "installed": installed,
            "msg": "install DOCA-OFED: " + "; ".join(reasons)}


def doca_reboot_reason(rdma):
    """After DOCA is installed: why the node still needs a reboot (its mlx5 driver loads at boot), or ''."""
    hcas = rdma.get("hcas") or []
    rocep = sorted(h["name"] for h in hcas if h.get("family") == "rocep")
    if rocep:
        return "HCAs still enumerate as %s: DOCA's mlx5 driver takes over at boot" % ",".join(rocep)
    return ""


def doca_verify_problems(rdma):
    """After the reboot: HCAs must be mlx5_* with at least one ACTIVE port each. Returns the problems."""
    hcas = rdma.get("hcas") or []
    if not hcas:
        return ["no HCA under /sys/class/infiniband (KF14: mlx5_core/mlx5_ib not loaded?)"]
    problems = []
    for hca in hcas:
        if hca.get("family") != "mlx5":
            problems.append("%s is not an mlx5_* name (KF01)" % hca["name"])
        if not any(port.get("state") == "ACTIVE" for port in hca.get("ports", [])):
            problems.append("%s has no ACTIVE port" % hca["name"])
    return problems


def dkms_problems(status_output, kernel, modules):
    """`dkms status` output -> the modules not installed for the running kernel.

    Lines look like `mlnx-ofed-kernel/25.10.OFED.25.10.1.7.1, 6.8.0-1015-gcp, x86_64: installed`
    (older dkms: `name, version, kernel, arch: installed`).
    """
    built = set()
    for line in (status_output or "").splitlines():
        head, sep, state = line.rpartition(":")
        if not sep or state.strip().split(" ")[0] != "installed":
            continue
        fields = [field.strip() for field in head.split(",")]
        name = fields[0].split("/")[0]
        if kernel in fields[1:]:
            built.add(name)
    return ["%s is not built for the running kernel %s (dkms status)" % (name, kernel)
            for name in modules if name not in built]


def apt_origin(url):
    """The origin apt pins match for a repository URL: its host; '' for file: repositories."""
    return urlsplit(url).hostname or ""


def reboot_plan(policy, reasons, rebooted=False):
    """reasons: {layer: why}. -> {action: none|reboot|pending|already_rebooted, layers, msg}."""
    if policy not in REBOOT_POLICIES:
        raise DecisionError("deepep_reboot: %r is not one of %s" % (policy, ", ".join(REBOOT_POLICIES)))
    pending = {layer: why for layer, why in (reasons or {}).items() if why}
    layers = sorted(pending)
    text = "; ".join("%s: %s" % (layer, pending[layer]) for layer in layers)
    if not pending:
        return {"action": "none", "layers": [], "msg": "no layer needs a reboot"}
    if rebooted:
        return {"action": "already_rebooted", "layers": layers,
                "msg": "rebooted once already in this run; still asked for by %s" % text}
    if policy == "never":
        return {"action": "pending", "layers": layers,
                "msg": "needs a reboot (deepep_reboot=never, so not rebooted): %s" % text}
    return {"action": "reboot", "layers": layers, "msg": "rebooting once for %s" % text}


def gdrdrv_problems(container_markers, nvidia_src_dirs, kernel_headers):
    """Why the gdrdrv kernel module cannot be built here; [] when it can.

    container_markers: marker files that exist (/run/.containerenv, /.dockerenv): a container must not carry a
    kernel module (KF35). nvidia_src_dirs: NVIDIA kernel source dirs found (nv-p2p.h, KF10). kernel_headers:
    whether /lib/modules/<kernel>/build exists.
    """
    problems = []
    if container_markers:
        problems.append("this is a container (%s): build gdrdrv on the host, never into the image (KF35)"
                        % ", ".join(container_markers))
    if not nvidia_src_dirs:
        problems.append("no NVIDIA kernel source with nv-p2p.h under /usr/src (KF10): install "
                        "nvidia-kernel-source-<driver branch> or set gdrcopy_nvidia_src_dir")
    if not kernel_headers:
        problems.append("no kernel headers for the running kernel (/lib/modules/<kernel>/build)")
    return problems
