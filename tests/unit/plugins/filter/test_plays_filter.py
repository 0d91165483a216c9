# -*- coding: utf-8 -*-
"""The filter the playbooks' plays select their hosts with: every host but those waiting for a reboot, and the
controller-side code of the collection's filters and action plugins imported where it runs (ansible-core's main
process, before the workers fork)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter import plays

PLAY_HOSTS = plays.FilterModule().filters()["_deepep_play_hosts"]
COLLECTION = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
PREFIX = "ansible_collections.moe_infra.deepep.plugins.module_utils."


def test_every_host_until_one_waits_for_a_reboot():
    assert PLAY_HOSTS({"all": ["n1", "n2"], "ungrouped": ["n1", "n2"]}) == "all"
    assert PLAY_HOSTS({"all": ["n1", "n2"], "deepep_reboot_pending": ["n2"]}) == "all:!deepep_reboot_pending"


@pytest.mark.parametrize("groups", [None, ["all"], "all"])
def test_anything_but_the_groups_is_refused(groups):
    with pytest.raises(AnsibleFilterError, match="_deepep_play_hosts: expected the groups"):
        PLAY_HOSTS(groups)


def test_it_imports_what_the_filters_and_action_plugins_import_when_called():
    """Every module_utils module a filter or an action plugin imports is imported by the filter (itself or through
    another), except the image bake's and internode.yml's, which no provisioning run calls."""
    # In a fresh interpreter: what the call imports, not what earlier tests did.
    script = ("import sys; from ansible_collections.moe_infra.deepep.plugins.filter import plays; "
              "from ansible_collections.moe_infra.deepep.plugins.plugin_utils import role_specs; "
              "plays.deepep_play_hosts({}); print(len(role_specs._READ)); "
              "print(' '.join(sorted(n for n in sys.modules if n.startswith(%r))))" % PREFIX)
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "1"  # the roles' argument specs, read
    loaded = set(name[len(PREFIX):] for name in out[1].split())
    imported = set()
    for folder in ("filter", "action"):
        directory = os.path.join(COLLECTION, "plugins", folder)
        for entry in os.listdir(directory):
            if entry.endswith(".py"):
                with open(os.path.join(directory, entry)) as handle:
                    text = handle.read()
                for package, names in re.findall(r"from %s([a-z_.]+) import ([A-Za-z_, ]+)" % re.escape(PREFIX), text):
                    for name in names.replace(" ", "").split(","):
                        module = package + "." + name
                        try:
                            importlib.import_module(PREFIX + module)
                        except ImportError:
                            module = package  # a function or a constant of the module named before it
                        imported.add(module)
    assert {"report.site_validate", "build.build_state", "deepep.envscript"} <= imported
    assert imported - loaded == {"gcp.gcp_rollout", "report.nic_traffic"}


SYSTEM = ["doca_ofed", "cuda", "nvidia_driver", "nvidia_peermapping", "memlock", "gdrcopy"]


@pytest.mark.parametrize("run_tags, skip_tags, hosts", [
    (["all"], [], "all"),
    (["deepep"], [], []),  # a build-only run: the system layers' plays start no task
    (["nvshmem_ibgda", "deepep_build"], [], []),
    (["gdrcopy"], [], "all"),
    (["system"], [], "all"),
    (["all"], ["system"], []),  # every system layer skipped by their common tag
    (["all"], ["cuda"], "all"),
    (["preflight"], [], []),
])
def test_a_play_of_layers_the_run_does_not_select_gets_no_host(run_tags, skip_tags, hosts):
    assert PLAY_HOSTS({"all": ["n1"]}, run_tags, skip_tags, layers=SYSTEM, pending=True) == hosts


def test_pending_keeps_the_hosts_waiting_for_a_reboot():
    groups = {"all": ["n1", "n2"], "deepep_reboot_pending": ["n2"]}
    assert PLAY_HOSTS(groups, ["all"], [], layers=SYSTEM, pending=True) == "all"
    assert PLAY_HOSTS(groups, ["all"], [], layers=["deepep"]) == "all:!deepep_reboot_pending"


@pytest.mark.parametrize("layers, message", [
    ("cuda", "layers must be a list of layer names"),
    (["cuda", 3], "layers must be a list of layer names"),
    (["cuda", "kernel"], "no such layer kernel; accepted: doca_ofed, cuda"),
])
def test_a_layer_list_that_names_no_layer_is_refused(layers, message):
    with pytest.raises(AnsibleFilterError, match=message):
        PLAY_HOSTS({"all": ["n1"]}, ["all"], [], layers=layers)
