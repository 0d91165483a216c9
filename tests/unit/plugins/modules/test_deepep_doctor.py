# -*- coding: utf-8 -*-
"""deepep_doctor gathers its evidence from fixture trees laid out like the real node (sysfs, procfs, modprobe.d,
/opt/deepep as the build roles leave it) and runs the checks on it."""

from __future__ import annotations

import json
import os
import pwd
import shutil

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.envscript import process_env, render_lines
from ansible_collections.moe_infra.deepep.plugins.modules import deepep_doctor as module
from ansible_collections.moe_infra.deepep.plugins.modules import deepep_imports
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import open_to_others
from ansible_collections.moe_infra.deepep.tests.fixtures.cxx_objects import build_extension
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import (make_python_site, probes_overlapped,
                                                                             timing_interpreter)
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import write_nvidia_module_version, write_nvidia_params

CONF = 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n'


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as handle:
        handle.write(text)
    os.chmod(str(path), mode)


def node(tmp_path, machine=machines.gcp_b200, registry_dwords="", conf=True):
    machine(str(tmp_path / "sys"))
    write_nvidia_params(str(tmp_path / "proc"), registry_dwords=registry_dwords)
    write_nvidia_module_version(str(tmp_path / "sys"))
    (tmp_path / "modprobe.d").mkdir()
    if conf:
        write(tmp_path / "modprobe.d" / "nvidia-deepep.conf", CONF)
    (tmp_path / "root").mkdir()
    (tmp_path / "include").mkdir()
    return {"sysfs_root": str(tmp_path / "sys"), "procfs_root": str(tmp_path / "proc"),
            "modprobe_dir": str(tmp_path / "modprobe.d"), "root": str(tmp_path / "root"),
            "include_dirs": [str(tmp_path / "include")], "cuda_home": str(tmp_path / "cuda"),
            "deepep_prefix": str(tmp_path / "opt")}


def doctor(run_module, args, **extra):
    # The fixture interpreters write into pytest's 0700 directories: probed as root here (the unprivileged probe
    # has its own tests, test_torch_stack_info's and the one below).
    args = dict(dict(probe_user=""), **dict(args, **extra))
    result, failed = run_module(module, args)
    assert not failed, result
    assert result["changed"] is False
    return result, dict((f["id"], f) for f in result["findings"])


def test_b200_before_doca_with_a_broken_env_script(run_module, tmp_path):
    args = node(tmp_path)
    prefix = tmp_path / "opt"
    # The env script as the deepep role renders it (plain exports and a PYTHONPATH prepend), but edited by hand.
    lines = render_lines({"env": {"NVSHMEM_IB_GID_INDEX": "1", "NVSHMEM_IBGDA_NIC_HANDLER": "cpu",
                                  "NVSHMEM_HCA_PREFIX": "rocep"},
                          "path_env": {"PYTHONPATH": str(prefix / "deepep/current/src")}})
    write(prefix / "env.sh", "\n".join(lines) + "\n")
    write(prefix / "reports" / "low_latency.log", "rank 0: init failed for transport: IBGDA\n")
    result, by_id = doctor(run_module, args)
    assert result["node"]["gpu_count"] == 8 and result["node"]["hca_count"] == 8
    assert result["evidence"]["env_script"]["vars"]["PYTHONPATH"] == str(prefix / "deepep/current/src")
    assert result["evidence"]["logs"] == [str(prefix / "reports" / "low_latency.log")]
    assert by_id["KF01"]["status"] == "problem"  # rocep names, NVSHMEM version unknown
    assert by_id["KF04"]["status"] == "problem"
    assert by_id["KF17"]["status"] == "problem" and "RoCE v2 IPv4 GID index is [3]" in by_id["KF17"]["evidence"]
    assert by_id["KF20"]["status"] == "problem"
    assert 'configured in %s' % (tmp_path / "modprobe.d" / "nvidia-deepep.conf") in by_id["KF20"]["evidence"]
    assert by_id["KF19"]["status"] == "problem"  # no mlx5_api.h in the include dir
    assert by_id["KF03"]["status"] == "problem"  # 8 GPUs, 8 NICs, no mapping
    assert by_id["KF14"]["status"] == "ok" and by_id["KF33"]["status"] == "ok"
    assert by_id["KF36"]["status"] == "ok"
    assert by_id["KF09"]["status"] == "problem"  # no toolkit at cuda_home
    assert by_id["GPUS"]["status"] == "ok"
    assert result["summary"]["problem"] == sum(1 for f in result["findings"] if f["status"] == "problem")


def test_h200_without_nics_after_the_build(run_module, tmp_path):
    args = node(tmp_path, machine=machines.h200_no_nics, conf=False)
    prefix = tmp_path / "opt"
    src = prefix / "deepep" / "builds" / "fp" / "src"
    os.makedirs(str(src / "build"))
    write(src / "build" / "deep_ep_cpp.o", "")
    os.symlink(str(prefix / "deepep" / "builds" / "fp"), str(prefix / "deepep" / "current"))
    stamp = {"name": "deepep", "fingerprint": "fp", "inputs": {"inputs": {
        "deepep_version": "v1", "torch": "2.11.0+cu130", "nvshmem": "3.4.5", "nvshmem_dir": "", "arch_list": ["9.0"]}}}
    write(prefix / "deepep" / "current" / ".moe_infra_stamp.json", json.dumps(stamp))
    write(prefix / "env.sh", "export NVSHMEM_REMOTE_TRANSPORT='ibgda'\n")
    os.makedirs(str(tmp_path / "cuda" / "include" / "cccl"))
    write(tmp_path / "cuda" / "bin" / "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n",
          0o755)
    result, by_id = doctor(run_module, args)
    assert by_id["KF20"]["status"] == "not_applicable"
    assert by_id["KF20"]["evidence"] == 'RegistryDwords: ""; no RDMA HCA, so not required'
    assert by_id["KF36"]["status"] == "problem"  # static IBGDA env without HCAs
    assert by_id["KF07"]["status"] == "ok" and "GPUs 9.0" in by_id["KF07"]["evidence"]
    assert by_id["KF09"]["status"] == "ok" and "release 13.0" in by_id["KF09"]["evidence"]
    assert by_id["KF21"]["status"] == "ok"
    assert by_id["KF06"]["status"] == "ok"
    for internode in ("KF01", "KF03", "KF15", "KF17", "KF22", "KF24", "KF27", "KF32", "KF33"):
        assert by_id[internode]["status"] == "not_applicable", by_id[internode]
    assert by_id["KF18"]["status"] == "unknown"  # no interpreter to ask which torch is installed


def test_container_markers_and_gdrdrv_package(run_module, tmp_path):
    args = node(tmp_path, machine=machines.no_gpus, conf=False)
    write(tmp_path / "root" / "run" / ".containerenv", "")
    write(tmp_path / "root" / "var" / "lib" / "dpkg" / "status",
          "Package: gdrdrv-dkms\nStatus: install ok installed\nVersion: 2.5.1\n\nPackage: make\n"
          "Status: install ok installed\n")
    result, by_id = doctor(run_module, args, checks=["KF35", "KF10", "GPUS"])
    assert [f["id"] for f in result["findings"]] == ["KF10", "KF35", "GPUS"]
    assert by_id["KF35"]["status"] == "problem" and by_id["KF35"]["evidence"] == "container with gdrdrv-dkms installed"
    assert by_id["GPUS"]["status"] == "not_applicable"


def test_preflight_only_runs_what_no_layer_fixes(run_module, tmp_path):
    args = node(tmp_path)
    result, by_id = doctor(run_module, args, preflight_only=True, gdrcopy_kernel_module=True)
    assert sorted(by_id) == ["DRIVER", "KF10", "KF30", "KF33", "KF35", "PYTAR", "REACH"]
    assert by_id["KF10"]["status"] == "problem"  # gdrdrv wanted, no nv-p2p.h under <root>/usr/src
    # The driver the fixture node's procfs says is loaded, at the version its sysfs module directory gives.
    assert by_id["DRIVER"]["status"] == "ok" and by_id["DRIVER"]["evidence"] == "driver 580.159.04", by_id["DRIVER"]


def test_a_held_driver_package_waiting_for_its_reboot(run_module, tmp_path):
    # What the nvidia_driver layer leaves on a plain image until the reboot: the packages installed and held
    # (dpkg's status says "hold ok installed"), no driver loaded. The fixture's dpkg status lays it out as dpkg does.
    args = node(tmp_path)
    shutil.rmtree(str(tmp_path / "proc" / "driver"))
    shutil.rmtree(str(tmp_path / "sys" / "module" / "nvidia"))
    write(tmp_path / "root" / "var" / "lib" / "dpkg" / "status",
          "Package: nvidia-utils-580\nStatus: hold ok installed\nVersion: 580.105.08-0ubuntu1\n\n"
          "Package: nvidia-open-580\nStatus: hold ok installed\nVersion: 580.105.08-0ubuntu1\n\n"
          "Package: nvidia-open-570\nStatus: deinstall ok config-files\nVersion: 570.195.03-0ubuntu1\n")
    result, by_id = doctor(run_module, args, checks=["DRIVER"])
    assert by_id["DRIVER"]["status"] == "problem"
    assert by_id["DRIVER"]["evidence"] == ("nvidia-open-580 installed and no NVIDIA driver loaded: it loads at the "
                                           "next boot")
    # In preflight, with the layer on, the layer reboots it: the node goes on.
    result, by_id = doctor(run_module, args, checks=["DRIVER"], preflight_only=True, nvidia_driver_branch="580")
    assert by_id["DRIVER"]["status"] == "ok" and "the nvidia_driver layer finds nvidia-open-580" in \
        by_id["DRIVER"]["evidence"]


def test_unknown_check_refused_before_reading_anything(run_module, tmp_path):
    result, failed = run_module(module, {"checks": ["KF01", "KF99"], "sysfs_root": str(tmp_path / "missing")})
    assert failed
    assert result["msg"].startswith("checks: unknown id(s) KF99; known: KF01, KF02")


def test_bad_deepep_version_refused(run_module, tmp_path):
    result, failed = run_module(module, {"deepep_version": "v3"})
    assert failed and "deepep_version: 'v3' is neither v1 nor v2" in result["msg"]


def test_gdrcopy_and_nvshmem_under_their_own_prefixes(run_module, tmp_path):
    args = node(tmp_path)
    layers = tmp_path / "layers"
    write(layers / "gdrcopy" / "builds" / "fp" / "include" / "gdrapi.h", "/* fixture */\n")
    os.symlink(str(layers / "gdrcopy" / "builds" / "fp"), str(layers / "gdrcopy" / "current"))
    os.makedirs(str(layers / "nvshmem" / "builds" / "fp" / "lib"))
    os.symlink(str(layers / "nvshmem" / "builds" / "fp"), str(layers / "nvshmem" / "current"))
    result, by_id = doctor(run_module, args)
    assert result["evidence"]["gdrcopy"]["root"] is None  # <deepep_prefix>/gdrcopy: nothing there
    result, by_id = doctor(run_module, args, gdrcopy_prefix=str(layers / "gdrcopy"),
                           nvshmem_prefix=str(layers / "nvshmem"))
    assert result["evidence"]["gdrcopy"]["header"] == str(layers / "gdrcopy" / "current" / "include" / "gdrapi.h")
    assert result["evidence"]["nvshmem"]["root"] == str(layers / "nvshmem" / "current")


def test_nvshmem_info_is_read_from_the_verified_builds_record(run_module, tmp_path):
    """A source build this collection verified kept what nvshmem-info -a printed (its verify command tees it into
    the build): the doctor reads that record. An NVSHMEM without the stamp (installed by hand) is asked again."""
    args = node(tmp_path)
    build = tmp_path / "layers" / "nvshmem" / "builds" / "fp"
    runs = tmp_path / "tool-runs"
    # A stand-in tool (fixture) that says OFF and records each start: the record says ON.
    write(build / "bin" / "nvshmem-info", "#!/bin/sh\necho x >> %s\necho 'NVSHMEM v3.4.5'\n"
          "echo 'NVSHMEM_IBGDA_SUPPORT=OFF'\n" % runs, 0o755)
    write(build / "nvshmem-info.txt", "NVSHMEM v3.4.5\nNVSHMEM_IBGDA_SUPPORT=ON\n")
    os.symlink(str(build), str(tmp_path / "layers" / "nvshmem" / "current"))
    python = tmp_path / "python"
    write(python, "#!/bin/sh\necho '{\"error\": null}'\n", 0o755)
    extra = dict(nvshmem_prefix=str(tmp_path / "layers" / "nvshmem"), python=str(python))
    # No stamp: not this collection's verified build.
    result, by_id = doctor(run_module, args, **extra)
    nvshmem = result["evidence"]["nvshmem"]
    assert nvshmem["ibgda"] is False and nvshmem["info_from"].endswith("/bin/nvshmem-info") and runs.exists()
    runs.unlink()
    write(build / ".moe_infra_stamp.json", json.dumps({"name": "nvshmem", "inputs": {"inputs": {"version": "3.4.5"}}}))
    result, by_id = doctor(run_module, args, **extra)
    nvshmem = result["evidence"]["nvshmem"]
    recorded = tmp_path / "layers" / "nvshmem" / "current" / "nvshmem-info.txt"
    assert nvshmem["ibgda"] is True and nvshmem["info_from"] == str(recorded)
    assert not runs.exists()
    # A record that is a link is not read.
    os.unlink(str(build / "nvshmem-info.txt"))
    os.symlink(str(tmp_path / "elsewhere.txt"), str(build / "nvshmem-info.txt"))
    write(tmp_path / "elsewhere.txt", "NVSHMEM_IBGDA_SUPPORT=ON\n")
    result, by_id = doctor(run_module, args, **extra)
    assert result["evidence"]["nvshmem"]["ibgda"] is False and runs.exists()


def test_preflight_only_does_not_start_the_interpreter(run_module, tmp_path):
    # A stand-in interpreter (fixture) that records each start: the full doctor probes it, preflight does not.
    args = node(tmp_path)
    starts = tmp_path / "starts"
    python = tmp_path / "python"
    write(python, "#!/bin/sh\necho started >> %s\necho '{\"error\": null}'\n" % starts, 0o755)
    doctor(run_module, args, preflight_only=True, python=str(python))
    assert not starts.exists()
    doctor(run_module, args, python=str(python))
    assert starts.read_text().count("started") == 2  # the torch stack and the deep_ep import


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++ for the extension fixtures")
def test_v2_build_with_its_own_libstdcxx_and_a_persisted_nccl_root(run_module, tmp_path):
    args = node(tmp_path, machine=machines.h200_no_nics, conf=False)
    prefix = tmp_path / "opt"
    src = prefix / "deepep" / "builds" / "fp" / "src"
    os.makedirs(str(src / "deep_ep"))
    os.symlink(str(prefix / "deepep" / "builds" / "fp"), str(prefix / "deepep" / "current"))
    stamp = {"name": "deepep", "fingerprint": "fp", "inputs": {"inputs": {"deepep_version": "v2"}}}
    write(prefix / "deepep" / "current" / ".moe_infra_stamp.json", json.dumps(stamp))
    # What V2's setup.py writes when EP_NCCL_ROOT_DIR was set for the build (KF37).
    write(src / "deep_ep" / "envs.py", "# Pre-installed environment variables\npersistent_envs = dict()\n"
          "persistent_envs['EP_NCCL_ROOT_DIR'] = '/opt/nccl/build'\n")
    build_extension(src / "deep_ep", "_C.cpython-312-x86_64-linux-gnu.so", static_runtime=True)
    result, by_id = doctor(run_module, args)
    assert by_id["KF37"]["status"] == "problem" and "EP_NCCL_ROOT_DIR=/opt/nccl/build" in by_id["KF37"]["evidence"]
    assert by_id["CXXRT"]["status"] == "problem"
    assert by_id["CXXRT"]["evidence"].startswith("deep_ep/_C.cpython-312-x86_64-linux-gnu.so defines std::ctype")
    build_extension(src / "deep_ep", "_C.cpython-312-x86_64-linux-gnu.so", static_runtime=False)
    write(src / "deep_ep" / "envs.py", "persistent_envs = dict()\n")
    result, by_id = doctor(run_module, args)
    assert by_id["CXXRT"]["status"] == "ok" and by_id["KF37"]["status"] != "problem"


def test_the_interpreter_probe_runs_as_the_build_user_never_root(run_module, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("runs the probe as another user: needs root")
    open_to_others(tmp_path)
    args = node(tmp_path)
    seen = tmp_path / "seen"
    seen.mkdir()
    os.chmod(str(seen), 0o1777)
    python = tmp_path / "python"
    write(python, "#!/bin/sh\nid -u > %s/$$\necho '{\"error\": null}'\n" % seen, 0o755)
    doctor(run_module, args, python=str(python), probe_user="no-such-build-user")
    assert {(seen / name).read_text().strip() for name in os.listdir(str(seen))} == {str(pwd.getpwnam("nobody").pw_uid)}


def test_the_two_interpreter_probes_run_at_once(run_module, tmp_path):
    args = node(tmp_path)
    log = tmp_path / "probes.log"
    python = timing_interpreter(make_python_site(tmp_path / "venv"), log)
    result, by_id = doctor(run_module, args, python=python)
    assert result["evidence"]["python"]["torch"]["version"] == "2.11.0+cu130"
    assert probes_overlapped(log) == (2, True)


def test_the_doctor_reads_the_import_checks_answer_with_an_inherited_library_path(run_module, tmp_path, monkeypatch):
    """A node whose modules inherit LD_LIBRARY_PATH (a GKE container's /usr/local/nvidia/lib64): the import check
    and the doctor both run deep_ep's import as a shell that sourced the env script would, so the doctor reads the
    import check's answer from the probe cache and starts only its stack probe."""
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64:/usr/local/nvidia/lib")
    args = node(tmp_path)
    src = tmp_path / "opt" / "deepep" / "current" / "src"
    write(src / "deep_ep" / "__init__.py", "MARKER = 'tree'\n")
    env = {"env": {"NVSHMEM_DISABLE_CUDA_VMM": "1"},
           "path_env": {"PYTHONPATH": str(src), "LD_LIBRARY_PATH": str(tmp_path / "opt" / "gdrcopy" / "lib")}}
    write(tmp_path / "opt" / "env.sh", "\n".join(render_lines(env)) + "\n")
    log = tmp_path / "probes.log"
    python = timing_interpreter(make_python_site(tmp_path / "venv"), log, seconds=0)
    cache = str(tmp_path / "cache")
    checked, failed = run_module(deepep_imports, {"python": python, "src_dir": str(src), "run_as": "",
                                                  "environment": process_env(env), "cache_dir": cache})
    assert not failed and checked["with_build_tree"]["importable"] is True, checked
    assert probes_overlapped(log)[0] == 1
    result, by_id = doctor(run_module, args, python=python, probe_cache_dir=cache)
    assert result["evidence"]["python"]["deep_ep"]["file"] == str(src / "deep_ep" / "__init__.py")
    assert probes_overlapped(log)[0] == 2  # the stack probe alone
