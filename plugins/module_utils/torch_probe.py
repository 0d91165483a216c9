# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Probes run by the interpreter that has torch (torch_stack_info, deepep_doctor): what it imports and loads."""

from __future__ import annotations

PROBE = r'''
import glob, importlib.metadata as md, importlib.util, json, os, sys
out = {"python_version": "%d.%d.%d" % sys.version_info[:3], "torch": {"version": None, "cuda": None, "nccl": None},
       "nvshmem_wheel": None, "nccl_wheel": None, "numpy": None}
def dist(names):
    for name in names:
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            pass
    return None, None
def package_dir(module):
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
name, version = dist(["nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"])
root = package_dir("nvidia.nvshmem")
if name and root:
    lib = os.path.join(root, "lib")
    hosts = sorted(glob.glob(os.path.join(lib, "libnvshmem_host.so*")))
    out["nvshmem_wheel"] = {"package": name, "version": version, "dir": root, "lib_dir": lib,
                            "host_lib": hosts[-1] if hosts else None,
                            "ibgda_transport": os.path.exists(os.path.join(lib, "nvshmem_transport_ibgda.so.3"))}
name, version = dist(["nvidia-nccl-cu13", "nvidia-nccl-cu12"])
if name:
    out["nccl_wheel"] = {"package": name, "version": version, "dir": package_dir("nvidia.nccl")}
out["numpy"] = dist(["numpy"])[1]
try:
    import torch
    out["torch"]["version"] = torch.__version__
    out["torch"]["cuda"] = torch.version.cuda
    try:
        out["torch"]["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception as exc:
        out["torch"]["nccl_error"] = str(exc)
except Exception as exc:
    out["torch"]["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
'''

# After the import, /proc/self/maps says which libnvshmem_host the process really loaded (KF05, KF16).
IMPORT_PROBE = r'''
import json
def loaded():
    try:
        with open("/proc/self/maps") as maps:
            paths = set(line.split()[-1] for line in maps if "libnvshmem_host" in line)
        return sorted(paths)
    except OSError:
        return None
try:
    import deep_ep
    print(json.dumps({"importable": True, "file": deep_ep.__file__, "error": None, "nvshmem_host_loaded": loaded()}))
except Exception as exc:
    print(json.dumps({"importable": False, "file": None, "error": "%s: %s" % (type(exc).__name__, exc),
                      "nvshmem_host_loaded": None}))
'''
