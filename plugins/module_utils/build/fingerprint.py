# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Digests of build inputs: source trees, archives, patches, and the fingerprint over all of them."""

from __future__ import annotations

import hashlib
import json
import os
import stat

SKIP_DIRS = (".git",)


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(root):
    """sha256 over every path, type, exec bit, content and link target under root (.git left out)."""
    digest = hashlib.sha256()
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel_dir = os.path.relpath(directory, root)
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]):
            path = os.path.join(directory, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                digest.update(("L %s %s\n" % (rel, os.readlink(path))).encode())
            elif stat.S_ISREG(info.st_mode):
                executable = "x" if info.st_mode & 0o111 else "-"
                digest.update(("F %s %s %s\n" % (rel, executable, file_digest(path))).encode())
    return digest.hexdigest()


def fingerprint(inputs):
    """First 16 hex digits of sha256 over the canonical JSON of all inputs."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        flat = {}
        for key in value:
            flat.update(_flatten(value[key], "%s%s." % (prefix, key)))
        return flat
    return {prefix.rstrip("."): value}


def changed_inputs(old, new):
    """'key: old -> new' for every input that differs (nested keys dotted), sorted."""
    old_flat, new_flat = _flatten(old or {}), _flatten(new or {})
    changes = []
    for key in sorted(set(old_flat) | set(new_flat)):
        if old_flat.get(key) != new_flat.get(key):
            changes.append("%s: %s -> %s" % (key, _short(old_flat.get(key)), _short(new_flat.get(key))))
    return changes


def _short(value):
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."
