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


def _problems_sentence(host, findings):
    """'host: id | evidence | fix; ... . Nothing was changed.' for the findings that are problems."""
    problems = [f for f in findings if f.get("status") == "problem"]
    return "%s: %s. Nothing was changed." % (host, "; ".join(
        "%s | %s | %s" % (f.get("id"), f.get("evidence"), f.get("fix")) for f in problems))


def deepep_preflight_outcome(facts, host, checks=None, require_gpus=True, site_problems=None, sysfs_root="/sys"):
    """What the preflight role says of a host: {lines, stop}. lines: one per layer (what was found and what each
    layer would do), then with checks (this host's {findings, summary}) their summary and table. stop: why the host
    stops here ('' when it goes on): no NVIDIA GPU (with require_gpus), else the checks' problems (id, evidence,
    fix), else the caller's site_problems."""
    # The node report and its check of the facts are the _deepep_node_report filter's.
    from ansible_collections.moe_infra.deepep.plugins.filter.deepep import deepep_node_report

    node = facts
    lines = deepep_node_report(node, node.get("layers") if isinstance(node, dict) else None)
    if checks is not None:
        if not isinstance(checks, dict) or not isinstance(checks.get("findings"), list):
            raise AnsibleFilterError("_deepep_preflight_outcome: checks: expected this host's {findings, summary}")
        lines = lines + ["%s: preflight checks %s" % (host, checks["summary"])] + deepep_doctor_table(checks["findings"])
    if require_gpus and int(node["gpu"].get("gpu_count") or 0) == 0:
        stop = ("No NVIDIA GPU under %s/bus/pci/devices on %s: nothing was changed. Layers: %s. Run this on a GPU "
                "node; to only report what each layer would do, run playbooks/facts.yml (make facts), which changes "
                "nothing." % (sysfs_root, host, ", ".join(
                    "%s=%s" % (layer.get("layer"), layer.get("status")) for layer in node.get("layers") or [])))
    elif checks is not None and checks["summary"].get("problem", 0) > 0:
        stop = _problems_sentence(host, checks["findings"])
    elif site_problems:
        stop = "%s: %s. Nothing was changed." % (host, "; ".join(site_problems))
    else:
        stop = ""
    return {"lines": lines, "stop": stop}


def deepep_doctor_outcome(report, host):
    """What the doctor says of a host: {lines, stop}. lines: its summary, then one per check (id, status, evidence,
    fix). stop: its problems as one sentence ('' when there is none)."""
    if not isinstance(report, dict) or not isinstance(report.get("findings"), list) or "summary" not in report:
        raise AnsibleFilterError("_deepep_doctor_outcome: expected the doctor's report ({findings, summary})")
    lines = ["%s: %s" % (host, report["summary"])] + deepep_doctor_table(report["findings"])
    problems = [f for f in report["findings"] if f.get("status") == "problem"]
    return {"lines": lines, "stop": _problems_sentence(host, problems) if problems else ""}


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
            "_deepep_preflight_outcome": deepep_preflight_outcome,
            "_deepep_doctor_outcome": deepep_doctor_outcome,
        }
