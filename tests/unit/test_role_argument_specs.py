# -*- coding: utf-8 -*-
"""Each role's meta/argument_specs.yml and defaults/main.yml say the same thing: every default is a documented
option (ansible-doc shows the spec), every optional option has a default, and where the spec states a default it
is the value the role really uses, of the declared type."""

from __future__ import annotations

import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(os.listdir(os.path.join(REPO, "roles")))
TYPES = {"str": str, "path": str, "raw": object, "int": int, "float": (int, float), "bool": bool, "list": list,
         "dict": dict}


def load(role, *path):
    full = os.path.join(REPO, "roles", role, *path)
    if not os.path.isfile(full):
        return None
    with open(full) as handle:
        return yaml.safe_load(handle) or {}


def spec_options(role):
    """Options of every entry point, by name (an option documented in two entry points must agree)."""
    specs = load(role, "meta", "argument_specs.yml") or {}
    options = {}
    for entry in (specs.get("argument_specs") or {}).values():
        for name, option in (entry.get("options") or {}).items():
            assert options.get(name, option) == option, "%s: %s documented differently in two entry points" % (
                role, name)
            options[name] = option
    return options


def templated(value):
    return isinstance(value, str) and "{{" in value


def test_every_role_has_a_spec():
    assert ROLES and all(load(role, "meta", "argument_specs.yml") for role in ROLES), ROLES


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = {k: v for k, v in (load(role, "defaults", "main.yml") or {}).items() if not k.startswith("__")}
    options = spec_options(role)
    problems = []
    # A layer's choices that others read before its role runs are defaulted by the settings role (one home) and
    # documented in both specs, alike.
    settings = load("settings", "defaults", "main.yml") or {}
    settings_options = spec_options("settings")
    for name in sorted(set(options) - set(defaults)):
        if role != "settings" and name in settings:
            if options[name] != settings_options.get(name):
                problems.append("%s is documented differently here and in the settings role" % name)
            defaults[name] = settings[name]
    for name in sorted(set(defaults) - set(options)):
        problems.append("%s is in defaults/main.yml but not in meta/argument_specs.yml" % name)
    for name, option in sorted(options.items()):
        if option.get("required") or (name not in defaults and not name.startswith(role + "_")):
            continue  # required, or another role's variable this role reads (documented, defaulted there)
        if name not in defaults:
            problems.append("%s is optional in meta/argument_specs.yml but has no default in defaults/main.yml" % name)
            continue
        value = defaults[name]
        if "default" in option and not templated(value) and option["default"] != value:
            problems.append("%s: spec default %r, defaults/main.yml %r" % (name, option["default"], value))
        expected = TYPES.get(option.get("type", "str"), object)
        if value is not None and not templated(value) and not isinstance(value, expected):
            problems.append("%s: type %s in the spec, %r in defaults/main.yml" % (name, option.get("type"), value))
        if option.get("type") == "int" and isinstance(value, bool):
            problems.append("%s: type int in the spec, a bool in defaults/main.yml" % name)
        values = value if option.get("type") == "list" else [value]  # a list's choices are its elements'
        if "choices" in option and not templated(value) and not set(values) <= set(option["choices"]):
            problems.append("%s: default %r is not one of its choices %s" % (name, value, option["choices"]))
    assert not problems, "\n".join(problems)


def included_entry_points():
    """(file, role, tasks_from) of every include_role / import_role with tasks_from in the playbooks and roles."""
    found = []

    def walk(items, path):
        for item in items or []:
            if not isinstance(item, dict):
                continue
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                call = item.get(key)
                if isinstance(call, dict) and call.get("tasks_from"):
                    found.append((path, call["name"].split(".")[-1], call["tasks_from"]))
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                walk(item.get(key), path)

    for folder in ("playbooks", "roles"):
        for root, _dirs, files in os.walk(os.path.join(REPO, folder)):
            for entry in files:
                if entry.endswith(".yml"):
                    path = os.path.join(root, entry)
                    with open(path) as handle:
                        walk(yaml.safe_load(handle), os.path.relpath(path, REPO))
    return found


def test_every_entry_point_a_playbook_or_role_includes_is_declared():
    # ansible-doc shows what each entry point does and takes; an undeclared one runs unvalidated and undocumented
    # (the deepep role's preflight and python were).
    entries = included_entry_points()
    assert ("playbooks/build_layers.yml", "deepep", "preflight") in entries
    # node_reboot's settle.yml includes each rebooted layer's verify by a templated name: the roles that give a
    # reboot reason (deepep_reboot_reasons) stand for it.
    entries = [entry for entry in entries if "{{" not in entry[1]] + [
        ("roles/node_reboot/tasks/settle.yml", role, "verify") for role in ROLES if role != "node_reboot"
        and os.path.isdir(os.path.join(REPO, "roles", role, "tasks")) and "deepep_reboot_reasons" in "".join(open(path).read() for path in sorted(
            os.path.join(REPO, "roles", role, "tasks", entry) for entry in os.listdir(
                os.path.join(REPO, "roles", role, "tasks"))))]
    assert len(entries) > 4
    undeclared = ["%s: %s tasks_from %s" % (path, role, name) for path, role, name in entries
                  if name not in ((load(role, "meta", "argument_specs.yml") or {}).get("argument_specs") or {})]
    assert undeclared == []
