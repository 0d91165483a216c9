# -*- coding: utf-8 -*-
"""python_wheel on a stand-in interpreter (tests/fixtures/python_site) with the wheel the fixture DeepEP's
`setup.py bdist_wheel` packs; the install is the interpreter's real pip."""
from __future__ import annotations

import os
import shutil
import subprocess
import zipfile

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import python_wheel as module
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import make_python_site

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                        "fixtures")


def build_wheel(python, tree, arch="9.0"):
    if not tree.exists():
        shutil.copytree(os.path.join(FIXTURES, "deepep_src"), str(tree))
    subprocess.run([python, "setup.py", "bdist_wheel", "--dist-dir", "dist"], cwd=str(tree), check=True,
                   env=dict(os.environ, TORCH_CUDA_ARCH_LIST=arch), capture_output=True)
    return tree / "dist"


def test_installs_next_to_torch_then_nothing_to_do(run_module, tmp_path):
    python = make_python_site(tmp_path / "venv")
    dist = build_wheel(python, tmp_path / "src")
    site = tmp_path / "venv" / "site-packages"

    result, failed = run_module(module, {"python": python, "wheel": str(dist)}, check_mode=True)
    assert not failed and result["changed"] is True, result
    assert result["reason"].startswith("would install: 5 of 5 files differ or are missing (first deep_ep-1.2.1.dist-info/METADATA)")
    assert not (site / "deep_ep_cpp.py").exists()

    result, failed = run_module(module, {"python": python, "wheel": str(dist)})
    assert not failed and result["changed"] is True, result
    assert result["site_dir"] == str(site) and result["distribution"] == {"name": "deep_ep", "version": "1.2.1"}
    assert "TORCH_CUDA_ARCH_LIST = '9.0'" in (site / "deep_ep_cpp.py").read_text()
    assert (site / "deep_ep-1.2.1.dist-info" / "RECORD").is_file()

    result, failed = run_module(module, {"python": python, "wheel": str(dist)})
    assert not failed and result["changed"] is False, result

    # A rebuild with other inputs keeps the version string; its files differ, so it is installed.
    build_wheel(python, tmp_path / "src", arch="10.0")
    result, failed = run_module(module, {"python": python, "wheel": str(dist)})
    assert not failed and result["changed"] is True and "first deep_ep_cpp.py" in result["reason"], result
    assert "TORCH_CUDA_ARCH_LIST = '10.0'" in (site / "deep_ep_cpp.py").read_text()
    assert sorted(p.name for p in site.glob("deep_ep*.dist-info")) == ["deep_ep-1.2.1.dist-info"]


def test_a_wheel_not_built_yet(run_module, tmp_path):
    python = make_python_site(tmp_path / "venv")
    missing = str(tmp_path / "builds" / "0123abcd" / "src" / "dist")
    result, failed = run_module(module, {"python": python, "wheel": missing}, check_mode=True)
    assert not failed and result["changed"] is True and "once it is built" in result["reason"], result
    result, failed = run_module(module, {"python": python, "wheel": missing})
    assert failed and result["msg"] == "wheel: %s does not exist" % missing


def test_a_directory_with_two_wheels_is_refused(run_module, tmp_path):
    python = make_python_site(tmp_path / "venv")
    dist = build_wheel(python, tmp_path / "src")
    shutil.copy(str(next(dist.glob("*.whl"))), str(dist / "deep_ep-1.2.0-py3-none-any.whl"))
    result, failed = run_module(module, {"python": python, "wheel": str(dist)})
    assert failed and "holds 2 wheels (deep_ep-1.2.0-py3-none-any.whl, deep_ep-1.2.1-py3-none-any.whl)" in result["msg"]


def test_next_to_a_module_the_interpreter_lacks(run_module, tmp_path):
    python = make_python_site(tmp_path / "venv")
    dist = build_wheel(python, tmp_path / "src")
    result, failed = run_module(module, {"python": python, "wheel": str(dist), "next_to": "vllm"})
    assert failed and result["msg"].startswith("next_to: vllm does not import with %s (ModuleNotFoundError" % python)


def test_next_to_a_single_file_module(run_module, tmp_path):
    # A module that is one file in the site, not a package: its site directory is still the site.
    python = make_python_site(tmp_path / "venv")
    (tmp_path / "venv" / "site-packages" / "single_module.py").write_text("")
    dist = build_wheel(python, tmp_path / "src")
    result, failed = run_module(module, {"python": python, "wheel": str(dist), "next_to": "single_module"},
                                check_mode=True)
    assert not failed and result["site_dir"] == str(tmp_path / "venv" / "site-packages"), result


def test_state_absent_removes_the_distribution_and_leaves_the_rest(run_module, tmp_path):
    python = make_python_site(tmp_path / "venv")
    site = tmp_path / "venv" / "site-packages"
    result, failed = run_module(module, {"python": python, "wheel": str(build_wheel(python, tmp_path / "src"))})
    assert not failed and (site / "deep_ep" / "__init__.py").is_file()
    outside = tmp_path / "outside.txt"
    outside.write_text("not the wheel's\n")
    with open(str(site / "deep_ep-1.2.1.dist-info" / "RECORD"), "a") as handle:
        handle.write("../../outside.txt,,\n")  # a RECORD entry pointing out of the site directory is left alone
    absent = {"python": python, "state": "absent", "distribution": "deep_ep"}
    result, failed = run_module(module, absent, check_mode=True)
    assert not failed and result["changed"] and (site / "deep_ep").is_dir()
    result, failed = run_module(module, absent)
    assert not failed and result["changed"] and "removed deep_ep-1.2.1.dist-info" in result["reason"], result
    assert not (site / "deep_ep").exists() and not (site / "deep_ep_cpp.py").exists()
    assert not (site / "deep_ep-1.2.1.dist-info").exists() and outside.is_file() and (site / "torch").is_dir()
    result, failed = run_module(module, absent)
    assert not failed and not result["changed"] and "is not installed" in result["reason"]


def test_the_fixture_interpreter_puts_pythonpath_before_its_site_packages(run_module, tmp_path):
    """As a real interpreter does: an import check with PYTHONPATH=<build> must see the build, not an installed
    wheel (the stand-in once put its site-packages first, so such a check passed on the old wheel)."""
    python = make_python_site(tmp_path / "venv")
    run_module(module, {"python": python, "wheel": str(build_wheel(python, tmp_path / "src"))})
    build = tmp_path / "build"
    (build / "deep_ep").mkdir(parents=True)
    (build / "deep_ep" / "__init__.py").write_text("")
    out = subprocess.run([python, "-c", "import deep_ep; print(deep_ep.__file__)"], cwd="/", capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONPATH=str(build))).stdout
    assert out.strip() == str(build / "deep_ep" / "__init__.py")


@pytest.mark.parametrize("extra, why", [
    ("zz_hook.pth", "a .pth file runs its import lines at every start of the interpreter"),
    ("deep_ep-1.2.1.data/scripts/deep_ep_run", "scripts installs outside the package"),
    ("deep_ep-1.2.1.data/data/etc/profile.d/x.sh", "data installs outside the package"),
    ("../escape.py", "it would land outside the site directory"),
])
def test_a_wheel_with_a_pth_or_scripts_is_refused_and_nothing_installed(run_module, tmp_path, extra, why):
    # A hostile build (run as the build user) adds a file that would run as root, and lists it in RECORD or not:
    # the wheel's own file list decides.
    python = make_python_site(tmp_path / "venv")
    dist = build_wheel(python, tmp_path / "src")
    wheel = next(dist.glob("*.whl"))
    with zipfile.ZipFile(str(wheel), "a") as archive:
        archive.writestr(extra, "import os; os.system('touch /tmp/moe-infra-pwned')\n")
    result, failed = run_module(module, {"python": python, "wheel": str(dist)})
    assert failed and result["msg"] == ("wheel: %s holds %s (%s): nothing was installed; a build that makes this is "
                                        "not DeepEP's" % (wheel, extra, why)), result
    site = tmp_path / "venv" / "site-packages"
    assert not (site / "deep_ep_cpp.py").exists() and not list(site.glob("*.pth"))


def test_a_hardened_umask_still_installs_what_every_user_can_import(run_module, tmp_path):
    """With the login's umask 027, pip made the files 0640: root's jobs could import deep_ep, nobody else's."""
    python = make_python_site(tmp_path / "venv")
    dist = build_wheel(python, tmp_path / "src")
    before = os.umask(0o027)
    try:
        result, failed = run_module(module, {"python": python, "wheel": str(dist)})
    finally:
        os.umask(before)
    assert not failed and result["changed"] is True, result
    site = tmp_path / "venv" / "site-packages"
    assert (site / "deep_ep_cpp.py").stat().st_mode & 0o777 == 0o644
    assert (site / "deep_ep-1.2.1.dist-info").stat().st_mode & 0o777 == 0o755
