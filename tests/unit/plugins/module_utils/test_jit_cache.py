# -*- coding: utf-8 -*-
from __future__ import annotations

import os

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.jit_cache import jit_cache_stats


def _kernel(root, name, files=("kernel.cu", "kernel.cubin")):
    path = root / "cache" / name
    path.mkdir(parents=True)
    for part in files:
        (path / part).write_text("x" * 100)
    return path


def test_counts_complete_kernels_and_names_corrupted_ones(tmp_path):
    root = tmp_path / "jit"
    _kernel(root, "kernel.dispatch.aa")
    _kernel(root, "kernel.combine.bb")
    broken = _kernel(root, "kernel.barrier.cc", files=("kernel.cu",))
    (root / "cache" / "not-a-kernel").mkdir()
    (root / "tmp" / "0f1e").mkdir(parents=True)
    os.symlink(str(tmp_path), str(root / "cache" / "kernel.link.dd"))
    root.chmod(0o2775)
    stats = jit_cache_stats(str(root))
    assert stats["exists"] and stats["kernels"] == 2 and stats["corrupted"] == [str(broken)]
    assert stats["bytes"] == 500 and stats["tmp_entries"] == 1 and stats["mode"] == "2775"


def test_missing_cache_and_a_link_in_its_place(tmp_path):
    assert jit_cache_stats(str(tmp_path / "none")) == {
        "dir": str(tmp_path / "none"), "exists": False, "kernels": 0, "corrupted": [], "bytes": 0,
        "tmp_entries": 0, "mode": None, "gid": None}
    _kernel(tmp_path / "real", "kernel.dispatch.aa")
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    assert jit_cache_stats(str(tmp_path / "link"))["exists"] is False
