# -*- coding: utf-8 -*-
"""The build_prerequisites role's query (roles/build_prerequisites/vars/main.yml), run as the role runs it: one
sh with package:command pairs as arguments. It prints the packages that are there, and first the version of the
gcc on the node's own PATH (the build layers' input), which the role passes on instead of starting gcc again."""
from __future__ import annotations

import os
import subprocess

import yaml

VARS = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "build_prerequisites", "vars", "main.yml")


def query(path, build_path, *pairs):
    with open(VARS) as handle:
        script = yaml.safe_load(handle)["__build_prerequisites_script"]
    result = subprocess.run(["/bin/sh", "-c", script, "build_prerequisites"] + list(pairs), capture_output=True, text=True,
                            env={"PATH": path, "BUILD_PATH": build_path}, check=True)
    return result.stdout.splitlines()


def tool(directory, name, output=""):
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\necho %s\n" % output)
    path.chmod(0o755)


def test_gcc_version_first_then_the_packages_found(tmp_path):
    tool(tmp_path / "bin", "gcc", "12.2.0")
    tool(tmp_path / "bin", "make")
    tool(tmp_path / "build", "cmake")  # found on the build path only (cmake from pip)
    path = "%s:/usr/bin:/bin" % (tmp_path / "bin")
    lines = query(path, str(tmp_path / "build"), "gcc:gcc", "make:make", "cmake:cmake", "moe-no-such-package:")
    assert lines == ["gcc-version:12.2.0", "gcc", "make", "cmake"]


def test_gcc_only_on_the_build_path_gives_no_version(tmp_path):
    # The build layers start gcc on the node's own PATH: a gcc only the build path has is no reading of theirs.
    tool(tmp_path / "build", "gcc", "13.1.0")
    lines = query("/nonexistent", str(tmp_path / "build"), "gcc:gcc")
    assert lines == ["gcc"]
