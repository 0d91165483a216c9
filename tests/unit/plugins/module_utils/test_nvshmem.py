# -*- coding: utf-8 -*-
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nvshmem import (
    PATCHES,
    PlanError,
    build_plan,
    cmake_options,
    patches_for,
    source_version,
)

ROLE_PATCHES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "nvshmem_ibgda", "files",
                            "patches")


@pytest.mark.parametrize("text, version", [
    ("v3.4.5-0", "3.4.5"),
    ("v3.5.19-1", "3.5.19"),
    ("nvshmem_src_3.4.5-0.txz", "3.4.5"),
    ("nvshmem-3.3.20-1.tar.gz", "3.3.20"),
    ("/srv/cache/nvshmem_src_cuda12-all-all-3.2.5.tar.gz", "3.2.5"),
    ("main", None),
    ("8a07e7e7ed57cfc63005f670d64d410cb30b061b", None),
    ("", None),
])
def test_source_version(text, version):
    assert source_version(text) == version


@pytest.mark.parametrize("version, names", [
    ("3.3.19", []),
    ("3.3.20", ["ibgda-roce-ah-attr-memset.patch"]),
    ("3.4.5", ["ibgda-roce-ah-attr-memset.patch"]),
    ("3.5.19", []),
])
def test_roce_patch_only_for_3_3_20_to_3_4_5(version, names):
    assert [patch["name"] for patch in patches_for(version)] == names
    assert all(patch["id"] == "KF15" for patch in patches_for(version))


def test_every_patch_is_shipped_with_the_role():
    for name, first, last, dummy, dummy in PATCHES:
        path = os.path.join(ROLE_PATCHES, name)
        assert os.path.isfile(path), name
        assert "+++ b/src/modules/transport/ibgda/ibgda.cpp" in open(path).read()
        assert first <= last


def test_seed_options_with_gdrcopy_and_gpu_arch():
    options = dict(cmake_options(["9.0", "10.0"], "/opt/deepep/gdrcopy/builds/abc"))
    assert options["NVSHMEM_IBGDA_SUPPORT"] == "ON"
    for name in ("NVSHMEM_MPI_SUPPORT", "NVSHMEM_SHMEM_SUPPORT", "NVSHMEM_UCX_SUPPORT", "NVSHMEM_PMIX_SUPPORT",
                 "NVSHMEM_USE_NCCL", "NVSHMEM_BUILD_TESTS", "NVSHMEM_BUILD_EXAMPLES", "NVSHMEM_BUILD_PYTHON_LIB"):
        assert options[name] == "OFF", name
    assert options["CMAKE_CUDA_ARCHITECTURES"] == "90;100"
    assert options["NVSHMEM_USE_GDRCOPY"] == "ON"
    assert options["GDRCOPY_HOME"] == "/opt/deepep/gdrcopy/builds/abc"


def test_without_gdrcopy_it_is_turned_off():
    options = dict(cmake_options(["NVIDIA B200"]))
    assert options["NVSHMEM_USE_GDRCOPY"] == "OFF" and "GDRCOPY_HOME" not in options
    assert options["CMAKE_CUDA_ARCHITECTURES"] == "100"


def test_overrides_are_added_and_can_change_defaults():
    options = dict(cmake_options(["9.0"], overrides={"NVSHMEM_IBRC_SUPPORT": "OFF", "NVSHMEM_BUILD_TESTS": "ON"}))
    assert options["NVSHMEM_IBRC_SUPPORT"] == "OFF" and options["NVSHMEM_BUILD_TESTS"] == "ON"


@pytest.mark.parametrize("overrides, message", [
    ({"NVSHMEM_IBGDA_SUPPORT": "OFF"}, "NVSHMEM_IBGDA_SUPPORT=OFF; DeepEP needs IBGDA"),
    ({"CMAKE_INSTALL_PREFIX": "/usr"}, "CMAKE_INSTALL_PREFIX is set by the role"),
    ({"BAD NAME": "1"}, "'BAD NAME' is not a cmake variable name"),
])
def test_bad_overrides_are_refused(overrides, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(")):
        cmake_options(["9.0"], overrides=overrides)


@pytest.mark.parametrize("caps, message", [
    (["sm90"], "'sm90' is neither a CUDA compute capability"),
    ([], "no CUDA arch to build NVSHMEM for"),
])
def test_bad_arch_lists_are_refused(caps, message):
    with pytest.raises(PlanError, match=message):
        cmake_options(caps)


def test_plan_from_an_archive_name():
    plan = build_plan("nvshmem_src_3.4.5-0.txz", ["9.0"], jobs=64)
    assert plan["version"] == "3.4.5"
    assert [p["name"] for p in plan["patches"]] == ["ibgda-roce-ah-attr-memset.patch"]
    assert "-DNVSHMEM_IBGDA_SUPPORT='ON'" in plan["build_command"]
    assert "-DCMAKE_CUDA_ARCHITECTURES='90'" in plan["build_command"]
    assert 'case "$found" in 3.4.5|3.4.5.*)' in plan["build_command"]
    assert "NVSHMEM_IBGDA_SUPPORT=(ON|1|TRUE)" in plan["verify_command"]


def test_declared_version_wins_over_the_name():
    plan = build_plan("main", ["9.0"], version="3.5.19")
    assert plan["version"] == "3.5.19" and plan["patches"] == []


def test_unknown_version_asks_for_it():
    with pytest.raises(PlanError, match="set nvshmem_ibgda_source_version"):
        build_plan("main", ["9.0"])


def test_hostile_values_reach_cmake_as_data(tmp_path):
    """The build command is a bash script: values a site sets (a cmake option, the GDRCopy path) arrive as
    cmake's arguments, byte for byte, and nothing in them runs. Stand-in cmake (a fixture) records its argv."""
    pwned = tmp_path / "pwned"
    hostile = "x$(touch %s)`touch %s`;touch %s'\"" % (pwned, pwned, pwned)
    plan = build_plan("v3.5.19-1", ["9.0"], gdrcopy_root="/opt/gdr" + hostile,
                      overrides={"NVSHMEM_BUILD_TESTS": hostile})
    src, bin_dir = tmp_path / "src", tmp_path / "bin"
    src.mkdir()
    bin_dir.mkdir()
    (src / "CMakeLists.txt").write_text("project(NVSHMEM\n  VERSION 3.5.19\n)\n")
    args_file = tmp_path / "cmake-args"
    (bin_dir / "cmake").write_text("#!/usr/bin/env python3\nimport json, sys\n"
                                   "open(%r, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n" % str(args_file))
    (bin_dir / "cmake").chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % bin_dir, "INSTALL_DIR": str(tmp_path / "install"),
           "CUDA_HOME": str(tmp_path / "cuda")}
    result = subprocess.run(["bash", "-c", plan["build_command"]], cwd=str(src), env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert not pwned.exists()
    configure = json.loads(args_file.read_text().splitlines()[0])
    assert "-DGDRCOPY_HOME=/opt/gdr" + hostile in configure
    assert "-DNVSHMEM_BUILD_TESTS=" + hostile in configure


def cmake_calls(tmp_path, plan, with_ninja):
    """Runs the plan's build command with a stand-in cmake (a fixture recording its argv) and, if asked, a
    stand-in ninja on PATH; returns cmake's argv lists."""
    src, bin_dir = tmp_path / "src", tmp_path / "bin"
    src.mkdir()
    bin_dir.mkdir()
    (src / "CMakeLists.txt").write_text("project(NVSHMEM\n  VERSION 3.5.19\n)\n")
    args_file = tmp_path / "cmake-args"
    tools = ["cmake", "ninja"] if with_ninja else ["cmake"]
    for tool in tools:
        (bin_dir / tool).write_text("#!/usr/bin/env python3\nimport json, sys\n"
                                    "open(%r, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n" % str(args_file))
        (bin_dir / tool).chmod(0o755)
    # Only these on PATH: whether this machine has a ninja must not decide.
    (bin_dir / "python3").symlink_to(sys.executable)
    for tool in ("sed", "head", "nproc", "rm"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(bin_dir), "INSTALL_DIR": str(tmp_path / "install"), "CUDA_HOME": str(tmp_path / "cuda")}
    # As source_build runs it.
    result = subprocess.run(["/bin/bash", "-e", "-o", "pipefail", "-c", plan["build_command"]], cwd=str(src), env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in args_file.read_text().splitlines()]


@pytest.mark.parametrize("jobs, with_ninja, generator, build", [
    # Ninja picks its own job count (CPUs + 2), as a hand `cmake --build` runs it.
    (0, True, "Ninja", ["--build", "build", "--target", "install"]),
    (64, True, "Ninja", ["--build", "build", "--parallel", "64", "--target", "install"]),
    # Without ninja, make would run one job at a time.
    (0, False, "Unix Makefiles", ["--build", "build", "--parallel", str(os.cpu_count()), "--target", "install"]),
    (8, False, "Unix Makefiles", ["--build", "build", "--parallel", "8", "--target", "install"]),
])
def test_build_jobs_are_ninjas_default_unless_set(tmp_path, jobs, with_ninja, generator, build):
    configure, build_call = cmake_calls(tmp_path, build_plan("v3.5.19-1", ["9.0"], jobs=jobs), with_ninja)
    assert configure[configure.index("-G") + 1] == generator
    assert build_call == build
