# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Extract a tar archive as root without trusting it: Python's 'data' extraction filter where this Python has it
(3.8.17, 3.9.17, 3.10.12, 3.11.4, 3.12 and later), else the same rules checked here, for the Pythons without it
(Debian 12's 3.11.2 among them). Either way a member that would land outside the destination (an absolute path,
'..', a link whose target leaves it), a device or a FIFO refuses the whole archive before anything is written;
setuid, setgid and sticky bits and write bits for group and others are dropped, and the files belong to the
extracting user, not to the owner the archive names."""

from __future__ import annotations

import os
import stat
import tarfile

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


def extract_all(tar, dest):
    """Extract tar into dest under the rules above."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:
        tar.extractall(dest, members=checked_members(tar, dest))
