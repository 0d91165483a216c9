# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Discover RDMA HCAs from <sysfs_root>/class/infiniband."""

from __future__ import annotations

import os
import re

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.sysfs import (
    list_dir,
    read_attr,
    read_int,
    resolve_pci_path,
)

ROCE_V2 = "RoCE v2"
IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
DMABUF_DATA_DIRECT_SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"


def name_family(name):
    """'mlx5' for mlx5_*, 'rocep' for rocep* (rdma-core PCI naming of RoCE), else 'other'."""
    if name.startswith("mlx5"):
        return "mlx5"
    if name.startswith("rocep"):
        return "rocep"
    return "other"


def _state_word(value):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if not value:
        return None
    return value.split(":", 1)[-1].strip()


def _gid_number(name):
    return int(name) if name.isdigit() else -1


def read_gids(port_dir):
    """Non-empty GID table entries of a port: index, gid, type, netdev."""
    gids = []
    for entry in sorted(list_dir(os.path.join(port_dir, "gids")), key=_gid_number):
        if not entry.isdigit():
            continue
        gid = read_attr(os.path.join(port_dir, "gids", entry))
        if not gid or gid == EMPTY_GID:
            continue
        gids.append({
            "index": int(entry),
            "gid": gid,
            "type": read_attr(os.path.join(port_dir, "gid_attrs", "types", entry)),
            "netdev": read_attr(os.path.join(port_dir, "gid_attrs", "ndevs", entry)),
        })
    return gids


def roce_v2_ipv4_gid_index(gids):
    """Lowest GID index that is RoCE v2 with an IPv4-mapped address (what NVSHMEM_IB_GID_INDEX wants)."""
    for gid in gids:
        if gid["type"] == ROCE_V2 and gid["gid"].startswith(IPV4_MAPPED_PREFIX):
            return gid["index"]
    return None


def read_port(port_dir, number):
    link_layer = read_attr(os.path.join(port_dir, "link_layer"))
    gids = read_gids(port_dir)
    return {
        "port": number,
        "state": _state_word(read_attr(os.path.join(port_dir, "state"))),
        "phys_state": _state_word(read_attr(os.path.join(port_dir, "phys_state"))),
        "link_layer": link_layer,
        "rate": read_attr(os.path.join(port_dir, "rate")),
        "roce_v2_ipv4_gid_index": roce_v2_ipv4_gid_index(gids) if link_layer == "Ethernet" else None,
        "gids": gids,
        # In units of 4 bytes, as the IB spec counts them; None where the driver exposes no counters.
        "port_xmit_data": read_int(os.path.join(port_dir, "counters", "port_xmit_data"), base=10),
        "port_rcv_data": read_int(os.path.join(port_dir, "counters", "port_rcv_data"), base=10),
    }


def read_hca(sysfs_root, name):
    hca_dir = os.path.join(sysfs_root, "class", "infiniband", name)
    pci = resolve_pci_path(sysfs_root, os.path.join(hca_dir, "device"))
    ports = []
    for entry in list_dir(os.path.join(hca_dir, "ports")):
        if entry.isdigit():
            ports.append(read_port(os.path.join(hca_dir, "ports", entry), int(entry)))
    ports.sort(key=lambda port: port["port"])
    netdevs = list_dir(os.path.join(hca_dir, "device", "net"))
    virtual_function = os.path.exists(os.path.join(hca_dir, "device", "physfn"))
    return {
        "name": name,
        "family": name_family(name),
        "pci_address": pci.address if pci else None,
        "numa_node": pci.numa_node if pci else None,
        "netdevs": netdevs,
        "board_id": read_attr(os.path.join(hca_dir, "board_id")),
        "fw_ver": read_attr(os.path.join(hca_dir, "fw_ver")),
        "node_type": read_attr(os.path.join(hca_dir, "node_type")),
        "virtual_function": virtual_function,
        "ports": ports,
    }


def _natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def discover_hcas(sysfs_root):
    """Every RDMA device under <sysfs_root>/class/infiniband, in natural name order."""
    names = list_dir(os.path.join(sysfs_root, "class", "infiniband"))
    return [read_hca(sysfs_root, name) for name in sorted(names, key=_natural_key)]


def hca_prefix(hcas):
    """Value for NVSHMEM_HCA_PREFIX: the common name family of HCAs with an ACTIVE port.

    None when no HCA has an active port, or the active ones share no family.
    """
    active = [hca for hca in hcas if any(port["state"] == "ACTIVE" for port in hca["ports"])]
    families = sorted(set(hca["family"] for hca in active))
    if len(families) == 1 and families[0] != "other":
        return families[0]
    if not active:
        return None
    prefix = os.path.commonprefix([hca["name"] for hca in active])
    prefix = re.sub(r"[_\d]+$", "", prefix)
    return prefix or None


def header_has_dmabuf_data_direct(include_dirs):
    """Path of the first infiniband/mlx5_api.h that declares the IBGDA dma-buf symbol, and whether it does."""
    for include_dir in include_dirs:
        header = os.path.join(include_dir, "infiniband", "mlx5_api.h")
        text = read_attr(header)
        if text is not None:
            return header, DMABUF_DATA_DIRECT_SYMBOL in text
    return None, False


def parse_ofed_info(output):
    """First line of `ofed_info -s` without its trailing colon ('OFED-internal-25.01-0.6.0')."""
    for line in (output or "").splitlines():
        line = line.strip().rstrip(":")
        if line:
            return line
    return None


MELLANOX_VENDOR = "0x15b3"
# PCI classes of Mellanox functions that can carry RDMA: Ethernet controller, InfiniBand controller.
RDMA_PCI_CLASSES = ("0x0200", "0x0207")


def mellanox_pci_devices(sysfs_root):
    """PCI addresses of Mellanox network/InfiniBand functions, whether or not a driver has bound them
    (before DOCA, or with mlx5_ib not loaded, /sys/class/infiniband can be empty while the NICs are there)."""
    pci_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    found = []
    for address in sorted(list_dir(pci_dir)):
        device = os.path.join(pci_dir, address)
        if (read_attr(os.path.join(device, "vendor"), "") or "").lower() != MELLANOX_VENDOR:
            continue
        if (read_attr(os.path.join(device, "class"), "") or "").lower()[:6] in RDMA_PCI_CLASSES:
            found.append(address)
    return found
