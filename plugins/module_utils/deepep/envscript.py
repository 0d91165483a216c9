# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The DeepEP runtime environment of one node, from its discovery results (pure)."""

from __future__ import annotations

import os
import re
import shlex

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.topology import deepep_mapping_string

# Variables holding search paths: prepended once, never duplicated, so sourcing twice is harmless.
PATH_VARIABLES = ("PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EnvError(ValueError):
    """Inputs that cannot give a consistent environment."""


def mapped_gid_index(node, variable="NVSHMEM_IB_GID_INDEX"):
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
                       "%s in deepep_env_extra"
                       % (", ".join(sorted(k for k, v in indexes.items() if v is None)), variable))
    if len(values) > 1:
        raise EnvError("the mapped RoCE ports use different RoCE v2 GID indexes (%s); %s takes "
                       "one: set it in deepep_env_extra"
                       % (", ".join("%s=%s" % kv for kv in sorted(indexes.items())), variable))
    return values.pop() if values else None


GIN_CHOICES = ("auto", "enabled", "disabled")


def build_env(node, pythonpath, ld_preload="", extra=None, force_ibgda=False, ld_library_path="", jit_cache_dir="",
              generation="v1", legacy_kernels=False, gin="auto"):
    """{env, path_env, jit_env, ibgda, notes} for the env script and the tests. generation v2: NCCL's settings for
    its Gin backend; the NVSHMEM ones only with legacy_kernels (jobs that use V2's V1 kernels). gin: auto turns
    V2's Gin backend off (EP_DISABLE_GIN=1) where no RDMA port is mapped, disabled everywhere, enabled never."""
    if gin not in GIN_CHOICES:
        raise EnvError("gin: %r is not one of %s (deepep_gin)" % (gin, ", ".join(GIN_CHOICES)))
    env, path_env, jit_env, notes = {}, {}, {}, []
    mapping = node["topology"].get("mapping", [])
    nvshmem = generation != "v2" or legacy_kernels
    ibgda = (bool(mapping) or force_ibgda) and nvshmem
    if generation == "v2" and mapping:
        # NCCL (Gin) on the mapped ports, in the mapping's GPU order; DeepEP reads the first one's rate and type
        # through EP_NIC_NAME (mlx5_0 unless set: not a name on rocep* nodes).
        ports = []
        for entry in mapping:
            port = "%s:%s" % (entry["hca"], entry["port"])
            if port not in ports:
                ports.append(port)
        env["NCCL_IB_HCA"] = "=" + ",".join(ports)
        env["EP_NIC_NAME"] = mapping[0]["hca"]
        gid = mapped_gid_index(node, "NCCL_IB_GID_INDEX")
        if gid is not None:
            env["NCCL_IB_GID_INDEX"] = str(gid)
    if generation == "v2" and (gin == "disabled" or (gin == "auto" and not mapping)):
        # Without an RDMA port NCCL reports no Gin support, and V2's ElasticBuffer with more than one rank stops
        # with "NCCL GIN is unavailable"; EP_DISABLE_GIN=1 is DeepEP's documented fall-back (one node, NVLink).
        env["EP_DISABLE_GIN"] = "1"
        notes.append("DeepEP V2 without NCCL's Gin backend (EP_DISABLE_GIN=1): %s" % (
            "deepep_gin: disabled" if gin == "disabled" else
            "no usable RDMA port, so jobs stay within this node (NVLink)"))
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
    elif not nvshmem:
        notes.append("DeepEP V2 without its legacy kernels: NVSHMEM's IBGDA variables left out")
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


def script_text(result, host, script, generation="v1", legacy_kernels=False):
    """The env script the deepep role writes: a header that says what it is and whether the IBGDA variables are in
    it, then render_lines' lines."""
    if result.get("ibgda"):
        ibgda = "exported (GPU-to-NIC mapping found)"
    elif generation == "v2" and not legacy_kernels:
        ibgda = "left out (DeepEP V2 without its legacy kernels)"
    else:
        ibgda = "left out (no RDMA port; KF36)"
    header = ["# shellcheck shell=bash",
              "# Ansible managed",
              "# DeepEP runtime environment for %s: `. %s`." % (host, script),
              "# Sourcing it twice is harmless. IBGDA variables: %s." % ibgda]
    return "\n".join(header + list(result.get("lines") or render_lines(result))) + "\n"


def process_env(result):
    """Environment for processes started directly (tests): plain values, search paths as given."""
    merged = dict(result["env"])
    merged.update(result.get("jit_env", {}))
    merged.update(result["path_env"])
    return merged


# Search paths: the env script prepends to them (render_lines), so a sourcing shell keeps what it had behind them.
SEARCH_PATHS = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CPATH")


def sourced_env(variables, inherited=None):
    """variables (the env script's, or process_env's) as a shell that sources the script gives them to a process:
    search paths in front of the ones inherited (os.environ when None), the rest as they are. The doctor's probe
    and the import check run with it, so a node whose logins set LD_LIBRARY_PATH (a GKE container's
    /usr/local/nvidia/lib64) is checked as its users get it, and both probes read one answer from the cache."""
    inherited = os.environ if inherited is None else inherited
    return dict((name, value + os.pathsep + inherited[name] if name in SEARCH_PATHS and inherited.get(name) else value)
                for name, value in variables.items())


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
