# -*- coding: utf-8 -*-
from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter.deepep import FilterModule

F = FilterModule().filters()


@pytest.mark.parametrize("value, expected", [
    ("9.0", "9.0"), (9.0, "9.0"), ("10.0", "10.0"), ("NVIDIA H200", "9.0"), ("NVIDIA H100 80GB HBM3", "9.0"),
    ("NVIDIA B200", "10.0"), ("NVIDIA GB200", "10.0"), ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA L40S", "8.9"),
])
def test_compute_cap(value, expected):
    assert F["compute_cap"](value) == expected


@pytest.mark.parametrize("value", ["10", "sm90", "90", "NVIDIA Quadro Unknown", ""])
def test_compute_cap_rejects_non_arch(value):
    with pytest.raises(AnsibleFilterError, match="compute capability"):
        F["compute_cap"](value)


def test_arch_lists_sorted_unique():
    assert F["torch_arch_list"](["NVIDIA B200", "9.0", "NVIDIA H200"]) == "9.0;10.0"
    assert F["cmake_arch"](["NVIDIA B200", "9.0", "NVIDIA H200"]) == "90;100"
    assert F["torch_arch_list"]("9.0") == "9.0"
    assert F["cmake_arch"](["8.0"]) == "80"


MAPPING = [{"gpu": 0, "hca": "mlx5_0", "port": 1, "distance": "PIX"},
           {"gpu": 1, "hca": "mlx5_0", "port": 1, "distance": "PIX"},
           {"gpu": 2, "hca": "mlx5_2", "port": 2, "distance": "PXB"}]


def test_mapping_strings():
    assert F["deepep_hca_mapping"](MAPPING) == "0:mlx5_0:1,1:mlx5_0:1,2:mlx5_2:2"
    assert F["nvshmem_hca_list"](MAPPING) == "mlx5_0:1,mlx5_2:2"
    assert F["deepep_hca_mapping"]([]) == ""


@pytest.mark.parametrize("bad", ["0:mlx5_0:1", [{"gpu": 0, "hca": "mlx5_0"}], None])
def test_mapping_filters_reject_malformed_input(bad):
    with pytest.raises(AnsibleFilterError, match="gpu, hca, port"):
        F["deepep_hca_mapping"](bad)


def test_nvshmem_source_version_filter():
    assert F["_nvshmem_source_version"]("nvshmem-v3.4.5-0.tar.gz") == "3.4.5"
    assert F["_nvshmem_source_version"]("v3.5.19-1") == "3.5.19"
    assert F["_nvshmem_source_version"]("nvshmem-src.tar.gz", "3.4.5-0") == "3.4.5"  # the declared one wins
    assert F["_nvshmem_source_version"]("main") == ""


def test_nvshmem_source_plan_filter():
    plan = F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], gdrcopy_root="/opt/deepep/gdrcopy/builds/x")
    assert plan["version"] == "3.4.5" and plan["cmake_options"]["GDRCOPY_HOME"] == "/opt/deepep/gdrcopy/builds/x"
    with pytest.raises(AnsibleFilterError, match="set nvshmem_ibgda_source_version"):
        F["_nvshmem_source_plan"]("main", ["9.0"])
    with pytest.raises(AnsibleFilterError, match="'10' is neither a CUDA compute capability"):
        F["_nvshmem_source_plan"]("v3.4.5-0", ["10"])


def test_nvshmem_source_plan_gives_the_builds_environment_and_inputs():
    cuda = {"cuda_home": "/usr/local/cuda-12.9", "full_version": "12.9.86", "release": "12.9"}
    plan = F["_nvshmem_source_plan"]("nvshmem-v3.4.5-0.tar.gz", ["9.0"], gdrcopy_root="/opt/g", cuda=cuda,
                                     cuda_home="/usr/local/cuda", build_path=["/opt/cmake/bin"])
    assert plan["environment"] == {"CUDA_HOME": "/usr/local/cuda-12.9",
                                   "PATH": "/opt/cmake/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert plan["inputs"] == {"version": "3.4.5", "cuda": "12.9.86", "gdrcopy_root": "/opt/g"}
    # No toolkit found (check mode before the cuda role ran): the role's setting, and the release when that is all.
    plan = F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], cuda={"cuda_home": None, "release": "12.9"},
                                     cuda_home="/usr/local/cuda")
    assert plan["environment"] == {"CUDA_HOME": "/usr/local/cuda"} and plan["inputs"]["cuda"] == "12.9"
    with pytest.raises(AnsibleFilterError, match="cuda: expected the CUDA toolkit's reading"):
        F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], cuda="12.9")


def test_nvshmem_source_plan_names_every_missing_tool_before_planning():
    """The role's one check: what the node lacks for the build, all at once, each naming what to install or set; the
    plan is not made then (a source of unknown version would fail it: the tools' problems come first)."""
    none = {"nvcc": False, "cmake": "False", "mlx5dv_header": False}  # a template may hand a boolean as a string
    blocked = F["_nvshmem_source_plan"]("main", [], found=none, cuda_home="/usr/local/cuda",
                                        build_path=["/opt/cmake/bin"], rdma_include_dir="/opt/rdma/include")
    assert blocked == {"problems": [
        "No GPU architecture to build for: the node's reading has no GPUs (the preflight role reads them; "
        "playbooks/deepep.yml runs it) and nvshmem_ibgda_arch_list is empty; set it, e.g. ['9.0'].",
        "No nvcc under /usr/local/cuda or on PATH; install the CUDA toolkit (cuda role) or set nvshmem_ibgda_cuda_home.",
        "cmake (>= 3.19) not found on PATH or in /opt/cmake/bin: install it (apt-get install cmake, or pip install "
        "cmake into a venv and add its bin to nvshmem_ibgda_build_path).",
        "[KF11] /opt/rdma/include/infiniband/mlx5dv.h not found: NVSHMEM's IBGDA transport needs rdma-core's headers. "
        "Install libibverbs-dev and librdmacm-dev (or DOCA-OFED), set nvshmem_ibgda_rdma_include_dir, or use "
        "nvshmem_ibgda_method: wheel."]}
    only_header = F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], found=dict(none, nvcc=True, cmake="True"),
                                            rdma_include_dir="/usr/include")
    assert [p.split(" ", 1)[0] for p in only_header["problems"]] == ["[KF11]"] and "version" not in only_header
    plan = F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], found={"nvcc": True, "cmake": True, "mlx5dv_header": True})
    assert plan["version"] == "3.4.5" and plan["problems"] == []
    with pytest.raises(AnsibleFilterError, match="found: expected"):
        F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], found=True)


def test_nvshmem_source_plan_names_the_patch_files_on_the_controller():
    """The role's files/patches: the build's module call reads them there (controller_patches); each says why."""
    patch_dir = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "nvshmem_ibgda", "files",
                             "patches")
    plan = F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"], patch_dir=patch_dir + "/")
    assert [os.path.isfile(p["path"]) for p in plan["patches"]] == [True]
    assert plan["patches"][0]["path"] == patch_dir + "/ibgda-roce-ah-attr-memset.patch"
    assert plan["patches"][0]["label"].startswith("ibgda-roce-ah-attr-memset.patch (KF15: ")
    assert "path" not in F["_nvshmem_source_plan"]("v3.4.5-0", ["9.0"])["patches"][0]


def test_deepep_torch_pin_filter():
    assert F["_deepep_torch_pin"]("2.9.1+cu129", "https://download.pytorch.org/whl/cu129") == []
    assert len(F["_deepep_torch_pin"]("2.9.1+cu129", "")) == 1


def test_deepep_tests_per_version():
    v1 = F["_deepep_tests"]("v1", intranode_thresholds={"dispatch_fp8": 240})
    assert [(t["test"], t["args"], t["thresholds"]) for t in v1] == [
        ("intranode", [], {"dispatch_fp8": 240}), ("low_latency", [], {})]
    v2 = F["_deepep_tests"]("v2", True, ["--skip-check"], ["--num-processes", "1"], {"dispatch": 10})
    assert [(t["test"], t["args"], t["thresholds"]) for t in v2] == [
        ("jit_warmup", ["--skip-check"], {}), ("elastic_ep", ["--num-processes", "1"], {"dispatch": 10}),
        ("elastic_barrier", [], {})]
    # Without the warm-up the elastic tests compile their own kernels.
    assert [t["test"] for t in F["_deepep_tests"]("v2", False)] == ["elastic_ep", "elastic_barrier"]
    with pytest.raises(AnsibleFilterError, match="expected the DeepEP version v1 or v2, got 'v3'"):
        F["_deepep_tests"]("v3")


def test_deepep_jit_cache_dirs_are_those_the_reading_does_not_show_as_wanted():
    root, cache, tmp = "/opt/deepep/jit-cache", "/opt/deepep/jit-cache/cache", "/opt/deepep/jit-cache/tmp"
    dirs = F["_deepep_jit_cache_dirs"]
    # No reading (a run without preflight's builds reading): all three, as the role always set them.
    assert dirs(root) == dirs(root, "", None) == [root, cache, tmp]
    as_root = {root: {"mode": "0755", "group": "root"}, cache: {"mode": "0755", "group": "root"},
               tmp: {"mode": "0755", "group": "root"}}
    assert dirs(root, "", as_root) == []
    # A directory missing (or a link, read as null) or with another mode is set again; the group matters only when
    # one shares the cache.
    assert dirs(root, "", dict(as_root, **{tmp: None})) == [tmp]
    assert dirs(root, "", dict(as_root, **{cache: {"mode": "2775", "group": "root"}})) == [cache]
    assert dirs(root, "", dict(as_root, **{cache: {"mode": "0755", "group": "jobs"}})) == []
    shared = dict((path, {"mode": "2775", "group": "jobs"}) for path in (root, cache, tmp))
    assert dirs(root, "jobs", shared) == []
    assert dirs(root, "ml", shared) == [root, cache, tmp]
    assert dirs(root, "jobs", as_root) == [root, cache, tmp]
    # A group given by number cannot be compared with the names read: the file module decides.
    assert dirs(root, "1234", shared) == [root, cache, tmp]
    with pytest.raises(AnsibleFilterError, match="the reading must be a mapping"):
        dirs(root, "", ["/opt/deepep/jit-cache"])


ENV = {"env": {"NVSHMEM_IB_ENABLE_IBGDA": "1", "DEEP_EP_HCA_MAP": "0:mlx5_0:1"}, "path_env": {"PYTHONPATH": "/opt/deepep/src"},
       "jit_env": {}, "ibgda": True, "notes": []}


def test_env_script_text_is_the_header_then_the_exports():
    text = F["_deepep_env_script_text"](dict(ENV), "node1", "/opt/deepep/env.sh")
    lines = text.splitlines()
    assert lines[:4] == ["# shellcheck shell=bash", "# Ansible managed",
                         "# DeepEP runtime environment for node1: `. /opt/deepep/env.sh`.",
                         "# Sourcing it twice is harmless. IBGDA variables: exported (GPU-to-NIC mapping found)."]
    assert lines[4:6] == ["export DEEP_EP_HCA_MAP='0:mlx5_0:1'", "export NVSHMEM_IB_ENABLE_IBGDA='1'"]
    assert lines[6].startswith('case ":${PYTHONPATH:-}:" in *:\'/opt/deepep/src\':*) ;;')
    assert text.endswith("\n") and len(lines) == 7


@pytest.mark.parametrize("generation, legacy, why", [
    ("v2", False, "left out (DeepEP V2 without its legacy kernels)"),
    ("v2", True, "left out (no RDMA port; KF36)"),
    ("v1", False, "left out (no RDMA port; KF36)"),
])
def test_env_script_text_says_why_the_ibgda_variables_are_left_out(generation, legacy, why):
    text = F["_deepep_env_script_text"](dict(ENV, ibgda=False), "n", "/e.sh", generation, legacy)
    assert text.splitlines()[3] == "# Sourcing it twice is harmless. IBGDA variables: %s." % why


def test_env_script_text_takes_lines_the_env_filter_rendered_and_rejects_other_input():
    text = F["_deepep_env_script_text"](dict(ENV, lines=["export A=1"]), "n", "/e.sh")
    assert text.splitlines()[4:] == ["export A=1"]
    with pytest.raises(AnsibleFilterError, match="result of moe_infra.deepep.deepep_env"):
        F["_deepep_env_script_text"]({"lines": []}, "n", "/e.sh")
