# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""What a build prefix of source_build holds, read without building, and the plan of an up-to-date build made from
that reading. deepep_facts reads every prefix under the collection's prefix with the node (ansible_facts.deepep.
builds); source_build's action plugin then answers the plan of a build whose fingerprint is the one `current`
points at on the controller, as the module would, instead of starting the module on the node."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import stat

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import PrefixLock
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.jit_cache import jit_cache_stats

STAMP = ".moe_infra_stamp.json"


def read_no_follow(root, rel):
    """The text of root/rel, or None when it is missing, not a regular file, or reached through a symlink."""
    parts = [p for p in os.path.normpath(rel).split(os.sep) if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = sub
        handle = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    with os.fdopen(handle, "rb") as reader:
        if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
            return None
        return reader.read().decode("utf-8", "replace")


def read_stamp(build_dir):
    """The stamp a verified build got (its inputs), or None."""
    try:
        with open(os.path.join(build_dir, STAMP)) as handle:
            return json.load(handle)
    except (OSError, IOError, ValueError):
        return None


def current_fingerprint(prefix):
    current = os.path.join(prefix, "current")
    if not os.path.islink(current):
        return None
    return os.path.basename(os.readlink(current))


def user_exists(user):
    """Whether user is on this node (None when no user is named)."""
    if not user:
        return None
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def build_state(prefix, read_files):
    """The build `current` points at (its fingerprint and directory, as the module names them), whether it is
    stamped, read_files of it (as the module's read_files: never through a link) and the run holding the prefix's
    lock (None when nobody does)."""
    fp = current_fingerprint(prefix)
    stamped = fp is not None and read_stamp(os.path.join(prefix, "builds", fp)) is not None
    files = {}
    if stamped:
        for rel in read_files:
            text = read_no_follow(os.path.join(prefix, "builds", fp), rel)
            if text is not None:
                files[rel] = text
    return dict(current=fp, install_dir=os.path.join(prefix, "builds", fp) if fp else None, stamped=stamped,
                files=files, lock_holder=PrefixLock(prefix).holder())


def file_digest_and_mode(path):
    """{sha256, mode ('0644')} of a regular file not reached through a link at its last component, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return dict(sha256=digest.hexdigest(), mode="%04o" % stat.S_IMODE(info.st_mode))


def directory_mode_and_group(path):
    """{mode ('2775'), group (its name, else its number)} of a directory not reached through a link at its last
    component, else None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return dict(mode="%04o" % stat.S_IMODE(info.st_mode), group=group)


def read_reports(directory, limit=1 << 20):
    """{path: the report} for each *.json regular file directly in directory (not through a link, at most limit
    bytes), null for one that is not a JSON object; {} when there is no such directory."""
    reports = {}
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".json"))
    except OSError:
        return reports
    for name in names:
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                continue
            data = handle.read(limit + 1)
        try:
            report = json.loads(data.decode("utf-8")) if len(data) <= limit else None
        except ValueError:
            report = None
        reports[path] = report if isinstance(report, dict) else None
    return reports


def read_builds(root, read_files, build_user, digests=(), directories=(), report_dir=None, jit_cache=None):
    """Every build prefix directly under root (a directory with `current` or `builds`), read with build_state; the
    sha256 and mode of each file of digests (the env script), null for one that is not a regular file; the mode and
    group of each of directories (V2's JIT cache), null for one that is not a directory; with report_dir, its JSON
    reports (DeepEP's tests'); with jit_cache, V2's JIT cache as jit_cache_stats reads it."""
    prefixes = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        prefix = os.path.join(root, name)
        if os.path.islink(os.path.join(prefix, "current")) or os.path.isdir(os.path.join(prefix, "builds")):
            prefixes[prefix] = build_state(prefix, read_files)
    return dict(root=root, read_files=sorted(read_files), build_user=build_user,
                build_user_exists=user_exists(build_user), prefixes=prefixes,
                digests=dict((path, file_digest_and_mode(path)) for path in digests),
                directories=dict((path, directory_mode_and_group(path)) for path in directories),
                reports=read_reports(report_dir) if report_dir else None,
                jit_cache=jit_cache_stats(jit_cache) if jit_cache else None)


def build_inputs(params, digest, patches):
    """What a build's fingerprint is taken over (the stamp's inputs): params as the module has them."""
    return dict(
        name=params["name"],
        source=digest,
        build_command=params["build_command"],
        verify_command=params["verify_command"],
        environment={k: str(v) for k, v in params["environment"].items()},
        patches=patches,
        inputs=params["inputs"],
    )


def up_to_date_plan(params, reading, fp, digest):
    """The plan (check mode) source_build returns for a build that `current` already points at, stamped, from a
    reading of its prefix (build_state) and of the build user."""
    prefix = params["prefix"]
    install_dir = os.path.join(prefix, "builds", fp)
    return dict(
        changed=False, action="none", fingerprint=fp, reason="up to date (fingerprint %s)" % fp,
        install_dir=install_dir, src_dir=os.path.join(install_dir, "src"), current=os.path.join(prefix, "current"),
        previous_fingerprint=fp, source_digest=digest, log=os.path.join(install_dir, "build.log"),
        build_seconds=None, build_cpu_seconds=None, artifact=params["artifact_out"], artifact_written=False,
        needs_source=False, source_installed=False, files=dict(reading["files"]),
        build_user_exists=reading["build_user_exists"],
        lock_holder=reading["lock_holder"],
    )
