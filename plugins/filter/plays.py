# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The hosts the playbooks' plays run on.

ansible-core templates a play's `hosts` in its main process, before it forks the worker processes that run the
play's tasks, and finds a collection filter by importing every filter file of the collection: the filter here also
imports the module_utils that this collection's filters and action plugins use on the controller, and reads the
roles' argument specs. Each worker then has all of them from the fork instead of importing and reading them again
(docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# What the filters and the action plugins import when called, in the workers of nearly every task of a run.
CONTROLLER_MODULE_UTILS = (
    "report.site_validate", "report.layer_plan", "report.doctor", "report.cluster_report_writer", "build.fanout",
    "build.nvshmem", "build.nccl", "build.build_commands", "build.build_state", "build.fingerprint",
    "build.build_progress", "deepep.compat", "deepep.build_inputs", "deepep.envscript", "deepep.jit_cache",
    "deepep.bench_reuse", "system.prerequisites", "node.nvidia_params",
)
PENDING_GROUP = "deepep_reboot_pending"


def deepep_play_hosts(groups, run_tags=None, skip_tags=None, layers=None, pending=False):
    """groups -> the host pattern of a play: every host but those left waiting for a reboot (deepep_reboot: never
    puts them in the group deepep_reboot_pending; pending=True keeps them: the system layers reboot them).
    With layers: no host at all when the run's --tags / --skip-tags (run_tags, skip_tags) select none of them,
    so that a play with nothing to do starts no task on any host (a --tags deepep run and the system layers)."""
    if not isinstance(groups, Mapping):
        raise AnsibleFilterError("_deepep_play_hosts: expected the groups of the inventory, got %r" % (groups,))
    if layers is not None:
        # Here, not at the top: ansible-core imports every filter file to find any one filter (the note above).
        from ansible_collections.moe_infra.deepep.plugins.module_utils.report import site_validate

        if isinstance(layers, str) or not all(isinstance(layer, str) for layer in layers):
            raise AnsibleFilterError("_deepep_play_hosts: layers must be a list of layer names, got %r" % (layers,))
        unknown = [layer for layer in layers if layer not in site_validate.LAYER_NAMES]
        if unknown:
            raise AnsibleFilterError("_deepep_play_hosts: no such layer %s; accepted: %s" % (
                ", ".join(unknown), ", ".join(site_validate.LAYER_NAMES)))
        if not set(layers) & set(site_validate.run_layers(run_tags, skip_tags)):
            return []
    for name in CONTROLLER_MODULE_UTILS:
        importlib.import_module("ansible_collections.moe_infra.deepep.plugins.module_utils." + name)
    # And the roles' argument specs validate.yml checks each host's variables against, read once.
    importlib.import_module("ansible_collections.moe_infra.deepep.plugins.plugin_utils.role_specs").role_options()
    return "all:!%s" % PENDING_GROUP if PENDING_GROUP in groups and not pending else "all"


class FilterModule(object):
    def filters(self):
        return {"_deepep_play_hosts": deepep_play_hosts}
