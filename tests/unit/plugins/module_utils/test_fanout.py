# -*- coding: utf-8 -*-
"""Build once, install everywhere: one builder per uncached fingerprint, the rest install."""
from __future__ import annotations

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.fanout import NO_FINGERPRINT, fanout_lines, fanout_roles


def plan(host, fp, needs=True, cached=False):
    return {"host": host, "fingerprint": fp, "needs": needs, "cached": cached}


def test_one_builder_per_fingerprint():
    roles = fanout_roles([plan("a", "f1"), plan("b", "f1"), plan("c", "f2"), plan("d", "f1"), plan("e", "f2")])
    assert roles == {"a": "build", "b": "wait", "c": "build", "d": "wait", "e": "wait"}


def test_cached_and_up_to_date_nodes_build_nothing():
    roles = fanout_roles([plan("a", "f1", cached=True), plan("b", "f1", needs=False), plan("c", "f1", cached=True)])
    assert roles == {"a": "cache", "b": "none", "c": "cache"}


def test_offline_needs_the_cache():
    assert fanout_roles([plan("a", "f1", cached=True), plan("b", "f1", needs=False)], offline=True) == {
        "a": "cache", "b": "none"}
    with pytest.raises(ValueError, match=r"offline: the cache lacks the build b \(fingerprint f2\), c \(fingerprint f2\)"):
        fanout_roles([plan("a", "f1", cached=True), plan("b", "f2"), plan("c", "f2")], offline=True)


def test_one_node_exports_a_build_the_cache_lacks():
    # Up to date on a, b and c, not in the cache: a alone exports it (the controller records what it fetched).
    roles = fanout_roles([plan("a", "f1", needs=False), plan("b", "f1", needs=False), plan("c", "f2", needs=False)])
    assert roles == {"a": "export", "b": "none", "c": "export"}
    # A node of this run builds it: nobody else exports that fingerprint.
    assert fanout_roles([plan("a", "f1", needs=False), plan("b", "f1")]) == {"a": "none", "b": "build"}
    assert fanout_roles([plan("a", "f1", needs=False, cached=True)]) == {"a": "none"}


def test_the_report_says_per_fingerprint_who_builds_and_who_installs():
    plans = [plan("a", "f1"), plan("b", "f1"), plan("c", "f2", cached=True), plan("d", "f1"), plan("e", None)]
    roles = fanout_roles(plans)
    fingerprints = dict((p["host"], p["fingerprint"]) for p in plans)
    assert fanout_lines(roles, fingerprints, "DeepEP") == [
        "DeepEP f1: build a; wait b, d", "DeepEP f2: cache c", "DeepEP %s: build e" % NO_FINGERPRINT]
