# -*- coding: utf-8 -*-
"""After side_effect (deepep_reboot=never), converge (auto) and idempotence in the QEMU VM: exactly one reboot,
both layers verified after it, the never run listed the node with both layers."""

from __future__ import annotations

import json
import os

REPORTS = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "reports")


def test_exactly_one_reboot(host):
    boots = host.file("/opt/moe-fixtures/boots").content_string.split()
    # The boot prepare ran in, then the one reboot of converge; the never run and idempotence rebooted nothing.
    assert len(boots) == 2 and boots[0] != boots[1]
    assert host.file("/proc/sys/kernel/random/boot_id").content_string.strip() == boots[1]


def test_never_run_listed_both_layers():
    with open(os.path.join(REPORTS, "never-summary.txt")) as handle:
        summary = handle.read()
    assert summary.startswith("vm-node needs a reboot (deepep_reboot=never, so not rebooted)")
    assert "doca_ofed: HCAs still enumerate as rocep" in summary and "nvidia_peermapping: PeerMappingOverride" in summary


def test_layers_verified_after_the_reboot():
    with open(os.path.join(REPORTS, "vm-node-system.json")) as handle:
        state = json.load(handle)
    assert state["deepep_reboot_pending"] is False
    assert state["doca_ofed_reboot_required"] is False and state["nvidia_peermapping_reboot_required"] is False
    assert state["nvidia_peermapping_state"] == "live"
    assert state["cuda_release"] == "12.9"


def test_driver_params_live_and_hcas_renamed(host):
    params = host.file("/opt/moe-fixtures/proc/driver/nvidia/params").content_string
    assert 'RegistryDwords: "PeerMappingOverride=1;"' in params
    assert sorted(host.file("/opt/moe-fixtures/sys/class/infiniband").listdir()) == sorted(
        "mlx5_%d" % i for i in range(8))


def test_initramfs_refreshed_for_the_conf_file(host):
    conf = host.file("/etc/modprobe.d/nvidia-deepep.conf")
    stamp = host.file("/var/lib/moe_infra_deepep/nvidia-peermapping.initramfs").content_string.strip()
    assert stamp == conf.sha256sum
    listing = host.check_output("lsinitramfs /boot/initrd.img-$(uname -r)")
    assert "etc/modprobe.d/nvidia-deepep.conf" in listing
