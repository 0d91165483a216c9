# -*- coding: utf-8 -*-
"""Make the checkout importable as ansible_collections.moe_infra.deepep for pytest."""

from __future__ import annotations

import os
import sys

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


def pytest_collection_modifyitems(config, items):
    """TEST_SHARD=i/n keeps every n-th test from the i-th on (scripts/run-integration runs the shards side by
    side). Round robin in collection order spreads a file's slow tests over the shards."""
    shard = os.environ.get("TEST_SHARD")
    if not shard:
        return
    index, count = (int(part) for part in shard.split("/"))
    if not 0 <= index < count:
        raise ValueError("TEST_SHARD=%s: want i/n with 0 <= i < n" % shard)
    kept = [item for number, item in enumerate(items) if number % count == index]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
