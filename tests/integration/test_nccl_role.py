# -*- coding: utf-8 -*-
"""The nccl role's source method through ansible-playbook, on the fixture NCCL source (tests/fixtures/nccl_src) and
a fixture interpreter whose wheel library answers 2.28.9 (torch 2.11's): built once, put where torch loads NCCL,
nothing done on a second run, the wheel's files kept, and a source of another version refused."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from ansible_collections.moe_infra.deepep.tests.fixtures.fanout_report import fanout_roles
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import make_python_site, make_venv, nccl_wheel

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


def test_wheel_method_offline_then_a_source_build_undone_by_going_back_to_the_wheel(tmp_path):
    """A real venv (pip) holding torch 2.11's NCCL wheel (2.28.9, a fixture wheel); the wheel method installs the
    pinned 2.30.7 from a local wheel directory (--no-index: an air-gapped site's mirror), once; the source method
    then puts its build in place of those files; the wheel method again puts the wheel's files back."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    nccl_wheel(wheels, (2, 28, 9))
    nccl_wheel(wheels, (2, 30, 7))
    venv = tmp_path / "venv"
    make_venv(venv)
    (venv / "bin" / "pip").unlink()  # pip3 and pip3.X only, as the GPU test machine's venv
    python = str(venv / "bin" / "python")
    offline = "--no-index --find-links %s" % wheels
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
                    "nvidia-nccl-cu13==2.28.9"], check=True)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    library = os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2")

    def loaded():
        return subprocess.run([python, "-c", "import ctypes; v = ctypes.c_int(); ctypes.CDLL(%r).ncclGetVersion("
                               "ctypes.byref(v)); print(v.value)" % library],
                              capture_output=True, text=True, check=True).stdout.strip()

    assert loaded() == "22809"
    wheel_vars = dict(nccl_method="wheel", nccl_python=python, nccl_version="2.30.7", nccl_pip_extra_args=offline,
                      nccl_prefix=str(tmp_path / "opt" / "nccl"))
    rc, out = play(tmp_path, **wheel_vars)
    assert rc == 0, out
    assert "PROVIDED wheel 2.30.7 STALE True" in out and loaded() == "23007"
    rc, out = play(tmp_path, **wheel_vars)
    assert rc == 0 and "changed=0" in out and "STALE False" in out, out

    rc, out = play(tmp_path, nccl_method="source", nccl_python=python, nccl_src=source_archive(tmp_path),
                   nccl_arch_list=["9.0"], nccl_prefix=str(tmp_path / "opt" / "nccl"), nccl_build_user="",
                   nccl_build_poll=1)
    assert rc == 0 and "PROVIDED source 2.30.7 STALE True" in out, out
    with zipfile.ZipFile(str(wheels / "nvidia_nccl_cu13-2.30.7-py3-none-any.whl")) as wheel:
        original = wheel.read("nvidia/nccl/lib/libnccl.so.2")
    with open(library, "rb") as handle:
        assert handle.read() != original  # the source build in the wheel's place
    record = os.path.join(site, "nvidia", "nccl", ".moe_infra_nccl.json")
    assert os.path.exists(record)
    rc, out = play(tmp_path, **wheel_vars)
    assert rc == 0 and "PROVIDED wheel 2.30.7 STALE True" in out, out
    assert not os.path.exists(record) and loaded() == "23007"
    with open(library, "rb") as handle:
        assert handle.read() == original  # the wheel's own file again, byte for byte


def test_one_node_builds_the_others_install_from_the_controller_cache_even_offline(tmp_path):
    """Nodes with the same inputs (one interpreter path, as on a fleet; here one fixture interpreter): one builds
    NCCL, the build goes to the controller cache, the other installs and verifies it; a node joining later installs
    it offline; offline, a build the cache lacks is refused."""
    python = make_python_site(tmp_path / "venv", nccl_runtime=(2, 28, 9))
    cache = tmp_path / "cache"
    inventory = tmp_path / "nodes.json"
    archive = source_archive(tmp_path)

    def nodes(*names, **extra):
        hosts = dict((name, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                             "nccl_prefix": str(tmp_path / name / "nccl")}) for name in names)
        inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
        (tmp_path / "pb.yml").write_text(json.dumps([{
            "hosts": "all", "gather_facts": False,
            "roles": [{"role": "moe_infra.deepep.nccl", "vars": dict(
                nccl_method="source", nccl_python=python, nccl_src=archive, nccl_arch_list=["9.0"],
                nccl_build_user="", nccl_build_poll=1, nccl_cache_dir=str(cache), **extra)}]}]))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
        # One fork: the nodes share the interpreter whose NCCL files are replaced.
        result = subprocess.run([PLAYBOOK_BIN, "-i", str(inventory), "--forks", "1", "pb.yml"], cwd=str(tmp_path),
                                env=env, capture_output=True, text=True, timeout=300, check=False)
        out = result.stdout + result.stderr
        return result.returncode, out, fanout_roles(out, "NCCL")

    rc, out, roles = nodes("n1", "n2")
    assert rc == 0, out
    assert roles == {"n1": "build", "n2": "wait"}, out
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["nccl", "nccl"]  # the build and its digest
    n1, n2 = (os.path.realpath(str(tmp_path / n / "nccl" / "current")) for n in ("n1", "n2"))
    assert os.path.basename(n1) == os.path.basename(n2)  # one fingerprint
    assert os.path.isfile(os.path.join(n2, "install.log")) and not os.path.isfile(os.path.join(n1, "install.log"))
    rc, out, roles = nodes("n1", "n2")
    # Nothing to build, both up to date: nothing to decide, so no fan-out report (and no task starts for it).
    assert rc == 0 and roles == {} and "Report which host builds" not in out, out
    assert re.search(r"n1\s+: ok=\d+\s+changed=0", out) and re.search(r"n2\s+: ok=\d+\s+changed=0", out), out
    rc, out, roles = nodes("n3", nccl_offline=True)
    assert rc == 0 and roles == {"n3": "cache"}, out

    # A forged artifact under the cached name (what a rooted node or another local user would plant): refused on
    # the controller before anything reaches the node.
    (artifact,) = [p for p in cache.iterdir() if p.name.endswith(".tar.gz")]
    forged_tree = tmp_path / "forged"
    (forged_tree / "lib").mkdir(parents=True)
    (forged_tree / ".moe_infra_stamp.json").write_text(json.dumps({"fingerprint": artifact.name[5:-7]}))
    with tarfile.open(str(artifact), "w:gz") as tar:
        tar.add(str(forged_tree), arcname=".")
    rc, out, roles = nodes("n5", nccl_offline=True)
    assert rc != 0 and roles == {"n5": "cache"}, out
    assert "does not match the digest recorded when it was fetched" in out, out
    assert not (tmp_path / "n5" / "nccl" / "current").exists()
    # Without its record an artifact does not count as cached: a node builds and exports it again.
    (cache / (artifact.name + ".sha256")).unlink()
    rc, out, roles = nodes("n5")
    assert rc == 0 and roles == {"n5": "build"}, out
    assert (cache / (artifact.name + ".sha256")).read_text().split() == [
        hashlib.sha256(artifact.read_bytes()).hexdigest(), artifact.name]
    # A cache other users can write is refused outright.
    cache.chmod(0o777)
    rc, out, roles = nodes("n5")
    assert rc != 0 and "can be written by users other than its owner (mode 0777)" in out, out
    cache.chmod(0o700)
    for old in cache.iterdir():
        old.unlink()
    rc, out, roles = nodes("n4", nccl_offline=True)  # stops before it reports a role
    assert rc != 0 and roles == {} and "offline: the cache lacks the build n4 (fingerprint" in out, out
    assert not (tmp_path / "n4" / "nccl" / "current").exists()
