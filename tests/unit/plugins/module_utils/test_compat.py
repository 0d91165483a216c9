# -*- coding: utf-8 -*-
"""Every rule of docs/compatibility.md the gate enforces: one case that trips it, one that does not."""
from __future__ import annotations

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import check, torch_pin_problems, version_tuple

# The GPU test machine: torch 2.11.0+cu130, NCCL 2.28.9, CUDA 13.0 with cccl, NVSHMEM wheel 3.4.5, H200.
GPU_MACHINE = dict(deepep_version="v1", torch="2.11.0+cu130", torch_cuda="13.0", nccl="2.28.9", cuda_release="13.0",
                   cccl_include_dir="/usr/local/cuda-13.0/include/cccl", gpu_compute_caps=["9.0"], arch_list=[],
                   nvshmem_version="3.4.5", nvshmem_35_fix=True, hca_families=[])


def gate(**changes):
    facts = dict(GPU_MACHINE)
    facts.update(changes)
    return check(facts)


def ids(result):
    return [(p["id"], p["message"]) for p in result["problems"]]


def test_gpu_machine_v1_passes_with_cccl_on_cpath():
    result = gate()
    assert result["problems"] == []
    assert result["arch_list"] == ["9.0"]
    assert result["build_env"] == {"CPATH": "/usr/local/cuda-13.0/include/cccl", "TORCH_CUDA_ARCH_LIST": "9.0"}


def test_v2_names_nccl_found():
    assert ids(gate(deepep_version="v2")) == [("KF31", "DeepEP V2 needs NCCL >= 2.30.4; found 2.28.9")]
    assert gate(deepep_version="v2", nccl="2.30.4")["problems"] == []


def test_the_message_says_every_problem_with_its_fix_in_one_line():
    assert gate()["message"] == ""
    result = gate(deepep_version="v2", torch="2.9.1+cu129")
    fixes = [problem["fix"] for problem in result["problems"]]
    assert len(fixes) == 2 and "\n" not in result["message"]
    assert result["message"] == (
        "DeepEP v2 cannot be built here: [input] DeepEP V2 needs torch >= 2.10; found 2.9.1+cu129. Fix: %s. "
        "[KF31] DeepEP V2 needs NCCL >= 2.30.4; found 2.28.9. Fix: %s." % tuple(fixes))


def test_v2_needs_torch_210():
    problems = ids(gate(deepep_version="v2", torch="2.9.1+cu129", nccl="2.30.4"))
    assert problems == [(None, "DeepEP V2 needs torch >= 2.10; found 2.9.1+cu129")]


def test_cuda13_without_cccl():
    assert ids(gate(cccl_include_dir=None))[0][0] == "KF21"
    assert "CPATH" not in gate(cuda_release="12.9", cccl_include_dir=None)["build_env"]


@pytest.mark.parametrize("caps, arches, kf07", [
    (["9.0"], ["10.0"], True),
    (["9.0"], ["9.0"], False),
    (["10.0"], [], False),
    ([], [], True),
    (["9.0"], ["sm90"], True),
])
def test_arch_list_must_cover_the_gpus(caps, arches, kf07):
    result = gate(gpu_compute_caps=caps, arch_list=arches)
    assert any(p["id"] == "KF07" for p in result["problems"]) is kf07


def test_non_90_builds_disable_aggressive_ptx_and_a100_sm90_features():
    assert gate(gpu_compute_caps=["10.0"])["build_env"]["DISABLE_AGGRESSIVE_PTX_INSTRS"] == "1"
    a100 = gate(gpu_compute_caps=["8.0"])["build_env"]
    assert a100["DISABLE_SM90_FEATURES"] == "1" and a100["TORCH_CUDA_ARCH_LIST"] == "8.0"
    assert "DISABLE_AGGRESSIVE_PTX_INSTRS" not in gate()["build_env"]


def test_nvshmem_3519_with_v1_needs_the_fix():
    assert ids(gate(nvshmem_version="3.5.19", nvshmem_35_fix=False))[0][0] == "KF25"
    assert gate(nvshmem_version="3.5.19", nvshmem_35_fix=True)["problems"] == []
    assert gate(nvshmem_version="3.4.5", nvshmem_35_fix=False)["problems"] == []


def test_old_nvshmem_with_rocep_names():
    assert ids(gate(nvshmem_version="3.3.20", hca_families=["rocep"]))[0][0] == "KF24"
    assert gate(nvshmem_version="3.3.20", hca_families=["mlx5"])["problems"] == []
    assert gate(nvshmem_version="3.4.5", hca_families=["rocep"])["problems"] == []


def test_bad_version_and_missing_torch():
    assert "neither v1 nor v2" in gate(deepep_version="v3")["problems"][0]["message"]
    assert "torch is not importable" in gate(torch=None)["problems"][0]["message"]


@pytest.mark.parametrize("text, expected", [("2.11.0+cu130", (2, 11, 0)), ("v3.5.19-1", (3, 5, 19)),
                                            ("2.28.9", (2, 28, 9)), (None, None), ("", None)])
def test_version_tuple(text, expected):
    assert version_tuple(text) == expected


def test_torch_built_for_another_cuda_major_is_refused():
    problems = ids(gate(torch="2.9.1+cu129", torch_cuda="12.9"))
    assert problems == [(None, "torch 2.9.1+cu129 is built for CUDA 12.9 but the toolkit is CUDA 13.0: torch's "
                               "extension build refuses mismatched major versions")]
    assert ids(gate(torch_cuda="13.1")) == []


def messages(problems):
    return [p["message"] for p in problems]


def test_torch_pin_with_the_index_of_its_cuda_build_passes():
    assert torch_pin_problems("2.9.1+cu129", "https://download.pytorch.org/whl/cu129") == []
    assert torch_pin_problems("2.11.0+cu130", "https://download.pytorch.org/whl/cu130/") == []
    # Air-gapped: a wheel folder stands for the index.
    assert torch_pin_problems("2.9.1+cu129", "", "--no-index --find-links /srv/wheels") == []


@pytest.mark.parametrize("version, index, message", [
    ("2.9.1+cu129", "", "torch 2.9.1+cu129 pinned without an index for its CUDA build"),
    ("2.9.1+cu129", "https://download.pytorch.org/whl/cu130",
     "torch 2.9.1+cu129 is a cu129 build but deepep_torch_index_url serves cu130 (https://download.pytorch.org/whl/cu130)"),
    ("2.9.1", "", "torch 2.9.1 pinned without an index for its CUDA build"),
    ("", "https://download.pytorch.org/whl/cu129", "deepep_python is empty, so the role installs torch, but "
                                                   "deepep_torch_version is empty"),
    ("latest", "https://download.pytorch.org/whl/cu129", "deepep_torch_version 'latest' is not a version"),
])
def test_bad_torch_pins(version, index, message):
    assert messages(torch_pin_problems(version, index)) == [message]


def test_missing_index_names_the_index_of_the_pin():
    problem = torch_pin_problems("2.9.1+cu129", "")[0]
    assert problem["fix"] == "set deepep_torch_index_url, e.g. https://download.pytorch.org/whl/cu129"
