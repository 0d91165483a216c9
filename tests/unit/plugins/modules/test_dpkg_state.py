# -*- coding: utf-8 -*-
"""dpkg_state on a dpkg root made by the real dpkg (tests/fixtures/dpkg_root.py): an install whose maintainer script
failed, and one a killed run interrupted."""
from __future__ import annotations

import shutil

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import dpkg_state as module
from ansible_collections.moe_infra.deepep.tests.fixtures.dpkg_root import PACKAGE, make_broken_dpkg_root

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg and dpkg-deb (Debian, Ubuntu)")


def test_a_healthy_dpkg_is_left_alone(run_module, tmp_path):
    root = tmp_path / "root"
    (root / "var" / "lib" / "dpkg" / "updates").mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").write_text("")
    result, failed = run_module(module, {"root": str(root)})
    assert not failed and not result["changed"] and result["healthy"] and result["repairs"] == []
    assert result["ansible_facts"] == {"deepep_dpkg_healthy": True}


def test_a_failing_maintainer_script_is_named_with_its_output_then_repaired(run_module, tmp_path):
    root = make_broken_dpkg_root(tmp_path)
    query, failed = run_module(module, {"root": str(root), "state": "query"})
    assert not failed and not query["healthy"] and query["packages"] == [PACKAGE] and not query["interrupted"]
    assert "only half configured" in query["audit"]
    predicted, failed = run_module(module, {"root": str(root)}, check_mode=True)
    assert not failed and predicted["changed"] and predicted["repairs"] == ["dpkg --configure -a"]
    result, failed = run_module(module, {"root": str(root)})
    assert failed and result["failed_packages"] == [PACKAGE], result
    assert ("dpkg was left half-done by packages left half-done (%s); dpkg --configure -a failed: package %s: "
            "installed %s package post-installation script subprocess returned error exit status 1" % (
                PACKAGE, PACKAGE, PACKAGE)) in result["msg"], result["msg"]
    assert "Your kernel headers for kernel 6.8.0-1015-gcp cannot be found." in result["msg"]
    assert "run 'dpkg --configure -a' on the node, then run the play again" in result["msg"]
    (root / "ok").write_text("")  # the cause fixed
    result, failed = run_module(module, {"root": str(root)})
    assert not failed and result["changed"] and result["healthy"], result
    assert result["msg"].startswith("repaired packages left half-done (%s) with dpkg --configure -a" % PACKAGE)
    again, failed = run_module(module, {"root": str(root)})
    assert not failed and not again["changed"]


def test_an_interrupted_run_is_repaired(run_module, tmp_path):
    root = make_broken_dpkg_root(tmp_path, interrupted=True)
    (root / "ok").write_text("")
    result, failed = run_module(module, {"root": str(root)})
    assert not failed and result["interrupted"] and result["healthy"], result
    assert result["msg"].startswith("repaired an interrupted dpkg run with dpkg --configure -a")
    assert list((root / "var" / "lib" / "dpkg" / "updates").iterdir()) == []


def test_explain_names_the_failing_script_in_an_apt_output(run_module, tmp_path):
    root = tmp_path / "root"
    (root / "var" / "lib" / "dpkg" / "updates").mkdir(parents=True)
    output = ("Setting up mlnx-ofed-kernel-dkms (25.01) ...\nBuilding initial module for 6.8.0-1015-gcp\n"
              "Error! Bad return status for module build on kernel: 6.8.0-1015-gcp (x86_64)\n"
              "dpkg: error processing package mlnx-ofed-kernel-dkms (--configure):\n installed mlnx-ofed-kernel-dkms "
              "package post-installation script subprocess returned error exit status 10\nErrors were encountered "
              "while processing:\n mlnx-ofed-kernel-dkms\nE: Sub-process /usr/bin/dpkg returned an error code (1)\n")
    result, failed = run_module(module, {"root": str(root), "state": "query", "explain": output})
    assert not failed and result["script_failures"] == [{
        "package": "mlnx-ofed-kernel-dkms",
        "reason": "installed mlnx-ofed-kernel-dkms package post-installation script subprocess returned error exit "
                  "status 10",
        "output": "Building initial module for 6.8.0-1015-gcp\nError! Bad return status for module build on kernel: "
                  "6.8.0-1015-gcp (x86_64)"}]


def test_failed_step_fails_with_one_message_naming_the_script_and_the_next_step(run_module, tmp_path):
    root = make_broken_dpkg_root(tmp_path)
    # An apt task's failed result as the rescue gets it: dpkg's output in stdout.
    apt_result = dict(msg="'/usr/bin/apt-get -y install nvidia-open-580' failed: E: Sub-process /usr/bin/dpkg returned "
                          "an error code (1)", stdout=(tmp_path / "dpkg-install.log").read_text(), stderr="", rc=100)
    result, failed = run_module(module, {"root": str(root), "state": "query", "failed_result": apt_result,
                                         "failed_step": "nvidia_driver: installing nvidia-open-580"})
    assert failed and not result["changed"] and result["script_failures"][0]["package"] == PACKAGE, result
    assert result["msg"].startswith(
        "nvidia_driver: installing nvidia-open-580 failed: package %s: installed %s package post-installation script "
        "subprocess returned error exit status 1; its output ends: " % (PACKAGE, PACKAGE)), result["msg"]
    assert "Error! Your kernel headers for kernel 6.8.0-1015-gcp cannot be found." in result["msg"]
    assert result["msg"].endswith("dpkg is left half-done (%s): the next run repairs it first (dpkg --configure -a). "
                                  "Fix the cause, then run the play again." % PACKAGE)

    # No script failed (a package apt cannot find): apt's last lines, and dpkg as it is.
    healthy = tmp_path / "healthy"
    (healthy / "var" / "lib" / "dpkg" / "updates").mkdir(parents=True)
    (healthy / "var" / "lib" / "dpkg" / "status").write_text("")
    result, failed = run_module(module, {"root": str(healthy), "explain": "No package matching 'cuda-toolkit-12-9' is "
                                         "available\n", "failed_step": "cuda: installing cuda-toolkit-12-9"})
    assert failed and result["msg"] == ("cuda: installing cuda-toolkit-12-9 failed: No package matching "
                                        "'cuda-toolkit-12-9' is available. Fix the cause, then run the play again.")
    assert result["repairs"] == [] and not result["changed"]
