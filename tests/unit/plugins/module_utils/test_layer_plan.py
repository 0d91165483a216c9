# -*- coding: utf-8 -*-
"""The cuda layer's plan reads the pin: a toolkit of another release is a change, not ok."""
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.layer_plan import plan_cuda

FOUND_13 = {"found": True, "release": "13.0", "cuda_home": "/usr/local/cuda-13.0"}


def test_the_pinned_release_is_ok():
    entry = plan_cuda(FOUND_13, "13.0")
    assert (entry["status"], entry["action"]) == ("ok", "nothing: 13.0 is the pinned release")


def test_another_release_is_a_change_naming_the_pin():
    entry = plan_cuda(FOUND_13, "12.9")
    assert entry["status"] == "change" and entry["found"] == "CUDA 13.0 at /usr/local/cuda-13.0"
    assert entry["action"].startswith("install CUDA 12.9 (the pin, cuda_version)")


def test_without_a_pin_a_toolkit_is_not_called_ok():
    assert plan_cuda(FOUND_13)["status"] == "change"


def test_no_toolkit():
    entry = plan_cuda({"found": False}, "12.9")
    assert entry["status"] == "change" and entry["action"].startswith("install CUDA 12.9")
