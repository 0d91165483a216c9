# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Validation of the site's variables before any host is touched (module_utils/site_validate.py)."""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.module_utils.fanout import fanout_roles
from ansible_collections.moe_infra.deepep.plugins.module_utils.site_validate import (
    interpreter_problems,
    manual_mapping,
    source_nvshmem_problems,
    tag_problems,
    validate,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.topology import deepep_mapping_string, nvshmem_hca_list


ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


def role_options():
    """{name: option} from every role's meta/argument_specs.yml (entry point main), as installed beside this
    plugin."""
    options = {}
    for role in sorted(os.listdir(ROLES)):
        path = os.path.join(ROLES, role, "meta", "argument_specs.yml")
        if os.path.isfile(path):
            with open(path) as handle:
                spec = yaml.safe_load(handle) or {}
            options.update(((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {})
    return options


def deepep_site_problems(site_vars, run_tags=None, skip_tags=None):
    """{name: value} of the variables set for a host -> [{var, value, accepted, msg}]; with ansible_run_tags and
    ansible_skip_tags, also tags that name no layer."""
    if not isinstance(site_vars, dict):
        raise AnsibleFilterError("deepep_site_problems: expected a dict of variables, got %r" % (site_vars,))
    # Filters run on the controller, where the cache and the source archives are.
    return tag_problems(run_tags, skip_tags) + validate(site_vars, os.path.isdir, os.path.exists, role_options())


def deepep_manual_mapping(topology, value, gpu_count, hcas):
    """gpu_nic_topology_info's result with the hand-written mapping in place of the discovered one:
    {topology, problems}; problems name the entry and what is accepted."""
    if not isinstance(topology, dict):
        raise AnsibleFilterError("deepep_manual_mapping: expected gpu_nic_topology_info's result")
    mapping, problems = manual_mapping(value, gpu_count, hcas)
    result = dict(topology)
    if not problems:
        result.update(mapping=mapping, deepep_device_to_hca_mapping=deepep_mapping_string(mapping),
                      nvshmem_hca_list=nvshmem_hca_list(mapping), mapping_source="deepep_hca_mapping")
    return {"topology": result, "problems": problems}


def deepep_fanout_roles(plans, offline=False):
    """[{host, fingerprint, needs, cached}] -> {host: none | cache | build | wait}."""
    if not isinstance(plans, list):
        raise AnsibleFilterError("deepep_fanout_roles: expected a list of {host, fingerprint, needs, cached}")
    try:
        return fanout_roles(plans, bool(offline))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def deepep_source_nvshmem_problems(rdma, method, doca_policy="auto", include_dirs=None, source=None):
    """rdma_hca_info's result -> [{var, value, accepted, msg}]: nvshmem_ibgda_method=source without IBGDA-capable
    rdma-core that this run will install. source: {src, ref, version} of the NVSHMEM source (read on the
    controller)."""
    if not isinstance(rdma, dict):
        raise AnsibleFilterError("deepep_source_nvshmem_problems: expected rdma_hca_info's result")
    source = {k: v for k, v in (source or {}).items() if k in ("src", "ref", "version")}
    return source_nvshmem_problems(method, rdma, doca_policy, include_dirs or [], source)


def deepep_interpreter_problems(stack, deepep_version, python):
    """torch_stack_info's result for deepep_python -> [{var, value, accepted, msg}]: no torch, or for V2 a torch
    older than 2.10 or an NCCL older than 2.30.4."""
    if not isinstance(stack, dict):
        raise AnsibleFilterError("deepep_interpreter_problems: expected torch_stack_info's result")
    return interpreter_problems(stack, deepep_version, python)


class FilterModule(object):
    def filters(self):
        return {"deepep_site_problems": deepep_site_problems, "deepep_manual_mapping": deepep_manual_mapping,
                "deepep_fanout_roles": deepep_fanout_roles,
                "deepep_source_nvshmem_problems": deepep_source_nvshmem_problems,
                "deepep_interpreter_problems": deepep_interpreter_problems}
