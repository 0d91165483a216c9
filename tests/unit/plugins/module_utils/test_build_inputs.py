# -*- coding: utf-8 -*-
"""DeepEP's inputs worked out once (the deepep role's __deepep_inputs): what stops the build, and the options the
fan-out builds with, from a node reading shaped as deepep_facts returns it."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.build_inputs import (
    NO_READING, SETTINGS, InputsError, work_out)

# The deepep role's defaults, as __deepep_settings renders them (no deepep_python: the role's venv).
# (the reading below is of the role's interpreter and toolkit; the compiler is the reading's).
SETTINGS_OF_THE_ROLE = dict(
    version="v1", python="/opt/deepep/venv/bin/python", given_python="", interpreter_known=True, cuda_known=True,
    prefix="/opt/deepep", cuda_home="/usr/local/cuda", arch_list=[], nvshmem_dir="/opt/deepep/nvshmem",
    nvshmem_version="3.4.5", nvshmem_planned="", nvshmem_35_fix=True, src="",
    git_url="https://github.com/deepseek-ai/DeepEP.git", git_ref="8a07e7e7ed57cfc63005f670d64d410cb30b061b",
    build_user="deepep-build", build_jobs=0, cxx="g++", gcc="13.3.0", nccl_ahead=False)

# A reading of the GPU test machine (H200, CUDA 13.0, torch 2.11.0+cu130), taken with the role's options.
NODE = {
    "read_from": {"cuda_home": "/usr/local/cuda"},
    "interpreter": {"exists": True, "python_version": "3.12.3",
                    "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9"},
                    "nccl_wheel": None, "nvshmem_wheel": {"dir": "/venv/nvidia/nvshmem", "version": "3.4.5"},
                    "deep_ep": {"undefined_symbol": False}},
    "cuda": {"cuda_home": "/usr/local/cuda-13.0", "release": "13.0", "full_version": "13.0.88",
             "cccl_include_dir": "/usr/local/cuda-13.0/include/cccl"},
    "gpu": {"compute_caps": ["9.0"]},
    "rdma": {"hcas": [{"name": "mlx5_0", "family": "mlx5"}]},
}


def inputs(node=None, **changes):
    settings = dict(SETTINGS_OF_THE_ROLE, **changes)
    return work_out(copy.deepcopy(NODE if node is None else node), settings)


def test_the_role_defaults_on_the_gpu_machine_build_against_the_source_nvshmem():
    answer = inputs()
    assert answer["problems"] == [] and answer["python_exists"]
    build = answer["build"]
    assert build["environment"] == {"CPATH": "/usr/local/cuda-13.0/include/cccl", "TORCH_CUDA_ARCH_LIST": "9.0",
                                    "CUDA_HOME": "/usr/local/cuda-13.0", "NVSHMEM_DIR": "/opt/deepep/nvshmem",
                                    "CXX": "g++"}
    assert build["inputs"] == {"deepep_version": "v1", "torch": "2.11.0+cu130", "torch_cuda": "13.0",
                               "python": "3.12.3", "cuda": "13.0.88", "gcc": "13.3.0", "nvshmem": "3.4.5",
                               "nvshmem_dir": "/opt/deepep/nvshmem", "arch_list": ["9.0"]}
    assert (build["git_url"], build["src"], build["prefix"]) == (
        "https://github.com/deepseek-ai/DeepEP.git", "", "/opt/deepep/deepep")
    assert build["build_command"].startswith("/opt/deepep/venv/bin/python setup.py bdist_wheel")
    assert build["rebuild_current"] is False and "force" not in build


def test_the_interpreters_own_nvshmem_wheel_needs_no_nvshmem_dir():
    answer = inputs(nvshmem_dir="", nvshmem_version="")
    assert answer["problems"] == []
    assert "NVSHMEM_DIR" not in answer["build"]["environment"]
    assert answer["build"]["inputs"]["nvshmem"] == "3.4.5"
    assert answer["build"]["inputs"]["nvshmem_dir"] == "/venv/nvidia/nvshmem"


def test_a_wheel_read_with_other_options_does_not_count():
    answer = inputs(nvshmem_dir="", nvshmem_version="", interpreter_known=False)
    assert answer["problems"] == [
        "DeepEP V1 builds against NVSHMEM and /opt/deepep/venv/bin/python has no nvidia-nvshmem wheel: run the "
        "nvshmem_ibgda role (playbooks/deepep.yml does) or set deepep_nvshmem_dir."]


def test_a_planned_source_nvshmem_counts_by_its_version():
    node = copy.deepcopy(NODE)
    node["interpreter"]["nvshmem_wheel"] = None
    answer = inputs(node, nvshmem_dir="", nvshmem_version="", nvshmem_planned="3.5.21")
    # NVSHMEM 3.5 with the RC-QP fix declared: the gate passes; the build would get no NVSHMEM_DIR yet.
    assert answer["problems"] == []
    assert answer["build"]["inputs"]["nvshmem"] == "3.5.21"


def test_without_a_reading_the_preflight_role_is_named():
    answer = work_out(None, dict(SETTINGS_OF_THE_ROLE))
    assert answer["problems"] == [NO_READING]
    assert answer["build"] is None and answer["gate"] is None


def test_a_given_interpreter_that_does_not_exist_stops_and_the_role_venv_does_not():
    node = copy.deepcopy(NODE)
    node["interpreter"] = {"exists": False}
    given = inputs(node, python="/usr/bin/python3.99", given_python="/usr/bin/python3.99")
    assert given["problems"] == [
        "deepep_python /usr/bin/python3.99 does not exist; point it at the interpreter with the pinned torch, or "
        "leave it empty for a venv the role owns."]
    venv = inputs(node)
    assert venv["problems"] == [] and not venv["python_exists"] and venv["build"] is None


def test_the_compatibility_rules_stop_with_their_fix():
    answer = inputs(version="v2")
    # V2 on torch 2.11 and NCCL 2.28.9: NCCL is too old for the Gin backend.
    assert len(answer["problems"]) == 1
    assert answer["problems"][0].startswith("DeepEP v2 cannot be built here: ")
    assert "NCCL" in answer["problems"][0]
    # The NCCL the nccl layer of this run will provide is what the build gets.
    planned = work_out(copy.deepcopy(NODE), dict(SETTINGS_OF_THE_ROLE, version="v2"), nccl_planned="2.30.4")
    assert planned["problems"] == []
    assert "NVSHMEM_DIR" not in planned["build"]["environment"]


def test_a_half_installed_nccl_wheel_is_the_nccl_layers_to_finish_when_it_runs_next():
    # A pip changing torch's NCCL wheel was stopped between its uninstall and its install: torch does not import.
    node = copy.deepcopy(NODE)
    node["interpreter"]["torch"] = {"version": None, "cuda": None, "nccl": None,
                                    "error": "OSError: .../nvidia/nccl/lib/libnccl.so.2: cannot open shared object file"}
    node["interpreter"]["nccl_wheel"] = {"package": "nvidia-nccl-cu13", "version": None, "dir": "/venv/nvidia/nccl",
                                         "replaced_by": None, "upgraded_from": "2.28.9", "half_installed": True}
    said = ("DeepEP v1 cannot be built here: [input] torch cannot load its own NCCL in the build interpreter: its NCCL wheel "
            "nvidia-nccl-cu13 is half-installed (a pip changing it was stopped before it finished; torch came with "
            "2.28.9). Fix: run again with the nccl layer (without --tags, or with --tags nccl): it installs the wheel "
            "again (DeepEP V1: nvidia-nccl-cu13==2.28.9; V2: nccl_version, with nccl_method wheel or source).")
    assert inputs(node)["problems"] == [said]
    # The nccl layer comes after this check: V1's installs 2.28.9 again, V2's its NCCL; the role checks again after.
    assert inputs(node, nccl_ahead=True)["problems"] == []
    v2 = work_out(copy.deepcopy(node), dict(SETTINGS_OF_THE_ROLE, version="v2", nccl_ahead=True), nccl_planned="2.30.7")
    assert v2["problems"] == []
    # V2 with nccl_method none (nothing planned): no layer puts a wheel there.
    none = work_out(copy.deepcopy(node), dict(SETTINGS_OF_THE_ROLE, version="v2", nccl_ahead=True))
    assert len(none["problems"]) == 1 and "half-installed" in none["problems"][0]
    # Installed, its library cut short (a pip install -I stopped while it wrote it): the version its metadata names.
    cut = dict(node["interpreter"]["nccl_wheel"], version="2.28.9", cut_short={
        "package": "nvidia-nccl-cu13", "version": "2.28.9", "lib": "/venv/nvidia/nccl/lib/libnccl.so.2", "size": 1,
        "recorded_size": 2})
    node["interpreter"]["nccl_wheel"] = cut
    assert inputs(node)["problems"] == [said.replace("torch came with", "its metadata names")]
    # torch not importable for another reason: as before, whatever comes after.
    node["interpreter"]["nccl_wheel"] = None
    assert inputs(node, nccl_ahead=True)["problems"] == [
        "DeepEP v1 cannot be built here: [input] torch is not importable by the build interpreter. Fix: install the "
        "pinned torch or point deepep_python at the interpreter that has it."]


def test_the_toolkit_read_elsewhere_is_the_roles_own_reading():
    probed = {"cuda_home": "/usr/local/cuda", "release": "13.0", "full_version": "13.0.48",
              "cccl_include_dir": "/usr/local/cuda/include/cccl"}
    answer = work_out(copy.deepcopy(NODE), dict(SETTINGS_OF_THE_ROLE, cuda_known=False), cuda_probed=probed)
    assert answer["build"]["environment"]["CUDA_HOME"] == "/usr/local/cuda"
    assert answer["build"]["inputs"]["cuda"] == "13.0.48"


def test_the_toolkit_and_compiler_are_build_inputs():
    answer = inputs(gcc="14.1.0\n")
    assert answer["build"]["inputs"]["gcc"] == "14.1.0"
    assert answer["build"]["inputs"]["cuda"] == "13.0.88"


def test_an_archive_is_copied_under_the_prefix_and_no_git_source_is_named():
    build = inputs(src="files/DeepEP-8a07e7e.tar.gz", build_jobs=16, cxx="")["build"]
    assert (build["src"], build["controller_src"], build["git_url"], build["git_ref"]) == (
        "/opt/deepep/sources/DeepEP-8a07e7e.tar.gz", "files/DeepEP-8a07e7e.tar.gz", "", "")
    assert build["environment"]["MAX_JOBS"] == "16" and "CXX" not in build["environment"]


def test_an_undefined_symbol_rebuilds_the_live_build():
    node = copy.deepcopy(NODE)
    node["interpreter"]["deep_ep"] = {"undefined_symbol": True}
    assert inputs(node)["build"]["rebuild_current"] is True


def test_every_setting_is_required():
    settings = dict(SETTINGS_OF_THE_ROLE)
    del settings["cuda_home"]
    with pytest.raises(InputsError, match="cuda_home"):
        work_out(NODE, settings)
    assert set(SETTINGS) == set(SETTINGS_OF_THE_ROLE)
