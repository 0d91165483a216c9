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
