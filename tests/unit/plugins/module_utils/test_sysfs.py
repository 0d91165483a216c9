# -*- coding: utf-8 -*-
from __future__ import annotations

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.sysfs import (
    PciPath,
    normalize_pci_address,
    pci_distance,
    resolve_pci_path,
)
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import SysfsTree


@pytest.mark.parametrize("raw, expected", [
    ("00000000:1B:00.0", "0000:1b:00.0"),
    ("0000:1b:00.0", "0000:1b:00.0"),
    ("1b:00.0", "0000:1b:00.0"),
    ("00010000:01:00.0", "10000:01:00.0"),
])
def test_normalize_pci_address(raw, expected):
    assert normalize_pci_address(raw) == expected


def rc(chain, root="pci0000:00", numa=0):
    return PciPath(root, chain, numa)


@pytest.mark.parametrize("gpu, nic, expected", [
    # Two downstream ports of one switch.
    (rc(["a", "u", "d1", "gpu"]), rc(["a", "u", "d2", "nic"]), "PIX"),
    # Functions of one device on one root port.
    (rc(["a", "f0"]), rc(["a", "f1"]), "PIX"),
    # One more switch level on one side.
    (rc(["a", "u", "d1", "u2", "d3", "gpu"]), rc(["a", "u", "d2", "nic"]), "PXB"),
    # Different root ports, one host bridge.
    (rc(["a", "gpu"]), rc(["b", "nic"]), "PHB"),
    # Directly on the host bridge (the H200 test machine).
    (rc(["gpu"]), rc(["nic"]), "PHB"),
    # Different host bridges, same NUMA node; then different NUMA nodes.
    (rc(["a", "gpu"]), rc(["a", "nic"], root="pci0000:40"), "NODE"),
    (rc(["a", "gpu"]), rc(["a", "nic"], root="pci0000:80", numa=1), "SYS"),
])
def test_pci_distance(gpu, nic, expected):
    assert pci_distance(gpu, nic) == expected
    assert pci_distance(nic, gpu) == expected


def test_resolve_follows_relative_kernel_symlinks(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.root_complex("pci0000:80", numa_node=1).bridge("0000:80:01.0").gpu("0000:81:00.0")
    path = resolve_pci_path(str(tmp_path), str(tmp_path / "bus/pci/devices/0000:81:00.0"))
    assert (path.root_complex, path.chain, path.numa_node) == ("pci0000:80", ["0000:80:01.0", "0000:81:00.0"], 1)
    link = (tmp_path / "bus/pci/devices/0000:81:00.0").readlink()
    assert str(link) == "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0"


def test_resolve_outside_devices_is_none(tmp_path):
    (tmp_path / "devices").mkdir()
    (tmp_path / "elsewhere").mkdir()
    assert resolve_pci_path(str(tmp_path), str(tmp_path / "elsewhere")) is None
