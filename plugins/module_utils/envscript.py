# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The DeepEP runtime environment of one node, from its discovery results (pure)."""

from __future__ import annotations

import re
import shlex

from ansible_collections.moe_infra.deepep.plugins.module_utils.topology import deepep_mapping_string

# Variables holding search paths: prepended once, never duplicated, so sourcing twice is harmless.
PATH_VARIABLES = ("PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EnvError(ValueError):
    """Inputs that cannot give a consistent environment."""


def mapped_gid_index(node):
    """The RoCE v2 IPv4 GID index shared by every mapped Ethernet port (None on InfiniBand)."""
    topology = node["topology"]
    if topology.get("link_layer") != "Ethernet":
        return None
    ports = {(entry["hca"], entry["port"]) for entry in topology.get("mapping", [])}
    indexes = {}
    for hca in node["rdma"]["hcas"]:
        for port in hca["ports"]:
            if (hca["name"], port["port"]) in ports:
                indexes["%s:%s" % (hca["name"], port["port"])] = port.get("roce_v2_ipv4_gid_index")
    values = set(indexes.values())
    if None in values:
        raise EnvError("no RoCE v2 IPv4 GID on %s: give the NICs an IPv4 address or set "
                       "NVSHMEM_IB_GID_INDEX in deepep_env_extra"
                       % ", ".join(sorted(k for k, v in indexes.items() if v is None)))
    if len(values) > 1:
        raise EnvError("the mapped RoCE ports use different RoCE v2 GID indexes (%s); NVSHMEM_IB_GID_INDEX takes "
                       "one: set it in deepep_env_extra" % ", ".join("%s=%s" % kv for kv in sorted(indexes.items())))
    return values.pop() if values else None


def build_env(node, pythonpath, ld_preload="", extra=None, force_ibgda=False, ld_library_path="", jit_cache_dir=""):
    """{env, path_env, jit_env, ibgda, notes} for the env script and the tests."""
    env, path_env, jit_env, notes = {}, {}, {}, []
    mapping = node["topology"].get("mapping", [])
    ibgda = bool(mapping) or force_ibgda
    if ibgda:
        env.update({
            "NVSHMEM_REMOTE_TRANSPORT": "ibgda",
            "NVSHMEM_IB_ENABLE_IBGDA": "1",
            "NVSHMEM_IBGDA_NIC_HANDLER": "gpu",
            "NVSHMEM_DISABLE_CUDA_VMM": "1",
            "NVSHMEM_ENABLE_NIC_PE_MAPPING": "1",
        })
        if node["rdma"].get("hca_prefix"):
            env["NVSHMEM_HCA_PREFIX"] = node["rdma"]["hca_prefix"]
        gid = mapped_gid_index(node)
        if gid is not None:
            env["NVSHMEM_IB_GID_INDEX"] = str(gid)
        if mapping:
            env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] = deepep_mapping_string(mapping)
            # The mapping numbers GPUs in PCI bus order; CUDA's default order (fastest first) may differ.
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    else:
        notes.append("no usable RDMA port: IBGDA variables left out (they break even single-node "
                     "low-latency runs, KF36)")
    for name, value in (extra or {}).items():
        if not NAME_RE.match(str(name)):
            raise EnvError("deepep_env_extra: %r is not a variable name" % (name,))
        if name in PATH_VARIABLES:
            raise EnvError("deepep_env_extra: %s is managed by the role (deepep_ld_preload, "
                           "deepep_ld_library_path, the build's PYTHONPATH)" % name)
        env[name] = str(value)
    if pythonpath:
        path_env["PYTHONPATH"] = pythonpath
    if ld_preload:
        path_env["LD_PRELOAD"] = ld_preload
    if ld_library_path:
        path_env["LD_LIBRARY_PATH"] = ld_library_path
    # DeepEP V2's JIT writes kernels into its cache on a miss: the shared, warmed cache is named only to those who
    # can write there; others keep DeepEP's default (~/.deep_ep) and compile on first use. deepep_env_extra wins.
    if jit_cache_dir and "EP_JIT_CACHE_DIR" not in env:
        jit_env["EP_JIT_CACHE_DIR"] = jit_cache_dir
    return {"env": env, "path_env": path_env, "jit_env": jit_env, "ibgda": ibgda, "notes": notes}


def _quote(value):
    return "'%s'" % str(value).replace("'", "'\\''")


def render_lines(result):
    """Shell lines: plain exports, then search paths prepended only when absent."""
    lines = ["export %s=%s" % (name, _quote(value)) for name, value in sorted(result["env"].items())]
    for name, value in sorted(result.get("jit_env", {}).items()):
        lines.append("if [ -w %s ] && [ -w %s ]; then export %s=%s; fi"
                     % (_quote(value + "/cache"), _quote(value + "/tmp"), name, _quote(value)))
    for name, value in sorted(result["path_env"].items()):
        lines.append('case ":${%s:-}:" in *:%s:*) ;; *) export %s=%s"${%s:+:$%s}" ;; esac'
                     % (name, _quote(value), name, _quote(value), name, name))
    return lines


def process_env(result):
    """Environment for processes started directly (tests): plain values, search paths as given."""
    merged = dict(result["env"])
    merged.update(result.get("jit_env", {}))
    merged.update(result["path_env"])
    return merged


EXPORT_RE = re.compile(r"export (\w+)=((?:'[^']*')+|[^\s;\"']+)")


def parse_env_script(path):
    """{name: value} exported by the env script the deepep role writes (plain exports and path prepends)."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError):
        text = None
    if text is None:
        return {"path": path, "exists": False, "vars": {}}
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        for name, value in EXPORT_RE.findall(line):
            try:
                found[name] = shlex.split(value)[0] if value else ""
            except (ValueError, IndexError):
                found[name] = value
    return {"path": path, "exists": True, "vars": found}
