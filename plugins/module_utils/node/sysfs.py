# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Read the kernel's sysfs layout: attributes, PCI device paths, NUMA nodes.

Every function takes paths under a caller-given root so unit tests can point
them at fixture trees laid out exactly like /sys (relative symlinks included).
"""

from __future__ import annotations

import os
import re

PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ROOT_COMPLEX_RE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")


def read_attr(path, default=None):
    """Return a sysfs attribute stripped, or default when absent or unreadable.

    Some attributes (e.g. gid_attrs/types/N of an empty GID slot) exist but
    fail with EINVAL on read; those count as absent.
    """
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (OSError, IOError):
        return default


def read_int(path, default=None, base=0):
    """Read an integer attribute (decimal, or hex with 0x prefix when base=0)."""
    value = read_attr(path)
    if value is None or value == "":
        return default
    try:
        return int(value, base)
    except ValueError:
        return default


def list_dir(path):
    """Sorted entries of a directory, empty when it does not exist."""
    try:
        return sorted(os.listdir(path))
    except (OSError, IOError):
        return []


def normalize_pci_address(address):
    """Lower-case BDF with a 4-digit domain ('00000000:1B:00.0' -> '0000:1b:00.0')."""
    if not address:
        return None
    address = address.strip().lower()
    parts = address.split(":")
    if len(parts) == 3:
        return "%04x:%s:%s" % (int(parts[0], 16), parts[1], parts[2])
    if len(parts) == 2:
        return "0000:%s:%s" % (parts[0], parts[1])
    return address


def pci_sort_key(address):
    """Sort key in PCI bus order (domain, bus, device, function) as nvidia-smi numbers GPUs."""
    domain, bus, devfn = address.split(":")
    dev, fn = devfn.split(".")
    return (int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16))


class PciPath(object):
    """A PCI device's place in the PCIe hierarchy, from its resolved sysfs path.

    ``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0``
    gives root_complex ``pci0000:00`` and chain
    ``[0000:00:01.0, 0000:01:00.0, 0000:02:00.0, 0000:03:00.0]`` (root port,
    switch upstream port, switch downstream port, the device itself).
    """

    def __init__(self, root_complex, chain, numa_node):
        self.root_complex = root_complex
        self.chain = chain
        self.numa_node = numa_node

    @property
    def address(self):
        return self.chain[-1] if self.chain else None

    def __repr__(self):
        return "PciPath(%r, %r, numa=%r)" % (self.root_complex, self.chain, self.numa_node)


def resolve_pci_path(sysfs_root, device_link):
    """Resolve a sysfs link (e.g. class/infiniband/mlx5_0/device) to a PciPath.

    Returns None when the link does not lead to a PCI device under
    ``<sysfs_root>/devices``.
    """
    real = os.path.realpath(device_link)
    devices_root = os.path.realpath(os.path.join(sysfs_root, "devices"))
    if not real.startswith(devices_root + os.sep):
        return None
    parts = real[len(devices_root) + 1:].split(os.sep)
    root_complex = None
    chain = []
    for part in parts:
        if ROOT_COMPLEX_RE.match(part):
            root_complex = part
            chain = []
        elif PCI_ADDRESS_RE.match(part):
            chain.append(part)
        elif chain:
            # Past the PCI device (e.g. .../0000:1b:00.0/infiniband/mlx5_0).
            break
    if not chain:
        return None
    device_dir = os.path.join(devices_root, *parts[:parts.index(chain[-1]) + 1])
    numa = read_int(os.path.join(device_dir, "numa_node"), default=-1, base=10)
    return PciPath(root_complex, chain, numa)


# nvidia-smi topo -m legend, nearest first.
DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")


def pci_distance(first, second):
    """Distance between two PCI devices in ``nvidia-smi topo`` terms.

    PIX: at most one PCIe switch between them; PXB: several switches, no host
    bridge; PHB: through the PCIe host bridge (same root complex); NODE:
    between host bridges of one NUMA node; SYS: across NUMA nodes.
    """
    if first.root_complex != second.root_complex:
        if first.numa_node == second.numa_node:
            return "NODE"
        return "SYS"
    common = 0
    for a, b in zip(first.chain, second.chain):
        if a != b:
            break
        common += 1
    if common == 0:
        # Different root ports (or devices directly on the host bridge).
        return "PHB"
    # Bridges between each device and the deepest shared bridge. One on each
    # side is the pair of downstream ports of a single switch.
    below_first = len(first.chain) - common - 1
    below_second = len(second.chain) - common - 1
    if max(below_first, below_second) <= 1:
        return "PIX"
    return "PXB"
