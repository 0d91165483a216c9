# -*- coding: utf-8 -*-
"""deepep_bench against the stand-in DeepEP tree (tests/fixtures/deepep_src) printing recorded output."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pwd
import stat
import time

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import deepep_bench as module
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import BUILD_USER, open_to_others

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(FIXTURES, "deepep_src"), str(src))
    shutil.copytree(os.path.join(FIXTURES, "deepep_v2_src", "tests", "elastic"), str(src / "tests" / "elastic"))
    (src / "deep_ep_cpp.py").write_text("")
    return src


def bench(run_module, tree, tmp_path, check_mode=False, **extra):
    args = dict(python=sys.executable, deepep_dir=str(tree), test="intranode", num_processes=2,
                environment={"DEEPEP_FIXTURE_OUTPUT": os.path.abspath(os.path.join(FIXTURES, "deepep_output")),
                             "PYTHONPATH": str(tree)},
                log=str(tmp_path / "logs" / "test.log"), report=str(tmp_path / "report.json"))
    args.update(extra)
    return run_module(module, args, check_mode=check_mode)


def test_intranode_passes_and_writes_the_report(run_module, tree, tmp_path):
    result, failed = bench(run_module, tree, tmp_path, thresholds={"dispatch_fp8": 246, "combine_bf16": 280})
    assert not failed, result
    assert result["passed"] is True and result["rc"] == 0 and result["changed"] is False
    assert result["result"]["checks_passed"] == 24
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["result"]["best"]["dispatch_bf16"]["gbps"] == 339.06
    assert "[tuning] Best combine" in (tmp_path / "logs" / "test.log").read_text()


def test_low_latency_needs_every_rank(run_module, tree, tmp_path):
    result, failed = bench(run_module, tree, tmp_path, test="low_latency", num_processes=4)
    assert failed and "2 of 4 ranks reported bandwidth" in result["msg"]
    result, failed = bench(run_module, tree, tmp_path, test="low_latency", thresholds={"combine": 358})
    assert not failed and result["result"]["summary"]["min_combine_gbps"] == 358.6


def test_under_threshold_fails_naming_it(run_module, tree, tmp_path):
    result, failed = bench(run_module, tree, tmp_path, thresholds={"dispatch_fp8": 247})
    assert failed and result["below_thresholds"] == ["dispatch_fp8 246.63 < 247 GB/s"]
    assert json.loads((tmp_path / "report.json").read_text())["passed"] is False


def test_a_hang_is_killed_and_fails(run_module, tree, tmp_path):
    hang = "import time\nprint('[config] started', flush=True)\ntime.sleep(60)\n"
    (tree / "tests" / "test_intranode.py").write_text(hang)
    result, failed = bench(run_module, tree, tmp_path, timeout=2)
    assert failed and result["rc"] == -9 and "killed after 2s" in result["msg"]


def test_failing_test_fails(run_module, tree, tmp_path):
    (tree / "deep_ep_cpp.py").unlink()
    result, failed = bench(run_module, tree, tmp_path)
    assert failed and "exit status 1" in result["msg"] and "0/0 checks passed" in result["msg"]
    assert "deep_ep_cpp" in result["log_tail"]


def test_check_mode_runs_nothing(run_module, tree, tmp_path):
    result, failed = bench(run_module, tree / "missing", tmp_path, check_mode=True)
    assert not failed and "rc" not in result and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("extra, message", [
    ({"thresholds": {"dispatch": 1}}, "thresholds: dispatch not known for intranode"),
    ({"num_processes": 0}, "num_processes: 0"),
    ({"deepep_dir": "/nonexistent"}, "point deepep_dir at a DeepEP V1 source tree"),
])
def test_bad_input(run_module, tree, tmp_path, extra, message):
    result, failed = bench(run_module, tree, tmp_path, **extra)
    assert failed and message in result["msg"]


def test_search_paths_are_prepended_to_the_nodes_own(run_module, tree, tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/lib64")
    dump = tmp_path / "env.txt"
    environment = {"DEEPEP_FIXTURE_OUTPUT": os.path.abspath(os.path.join(FIXTURES, "deepep_output")),
                   "PYTHONPATH": str(tree), "LD_LIBRARY_PATH": "/opt/deepep/gdrcopy/current/lib",
                   "DEEPEP_FIXTURE_ENV_DUMP": str(dump)}
    result, failed = bench(run_module, tree, tmp_path, environment=environment)
    assert not failed, result
    assert dump.read_text() == "/opt/deepep/gdrcopy/current/lib:/usr/local/cuda/lib64"


def test_env_script_is_applied_and_environment_wins(run_module, tree, tmp_path):
    script = tmp_path / "env.sh"
    script.write_text("export PYTHONPATH='%s'\nexport DEEPEP_FIXTURE_OUTPUT='/nowhere'\n"
                      "export DEEPEP_FIXTURE_ENV_DUMP='%s'\n" % (tree, tmp_path / "dump"))
    result, failed = bench(run_module, tree, tmp_path, env_script=str(script), environment={
        "DEEPEP_FIXTURE_OUTPUT": os.path.abspath(os.path.join(FIXTURES, "deepep_output"))})
    assert not failed, result
    assert (tmp_path / "dump").exists()  # only the env script set DEEPEP_FIXTURE_ENV_DUMP
    result, failed = bench(run_module, tree, tmp_path, env_script=str(tmp_path / "missing.sh"))
    assert failed and result["msg"].startswith("env_script: %s not found" % (tmp_path / "missing.sh"))


def test_internode_needs_the_rendezvous_and_every_check(run_module, tree, tmp_path):
    sysfs = tmp_path / "sys"
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0",
           "DEEPEP_FIXTURE_SYSFS": str(sysfs), "PYTHONPATH": str(tree),
           "DEEPEP_FIXTURE_OUTPUT": os.path.abspath(os.path.join(FIXTURES, "deepep_output"))}
    result, failed = bench(run_module, tree, tmp_path, test="internode", num_processes=8, environment=env,
                           thresholds={"dispatch_bf16": 45})
    assert not failed, result
    assert result["result"]["checks_passed"] == 32 and result["result"]["best"]["dispatch_bf16"]["gbps"] == 45.4
    # Without a rendezvous the stand-in fails like torch.distributed would: no checks, a failure.
    del env["RANK"]
    result, failed = bench(run_module, tree, tmp_path, test="internode", num_processes=8, environment=env)
    assert failed and "exit status 1" in result["msg"] and "0/0 checks passed" in result["msg"]


def test_a_pass_for_the_same_build_is_not_run_again(run_module, tree, tmp_path):
    first, failed = bench(run_module, tree, tmp_path, verified_for="fp1", thresholds={"dispatch_fp8": 240})
    assert not failed and first["reused"] is False and first["passed"] is True
    # The test would now fail: a reused answer proves nothing ran.
    (tree / "deep_ep_cpp.py").unlink()
    again, failed = bench(run_module, tree, tmp_path, verified_for="fp1", thresholds={"dispatch_fp8": 240})
    assert not failed and again["reused"] is True and again["passed"] is True, again
    assert again["result"] == first["result"] and "not run again" in again["msg"]
    # Another build, other thresholds, or rerun: it runs (and fails here).
    for extra in ({"verified_for": "fp2"}, {"verified_for": "fp1", "thresholds": {"dispatch_fp8": 200}},
                  {"verified_for": "fp1", "thresholds": {"dispatch_fp8": 240}, "rerun": True}):
        result, failed = bench(run_module, tree, tmp_path, **extra)
        assert failed and result["reused"] is False and "exit status 1" in result["msg"], extra


def test_a_failed_report_is_never_reused(run_module, tree, tmp_path):
    result, failed = bench(run_module, tree, tmp_path, verified_for="fp1", thresholds={"dispatch_fp8": 999})
    assert failed
    result, failed = bench(run_module, tree, tmp_path, verified_for="fp1", thresholds={"dispatch_fp8": 999})
    assert failed and result["reused"] is False


# V2: the recorded output of tests/elastic/ on 1 x H100 (docs/results/deepep-v2-probe-h100, run 6).

def test_elastic_ep_parses_every_kind_and_judges_scale_up(run_module, tree, tmp_path):
    jit = {"EP_JIT_CACHE_DIR": str(tmp_path / "jit")}
    result, failed = bench(run_module, tree, tmp_path, test="elastic_ep", num_processes=1,
                           extra_args=["--test-first-only"], environment=dict(_env(tree), **jit),
                           thresholds={"dispatch_su": 1100, "combine_su": 1200})
    assert not failed, result
    summary = result["result"]["summary"]
    assert summary["min_dispatch_su_gbps"] == 1120.0 and summary["max_dispatch_us"] == 27.309
    assert summary["min_reduced_combine_su_gbps"] == 385.0 and summary["min_combine_so_gbps"] == 0.0
    assert result["result"]["cases"][0].startswith("do_handle_copy=1, expert_alignment=128, use_fp8_dispatch=1")
    assert result["command"][-1] == "--test-first-only"
    slow, failed = bench(run_module, tree, tmp_path, test="elastic_ep", num_processes=1,
                         environment=dict(_env(tree), **jit), thresholds={"combine_su": 1300})
    assert failed and slow["below_thresholds"] == ["combine_su on the slowest rank 1270.0 < 1300 GB/s"]
    # Two ranks on this GPU-less fixture need Gin off (EP_DISABLE_GIN, as the env script sets it without RDMA NICs);
    # the recorded output then has one rank's lines for two processes.
    gin_on, failed = bench(run_module, tree, tmp_path, test="elastic_ep", num_processes=2,
                           environment=dict(_env(tree), **jit))
    assert failed and "0 of 2 ranks reported results" in gin_on["msg"] and "NCCL GIN is unavailable" in gin_on["log_tail"]
    two, failed = bench(run_module, tree, tmp_path, test="elastic_ep", num_processes=2,
                        environment=dict(_env(tree), EP_DISABLE_GIN="1", **jit))
    assert failed and "1 of 2 ranks reported results" in two["msg"]
    bad, failed = bench(run_module, tree, tmp_path, test="elastic_ep", num_processes=1,
                        environment=dict(_env(tree), **jit), thresholds={"dispatch_fp8": 1})
    assert failed and "thresholds: dispatch_fp8 not known for elastic_ep" in bad["msg"]


def test_elastic_barrier_reports_each_rank(run_module, tree, tmp_path):
    result, failed = bench(run_module, tree, tmp_path, test="elastic_barrier", num_processes=1,
                           environment=dict(_env(tree), EP_JIT_CACHE_DIR=str(tmp_path / "jit")))
    assert not failed, result
    assert result["result"]["summary"]["max_barrier_us"] == 1.931
    nojit, failed = bench(run_module, tree, tmp_path, test="elastic_barrier", num_processes=1, environment=_env(tree))
    assert failed and "exit status 1" in nojit["msg"]


def _env(tree):
    return {"DEEPEP_FIXTURE_OUTPUT": os.path.abspath(os.path.join(FIXTURES, "deepep_output")), "PYTHONPATH": str(tree)}


def test_jit_warmup_fills_the_cache_and_the_tests_then_compile_nothing(run_module, tree, tmp_path):
    cache = str(tmp_path / "jit")
    env = dict(_env(tree), EP_JIT_CACHE_DIR=cache)
    warm, failed = bench(run_module, tree, tmp_path, test="jit_warmup", num_processes=1, environment=env,
                         extra_args=["--skip-check", "--skip-perf-test"], jit_cache_dir=cache,
                         report=str(tmp_path / "warmup.json"), verified_for="build-1")
    assert not failed, warm
    assert warm["jit"]["kernels_before"] == 0 and warm["jit"]["compiled"] == 10 == warm["jit"]["kernels"]
    assert warm["jit"]["bytes"] > 0 and warm["jit"]["corrupted"] == []
    assert "10 kernels compiled (10 in the JIT cache" in warm["msg"]
    assert warm["result"]["cases"] and warm["result"]["results"] == []  # no timing in a warm-up
    first, failed = bench(run_module, tree, tmp_path, test="elastic_ep", num_processes=1, environment=env,
                          extra_args=["--test-first-only"], jit_cache_dir=cache)
    assert not failed and first["jit"]["compiled"] == 0 and first["jit"]["kernels"] == 10
    # An unchanged warm-up is not run again while its kernels are there; an emptied cache is warmed again.
    again, failed = bench(run_module, tree, tmp_path, test="jit_warmup", num_processes=1, environment=env,
                          extra_args=["--skip-check", "--skip-perf-test"], jit_cache_dir=cache,
                          report=str(tmp_path / "warmup.json"), verified_for="build-1")
    assert not failed and again["reused"] is True
    shutil.rmtree(os.path.join(cache, "cache"))
    rewarm, failed = bench(run_module, tree, tmp_path, test="jit_warmup", num_processes=1, environment=env,
                           extra_args=["--skip-check", "--skip-perf-test"], jit_cache_dir=cache,
                           report=str(tmp_path / "warmup.json"), verified_for="build-1")
    assert not failed and rewarm["reused"] is False and rewarm["jit"]["compiled"] == 10


def test_jit_warmup_fails_when_nothing_lands_in_its_cache_or_a_kernel_is_corrupted(run_module, tree, tmp_path):
    env = dict(_env(tree), EP_JIT_CACHE_DIR=str(tmp_path / "elsewhere"))
    wrong, failed = bench(run_module, tree, tmp_path, test="jit_warmup", num_processes=1, environment=env,
                          jit_cache_dir=str(tmp_path / "jit"))
    assert failed and "the warm-up left no kernel in %s/cache" % (tmp_path / "jit") in wrong["msg"]
    broken = tmp_path / "elsewhere" / "cache" / "kernel.combine.0123"
    broken.mkdir(parents=True)
    (broken / "kernel.cu").write_text("half-written\n")
    corrupt, failed = bench(run_module, tree, tmp_path, test="elastic_barrier", num_processes=1, environment=env,
                            jit_cache_dir=str(tmp_path / "elsewhere"))
    assert failed and "1 corrupted kernel directories in the JIT cache" in corrupt["msg"]
    missing, failed = bench(run_module, tree, tmp_path, test="jit_warmup", num_processes=1, environment=env)
    assert failed and missing["msg"].startswith("jit_cache_dir: required for test=jit_warmup")


SYSTEM_PYTHON = "/usr/bin/python3"  # one the build user may run (pytest's may live under root's 0700 home)
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                                reason="runs the test as another user: needs root and %s" % SYSTEM_PYTHON)


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _alive_as(pid, uid):
    """Whether pid is a live process of uid (one that exits while it is looked at is not: other processes of a busy
    machine come and go)."""
    try:
        return _alive(pid) and os.stat("/proc/%d" % pid).st_uid == uid
    except OSError:
        return False


@needs_root
def test_a_hostile_test_runs_unprivileged_and_leaves_root_nothing(run_module, tree, tmp_path):
    """The build's test (here V2's warm-up) runs as the build user: it cannot read a root-only file, what it leaves
    running is ended, and the JIT cache it wrote is root's again with no world-writable or setuid file, its link
    not followed."""
    open_to_others(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    os.chmod(str(secret), 0o600)
    cache = tmp_path / "jit"
    for name in ("cache", "tmp"):
        (cache / name).mkdir(parents=True, mode=0o755)
    env = dict(_env(tree), EP_JIT_CACHE_DIR=str(cache), DEEPEP_FIXTURE_HOSTILE=str(secret))
    before = set(int(pid) for pid in os.listdir("/proc") if pid.isdigit())
    result, failed = bench(run_module, tree, tmp_path, python=SYSTEM_PYTHON, test="jit_warmup", num_processes=1,
                           environment=env, extra_args=["--skip-check", "--skip-perf-test"],
                           jit_cache_dir=str(cache), run_as=BUILD_USER)
    assert not failed, result
    log = (tmp_path / "logs" / "test.log").read_text()
    assert "fixture: uid=%d" % pwd.getpwnam(BUILD_USER).pw_uid in log
    assert "cannot read the secret: Permission denied" in log and "root only" not in log
    time.sleep(0.2)
    sleepers = [pid for pid in set(int(p) for p in os.listdir("/proc") if p.isdigit()) - before
                if _alive_as(pid, pwd.getpwnam(BUILD_USER).pw_uid)]
    assert sleepers == []
    assert result["jit"]["compiled"] == 10
    for top, dirs, files in os.walk(str(cache)):
        for name in dirs + files:
            info = os.lstat(os.path.join(top, name))
            assert info.st_uid == 0, os.path.join(top, name)
            if not stat.S_ISLNK(info.st_mode):
                assert not info.st_mode & (stat.S_IWOTH | stat.S_IWGRP | stat.S_ISUID), os.path.join(top, name)
    assert os.stat(str(secret)).st_uid == 0 and stat.S_IMODE(os.stat(str(secret)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(cache / "cache")).st_mode) == 0o755


@needs_root
def test_a_group_jit_cache_stays_the_groups_after_an_unprivileged_run(run_module, tree, tmp_path):
    open_to_others(tmp_path)
    cache = tmp_path / "jit"
    for name in ("cache", "tmp"):
        (cache / name).mkdir(parents=True)
        os.chown(str(cache / name), 0, 100)
        os.chmod(str(cache / name), 0o2775)
    env = dict(_env(tree), EP_JIT_CACHE_DIR=str(cache))
    result, failed = bench(run_module, tree, tmp_path, python=SYSTEM_PYTHON, test="jit_warmup", num_processes=1,
                           environment=env, extra_args=["--skip-check", "--skip-perf-test"],
                           jit_cache_dir=str(cache), run_as=BUILD_USER)
    assert not failed, result
    for name in ("cache", "tmp"):
        info = os.stat(str(cache / name))
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 100, 0o2775)
    kernels = [os.path.join(str(cache / "cache"), name) for name in os.listdir(str(cache / "cache"))]
    assert kernels and all(os.stat(path).st_uid == 0 for path in kernels)


def test_a_missing_test_user_is_refused_before_anything_runs(run_module, tree, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the user is looked up only as root")
    result, failed = bench(run_module, tree, tmp_path, run_as="no-such-user-here")
    assert failed and result["msg"].startswith("run_as: there is no user no-such-user-here on this node")
    assert not (tmp_path / "logs" / "test.log").exists()
