# -*- coding: utf-8 -*-
"""Hostile archives, extracted as root with Python's data filter (and the module's own checks), and as the build user
with the checks that stand in for the filter where this Python has none (Debian 12's 3.11.2): each is refused before
anything is written, or made safe. Without the filter root extracts nothing."""
from __future__ import annotations

import io
import os
import stat
import tarfile

import pwd

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.build import safe_tar
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import BUILD_USER, open_to_others

ACCOUNT = []  # (uid, gid) the "checks" way extracts as


@pytest.fixture(params=["data filter", "checks"])
def way(request, monkeypatch, tmp_path):
    del ACCOUNT[:]
    if request.param == "data filter":
        if not hasattr(tarfile, "data_filter"):
            pytest.skip("this Python has no tarfile.data_filter")
    else:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        if os.geteuid() == 0:  # as root without the filter only as the build user
            open_to_others(tmp_path)
            entry = pwd.getpwnam(BUILD_USER)
            ACCOUNT.append((entry.pw_uid, entry.pw_gid))
    return request.param


def archive(tmp_path, *members):
    """members: (TarInfo fields, data or None)."""
    path = tmp_path / "a.tar"
    with tarfile.open(str(path), "w") as tar:
        for fields, data in members:
            info = tarfile.TarInfo(fields.pop("name"))
            for key, value in fields.items():
                setattr(info, key, value)
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def extract(path, dest):
    dest.mkdir()
    with tarfile.open(str(path)) as tar:
        safe_tar.extract_all(tar, str(dest), ACCOUNT[0] if ACCOUNT else None)


@pytest.mark.parametrize("member", [
    {"name": "/tmp/moe-infra-absolute", "type": tarfile.REGTYPE},
    {"name": "src/../../escape", "type": tarfile.REGTYPE},
    {"name": "src/lnk", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"},
    {"name": "src/lnk", "type": tarfile.SYMTYPE, "linkname": "../../outside"},
    {"name": "src/hard", "type": tarfile.LNKTYPE, "linkname": "/etc/passwd"},
    {"name": "src/dev", "type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3},
    {"name": "src/fifo", "type": tarfile.FIFOTYPE},
])
def test_a_member_that_leaves_the_destination_or_is_a_device_refuses_the_archive(tmp_path, way, member):
    data = b"x" if member["type"] == tarfile.REGTYPE else None
    path = archive(tmp_path, ({"name": "src/first.txt"}, b"first\n"), (dict(member), data))
    with pytest.raises(safe_tar.UNSAFE_ERRORS):
        extract(path, tmp_path / "dest")
    assert not os.path.exists("/tmp/moe-infra-absolute") and not (tmp_path / "escape").exists()
    assert list((tmp_path / "dest").iterdir()) == []  # refused before anything was written


def test_modes_and_owners_are_the_extracting_users(tmp_path, way):
    path = archive(tmp_path,
                   ({"name": "src", "type": tarfile.DIRTYPE, "mode": 0o777}, None),
                   ({"name": "src/suid", "mode": 0o4777, "uid": 1234, "gid": 1234, "uname": "nobody"}, b"#!/bin/sh\n"),
                   ({"name": "src/data.txt", "mode": 0o0066}, b"data\n"),
                   ({"name": "src/inside", "type": tarfile.SYMTYPE, "linkname": "data.txt"}, None))
    extract(path, tmp_path / "dest")
    src = tmp_path / "dest" / "src"
    assert stat.S_IMODE(os.stat(str(src / "suid")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(str(src / "data.txt")).st_mode) == 0o644
    assert not os.stat(str(src)).st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    assert os.stat(str(src / "suid")).st_uid == os.getuid()
    assert (src / "inside").read_text() == "data\n"


def test_root_without_the_data_filter_extracts_nothing(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the refusal is root's")
    del ACCOUNT[:]
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    path = archive(tmp_path, ({"name": "src/first.txt"}, b"first\n"))
    with pytest.raises(safe_tar.NoSafeExtraction) as refused:
        extract(path, tmp_path / "dest")
    assert "has no tarfile data filter: as root it extracts no archive" in str(refused.value)
    assert "3.9.23, 3.10.18, 3.11.13, 3.12.11 or 3.13.4" in str(refused.value)
    assert list((tmp_path / "dest").iterdir()) == []
