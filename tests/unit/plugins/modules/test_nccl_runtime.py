# -*- coding: utf-8 -*-
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import nccl_runtime as module
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import (
    build_nccl_stub,
    killed_pip_interpreter,
    make_pip_site,
    make_python_site,
    make_venv,
    nccl_wheel,
)

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


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """The fixture NCCL wheels 2.28.9 (torch 2.11's), 2.30.4 and 2.30.7 in a local directory (a site's mirror)."""
    directory = tmp_path_factory.mktemp("wheels")
    for version in ((2, 28, 9), (2, 30, 4)):
        nccl_wheel(directory, version)
    nccl_wheel(directory, (2, 30, 7), padding=1 << 20)  # cut short, it cannot be loaded (SIGBUS)
    return directory


def pip_site(tmp_path, wheels):
    """A real venv whose pip installed nvidia-nccl-cu13 2.28.9 from wheels: (interpreter, nccl dir, module args)."""
    python = make_pip_site(tmp_path / "pip-site", wheels)
    nccl_dir = tmp_path / "pip-site" / "site-packages" / "nvidia" / "nccl"
    args = dict(python=python, backup_dir=str(tmp_path / "replaced"), package="nvidia-nccl-cu13", retries=0,
                pip_extra_args="--no-index --find-links %s" % wheels)
    return python, nccl_dir, args


def wheel_version(python):
    return subprocess.run([python, "-c", "import importlib.metadata as md; print(md.version('nvidia-nccl-cu13'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_wheel_upgraded_from_its_first_version_and_installed_again(run_module, tmp_path, wheels):
    python, nccl_dir, args = pip_site(tmp_path, wheels)

    def upgraded(version, check_mode=False):
        return run_module(module, dict(args, version=version, state="upgraded"), check_mode=check_mode)

    predicted, failed = upgraded("2.30.4", check_mode=True)
    assert not failed and predicted["changed"] is True and predicted["action"] == "upgraded"
    assert wheel_version(python) == "2.28.9" and not (nccl_dir / module.WHEEL_RECORD).exists()
    done, failed = upgraded("2.30.4")
    assert not failed and done["changed"] is True and done["loaded_version"] == "2.30.4", done.get("msg")
    assert done["wheel_upgrade"] == {"package": "nvidia-nccl-cu13", "version": "2.30.4", "version_before": "2.28.9"}
    assert json.loads((nccl_dir / module.WHEEL_RECORD).read_text()) == done["wheel_upgrade"]
    assert wheel_version(python) == "2.30.4"
    again, failed = upgraded("2.30.4")
    assert not failed and again["changed"] is False and again["action"] == "none"
    # Upgraded once more: the version to go back to is still the one torch came with.
    done, failed = upgraded("2.30.7")
    assert not failed and done["wheel_upgrade"]["version_before"] == "2.28.9" and wheel_version(python) == "2.30.7"

    # Without reinstall_wheel, absent keeps a record that matches the wheel (the source method's first task).
    kept, failed = run_module(module, dict(args, state="absent"))
    assert not failed and kept["changed"] is False and kept["wheel_upgrade"]["version"] == "2.30.7"
    predicted, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True), check_mode=True)
    assert not failed and predicted["changed"] is True and predicted["action"] == "reinstalled"
    assert wheel_version(python) == "2.30.7" and (nccl_dir / module.WHEEL_RECORD).exists()
    undone, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and undone["changed"] is True and undone["wheel_upgrade"] is None, undone.get("msg")
    assert undone["loaded_version"] == "2.28.9" and wheel_version(python) == "2.28.9"
    assert not (nccl_dir / module.WHEEL_RECORD).exists()
    nothing, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and nothing["changed"] is False


class Stopped(BaseException):
    """The run stopped (Ctrl-C, a lost connection) at that point of the module."""


def test_the_record_is_written_before_pip_and_left_as_it_was_when_pip_fails(run_module, tmp_path, wheels, monkeypatch):
    python, nccl_dir, args = pip_site(tmp_path, wheels)
    record = nccl_dir / module.WHEEL_RECORD
    # A version the mirror lacks: pip fails, the wheel stays, and so does the record (none before).
    failed_result, failed = run_module(module, dict(args, version="2.30.9", state="upgraded"))
    assert failed and failed_result["msg"].startswith(
        "nccl: pip could not install nvidia-nccl-cu13==2.30.9 into %s; torch's NCCL wheel stays at 2.28.9: make it "
        "reachable (nccl_pip_extra_args: an index, or --find-links to a directory with it) and run again, or set "
        "nccl_method: source. pip: ERROR: " % python), failed_result["msg"]
    assert failed_result["changed"] is False and wheel_version(python) == "2.28.9" and not record.exists()

    # The run stopped once pip had installed the pin: the record was written before pip began, so V1's restore
    # finds the version torch came with and installs it again.
    install = module.NcclRuntime.pip_install

    def stopped_after_pip(self, requirement, force=False):
        install(self, requirement)
        raise Stopped()

    monkeypatch.setattr(module.NcclRuntime, "pip_install", stopped_after_pip)
    with pytest.raises(Stopped):
        run_module(module, dict(args, version="2.30.7", state="upgraded"))
    monkeypatch.undo()
    assert wheel_version(python) == "2.30.7"
    assert json.loads(record.read_text()) == {"package": "nvidia-nccl-cu13", "version": "2.30.7",
                                              "version_before": "2.28.9"}
    undone, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and undone["action"] == "reinstalled" and wheel_version(python) == "2.28.9", undone.get("msg")
    assert not record.exists()

    # Stopped before pip changed anything: the record names a version that is not installed, so nothing is
    # installed again from it and the next absent forgets it.
    def stopped_before_pip(self, requirement, force=False):
        raise Stopped()

    monkeypatch.setattr(module.NcclRuntime, "pip_install", stopped_before_pip)
    with pytest.raises(Stopped):
        run_module(module, dict(args, version="2.30.7", state="upgraded"))
    monkeypatch.undo()
    assert record.exists() and wheel_version(python) == "2.28.9"
    forgotten, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and forgotten["changed"] is True and forgotten["action"] == "none"
    assert not record.exists() and wheel_version(python) == "2.28.9"


def pip_leftovers(nccl_dir):
    site = nccl_dir.parent.parent
    return sorted([str(path) for path in nccl_dir.iterdir() if path.name.startswith("~")]
                  + [str(path) for path in site.iterdir() if path.name.startswith("~") and "nccl" in path.name])


@pytest.mark.parametrize("during", ["install", "library"])
def test_a_pip_killed_between_its_uninstall_and_its_install_is_finished_by_the_next_run(
        run_module, tmp_path, wheels, during):
    # SIGKILL to pip (the OOM killer, kill -9) after it moved 2.28.9's files to its stash, before it wrote any of
    # the new wheel's or while it wrote the library (the fixture's wrapper): no NCCL wheel installed, torch cannot
    # load NCCL, the record there.
    python, nccl_dir, args = pip_site(tmp_path, wheels)
    killed = killed_pip_interpreter(python, tmp_path / "killed-pip-python", during)
    record = {"package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9"}

    def half_installed():
        result, failed = run_module(module, dict(args, python=killed, version="2.30.7", state="upgraded"))
        assert failed and result["msg"].startswith(
            "nccl: pip could not install nvidia-nccl-cu13==2.30.7 into %s; torch's NCCL wheel stays half-installed (no "
            "nvidia-nccl-cu13 installed: a pip changing it was stopped before it finished; torch cannot load its own NCCL "
            "until one is): run again (the nccl layer installs it then), or set nccl_method: source. pip: pip was killed by "
            "signal 9 (SIGKILL)" % killed), result["msg"]
        assert json.loads((nccl_dir / module.WHEEL_RECORD).read_text()) == record
        missing = subprocess.run([python, "-c", "import importlib.metadata as md; md.version('nvidia-nccl-cu13')"],
                                 capture_output=True, text=True, check=False)
        assert "PackageNotFoundError" in missing.stderr
        library = nccl_dir / "lib" / "libnccl.so.2"
        # Half of 2.30.7's library, or none.
        assert (library.stat().st_size > 0 if during == "library" else not library.exists()) and pip_leftovers(nccl_dir)

    # DeepEP V1 (the restore): the source method's first task keeps the record, the reinstall finishes the job.
    half_installed()
    kept, failed = run_module(module, dict(args, state="absent"))
    assert not failed and kept["changed"] is False and kept["wheel_upgrade"] == record, kept
    assert (nccl_dir / module.WHEEL_RECORD).exists()
    leftovers = pip_leftovers(nccl_dir)
    back, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and back["action"] == "reinstalled" and back["pip_installed"] == "nvidia-nccl-cu13==2.28.9", back
    assert back["loaded_version"] == "2.28.9" and wheel_version(python) == "2.28.9"
    assert back["pip_leftovers_removed"] == leftovers and not pip_leftovers(nccl_dir)
    assert not (nccl_dir / module.WHEEL_RECORD).exists()
    listed = subprocess.run([python, "-m", "pip", "list"], capture_output=True, text=True, check=True)
    assert "Ignoring invalid distribution" not in listed.stderr, listed.stderr

    # DeepEP V2 run again: the pin installed, and the version to go back to is still the one torch came with.
    half_installed()
    done, failed = run_module(module, dict(args, version="2.30.7", state="upgraded"))
    assert not failed and done["action"] == "upgraded" and done["loaded_version"] == "2.30.7", done
    assert done["wheel_upgrade"] == record and json.loads((nccl_dir / module.WHEEL_RECORD).read_text()) == record
    assert done["pip_leftovers_removed"] and not pip_leftovers(nccl_dir)
    again, failed = run_module(module, dict(args, version="2.30.7", state="upgraded"))
    assert not failed and again["changed"] is False and again["pip_leftovers_removed"] == []


def test_another_pip_killed_half_way_is_finished_from_the_version_its_stash_names(run_module, tmp_path, wheels):
    # A pip that was not this module's (no record: a user's `pip install -U`) killed while it wrote 2.30.7's library
    # over torch's 2.28.9: its stash (~vidia_nccl_cu13-2.28.9.dist-info) names the version it was replacing.
    python, nccl_dir, args = pip_site(tmp_path, wheels)
    killed = killed_pip_interpreter(python, tmp_path / "killed-pip-python", "library")

    def user_pip_killed():
        subprocess.run([killed, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--find-links", str(wheels),
                        "nvidia-nccl-cu13==2.30.7"], check=False)
        missing = subprocess.run([python, "-c", "import importlib.metadata as md; md.version('nvidia-nccl-cu13')"],
                                 capture_output=True, text=True, check=False)
        assert "PackageNotFoundError" in missing.stderr and not (nccl_dir / module.WHEEL_RECORD).exists()
        assert str(nccl_dir.parent.parent / "~vidia_nccl_cu13-2.28.9.dist-info") in pip_leftovers(nccl_dir)

    # DeepEP V1: the restore without reinstall_wheel leaves it; with it, 2.28.9 is installed again, no record made.
    user_pip_killed()
    kept, failed = run_module(module, dict(args, state="absent"))
    assert not failed and kept["changed"] is False, kept
    checked, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True), check_mode=True)
    assert not failed and checked["changed"] is True and checked["action"] == "reinstalled", checked
    assert pip_leftovers(nccl_dir) and "PackageNotFoundError" in subprocess.run(
        [python, "-c", "import importlib.metadata as md; md.version('nvidia-nccl-cu13')"], capture_output=True,
        text=True, check=False).stderr
    back, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and back["action"] == "reinstalled" and back["pip_installed"] == "nvidia-nccl-cu13==2.28.9", back
    assert back["loaded_version"] == "2.28.9" and wheel_version(python) == "2.28.9" and back["wheel_upgrade"] is None
    assert not pip_leftovers(nccl_dir) and not (nccl_dir / module.WHEEL_RECORD).exists()
    again, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and again["changed"] is False, again

    # DeepEP V2: the pin installed, and 2.28.9 recorded as the version to go back to.
    user_pip_killed()
    done, failed = run_module(module, dict(args, version="2.30.7", state="upgraded"))
    assert not failed and done["action"] == "upgraded" and done["loaded_version"] == "2.30.7", done
    record = {"package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9"}
    assert done["wheel_upgrade"] == record and json.loads((nccl_dir / module.WHEEL_RECORD).read_text()) == record
    assert not pip_leftovers(nccl_dir)


def test_a_pip_install_ignore_installed_killed_in_the_library_is_repaired(run_module, tmp_path, wheels):
    # `pip install -I` (ignore-installed) uninstalls nothing: killed while it wrote 2.30.7's library over torch's
    # 2.28.9, it leaves 2.28.9's metadata, half of 2.30.7's library, no stash and no record. Loading it kills the
    # process (SIGBUS); only the size its RECORD gives says what happened.
    python, nccl_dir, args = pip_site(tmp_path, wheels)
    killed = killed_pip_interpreter(python, tmp_path / "killed-pip-python", "library")
    library = nccl_dir / "lib" / "libnccl.so.2"
    recorded = library.stat().st_size

    def ignore_installed_killed(version):
        subprocess.run([killed, "-m", "pip", "install", "-q", "-I", "--no-deps", "--no-index", "--find-links",
                        str(wheels), "nvidia-nccl-cu13==%s" % version], check=False)
        assert not pip_leftovers(nccl_dir) and library.stat().st_size != recorded
        assert subprocess.run([python, "-c", "import torch"], check=False).returncode == -signal.SIGBUS

    # DeepEP V1: without reinstall_wheel nothing is done; with it, the version the metadata names is installed
    # again over the library (check mode first: said, nothing changed).
    ignore_installed_killed("2.30.7")
    size = library.stat().st_size
    kept, failed = run_module(module, dict(args, state="absent"))
    assert not failed and kept["changed"] is False, kept
    checked, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True), check_mode=True)
    assert not failed and checked["changed"] is True and checked["action"] == "repaired", checked
    assert library.stat().st_size == size
    back, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and back["action"] == "repaired" and back["pip_installed"] == "nvidia-nccl-cu13==2.28.9", back
    assert back["loaded_version"] == "2.28.9" and wheel_version(python) == "2.28.9"
    assert library.stat().st_size == recorded and not (nccl_dir / module.WHEEL_RECORD).exists()
    again, failed = run_module(module, dict(args, state="absent", reinstall_wheel=True))
    assert not failed and again["changed"] is False, again

    # DeepEP V2 with the pin installed, the same pip killed over it: the pin installed again, the record (the
    # version to go back to) kept.
    done, failed = run_module(module, dict(args, version="2.30.4", state="upgraded"))
    assert not failed and done["loaded_version"] == "2.30.4", done
    record = {"package": "nvidia-nccl-cu13", "version": "2.30.4", "version_before": "2.28.9"}
    pinned = library.stat().st_size
    ignore_installed_killed("2.30.7")
    checked, failed = run_module(module, dict(args, version="2.30.4", state="upgraded"), check_mode=True)
    assert not failed and checked["changed"] is True and checked["action"] == "repaired", checked
    done, failed = run_module(module, dict(args, version="2.30.4", state="upgraded"))
    assert not failed and done["action"] == "repaired" and done["pip_installed"] == "nvidia-nccl-cu13==2.30.4", done
    assert done["loaded_version"] == "2.30.4" and library.stat().st_size == pinned
    assert done["wheel_upgrade"] == record and json.loads((nccl_dir / module.WHEEL_RECORD).read_text()) == record
    again, failed = run_module(module, dict(args, version="2.30.4", state="upgraded"))
    assert not failed and again["changed"] is False, again


def test_a_cut_short_library_pip_cannot_install_again_is_named(run_module, tmp_path, wheels):
    python, nccl_dir, args = pip_site(tmp_path, wheels)
    killed = killed_pip_interpreter(python, tmp_path / "killed-pip-python", "library")
    subprocess.run([killed, "-m", "pip", "install", "-q", "-I", "--no-deps", "--no-index", "--find-links",
                    str(wheels), "nvidia-nccl-cu13==2.30.7"], check=False)
    library = nccl_dir / "lib" / "libnccl.so.2"
    size = library.stat().st_size
    bare = tmp_path / "no-2.28.9"
    bare.mkdir()
    stays, failed = run_module(module, dict(args, pip_extra_args="--no-index --find-links %s" % bare,
                                            state="absent", reinstall_wheel=True))
    said = ("torch's NCCL wheel stays half-installed (nvidia-nccl-cu13 2.28.9, its %s %d bytes where its RECORD says "
            "%d: a pip writing it was stopped before it finished; torch cannot load its own NCCL until it is "
            "installed again): pip could not install nvidia-nccl-cu13==2.28.9, the version its metadata names; make "
            "it reachable " % (library, size, recorded_size(python)))
    assert failed and stays["msg"].startswith(said), stays["msg"]
    assert stays["changed"] is False and library.stat().st_size == size
    # The source method refuses it, check mode or not, before it keeps anything as the wheel's library.
    build = nccl_build(tmp_path / "build")
    for check_mode in (True, False):
        refused, failed = present(run_module, python, build, tmp_path, check_mode=check_mode)
        assert failed and refused["msg"] == (
            "torch's NCCL wheel is %s: install it again first (python -m pip install --force-reinstall --no-deps "
            "nvidia-nccl-cu13==2.28.9), or set nccl_method: wheel; nothing was changed"
            % module.NcclRuntime.wheel_state("2.28.9", "nvidia-nccl-cu13", (str(library), size, recorded_size(python)))
        ), refused["msg"]
        assert library.stat().st_size == size and not (nccl_dir / module.RECORD).exists()
        assert not (tmp_path / "replaced").exists()


def recorded_size(python):
    return int(subprocess.run(
        [python, "-c", "import importlib.metadata as md; print([f.size for f in md.files('nvidia-nccl-cu13') "
         "if str(f) == 'nvidia/nccl/lib/libnccl.so.2'][0])"], capture_output=True, text=True, check=True).stdout)


def test_a_pip_that_cannot_install_the_version_before_keeps_the_record(run_module, tmp_path, wheels):
    python, nccl_dir, args = pip_site(tmp_path, wheels)
    done, failed = run_module(module, dict(args, version="2.30.7", state="upgraded"))
    assert not failed, done.get("msg")
    bare = tmp_path / "no-2.28.9"
    bare.mkdir()
    shutil.copy(str(wheels / "nvidia_nccl_cu13-2.30.7-py3-none-any.whl"), str(bare))
    stays, failed = run_module(module, dict(args, pip_extra_args="--no-index --find-links %s" % bare,
                                            state="absent", reinstall_wheel=True))
    assert failed and stays["msg"].startswith(
        "torch's NCCL wheel stays at 2.30.7 (the nccl layer's wheel method installed it for DeepEP V2): pip could "
        "not install nvidia-nccl-cu13==2.28.9, the version torch came with; make it reachable (nccl_pip_extra_args: "
        "an index, or --find-links to a directory with it) and run again. pip: ERROR: "), stays["msg"]
    assert stays["changed"] is False  # a rollback's message then says nothing came back
    assert wheel_version(python) == "2.30.7" and (nccl_dir / module.WHEEL_RECORD).exists()


def test_only_a_package_and_a_version_reach_pip(run_module, site, tmp_path):
    python, nccl_dir = site
    args = dict(python=python, backup_dir=str(tmp_path / "replaced"), state="upgraded", package="nvidia-nccl-cu13")
    result, failed = run_module(module, dict(args, version="2.30.7 --index-url http://x"))
    assert failed and result["msg"] == "version: '2.30.7 --index-url http://x' is not a version (2.30.7)"
    result, failed = run_module(module, dict(args, version="2.30.7", package="torch"))
    assert failed and result["msg"] == "package: 'torch' is not an NCCL wheel (nvidia-nccl-cu13)"
    result, failed = run_module(module, dict(args, version="2.30.7", pip_extra_args="--index-url 'http://x"))
    assert failed and result["msg"] == ("pip_extra_args (nccl_pip_extra_args): \"--index-url 'http://x\" cannot be "
                                        "split into arguments (No closing quotation); close its quotes")
    assert not (nccl_dir / module.WHEEL_RECORD).exists()
    result, failed = run_module(module, dict(python=python, backup_dir=str(tmp_path / "r"), state="upgraded",
                                             version="2.30.7"))
    assert failed and "state is upgraded but all of the following are missing: package" in result["msg"]
    # A record whose version before is not a version is refused, not handed to pip.
    (nccl_dir / module.WHEEL_RECORD).write_text(json.dumps(
        {"package": "nvidia-nccl-cu13", "version": "2.28.9", "version_before": "2.28.9 --index-url http://x"}))
    result, failed = run_module(module, dict(python=python, backup_dir=str(tmp_path / "r"), state="absent",
                                             reinstall_wheel=True))
    assert failed and "the wheel upgrade record names no package and version to install again" in result["msg"]
    # The interpreter's own pip only: a venv made without pip is named, not another pip used.
    make_venv(tmp_path / "bare", with_pip=False)
    bare = make_python_site(tmp_path / "bare-site", interpreter=str(tmp_path / "bare" / "bin" / "python"))
    result, failed = run_module(module, dict(args, python=bare, version="2.30.7"))
    assert failed and result["msg"] == ("nccl: %s has no pip, which nccl_method wheel runs (python -m pip) to install "
                                        "nvidia-nccl-cu13==2.30.7: add it (python -m ensurepip), or set nccl_method: "
                                        "source." % bare)


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
