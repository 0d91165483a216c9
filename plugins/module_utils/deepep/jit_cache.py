# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""DeepEP V2's JIT cache as its compiler lays it out (csrc/jit/compiler.hpp): EP_JIT_CACHE_DIR/cache/kernel.<name>.<hash>/
with kernel.cu and kernel.cubin, compiled in EP_JIT_CACHE_DIR/tmp/<uuid>/ and renamed into place. The hash covers the
kernel's code, the NVCC version and the GPU architecture, so a cache of another GPU or toolkit is a miss, not an
error; a kernel directory without both files stops DeepEP ("Corrupted JIT cache directory")."""

from __future__ import annotations

import os
import stat

KERNEL_PREFIX = "kernel."
KERNEL_FILES = ("kernel.cu", "kernel.cubin")


def _tree_bytes(path):
    total = 0
    for top, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass
    return total


def jit_cache_stats(root):
    """{dir, exists, kernels, corrupted, bytes, tmp_entries, mode, gid} of the cache at root (never follows links)."""
    cache = os.path.join(root, "cache")
    tmp = os.path.join(root, "tmp")
    stats = {"dir": root, "exists": os.path.isdir(root) and not os.path.islink(root), "kernels": 0, "corrupted": [],
             "bytes": 0, "tmp_entries": 0, "mode": None, "gid": None}
    if not stats["exists"]:
        return stats
    info = os.lstat(root)
    stats["mode"] = "%04o" % stat.S_IMODE(info.st_mode)
    stats["gid"] = info.st_gid
    if os.path.isdir(cache) and not os.path.islink(cache):
        for name in sorted(os.listdir(cache)):
            path = os.path.join(cache, name)
            if not name.startswith(KERNEL_PREFIX) or os.path.islink(path) or not os.path.isdir(path):
                continue
            if all(os.path.isfile(os.path.join(path, f)) for f in KERNEL_FILES):
                stats["kernels"] += 1
            else:
                stats["corrupted"].append(path)
        stats["bytes"] = _tree_bytes(cache)
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        stats["tmp_entries"] = len(os.listdir(tmp))
    return stats
