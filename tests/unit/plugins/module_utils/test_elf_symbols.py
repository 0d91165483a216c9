# -*- coding: utf-8 -*-
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.elf_symbols import (
    ElfError,
    cxx_runtime_copies,
    cxx_runtime_message,
    defined_dynamic_symbols,
)
from ansible_collections.moe_infra.deepep.tests.fixtures.cxx_objects import build_extension

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="needs g++ (CI installs it)")


@pytest.fixture(scope="module")
def extensions(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ext")
    shared = build_extension(directory, "shared_runtime.so", static_runtime=False)
    static = build_extension(directory, "static_runtime.cpython-312-x86_64-linux-gnu.so", static_runtime=True)
    return shared, static


def _load_and_run(*paths):
    """A fresh interpreter that loads each object in turn and runs its regex, as torch then DeepEP would."""
    script = ("import ctypes, sys\n"
              "print([ctypes.CDLL(path).count_includes(b'#include <a.h>\\n# include \"b.h\"\\n') for path in sys.argv[1:]])")
    return subprocess.run([sys.executable, "-c", script] + [str(path) for path in paths], capture_output=True, text=True, check=False)


def test_the_copy_is_what_crashes(extensions):
    """The failure the check prevents, for real: either object alone works, two runtimes in one process do not."""
    shared, static = extensions
    assert _load_and_run(shared).stdout.strip() == "[2]"
    assert _load_and_run(static).stdout.strip() == "[2]"
    assert _load_and_run(shared, shared).stdout.strip() == "[2, 2]"
    crashed = _load_and_run(shared, static)
    assert crashed.returncode != 0 and "[2, 2]" not in crashed.stdout, crashed


def test_defined_symbols_tell_a_static_runtime_from_a_shared_one(extensions):
    shared, static = (defined_dynamic_symbols(str(path)) for path in extensions)
    assert "count_includes" in shared and "count_includes" in static
    assert "_ZNSt6locale7classicEv" not in shared and "_ZNSt6locale7classicEv" in static
    assert "_ZNSt5ctypeIcE2idE" in static and len(static) > 10 * len(shared)


def test_copies_found_by_walking_a_tree(extensions, tmp_path):
    tree = tmp_path / "src"
    (tree / "deep_ep").mkdir(parents=True)
    shutil.copy(str(extensions[0]), str(tree / "deep_ep_cpp.so"))
    shutil.copy(str(extensions[1]), str(tree / "deep_ep" / "_C.cpython-312-x86_64-linux-gnu.so"))
    (tree / "notes.so.txt").write_text("not ELF")           # skipped: not ELF
    (tree / "libfake.so").write_text("\x7fELF garbage")      # skipped: not a 64-bit little-endian ELF
    os.symlink(str(extensions[1]), str(tree / "linked.so"))  # links are not followed
    assert cxx_runtime_copies(str(tree)) == [{
        "path": "deep_ep/_C.cpython-312-x86_64-linux-gnu.so",
        "defines": ["std::ctype<char>::id", "std::locale::classic()", "std::locale::id::_M_id()"]}]
    os.unlink(str(tree / "deep_ep" / "_C.cpython-312-x86_64-linux-gnu.so"))
    assert cxx_runtime_copies(str(tree)) == []


def test_message_names_file_cause_and_fix():
    text = cxx_runtime_message("deepep", [{"path": "deep_ep/_C.so", "defines": ["std::locale::classic()"]}])
    assert "deep_ep/_C.so defines std::locale::classic()" in text
    assert "libstdc++.a" in text and "deepep_cxx" in text


def test_not_elf_is_refused(tmp_path):
    path = tmp_path / "x.so"
    path.write_text("#!/bin/sh\n")
    with pytest.raises(ElfError):
        defined_dynamic_symbols(str(path))
