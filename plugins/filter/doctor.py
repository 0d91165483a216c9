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


def deepep_preflight_checks(facts_by_host, host=None):
    """{host: ansible_facts} of the play's hosts -> this host's preflight checks ({findings, summary}), or with no
    host every host's ({host: {findings, summary}}, the inventory's checks worked out once): the deepep facts'
    checks (deepep_facts' preflight_checks) with the inventory's (KF30 hostnames, GPU counts) over every host that
    has them."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import fleet_findings

    if not isinstance(facts_by_host, dict) or (host is not None and host not in facts_by_host):
        raise AnsibleFilterError("_deepep_preflight_checks: expected {host: ansible_facts}%s" % (
            "" if host is None else " with %r in it" % (host,)))

    def checks(facts):
        return ((facts or {}).get("deepep") or {}).get("checks")
    nodes = [dict(checks(facts)["node"], host=name) for name, facts in facts_by_host.items() if checks(facts)]
    fleet = fleet_findings(nodes)

    def report(name):
        # A host read without the checks: nothing was checked, nothing found.
        found = checks(facts_by_host[name])
        return deepep_doctor_report(found["findings"] if found else [], fleet.get(name, []) if found else [])
    return report(host) if host is not None else dict((name, report(name)) for name in facts_by_host)


def deepep_doctor_reports(results_by_host, across_inventory=True):
    """{host: deepep_doctor's result} -> {host: {findings, summary}}: each host's findings, with the checks across
    the inventory (KF30 hostnames, GPU counts) over every host given when across_inventory."""
    if not isinstance(results_by_host, dict) or not all(
            isinstance(result, dict) and isinstance(result.get("findings"), list) for result in results_by_host.values()):
        raise AnsibleFilterError("_deepep_doctor_reports: expected {host: deepep_doctor's result}")
    fleet = deepep_doctor_fleet(results_by_host) if across_inventory and results_by_host else {}
    return dict((host, deepep_doctor_report(result["findings"], fleet.get(host, [])))
                for host, result in results_by_host.items())


def deepep_doctor_table(findings, width=60):
    """Plain-text lines: id, status, evidence, fix."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import table

    return table(findings, int(width))


class FilterModule(object):
    def filters(self):
        return {
            "_deepep_doctor_fleet": deepep_doctor_fleet,
            "_deepep_doctor_report": deepep_doctor_report,
            "_deepep_doctor_reports": deepep_doctor_reports,
            "_deepep_doctor_table": deepep_doctor_table,
            "_deepep_preflight_checks": deepep_preflight_checks,
        }
