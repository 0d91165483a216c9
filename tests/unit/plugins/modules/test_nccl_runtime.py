# -*- coding: utf-8 -*-
from __future__ import annotations

import json
import os
import shutil

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import nccl_runtime as module
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import build_nccl_stub, make_python_site

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc for the libnccl stand-ins")


def nccl_build(root, version=(2, 30, 7)):
    """A verified NCCL build's layout (what the nccl layer's source build leaves): lib/ and the include tree."""
    os.makedirs(os.path.join(str(root), "lib"))
    build_nccl_stub(os.path.join(str(root), "lib", "libnccl.so.2"), version)
    os.makedirs(os.path.join(str(root), "include", "nccl_device", "impl"))
    with open(os.path.join(str(root), "include", "nccl.h"), "w") as handle:
        handle.write("#define NCCL_MINOR %d\n" % version[1])
    with open(os.path.join(str(root), "include", "nccl_device", "impl", "core.h"), "w") as handle:
        handle.write("/* device API */\n")
    return str(root)


def make_site(root):
    # The wheel's library answers 2.28.9 (torch 2.11's), as on the test machine.
    python = make_python_site(root / "venv", nccl_runtime=(2, 28, 9))
    nccl_dir = root / "venv" / "site-packages" / "nvidia" / "nccl"
    (nccl_dir / "include").mkdir()
    (nccl_dir / "include" / "nccl.h").write_text("#define NCCL_MINOR 28\n")
    return python, nccl_dir


@pytest.fixture
def site(tmp_path):
    return make_site(tmp_path)


def present(run_module, python, build, tmp_path, check_mode=False, version="2.30.7"):
    return run_module(module, dict(python=python, build_dir=build, version=version,
                                   backup_dir=str(tmp_path / "replaced")), check_mode=check_mode)


def test_put_in_place_once_then_nothing_and_undone(run_module, site, tmp_path):
    python, nccl_dir = site
    build = nccl_build(tmp_path / "build")
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    predicted, failed = present(run_module, python, build, tmp_path, check_mode=True)
    assert not failed and predicted["changed"] is True and predicted["action"] == "installed"
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original and not (nccl_dir / module.RECORD).exists()

    done, failed = present(run_module, python, build, tmp_path)
    assert not failed, done
    assert done["changed"] is True and done["loaded_version"] == "2.30.7" and done["nccl_dir"] == str(nccl_dir)
    assert (nccl_dir / "include" / "nccl_device" / "impl" / "core.h").is_file()
    assert (nccl_dir / "include" / "nccl.h").read_text() == "#define NCCL_MINOR 30\n"
    assert (tmp_path / "replaced").joinpath(os.path.basename(done["backup"]), "lib", "libnccl.so.2").read_bytes() == original
    record = json.loads((nccl_dir / module.RECORD).read_text())
    assert record["version"] == "2.30.7" and record["backup"] == done["backup"]

    again, failed = present(run_module, python, build, tmp_path)
    assert not failed and again["changed"] is False and again["action"] == "none" and again["loaded_version"] == "2.30.7"

    undone, failed = run_module(module, dict(python=python, backup_dir=str(tmp_path / "replaced"), state="absent"))
    assert not failed and undone["action"] == "restored" and undone["loaded_version"] == "2.28.9"
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original
    assert (nccl_dir / "include" / "nccl.h").read_text() == "#define NCCL_MINOR 28\n"
    assert not (nccl_dir / "include" / "nccl_device").exists() and not (nccl_dir / module.RECORD).exists()
    nothing, failed = run_module(module, dict(python=python, backup_dir=str(tmp_path / "replaced"), state="absent"))
    assert not failed and nothing["changed"] is False


def test_files_pip_put_back_are_kept_anew_and_never_restored_over(run_module, site, tmp_path):
    python, nccl_dir = site
    build = nccl_build(tmp_path / "build")
    present(run_module, python, build, tmp_path)
    # A torch upgrade reinstalls its NCCL wheel (2.29.1 here) over the build's files.
    build_nccl_stub(str(nccl_dir / "lib" / "libnccl.so.2"), (2, 29, 1))
    upgraded = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    forgotten, failed = run_module(module, dict(python=python, backup_dir=str(tmp_path / "replaced"), state="absent"),
                                   check_mode=True)
    assert not failed and forgotten["action"] == "forgotten"
    again, failed = present(run_module, python, build, tmp_path)
    assert not failed and again["changed"] is True and again["loaded_version"] == "2.30.7"
    kept = tmp_path / "replaced" / os.path.basename(again["backup"]) / "lib" / "libnccl.so.2"
    assert kept.read_bytes() == upgraded  # the new wheel's file, not the first one's
    run_module(module, dict(python=python, backup_dir=str(tmp_path / "replaced"), state="absent"))
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == upgraded


def pip_installs(nccl_dir, version):
    """What pip leaves after installing nvidia-nccl-cu13==version (a fixture): one dist-info of that version, the
    wheel's library answering it."""
    site = nccl_dir.parent.parent
    for old in site.glob("nvidia_nccl_cu13-*.dist-info"):
        shutil.rmtree(str(old))
    info = site / ("nvidia_nccl_cu13-%s.dist-info" % version)
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: %s\n" % version)
    build_nccl_stub(str(nccl_dir / "lib" / "libnccl.so.2"), tuple(int(part) for part in version.split(".")))


def test_a_wheel_upgrade_is_recorded_from_its_first_version_and_forgotten_once_undone(run_module, site, tmp_path):
    python, nccl_dir = site
    replaced = str(tmp_path / "replaced")

    def upgraded(version, before, check_mode=False):
        return run_module(module, dict(python=python, backup_dir=replaced, version=version, version_before=before,
                                       state="upgraded"), check_mode=check_mode)

    pip_installs(nccl_dir, "2.30.4")
    predicted, failed = upgraded("2.30.4", "2.28.9", check_mode=True)
    assert not failed and predicted["changed"] is True and not (nccl_dir / module.WHEEL_RECORD).exists()
    done, failed = upgraded("2.30.4", "2.28.9")
    assert not failed and done["changed"] is True
    assert done["wheel_upgrade"] == {"package": "nvidia-nccl-cu13", "version": "2.30.4", "version_before": "2.28.9"}
    assert json.loads((nccl_dir / module.WHEEL_RECORD).read_text()) == done["wheel_upgrade"]
    again, failed = upgraded("2.30.4", "2.28.9")
    assert not failed and again["changed"] is False
    # Upgraded once more: the version to go back to is still the one torch came with.
    pip_installs(nccl_dir, "2.30.7")
    done, failed = upgraded("2.30.7", "2.30.4")
    assert not failed and done["wheel_upgrade"]["version_before"] == "2.28.9"

    # While the wheel is the one recorded, absent keeps the record (the restore's pip has not run yet).
    kept, failed = run_module(module, dict(python=python, backup_dir=replaced, state="absent"))
    assert not failed and kept["changed"] is False and kept["wheel_upgrade"]["version"] == "2.30.7"
    pip_installs(nccl_dir, "2.28.9")
    predicted, failed = run_module(module, dict(python=python, backup_dir=replaced, state="absent"), check_mode=True)
    assert not failed and predicted["changed"] is True and (nccl_dir / module.WHEEL_RECORD).exists()
    undone, failed = run_module(module, dict(python=python, backup_dir=replaced, state="absent"))
    assert not failed and undone["changed"] is True and undone["wheel_upgrade"] is None
    assert undone["loaded_version"] == "2.28.9" and not (nccl_dir / module.WHEEL_RECORD).exists()


def test_a_wheel_upgrade_is_recorded_only_as_pip_left_it(run_module, site, tmp_path):
    python, nccl_dir = site
    args = dict(python=python, backup_dir=str(tmp_path / "replaced"), state="upgraded")
    result, failed = run_module(module, dict(args, version="2.30.7", version_before="2.28.9"))
    assert failed and result["msg"] == ("the interpreter's NCCL wheel is 2.28.9, not 2.30.7: record the upgrade after "
                                        "pip installed 2.30.7")
    assert not (nccl_dir / module.WHEEL_RECORD).exists()
    result, failed = run_module(module, dict(args, version="2.30.7"))
    assert failed and "state is upgraded but all of the following are missing: version_before" in result["msg"]
    result, failed = run_module(module, dict(args, version="2.30.7", version_before="2.28.9 --index-url http://x"))
    assert failed and result["msg"] == "version_before: '2.28.9 --index-url http://x' is not a version (2.28.9)"
    # No upgrade (the version before is the version now): nothing to go back to, no record.
    pip_installs(nccl_dir, "2.30.7")
    result, failed = run_module(module, dict(args, version="2.30.7", version_before="2.30.7"))
    assert not failed and result["changed"] is False and result["wheel_upgrade"] is None


def test_a_build_that_answers_another_version_is_taken_out_again(run_module, site, tmp_path):
    python, nccl_dir = site
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    build = nccl_build(tmp_path / "build", version=(2, 30, 4))
    result, failed = present(run_module, python, build, tmp_path, version="2.30.7")
    assert failed
    assert result["msg"] == ("the NCCL in place (%s/lib/libnccl.so.2) answers 2.30.4, not 2.30.7; the wheel's files "
                             "were put back" % nccl_dir)
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original and not (nccl_dir / module.RECORD).exists()


def test_bad_input_is_named(run_module, site, tmp_path):
    python, dummy = site
    result, failed = present(run_module, python, str(tmp_path / "empty"), tmp_path)
    assert failed and result["msg"] == "build_dir %s holds no NCCL build (lib/libnccl.so.2 and include/nccl.h)" % (
        tmp_path / "empty")
    no_nccl = make_python_site(tmp_path / "cpu", nccl=None)
    result, failed = present(run_module, no_nccl, nccl_build(tmp_path / "b"), tmp_path)
    assert failed and "has no nvidia.nccl package" in result["msg"]
    result, failed = run_module(module, dict(python=python, backup_dir=str(tmp_path / "r")))
    assert failed and "state is present but all of the following are missing: build_dir, version" in result["msg"]


def test_the_version_check_runs_as_the_check_user(run_module, tmp_path):
    """The library in place is build output: with check_user the check loads it as that user. nobody cannot reach
    this site (root's 0700 tmp_path), so the check fails there and the build is taken out again; as a user who
    can (root here, through the same switch of user), it passes."""
    python, nccl_dir = make_site(tmp_path / "site")
    build = nccl_build(tmp_path / "build")
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    denied, failed = run_module(module, dict(python=python, build_dir=build, version="2.30.7", check_user="nobody",
                                             backup_dir=str(tmp_path / "replaced")))
    assert failed and "cannot be loaded (as nobody: " in denied["msg"], denied
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original and not (nccl_dir / module.RECORD).exists()
    done, failed = run_module(module, dict(python=python, build_dir=build, version="2.30.7", check_user="root",
                                           backup_dir=str(tmp_path / "replaced")))
    assert not failed and done["loaded_version"] == "2.30.7", done.get("msg")
    missing, failed = run_module(module, dict(python=python, build_dir=build, version="2.30.7",
                                              check_user="no-such-user-x", backup_dir=str(tmp_path / "replaced")))
    assert failed and missing["msg"].startswith("check_user: there is no user no-such-user-x")


def test_a_hardened_umask_leaves_what_it_writes_readable_by_every_user(run_module, site, tmp_path):
    python, nccl_dir = site
    build = nccl_build(tmp_path / "build")
    before = os.umask(0o027)
    try:
        done, failed = present(run_module, python, build, tmp_path)
    finally:
        os.umask(before)
    assert not failed and done["changed"] is True, done
    assert (nccl_dir / module.RECORD).stat().st_mode & 0o777 == 0o644
    backup = tmp_path / "replaced" / os.path.basename(done["backup"])
    assert backup.stat().st_mode & 0o777 == 0o755 and (backup / "lib").stat().st_mode & 0o777 == 0o755
