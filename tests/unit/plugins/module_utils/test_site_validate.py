# -*- coding: utf-8 -*-
"""The site's variables are refused before any host is touched, each with the variable, value and what is
accepted; the defaults and the example inventories' values pass."""

from __future__ import annotations

import os
import re
import tarfile

import pytest
import yaml

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nvshmem import defines_data_direct
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.topology import manual_mapping
from ansible_collections.moe_infra.deepep.plugins.module_utils.report.site_validate import (
    interpreter_problems,
    deepep_ref_generation,
    source_nvshmem_problems,
    tag_problems,
    validate,
)

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "playbooks")

GOOD = {
    "deepep_version": "v1", "deepep_git_ref": "8a07e7e7ed57cfc63005f670d64d410cb30b061b",
    "deepep_torch_version": "2.9.1+cu129", "deepep_torch_index_url": "https://download.pytorch.org/whl/cu129",
    "cuda_version": "12.9", "nvshmem_ibgda_method": "source", "doca_ofed_policy": "auto", "deepep_reboot": "auto",
    "deepep_arch_list": ["10.0"], "nvidia_peermapping_initramfs": "auto",
}


def problems(**changes):
    site = dict(GOOD, **changes)
    return validate(dict((k, v) for k, v in site.items() if v is not None))


def test_good_values_and_empty_pass():
    assert problems() == []
    assert validate({}) == []


@pytest.mark.parametrize("var, value, accepted", [
    ("deepep_version", "v3", "v1 | v2"),
    ("nvshmem_ibgda_method", "pip", "wheel | source"),
    ("doca_ofed_policy", "sometimes", "auto | always | never"),
    ("deepep_reboot", "always-if-needed", "auto | never"),
    ("nvidia_peermapping_initramfs", "mkinitcpio", "auto | update-initramfs | dracut | none"),
    ("cuda_version", "12", "12.9 | 13.0"),
])
def test_unknown_method_and_policy_names(var, value, accepted):
    found = problems(**{var: value})
    assert [p["var"] for p in found] == [var]
    assert found[0]["msg"].startswith("%s: %r is not accepted" % (var, value))
    assert found[0]["msg"].endswith("accepted: %s" % accepted)


@pytest.mark.parametrize("ref, generation", [
    ("8a07e7e", None), ("refs/pull/466/head", None), ("v1.2.1", "v1"), ("v2.0.0", "v2"),
    ("main", False), ("v1", False), ("8a07e7e7ed57cfc63005f670d64d410cb30b061b0", False), ("refs/pull/x/head", False),
])
def test_ref_shapes(ref, generation):
    assert deepep_ref_generation(ref) == generation


def test_ref_that_is_neither_v1_nor_v2_shaped():
    found = problems(deepep_git_ref="main")
    assert found[0]["var"] == "deepep_git_ref" and "neither V1 nor V2-shaped" in found[0]["msg"]
    mismatch = problems(deepep_git_ref="v1.2.1", deepep_version="v2", deepep_torch_version="2.10.0+cu129")
    assert [p["var"] for p in mismatch] == ["deepep_git_ref"] and "tag of DeepEP V1" in mismatch[0]["msg"]
    # An archive replaces the ref: the ref is not used, so not checked.
    assert problems(deepep_git_ref="main", deepep_src="/srv/DeepEP.tar.gz") == []


def test_v2_needs_torch_2_10():
    found = problems(deepep_version="v2", deepep_git_ref="v2.0.0")
    assert [p["var"] for p in found] == ["deepep_torch_version"]
    assert "DeepEP V2 needs torch >= 2.10" in found[0]["msg"]
    assert problems(deepep_version="v2", deepep_git_ref="v2.0.0", deepep_torch_version="2.10.0+cu129") == []


def test_torch_pin_without_index_and_cuda_major():
    found = problems(deepep_torch_index_url="")
    assert found[0]["var"] == "deepep_torch_version" and "without an index for its CUDA build" in found[0]["msg"]
    assert "https://download.pytorch.org/whl/cu129" in found[0]["msg"]
    major = problems(cuda_version="13.0")
    assert [p["var"] for p in major] == ["deepep_torch_version"]
    assert "CUDA major differs from cuda_version 13.0" in major[0]["msg"]
    # With a given interpreter the role installs no torch: the pin is not used.
    assert problems(deepep_python="/opt/torch/.venv/bin/python3", deepep_torch_index_url="", cuda_version="13.0") == []


@pytest.mark.parametrize("value", ["10", "sm90", "9"])
def test_arch_that_is_not_a_cuda_arch(value):
    found = problems(deepep_arch_list=["9.0", value])
    assert [(p["var"], p["value"]) for p in found] == [("deepep_arch_list", value)]
    assert "compute capabilities like 9.0 or 10.0" in found[0]["msg"]


@pytest.mark.parametrize("var, value, ok", [
    ("deepep_serial", 4, True), ("deepep_serial", "25%", True), ("deepep_serial", "100%", True),
    ("deepep_serial", 0, False), ("deepep_serial", "0%", False), ("deepep_serial", "120%", False),
    ("deepep_serial", "four", False), ("deepep_max_fail_percentage", 0, True), ("deepep_max_fail_percentage", 100, True),
    ("deepep_max_fail_percentage", 101, False), ("deepep_max_fail_percentage", -1, False),
])
def test_batches_and_failure_share(var, value, ok):
    found = problems(**{var: value})
    assert (found == []) is ok, found
    if not ok:
        assert found[0]["var"] == var and found[0]["msg"].startswith("%s: %r is not accepted" % (var, value))


HCAS = [{"name": "mlx5_%d" % i, "ports": [{"port": 1}]} for i in range(2)]


def test_manual_mapping_accepted():
    mapping, found = manual_mapping("0:mlx5_1:1, 1:mlx5_0", 2, HCAS)
    assert found == []
    assert mapping == [{"gpu": 0, "hca": "mlx5_1", "port": 1, "distance": "manual"},
                       {"gpu": 1, "hca": "mlx5_0", "port": 1, "distance": "manual"}]
    assert manual_mapping(["1:mlx5_0:1", "0:mlx5_1:1"], 2, HCAS)[0][0]["gpu"] == 0


@pytest.mark.parametrize("value, why, accepted", [
    ("0-mlx5_0", "malformed entry", "comma-separated <gpu>:<hca>[:<port>] entries"),
    ("2:mlx5_0:1", "GPU 2 does not exist, this node has 2", "GPU indexes 0-1"),
    ("0:mlx5_7:1", "no RDMA device mlx5_7", "the RDMA devices here: mlx5_0, mlx5_1"),
    ("0:mlx5_0:2", "mlx5_0 has no port 2", "ports 1 of mlx5_0"),
    ("0:mlx5_0:1,0:mlx5_1:1", "GPU 0 mapped twice", "one entry per GPU"),
    (",", "empty", "comma-separated"),
])
def test_manual_mapping_refused(value, why, accepted):
    mapping, found = manual_mapping(value, 2, HCAS)
    assert len(found) == 1, found
    assert "(%s)" % why in found[0]["msg"] and ("accepted: %s" % accepted) in found[0]["msg"]
    assert found[0]["msg"].startswith("deepep_hca_mapping: ")


# An air-gapped site as README describes it: the cache, every source as an archive, wheels for the role's venv.
OFFLINE = {"deepep_offline": True, "deepep_cache_dir": "/srv/deepep-cache", "deepep_src": "/srv/src/DeepEP.tar.gz",
           "gdrcopy_src": "/srv/src/gdrcopy.tar.gz", "nvshmem_ibgda_src": "/srv/src/nvshmem.tar.gz",
           "deepep_pip_extra_args": "--no-index --find-links /srv/wheels"}
CONTROLLER = {"/srv/deepep-cache", "/srv/src/DeepEP.tar.gz", "/srv/src/gdrcopy.tar.gz", "/srv/src/nvshmem.tar.gz"}


def offline_problems(**changes):
    site = dict(GOOD, **dict(OFFLINE, **changes))
    site = dict((k, v) for k, v in site.items() if v is not None)
    return validate(site, isdir=lambda p: p == "/srv/deepep-cache", exists=lambda p: p in CONTROLLER)


def test_offline_needs_a_cache():
    found = problems(deepep_offline=True)
    assert found[0]["var"] == "deepep_offline" and "(no cache to use)" in found[0]["msg"]
    assert offline_problems() == []
    (found,) = offline_problems(deepep_cache_dir="/srv/deepep-cach")
    assert found["msg"] == ("deepep_cache_dir: '/srv/deepep-cach' is not accepted (it does not exist on the "
                            "controller); accepted: an existing controller directory holding the builds "
                            "(<component>-<fingerprint>.tar.gz) with deepep_offline=true")


def test_offline_needs_every_source_as_an_archive_and_wheels_for_the_venv():
    found = offline_problems(deepep_src=None, gdrcopy_src=None, nvshmem_ibgda_src=None, deepep_pip_extra_args=None)
    assert [p["var"] for p in found] == ["deepep_src", "gdrcopy_src", "nvshmem_ibgda_src", "deepep_pip_extra_args"]
    assert "(offline: deepep_git_url cannot be fetched)" in found[0]["msg"]
    assert "(offline: the role's venv would install torch from an index)" in found[3]["msg"]
    # Layers that do not build from source need no archive; a given interpreter needs no wheels.
    assert offline_problems(gdrcopy_src=None, gdrcopy_enabled=False, nvshmem_ibgda_src=None,
                            nvshmem_ibgda_method="wheel", deepep_pip_extra_args=None,
                            deepep_python="/opt/torch/.venv/bin/python3") == []


def test_a_source_archive_that_is_not_on_the_controller():
    (found,) = offline_problems(deepep_offline=False, gdrcopy_src="/srv/src/gdrcopy-2.5.tar.gz")
    assert found["msg"] == ("gdrcopy_src: '/srv/src/gdrcopy-2.5.tar.gz' is not accepted (it does not exist on the "
                            "controller); accepted: a source archive or directory on the controller, or '' for "
                            "gdrcopy_git_url")


# rdma_hca_info's results: GCP B200 before DOCA (rocep names, distro rdma-core without the dma-buf symbol),
# after DOCA, and a node without Mellanox hardware.
ROCEP = {"name": "rocep145s0", "family": "rocep"}
B200_BARE = {"hcas": [ROCEP], "mlx5_api_header": "/usr/include/infiniband/mlx5_api.h", "dmabuf_data_direct": False,
             "mellanox_pci_devices": ["0000:91:00.0"], "ofed_version": None}
B200_DOCA = dict(B200_BARE, hcas=[{"name": "mlx5_0", "family": "mlx5"}], dmabuf_data_direct=True,
                 ofed_version="OFED-internal-25.10")
NO_NICS = {"hcas": [], "mlx5_api_header": None, "dmabuf_data_direct": False, "mellanox_pci_devices": [],
           "ofed_version": None}


def test_source_nvshmem_with_ibgda_rdma_core_or_doca_to_come_passes():
    assert source_nvshmem_problems("source", B200_DOCA) == []
    assert source_nvshmem_problems("source", B200_BARE, "auto") == []  # doca_ofed installs it first
    assert source_nvshmem_problems("source", B200_BARE, "always") == []
    assert source_nvshmem_problems("wheel", NO_NICS) == []


@pytest.mark.parametrize("rdma, policy, found, doca", [
    (B200_BARE, "never", "/usr/include/infiniband/mlx5_api.h does not declare MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT",
     "skipped: doca_ofed_policy=never"),
    (NO_NICS, "auto", "no infiniband/mlx5_api.h under /usr/include, /opt/rdma/include",
     "skipped: no Mellanox hardware"),
])
def test_source_nvshmem_without_ibgda_rdma_core_is_refused(rdma, policy, found, doca):
    (problem,) = source_nvshmem_problems("source", rdma, policy, ["/usr/include", "/opt/rdma/include"])
    assert problem["var"] == "nvshmem_ibgda_method" and problem["value"] == "source"
    assert problem["msg"].startswith("nvshmem_ibgda_method: 'source' is not accepted (IBGDA needs DOCA-OFED's")
    assert found in problem["msg"] and doca in problem["msg"]
    assert "accepted: wheel" in problem["msg"]


def test_layer_tags_pass_and_typos_are_refused():
    assert tag_problems(["all"], []) == []
    assert tag_problems(["deepep"], ["deepep_verify"]) == []
    assert tag_problems(["system", "gdrcopy"], ["never"]) == []
    # What molecule passes on converge and idempotence.
    assert tag_problems(["all"], ["molecule-notest", "notest", "molecule-idempotence-notest"]) == []
    (run,) = tag_problems(["deepp"], [])
    assert run["var"] == "--tags" and run["value"] == "deepp"
    assert run["msg"].startswith("--tags deepp: no layer or step has that tag; accepted: preflight, system, doca_ofed")
    (skip,) = tag_problems(["all"], ["verify"])
    assert skip["msg"].startswith("--skip-tags verify: no layer or step has that tag")


def test_every_tag_the_playbooks_give_a_role_is_accepted():
    # --tags memlock was refused as naming no layer while system.yml tagged the memlock role with it.
    tags = set()
    for name in ("site.yml", "system_layers.yml", "build_layers.yml"):
        with open(os.path.join(PLAYBOOKS, name)) as handle:
            for play in yaml.safe_load(handle):
                for entry in play.get("roles") or []:
                    tags.update(entry.get("tags") or [])
                for task in play.get("tasks") or []:
                    tags.update(task.get("tags") or [])
    assert "memlock" in tags and "nvidia_driver" in tags
    assert [tag for tag in sorted(tags) if tag_problems([tag], [])] == []


def test_driver_branch_must_be_a_branch_number():
    (problem,) = validate({"nvidia_driver_branch": "580-open"})
    assert problem["msg"] == ("nvidia_driver_branch: '580-open' is not accepted; accepted: a driver branch like 570 "
                              "or 580 (nvidia-open-<branch>)")
    assert validate({"nvidia_driver_branch": "570"}) == []


def _stack(torch="2.11.0+cu130", nccl="2.28.9", nccl_wheel=None):
    """torch_stack_info's result, shaped as the module returns it (the GPU machine's: torch 2.11, NCCL 2.28.9)."""
    return {"torch": {"version": torch, "cuda": "13.0" if torch else None, "nccl": nccl if torch else None},
            "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": nccl_wheel, "dir": "/x"} if nccl_wheel else None}


def test_given_interpreter_for_v1_and_a_v2_ready_one_pass():
    assert interpreter_problems(_stack(), "v1", "/opt/torch/.venv/bin/python3") == []
    assert interpreter_problems(_stack(torch="2.10.0+cu130", nccl="2.30.4"), "v2", "/p") == []
    # torch's own NCCL unknown: the wheel's version counts.
    assert interpreter_problems(_stack(torch="2.12.0", nccl=None, nccl_wheel="2.31.0"), "v2", "/p") == []


def test_given_interpreter_without_torch_or_too_old_for_v2():
    (problem,) = interpreter_problems(_stack(torch=None), "v1", "/usr/bin/python3")
    assert problem["msg"] == ("deepep_python: '/usr/bin/python3' is not accepted (it has no torch); accepted: an "
                              "interpreter with torch installed, or '' for the role's venv with deepep_torch_version")
    # torch_stack_info with missing_ok on a path where there is no interpreter.
    (problem,) = interpreter_problems({"exists": False, "torch": None}, "v1", "/opt/nowhere/python3")
    assert problem["msg"].startswith("deepep_python: '/opt/nowhere/python3' is not accepted (it does not exist)")
    torch, nccl = interpreter_problems(_stack(torch="2.9.1+cu129", nccl="2.27.5"), "v2", "/p")
    assert "(its torch is 2.9.1+cu129; DeepEP V2 needs torch >= 2.10)" in torch["msg"]
    assert "(its NCCL is 2.27.5; DeepEP V2 needs NCCL >= 2.30.4 (KF31))" in nccl["msg"]
    (nccl,) = interpreter_problems(_stack(nccl="2.28.9"), "v2", "/p")
    assert nccl["var"] == "deepep_python" and "accepted: an interpreter whose NCCL is >= 2.30.4" in nccl["msg"]
    (missing,) = interpreter_problems(_stack(nccl=None), "v2", "/p")
    assert "its NCCL is missing" in missing["msg"]


def test_the_nccl_layer_of_the_run_is_what_v2_is_checked_against():
    # torch 2.11's NCCL 2.28.9 in the interpreter; the nccl layer of this run puts 2.30.7 there.
    assert interpreter_problems(_stack(nccl="2.28.9"), "v2", "/p", nccl_planned="2.30.7") == []
    (problem,) = interpreter_problems(_stack(nccl="2.30.7"), "v2", "/p", nccl_planned="2.28.9")
    assert problem["var"] == "nccl_version" and problem["msg"] == (
        "nccl_version: '2.28.9' is not accepted (the nccl layer would provide NCCL 2.28.9; DeepEP V2 needs NCCL "
        ">= 2.30.4 (KF31)); accepted: 2.30.4 or later for deepep_version=v2")
    # torch is checked either way.
    (torch,) = interpreter_problems(_stack(torch="2.9.1+cu129"), "v2", "/p", nccl_planned="2.30.7")
    assert "DeepEP V2 needs torch >= 2.10" in torch["msg"]


def _half_installed(installed="2.11.0+cu130"):
    """torch_stack_info's result after a pip was killed between its uninstall of torch's NCCL wheel and its install
    (the GPU machine's, docs/results/nccl-wheel-killed-pip-h200): torch not imported, its version from metadata."""
    return {"torch": {"version": None, "cuda": None, "nccl": None, "installed": installed,
                      "error": "ImportError: not imported: its NCCL wheel nvidia-nccl-cu13 is half-installed"},
            "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": None, "dir": "/x", "replaced_by": None,
                           "upgraded_from": "2.28.9", "half_installed": True}}


def test_a_half_installed_nccl_wheel_is_left_to_the_nccl_layer_of_the_run():
    # Not "it has no torch": V1's nccl layer installs torch's own again, V2's the NCCL it plans.
    assert interpreter_problems(_half_installed(), "v1", "/p") == []
    assert interpreter_problems(_half_installed(), "v2", "/p", nccl_planned="2.30.7") == []
    # torch's installed version is still judged for V2, and so is the NCCL the layer would provide.
    (torch,) = interpreter_problems(_half_installed("2.9.1+cu129"), "v2", "/p", nccl_planned="2.30.7")
    assert "(its torch is 2.9.1+cu129; DeepEP V2 needs torch >= 2.10)" in torch["msg"]
    (old,) = interpreter_problems(_half_installed(), "v2", "/p", nccl_planned="2.28.9")
    assert old["var"] == "nccl_version"
    # V2 with no NCCL from this run (nccl_method none, or a run without the nccl layer): named, with what to run.
    (problem,) = interpreter_problems(_half_installed(), "v2", "/p")
    assert problem["msg"] == (
        "deepep_python: '/p' is not accepted (its NCCL wheel nvidia-nccl-cu13 is half-installed (a pip changing it "
        "was stopped before it finished): torch cannot load its own NCCL, and this run provides none); accepted: "
        "a run with the nccl layer (without --tags, or with --tags nccl) and nccl_method wheel or source, which installs "
        "the NCCL wheel again, or deepep_version=v1")
    # Without torch at all, still said so.
    (problem,) = interpreter_problems(_half_installed(installed=None), "v1", "/p")
    assert "(it has no torch)" in problem["msg"]


def test_a_cut_short_nccl_library_is_refused_where_the_nccl_layer_would_keep_it_or_lacks_pip():
    # pip install -I stopped while it wrote the library (the wheel installed, no stash): V2's source method would
    # back it up as the wheel's library; the wheel method at the pin needs pip to install it again.
    cut = {"package": "nvidia-nccl-cu13", "version": "2.30.7", "lib": "/x/lib/libnccl.so.2", "size": 531840,
           "recorded_size": 15040}
    stack = dict(_half_installed(), pip="24.0")
    stack["nccl_wheel"] = dict(stack["nccl_wheel"], version="2.30.7", cut_short=cut)
    assert interpreter_problems(stack, "v2", "/p", nccl_planned="2.30.7", nccl_method="wheel") == []
    (problem,) = interpreter_problems(stack, "v2", "/p", nccl_planned="2.30.7", nccl_method="source")
    assert problem["msg"] == (
        "deepep_python: '/p' is not accepted (nvidia-nccl-cu13 2.30.7's /x/lib/libnccl.so.2 is 531840 bytes where "
        "its RECORD says 15040 (a pip writing it was stopped before it finished), and nccl_method source would keep "
        "it as the wheel's library to put back for DeepEP V1); accepted: nccl_method: wheel (it installs the wheel "
        "again), or the wheel installed again first (python -m pip install --force-reinstall --no-deps "
        "nvidia-nccl-cu13==2.30.7)")
    (no_pip,) = interpreter_problems(dict(stack, pip=None), "v2", "/p", nccl_planned="2.30.7", nccl_method="wheel")
    assert "it has no pip, which nccl_method wheel runs (python -m pip) to install NCCL 2.30.7" in no_pip["msg"]


def test_a_node_nccl_that_torch_loads_first_is_the_one_judged():
    """A node NCCL (GCP gIB's /usr/local/gib/lib64) that torch's import maps before the interpreter's nvidia/nccl
    one (through LD_PRELOAD: torch 2.11's RPATH beats LD_LIBRARY_PATH, docs/results/nccl-loader-h100)."""
    site = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl"

    def gib(version):
        stack = _stack(nccl=version, nccl_wheel="2.28.9")
        stack["nccl_wheel"]["dir"] = site
        stack["torch"].update(nccl_lib="/usr/local/gib/lib64/libnccl.so.2",
                              nccl_libs=["/usr/local/gib/lib64/libnccl.so.2"])
        return stack

    # gIB bundling 2.30.4: the node's NCCL is new enough and is used.
    assert interpreter_problems(gib("2.30.4"), "v2", "/p", nccl_planned="2.30.7") == []
    # An older gIB: the nccl layer's 2.30.7 in the interpreter would not be what torch loads.
    (problem,) = interpreter_problems(gib("2.27.7"), "v2", "/p", nccl_planned="2.30.7")
    assert problem["var"] == "deepep_python" and (
        "torch loads /usr/local/gib/lib64/libnccl.so.2 (NCCL 2.27.7) from outside the interpreter, before its own "
        "nvidia/nccl: the NCCL the nccl layer installs there would not be used" in problem["msg"])
    # The interpreter's own library (what the nccl layer replaces) is not the node's.
    own = gib("2.28.9")
    own["torch"]["nccl_lib"] = site + "/lib/libnccl.so.2"
    assert interpreter_problems(own, "v2", "/p", nccl_planned="2.30.7") == []
    # Nor is it when site-packages is reached through a symlink: the loader names the library by its real path.
    moved = gib("2.28.9")
    moved["nccl_wheel"]["real_dir"] = "/data/torch/.venv/lib/python3.12/site-packages/nvidia/nccl"
    moved["torch"]["nccl_lib"] = "/data/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    assert interpreter_problems(moved, "v2", "/p", nccl_planned="2.30.7") == []
    del moved["nccl_wheel"]["real_dir"]
    (problem,) = interpreter_problems(moved, "v2", "/p", nccl_planned="2.30.7")
    assert "from outside the interpreter" in problem["msg"]


@pytest.mark.parametrize("var, value, why", [
    ("deepep_git_url", "--upload-pack=touch /tmp/pwned;", "it would be read as an option"),
    ("gdrcopy_git_url", "--upload-pack=touch /tmp/pwned;", "it would be read as an option"),
    ("nvshmem_ibgda_git_url", "ext::sh -c 'touch /tmp/pwned'", "whitespace"),
    ("nvshmem_ibgda_git_url", "ext::sh%-c%touch%/tmp/pwned", "<transport>::<address>"),
    ("deepep_git_url", "ftp://example.invalid/DeepEP.git", "scheme ftp:// is not one of https, ssh, file"),
    ("gdrcopy_git_ref", "--upload-pack=x", "it would be read as an option"),
    ("nvshmem_ibgda_git_ref", "v3.4.5-0;touch", "not a commit, tag, branch or ref name"),
])
def test_git_urls_and_refs_that_would_reach_git_as_options_are_refused(var, value, why):
    problems = validate({var: value})
    assert [p["var"] for p in problems] == [var], problems
    assert problems[0]["msg"].startswith("%s: %r is not accepted (" % (var, value)) and why in problems[0]["msg"]


@pytest.mark.parametrize("url", ["https://github.com/NVIDIA/gdrcopy.git", "git@github.com:NVIDIA/nvshmem.git",
                                 "ssh://git@example.com/DeepEP.git", "file:///srv/git/DeepEP", "/srv/git/DeepEP"])
def test_git_urls_of_the_accepted_forms_pass(url):
    assert validate({"deepep_git_url": url, "gdrcopy_git_url": url, "nvshmem_ibgda_git_url": url,
                     "gdrcopy_git_ref": "v2.5.1", "nvshmem_ibgda_git_ref": "refs/tags/v3.4.5-0"}) == []


@pytest.mark.parametrize("var, value, why", [
    ("deepep_prefix", "/", "a system directory"),
    ("deepep_prefix", "relative/path", "not an absolute path"),
    ("deepep_prefix", "/opt/x; touch /tmp/pwned", "it holds a character a shell would interpret"),
    ("deepep_prefix", "/opt/$(touch /tmp/pwned)", "it holds a character a shell would interpret"),
    ("deepep_prefix", "/opt/deepep/../../etc", "not normalised"),
    ("nvshmem_ibgda_prefix", "/usr", "a system directory"),
    ("gdrcopy_prefix", "/usr/lib/gdrcopy", "inside a tree the distribution or the kernel owns"),
    ("deepep_venv", "/opt/venv`touch /tmp/pwned`", "it holds a character a shell would interpret"),
    ("deepep_python", "/opt/torch/bin/python$(touch /tmp/pwned)", "it holds a character a shell would interpret"),
    ("deepep_env_script", "/opt/deepep/env.sh\ntouch /tmp/pwned", "it holds a character a shell would interpret"),
    ("deepep_cuda_home", "cuda", "not an absolute path"),
    ("deepep_venv_python", "python3; touch /tmp/pwned", "it holds a character a shell would interpret"),
])
def test_paths_that_a_shell_would_read_or_that_are_system_directories(var, value, why):
    problems = validate({var: value})
    assert [p["var"] for p in problems] == [var], problems
    assert problems[0]["msg"].startswith("%s: %r is not accepted (%s" % (var, value, why)), problems[0]["msg"]


@pytest.mark.parametrize("var, value", [
    ("deepep_verify_timeout", 0), ("deepep_verify_timeout", "abc"), ("deepep_verify_num_processes", -1),
    ("deepep_build_jobs", "abc"), ("gdrcopy_build_jobs", "x"), ("nvshmem_ibgda_build_jobs", -2),
    ("deepep_build_poll", 0), ("deepep_internode_timeout", True),
])
def test_counts_and_timeouts(var, value):
    problems = validate({var: value})
    assert [p["var"] for p in problems] == [var] and "accepted: a whole number >=" in problems[0]["msg"], problems


@pytest.mark.parametrize("variables, var, why", [
    ({"doca_ofed_version": "banana"}, "doca_ofed_version", "accepted: a DOCA release like 3.2.1"),
    ({"deepep_intranode_thresholds": {"dispatch_fp8": -1}}, "deepep_intranode_thresholds", "not a bandwidth > 0"),
    ({"deepep_intranode_thresholds": {"dispatch": 240}}, "deepep_intranode_thresholds", "unknown key dispatch"),
    ({"deepep_low_latency_thresholds": {"dispatch_fp8": 240}}, "deepep_low_latency_thresholds",
     "unknown key dispatch_fp8"),
    ({"deepep_internode_thresholds": {"combine_bf16": "fast"}}, "deepep_internode_thresholds", "not a bandwidth"),
    ({"deepep_env_extra": {"1BAD": "x"}}, "deepep_env_extra", "not a variable name"),
    ({"deepep_env_extra": {"LD_PRELOAD": "/x.so"}}, "deepep_env_extra", "managed by the role"),
    ({"nvshmem_ibgda_cmake_options": {"-DX": "ON"}}, "nvshmem_ibgda_cmake_options", "not a cmake variable name"),
])
def test_thresholds_names_and_releases(variables, var, why):
    problems = validate(variables)
    assert [p["var"] for p in problems] == [var] and why in problems[0]["msg"], problems


def test_good_paths_counts_and_thresholds_pass():
    assert validate({
        "deepep_prefix": "/opt/deepep", "gdrcopy_prefix": "/opt/deepep/gdrcopy", "deepep_venv": "/opt/deepep/venv",
        "nvshmem_ibgda_prefix": "/usr/local/deepep/nvshmem", "deepep_python": "/opt/torch/.venv/bin/python3",
        "deepep_env_script": "/opt/deepep/env.sh", "deepep_cuda_home": "/usr/local/cuda-13.0", "deepep_python_": "",
        "deepep_verify_timeout": 900, "deepep_verify_num_processes": 0, "deepep_build_jobs": "8",
        "doca_ofed_version": "3.2.1", "deepep_intranode_thresholds": {"dispatch_fp8": 240, "combine_bf16": 300.5},
        "deepep_low_latency_thresholds": {"dispatch": 240}, "deepep_env_extra": {"NVSHMEM_DEBUG": "INFO"},
        "nvshmem_ibgda_cmake_options": {"NVSHMEM_MPI_SUPPORT": "OFF"}}) == []


@pytest.mark.parametrize("value, ok", [("deepep-build", True), ("nobody", True), ("", True), ("root; id", False),
                                       ("-u0", False), ("Build User", False)])
def test_build_user_names(value, ok):
    problems = validate({"deepep_build_user": value, "gdrcopy_build_user": value})
    assert (problems == []) == ok, problems


# The H200 test machine: rdma-core 50's headers (no DATA_DIRECT symbol), no RDMA NICs, so no DOCA-OFED to come.
H200_RDMA_CORE_50 = dict(NO_NICS, mlx5_api_header="/usr/include/infiniband/mlx5_api.h")
IB_COMMON_3_4_5 = ("#ifdef NVSHMEM_USE_MLX5DV\n#include <infiniband/mlx5dv.h>\n"
                   "#ifndef MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT\n#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT 1\n"
                   "#endif\n#endif\n")


def nvshmem_source(tmp_path, header_text, archive=True):
    tree = tmp_path / "nvshmem"
    header = tree / "src" / "modules" / "transport" / "common" / "transport_ib_common.h"
    header.parent.mkdir(parents=True)
    header.write_text(header_text)
    if not archive:
        return str(tree)
    path = tmp_path / "nvshmem_src_x.tar.gz"
    with tarfile.open(str(path), "w:gz") as tar:
        tar.add(str(tree), arcname="nvshmem")
    return str(path)


@pytest.mark.parametrize("archive", [True, False])
def test_a_source_that_defines_the_symbol_itself_builds_on_rdma_core_50(tmp_path, archive):
    src = nvshmem_source(tmp_path, IB_COMMON_3_4_5, archive)
    assert defines_data_direct(src=src)[0] is True
    assert source_nvshmem_problems("source", H200_RDMA_CORE_50, "auto", [], {"src": src}) == []


def test_a_source_that_needs_the_header_is_refused_naming_how_it_was_read(tmp_path):
    src = nvshmem_source(tmp_path, "#include <infiniband/mlx5dv.h>\n")
    (problem,) = source_nvshmem_problems("source", H200_RDMA_CORE_50, "auto", [], {"src": src})
    assert "mlx5_api.h does not declare MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, which this NVSHMEM source does not " \
           "define itself (read nvshmem/src/modules/transport/common/transport_ib_common.h in %s)" % src \
           in problem["msg"]


@pytest.mark.parametrize("source, defines", [
    ({"ref": "v3.4.5-0"}, True), ({"version": "3.4.5"}, True), ({"ref": "v3.5.19-1"}, False),
    ({"src": "/nonexistent/nvshmem_src_3.4.5-0.txz"}, True), ({}, False), ({"ref": "main"}, False),
])
def test_without_the_source_at_hand_the_version_decides(source, defines):
    assert defines_data_direct(**source)[0] is defines
    problems = source_nvshmem_problems("source", H200_RDMA_CORE_50, "auto", [], source)
    assert (problems == []) is defines


def test_no_headers_at_all_is_refused_whatever_the_source(tmp_path):
    (problem,) = source_nvshmem_problems("source", NO_NICS, "auto", ["/usr/include"], {"ref": "v3.4.5-0"})
    assert "no infiniband/mlx5_api.h under /usr/include" in problem["msg"]


def test_types_from_the_role_specs():
    options = {"cuda_profile_path": {"type": "bool", "default": True, "description": "x"},
               "doca_ofed_packages": {"type": "list", "elements": "str", "default": ["doca-ofed"]},
               "fixture_mode": {"type": "str", "choices": ["auto", "none"]}}
    problems = validate({"cuda_profile_path": "perhaps", "doca_ofed_packages": {"a": 1},
                         "fixture_mode": "later"}, options=options)
    by_var = dict((p["var"], p) for p in problems)
    assert by_var["cuda_profile_path"]["accepted"] == "bool"
    assert by_var["doca_ofed_packages"]["accepted"] == "a list of str"
    assert by_var["fixture_mode"]["accepted"] == "auto | none"
    assert by_var["cuda_profile_path"]["msg"].startswith("cuda_profile_path: 'perhaps' is not accepted (")
    # Accepted values, and values Ansible converts (a string of digits for an int, "yes" for a bool), pass.
    assert validate({"cuda_profile_path": "yes", "doca_ofed_packages": ["doca-ofed"],
                     "fixture_mode": "none"}, options=options) == []


def test_a_variable_already_refused_is_not_named_twice():
    problems = validate({"gdrcopy_build_jobs": "many"}, options={"gdrcopy_build_jobs": {"type": "int"}})
    assert [p["var"] for p in problems] == ["gdrcopy_build_jobs"]


@pytest.mark.parametrize("var, value, accepted", [
    ("deepep_lock_timeout", "-5", "a whole number, 0 or more"),
    ("deepep_network_retries", "three", "a whole number, 0 or more"),
    ("deepep_network_retry_delay", 2.5, "a whole number, 0 or more"),
    ("deepep_http_proxy", "proxy.example.com:3128", "a proxy URL like http://proxy.example.com:3128, or ''"),
    ("deepep_https_proxy", "http://proxy; rm -rf /", "a proxy URL like http://proxy.example.com:3128, or ''"),
    ("deepep_no_proxy", "localhost, .internal", "comma-separated hosts, domains or addresses"),
])
def test_site_wide_counts_and_proxies(var, value, accepted):
    found = problems(**{var: value})
    assert [p["var"] for p in found] == [var] and accepted in found[0]["msg"], found


def test_site_wide_counts_and_proxies_that_pass():
    assert problems(deepep_lock_timeout=0, deepep_network_retries="5", deepep_network_retry_delay=30,
                    deepep_http_proxy="http://proxy.example.com:3128", deepep_https_proxy="",
                    deepep_no_proxy="localhost,127.0.0.1,.internal,10.0.0.0/8") == []


def test_validate_yml_checks_the_variables_of_every_role_the_site_playbook_runs():
    # memlock_, nvidia_driver_ and nccl_ were missing from its list: a bad value reached the layers (nccl_method:
    # conda went on to install CUDA) instead of stopping the run before any host was touched.
    with open(os.path.join(PLAYBOOKS, "validate.yml")) as handle:
        text = handle.read()
    pattern = re.compile("".join(re.findall(r"'([^']*)'", text.split("ansible.builtin.varnames',", 1)[1].split("}}")[0])))
    roles = os.path.join(PLAYBOOKS, "..", "roles")
    # The image bake's roles run from playbooks/gcp_image.yml, which checks its own.
    unchecked = []
    for role in sorted(set(os.listdir(roles)) - {"gcp_image", "generalize"}):
        path = os.path.join(roles, role, "meta", "argument_specs.yml")
        with open(path) as handle:
            options = [name for entry_point in yaml.safe_load(handle)["argument_specs"].values()
                       for name in (entry_point.get("options") or {})]
        unchecked.extend("%s: %s" % (role, name) for name in options if not pattern.match(name))
    assert unchecked == []


def test_the_ssh_path_values_that_go_into_a_proxy_command_are_plain_names():
    """The inventories' IAP path puts gcp_name, gcp_zone and gcp_project into ssh's ProxyCommand, which ssh runs
    through a shell: anything but a plain GCP name stops the run before the first connection."""
    iap = {"deepep_ssh_via": "iap", "gcp_name": "a4-node-1", "gcp_zone": "us-central1-b", "gcp_project": "my-proj-1"}
    assert validate(iap) == []
    assert validate(dict(iap, gcp_project="example.com:my-proj-1")) == []
    for var, bad in (("gcp_zone", "us-central1-b; touch /tmp/x"), ("gcp_project", "p$(id)"),
                     ("gcp_name", "node-1 --impersonate-service-account=x"), ("gcp_zone", None)):
        problems = validate(dict(iap, **{var: bad}))
        assert [p["var"] for p in problems] == [var] and "ProxyCommand" in problems[0]["msg"], problems
    # Without the IAP path the GCP names are not checked (a direct path uses none of them).
    assert validate(dict(iap, deepep_ssh_via="direct", gcp_zone="anything at all")) == []
    assert validate({"deepep_ssh_via": "jump", "deepep_ssh_jump_host": "me@bastion.example.com:2222,hop2"}) == []
    for bad in ("", "bastion; id", "-oProxyCommand=id", "-oProxyJump", "me@-x"):
        assert [p["var"] for p in validate({"deepep_ssh_via": "jump", "deepep_ssh_jump_host": bad})] == \
            ["deepep_ssh_jump_host"]
    assert [p["accepted"] for p in validate({"deepep_ssh_via": "tunnel"})] == ["direct | iap | jump"]


def test_an_interpreter_with_no_pip_is_refused_where_the_nccl_layer_installs_a_wheel():
    # The nccl layer runs the interpreter's own pip: refused before the system layers, not after them.
    no_pip = dict(_stack(), pip=None)
    (problem,) = interpreter_problems(no_pip, "v2", "/p", nccl_planned="2.30.7", nccl_method="wheel")
    assert problem["msg"] == (
        "deepep_python: '/p' is not accepted (it has no pip, which nccl_method wheel runs (python -m pip) to install "
        "NCCL 2.30.7); accepted: an interpreter with pip (python -m ensurepip), or nccl_method: source")
    # Not where no wheel is installed with it: a source build, the wheel already at the pin, a run without the layer.
    assert interpreter_problems(no_pip, "v2", "/p", nccl_planned="2.30.7", nccl_method="source") == []
    at_pin = dict(_stack(nccl="2.30.7", nccl_wheel="2.30.7"), pip=None)
    assert interpreter_problems(at_pin, "v2", "/p", nccl_planned="2.30.7", nccl_method="wheel") == []
    assert interpreter_problems(no_pip, "v2", "/p", nccl_planned=None, nccl_method=None)[0]["msg"].endswith(
        "its NCCL is 2.28.9; DeepEP V2 needs NCCL >= 2.30.4 (KF31)); accepted: an interpreter whose NCCL is >= "
        "2.30.4 for deepep_version=v2 (nvidia-nccl-cu12/cu13; the nccl layer provides it unless nccl_method=none), "
        "or deepep_version=v1")
    # V1 needs it only to put back the version a V2 run or a stopped pip replaced.
    assert interpreter_problems(no_pip, "v1", "/p", nccl_method="wheel") == []
    half = dict(_half_installed(), pip=None)
    (problem,) = interpreter_problems(half, "v1", "/p", nccl_method="wheel")
    assert problem["msg"] == (
        "deepep_python: '/p' is not accepted (it has no pip, which the nccl layer runs (python -m pip) to install "
        "nvidia-nccl-cu13==2.28.9 again for DeepEP V1); accepted: an interpreter with pip (python -m ensurepip)")
    # A reading with pip, or one from a probe that did not say (no "pip" key), is not refused for it.
    assert interpreter_problems(dict(half, pip="24.0"), "v1", "/p", nccl_method="wheel") == []
    assert interpreter_problems(_half_installed(), "v1", "/p", nccl_method="wheel") == []
