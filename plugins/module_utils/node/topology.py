# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Map each GPU to its nearest RDMA NIC port, balanced among equally near ones."""

from __future__ import annotations

import os
import re
from collections import Counter

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.sysfs import (
    DISTANCES,
    pci_distance,
    resolve_pci_path,
)

LINK_LAYERS = ("InfiniBand", "Ethernet")


def select_link_layer(hcas, requested):
    """The link layer to map: the requested one, or (auto) the one most ACTIVE ports have.

    A tie goes to InfiniBand. None when no port is active.
    """
    if requested != "auto":
        return requested
    counts = Counter(
        port["link_layer"]
        for hca in hcas
        for port in hca["ports"]
        if port["state"] == "ACTIVE" and port["link_layer"] in LINK_LAYERS
    )
    if not counts:
        return None
    return sorted(counts.items(), key=lambda item: (-item[1], LINK_LAYERS.index(item[0])))[0][0]


def usable_ports(hcas, link_layer, include=None, exclude=None):
    """(hca, port) candidates: ACTIVE, of the chosen link layer, name matching include and not exclude.

    Returns the candidates and, for the report, every port left out with why.
    """
    include_re = [re.compile(pattern) for pattern in (include or [])]
    exclude_re = [re.compile(pattern) for pattern in (exclude or [])]
    usable, skipped = [], []
    for hca in hcas:
        for port in hca["ports"]:
            reason = None
            if include_re and not any(rx.search(hca["name"]) for rx in include_re):
                reason = "not matched by hca_include"
            elif any(rx.search(hca["name"]) for rx in exclude_re):
                reason = "matched by hca_exclude"
            elif port["state"] != "ACTIVE":
                reason = "port state %s" % port["state"]
            elif port["link_layer"] != link_layer:
                reason = "link layer %s, mapping %s" % (port["link_layer"], link_layer)
            elif hca.get("pci_address") is None:
                reason = "not a PCI device"
            entry = {
                "hca": hca["name"],
                "port": port["port"],
                "pci_address": hca.get("pci_address"),
                "numa_node": hca.get("numa_node"),
                "link_layer": port["link_layer"],
                "state": port["state"],
            }
            if reason:
                entry["reason"] = reason
                skipped.append(entry)
            else:
                usable.append(entry)
    return usable, skipped


def _assign(candidates, nic_count, capacity):
    """Bipartite matching with `capacity` GPUs per NIC (augmenting paths, deterministic).

    candidates[g] lists NIC indexes, already in preference order. Returns a
    list nic-per-GPU or None when no assignment fits the capacity.
    """
    owners = [[] for dummy in range(nic_count)]

    def place(gpu, seen):
        # Least loaded first keeps equally near NICs evenly used.
        for nic in sorted(candidates[gpu], key=lambda n: (len(owners[n]), n)):
            if nic in seen:
                continue
            seen.add(nic)
            if len(owners[nic]) < capacity:
                owners[nic].append(gpu)
                return True
            for other in list(owners[nic]):
                if place(other, seen):
                    owners[nic].remove(other)
                    owners[nic].append(gpu)
                    return True
        return False

    for gpu in range(len(candidates)):
        if not place(gpu, set()):
            return None
    result = [None] * len(candidates)
    for nic, gpus in enumerate(owners):
        for gpu in gpus:
            result[gpu] = nic
    return result


def map_gpus_to_nics(gpus, nics, sysfs_root):
    """Each GPU to one of its nearest NIC ports, never more GPUs per NIC than needed.

    gpus: dicts with index and pci_address; nics: usable_ports() entries.
    Returns the mapping list sorted by GPU index: {gpu, hca, port, distance}.
    """
    if not gpus or not nics:
        return []
    gpu_paths = [_pci_path(sysfs_root, gpu["pci_address"]) for gpu in gpus]
    nic_paths = [_pci_path(sysfs_root, nic["pci_address"]) for nic in nics]
    distance = [[pci_distance(g, n) for n in nic_paths] for g in gpu_paths]
    candidates = []
    for row in distance:
        nearest = min(DISTANCES.index(d) for d in row)
        candidates.append([n for n, d in enumerate(row) if DISTANCES.index(d) == nearest])
    for capacity in range(1, len(gpus) + 1):
        assignment = _assign(candidates, len(nics), capacity)
        if assignment is not None:
            break
    return [
        {
            "gpu": gpu["index"],
            "hca": nics[nic]["hca"],
            "port": nics[nic]["port"],
            "distance": distance[g][nic],
        }
        for g, (gpu, nic) in enumerate(zip(gpus, assignment))
    ]


def distance_matrix(gpus, nics, sysfs_root):
    """{gpu index: {'hca:port': distance}} like the GPU rows of `nvidia-smi topo -m`."""
    matrix = {}
    nic_paths = [_pci_path(sysfs_root, nic["pci_address"]) for nic in nics]
    for gpu in gpus:
        path = _pci_path(sysfs_root, gpu["pci_address"])
        matrix[str(gpu["index"])] = {
            "%s:%s" % (nic["hca"], nic["port"]): pci_distance(path, nic_path)
            for nic, nic_path in zip(nics, nic_paths)
        }
    return matrix


def _pci_path(sysfs_root, address):
    return resolve_pci_path(sysfs_root, os.path.join(sysfs_root, "bus", "pci", "devices", address))


def deepep_mapping_string(mapping):
    """DEEP_EP_DEVICE_TO_HCA_MAPPING value (DeepEP PR #466): '0:mlx5_0:1,1:mlx5_1:1'."""
    return ",".join("%s:%s:%s" % (entry["gpu"], entry["hca"], entry["port"]) for entry in mapping)


def nvshmem_hca_list(mapping):
    """NVSHMEM_HCA_LIST value: the mapped ports in GPU order, each once ('mlx5_0:1,mlx5_1:1')."""
    seen = []
    for entry in mapping:
        item = "%s:%s" % (entry["hca"], entry["port"])
        if item not in seen:
            seen.append(item)
    return ",".join(seen)


def _mapping_problem(var, value, accepted, why=""):
    """A problem in the form the variable checks use (site_validate)."""
    return {"var": var, "value": value, "accepted": accepted,
            "msg": "%s: %r is not accepted%s; accepted: %s" % (var, value, " (%s)" % why if why else "", accepted)}


MAPPING_ENTRY_RE = re.compile(r"^(\d+):([A-Za-z0-9_.-]+)(?::(\d+))?$")
MAPPING_ACCEPTED = "comma-separated <gpu>:<hca>[:<port>] entries, e.g. 0:mlx5_0:1,1:mlx5_1:1"


def manual_mapping(value, gpu_count, hcas):
    """A hand-written GPU-to-NIC mapping (deepep_hca_mapping) checked against this node's GPUs and HCAs.

    Returns (mapping entries like gpu_nic_topology_info's, problems)."""
    entries = value if isinstance(value, list) else [e for e in re.split(r"[,\s]+", str(value or "")) if e]
    ports = dict((hca["name"], set(port["port"] for port in hca.get("ports", []))) for hca in hcas or [])
    mapping, problems, seen = [], [], set()
    for entry in entries:
        match = MAPPING_ENTRY_RE.match(str(entry).strip())
        if not match:
            problems.append(_mapping_problem("deepep_hca_mapping", entry, MAPPING_ACCEPTED, "malformed entry"))
            continue
        gpu, hca, port = int(match.group(1)), match.group(2), int(match.group(3) or 1)
        if gpu >= int(gpu_count):
            accepted = "GPU indexes 0-%d" % (int(gpu_count) - 1) if gpu_count else "no entries: this node has no GPU"
            problems.append(_mapping_problem("deepep_hca_mapping", entry, accepted,
                                             "GPU %d does not exist, this node has %d" % (gpu, int(gpu_count))))
        elif hca not in ports:
            problems.append(_mapping_problem("deepep_hca_mapping", entry, "the RDMA devices here: %s"
                                             % (", ".join(sorted(ports)) or "none"), "no RDMA device %s" % hca))
        elif port not in ports[hca]:
            problems.append(_mapping_problem("deepep_hca_mapping", entry, "ports %s of %s" % (
                ", ".join(str(p) for p in sorted(ports[hca])), hca), "%s has no port %d" % (hca, port)))
        elif gpu in seen:
            problems.append(_mapping_problem("deepep_hca_mapping", entry, "one entry per GPU", "GPU %d mapped twice" % gpu))
        else:
            seen.add(gpu)
            mapping.append({"gpu": gpu, "hca": hca, "port": port, "distance": "manual"})
    if not entries:
        problems.append(_mapping_problem("deepep_hca_mapping", value, MAPPING_ACCEPTED, "empty"))
    return sorted(mapping, key=lambda e: e["gpu"]), problems


def apply_manual_mapping(topology, value, gpu_count, hcas):
    """The discovered topology with a hand-written mapping (deepep_hca_mapping) in its place: (topology,
    problems); with problems the topology is the discovered one."""
    mapping, problems = manual_mapping(value, gpu_count, hcas)
    result = dict(topology)
    if not problems:
        result.update(mapping=mapping, deepep_device_to_hca_mapping=deepep_mapping_string(mapping),
                      nvshmem_hca_list=nvshmem_hca_list(mapping), mapping_source="deepep_hca_mapping")
    return result, problems
