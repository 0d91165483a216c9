# -*- coding: utf-8 -*-
"""Ending a build's process group: every process of it is gone, not only signalled, when end_group returns."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import end_group, group_members
from ansible_collections.moe_infra.deepep.tests.fixtures.processes import alive_with


def write_stat(proc_root, pid, comm, state, pgrp):
    """One /proc/<pid>/stat as the kernel writes it: pid (comm) state ppid pgrp session ..."""
    (proc_root / str(pid)).mkdir(parents=True)
    line = "%d (%s) %s 1 %d %d 0 -1 4194560 0 0 0 0\n" % (pid, comm, state, pgrp, pgrp)
    (proc_root / str(pid) / "stat").write_text(line)


def test_group_members_are_the_running_processes_of_that_group(tmp_path):
    proc_root = tmp_path / "proc"
    write_stat(proc_root, 300, "bash", "S", 300)
    write_stat(proc_root, 301, "sleep (a) b)", "R", 300)  # a command name with spaces and parentheses
    write_stat(proc_root, 302, "sleep", "Z", 300)  # a zombie runs nothing
    write_stat(proc_root, 303, "other", "S", 3000)  # another group whose id starts the same
    (proc_root / "self").mkdir()
    (proc_root / "meminfo").write_text("")
    (proc_root / "304").mkdir()  # gone between the listing and the read
    assert sorted(group_members(300, str(proc_root))) == [300, 301]
    assert group_members(3000, str(proc_root)) == [303]
    assert group_members(999, str(proc_root)) == []


def test_end_group_returns_when_every_process_of_the_group_is_gone():
    marker = "61.%d" % os.getpid()  # a command line no other process has
    # A group leader with a background job, as a build step with a daemon or `cmd &` leaves one.
    leader = subprocess.Popen(["/bin/bash", "-c", "sleep %s & sleep %s; wait" % (marker, marker)],
                              start_new_session=True)
    deadline = time.time() + 10
    while len(alive_with(marker)) < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert len(alive_with(marker)) == 3  # the shell (its command line holds the marker too) and its two sleeps
    assert end_group(leader.pid) == []
    # Checked at once, with nothing reaped by the caller yet: nothing of the group runs any more.
    assert alive_with(marker) == []
    assert group_members(leader.pid) == []
    assert leader.wait(timeout=10) == -9


def test_end_group_of_a_group_that_is_gone_returns_at_once():
    gone = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    gone.wait()
    started = time.time()
    assert end_group(gone.pid) == []
    assert time.time() - started < 1


def test_end_group_gives_up_after_its_timeout_and_names_what_still_runs(tmp_path):
    # A member that never goes away (a fixture /proc says it runs), in a real group that takes the signal.
    leader = subprocess.Popen(["/bin/sleep", "30"], start_new_session=True)
    proc_root = tmp_path / "proc"
    write_stat(proc_root, 4242, "stuck", "D", leader.pid)
    started = time.time()
    assert end_group(leader.pid, timeout=0.3, proc_root=str(proc_root)) == [4242]
    assert 0.3 <= time.time() - started < 5
    assert leader.wait(timeout=10) == -9
