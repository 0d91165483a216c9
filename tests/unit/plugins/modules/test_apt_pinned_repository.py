# -*- coding: utf-8 -*-
"""apt_pinned_repository against a fixture apt directory, the fixture keys of test_apt_keyring.py (the key
apt_repo.py signs with, and another nobody pinned) and a stand-in apt-get (a fixture) that fails while a named
source file is there, as apt-get update does for a source whose key does not verify, and logs each call; and
Debian's own apt-get against the signed fixture repositories of tests/fixtures/apt_repo.py."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.system.openpgp import dearmor, primary_fingerprints
from ansible_collections.moe_infra.deepep.plugins.modules import apt_pinned_repository as module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")
sys.path.insert(0, FIXTURES)
import apt_repo  # noqa: E402  (tests/fixtures/apt_repo.py: signed flat repositories of stand-in packages)
PINNED = "DFC52E756CBCD371FDD15CD653B564B4C5E2E4D8"
OTHER = "EA7F111E2E27FF54A9964A9B7C74817D06E7ECC4"
URI = "file:/opt/moe-fixtures/repos/doca"
REJECTED = "E: The repository 'file:/opt/moe-fixtures/repos/doca ./ Release' is not signed."


def key(name):
    return "file://" + os.path.abspath(os.path.join(FIXTURES, name))


def apt_get(fake_bin, tmp_path, fails_while="", transient_failures=0):
    """A stand-in apt-get: logs its arguments; fails (as apt does) while fails_while exists; fails the first
    transient_failures calls with a fetch warning (a mirror hiccup)."""
    log, counter = tmp_path / "apt-get.log", tmp_path / "apt-get.count"
    counter.write_text("0")
    if log.exists():
        log.unlink()
    path = fake_bin("apt-get")
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\necho \"$*\" >> '%s'\nn=$(($(cat '%s') + 1)); echo $n > '%s'\n" % (log, counter, counter))
        handle.write("if [ -n '%s' ] && [ -e '%s' ]; then echo \"W: GPG error: NO_PUBKEY\"; echo \"%s\" >&2; exit 100; fi\n"
                     % (fails_while, fails_while, REJECTED))
        handle.write("if [ $n -le %d ]; then echo 'W: Failed to fetch %s/./InRelease  Could not connect'; "
                     "echo 'W: Some index files failed to download. They have been ignored, or old ones used instead.'; "
                     "fi\nexit 0\n" % (transient_failures, URI))
    return log


def apt_dir(tmp_path):
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    (root / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    return root


def run(run_module, root, check_mode=False, diff=False, **options):
    args = dict(uri=URI, suite="./", source_file=str(root / "sources.list.d" / "doca.list"),
                keyring=str(root / "keyrings" / "doca.asc"), key_url=key("apt_repo_key.asc"), fingerprints=[PINNED],
                label="doca_ofed", retry_delay=0, apt_dir=str(root))
    args.update(options)
    if diff:
        args["_ansible_diff"] = True
    return run_module(module, args, check_mode=check_mode)


def test_adds_key_and_source_fetches_the_lists_then_changes_nothing(run_module, fake_bin, tmp_path):
    root = apt_dir(tmp_path)
    log = apt_get(fake_bin, tmp_path)
    predicted, failed = run(run_module, root, check_mode=True, diff=True)
    assert not failed and predicted["changed"] and predicted["refreshed"] and predicted["msg"].startswith("doca_ofed: would:")
    assert predicted["diff"]["after"] == "# Ansible managed\ndeb [signed-by=%s] %s ./\n" % (root / "keyrings" / "doca.asc", URI)
    assert not (root / "sources.list.d" / "doca.list").exists() and not log.exists()

    result, failed = run(run_module, root)
    assert not failed and result["changed"] and result["key_changed"] and result["source_changed"] and result["refreshed"]
    # The same bytes the role's template wrote before: a node provisioned by an earlier release stays unchanged.
    assert (root / "sources.list.d" / "doca.list").read_text() == predicted["diff"]["after"]
    assert primary_fingerprints((root / "keyrings" / "doca.asc").read_bytes()) == [PINNED]
    assert log.read_text().splitlines() == ["update -o DPkg::Lock::Timeout=60 -o Dir::Etc=%s" % root]

    again, failed = run(run_module, root, key_url=key("gone.asc"))
    assert not failed and not again["changed"] and not again["refreshed"] and again["msg"] == "doca_ofed: nothing to do (%s)" % (
        root / "sources.list.d" / "doca.list")
    assert len(log.read_text().splitlines()) == 1
    forced, failed = run(run_module, root, update_cache="always")
    assert not failed and not forced["changed"] and forced["refreshed"] and len(log.read_text().splitlines()) == 2


def test_a_source_apt_rejects_is_put_back_and_apt_works_again(run_module, fake_bin, tmp_path):
    root = apt_dir(tmp_path)
    source = root / "sources.list.d" / "doca.list"
    log = apt_get(fake_bin, tmp_path, fails_while=str(source))
    result, failed = run(run_module, root, retries=1, hint="Set doca_ofed_repo_url.")
    assert failed and REJECTED in result["apt_errors"] and "W: GPG error: NO_PUBKEY" in result["apt_errors"]
    assert result["msg"].startswith("doca_ofed: apt-get update failed after adding %s for %s: " % (source, URI))
    assert "%s and %s put back as they were; apt-get update works again." % (source, root / "keyrings" / "doca.asc") \
        in result["msg"]
    assert result["msg"].endswith("then run the play again. Set doca_ofed_repo_url.")
    assert not source.exists() and not (root / "keyrings" / "doca.asc").exists() and not result["changed"]
    assert len(log.read_text().splitlines()) == 2  # one try (a signature apt refuses is not tried again), one after putting back

    # A source that was there before (another suite) is restored byte for byte; apt still fails on it, and says so.
    source.write_text("deb [signed-by=/etc/apt/keyrings/doca.asc] %s /\n" % URI)
    result, failed = run(run_module, root, retries=0)
    assert failed and "after changing %s" % source in result["msg"] and "put back as they were" in result["msg"]
    assert source.read_text() == "deb [signed-by=/etc/apt/keyrings/doca.asc] %s /\n" % URI
    assert "still fails (W: GPG error: NO_PUBKEY | %s)" % REJECTED in result["msg"]


def test_another_broken_source_is_named_and_this_one_stays(run_module, fake_bin, tmp_path):
    root = apt_dir(tmp_path)
    path = fake_bin("apt-get", rc=100, stdout="Err:3 https://ppa.example.invalid/stale jammy InRelease\n",
                    stderr="E: The repository 'https://ppa.example.invalid/stale jammy Release' does not have a "
                           "Release file.\n")
    assert path
    result, failed = run(run_module, root, retries=0)
    assert failed and result["msg"].startswith("doca_ofed: apt-get update fails on other sources, not on %s: " % URI)
    assert "https://ppa.example.invalid/stale jammy Release" in result["msg"] and "put back" not in result["msg"]
    assert (root / "sources.list.d" / "doca.list").exists() and (root / "keyrings" / "doca.asc").exists()


def test_a_failed_fetch_is_tried_again(run_module, fake_bin, tmp_path):
    root = apt_dir(tmp_path)
    log = apt_get(fake_bin, tmp_path, transient_failures=1)
    result, failed = run(run_module, root, retries=1)
    assert not failed and result["refreshed"] and len(log.read_text().splitlines()) == 2
    (root / "sources.list.d" / "doca.list").unlink()
    log = apt_get(fake_bin, tmp_path, transient_failures=5)
    result, failed = run(run_module, root, retries=2)
    assert failed and len(log.read_text().splitlines()) == 4  # three tries, one after putting back
    assert "W: Failed to fetch %s/./InRelease  Could not connect" % URI in result["apt_errors"]


def test_another_installers_source_is_reused_when_its_keyring_holds_only_pinned_keys(run_module, fake_bin, tmp_path):
    root = apt_dir(tmp_path)
    log = apt_get(fake_bin, tmp_path)
    keyring = tmp_path / "cuda-archive-keyring.gpg"
    keyring.write_bytes(dearmor(open(key("apt_repo_key.asc")[7:], "rb").read()))
    theirs = root / "sources.list.d" / "cuda-ubuntu2404-x86_64.list"
    theirs.write_text("deb [signed-by=%s] %s/ /\n" % (keyring, URI))
    ours = root / "sources.list.d" / "doca.list"
    ours.write_text("deb [signed-by=/x] %s ./\n" % URI)
    result, failed = run(run_module, root, reuse_existing=True, key_url="")
    assert not failed and result["reused"] and result["source"] == str(theirs) and result["fingerprints"] == [PINNED]
    # Its lists are fetched every time: nothing says they were, or are current.
    assert result["source_changed"] and not ours.exists() and result["refreshed"] and log.exists()
    again, failed = run(run_module, root, reuse_existing=True, key_url="")
    assert not failed and not again["changed"] and again["refreshed"]

    keyring.write_bytes(dearmor(open(key("other_key.asc")[7:], "rb").read()))
    ours.write_text("kept\n")
    result, failed = run(run_module, root, reuse_existing=True, hint="Or pin it in cuda_repo_key_fingerprints.")
    assert failed and result["unpinned"] == [OTHER] and ours.read_text() == "kept\n"
    assert "the source %s names %s: holds a key not pinned; apt would trust %s" % (theirs, keyring, OTHER) in result["msg"]
    assert "Remove %s (then doca_ofed adds its own source and key). Or pin it" % theirs in result["msg"]


def test_a_key_not_pinned_is_refused_before_anything_is_written(run_module, fake_bin, tmp_path):
    root = apt_dir(tmp_path)
    log = apt_get(fake_bin, tmp_path)
    result, failed = run(run_module, root, key_url=key("other_key.asc"))
    assert failed and result["unpinned"] == [OTHER] and "so it was not written" in result["msg"]
    assert not (root / "sources.list.d" / "doca.list").exists() and not (root / "keyrings").exists() and not log.exists()
    result, failed = run(run_module, root, key_url=key("missing.asc"), retries=1)
    assert failed and result["msg"].startswith("doca_ofed: could not fetch the repository key")


def test_bad_input_is_refused_and_changes_nothing(run_module, tmp_path):
    root = apt_dir(tmp_path)
    result, failed = run(run_module, root, fingerprints=["3BF863CC"])
    assert failed and result["msg"] == ("doca_ofed: fingerprints: 3BF863CC; give the full fingerprints (40 hex digits) "
                                        "of the keys the repository is signed with. Nothing was changed.")
    result, failed = run(run_module, root, key_url="")
    assert failed and "key_url is empty and no other source for %s is reused" % URI in result["msg"]
    result, failed = run(run_module, root, retries=-1)
    assert failed and "retries and retry_delay take 0 or more" in result["msg"]
    assert os.listdir(str(root / "sources.list.d")) == []


def real_apt(fake_bin, tmp_path):
    """apt-get itself (Debian's), its lists and cache under tmp_path instead of /var (the module points it at the
    fixture's apt directory with Dir::Etc)."""
    state, cache = tmp_path / "state", tmp_path / "cache"
    (state / "lists" / "partial").mkdir(parents=True)
    (cache / "archives" / "partial").mkdir(parents=True)
    path = fake_bin("apt-get")
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\nexec /usr/bin/apt-get \"$@\" -o Dir::State='%s' -o Dir::Cache='%s' -o Debug::NoLocking=1 "
                     "-o APT::Sandbox::User=root\n" % (state, cache))
    return state / "lists"


@pytest.mark.skipif(not (os.path.exists("/usr/bin/apt-get") and shutil.which("gpg") and shutil.which("dpkg-deb")),
                    reason="needs apt-get, gpg and dpkg-deb (Debian, as CI)")
def test_real_apt_fetches_a_pinned_repository_and_its_rejection_is_put_back(run_module, fake_bin, tmp_path):
    apt_repo.build_all(str(tmp_path / "repos"))
    uri = "file:%s" % (tmp_path / "repos" / "doca")
    root = apt_dir(tmp_path)
    (root / "sources.list").write_text("")
    lists = real_apt(fake_bin, tmp_path)
    result, failed = run(run_module, root, uri=uri, key_url="file://%s" % (tmp_path / "repos" / "doca" / "key.asc"))
    assert not failed and result["refreshed"], result
    assert [name for name in os.listdir(str(lists)) if "_Packages" in name]  # Packages, or Packages.lz4

    # The repository is signed by the fixture key, not by the one this run is told to pin and fetch: apt rejects it
    # (exit 0 with the lists of before, or 100 without any); the module puts both files back and apt works again.
    (root / "sources.list.d" / "doca.list").unlink()
    (root / "keyrings" / "doca.asc").unlink()
    result, failed = run(run_module, root, uri=uri, key_url=key("other_key.asc"), fingerprints=[OTHER])
    assert failed and any("NO_PUBKEY" in line for line in result["apt_errors"]), result
    assert "put back as they were; apt-get update works again." in result["msg"]
    assert not (root / "sources.list.d" / "doca.list").exists() and not (root / "keyrings" / "doca.asc").exists()
