# -*- coding: utf-8 -*-
"""The nccl role's source method through ansible-playbook, on the fixture NCCL source (tests/fixtures/nccl_src) and
a fixture interpreter whose wheel library answers 2.28.9 (torch 2.11's): built once, put where torch loads NCCL,
nothing done on a second run, the wheel's files kept, and a source of another version refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import make_python_site

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
FIXTURE = os.path.join(REPO, "tests", "fixtures", "nccl_src")

pytestmark = pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("make"), reason="needs gcc and make")


def play(tmp_path, **role_vars):
    (tmp_path / "pb.yml").write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": "moe_infra.deepep.nccl", "vars": role_vars}],
        "post_tasks": [{"ansible.builtin.debug": {"msg": "PROVIDED {{ nccl_provided.method }} "
                                                         "{{ nccl_provided.version }} STALE {{ nccl_provided.updated }}"}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    result = subprocess.run([PLAYBOOK_BIN, "-i", "localhost,", "-c", "local", "-e",
                             "ansible_python_interpreter=%s" % sys.executable, "pb.yml"],
                            cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)
    return result.returncode, result.stdout + result.stderr


def source_archive(tmp_path, name="nccl-2.30.7-1.tar.gz"):
    archive = tmp_path / name
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(FIXTURE, arcname="nccl")
    return str(archive)


def test_source_build_put_where_torch_loads_it_once(tmp_path):
    python = make_python_site(tmp_path / "venv", nccl_runtime=(2, 28, 9))
    nccl_dir = tmp_path / "venv" / "site-packages" / "nvidia" / "nccl"
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    role_vars = dict(nccl_method="source", nccl_python=python, nccl_src=source_archive(tmp_path),
                     nccl_arch_list=["9.0"], nccl_prefix=str(tmp_path / "opt" / "nccl"), nccl_build_user="",
                     nccl_build_poll=1)
    rc, out = play(tmp_path, **role_vars)
    assert rc == 0, out
    assert 'PROVIDED source 2.30.7 STALE True' in out
    record = json.loads((nccl_dir / ".moe_infra_nccl.json").read_text())
    assert record["version"] == "2.30.7" and record["build_dir"].startswith(str(tmp_path / "opt" / "nccl" / "builds"))
    assert (nccl_dir / "include" / "nccl_device" / "impl" / "core.h").is_file()
    kept = os.path.join(record["backup"], "lib", "libnccl.so.2")
    assert open(kept, "rb").read() == original
    # What torch would now load answers 2.30.7 (the fixture torch loads this file at import).
    answer = subprocess.run([python, "-c", "import ctypes; v = ctypes.c_int(); ctypes.CDLL(%r).ncclGetVersion("
                             "ctypes.byref(v)); print(v.value)" % str(nccl_dir / "lib" / "libnccl.so.2")],
                            capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "23007"

    rc, out = play(tmp_path, **role_vars)
    assert rc == 0, out
    assert "changed=0" in out and 'STALE False' in out


def test_a_source_of_another_version_is_refused_and_nothing_replaced(tmp_path):
    python = make_python_site(tmp_path / "venv", nccl_runtime=(2, 28, 9))
    nccl_dir = tmp_path / "venv" / "site-packages" / "nvidia" / "nccl"
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    rc, out = play(tmp_path, nccl_method="source", nccl_python=python,
                   nccl_src=source_archive(tmp_path, "nccl-2.30.4-1.tar.gz"), nccl_arch_list=["9.0"],
                   nccl_prefix=str(tmp_path / "opt" / "nccl"), nccl_build_user="", nccl_build_poll=1)
    assert rc != 0
    assert "this source is NCCL 2.30.7, not 2.30.4: set nccl_source_version" in out
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original
    assert not (nccl_dir / ".moe_infra_nccl.json").exists()


def test_a_tag_older_than_v2_needs_is_refused_before_anything_runs(tmp_path):
    python = make_python_site(tmp_path / "venv")
    rc, out = play(tmp_path, nccl_method="source", nccl_python=python, nccl_git_ref="v2.28.9-1",
                   nccl_arch_list=["9.0"], nccl_prefix=str(tmp_path / "opt" / "nccl"))
    assert rc != 0 and "NCCL 2.28.9 is older than DeepEP V2 needs (>= 2.30.4)" in out
    assert not (tmp_path / "opt").exists()
