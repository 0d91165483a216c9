# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the doctor's report (module_utils/report/doctor.py): checks across the inventory and the table.

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def deepep_doctor_fleet(nodes):
    """[{host, hostname, gpu_count, hca_count}], or {host: deepep_doctor's result} -> {host: [findings]} (KF30
    hostnames, GPU counts)."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import fleet_findings

    if isinstance(nodes, dict) and all(isinstance(r, dict) and isinstance(r.get("node"), dict) for r in nodes.values()):
        nodes = [dict(result["node"], host=host) for host, result in nodes.items()]
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and "host" in n for n in nodes):
        raise AnsibleFilterError("_deepep_doctor_fleet: expected a list of {host, hostname, gpu_count, hca_count}, or "
                                 "{host: deepep_doctor's result}")
    return fleet_findings(nodes)


def deepep_doctor_report(findings, fleet=None):
    """The node's findings with the fleet's merged in, and their summary: {findings, summary}."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import merge, summary

    if not isinstance(findings, list):
        raise AnsibleFilterError("_deepep_doctor_report: expected deepep_doctor's findings (a list)")
    merged = merge(findings, fleet or [])
    return {"findings": merged, "summary": summary(merged)}


def deepep_preflight_checks(facts_by_host, host):
    """{host: ansible_facts} of the play's hosts -> this host's preflight checks ({findings, summary}): the
    deepep facts' checks (deepep_facts' preflight_checks) with the inventory's (KF30 hostnames, GPU counts) over
    every host that has them."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import fleet_findings

    if not isinstance(facts_by_host, dict) or host not in facts_by_host:
        raise AnsibleFilterError("_deepep_preflight_checks: expected {host: ansible_facts} with %r in it" % (host,))

    def checks(facts):
        return ((facts or {}).get("deepep") or {}).get("checks")
    if checks(facts_by_host[host]) is None:
        # Read without the checks (ansible-core 2.18 templates a role variable that uses this filter even where the
        # expression does not take that branch): nothing was checked, nothing found.
        return deepep_doctor_report([])
    nodes = [dict(checks(facts)["node"], host=name) for name, facts in facts_by_host.items() if checks(facts)]
    return deepep_doctor_report(checks(facts_by_host[host])["findings"], fleet_findings(nodes).get(host, []))


def deepep_doctor_table(findings, width=60):
    """Plain-text lines: id, status, evidence, fix."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import table

    return table(findings, int(width))


class FilterModule(object):
    def filters(self):
        return {
            "_deepep_doctor_fleet": deepep_doctor_fleet,
            "_deepep_doctor_report": deepep_doctor_report,
            "_deepep_doctor_table": deepep_doctor_table,
            "_deepep_preflight_checks": deepep_preflight_checks,
        }
