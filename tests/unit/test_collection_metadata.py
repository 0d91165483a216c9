# -*- coding: utf-8 -*-
"""The collection says one thing about the ansible-core it runs on: every role's min_ansible_version is the lower
bound of meta/runtime.yml's requires_ansible, which `make compat` runs the tests on (requirements/compat.txt)."""
from __future__ import annotations

import glob
import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_roles_and_runtime_name_the_same_oldest_ansible_core():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        requires = yaml.safe_load(handle)["requires_ansible"]
    lower = re.search(r">=\s*(\d+\.\d+)", requires).group(1)
    with open(os.path.join(REPO, "requirements", "compat.txt")) as handle:
        tested = re.search(r"^ansible-core==(\d+\.\d+)\.", handle.read(), re.M).group(1)
    assert tested == lower, (tested, requires)
    roles = {}
    for meta in glob.glob(os.path.join(REPO, "roles", "*", "meta", "main.yml")):
        with open(meta) as handle:
            roles[meta.split(os.sep)[-3]] = str(yaml.safe_load(handle)["galaxy_info"]["min_ansible_version"])
    assert roles and set(roles.values()) == {lower}, roles
