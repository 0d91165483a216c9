# -*- coding: utf-8 -*-
"""apt_keyring against fixture keys: the fixture repositories' public key (tests/fixtures/apt_repo_key.asc, the key
apt_repo.py signs with) and another key (other_key.asc) standing in for a key nobody pinned."""
from __future__ import annotations

import os

from ansible_collections.moe_infra.deepep.plugins.module_utils.system.openpgp import dearmor, primary_fingerprints
from ansible_collections.moe_infra.deepep.plugins.modules import apt_keyring as module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")
PINNED = "DFC52E756CBCD371FDD15CD653B564B4C5E2E4D8"
OTHER = "EA7F111E2E27FF54A9964A9B7C74817D06E7ECC4"


def key(name):
    return os.path.abspath(os.path.join(FIXTURES, name))


def run(run_module, dest, url="", fingerprints=(PINNED,), check_mode=False):
    return run_module(module, dict(dest=str(dest), url=url, fingerprints=list(fingerprints)), check_mode=check_mode)


def test_fingerprints_are_read_from_armored_and_binary_keyrings():
    armored = open(key("apt_repo_key.asc"), "rb").read()
    assert primary_fingerprints(armored) == [PINNED]
    assert primary_fingerprints(dearmor(armored)) == [PINNED]
    both = dearmor(armored) + dearmor(open(key("other_key.asc"), "rb").read())
    assert primary_fingerprints(both) == [PINNED, OTHER]


def test_a_pinned_key_is_written_once_and_then_only_checked(run_module, tmp_path):
    dest = tmp_path / "doca.asc"
    predicted, failed = run(run_module, dest, "file://" + key("apt_repo_key.asc"), check_mode=True)
    assert not failed and predicted["changed"] is True and not dest.exists()
    # Written as a binary keyring is served (doca_keyring.gpg), kept ASCII-armored for the .asc apt reads.
    binary = tmp_path / "doca_keyring.gpg"
    binary.write_bytes(dearmor(open(key("apt_repo_key.asc"), "rb").read()))
    result, failed = run(run_module, dest, "file://" + str(binary))
    assert not failed and result["changed"] is True and result["fingerprints"] == [PINNED]
    assert dest.read_bytes().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert primary_fingerprints(dest.read_bytes()) == [PINNED]
    again, failed = run(run_module, dest, "file://" + str(tmp_path / "gone.gpg"))
    assert not failed and again["changed"] is False and again["fetched"] is False


def test_a_key_not_pinned_is_refused_and_nothing_written(run_module, tmp_path):
    dest = tmp_path / "cuda.asc"
    result, failed = run(run_module, dest, "file://" + key("other_key.asc"))
    assert failed and result["unpinned"] == [OTHER] and not dest.exists()
    assert "holds %s, not among the pinned fingerprints %s" % (OTHER, PINNED) in result["msg"]
    # A file holding the pinned key and another is refused too: apt would trust both.
    both = tmp_path / "both.gpg"
    both.write_bytes(dearmor(open(key("apt_repo_key.asc"), "rb").read()) + dearmor(open(key("other_key.asc"), "rb").read()))
    result, failed = run(run_module, dest, "file://" + str(both))
    assert failed and result["unpinned"] == [OTHER] and not dest.exists()


def test_a_keyring_in_place_with_another_key_is_fetched_again_and_replaced(run_module, tmp_path):
    dest = tmp_path / "doca.asc"
    dest.write_bytes(open(key("other_key.asc"), "rb").read())  # what the repository's host served before a rotation
    result, failed = run(run_module, dest, "file://" + key("apt_repo_key.asc"))
    assert not failed and result["changed"] is True and result["fetched"] is True
    assert primary_fingerprints(dest.read_bytes()) == [PINNED]


def test_a_reused_sources_keyring_is_only_checked(run_module, tmp_path):
    keyring = tmp_path / "cuda-archive-keyring.gpg"
    keyring.write_bytes(dearmor(open(key("apt_repo_key.asc"), "rb").read()))
    result, failed = run(run_module, keyring)
    assert not failed and result["changed"] is False
    keyring.write_bytes(dearmor(open(key("other_key.asc"), "rb").read()))
    result, failed = run(run_module, keyring)
    assert failed and "apt would trust %s for this repository" % OTHER in result["msg"]
    keyring.write_text("not a key\n")
    result, failed = run(run_module, keyring)
    assert failed and "neither an OpenPGP keyring nor an ASCII-armored public key block" in result["msg"]


def test_bad_input_is_refused_before_anything_is_read(run_module, tmp_path):
    result, failed = run(run_module, tmp_path / "k.asc", "file://" + key("apt_repo_key.asc"), fingerprints=["3BF863CC"])
    assert failed and result["msg"].startswith("fingerprints: 3BF863CC; give the full fingerprints")
    result, failed = run(run_module, tmp_path / "k.asc", "file://" + key("apt_repo_key.asc"), fingerprints=[])
    assert failed and not (tmp_path / "k.asc").exists()
    # Spaces and case as gpg prints them are fine.
    spaced = " ".join(PINNED[i:i + 4] for i in range(0, 40, 4)).lower()
    result, failed = run(run_module, tmp_path / "k.asc", "file://" + key("apt_repo_key.asc"), fingerprints=[spaced])
    assert not failed and result["changed"] is True
