# -*- coding: utf-8 -*-
"""Commands run as the unprivileged build user side by side (start_as): ending what one left behind never touches
another that still runs."""
from __future__ import annotations

import os
import pwd

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import start_as
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import BUILD_USER
from ansible_collections.moe_infra.deepep.tests.fixtures.processes import alive_with


@pytest.mark.skipif(os.geteuid() != 0, reason="runs commands as another user: needs root")
def test_one_command_finished_ends_its_leftovers_not_the_other_command(tmp_path):
    account = pwd.getpwnam(BUILD_USER)
    leftover = "sleep 37.%d" % os.getpid()  # a command line no other process has
    slow = start_as(account, ["/bin/sh", "-c", "sleep 1.5; id -u; echo slow done"], "/", {})
    quick = start_as(account, ["/bin/sh", "-c", "(%s &); echo quick done" % leftover], "/", {})
    assert quick.finish() == (0, "quick done\n", "")
    assert alive_with(leftover) == []  # what the quick one left was ended when it finished
    assert slow.finish() == (0, "%d\nslow done\n" % account.pw_uid, "")  # the other one ran on to its end


@pytest.mark.skipif(os.geteuid() != 0, reason="runs commands as another user: needs root")
def test_a_command_that_cannot_start_answers_126(tmp_path):
    account = pwd.getpwnam(BUILD_USER)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "tool").write_text("#!/bin/sh\necho never\n")
    (private / "tool").chmod(0o755)
    rc, out, err = start_as(account, [str(private / "tool")], "/", {}).finish()
    assert rc == 126 and out == "" and err.startswith("as %s: " % BUILD_USER)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs commands as another user: needs root")
def test_an_interpreter_the_user_cannot_reach_is_named_with_the_directory_and_the_fix(tmp_path):
    from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import open_to_others
    account = pwd.getpwnam(BUILD_USER)
    open_to_others(tmp_path)
    home = tmp_path / "root-home"  # a venv under /root, as the probe user meets it
    home.mkdir(mode=0o700)
    (home / "venv").mkdir(mode=0o755)
    python = home / "venv" / "python"
    python.write_text("#!/bin/sh\necho never\n")
    python.chmod(0o755)
    rc, out, err = start_as(account, [str(python)], "/", {}).finish()
    assert rc == 126 and "Permission denied" in err, err
    assert err.endswith("; %s cannot reach %s: %s (mode 0700, owner root:root) does not let it search: put it where "
                        "every user can reach it, or let others search that directory (chmod o+x %s)"
                        % (BUILD_USER, python, home, home)), err
    home.chmod(0o755)
    python.chmod(0o700)  # the file itself, not the way to it: nothing to add
    rc, out, err = start_as(account, [str(python)], "/", {}).finish()
    assert rc == 126 and "does not let" not in err, err


@pytest.mark.skipif(os.geteuid() != 0, reason="asks as another user: needs root")
def test_first_unsearchable_names_the_directory_the_user_cannot_enter(tmp_path):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import first_unsearchable
    from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import open_to_others
    account = pwd.getpwnam(BUILD_USER)
    open_to_others(tmp_path)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "deepep").mkdir(mode=0o755)
    blocked = first_unsearchable(str(private / "deepep" / "nvshmem" / "builds"), account.pw_uid, account.pw_gid)
    assert (blocked.directory, blocked.mode, blocked.owner) == (str(private), "0700", "root:root")
    assert blocked.text("someone", "/x") == "someone cannot reach /x: %s (mode 0700, owner root:root) does not let it " \
        "search" % private
    # A link on the way is followed to the directory that decides.
    (tmp_path / "link").symlink_to(private / "deepep")
    assert first_unsearchable(str(tmp_path / "link" / "x"), account.pw_uid, account.pw_gid).directory == str(private)
    # Search (x) is enough, read is not needed; what does not exist yet is the module's to create.
    private.chmod(0o711)
    assert first_unsearchable(str(private / "deepep" / "not" / "yet"), account.pw_uid, account.pw_gid) is None
    assert first_unsearchable(str(private), 0, 0) is None  # root enters everywhere


@pytest.mark.skipif(os.geteuid() != 0, reason="asks as another user: needs root")
def test_the_doctor_reads_whether_the_build_user_reaches_the_prefix(tmp_path):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor_evidence import prefix_reach
    from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import open_to_others
    open_to_others(tmp_path)
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    prefix = str(home / "deepep")
    assert prefix_reach(prefix, BUILD_USER) == {
        "user": BUILD_USER, "prefix": prefix, "blocked": str(home),
        "text": "%s cannot reach %s: %s (mode 0700, owner root:root) does not let it search" % (BUILD_USER, prefix, home)}
    # Before the layers create the build user, nobody's rights stand for it.
    assert prefix_reach(prefix, "no-such-user-here")["user"] == "nobody"
    assert prefix_reach(prefix, "") is None  # root builds
    home.chmod(0o711)
    assert prefix_reach(prefix, BUILD_USER)["blocked"] is None


def test_a_child_that_could_not_ask_is_not_knowing_rather_than_reaching(monkeypatch, tmp_path):
    """The question is asked by a forked child that becomes the user; should it fail to (a setuid refused), the
    answer is an error the callers say as such, never "reaches"."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build import unprivileged
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report import doctor_evidence

    def refused(uid):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(unprivileged.os, "setuid", refused)  # the fork's child inherits it
    monkeypatch.setattr(unprivileged.os, "setgroups", lambda groups: None)
    monkeypatch.setattr(unprivileged.os, "setgid", lambda gid: None)
    with pytest.raises(OSError, match=r"could not ask as uid 65534 whether it reaches /opt/deepep: .*not permitted"):
        unprivileged.first_unsearchable("/opt/deepep", 65534, 65534)
    assert unprivileged._unreachable_text("/opt/deepep/python", pwd.getpwnam("nobody")) == ""
    monkeypatch.setattr(doctor_evidence.os, "geteuid", lambda: 0)
    reach = doctor_evidence.prefix_reach("/opt/deepep", "nobody")
    assert reach["blocked"] is None and "could not ask as uid" in reach["error"], reach
