# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""What runs a build's output without giving it root: a command run as an unprivileged user (no supplementary
groups, its own process group, everything it leaves ended afterwards), and trees handed between that user and root
without following a link the user could have planted."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import time

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import kill_group, process_start

SAFE_MODE_MASK = ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH) & 0o7777
# A tree shared with a group (setgid directories, group-writable) keeps those two; nothing else changes.
GROUP_MODE_MASK = SAFE_MODE_MASK | stat.S_ISGID | stat.S_IWGRP


def _own(fd, uid, gid, mask):
    os.fchown(fd, uid, gid)
    if mask is not None:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & ~mask:
            os.fchmod(fd, mode & mask)


def _own_tree(dir_fd, uid, gid, mask):
    for name in os.listdir(dir_fd):
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        elif stat.S_ISDIR(info.st_mode):
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                _own(sub, uid, gid, mask)
                _own_tree(sub, uid, gid, mask)
            finally:
                os.close(sub)
        elif stat.S_ISREG(info.st_mode):
            handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            try:
                _own(handle, uid, gid, mask & ~stat.S_ISGID if mask is not None else None)
            finally:
                os.close(handle)
        elif mask is not None:
            os.unlink(name, dir_fd=dir_fd)  # a FIFO or socket left behind
        else:
            os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)


def chown_tree(path, uid, gid, sanitize=False, group_shared=False):
    """Give the tree to uid:gid without following a link: each directory is opened with O_NOFOLLOW relative to
    its parent's descriptor, so a directory swapped for a symlink is never entered. sanitize (the hand-back
    to root): no write bit for group and others, no setuid/setgid/sticky bit, and FIFOs and sockets (nothing a
    build installs) removed; group_shared keeps group write and setgid directories."""
    mask = (GROUP_MODE_MASK if group_shared else SAFE_MODE_MASK) if sanitize else None
    top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _own(top, uid, gid, mask)
        _own_tree(top, uid, gid, mask)
    finally:
        os.close(top)


@contextlib.contextmanager
def lend_tree(paths, account):
    """The directories of paths (those that are directories, not links) are account's while the block runs, then
    their owner's again, sanitized (see chown_tree; a setgid top keeps its group's write bits), each top with the
    mode it had. Run the user's processes inside the block: they are ended before it returns."""
    lent = []
    try:
        for path in paths:
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                continue
            lent.append((path, info))
            chown_tree(path, account.pw_uid, account.pw_gid)
        yield [path for path, dummy in lent]
    finally:
        for path, info in lent:
            chown_tree(path, info.st_uid, info.st_gid, sanitize=True, group_shared=bool(info.st_mode & stat.S_ISGID))
            top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                os.fchmod(top, stat.S_IMODE(info.st_mode))
            finally:
                os.close(top)


def boot_ticks_now():
    """Now, in the clock ticks since boot that /proc/<pid>/stat counts process start times in (one tick early)."""
    try:
        with open("/proc/uptime") as handle:
            return max(int(float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK")) - 1, 0)
    except (OSError, ValueError):
        return None


# Every step that runs as the build user carries one of these in its environment, with its own value.
STEP_MARKERS = (b"MOE_INFRA_RUN_AS=", b"MOE_INFRA_BUILD_STEP=")


def end_processes_of(uid, since, marker):
    """SIGKILL every process of uid that started at or after since (clock ticks since boot) and carries this
    step's marker in its environment, or no step's marker at all: what a build step left, in its process group or
    escaped from it (setsid, a double fork, an environment emptied or replaced). Another step's processes (another
    component's build) and older ones are left alone. One without any marker is ended only when a second look, a
    moment later, still finds none (a process in the middle of exec shows no environment for that moment). The
    scan repeats until a pass finds nothing more, so that what forked during a pass is ended too."""
    ended, suspects = [], set()
    for dummy in range(8):
        marked, unmarked = _step_processes(uid, since, marker.encode())
        confirmed = [pid for pid in unmarked if pid in suspects]
        for pid in marked + confirmed:
            if pid in ended:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                ended.append(pid)
            except OSError:
                pass
        suspects = set(unmarked) - set(confirmed)
        if not marked and not confirmed and not suspects:
            break
        if suspects:
            time.sleep(0.05)
    # SIGKILL is delivered asynchronously: wait (bounded) until each is gone or a zombie, so that nothing of the
    # step still runs when the caller reads or hands back what it wrote.
    deadline = time.time() + 10
    while ended and time.time() < deadline and any(_running(pid) for pid in ended):
        time.sleep(0.02)
    return ended


def _step_processes(uid, since, marker):
    """([pid] with this step's marker, [pid] with no step's marker) among uid's live processes started at or after
    since."""
    marked, unmarked = [], []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat("/proc/" + name).st_uid != uid or not _running(int(name)):
                continue
            with open("/proc/%s/environ" % name, "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            group = marked
        elif any(entry.startswith(STEP_MARKERS) for entry in environ):
            continue  # another step's
        else:
            group = unmarked
        started = process_start(int(name))
        if started is not None and since is not None and int(started) >= int(since):
            group.append(int(name))
    return marked, unmarked


def _running(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def account_of(user):
    """The pwd entry of user; KeyError when the node has no such user."""
    return pwd.getpwnam(user)


def demoted(uid, gid):
    """A preexec function: the child becomes uid:gid with no supplementary group. Its locked-memory limit is
    raised first where root may (RDMA registrations need it, as the jobs' limits.conf gives them); root's
    CAP_IPC_LOCK is what let the tests do without before."""
    def become():  # pragma: no cover (the child)
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            pass
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return become


class Blocked:
    """A directory on the way to a path that a user may not search: directory, mode ("0700"), owner ("root:root")."""

    def __init__(self, directory, info):
        self.directory = directory
        self.mode = "%04o" % stat.S_IMODE(info.st_mode)
        self.owner = owner_text(info)

    def text(self, user, path):
        """What every message that names it says first."""
        return "%s cannot reach %s: %s (mode %s, owner %s) does not let it search" % (
            user, path, self.directory, self.mode, self.owner)


def first_unsearchable(path, uid, gid):
    """The first directory on the way to path (its real path, from /) that uid:gid, with no supplementary group (as
    a build step runs), may not search: a Blocked, or None where it reaches the whole path or the rest does not
    exist yet (the module creates it, searchable). Asked of the kernel by a child that became that user (a fork, no
    interpreter to start: this one may sit where the user cannot go), so ACLs count. OSError where the child could
    not ask (it could not become that user): that is not knowing, not reaching."""
    if uid == 0:
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read_end)
        answer, status = b"", 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            current = "/"
            for part in [p for p in os.path.realpath(path).split("/") if p]:
                current = os.path.join(current, part)
                if not os.path.lexists(current):
                    break
                if not os.access(current, os.X_OK):
                    answer = current.encode("utf-8", "surrogateescape")
                    break
            status = 0
        except BaseException as exc:  # said to the parent, which raises it there
            answer = str(exc).encode("utf-8", "surrogateescape")
        finally:
            os.write(write_end, answer)
            os._exit(status)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    status = os.waitpid(pid, 0)[1]
    answer = b"".join(chunks).decode("utf-8", "surrogateescape")
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise OSError("could not ask as uid %d whether it reaches %s: %s" % (uid, path, answer or "the child died"))
    return Blocked(answer, os.stat(answer)) if answer else None


def _unreachable_text(path, account):
    """Where account cannot reach path because of a directory on the way: what stops it and the fix, else ''."""
    try:
        blocked = first_unsearchable(os.path.dirname(os.path.abspath(path)), account.pw_uid, account.pw_gid)
    except OSError:
        return ""
    if blocked is None:
        return ""
    return ("; %s: put it where every user can reach it, or let others search that directory (chmod o+x %s)"
            % (blocked.text(account.pw_name, path), blocked.directory))


def owner_text(info):
    """user:group of a stat result, by name where the node has one."""
    try:
        user = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        user = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return "%s:%s" % (user, group)


def run_as(account, argv, cwd, env, scratch_home=False):
    """(rc, stdout, stderr) of argv run as account (a pwd entry) in a process group of its own, from cwd, with env
    over this process's environment (USER, LOGNAME and HOME the account's; with scratch_home a fresh HOME of its
    own, removed afterwards). Whatever it leaves running, also what left its process group, is ended before this
    returns: nothing of it runs on while root reads or hands back what it wrote."""
    return start_as(account, argv, cwd, env, scratch_home).finish()


_started = [0]  # start_as calls of this process: each one's marker is its own, even within one microsecond


class Started(object):
    """A command start_as started: finish() waits for it and returns (rc, stdout, stderr)."""

    def __init__(self, account, argv, cwd, env, scratch_home):
        full = dict(os.environ)
        full.update(env)
        full.update(USER=account.pw_name, LOGNAME=account.pw_name, HOME=account.pw_dir)
        _started[0] += 1
        self.marker = "%d.%d.%d" % (os.getpid(), time.time() * 1e6, _started[0])
        full["MOE_INFRA_RUN_AS"] = self.marker
        self.account, self.home, self.proc, self.result = account, None, None, None
        if scratch_home:
            self.home = tempfile.mkdtemp(prefix="moe-infra-home.")
            os.chown(self.home, account.pw_uid, account.pw_gid)
            full["HOME"] = self.home
        self.began = boot_ticks_now()
        # Output to files, not pipes: a process the command leaves behind keeps a pipe open, not the wait.
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, cwd=cwd, env=full, stdin=subprocess.DEVNULL, stdout=self.out,
                                         stderr=self.err, start_new_session=True,
                                         preexec_fn=demoted(account.pw_uid, account.pw_gid))
        except OSError as exc:  # an interpreter that user may not run
            self.result = (126, "", "as %s: %s%s" % (account.pw_name, exc, _unreachable_text(argv[0], account)))
            self._clean()

    def _clean(self):
        self.out.close()
        self.err.close()
        if self.home:
            shutil.rmtree(self.home, ignore_errors=True)

    def finish(self):
        if self.result is not None:
            return self.result
        try:
            self.proc.wait()
        finally:
            kill_group(self.proc.pid)
            self.proc.wait()
            end_processes_of(self.account.pw_uid, self.began, "MOE_INFRA_RUN_AS=" + self.marker)
            self.out.seek(0)
            self.err.seek(0)
            out, err = self.out.read().decode("utf-8", "replace"), self.err.read().decode("utf-8", "replace")
            self._clean()
        rc = self.proc.returncode if self.proc.returncode >= 0 else 128 - self.proc.returncode
        self.result = (rc, out, err)
        return self.result


def start_as(account, argv, cwd, env, scratch_home=False):
    """run_as without the wait: the command runs while the caller starts others (each in its own process group,
    with its own marker, so that ending what one left never touches another); Started.finish() is run_as' answer."""
    return Started(account, argv, cwd, env, scratch_home)


FALLBACK_USER = "nobody"


def probe_account(user):
    """Whom a probe of a build's interpreter runs as: None (as this process) without user or when not root, else
    user's pwd entry, or nobody's where user is not on the node yet (a build user before the first build).
    KeyError when neither is."""
    if not user or os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(user)
    except KeyError:
        return pwd.getpwnam(FALLBACK_USER)
