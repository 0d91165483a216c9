# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""One lock per build prefix, so that two runs on one node never build, prune or switch the same component at once.

The lock is an flock on <prefix>/.lock (released by the kernel when the holder exits, however it exits). Beside it,
<prefix>/.lock.json names the holder (node, pid, start time, fingerprint, the controller's run) so a second run can
say who it waits for, and the process group of the build it runs, so a later holder can end a build that outlived
the process that started it (the module killed by a time limit)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import time

LOCK_NAME = ".lock"
INFO_NAME = ".lock.json"


def boot_id(proc_root="/proc"):
    try:
        with open(os.path.join(proc_root, "sys", "kernel", "random", "boot_id")) as handle:
            return handle.read().strip()
    except (OSError, IOError):
        return None


def process_start(pid, proc_root="/proc"):
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None when gone."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat")) as handle:
            stat = handle.read()
    except (OSError, IOError):
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def describe(info):
    """'pid 4242 on node1 since 2026-11-25 02:11:31 UTC, building deepep 3f9a0c1d2b4e5f60 (run: ...)'."""
    if not info:
        return "another process (it left no record of itself)"
    text = "pid %s on %s since %s" % (info.get("pid"), info.get("host"), info.get("since"))
    if info.get("name"):
        text += ", %s %s" % (info.get("action") or "working on", info.get("name"))
        if info.get("fingerprint"):
            text += " " + str(info["fingerprint"])
    if info.get("run_by"):
        text += " (run by %s)" % info["run_by"]
    return text


def kill_group(pgid, sig=signal.SIGKILL):
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return False
        raise
    return True


def group_members(pgid, proc_root="/proc"):
    """The pids of the process group's processes that still run (zombies left out: they run nothing)."""
    members = []
    for name in os.listdir(proc_root):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, "stat")) as handle:
                stat = handle.read()
        except (OSError, IOError):
            continue
        # After the command name: state, ppid, pgrp.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            members.append(int(name))
    return members


def end_group(pgid, timeout=10.0, proc_root="/proc"):
    """SIGKILL a process group and wait (bounded) until none of its processes runs. The signal is delivered
    asynchronously: on a busy node a build's background job could otherwise still run, and write, while the
    caller hands back or removes its tree. The pids still running at the timeout, [] when the group is gone."""
    if not kill_group(pgid):
        return []
    deadline = time.time() + timeout
    members = group_members(pgid, proc_root)
    while members and time.time() < deadline:
        time.sleep(0.02)
        members = group_members(pgid, proc_root)
    return members


class PrefixLock(object):

    def __init__(self, prefix):
        self.prefix = prefix
        self.path = os.path.join(prefix, LOCK_NAME)
        self.info_path = os.path.join(prefix, INFO_NAME)
        self.fd = None
        self.info = None
        self.ended = None

    def read_info(self):
        try:
            with open(self.info_path) as handle:
                return json.load(handle)
        except (OSError, IOError, ValueError):
            return None

    def holder(self):
        """The record of the run holding the lock now, {} when the holder left none, None when nobody holds it."""
        if not os.path.exists(self.path):
            return None
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (OSError, IOError):
            return self.read_info() or {}
        finally:
            os.close(fd)  # closing drops the lock if we got it
        return None

    def acquire(self, timeout, info, on_wait=None):
        """Take the lock, waiting up to timeout seconds; None once held, else the holder's record ({} if none).
        A build left running by a holder that died is ended first (returned in self.ended)."""
        os.makedirs(self.prefix, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        deadline = time.time() + max(timeout, 0)
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (OSError, IOError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
            if time.time() >= deadline:
                os.close(fd)
                return self.read_info() or {}
            if not waited and on_wait:
                on_wait(self.read_info() or {})
            waited = True
            time.sleep(1)
        self.fd = fd
        self.ended = self._end_leftover_build(self.read_info())
        self.info = dict(info, pid=os.getpid(), host=socket.gethostname(), boot_id=boot_id(),
                         since=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
        self._write_info()
        return None

    def _end_leftover_build(self, previous):
        """A build process group recorded by a holder that is gone (we hold the lock) is debris of an interrupted
        run: end it before its directory is touched. Only the same boot and the same group leader count."""
        if not previous or not previous.get("build_pgid") or previous.get("boot_id") != boot_id():
            return None
        pgid = previous["build_pgid"]
        if process_start(pgid) != previous.get("build_start"):
            return None
        end_group(pgid)
        return pgid

    def _write_info(self):
        tmp = self.info_path + ".tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as handle:
            json.dump(self.info, handle, sort_keys=True)
        os.rename(tmp, self.info_path)

    def update(self, **fields):
        if self.fd is None:
            return
        self.info.update(fields)
        self._write_info()

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.info_path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
