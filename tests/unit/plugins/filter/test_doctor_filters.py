# -*- coding: utf-8 -*-
"""_deepep_preflight_checks: a host's preflight checks from the deepep facts, with the inventory's (KF30)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter.doctor import deepep_preflight_checks


def facts(hostname, gpus=8, hcas=8, problem=None):
    findings = [{"id": "KF10", "status": "ok", "evidence": "", "fix": ""},
                {"id": "KF30", "status": "unknown", "evidence": "needs the inventory", "fix": ""}]
    if problem:
        findings[0].update(status="problem", evidence=problem)
    node = {"hostname": hostname, "gpu_count": gpus, "hca_count": hcas}
    return {"deepep": {"checks": {"findings": findings, "node": node}}}


def test_two_nodes_with_one_hostname_are_a_problem_on_both():
    hosts = {"a": facts("gpu-1"), "b": facts("gpu-1"), "c": facts("gpu-3")}
    for host, other in (("a", "b"), ("b", "a")):
        kf30 = [f for f in deepep_preflight_checks(hosts, host)["findings"] if f["id"] == "KF30"][0]
        assert kf30["status"] == "problem" and kf30["evidence"] == "hostname gpu-1 is also %s's" % other
    checks = deepep_preflight_checks(hosts, "c")
    assert [f["status"] for f in checks["findings"] if f["id"] == "KF30"] == ["ok"]
    assert checks["summary"]["problem"] == 0


def test_the_nodes_own_problem_and_a_host_without_a_reading():
    # A host whose discovery failed (rescued in preflight) has no checks: the others are compared without it.
    hosts = {"a": facts("gpu-1", problem="no nv-p2p.h"), "b": {}}
    checks = deepep_preflight_checks(hosts, "a")
    assert checks["summary"]["problem"] == 1
    assert [f["status"] for f in checks["findings"] if f["id"] == "KF30"] == ["not_applicable"]
    # Read without the checks: nothing checked, nothing found.
    nothing = {"ok": 0, "problem": 0, "not_applicable": 0, "unknown": 0}
    assert deepep_preflight_checks(hosts, "b") == {"findings": [], "summary": nothing}
    with pytest.raises(AnsibleFilterError, match="expected"):
        deepep_preflight_checks(hosts, "z")


def test_the_fleet_from_the_registered_results_by_host():
    from ansible_collections.moe_infra.deepep.plugins.filter.doctor import deepep_doctor_fleet
    results = {"a": {"node": {"hostname": "gpu-1", "gpu_count": 8, "hca_count": 8}, "findings": []},
               "b": {"node": {"hostname": "gpu-1", "gpu_count": 8, "hca_count": 8}, "findings": []}}
    fleet = deepep_doctor_fleet(results)
    assert fleet == deepep_doctor_fleet([dict(r["node"], host=h) for h, r in results.items()])
    assert [f["status"] for f in fleet["a"] if f["id"] == "KF30"] == ["problem"]
    with pytest.raises(AnsibleFilterError, match="expected a list"):
        deepep_doctor_fleet({"a": {"findings": []}})


def test_every_hosts_checks_at_once_match_each_hosts_own():
    hosts = {"a": facts("gpu-1"), "b": facts("gpu-1"), "c": facts("gpu-3", gpus=4), "d": {}}
    every = deepep_preflight_checks(hosts)
    assert list(every) == ["a", "b", "c", "d"]
    assert every == dict((host, deepep_preflight_checks(hosts, host)) for host in hosts)
    assert every["c"]["summary"]["problem"] == 1  # 4 GPUs where the others have 8


def test_doctor_reports_merge_the_inventorys_checks_into_each_hosts():
    from ansible_collections.moe_infra.deepep.plugins.filter.doctor import deepep_doctor_reports
    own = {"id": "KF12", "status": "ok", "evidence": "libcuda.so found", "fix": ""}
    results = {"a": {"node": {"hostname": "gpu-1", "gpu_count": 8, "hca_count": 8}, "findings": [own]},
               "b": {"node": {"hostname": "gpu-1", "gpu_count": 8, "hca_count": 8}, "findings": [own]}}
    reports = deepep_doctor_reports(results)
    assert [f["id"] for f in reports["a"]["findings"]] == ["KF12", "KF30", "GPUCOUNT"]
    assert reports["a"]["summary"]["problem"] == 1 and reports["b"]["summary"]["problem"] == 1
    alone = deepep_doctor_reports(results, False)
    assert alone["a"]["findings"] == [own] and alone["a"]["summary"]["problem"] == 0
    with pytest.raises(AnsibleFilterError, match="expected"):
        deepep_doctor_reports({"a": {"node": {}}})


def test_doctor_outcome_lines_and_the_problems_in_one_sentence():
    from ansible_collections.moe_infra.deepep.plugins.filter.doctor import deepep_doctor_outcome, deepep_doctor_table

    report = {"summary": {"ok": 1, "problem": 2}, "findings": [
        {"id": "KF10", "status": "ok", "evidence": "gdrdrv absent", "fix": ""},
        {"id": "KF21", "status": "problem", "evidence": "memlock 64 KiB", "fix": "set memlock unlimited"},
        {"id": "KF30", "status": "problem", "evidence": "hostname a4 twice", "fix": "give each node its own"}]}
    outcome = deepep_doctor_outcome(report, "node1")
    assert outcome["lines"] == ["node1: %s" % (report["summary"],)] + deepep_doctor_table(report["findings"])
    assert outcome["stop"] == ("node1: KF21 | memlock 64 KiB | set memlock unlimited; KF30 | hostname a4 twice | "
                               "give each node its own. Nothing was changed.")
    assert deepep_doctor_outcome(dict(report, findings=report["findings"][:1]), "node1")["stop"] == ""
    with pytest.raises(AnsibleFilterError, match="expected the doctor's report"):
        deepep_doctor_outcome({"findings": []}, "node1")
