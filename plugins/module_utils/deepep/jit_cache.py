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


def cache_directories(root):
    """The directories of the cache at root the deepep role creates: root, its cache/ and its tmp/."""
    return [root, os.path.join(root, "cache"), os.path.join(root, "tmp")]


def directories_to_set(root, group, reading):
    """Those of cache_directories(root) that a reading of their mode and group (deepep_facts' builds.directories:
    {path: {mode, group} or null}) does not show as the role sets them: mode 2775 and the group when a group shares
    the cache, else mode 0755 (whatever the group). A directory the reading has no answer for, or a group given by
    number, is set (the file module then finds out)."""
    wanted_mode = "2775" if group else "0755"
    reading = reading or {}
    return [path for path in cache_directories(root)
            if not reading.get(path) or reading[path].get("mode") != wanted_mode
            or (group and (str(group).isdigit() or reading[path].get("group") != group))]
