# -*- coding: utf-8 -*-
"""The filter namespace users see: only the filters docs/roles-and-modules.md lists as public have public names;
every other filter is private (a name starting with `_`, documented as "(private)"), and every filter has its
documentation file and every documentation file its filter."""

from __future__ import annotations

import importlib
import os
import re

import yaml

COLLECTION = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
FILTER_DIR = os.path.join(COLLECTION, "plugins", "filter")


def registered_filters():
    names = {}
    for entry in sorted(os.listdir(FILTER_DIR)):
        if entry.endswith(".py") and not entry.startswith("__"):
            module = importlib.import_module("ansible_collections.moe_infra.deepep.plugins.filter." + entry[:-3])
            for name in module.FilterModule().filters():
                assert name not in names, "%s registered by %s and %s" % (name, names.get(name), entry)
                names[name] = entry
    return names


def documented_public_filters():
    with open(os.path.join(COLLECTION, "docs", "roles-and-modules.md")) as handle:
        text = handle.read()
    paragraph = text[text.index("Public filters"):text.index("Private filters")]
    return set(name for name in re.findall(r"`([a-z_]+)`", paragraph) if not name.startswith("docs"))


def test_only_the_documented_public_filters_have_public_names():
    public = set(name for name in registered_filters() if not name.startswith("_"))
    assert public == documented_public_filters()
    # The helpers the roles and playbooks use among themselves are not part of it.
    assert not public & {"deepep_run_layers", "deepep_fanout_roles", "deepep_summary_lines", "deepep_layer_plan"}


def test_every_filter_has_its_documentation_file_and_private_ones_say_so():
    filters = registered_filters()
    docs = set(entry[:-4] for entry in os.listdir(FILTER_DIR) if entry.endswith(".yml"))
    assert docs == set(filters)
    for name in filters:
        with open(os.path.join(FILTER_DIR, name + ".yml")) as handle:
            documentation = yaml.safe_load(handle)["DOCUMENTATION"]
        assert documentation["name"] == name
        assert documentation["short_description"].startswith("(private) ") == name.startswith("_"), name


def test_the_roles_and_playbooks_call_only_registered_filters():
    filters = registered_filters()
    used = set()
    for folder in ("roles", "playbooks"):
        for root, _dirs, files in os.walk(os.path.join(COLLECTION, folder)):
            for entry in files:
                if entry.endswith((".yml", ".j2")):
                    with open(os.path.join(root, entry)) as handle:
                        used.update(re.findall(r"moe_infra\.deepep\.(_?[a-z_]+)\(?", handle.read()))
    called = set(name for name in used if name in filters or name.startswith("_"))
    assert called - set(filters) == set()
    assert any(name.startswith("_") for name in called)


def test_the_filter_files_import_no_module_utils_until_a_filter_is_called():
    """ansible-core imports every filter file of the collection, from source, in each task's worker process, to
    find any one filter: what those files import at the top is paid by nearly every task of a run."""
    import subprocess
    import sys

    names = sorted(entry[:-3] for entry in os.listdir(FILTER_DIR) if entry.endswith(".py") and not entry.startswith("__"))
    code = ("import sys\n"
            "for name in %r:\n"
            "    __import__('ansible_collections.moe_infra.deepep.plugins.filter.' + name)\n"
            "print(sorted(m for m in sys.modules if '.module_utils.' in m and m.startswith('ansible_collections.')))\n"
            "from ansible_collections.moe_infra.deepep.plugins.filter.system import doca_ofed_state\n"
            "doca_ofed_state({'hcas': [], 'rdma_core': {}})\n"
            "print(sorted(m for m in sys.modules if '.module_utils.' in m and m.startswith('ansible_collections.')))\n"
            % (names,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stdout.splitlines()
    assert len(names) >= 7 and before == "[]"
    # Calling a filter imports what it needs, and only then.
    assert "ansible_collections.moe_infra.deepep.plugins.module_utils.system.system_layers" in after
