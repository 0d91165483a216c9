# -*- coding: utf-8 -*-
"""The gdrcopy role's read of the verified build (--tags deepep runs): the build `current` points at and its
gdrapi.h, never through a link the build planted (root would read the link's target into the task result)."""
from __future__ import annotations

import os
import subprocess

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = "#define GDR_API_MAJOR_VERSION 2\n#define GDR_API_MINOR_VERSION 5\n"


def read_current(prefix):
    with open(os.path.join(REPO, "roles", "gdrcopy", "vars", "main.yml")) as handle:
        script = yaml.safe_load(handle)["__gdrcopy_read_current"]
    return subprocess.run(["sh", "-c", script, "gdrcopy-current", str(prefix)], capture_output=True, text=True,
                          check=False).stdout.splitlines()


def make_build(prefix):
    build = prefix / "builds" / "0123456789abcdef"
    (build / "include").mkdir(parents=True)
    os.symlink("builds/0123456789abcdef", str(prefix / "current"))
    return build


def test_the_header_of_the_current_build_is_read(tmp_path):
    build = make_build(tmp_path)
    (build / "include" / "gdrapi.h").write_text(HEADER)
    assert read_current(tmp_path) == [str(build)] + HEADER.splitlines()


def test_a_planted_link_is_not_followed(tmp_path):
    secret = tmp_path / "root-only"
    secret.write_text("secret\n")
    build = make_build(tmp_path)
    os.symlink(str(secret), str(build / "include" / "gdrapi.h"))
    assert read_current(tmp_path) == [str(build)]
    # include/ itself a link to a directory holding a gdrapi.h
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gdrapi.h").write_text("secret\n")
    os.unlink(str(build / "include" / "gdrapi.h"))
    os.rmdir(str(build / "include"))
    os.symlink(str(elsewhere), str(build / "include"))
    assert read_current(tmp_path) == [str(build)]


def test_no_current_build_reads_nothing(tmp_path):
    assert read_current(tmp_path) == []
