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
    os.symlink(REPO, LINK)
if DEV_ROOT not in sys.path:
    sys.path.insert(0, DEV_ROOT)
