# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Validation of the site's variables before any host is touched (module_utils/report/site_validate.py).

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def plain_data(value):
    """The value as plain dicts, lists and scalars. ArgumentSpecValidator deep-copies what it checks; a lazy
    template container copies its whole templating context with it (seconds per host in site.yml)."""
    if isinstance(value, Mapping):
        return dict((plain_data(key), plain_data(item)) for key, item in value.items())
    if isinstance(value, (list, tuple, set)):
        return [plain_data(item) for item in value]
    for kind in (bool, int, float, str, bytes):
        if isinstance(value, kind):
            return kind(value)
    return value


def deepep_site_problems(site_vars, run_tags=None, skip_tags=None):
    """{name: value} of the variables set for a host -> [{var, value, accepted, msg}]; with ansible_run_tags and
    ansible_skip_tags, also tags that name no layer."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report import site_validate
    from ansible_collections.moe_infra.deepep.plugins.plugin_utils.role_specs import role_options

    if not isinstance(site_vars, Mapping):
        raise AnsibleFilterError("_deepep_site_problems: expected a dict of variables, got %r" % (site_vars,))
    # Filters run on the controller, where the cache and the source archives are.
    return site_validate.tag_problems(run_tags, skip_tags) + site_validate.validate(
        plain_data(site_vars), os.path.isdir, os.path.exists, role_options())


def deepep_fanout_roles(plans, offline=False):
    """[{host, fingerprint, needs, cached}], or {host: source_build's plan} in play order, -> {host: none | cache |
    build | wait}."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.fanout import fanout_roles

    if isinstance(plans, Mapping):
        # A host whose plan was skipped (its layer is off there) takes no part.
        plans = dict((host, plan) for host, plan in plans.items() if not (isinstance(plan, Mapping) and plan.get("skipped")))
        if not all(isinstance(plan, Mapping) and "action" in plan for plan in plans.values()):
            raise AnsibleFilterError("_deepep_fanout_roles: expected {host: source_build's plan (check mode)}")
        plans = [{"host": host, "fingerprint": plan.get("fingerprint"), "needs": plan["action"] == "build",
                  "cached": bool(plan.get("cached"))} for host, plan in plans.items()]
    if not isinstance(plans, list):
        raise AnsibleFilterError("_deepep_fanout_roles: expected a list of {host, fingerprint, needs, cached}")
    try:
        return fanout_roles(plans, bool(offline))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def deepep_fanout_report(roles, plans, label):
    """_deepep_fanout_roles' {host: role}, {host: source_build's plan} -> one line per fingerprint."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.fanout import fanout_lines

    if not isinstance(roles, Mapping) or not isinstance(plans, Mapping):
        raise AnsibleFilterError("_deepep_fanout_report: expected {host: role} and {host: source_build's plan}")
    fingerprints = dict((host, plan.get("fingerprint")) for host, plan in plans.items() if isinstance(plan, Mapping))
    return fanout_lines(dict(roles), fingerprints, str(label))


def deepep_source_nvshmem_problems(rdma, method, doca_policy="auto", include_dirs=None, source=None):
    """The RDMA reading (rdma of deepep_facts) -> [{var, value, accepted, msg}]: nvshmem_ibgda_method=source without IBGDA-capable
    rdma-core that this run will install. source: {src, ref, version} of the NVSHMEM source (read on the
    controller)."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report import site_validate

    if not isinstance(rdma, dict):
        raise AnsibleFilterError("_deepep_source_nvshmem_problems: expected the RDMA reading (rdma of deepep_facts)")
    source = {k: v for k, v in (source or {}).items() if k in ("src", "ref", "version")}
    return site_validate.source_nvshmem_problems(method, rdma, doca_policy, include_dirs or [], source)


def deepep_interpreter_problems(stack, deepep_version, python, nccl=None):
    """torch_stack_info's result for deepep_python -> [{var, value, accepted, msg}]: no torch, or for V2 a torch
    older than 2.10 or an NCCL older than 2.30.4 (the one the nccl layer of this run provides, when it runs), or
    no pip where that layer installs a wheel with it. nccl: the site's nccl_* variables when the run includes the
    nccl layer, else None."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.nccl import planned_version, with_defaults
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report import site_validate

    if not isinstance(stack, dict):
        raise AnsibleFilterError("_deepep_interpreter_problems: expected torch_stack_info's result")
    if nccl is not None and not isinstance(nccl, dict):
        raise AnsibleFilterError("_deepep_interpreter_problems: nccl: expected the nccl_* variables, got %r" % (nccl,))
    if nccl is None:
        return site_validate.interpreter_problems(stack, deepep_version, python)
    return site_validate.interpreter_problems(stack, deepep_version, python, planned_version(nccl),
                                              with_defaults(nccl)["nccl_method"])


def deepep_proxy_env(http_proxy, https_proxy="", no_proxy=""):
    """The play-level environment for a site behind a proxy: each set value under its lower- and upper-case name
    (apt and git read the lower-case ones, some tools only the upper-case); {} when none is set."""
    env = {}
    for name, value in (("http_proxy", http_proxy), ("https_proxy", https_proxy), ("no_proxy", no_proxy)):
        value = str(value or "").strip()
        if value:
            env[name] = env[name.upper()] = value
    return env


def deepep_run_layers(run_tags, skip_tags=None):
    """ansible_run_tags, ansible_skip_tags -> the layers this run runs, in order."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report import site_validate

    for name, tags in (("ansible_run_tags", run_tags), ("ansible_skip_tags", skip_tags)):
        if tags is not None and (isinstance(tags, (str, Mapping)) or not isinstance(tags, (list, tuple, set))):
            raise AnsibleFilterError("_deepep_run_layers: expected %s as a list of tags, got %r" % (name, tags))
    return site_validate.run_layers(list(run_tags or []), list(skip_tags or []))


class FilterModule(object):
    def filters(self):
        return {"_deepep_site_problems": deepep_site_problems, "_deepep_fanout_roles": deepep_fanout_roles,
                "_deepep_fanout_report": deepep_fanout_report,
                "_deepep_source_nvshmem_problems": deepep_source_nvshmem_problems,
                "_deepep_interpreter_problems": deepep_interpreter_problems, "_deepep_run_layers": deepep_run_layers,
                "_deepep_proxy_env": deepep_proxy_env}
