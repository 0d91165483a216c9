# -*- coding: utf-8 -*-
"""Make the checkout importable as ansible_collections.moe_infra.deepep for pytest; TEST_CLAIMS shares the tests
between pytest processes."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEV_ROOT = os.path.join(REPO, ".build", "dev")
LINK = os.path.join(DEV_ROOT, "ansible_collections", "moe_infra", "deepep")

if not os.path.islink(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    try:
        os.symlink(REPO, LINK)
    except FileExistsError:  # another shard made it first
        pass
if DEV_ROOT not in sys.path:
    sys.path.insert(0, DEV_ROOT)


def _claimed(claims, item):
    """True when this process is the first to claim the test in the directory claims (an exclusive create)."""
    name = hashlib.sha256(item.nodeid.encode()).hexdigest()
    try:
        os.close(os.open(os.path.join(claims, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """TEST_CLAIMS=DIR: several pytest processes (scripts/run-integration's shards) share the collected tests, each
    running the next one no other has claimed in DIR, in collection order; so a shard that drew short tests takes
    more, and the shards end within about one short test of each other (a fixed split left them 200 s apart).
    Each claims the test after the one it runs before running it, for pytest's teardown to know what comes next.
    pytest's own loop otherwise (main.py's pytest_runtestloop)."""
    claims = os.environ.get("TEST_CLAIMS")
    if not claims or session.config.option.collectonly:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted("%d error%s during collection" % (
            session.testsfailed, "s" if session.testsfailed != 1 else ""))
    items = session.items

    def next_claimed(start):
        return next((index for index in range(start, len(items)) if _claimed(claims, items[index])), None)

    current = next_claimed(0)
    while current is not None:
        following = next_claimed(current + 1)
        item = items[current]
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[following] if following is not None else None)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        current = following
    return True
