# -*- coding: utf-8 -*-
"""deepep_cluster_report writes the JSON and the page, merges runs, writes nothing in check mode and refuses a
dest that is a file."""
from __future__ import annotations

import json

from ansible_collections.moe_infra.deepep.plugins.modules import deepep_cluster_report as module
from ansible_collections.moe_infra.deepep.tests.unit.plugins.module_utils.test_cluster_report import site_summary


def test_writes_then_merges_the_next_run(run_module, tmp_path):
    dest = tmp_path / "report"
    args = {"dest": str(dest), "source": "site", "playbook": "site.yml", "targeted": ["n1", "n2"],
            "hosts": {"n1": site_summary(), "n2": site_summary()}}
    result, failed = run_module(module, args, check_mode=True)
    assert not failed and result["html"] == str(dest / "report.html") and not dest.exists()

    result, failed = run_module(module, args)
    assert not failed and result["dropped"] == [], result
    assert result["summary"][0].startswith("n1: DOCA-OFED installed, CUDA 12.9, PeerMapping live, GDRCopy up to date")
    assert "NVSHMEM 3.5.19 (changed)" in result["summary"][0] and "Doctor KF12, MEMLOCK (failed)" in result["summary"][0]
    # The line agrees with the doctor: KF12 (cannot find -lcuda) is the DeepEP layer's.
    assert "DeepEP v1: KF12 (failed)" in result["summary"][0]
    assert (dest / "report.html").read_text().startswith("<!DOCTYPE html>")

    result, failed = run_module(module, dict(args, hosts={"n1": site_summary()}))
    assert not failed and result["dropped"] == ["n2"] and result["summary"][1] == "n2: dropped out"
    report = json.loads((dest / "report.json").read_text())
    assert len(report["runs"]) == 2 and report["hosts"]["n2"]["dropped"]["playbook"] == "site.yml"


def test_a_half_written_report_is_started_again(run_module, tmp_path):
    (tmp_path / "report.json").write_text('{"format": 1, "hosts": {"n')
    result, failed = run_module(module, {"dest": str(tmp_path), "source": "doctor",
                                         "hosts": {"n1": {"summary": {"problem": 0}, "findings": []}}})
    assert not failed, result
    assert list(json.loads((tmp_path / "report.json").read_text())["hosts"]) == ["n1"]


def test_a_dest_that_is_a_file_is_refused(run_module, tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    result, failed = run_module(module, {"dest": str(target), "source": "site", "hosts": {}})
    assert failed and "is not a directory: set deepep_cluster_report_dir to a directory" in result["msg"]


def test_records_are_written_per_host_in_the_same_call(run_module, tmp_path):
    records = tmp_path / "site"
    args = {"records_dir": str(records), "dest": str(tmp_path / "report"), "source": "site",
            "hosts": {"n1": site_summary(), "n2": site_summary(), "n3": None}}
    result, failed = run_module(module, args, check_mode=True)
    assert not failed and result["records"] == [str(records / "n1-site.json"), str(records / "n2-site.json")]
    assert not records.exists()

    result, failed = run_module(module, args)
    assert not failed, result
    assert sorted(p.name for p in records.iterdir()) == ["n1-site.json", "n2-site.json"]
    assert json.loads((records / "n2-site.json").read_text()) == site_summary()


def test_records_alone_write_no_page(run_module, tmp_path):
    result, failed = run_module(module, {"records_dir": str(tmp_path), "source": "site", "hosts": {"n1": site_summary()}})
    assert not failed and result["html"] is None and result["json"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n1-site.json"]


def test_neither_dest_nor_records_dir_is_refused(run_module):
    result, failed = run_module(module, {"source": "site", "hosts": {}})
    assert failed and "one of the following is required: dest, records_dir" in result["msg"]


def test_a_records_dir_that_is_a_file_is_refused(run_module, tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    result, failed = run_module(module, {"records_dir": str(target), "source": "site", "hosts": {}})
    assert failed and "records_dir %s exists and is not a directory: set deepep_site_report_dir" % target in result["msg"]
