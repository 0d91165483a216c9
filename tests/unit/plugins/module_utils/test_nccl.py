# -*- coding: utf-8 -*-
from __future__ import annotations

import os
import shutil
import sys

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nccl import (
    DEFAULTS,
    METHODS,
    PlanError,
    build_plan,
    gencode,
    planned_version,
    source_version,
    version_code,
)
from ansible_collections.moe_infra.deepep.plugins.modules import source_build

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nccl_src")


def test_versions_and_codes():
    assert source_version("v2.30.7-1") == "2.30.7" and source_version("nccl-2.30.4-1.tar.gz") == "2.30.4"
    assert source_version("master") is None
    assert version_code("2.30.7") == 23007 and version_code("2.28.9") == 22809


def test_gencode_is_one_sass_per_gpu_arch():
    assert gencode(["9.0"]) == "-gencode=arch=compute_90,code=sm_90"
    assert gencode(["NVIDIA B200", "9.0"]) == ("-gencode=arch=compute_90,code=sm_90 "
                                               "-gencode=arch=compute_100,code=sm_100")
    with pytest.raises(PlanError, match="no CUDA arch to build NCCL for"):
        gencode([])
    with pytest.raises(PlanError, match="nccl_arch_list: 'sm90' is neither"):
        gencode(["sm90"])


@pytest.mark.parametrize("source, version, message", [
    ("v2.28.9-1", None, "NCCL 2.28.9 is older than DeepEP V2 needs (>= 2.30.4)"),
    ("master", None, "cannot tell the NCCL version from 'master': set nccl_source_version"),
])
def test_plans_that_cannot_serve_v2_are_refused(source, version, message):
    with pytest.raises(PlanError) as info:
        build_plan(source, ["9.0"], "/usr/bin/python3", version=version)
    assert message in str(info.value)


def test_interpreter_must_be_absolute():
    with pytest.raises(PlanError, match="not an absolute interpreter path"):
        build_plan("v2.30.7-1", ["9.0"], "python3")


def _build(run_module, tmp_path, plan, name="src"):
    src = tmp_path / name
    shutil.copytree(FIXTURE, str(src))
    return run_module(source_build, dict(
        name="nccl", src=str(src), prefix=str(tmp_path / "opt"), build_command=plan["build_command"],
        verify_command=plan["verify_command"], environment={"CUDA_HOME": "/usr/local/cuda"},
        inputs={"version": plan["version"]}))


@pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("make"), reason="needs gcc and make")
def test_the_plan_builds_and_verifies_the_fixture_source(run_module, tmp_path):
    plan = build_plan("v2.30.7-1", ["9.0", "10.0"], sys.executable, jobs=2)
    result, failed = _build(run_module, tmp_path, plan)
    assert not failed, result
    current = tmp_path / "opt" / "current"
    assert os.path.islink(str(current / "lib" / "libnccl.so.2"))
    assert (current / "include" / "nccl_device" / "impl" / "core.h").is_file()  # the whole tree
    assert not (current / "src" / "build").exists()  # the object tree is not kept
    log = open(result["log"]).read()
    assert "make -j 2 src.build" in log and "ncclGetVersion of %s/lib/libnccl.so.2: 23007" % os.path.realpath(
        str(current)) in log


@pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("make"), reason="needs gcc and make")
def test_a_source_of_another_version_is_refused(run_module, tmp_path):
    plan = build_plan("v2.30.7-1", ["9.0"], sys.executable, version="2.30.4")
    result, failed = _build(run_module, tmp_path, plan)
    assert failed and "build of nccl failed" in result["msg"]
    assert "this source is NCCL 2.30.7, not 2.30.4: set nccl_source_version" in result["log_tail"]
    assert not (tmp_path / "opt" / "current").exists()


@pytest.mark.parametrize("settings, planned", [
    ({}, "2.30.7"),                                                          # the role's defaults: the wheel
    ({"nccl_method": "wheel", "nccl_version": "2.30.4"}, "2.30.4"),
    ({"nccl_method": "source"}, "2.30.7"),                                   # from the default tag v2.30.7-1
    ({"nccl_method": "source", "nccl_src": "/srv/src/nccl-2.31.1-1.tar.gz"}, "2.31.1"),
    ({"nccl_method": "source", "nccl_git_ref": "0123abcd", "nccl_source_version": "2.30.5"}, "2.30.5"),
    ({"nccl_method": "source", "nccl_git_ref": "0123abcd"}, None),           # the layer itself refuses it
    ({"nccl_method": "none"}, None),
    ({"nccl_method": "wheel", "nccl_provided": {"version": "1.0.0"}, "nccl_build": None}, "2.30.7"),  # facts ignored
])
def test_planned_version(settings, planned):
    assert planned_version(settings) == planned


def test_defaults_match_the_role():
    import yaml
    with open(os.path.join(FIXTURE, "..", "..", "..", "roles", "nccl", "defaults", "main.yml")) as handle:
        role_defaults = yaml.safe_load(handle)
    assert {key: role_defaults[key] for key in DEFAULTS} == DEFAULTS
    assert role_defaults["nccl_method"] in METHODS
