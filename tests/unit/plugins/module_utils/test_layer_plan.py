# -*- coding: utf-8 -*-
"""The cuda layer's plan reads the pin: a toolkit of another release is a change, not ok."""
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.layer_plan import plan_cuda, plan_nccl, with_nccl

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


def reading(loaded, wheel_version="2.28.9", replaced_by=None, upgraded_from=None):
    """The interpreter's reading (torch_stack_info's shape) of torch 2.11's venv."""
    return {"torch": {"version": "2.11.0+cu130", "nccl": loaded},
            "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": wheel_version, "dir": "/venv/nvidia/nccl",
                           "replaced_by": replaced_by, "upgraded_from": upgraded_from}}


def test_nccl_for_v1_is_torchs_own_and_a_v2_runs_change_is_undone():
    entry = plan_nccl(reading("2.28.9"), "v1", "wheel", "2.30.7")
    assert (entry["status"], entry["action"]) == ("ok", "nothing: DeepEP V1 uses torch's own NCCL")
    assert entry["found"] == "torch loads NCCL 2.28.9; nvidia-nccl-cu13 2.28.9"
    upgraded = plan_nccl(reading("2.30.7", "2.30.7", upgraded_from="2.28.9"), "v1", "wheel", "2.30.7")
    assert upgraded["status"] == "change" and upgraded["found"].endswith("nvidia-nccl-cu13 2.30.7, upgraded from 2.28.9")
    assert upgraded["action"] == ("pip-install nvidia-nccl-cu13==2.28.9 again, the version torch came with (DeepEP "
                                  "V1 after V2)")
    built = plan_nccl(reading("2.30.7", replaced_by={"version": "2.30.7", "build_dir": "/opt/deepep/nccl/x"}), "v1",
                      "source", "2.30.7")
    assert built["status"] == "change" and built["action"] == ("put the wheel's own NCCL files back (DeepEP V1 after "
                                                               "V2)")


def test_nccl_wheel_half_installed_by_a_stopped_pip():
    half = {"torch": {"version": None, "nccl": None},
            "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": None, "dir": "/venv/nvidia/nccl",
                           "replaced_by": None, "upgraded_from": "2.28.9", "half_installed": True}}
    found = ("torch is missing its own NCCL; nvidia-nccl-cu13 half-installed (a pip changing it was stopped before it finished; "
             "torch came with 2.28.9)")
    v1 = plan_nccl(half, "v1", "wheel", "2.30.7")
    assert v1 == {"layer": "nccl", "status": "change", "found": found,
                  "action": "pip-install nvidia-nccl-cu13==2.28.9 again, the version torch came with (DeepEP V1 after V2)"}
    v2 = plan_nccl(half, "v2", "wheel", "2.30.7")
    assert (v2["status"], v2["found"]) == ("change", found)
    assert v2["action"] == ("pip-install nvidia-nccl-cu13==2.30.7 where torch loads NCCL (the version before kept for "
                            "DeepEP V1)")


def test_nccl_wheel_half_installed_by_another_pip_names_the_version_it_was_replacing():
    # No record of the nccl layer's: the version to install again is from pip's stash, not "torch came with".
    half = {"torch": {"version": None, "nccl": None},
            "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": None, "dir": "/venv/nvidia/nccl",
                           "replaced_by": None, "upgraded_from": "2.28.9", "half_installed": True,
                           "pip_stash": "~vidia_nccl_cu13-2.28.9.dist-info"}}
    v1 = plan_nccl(half, "v1", "wheel", "2.30.7")
    assert v1["found"] == ("torch is missing its own NCCL; nvidia-nccl-cu13 half-installed (a pip changing it was stopped "
                           "before it finished; it was replacing 2.28.9)")
    assert v1["action"] == "pip-install nvidia-nccl-cu13==2.28.9 again, the version a stopped pip was replacing"
    assert plan_nccl(half, "v2", "wheel", "2.30.7")["status"] == "change"


def test_nccl_library_cut_short_by_a_pip_install_ignore_installed():
    # Installed at 2.28.9 (its metadata), its library not the size its RECORD gives: no record, no stash.
    cut = {"package": "nvidia-nccl-cu13", "version": "2.28.9", "lib": "/venv/nvidia/nccl/lib/libnccl.so.2",
           "size": 531840, "recorded_size": 15040}
    half = {"torch": {"version": None, "nccl": None}, "pip": "24.0",
            "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": "2.28.9", "dir": "/venv/nvidia/nccl",
                           "replaced_by": None, "upgraded_from": "2.28.9", "half_installed": True,
                           "pip_stash": None, "cut_short": cut}}
    v1 = plan_nccl(half, "v1", "wheel", "2.30.7")
    assert v1 == {"layer": "nccl", "status": "change",
                  "found": "torch is missing its own NCCL; nvidia-nccl-cu13 half-installed (a pip changing it was "
                           "stopped before it finished; its metadata names 2.28.9)",
                  "action": "pip-install nvidia-nccl-cu13==2.28.9 again, the version its metadata names, over its "
                            "cut-short library"}
    assert plan_nccl(half, "v2", "wheel", "2.30.7")["status"] == "change"
    # At the pin, cut short: pip installs it again, so an interpreter without pip is blocked.
    pinned = dict(half, pip=None, nccl_wheel=dict(half["nccl_wheel"], version="2.30.7", upgraded_from="2.28.9",
                                                  cut_short=dict(cut, version="2.30.7")))
    assert plan_nccl(pinned, "v2", "wheel", "2.30.7")["status"] == "blocked"
    repair = plan_nccl(dict(pinned, pip="24.0"), "v2", "wheel", "2.30.7")
    assert repair["status"] == "change" and repair["found"].endswith("finished; torch came with 2.28.9)")
    assert repair["action"] == ("pip-install nvidia-nccl-cu13==2.30.7 again, over its cut-short library (the version "
                                "before kept for DeepEP V1)")
    # Cut short at torch's version, V2 at the pin: the pin's install, as from torch's wheel.
    assert plan_nccl(half, "v2", "wheel", "2.30.7")["action"] == (
        "pip-install nvidia-nccl-cu13==2.30.7 where torch loads NCCL (the version before kept for DeepEP V1)")
    source = plan_nccl(half, "v2", "source", "2.30.7")
    assert source["status"] == "blocked" and source["action"] == (
        "the source method would keep the cut-short library as the wheel's to put back for DeepEP V1: set "
        "nccl_method: wheel, or install nvidia-nccl-cu13==2.28.9 again first")


def test_nccl_for_v2_by_method():
    assert plan_nccl(reading("2.28.9"), "v2", "wheel", "2.30.7")["action"] == (
        "pip-install nvidia-nccl-cu13==2.30.7 where torch loads NCCL (the version before kept for DeepEP V1)")
    assert plan_nccl(reading("2.30.7", "2.30.7", upgraded_from="2.28.9"), "v2", "wheel", "2.30.7")["status"] == "ok"
    # The wheel at the pin but a source build in its place: its files back first.
    swapped = plan_nccl(reading("2.30.7", "2.30.7", replaced_by={"version": "2.30.7"}), "v2", "wheel", "2.30.7")
    assert swapped["status"] == "change" and swapped["action"].startswith("put the wheel's own files back, then pip")
    source = plan_nccl(reading("2.28.9"), "v2", "source", "2.30.7")
    assert source["status"] == "change" and source["action"].startswith("build NCCL 2.30.7 from source")
    assert plan_nccl(reading("2.30.7", replaced_by={"version": "2.30.7"}), "v2", "source", "2.30.7")["status"] == "ok"
    assert plan_nccl(reading("2.30.7", replaced_by={"version": "2.30.4"}), "v2", "source", "2.30.7")["status"] == \
        "change"
    assert plan_nccl(reading("2.30.5", "2.30.5"), "v2", "none", None)["status"] == "ok"
    old = plan_nccl(reading("2.28.9"), "v2", "none", None)
    assert old["status"] == "blocked" and "NCCL >= 2.30.4" in old["action"]


def test_nccl_without_the_interpreters_reading():
    assert plan_nccl(None, "v1", "wheel", "2.30.7")["status"] == "skip"
    unknown = plan_nccl(None, "v2", "wheel", "2.30.7")
    assert unknown["status"] == "change" and unknown["action"].startswith("unknown: provide NCCL 2.30.7")
    no_wheel = plan_nccl({"torch": {"nccl": None}, "nccl_wheel": None}, "v2", "wheel", "2.30.7")
    assert no_wheel["found"] == "torch loads NCCL ?; no NCCL wheel" and no_wheel["status"] == "change"


def test_the_nccl_entry_goes_before_deepeps():
    plan = [{"layer": name} for name in ("gdrcopy", "nvshmem_ibgda", "deepep")]
    assert [entry["layer"] for entry in with_nccl(plan, None, "v1", "wheel", "2.30.7")] == [
        "gdrcopy", "nvshmem_ibgda", "nccl", "deepep"]


def test_nccl_with_no_pip_in_the_interpreter_is_blocked_where_a_wheel_is_installed():
    no_pip = dict(reading("2.28.9"), pip=None)
    v2 = plan_nccl(no_pip, "v2", "wheel", "2.30.7")
    assert (v2["status"], v2["action"]) == ("blocked", "the interpreter has no pip to install NCCL 2.30.7 with: add it "
                                                       "(python -m ensurepip), or set nccl_method: source")
    assert plan_nccl(no_pip, "v2", "source", "2.30.7")["status"] == "change"
    assert plan_nccl(no_pip, "v1", "wheel", "2.30.7")["status"] == "ok"
    upgraded = dict(reading("2.30.7", "2.30.7", upgraded_from="2.28.9"), pip=None)
    v1 = plan_nccl(upgraded, "v1", "wheel", "2.30.7")
    assert (v1["status"], v1["action"]) == ("blocked", "the interpreter has no pip to install nvidia-nccl-cu13==2.28.9 "
                                                       "again with: add it (python -m ensurepip)")
    # At the pin already: nothing to install, so nothing blocked.
    assert plan_nccl(upgraded, "v2", "wheel", "2.30.7")["status"] == "ok"
    assert plan_nccl(dict(upgraded, pip="24.0"), "v1", "wheel", "2.30.7")["status"] == "change"
