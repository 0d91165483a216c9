# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""What the discovery modules read, as functions of a module object (for run_command, get_bin_path and
fail_json): nvidia_gpu_info, rdma_hca_info, gpu_nic_topology_info and cuda_toolkit_info each return one of these;
deepep_node_info and deepep_facts return all of them from one call (read_node)."""

from __future__ import annotations

import json
import os
import re
import time

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.cuda_arch import (
    cmake_cuda_architectures,
    torch_cuda_arch_list,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.gpu import (
    NVIDIA_SMI_QUERY,
    discover_gpus,
    enrich_from_nvidia_smi,
    parse_nvidia_smi,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.nvidia_params import (
    desired_settings,
    query_driver_params,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.rdma import (
    discover_hcas,
    hca_prefix,
    header_has_dmabuf_data_direct,
    mellanox_pci_devices,
    parse_ofed_info,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.topology import (
    deepep_mapping_string,
    distance_matrix,
    map_gpus_to_nics,
    nvshmem_hca_list,
    select_link_layer,
    usable_ports,
)

RELEASE_RE = re.compile(r"release (\d+)\.(\d+)")


def loaded_module_version(sysfs_root):
    """The loaded nvidia kernel module's version (<sysfs>/module/nvidia/version), None when none is loaded."""
    try:
        with open(os.path.join(sysfs_root, "module", "nvidia", "version")) as handle:
            return handle.read().strip() or None
    except (OSError, IOError):
        return None


def gpu_info(module, sysfs_root, nvidia_smi="nvidia-smi"):
    """NVIDIA GPUs from sysfs, enriched by nvidia-smi where it runs."""
    gpus = discover_gpus(sysfs_root)
    notes = []
    smi_path = None
    if gpus:
        smi_path = module.get_bin_path(nvidia_smi)
        if smi_path:
            rc, out, err = module.run_command([smi_path] + NVIDIA_SMI_QUERY, environ_update={"LC_ALL": "C"})
            if rc == 0:
                rows = parse_nvidia_smi(out)
                enrich_from_nvidia_smi(gpus, rows)
                missing = [gpu["pci_address"] for gpu in gpus if gpu["pci_address"] not in rows]
                if missing:
                    notes.append("nvidia-smi does not show GPUs at %s (driver not bound?)" % ", ".join(missing))
            else:
                notes.append("%s failed (rc=%s): %s" % (smi_path, rc, (err or out).strip()))
                smi_path = None
        else:
            notes.append("nvidia-smi not found: name, driver and memory unknown")
    caps = [gpu["compute_cap"] for gpu in gpus if gpu["compute_cap"]]
    if gpus and len(caps) < len(gpus):
        notes.append("compute capability unknown for %d of %d GPUs" % (len(gpus) - len(caps), len(gpus)))
    driver_versions = [gpu["driver_version"] for gpu in gpus if gpu["driver_version"]]
    return dict(
        driver_module_version=loaded_module_version(sysfs_root),
        gpus=gpus,
        gpu_count=len(gpus),
        compute_caps=sorted(set(caps), key=lambda cap: tuple(int(p) for p in cap.split("."))),
        torch_cuda_arch_list=torch_cuda_arch_list(caps) if caps else "",
        cmake_cuda_architectures=cmake_cuda_architectures(caps) if caps else "",
        driver_version=driver_versions[0] if driver_versions else None,
        nvidia_smi=smi_path,
        notes=notes,
    )


def ofed_version(module):
    ofed_info = module.get_bin_path("ofed_info")
    if not ofed_info:
        return None
    rc, out, dummy = module.run_command([ofed_info, "-s"], environ_update={"LC_ALL": "C"})
    return parse_ofed_info(out) if rc == 0 else None


def rdma_info(module, sysfs_root, include_dirs):
    """RDMA HCAs, the OFED version and whether rdma-core's header has the DOCA symbol."""
    hcas = discover_hcas(sysfs_root)
    header, has_symbol = header_has_dmabuf_data_direct(include_dirs)
    return dict(
        hcas=hcas,
        hca_prefix=hca_prefix(hcas),
        ofed_version=ofed_version(module),
        mlx5_api_header=header,
        dmabuf_data_direct=has_symbol,
        # The include directories with rdma-core's direct-verbs header (NVSHMEM's IBGDA transport needs it).
        mlx5dv_include_dirs=[d for d in include_dirs if os.path.isfile(os.path.join(d, "infiniband", "mlx5dv.h"))],
        mellanox_pci_devices=mellanox_pci_devices(sysfs_root),
    )


def check_patterns(module, name, patterns):
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            module.fail_json(msg="%s: %r is not a valid regular expression: %s" % (name, pattern, exc))


def topology_info(module, sysfs_root, hca_include=(), hca_exclude=(), link_layer="auto"):
    """Each GPU's nearest usable NIC port."""
    check_patterns(module, "hca_include", hca_include)
    check_patterns(module, "hca_exclude", hca_exclude)
    gpus = discover_gpus(sysfs_root)
    hcas = discover_hcas(sysfs_root)
    link_layer = select_link_layer(hcas, link_layer)
    nics, skipped = usable_ports(hcas, link_layer, list(hca_include), list(hca_exclude))
    mapping = map_gpus_to_nics(gpus, nics, sysfs_root)
    if not gpus:
        msg = "no NVIDIA GPU found under %s: nothing to map" % sysfs_root
    elif not hcas:
        msg = "no RDMA HCA found under %s/class/infiniband: nothing to map (single-node only)" % sysfs_root
    elif not nics:
        msg = "none of the %d HCAs has a usable port (%s): nothing to map" % (
            len(hcas), "; ".join("%s:%s %s" % (s["hca"], s["port"], s["reason"]) for s in skipped))
    else:
        msg = "mapped %d GPUs to %d %s ports" % (
            len(mapping), len(set((m["hca"], m["port"]) for m in mapping)), link_layer)
    return dict(
        gpus=[{"index": g["index"], "pci_address": g["pci_address"], "numa_node": g["numa_node"]} for g in gpus],
        hcas=[{
            "name": n["hca"], "port": n["port"], "pci_address": n["pci_address"], "numa_node": n["numa_node"],
            "link_layer": n["link_layer"], "state": n["state"],
        } for n in nics],
        skipped_ports=skipped,
        link_layer=link_layer,
        mapping=mapping,
        distances=distance_matrix(gpus, nics, sysfs_root),
        deepep_device_to_hca_mapping=deepep_mapping_string(mapping),
        nvshmem_hca_list=nvshmem_hca_list(mapping),
        msg=msg,
    )


def parse_nvcc_release(output):
    """'Cuda compilation tools, release 13.0, V13.0.88' -> '13.0'."""
    match = RELEASE_RE.search(output or "")
    return "%s.%s" % match.groups() if match else None


def cuda_info(module, cuda_home):
    """The toolkit under cuda_home (else the nvcc on PATH): release, full version, CCCL include directory."""
    candidate = os.path.join(cuda_home, "bin", "nvcc")
    nvcc = candidate if os.access(candidate, os.X_OK) else module.get_bin_path("nvcc")
    release = None
    if nvcc:
        rc, out, dummy = module.run_command([nvcc, "--version"], environ_update={"LC_ALL": "C"})
        release = parse_nvcc_release(out) if rc == 0 else None
    found = release is not None
    home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if found else None
    full_version = None
    cccl = None
    if home:
        try:
            with open(os.path.join(home, "version.json")) as handle:
                full_version = json.load(handle).get("cuda", {}).get("version")
        except (OSError, IOError, ValueError):
            full_version = None
        if os.path.isdir(os.path.join(home, "include", "cccl")):
            cccl = os.path.join(home, "include", "cccl")
    return dict(
        found=found,
        nvcc=nvcc if found else None,
        cuda_home=home,
        release=release,
        major=int(release.split(".")[0]) if release else None,
        full_version=full_version,
        cccl_include_dir=cccl,
    )


# The conf file nvidia_driver_params writes by default (the regkey layer's); reported, not read on its own.
CONF_NAME = "nvidia-deepep.conf"

# The options read_node takes, as an argument_spec (deepep_node_info's and deepep_facts').
NODE_OPTIONS = dict(
    sysfs_root=dict(type="path", default="/sys"),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    include_dirs=dict(type="list", elements="path", default=["/usr/include"]),
    hca_include=dict(type="list", elements="str", default=[]),
    hca_exclude=dict(type="list", elements="str", default=[]),
    link_layer=dict(type="str", default="auto", choices=["auto", "InfiniBand", "Ethernet"]),
    cuda_home=dict(type="path", default="/usr/local/cuda"),
    procfs_root=dict(type="path", default="/proc"),
    modprobe_dir=dict(type="path", default="/etc/modprobe.d"),
    registry_dwords=dict(type="dict", default={}),
    module_params=dict(type="dict", default={}),
)


def gcc_version(module):
    """gcc -dumpfullversion, '' without a gcc on PATH (a node before its build prerequisites)."""
    gcc = module.get_bin_path("gcc")
    if not gcc:
        return ""
    rc, out, err = module.run_command([gcc, "-dumpfullversion"])
    if rc != 0:
        module.fail_json(msg="%s -dumpfullversion failed (rc %d): %s" % (gcc, rc, (err or out).strip()))
    return out.strip()


# The parts read_node reads, in its order (deepep_facts' gather_subset choices besides all).
NODE_PARTS = ("gpu", "rdma", "topology", "cuda", "driver_params", "compiler")


def links_ready(rdma):
    """Every HCA has an ACTIVE port, and every ACTIVE RoCE port its RoCE v2 IPv4 GID (what the layers use)."""
    for hca in rdma.get("hcas") or []:
        active = [port for port in hca.get("ports") or [] if port.get("state") == "ACTIVE"]
        if not active:
            return False
        if any(port.get("link_layer") == "Ethernet" and port.get("roce_v2_ipv4_gid_index") is None for port in active):
            return False
    return True


def rdma_info_when_ready(module, sysfs_root, include_dirs, wait_for_active):
    """rdma_info, read again every 2 s until links_ready or wait_for_active seconds passed; with waited_seconds."""
    started = time.time()
    deadline = started + max(wait_for_active, 0)
    while True:
        info = rdma_info(module, sysfs_root, include_dirs)
        if links_ready(info) or time.time() >= deadline:
            break
        time.sleep(2)
    waited = time.time() - started
    info["waited_seconds"] = round(waited, 1) if waited >= 1 else 0
    return info


def read_node(module, params, parts=NODE_PARTS, wait_for_active=0):
    """GPUs, RDMA HCAs, the GPU-to-NIC mapping, the CUDA toolkit, the driver settings and the compiler (those of
    NODE_PARTS in parts), read with NODE_OPTIONS' params: {gpu, rdma, topology, cuda, driver_params, compiler}.
    With wait_for_active, the HCAs are read until their links are up, for at most that many seconds (and rdma says
    how long: waited_seconds)."""
    desired = {}
    for option in ("registry_dwords", "module_params"):
        desired[option], error = desired_settings(option, params[option])
        if error:
            module.fail_json(msg=error)
    readers = dict(
        gpu=lambda: gpu_info(module, params["sysfs_root"], params["nvidia_smi"]),
        rdma=lambda: (rdma_info_when_ready(module, params["sysfs_root"], params["include_dirs"], wait_for_active)
                      if wait_for_active > 0 else rdma_info(module, params["sysfs_root"], params["include_dirs"])),
        topology=lambda: topology_info(module, params["sysfs_root"], params["hca_include"], params["hca_exclude"],
                                       params["link_layer"]),
        cuda=lambda: cuda_info(module, params["cuda_home"]),
        driver_params=lambda: query_driver_params(params["procfs_root"], params["modprobe_dir"], CONF_NAME,
                                                  desired["registry_dwords"], desired["module_params"]),
        compiler=lambda: dict(gcc_version=gcc_version(module)),
    )
    return dict((part, readers[part]()) for part in NODE_PARTS if part in parts)
