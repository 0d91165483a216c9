# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Extract a tar archive without trusting it. As root only with Python's 'data' extraction filter (3.8.17, 3.9.17,
3.10.12, 3.11.4, 3.12 and later; its June 2025 fixes came in 3.9.23, 3.10.18, 3.11.13, 3.12.11, 3.13.4, and preflight
says when they are missing) together with the checks below: without the filter root extracts nothing (fail
closed). Given an unprivileged account (the build user), the extraction runs in a child process as that user, into
a directory it owns, with the data filter where this Python has it, else the same rules checked here
(Debian 12's 3.11.2 has no filter); the tree is then handed to root without following a link. Either way a member
that would land outside the destination (an absolute path, '..', a link whose target leaves it), a device or a
FIFO refuses the whole archive; setuid, setgid and sticky bits and write bits for group and others are dropped, and
the files belong to the extracting user, not to the owner the archive names."""

from __future__ import annotations

import errno
import os
import platform
import stat
import tarfile

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import chown_tree

# What the data filter keeps of a mode: no setuid, setgid or sticky bit, no write bit for group or others.
KEPT_BITS = 0o755


class UnsafeMember(tarfile.TarError):
    """A member the data filter would refuse."""


# What either way raises for such a member (tarfile.FilterError where the filter exists).
UNSAFE_ERRORS = (UnsafeMember,) + ((tarfile.FilterError,) if hasattr(tarfile, "FilterError") else ())


def _inside(root, path):
    return os.path.commonpath([root, path]) == root


def checked_members(tar, dest):
    """The archive's members, each checked and made safe as the data filter would; UnsafeMember for the first
    that cannot be."""
    root = os.path.realpath(dest)
    members = []
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or os.path.isabs(name):
            raise UnsafeMember("%s: an absolute path" % name)
        if not _inside(root, os.path.realpath(os.path.join(root, name))):
            raise UnsafeMember("%s: outside the destination" % name)
        if member.ischr() or member.isblk() or member.isfifo():
            raise UnsafeMember("%s: a device or FIFO" % name)
        if member.issym():
            if os.path.isabs(member.linkname):
                raise UnsafeMember("%s: a link to the absolute path %s" % (name, member.linkname))
            if not _inside(root, os.path.realpath(os.path.join(root, os.path.dirname(name), member.linkname))):
                raise UnsafeMember("%s: a link to %s, outside the destination" % (name, member.linkname))
        if member.islnk() and (os.path.isabs(member.linkname) or not _inside(
                root, os.path.realpath(os.path.join(root, member.linkname)))):
            raise UnsafeMember("%s: a hard link to %s, outside the destination" % (name, member.linkname))
        if member.isfile():  # the owner can read and write; executable only if the owner could execute it
            mode = member.mode & KEPT_BITS
            member.mode = (mode if mode & stat.S_IXUSR else mode & ~0o111) | stat.S_IRUSR | stat.S_IWUSR
        elif member.isdir():
            member.mode = (member.mode & KEPT_BITS) | stat.S_IRWXU
        member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
        members.append(member)
    return members


MINIMUM_PYTHON = ("3.9.23, 3.10.18, 3.11.13, 3.12.11 or 3.13.4 (or a distribution's build with the June 2025 "
                  "tarfile fixes)")


class NoSafeExtraction(Exception):
    """This Python cannot extract an untrusted archive as root."""


def filter_problem():
    """None when this Python's data filter is one root may rely on, else what it lacks."""
    if not hasattr(tarfile, "data_filter"):
        return "Python %s has no tarfile data filter" % platform.python_version()
    # The 2025 fixes (CVE-2025-4517 and others) resolve links with os.path.realpath(strict=ALLOW_MISSING).
    if not hasattr(os.path, "ALLOW_MISSING"):
        return "Python %s has tarfile's data filter without its June 2025 fixes" % platform.python_version()
    return None


def extract_all(tar, dest, account=None):
    """Extract tar into dest under the rules above; account: (uid, gid) to extract as, or None for this process's
    user. NoSafeExtraction when that is root and this Python has no data filter (an unpatched one is used, with
    this module's own checks too; preflight names the Pythons with the fixes)."""
    if account is not None:
        _extract_as(tar, dest, account[0], account[1])
    elif hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=checked_members(tar, dest), filter="data")
    elif os.geteuid() == 0:
        raise NoSafeExtraction("%s: as root it extracts no archive. Run the modules with Python %s "
                               "(ansible_python_interpreter), or keep a build user so that archives are unpacked as "
                               "that user" % (filter_problem(), MINIMUM_PYTHON))
    else:
        tar.extractall(dest, members=checked_members(tar, dest))


def _extract_as(tar, dest, uid, gid):
    os.makedirs(dest, exist_ok=True)
    os.chown(dest, uid, gid)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read_end)
        code, text = 0, ""
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest, members=checked_members(tar, dest))
        except UNSAFE_ERRORS as exc:
            code, text = 3, str(exc)
        except OSError as exc:
            # A full disk and a permission are the node's, not the archive's: each keeps its own words.
            code = {errno.ENOSPC: 4, errno.EACCES: 6, errno.EPERM: 6}.get(exc.errno, 5)
            text = str(exc)
        except BaseException as exc:  # pylint: disable=broad-except
            code, text = 5, str(exc) or type(exc).__name__
        os.write(write_end, text.encode("utf-8", "replace")[:4000])
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        text = reader.read().decode("utf-8", "replace")
    status = os.waitpid(pid, 0)[1]
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 5
    if code == 3:
        raise UnsafeMember(text)
    if code == 4:
        raise OSError(errno.ENOSPC, text)
    if code == 6:
        raise PermissionError(errno.EACCES, text)
    if code:
        raise tarfile.ReadError(text or "the extraction ended with status %d" % status)
    # Root's again, without following a link the archive planted; no setuid bit, nothing writable by others.
    chown_tree(dest, os.getuid(), os.getgid(), sanitize=True)
