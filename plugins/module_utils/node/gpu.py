# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Discover NVIDIA GPUs from <sysfs_root>/bus/pci/devices, enriched by nvidia-smi."""

from __future__ import annotations

import csv
import os

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.cuda_arch import (
    PCI_DEVICE_TO_COMPUTE_CAP,
    compute_cap_from_name,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.sysfs import (
    list_dir,
    normalize_pci_address,
    pci_sort_key,
    read_attr,
    resolve_pci_path,
)

NVIDIA_VENDOR = "0x10de"
# PCI class 0x0300xx (VGA) and 0x0302xx (3D controller: every data-center GPU).
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")

NVIDIA_SMI_FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "compute_cap",
    "driver_version",
    "memory.total",
    "uuid",
)
NVIDIA_SMI_QUERY = [
    "--query-gpu=%s" % ",".join(NVIDIA_SMI_FIELDS),
    "--format=csv,noheader,nounits",
]


def discover_gpus(sysfs_root):
    """NVIDIA display/3D devices in PCI bus order, indexed as nvidia-smi and CUDA_DEVICE_ORDER=PCI_BUS_ID do."""
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    found = []
    for entry in list_dir(devices_dir):
        device_dir = os.path.join(devices_dir, entry)
        if read_attr(os.path.join(device_dir, "vendor")) != NVIDIA_VENDOR:
            continue
        pci_class = read_attr(os.path.join(device_dir, "class"), "")
        if not pci_class.startswith(GPU_CLASS_PREFIXES):
            continue
        pci = resolve_pci_path(sysfs_root, device_dir)
        address = normalize_pci_address(entry)
        device_id = read_attr(os.path.join(device_dir, "device"))
        found.append({
            "pci_address": address,
            "numa_node": pci.numa_node if pci else read_attr(os.path.join(device_dir, "numa_node")),
            "pci_device_id": device_id,
            "pci_class": pci_class,
            "name": None,
            "compute_cap": PCI_DEVICE_TO_COMPUTE_CAP.get(device_id),
            "compute_cap_source": "pci_device_id" if device_id in PCI_DEVICE_TO_COMPUTE_CAP else None,
            "driver_version": None,
            "memory_total_mib": None,
            "uuid": None,
        })
    found.sort(key=lambda gpu: pci_sort_key(gpu["pci_address"]))
    for index, gpu in enumerate(found):
        gpu["index"] = index
    return found


def parse_nvidia_smi(output):
    """Rows of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` keyed by PCI address."""
    rows = {}
    for record in csv.reader((output or "").splitlines()):
        if len(record) != len(NVIDIA_SMI_FIELDS):
            continue
        values = dict(zip(NVIDIA_SMI_FIELDS, (field.strip() for field in record)))
        address = normalize_pci_address(values["pci.bus_id"])
        memory = values["memory.total"]
        rows[address] = {
            "smi_index": int(values["index"]) if values["index"].isdigit() else None,
            "name": values["name"],
            "compute_cap": values["compute_cap"] if values["compute_cap"] not in ("", "[N/A]") else None,
            "driver_version": values["driver_version"],
            "memory_total_mib": int(memory) if memory.isdigit() else None,
            "uuid": values["uuid"],
        }
    return rows


def enrich_from_nvidia_smi(gpus, rows):
    """Merge nvidia-smi rows into the sysfs GPU list; GPUs nvidia-smi does not show keep sysfs data."""
    for gpu in gpus:
        row = rows.get(gpu["pci_address"])
        if not row:
            continue
        gpu["name"] = row["name"]
        gpu["driver_version"] = row["driver_version"]
        gpu["memory_total_mib"] = row["memory_total_mib"]
        gpu["uuid"] = row["uuid"]
        if row["compute_cap"]:
            gpu["compute_cap"] = row["compute_cap"]
            gpu["compute_cap_source"] = "nvidia-smi"
        elif compute_cap_from_name(row["name"]) and not gpu["compute_cap"]:
            gpu["compute_cap"] = compute_cap_from_name(row["name"])
            gpu["compute_cap_source"] = "name"
    return gpus
