# -*- coding: utf-8 -*-
"""The report filters on results shaped like the registered deepep_bench loop and build_fanout's result."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter.report import (
    deepep_controller_path,
    deepep_result,
    deepep_rollback_message,
    deepep_build_outcome,
    deepep_site_summaries,
    deepep_summary_lines,
    deepep_test_runs,
)
from ansible_collections.moe_infra.deepep.tests.unit.plugins.module_utils.test_cluster_report import site_summary


def test_build_outcome_keeps_the_summary_fields():
    result = {"changed": True, "action": "build", "fingerprint": "ab" * 8, "reason": "first build",
              "build_seconds": 3.2, "install_dir": "/opt/x", "inputs": {"gcc": "12"}}
    assert deepep_build_outcome(result) == {"action": "build", "changed": True, "fingerprint": "ab" * 8,
                                            "reason": "first build", "build_seconds": 3.2}
    assert deepep_build_outcome(None) is None and deepep_build_outcome({"skipped": True}) is None
    with pytest.raises(AnsibleFilterError, match="expected a build result"):
        deepep_build_outcome("build")


def test_test_runs_name_each_test_and_skip_what_did_not_run():
    registered = {"results": [
        {"item": {"test": "intranode", "thresholds": {"dispatch_fp8": 240}}, "passed": True, "reused": True,
         "seconds": 0.0, "below_thresholds": [], "result": {"checks": 24}},
        {"item": {"test": "low_latency", "thresholds": {}}, "skipped": True}]}
    assert deepep_test_runs(registered) == [{"test": "intranode", "thresholds": {"dispatch_fp8": 240}, "passed": True,
                                             "reused": True, "seconds": 0.0, "below_thresholds": [],
                                             "result": {"checks": 24}, "jit": None}]
    assert deepep_test_runs(None) == []


def test_result_records_what_the_role_registered():
    build = {"changed": False, "fingerprint": "cd" * 8, "reason": "up to date", "build_seconds": None}
    tests = {"results": [
        {"item": {"test": "jit_warmup", "thresholds": {}}, "passed": True, "reused": False, "seconds": 41.5,
         "result": {"cases": 6}, "jit": {"kernels": 12}},
        {"item": {"test": "elastic_ep", "thresholds": {}}, "skipped": True}]}
    record = deepep_result(build, "v2", "/opt/deepep/env.sh", {"wheel": "/opt/deepep/w.whl", "site_dir": "/v/site"},
                           {"ibgda": {"NVSHMEM_IB_ENABLE_IBGDA": "1"}}, tests)
    assert record == {"version": "v2", "fingerprint": "cd" * 8, "build": "up to date", "build_seconds": None,
                      "env_script": "/opt/deepep/env.sh", "wheel": "/opt/deepep/w.whl", "wheel_site_dir": "/v/site",
                      "ibgda_env": {"NVSHMEM_IB_ENABLE_IBGDA": "1"}, "tests": [{"cases": 6}],
                      "verification": deepep_test_runs(tests)}
    # A run that built nothing (--tags deepep_env, or the build skipped): the record says so.
    bare = deepep_result(None, "v1", "/opt/deepep/env.sh")
    assert (bare["build"], bare["fingerprint"], bare["wheel"], bare["tests"], bare["verification"]) == (
        "not run", None, None, [], [])
    with pytest.raises(AnsibleFilterError, match="wheel: expected a registered result"):
        deepep_result(build, "v2", "/opt/deepep/env.sh", wheel="/opt/deepep/w.whl")


def test_summary_lines_one_per_layer_then_the_problems():
    lines = deepep_summary_lines(site_summary())
    assert lines[0] == "DOCA-OFED    ok       installed"
    assert lines[4] == "NVSHMEM      changed  3.5.19  (a8b94fe4ab82253b; first build)"
    assert lines[5] == "NCCL         skipped  not run  (DeepEP V2 only)"
    assert lines[9].startswith("problem KF12 cannot find -lcuda: no libcuda.so") and "-> fix: link libcuda.so.1" in lines[9]
    assert len(lines) == 11


def test_the_nccl_row_says_what_the_layer_did():
    summary = site_summary()
    summary["layers"]["nccl"] = {"method": "source", "version": "2.30.7", "changed": True, "build": {
        "action": "build", "changed": True, "fingerprint": "82de40052969ed16", "reason": "no previous build",
        "build_seconds": 232.9}}
    assert deepep_summary_lines(summary)[5] == (
        "NCCL         changed  2.30.7  (82de40052969ed16; no previous build; put where torch loads NCCL)")
    summary["layers"]["nccl"] = {"method": "wheel", "version": "2.30.7", "changed": False, "build": None}
    assert deepep_summary_lines(summary)[5] == "NCCL         ok       2.30.7  (wheel)"


def test_site_summaries_read_what_the_layers_set_on_each_host():
    finding = {"id": "KF12", "status": "problem", "title": "cannot find -lcuda", "evidence": "no libcuda.so",
               "fix": "link libcuda.so.1"}
    hostvars = {
        # A node every layer ran on (what the roles set with set_fact or register).
        "n1": {"deepep_reboot_pending": False, "deepep_reboot_reasons": {"doca_ofed": "", "nvidia_peermapping": "regkey"},
               "cuda_release": "13.0", "cuda_home": "/usr/local/cuda", "nvidia_peermapping_state": "live",
               "nvidia_peermapping_required": True, "doca_ofed_installed": True, "gdrcopy_root": "/opt/deepep/gdrcopy",
               "gdrcopy_build": {"action": "none", "changed": False, "fingerprint": "dcf8", "reason": "up to date",
                                 "build_seconds": None, "install_dir": "/opt/deepep/gdrcopy/builds/dcf8"},
               "nvshmem_ibgda_version": "3.4.5", "nvshmem_ibgda_root": "/venv/nvidia/nvshmem",
               "nvshmem_ibgda_build": {"skipped": True}, "deepep_result": {"version": "v1", "fingerprint": "b150"},
               "doctor_report": {"summary": {"ok": 30, "problem": 1}, "findings": [
                   finding, {"id": "KF01", "status": "ok"}]}},
        # A node that stopped before the layers (nothing set but the doctor's verdict).
        "n2": {"doctor_report": {"summary": {"ok": 31, "problem": 0}, "findings": []}},
    }
    summaries = deepep_site_summaries(hostvars, ["n1", "n2"])
    assert list(summaries) == ["n1", "n2"]
    n1 = summaries["n1"]
    assert (n1["host"], n1["reboot_pending"], n1["reboot_reasons"], n1["rebooted"]) == ("n1", False,
                                                                                        ["nvidia_peermapping"], False)
    assert (n1["cuda"], n1["peermapping"], n1["gdrcopy"], n1["nvshmem"], n1["nvshmem_root"]) == (
        "13.0", "live", "/opt/deepep/gdrcopy", "3.4.5", "/venv/nvidia/nvshmem")
    assert n1["deepep"] == {"version": "v1", "fingerprint": "b150"}
    assert n1["doctor"] == {"ok": 30, "problem": 1} and n1["problems"] == [finding]
    assert n1["layers"] == {
        "doca_ofed": {"installed": True}, "cuda": {"home": "/usr/local/cuda"},
        "nvidia_peermapping": {"required": True},
        "gdrcopy": {"action": "none", "changed": False, "fingerprint": "dcf8", "reason": "up to date",
                    "build_seconds": None},
        "nvshmem_ibgda": {"method": "wheel", "build": None},
        "nccl": {"method": None, "version": None, "changed": False, "build": None}}
    n2 = summaries["n2"]
    assert (n2["reboot_pending"], n2["reboot_reasons"], n2["deepep"], n2["problems"]) == (False, [], None, [])
    # The printed lines are made from the same record.
    assert deepep_summary_lines(n1)[-1].startswith("problem KF12 cannot find -lcuda: no libcuda.so")
    with pytest.raises(AnsibleFilterError, match="^_deepep_site_summaries: expected"):
        deepep_site_summaries(hostvars, "n1")


def test_controller_path_is_taken_from_where_the_run_started(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert deepep_controller_path("deepep-report") == str(tmp_path / "deepep-report")
    assert deepep_controller_path("/srv/reports/../r") == "/srv/r"
    with pytest.raises(AnsibleFilterError, match="expected a path"):
        deepep_controller_path("")


# The rollback's registered results as source_build, python_wheel and the nccl role's restore leave them.
ROLLBACK = {"changed": True, "reason": "rolled back from %s: current points at the previous build %s again" % (
    "ab" * 8, "cd" * 8), "rolled_back_to": "cd" * 8, "uncached": None}
WHEEL_BACK = {"changed": True, "reason": "installed: 3 of 8 files differ or are missing (first deep_ep/__init__.py)"}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def test_rollback_message_says_what_failed_then_what_is_live():
    message = deepep_rollback_message(
        "DeepEP elastic_ep test failed: exit status 1", True, "ab" * 8, "/opt/deepep/env.sh",
        {"/opt/deepep/env.sh": {"sha256": "00" * 32}}, ROLLBACK, [WHEEL_BACK, SKIPPED],
        {"method": "restore", "updated": True, "version": "2.28.9", "error": None})
    assert message == (
        "DeepEP elastic_ep test failed: exit status 1. The new build is not live: rolled back from %s: current "
        "points at the previous build %s again; the wheel: installed: 3 of 8 files differ or are missing (first "
        "deep_ep/__init__.py); torch's own NCCL files are back (NCCL 2.28.9) in place of the nccl layer's; the env "
        "script was not changed (/opt/deepep/env.sh). Fix the cause and run again: the build is made anew and tested "
        "before it stays." % ("ab" * 8, "cd" * 8))


def test_rollback_message_of_a_first_build_names_the_cache_entry_and_the_missing_env_script():
    rollback = dict(ROLLBACK, reason="rolled back from %s: current removed (nothing was installed before)" % (
        "ab" * 8), rolled_back_to=None, uncached="/tmp/deepep-cache/deepep-%s.tar.gz" % ("ab" * 8))
    message = deepep_rollback_message(
        "DeepEP intranode test failed: dispatch_fp8 248.97 < 100000 GB/s", "True", "ab" * 8, "/opt/deepep/env.sh",
        {"/opt/deepep/env.sh": None}, rollback, [SKIPPED, {"reason": "removed deep_ep-1.2.1.dist-info (15 files)"}],
        None)
    assert message == (
        "DeepEP intranode test failed: dispatch_fp8 248.97 < 100000 GB/s. The new build is not live: rolled back "
        "from %s: current removed (nothing was installed before); removed from the controller cache: "
        "/tmp/deepep-cache/deepep-%s.tar.gz; the wheel: removed deep_ep-1.2.1.dist-info (15 files); no env script "
        "was written (/opt/deepep/env.sh). Fix the cause and run again: the build is made anew and tested before it "
        "stays." % ("ab" * 8, "ab" * 8))


def test_rollback_message_names_an_nccl_restore_that_failed_and_leaves_out_one_that_changed_nothing():
    failed = {"method": "restore", "updated": False, "version": "2.30.7",
              "error": "torch's NCCL wheel stays at 2.30.7: pip could not install nvidia-nccl-cu13==2.28.9"}
    message = deepep_rollback_message("x failed", True, "ab" * 8, "/e.sh", {}, ROLLBACK, [], failed)
    assert "; torch's NCCL wheel stays at 2.30.7: pip could not install nvidia-nccl-cu13==2.28.9; the env script " \
           "was not changed (/e.sh)." in message and "files are back" not in message
    # The wheel method's restore says what pip installed again, not that files came back.
    wheel = deepep_rollback_message("x failed", True, "ab" * 8, "/e.sh", {}, ROLLBACK, [],
                                    {"method": "restore", "updated": True, "version": "2.28.9", "error": None,
                                     "reinstalled": "nvidia-nccl-cu13==2.28.9"})
    assert "; torch's own NCCL wheel is back (pip installed nvidia-nccl-cu13==2.28.9 again; NCCL 2.28.9); the " \
           "env script was not changed (/e.sh)." in wheel and "files are back" not in wheel
    # The nccl layer's own result from earlier in the play (not a restore) says nothing here.
    unchanged = deepep_rollback_message("x failed", True, "ab" * 8, "/e.sh", {}, ROLLBACK, [],
                                        {"method": "wheel", "updated": True, "version": "2.30.7"})
    assert "NCCL" not in unchanged


def test_rollback_message_of_a_build_live_before_the_run_says_it_stays():
    assert deepep_rollback_message("DeepEP low_latency test failed", False, "ab" * 8, "/e.sh", {}, SKIPPED,
                                   [SKIPPED, SKIPPED], None) == (
        "DeepEP low_latency test failed. This build (%s) was live before this run and stays as it is. Fix the cause "
        "and run again (deepep_verify_rerun=true runs the tests again)." % ("ab" * 8))
    assert "This build (?) was live" in deepep_rollback_message("x", "False", None, "/e.sh", {})


@pytest.mark.parametrize("args, match", [
    (("", True, "f", "/e.sh", {}), "expected what failed"),
    (("x", True, "f", "/e.sh", None), "digests: expected"),
    (("x", True, "f", "/e.sh", {}, "rolled back"), "rollback: expected a registered result"),
    (("x", True, "f", "/e.sh", {}, ROLLBACK, ["wheel"]), r"wheels\[0\]: expected a registered result"),
    (("x", "maybe", "f", "/e.sh", {}), "maybe"),
])
def test_rollback_message_rejects_what_is_not_a_registered_result(args, match):
    with pytest.raises((AnsibleFilterError, TypeError), match=match):
        deepep_rollback_message(*args)
