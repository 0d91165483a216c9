# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Compute capabilities of data-center GPUs and the arch strings builds want."""

from __future__ import annotations

import re

# Product name fragments, most specific first (GB200 before B200, H100 before H10).
NAME_TO_COMPUTE_CAP = (
    ("GB300", "10.3"),
    ("B300", "10.3"),
    ("GB200", "10.0"),
    ("B200", "10.0"),
    ("B100", "10.0"),
    ("GH200", "9.0"),
    ("H200", "9.0"),
    ("H100", "9.0"),
    ("H800", "9.0"),
    ("H20", "9.0"),
    ("L40", "8.9"),
    ("L4", "8.9"),
    ("A100", "8.0"),
    ("A800", "8.0"),
    ("A30", "8.0"),
    ("A10", "8.6"),
    ("V100", "7.0"),
)

# PCI device ids (vendor 0x10de) for nodes where nvidia-smi is not there yet.
PCI_DEVICE_TO_COMPUTE_CAP = {
    "0x20b0": "8.0",  # A100 SXM4 40GB
    "0x20b2": "8.0",  # A100 SXM4 80GB
    "0x20b5": "8.0",  # A100 PCIe 80GB
    "0x2330": "9.0",  # H100 SXM5 80GB
    "0x2331": "9.0",  # H100 PCIe
    "0x2335": "9.0",  # H200 SXM 141GB
    "0x2901": "10.0",  # B200
}

COMPUTE_CAP_RE = re.compile(r"^(\d{1,2})\.(\d)$")


class ArchError(ValueError):
    """An arch value that is not a CUDA compute capability."""


def compute_cap_from_name(name):
    """'NVIDIA H200' -> '9.0'; None when the product is not known."""
    upper = (name or "").upper()
    for fragment, cap in NAME_TO_COMPUTE_CAP:
        if re.search(r"(^|[^A-Z0-9])%s([^0-9]|$)" % re.escape(fragment), upper):
            return cap
    return None


def normalize_compute_cap(value):
    """Return a compute capability in the 'major.minor' form nvidia-smi prints ('9.0', '10.0').

    Raises ArchError, naming the value, for anything else ('10', 'sm90', '90').
    """
    text = str(value).strip()
    match = COMPUTE_CAP_RE.match(text)
    if match:
        return "%d.%s" % (int(match.group(1)), match.group(2))
    raise ArchError(
        "%r is not a CUDA compute capability; use the 'major.minor' form, e.g. '9.0' for H100/H200, "
        "'10.0' for B200" % (value,))


def compute_cap_of(value):
    """A compute capability from either a capability ('9.0', 'sm_90') or a GPU name ('NVIDIA B200')."""
    try:
        return normalize_compute_cap(value)
    except ArchError:
        cap = compute_cap_from_name(str(value))
        if cap is None:
            raise ArchError(
                "%r is neither a CUDA compute capability (e.g. '9.0') nor a known GPU name "
                "(e.g. 'NVIDIA H200'); set the arch explicitly" % (value,))
        return cap


def arch_list(values):
    """Sorted unique compute capabilities for a list (or one) of capabilities or GPU names."""
    if isinstance(values, (str, int, float)):
        values = [values]
    caps = set(compute_cap_of(value) for value in values)
    return sorted(caps, key=lambda cap: tuple(int(part) for part in cap.split(".")))


def torch_cuda_arch_list(values):
    """TORCH_CUDA_ARCH_LIST value: '9.0' or '9.0;10.0'."""
    return ";".join(arch_list(values))


def cmake_cuda_architectures(values):
    """CMAKE_CUDA_ARCHITECTURES value: '90' or '90;100'."""
    return ";".join(cap.replace(".", "") for cap in arch_list(values))
