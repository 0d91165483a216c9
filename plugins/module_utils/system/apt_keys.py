# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""An apt repository's signing key, pinned by fingerprint: check the keyring a source names, fetch a key and accept
it only when every primary key in it is pinned, put a file back as it was. Shared by
apt_keyring (the key alone) and apt_pinned_repository (key, source and package lists)."""

from __future__ import annotations

import os

from ansible.module_utils.urls import open_url

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.files import write_atomic
from ansible_collections.moe_infra.deepep.plugins.module_utils.system.openpgp import (
    KeyringError,
    armor,
    dearmor,
    normalize,
    primary_fingerprints,
)


class KeyRefused(Exception):
    """A key apt must not trust, or one that could not be read. fetched: the URL answered (trying again is useless)."""

    def __init__(self, msg, fetched, unpinned=None, fingerprints=None):
        Exception.__init__(self, msg)
        self.msg = msg
        self.fetched = fetched
        self.unpinned = unpinned
        self.fingerprints = fingerprints


def pins_or_problem(values):
    """(the pinned fingerprints, normalized; the message for bad ones, or None)."""
    pins = set(normalize(value) for value in values)
    bad = sorted(value for value in pins if len(value) not in (40, 64) or any(c not in "0123456789ABCDEF" for c in value))
    if not pins or bad:
        return pins, ("fingerprints: %s; give the full fingerprints (40 hex digits) of the keys the repository is "
                      "signed with" % (", ".join(bad) if bad else "empty"))
    return pins, None


def read_keys(data):
    """(fingerprints, error)."""
    try:
        return primary_fingerprints(data), None
    except KeyringError as exc:
        return [], str(exc)
    except IndexError:
        return [], "a truncated packet"


def read_file(path):
    """The file's bytes, or None when there is none."""
    if not os.path.lexists(path):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def keyring_in_place(dest, pins):
    """(bytes at dest or None, its fingerprints, error or None, whether it holds only pinned keys)."""
    current = read_file(dest)
    if current is None:
        return None, [], None, False
    found, error = read_keys(current)
    return current, found, error, not error and bool(found) and set(found) <= pins


def refuse_keyring_in_place(dest, found, error, pins, hint):
    """The message for a keyring a source names that holds a key not pinned (or is not a keyring)."""
    return "%s: %s; apt would trust %s for this repository, which is not among the pinned fingerprints %s.%s" % (
        dest, error or "holds a key not pinned", ", ".join(found) or "nothing", ", ".join(sorted(pins)), hint)


def fetch_pinned_key(url, pins, timeout, hint):
    """(the key ASCII-armored, its fingerprints) from url, or KeyRefused."""
    try:
        data = open_url(url, timeout=timeout, follow_redirects="safe").read()
    except Exception as exc:  # pylint: disable=broad-except
        raise KeyRefused("could not fetch the repository key %s: %s%s" % (url, exc, hint), fetched=False)
    found, error = read_keys(data)
    if error:
        raise KeyRefused("%s is not a public key: %s; nothing was written.%s" % (url, error, hint), fetched=True)
    unpinned = sorted(set(found) - pins)
    if unpinned:
        raise KeyRefused("%s holds %s, not among the pinned fingerprints %s; apt would trust it for this repository, "
                         "so it was not written.%s" % (url, ", ".join(unpinned), ", ".join(sorted(pins)), hint),
                         fetched=True, unpinned=unpinned, fingerprints=found)
    return armor(dearmor(data)), found


def put_back(module, path, previous):
    """Restore path to the bytes it held before (None: it did not exist)."""
    if previous is None:
        if os.path.lexists(path):
            os.unlink(path)
    else:
        write_atomic(module, path, previous)
