# -*- coding: utf-8 -*-
"""The settings role is the one home of the settings several roles and playbooks read: nothing copies one of its
defaults as a fallback, every role that reads one depends on it, and every play that reads one at play level
(environment, serial, a task outside a role) has it in scope (a play role, or an imported role that depends on it:
an included role's defaults are private to it, so its play would stop on an undefined variable)."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = os.path.join(REPO, "roles")
PLAYBOOKS = os.path.join(REPO, "playbooks")
SETTING = "moe_infra.deepep.settings"


def load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


SETTINGS = sorted(load(os.path.join(ROLES, "settings", "defaults", "main.yml")))


def reads(text):
    """The settings a text names as bare variables (hostvars[x].deepep_prefix is another host's, not this one)."""
    return set(name for name in SETTINGS if re.search(r"(?<![.\w])%s\b" % name, text))


def role_files(role):
    for folder in ("defaults", "vars", "tasks", "handlers", "templates", "meta"):
        for root, _dirs, files in os.walk(os.path.join(ROLES, role, folder)):
            for name in sorted(files):
                yield os.path.join(root, name)


def dependencies(role):
    meta = load(os.path.join(ROLES, role, "meta", "main.yml")) or {}
    return [entry["role"] if isinstance(entry, dict) else entry for entry in meta.get("dependencies") or []]


def test_the_settings_role_has_no_tasks_and_no_main_entry_point():
    # A main spec would put a validation task before every role that depends on it, per host and play.
    assert not os.path.exists(os.path.join(ROLES, "settings", "tasks"))
    specs = load(os.path.join(ROLES, "settings", "meta", "argument_specs.yml"))["argument_specs"]
    assert list(specs) == ["settings"] and sorted(specs["settings"]["options"]) == SETTINGS


@pytest.mark.parametrize("folder", ["roles", "playbooks"])
def test_no_default_of_a_setting_is_copied(folder):
    copies = []
    for root, _dirs, files in os.walk(os.path.join(REPO, folder)):
        for name in sorted(files):
            if not name.endswith(".yml") or os.path.join(root, name).startswith(os.path.join(ROLES, "settings")):
                continue
            with open(os.path.join(root, name)) as handle:
                for number, line in enumerate(handle, 1):
                    for setting in SETTINGS:
                        # default(<the setting itself>) is another host's value falling back to this one's.
                        if re.search(r"(?<![.\w])%s \| default\((?!%s\))" % (setting, setting), line):
                            copies.append("%s:%d: %s" % (os.path.relpath(os.path.join(root, name), REPO), number,
                                                         line.strip()))
    assert copies == []


def test_every_role_that_reads_a_setting_depends_on_the_settings_role():
    missing = []
    for role in sorted(os.listdir(ROLES)):
        if role == "settings":
            continue
        text = ""
        for path in role_files(role):
            if not path.endswith(os.path.join("meta", "main.yml")):
                with open(path) as handle:
                    text += handle.read()
        if reads(text) and SETTING not in dependencies(role):
            missing.append("%s reads %s" % (role, ", ".join(sorted(reads(text)))))
    assert missing == []


def plays():
    for name in sorted(os.listdir(PLAYBOOKS)):
        if name.endswith(".yml"):
            for play in load(os.path.join(PLAYBOOKS, name)) or []:
                if "hosts" in play:
                    yield name, play


def imported_roles(items):
    found = []
    for item in items or []:
        if isinstance(item, dict):
            call = item.get("ansible.builtin.import_role")
            if call:
                found.append(call["name"])
            for key in ("block", "rescue", "always"):
                found.extend(imported_roles(item.get(key)))
    return found


def test_every_play_that_reads_a_setting_has_the_settings_role_in_scope():
    assert len(list(plays())) > 10
    missing = []
    for name, play in plays():
        roles = [entry["role"] if isinstance(entry, dict) else entry for entry in play.get("roles") or []]
        roles += imported_roles(play.get("tasks"))
        in_scope = SETTING in roles or any(
            SETTING in dependencies(role.split(".")[-1]) for role in roles if role.startswith("moe_infra.deepep."))
        # What the play itself templates (keywords, vars, its tasks' arguments), not what its roles read.
        own = dict((key, value) for key, value in play.items() if key != "roles")
        if reads(json.dumps(own)) and not in_scope:
            missing.append("%s: %s reads %s" % (name, play["name"], ", ".join(sorted(reads(json.dumps(own))))))
    assert missing == []
