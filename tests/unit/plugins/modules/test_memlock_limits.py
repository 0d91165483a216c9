# -*- coding: utf-8 -*-
"""memlock_limits on fixture roots (a node with systemd, one without, a container). runuser, systemd-run and
systemctl are stand-ins (fixtures) that log their arguments and print what `ulimit -l` gives in each context;
the real login and service check runs on the QEMU node (molecule/lifecycle)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import memlock_limits as module

LIMITS = "/etc/security/limits.d/99-deepep-memlock.conf"
DROPIN = "/etc/systemd/system.conf.d/99-deepep-memlock.conf"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node root with systemd running, and stand-ins whose `ulimit -l` answers come from files (login, service)."""
    root = tmp_path / "root"
    (root / "run" / "systemd" / "system").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    answers = tmp_path / "answers"
    answers.mkdir()
    log = tmp_path / "calls.log"
    for name, answer in (("runuser", "login"), ("systemd-run", "service"), ("systemctl", None)):
        script = "#!/bin/sh\necho \"%s $*\" >> '%s'\n" % (name, log)
        if answer:
            script += "cat '%s'\n" % (answers / answer)
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755 | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ.get("PATH", "")))

    def answer(login="unlimited", service="unlimited"):
        (answers / "login").write_text(login + "\n")
        (answers / "service").write_text(service + "\n")
    answer()
    return {"root": root, "answer": answer, "calls": lambda: log.read_text().splitlines() if log.exists() else []}


def test_both_files_written_systemd_reexecuted_and_a_user_checked_then_nothing_to_do(run_module, node):
    result, failed = run_module(module, {"root": str(node["root"])})
    assert not failed and result["changed"] and result["reexec"], result
    assert result["written"] == [LIMITS, DROPIN]
    limits = (node["root"] / LIMITS.lstrip("/")).read_text()
    assert "*    soft    memlock    unlimited\n*    hard    memlock    unlimited\n" in limits
    assert (node["root"] / DROPIN.lstrip("/")).read_text().endswith("[Manager]\nDefaultLimitMEMLOCK=infinity\n")
    assert oct((node["root"] / LIMITS.lstrip("/")).stat().st_mode & 0o777) == "0o644"
    assert node["calls"]() == ["systemctl daemon-reexec", "runuser -l nobody -s /bin/sh -c ulimit -l",
                               "systemd-run --wait --pipe --quiet -p User=nobody /bin/sh -c ulimit -l"]
    assert result["seen"] == {"login": "unlimited", "service": "unlimited"}
    again, failed = run_module(module, {"root": str(node["root"])})
    assert not failed and not again["changed"] and not again["reexec"] and again["written"] == []


def test_a_login_without_pam_limits_fails_naming_what_it_got(run_module, node):
    node["answer"](login="8192")
    result, failed = run_module(module, {"root": str(node["root"])})
    assert failed and result["seen"] == {"login": "8192", "service": "unlimited"}
    assert "locked memory for nobody is not unlimited: login 8192" in result["msg"]
    assert "pam_limits" in result["msg"]


def test_report_only_writes_nothing_and_reports_what_users_get(run_module, node):
    node["answer"](login="8192", service="8192")
    result, failed = run_module(module, {"root": str(node["root"]), "state": "query"})
    assert not failed and not result["changed"] and result["written"] == []
    assert result["problems"] == ["login 8192", "service 8192"]
    assert not (node["root"] / LIMITS.lstrip("/")).exists()


def test_check_mode_says_what_it_would_write_and_writes_nothing(run_module, node):
    result, failed = run_module(module, {"root": str(node["root"])}, check_mode=True)
    assert not failed and result["changed"] and result["written"] == [LIMITS, DROPIN] and result["reexec"]
    assert not (node["root"] / "etc").exists() and node["calls"]() == []


def test_without_systemd_only_logins(run_module, node):
    os.rmdir(str(node["root"] / "run" / "systemd" / "system"))
    node["answer"](login="2097152")
    result, failed = run_module(module, {"root": str(node["root"]), "limit": "2097152"})
    assert not failed and result["written"] == [LIMITS] and not result["reexec"] and not result["systemd"]
    assert result["seen"] == {"login": "2097152"} and len(node["calls"]()) == 1
    assert "*    hard    memlock    2097152\n" in (node["root"] / LIMITS.lstrip("/")).read_text()


def test_a_container_is_left_to_its_runtime(run_module, node):
    (node["root"] / "run" / ".containerenv").write_text("")
    result, failed = run_module(module, {"root": str(node["root"])})
    assert not failed and result["container"] and not result["changed"] and "--ulimit memlock" in result["msg"]
    assert not (node["root"] / "etc").exists() and node["calls"]() == []


def test_a_bad_limit_is_refused_and_nothing_written(run_module, node):
    result, failed = run_module(module, {"root": str(node["root"]), "limit": "lots"})
    assert failed and "set memlock_limit to unlimited or a number of KiB" in result["msg"]
    assert not (node["root"] / "etc").exists()


@pytest.mark.parametrize("user", ["-c id", "nobody\nroot", "User=root"])
def test_a_verify_user_that_is_not_a_name_is_refused_before_anything(run_module, node, user):
    result, failed = run_module(module, {"root": str(node["root"]), "verify_user": user})
    assert failed and "set memlock_verify_user to one" in result["msg"]
    assert not (node["root"] / "etc").exists() and node["calls"]() == []
