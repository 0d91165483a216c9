# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Decisions of the system layers (doca_ofed, nvidia_peermapping) and the reboot contract. Pure: inputs are
what the discovery modules return, outputs say what to do and why, so every branch has a unit test."""

from __future__ import annotations

from urllib.parse import urlsplit

DOCA_POLICIES = ("auto", "always", "never")
REBOOT_POLICIES = ("auto", "never")


class DecisionError(ValueError):
    """Input a decision cannot be made from; the message names the variable and what is accepted."""


def peermapping_decision(hca_count, params, force=False):
    """Whether PeerMappingOverride is required here and in which state it is.

    params: what nvidia_driver_params returned (query, or present after writing the conf file).
    state: live | configured_not_live | absent | driver_not_loaded.
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
    return {"required": required, "why": why, "state": state, "reboot_required": reboot_required,
            "action": action, "registry_dwords_live": params.get("registry_dwords_live")}


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
