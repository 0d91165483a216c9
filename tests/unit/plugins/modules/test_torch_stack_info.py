# -*- coding: utf-8 -*-
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import torch_stack_info as module
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import BUILD_USER, open_to_others
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import (killed_pip_interpreter, make_pip_site,
                                                                             make_python_site, nccl_wheel,
                                                                             probes_overlapped, timing_interpreter)


def test_gpu_machine_like_stack(run_module, tmp_path):
    python = make_python_site(tmp_path)
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    assert result["changed"] is False
    # The fixture torch loads no libnccl: the version it was compiled against is all there is to say.
    assert result["torch"] == {"version": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9", "nccl_compiled": "2.28.9",
                               "nccl_lib": None, "nccl_libs": [], "installed": "2.11.0+cu130"}
    wheel = result["nvshmem_wheel"]
    assert wheel["package"] == "nvidia-nvshmem-cu13" and wheel["version"] == "3.4.5"
    assert wheel["ibgda_transport"] is True and wheel["host_lib"].endswith("libnvshmem_host.so.3")
    assert result["nccl_wheel"]["version"] == "2.28.9"
    assert result["deep_ep"]["importable"] is False and result["deep_ep"]["undefined_symbol"] is False


def test_the_nccl_torch_loads_is_read_from_the_library(run_module, tmp_path):
    # torch 2.11 compiled against NCCL 2.28.9, with NCCL 2.30.7 put in place of the wheel's library (what DeepEP V2
    # needs): torch.cuda.nccl.version() still says 2.28.9; the library loaded says 2.30.7.
    result, failed = run_module(module, {"python": make_python_site(tmp_path, nccl_runtime=(2, 30, 7))})
    assert not failed, result
    assert result["torch"]["nccl"] == "2.30.7" and result["torch"]["nccl_compiled"] == "2.28.9"
    assert result["torch"]["nccl_lib"].endswith("/site-packages/nvidia/nccl/lib/libnccl.so.2")
    assert result["nccl_wheel"]["replaced_by"] is None  # no record: the files are the wheel's as far as it can tell


def test_the_nccl_wheels_real_directory_is_where_the_loader_sees_its_library(run_module, tmp_path):
    # site-packages reached through a symlink (the fixture venv's, as a venv moved to a larger disk): the loader
    # names the library by its real path, which real_dir gives (the site preflight's KF31 check compares them).
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    nccl_wheel(wheels, (2, 28, 9))
    python = make_pip_site(tmp_path / "pip-site", wheels)
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    wheel = result["nccl_wheel"]
    assert wheel["dir"] == str(tmp_path / "pip-site" / "site-packages" / "nvidia" / "nccl")
    assert wheel["real_dir"] == os.path.realpath(wheel["dir"]) != wheel["dir"]
    assert result["torch"]["nccl_lib"] == os.path.join(wheel["real_dir"], "lib", "libnccl.so.2")


def test_says_which_build_the_nccl_layer_put_in_place_of_the_wheel(run_module, tmp_path):
    """nccl_runtime's record in the wheel's directory: a later DeepEP V1 run puts the wheel's files back by it."""
    python = make_python_site(tmp_path, nccl_runtime=(2, 30, 7))
    nccl_dir = [os.path.join(root, "nccl") for root, dirs, files in os.walk(str(tmp_path)) if root.endswith("/nvidia")
                and "nccl" in dirs][0]
    with open(os.path.join(nccl_dir, ".moe_infra_nccl.json"), "w") as record:
        record.write('{"version": "2.30.7", "build_dir": "/opt/deepep/nccl/builds/6a6104bc2c460712", "backup": "/b"}')
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    assert result["nccl_wheel"]["replaced_by"] == {"version": "2.30.7",
                                                   "build_dir": "/opt/deepep/nccl/builds/6a6104bc2c460712"}
    with open(os.path.join(nccl_dir, ".moe_infra_nccl.json"), "w") as record:
        record.write("not json")  # a damaged record says nothing rather than failing the probe
    assert run_module(module, {"python": python})[0]["nccl_wheel"]["replaced_by"] is None


def test_says_which_version_the_nccl_layer_upgraded_the_wheel_from(run_module, tmp_path):
    """nccl_runtime's wheel upgrade record: said while the wheel is the version the record says pip installed."""
    python = make_python_site(tmp_path, nccl=(2, 30, 7))
    nccl_dir = [os.path.join(root, "nccl") for root, dirs, files in os.walk(str(tmp_path)) if root.endswith("/nvidia")
                and "nccl" in dirs][0]
    assert run_module(module, {"python": python})[0]["nccl_wheel"]["upgraded_from"] is None
    with open(os.path.join(nccl_dir, ".moe_infra_nccl_wheel.json"), "w") as record:
        record.write('{"package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9"}')
    result, failed = run_module(module, {"python": python})
    assert not failed and result["nccl_wheel"]["upgraded_from"] == "2.28.9", result
    with open(os.path.join(nccl_dir, ".moe_infra_nccl_wheel.json"), "w") as record:
        # pip installed another version since (a torch upgrade): the record no longer says what is there
        record.write('{"package": "nvidia-nccl-cu13", "version": "2.30.4", "version_before": "2.28.9"}')
    assert run_module(module, {"python": python})[0]["nccl_wheel"]["upgraded_from"] is None
    with open(os.path.join(nccl_dir, ".moe_infra_nccl_wheel.json"), "w") as record:
        # Only a version reaches pip's requirement.
        record.write('{"package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9 --pre"}')
    assert run_module(module, {"python": python})[0]["nccl_wheel"]["upgraded_from"] is None


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc for the libnccl stand-ins")
def test_says_that_a_stopped_pip_left_the_nccl_wheel_half_installed(run_module, tmp_path):
    """pip killed between its uninstall of torch's 2.28.9 and its install of 2.30.7 (the fixture's wrapper), with
    the nccl layer's record written before it: no NCCL wheel, torch not importable, the version to install again."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    nccl_wheel(wheels, (2, 28, 9))
    nccl_wheel(wheels, (2, 30, 7), padding=1 << 20)
    python = make_pip_site(tmp_path / "site", wheels)
    nccl_dir = tmp_path / "site" / "site-packages" / "nvidia" / "nccl"
    (nccl_dir / ".moe_infra_nccl_wheel.json").write_text(
        '{"package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9"}')
    # pip killed while it wrote 2.30.7's library: half of it there, and loading it kills the process (SIGBUS).
    killed = killed_pip_interpreter(python, tmp_path / "killed-pip-python", during="library")
    subprocess.run([killed, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--find-links", str(wheels),
                    "nvidia-nccl-cu13==2.30.7"], check=False)
    loaded = subprocess.run([python, "-c", "import torch"], check=False)
    assert loaded.returncode == -signal.SIGBUS
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    assert result["nccl_wheel"] == {"package": "nvidia-nccl-cu13", "version": None, "dir": str(nccl_dir),
                                    "replaced_by": None, "upgraded_from": "2.28.9", "half_installed": True,
                                    "pip_stash": None, "cut_short": None}
    # Not imported, but installed: its version from the metadata (the site preflight judges V2's torch by it).
    assert result["torch"]["version"] is None and result["torch"]["installed"] == "2.11.0+cu130"
    assert result["torch"]["error"] == (
        "ImportError: not imported: its NCCL wheel nvidia-nccl-cu13 is half-installed (a pip changing it was stopped "
        "before it finished; the libnccl.so.2 it was writing may be cut short)")
    assert result["deep_ep"]["importable"] is False and result["deep_ep"]["error"] == (
        "ImportError: not imported: torch's NCCL wheel is half-installed (a pip changing it was stopped before it "
        "finished)")
    # No record (a pip that was not the nccl layer's): the stash pip's uninstall left names the version it was
    # replacing, and torch is not imported either.
    (nccl_dir / ".moe_infra_nccl_wheel.json").unlink()
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    assert result["nccl_wheel"] == {"package": "nvidia-nccl-cu13", "version": None, "dir": str(nccl_dir),
                                    "replaced_by": None, "upgraded_from": "2.28.9", "half_installed": True,
                                    "pip_stash": "~vidia_nccl_cu13-2.28.9.dist-info", "cut_short": None}
    assert result["torch"]["version"] is None and result["deep_ep"]["importable"] is False
    # Neither record nor stash: torch is imported and the reading says how it died.
    shutil.rmtree(str(tmp_path / "site" / "site-packages" / "~vidia_nccl_cu13-2.28.9.dist-info"))
    result, failed = run_module(module, {"python": python})
    assert failed and result["msg"] == "%s could not run the probe: it died of signal 7 (SIGBUS) and printed nothing" % python


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc for the libnccl stand-ins")
def test_says_that_a_pip_install_ignore_installed_left_the_nccl_library_cut_short(run_module, tmp_path):
    """pip install -I (no uninstall, no stash, no record) killed while it wrote 2.30.7's library over torch's 2.28.9:
    the metadata says 2.28.9, the library is not the size its RECORD gives, and loading it kills the process."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    nccl_wheel(wheels, (2, 28, 9))
    nccl_wheel(wheels, (2, 30, 7), padding=1 << 20)
    python = make_pip_site(tmp_path / "site", wheels)
    nccl_dir = tmp_path / "site" / "site-packages" / "nvidia" / "nccl"
    library = nccl_dir / "lib" / "libnccl.so.2"
    recorded = library.stat().st_size
    killed = killed_pip_interpreter(python, tmp_path / "killed-pip-python", during="library")
    subprocess.run([killed, "-m", "pip", "install", "-q", "-I", "--no-deps", "--no-index", "--find-links",
                    str(wheels), "nvidia-nccl-cu13==2.30.7"], check=False)
    assert subprocess.run([python, "-c", "import torch"], check=False).returncode == -signal.SIGBUS
    size = library.stat().st_size
    assert size != recorded
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    wheel = result["nccl_wheel"]
    assert (wheel["version"], wheel["half_installed"], wheel["upgraded_from"], wheel["pip_stash"]) == (
        "2.28.9", True, "2.28.9", None)
    assert wheel["cut_short"] == {"package": "nvidia-nccl-cu13", "version": "2.28.9", "lib": str(library),
                                  "size": size, "recorded_size": recorded}
    assert result["torch"]["version"] is None and result["torch"]["installed"] == "2.11.0+cu130"
    assert result["torch"]["error"] == (
        "ImportError: not imported: its NCCL wheel nvidia-nccl-cu13 is half-installed (%s is %d bytes, its RECORD "
        "says %d: a pip writing it was stopped before it finished)" % (library, size, recorded))
    assert result["deep_ep"]["importable"] is False and "half-installed" in result["deep_ep"]["error"]
    # The nccl layer's build in place of the wheel's library (its record there) is not the wheel's size either,
    # and is not taken for one cut short: torch is imported (and dies of the cut-short library, said so).
    (nccl_dir / ".moe_infra_nccl.json").write_text('{"version": "2.30.7", "build_dir": "/b"}')
    result, failed = run_module(module, {"python": python})
    assert failed and "died of signal 7 (SIGBUS)" in result["msg"], result


def test_an_interpreter_killed_by_a_signal_is_said_so(run_module, tmp_path):
    # What loading a library cut short does (SIGBUS): the interpreter prints nothing, the signal is the news.
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nkill -BUS $$\n")
    python.chmod(0o755)
    result, failed = run_module(module, {"python": str(python)})
    assert failed and result["msg"] == "%s could not run the probe: it died of signal 7 (SIGBUS) and printed nothing" % python


def test_wheel_without_ibgda_and_missing_nvshmem(run_module, tmp_path):
    result, dummy = run_module(module, {"python": make_python_site(tmp_path / "a", ibgda_transport=False)})
    assert result["nvshmem_wheel"]["ibgda_transport"] is False
    result, dummy = run_module(module, {"python": make_python_site(tmp_path / "b", nvshmem=None)})
    assert result["nvshmem_wheel"] is None


def test_deep_ep_built_against_another_torch_is_flagged(run_module, tmp_path):
    error = "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so: undefined symbol: _ZNK3c1010TensorImpl7stridesEv"
    result, dummy = run_module(module, {"python": make_python_site(tmp_path, deep_ep_error=error)})
    assert result["deep_ep"]["undefined_symbol"] is True and "TensorImpl" in result["deep_ep"]["error"]


def test_interpreter_must_exist(run_module, tmp_path):
    result, failed = run_module(module, {"python": str(tmp_path / "nope")})
    assert failed and "is not an executable interpreter" in result["msg"]


def test_missing_interpreter_is_an_answer_with_missing_ok(run_module, tmp_path):
    # A venv a later task creates: one call says it is not there (and reads nothing).
    result, failed = run_module(module, {"python": str(tmp_path / "venv" / "bin" / "python"), "missing_ok": True})
    assert not failed and result["exists"] is False and result["torch"]["version"] is None
    assert result["deep_ep"]["importable"] is False
    # One that exists but cannot run is still an error.
    broken = tmp_path / "python"
    broken.write_text("not executable")
    result, failed = run_module(module, {"python": str(broken), "missing_ok": True})
    assert failed and "is not an executable interpreter" in result["msg"]
    present, failed = run_module(module, {"python": make_python_site(tmp_path / "site"), "missing_ok": True})
    assert not failed and present["exists"] is True and present["torch"]["version"]


def counting(python, tmp_path):
    """The interpreter behind a wrapper that counts the probes it runs (not the sys.path reads)."""
    count = tmp_path / "probes"
    wrapper = tmp_path / "counting-python"
    wrapper.write_text('#!/bin/sh\ncase "$2" in *"sys.path if p"*) ;; *) echo x >> "%s" ;; esac\nexec "%s" "$@"\n'
                       % (count, python))
    wrapper.chmod(0o755)
    return str(wrapper), lambda: len(count.read_text().splitlines()) if count.exists() else 0


def test_answers_from_the_cache_until_the_interpreter_changes(run_module, tmp_path):
    site = tmp_path / "venv"
    python, probes = counting(make_python_site(site), tmp_path)
    args = {"python": python, "cache_dir": str(tmp_path / "cache")}
    result, failed = run_module(module, args, check_mode=True)
    assert not failed and result["cached"] is False and probes() == 2
    assert not (tmp_path / "cache").exists()  # check mode writes nothing

    first, dummy = run_module(module, args)
    assert first["cached"] is False and probes() == 4
    again, dummy = run_module(module, args)
    assert again["cached"] is True and probes() == 4  # no interpreter imported torch
    assert dict(again, cached=False) == first

    # A torch upgrade (pip swaps the dist-info): probed again, the new version seen.
    make_python_site(site, torch="2.12.0+cu130")
    upgraded, dummy = run_module(module, args)
    assert upgraded["cached"] is False and upgraded["torch"]["version"] == "2.12.0+cu130" and probes() == 6
    # Another environment or PYTHONPATH is another answer.
    other, dummy = run_module(module, dict(args, environment={"LD_PRELOAD": str(tmp_path / "libx.so")}))
    assert other["cached"] is False and probes() == 8
    tree = tmp_path / "deepep-src"
    tree.mkdir()
    built, dummy = run_module(module, dict(args, pythonpath=[str(tree)]))
    assert probes() == 9  # the first probe's state is the upgraded one's: only the import is probed
    (tree / "deep_ep_cpp.so").write_text("")
    rebuilt, dummy = run_module(module, dict(args, pythonpath=[str(tree)]))
    assert rebuilt["cached"] is False and probes() == 10


def test_one_run_reads_the_interpreters_path_once(run_module, tmp_path):
    """Each sys.path read starts the interpreter: the import probe, which only adds PYTHONPATH, keys its answer on
    the first probe's read with the tree in front, and still sees a change in that tree."""
    python = make_python_site(tmp_path / "venv")
    reads = tmp_path / "reads"
    wrapper = tmp_path / "path-counting-python"
    wrapper.write_text('#!/bin/sh\ncase "$2" in *"sys.path if p"*) echo x >> "%s" ;; esac\nexec "%s" "$@"\n'
                       % (reads, python))
    wrapper.chmod(0o755)
    tree = tmp_path / "deepep-src"
    tree.mkdir()
    args = {"python": str(wrapper), "cache_dir": str(tmp_path / "cache"), "pythonpath": [str(tree)]}
    first, failed = run_module(module, args)
    assert not failed and first["cached"] is False
    assert len(reads.read_text().splitlines()) == 1
    again, dummy = run_module(module, args)
    assert again["cached"] is True and len(reads.read_text().splitlines()) == 2
    (tree / "deep_ep_cpp.so").write_text("")
    rebuilt, dummy = run_module(module, args)
    assert rebuilt["cached"] is False and len(reads.read_text().splitlines()) == 3


SYSTEM_PYTHON = "/usr/bin/python3"  # one another user may run (pytest's may live under root's 0700 home)


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="runs the probe as another user: needs root and %s" % SYSTEM_PYTHON)
def test_code_on_a_builds_path_never_runs_as_root(run_module, tmp_path):
    """A build's tree on PYTHONPATH with a planted sitecustomize.py (what a hostile build could leave): with run_as
    every interpreter the probe starts runs as that user; a user not there yet is replaced by nobody."""
    open_to_others(tmp_path)
    python = make_python_site(tmp_path / "venv", interpreter=SYSTEM_PYTHON)
    seen = tmp_path / "seen"
    seen.mkdir()
    os.chmod(str(seen), 0o1777)
    build = tmp_path / "build" / "src"
    build.mkdir(parents=True)
    (build / "sitecustomize.py").write_text(
        "import os\nopen(os.path.join(%r, str(os.getpid())), 'w').write(str(os.getuid()))\n" % str(seen))
    for user in (BUILD_USER, "no-such-build-user"):
        result, failed = run_module(module, {"python": python, "pythonpath": [str(build)], "run_as": user})
        assert not failed, result
        uids = {(seen / name).read_text() for name in os.listdir(str(seen))}
        assert uids == {str(pwd.getpwnam("nobody").pw_uid)}, uids
        assert result["deep_ep"]["importable"] is False


def test_the_stack_probe_and_the_import_run_at_once(run_module, tmp_path):
    python = make_python_site(tmp_path / "venv")
    tree = tmp_path / "deepep-src"
    tree.mkdir()
    log = tmp_path / "probes.log"
    result, failed = run_module(module, {"python": timing_interpreter(python, log), "pythonpath": [str(tree)]})
    assert not failed and result["torch"]["version"] == "2.11.0+cu130" and result["deep_ep"]["importable"] is False
    assert probes_overlapped(log) == (2, True)


def test_an_interpreter_that_cannot_start_fails_saying_why(run_module, tmp_path):
    # A wrapper (fixture) whose #! names an interpreter that is not there (no cache: the probe is the first start).
    python = tmp_path / "python"
    python.write_text("#!%s\n" % (tmp_path / "gone" / "python3"))
    python.chmod(0o755)
    result, failed = run_module(module, {"python": str(python)})
    assert failed and result["msg"].startswith("%s could not run the probe: %s: " % (python, python)), result
    assert "No such file or directory" in result["msg"] and result["rc"] == 126
