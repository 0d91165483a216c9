# -*- coding: utf-8 -*-
"""The cluster report's merge and page (module_utils/report/cluster_report.py) on site summaries shaped like the
lifecycle rehearsal's record (docs/results/lifecycle-rehearsal/a4-b200-mig-7xk2-site.json)."""
from __future__ import annotations

import copy
import json
import os
import re
from html.parser import HTMLParser

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.report import cluster_report as report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
RECORD = os.path.join(REPO, "docs", "results", "lifecycle-rehearsal", "a4-b200-mig-7xk2-site.json")


def site_summary(dispatch_fp8=246.63, threshold=240, passed=True, build="up to date (fingerprint b150d5a96c6f39ea)"):
    with open(RECORD) as handle:
        summary = json.load(handle)
    intranode, low_latency = summary["deepep"]["tests"]
    intranode = copy.deepcopy(intranode)
    intranode["best"]["dispatch_fp8"]["gbps"] = dispatch_fp8
    summary["deepep"]["build"] = build
    summary["deepep"]["verification"] = [
        {"test": "intranode", "passed": passed, "reused": False, "thresholds": {"dispatch_fp8": threshold},
         "below_thresholds": [] if passed else ["dispatch_fp8 %s < %s GB/s" % (dispatch_fp8, threshold)],
         "result": intranode, "seconds": 30.1},
        {"test": "low_latency", "passed": True, "reused": True, "thresholds": {}, "below_thresholds": [],
         "result": low_latency, "seconds": 0.0}]
    summary["layers"] = {"doca_ofed": {"installed": True}, "cuda": {"home": "/usr/local/cuda"},
                         "nvidia_peermapping": {"required": True},
                         "gdrcopy": {"action": "none", "changed": False, "fingerprint": "dcf8dadb22c8c19a",
                                     "reason": "up to date", "build_seconds": None},
                         "nvshmem_ibgda": {"method": "source", "build": {
                             "action": "build", "changed": True, "fingerprint": "a8b94fe4ab82253b",
                             "reason": "first build", "build_seconds": 146.0}}}
    return summary


class Text(HTMLParser):
    """Elements with a data-* attribute -> their attributes and text."""

    def __init__(self):
        super().__init__()
        self.stack, self.found = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.stack.append({"tag": tag, "attrs": attrs, "text": ""})

    def handle_endtag(self, tag):
        while self.stack:
            element = self.stack.pop()
            if self.stack:
                self.stack[-1]["text"] += element["text"]
            self.found.append(element)
            if element["tag"] == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1]["text"] += data


def parse(page):
    parser = Text()
    parser.feed(page)
    return parser.found


def test_layer_cells_read_the_record():
    cells = report.layer_cells(site_summary())
    assert cells["cuda"] == {"state": "ok", "text": "12.9", "detail": "/usr/local/cuda", "fingerprint": None}
    assert cells["nvidia_peermapping"]["state"] == "ok"
    assert cells["gdrcopy"]["state"] == "ok" and cells["gdrcopy"]["fingerprint"] == "dcf8dadb22c8c19a"
    assert cells["nvshmem_ibgda"]["state"] == "changed" and cells["nvshmem_ibgda"]["text"] == "3.5.19"
    assert cells["deepep"]["state"] == "ok" and cells["deepep"]["fingerprint"] == "b150d5a96c6f39ea"
    assert cells["tests"] == {"state": "ok", "text": "passed", "detail": "", "fingerprint": None}
    # The cell names the problems, not only how many.
    assert cells["doctor"]["state"] == "failed" and cells["doctor"]["text"] == "KF12, MEMLOCK"


def test_the_nccl_cell_says_v1_put_torchs_own_nccl_back():
    summary = site_summary()
    assert report.layer_cells(summary)["nccl"] == {"state": "skipped", "text": "not run", "detail": "DeepEP V2 only",
                                                   "fingerprint": None}
    summary["layers"]["nccl"] = {"method": "restore", "version": "2.28.9", "changed": True, "build": None}
    assert report.layer_cells(summary)["nccl"] == {
        "state": "changed", "text": "2.28.9", "fingerprint": None,
        "detail": "torch's own NCCL wheel files back in place of V2's build"}


def test_reboot_pending_and_failed_tests_show_as_such():
    summary = site_summary(dispatch_fp8=200.0, passed=False, build="built in 70 s")
    summary["reboot_reasons"] = ["doca_ofed"]
    cells = report.layer_cells(summary)
    assert cells["doca_ofed"]["state"] == "reboot"
    assert cells["deepep"]["state"] == "changed"
    assert cells["tests"]["state"] == "failed" and cells["tests"]["detail"] == "dispatch_fp8 200.0 < 240 GB/s"


def test_the_jit_warm_up_is_reported_with_its_time_and_the_cache_size():
    summary = site_summary()
    warmup = {"test": "jit_warmup", "passed": True, "reused": False, "thresholds": {}, "below_thresholds": [],
              "result": {"cases": [], "ranks": [], "results": [], "summary": {}}, "seconds": 212.4,
              "jit": {"kernels_before": 0, "kernels": 48, "compiled": 48, "bytes": 1572864, "corrupted": []}}
    summary["deepep"]["verification"].insert(0, warmup)
    cells = report.layer_cells(summary)
    assert cells["tests"]["detail"] == "JIT warm-up 212.4 s: 48 kernels compiled (cache 48 kernels, 1.5 MiB)"
    warmup["reused"] = True
    cells = report.layer_cells(summary)
    assert cells["tests"]["detail"] == "JIT cache warmed by an earlier run (48 kernels, 1.5 MiB then)"


def test_merge_keeps_the_best_and_marks_who_dropped_out():
    first = report.merge(None, "site", "site.yml", "t1", {"a": site_summary(250.0), "b": site_summary()}, ["a", "b"])
    assert first["hosts"]["a"]["best"]["intranode/dispatch_fp8"] == 250.0
    second = report.merge(json.loads(json.dumps(first)), "site", "site.yml", "t2", {"a": site_summary(241.0)},
                          ["a", "b"])
    assert second["hosts"]["a"]["best"]["intranode/dispatch_fp8"] == 250.0  # the best seen, not the last
    assert second["hosts"]["a"]["site"]["deepep"]["verification"][0]["result"]["best"]["dispatch_fp8"]["gbps"] == 241.0
    assert second["hosts"]["b"]["dropped"] == {"at": "t2", "playbook": "site.yml",
                                               "why": "failed or unreachable in site.yml (its error is in that run's "
                                                      "output)"}
    # Where the playbook knows why (preflight's stop), that is kept.
    told = report.merge(json.loads(json.dumps(first)), "site", "site.yml", "t2", {}, ["a", "b"],
                        reasons={"b": "DRIVER | 8 NVIDIA GPU(s) and no NVIDIA driver loaded"})
    assert told["hosts"]["b"]["dropped"]["why"] == "DRIVER | 8 NVIDIA GPU(s) and no NVIDIA driver loaded"
    assert second["hosts"]["b"]["site"]  # what it had before stays visible
    assert [run["dropped"] for run in second["runs"]] == [[], ["b"]]
    third = report.merge(second, "doctor", "doctor.yml", "t3", {"b": {"summary": {"problem": 0}, "findings": []}},
                         ["b"])
    assert third["hosts"]["b"]["dropped"] is None and third["hosts"]["b"]["doctor_at"] == "t3"


def test_merge_refuses_an_unknown_source():
    with pytest.raises(ValueError, match="source must be one of site, doctor, internode"):
        report.merge(None, "deploy", "x.yml", "t", {}, [])


def test_page_shows_matrix_bars_traffic_problems_and_dropped():
    merged = report.merge(None, "site", "site.yml", "t1",
                          {"node-a": site_summary(250.0), "node-b": site_summary(), "node-c": site_summary()},
                          ["node-a", "node-b", "node-c"])
    merged = report.merge(merged, "site", "site.yml", "t2",
                          {"node-a": site_summary(238.0, passed=False), "node-b": site_summary()},
                          ["node-a", "node-b", "node-c"])
    traffic = {"ports": [{"nic": "mlx5_0:1", "xmit_bytes": 3 << 30, "rcv_bytes": 3 << 30},
                         {"nic": "mlx5_1:1", "xmit_bytes": 0, "rcv_bytes": 0}],
               "idle": ["mlx5_1:1"], "unknown": [], "problems": ["mlx5_1:1 carried 0 bytes"]}
    merged = report.merge(merged, "internode", "internode.yml", "t3",
                          {"node-a": {"rank": 0, "world_size": 2, "passed": False, "traffic": traffic}},
                          ["node-a"])
    page = report.render_html(merged)
    # Nothing to fetch or run: no script, no resource; the only URLs are links to the doctor's entries.
    assert "<script" not in page and " src=" not in page and "<link" not in page
    assert re.findall(r"https?://[^\s\"]+", page) == re.findall(r'<a class="small" href="(https://[^"]+)"', page)
    found = parse(page)
    cells = dict(((e["attrs"].get("data-layer"), e["text"].strip()), e["attrs"]["data-state"]) for e in found
                 if e["attrs"].get("data-layer") and "data-state" in e["attrs"])
    assert cells[("tests", "failed: intranode")] == "failed"
    rows = [e for e in found if e["tag"] == "tr" and e["attrs"].get("data-host") == "node-c"]
    assert "dropped out" in rows[0]["text"] and "failed or unreachable in site.yml" in rows[0]["text"]
    # None of a dropped host's cells stays green: what it had is no longer known to hold.
    row = page.split('<tr data-host="node-c">')[1].split("</tr>")[0]
    assert len(re.findall(r'data-layer="', row)) == len(report.LAYERS)
    assert set(re.findall(r'data-state="([a-z]+)"', row)) == {"dropped"}
    bars = dict((e["attrs"]["data-metric"], e) for e in found if e["attrs"].get("data-host") == "node-a"
                and "bar" in e["attrs"].get("class", "") and e["attrs"].get("data-metric"))
    assert bars["intranode/dispatch_fp8"]["attrs"]["class"] == "bar fail"
    assert bars["intranode/dispatch_fp8"]["attrs"]["data-gbps"] == "238.00"
    assert bars["low_latency/dispatch (slowest rank)"]["attrs"]["class"] == "bar nothreshold"
    assert "threshold 240.00 GB/s, best 250.00 GB/s" in page
    nic_rows = dict((e["attrs"]["data-nic"], e["attrs"]["class"]) for e in found if e["attrs"].get("data-nic"))
    assert nic_rows == {"mlx5_0:1": "state-ok", "mlx5_1:1": "state-failed"}
    # One row per failure across the nodes, worst first: the drop, then by how many nodes; a dropped host's earlier
    # findings are not repeated. Each names the command that fixes it where a layer does.
    groups = [(e["attrs"]["data-id"], e["attrs"]["data-nodes"]) for e in found
              if e["tag"] == "tr" and e["attrs"].get("data-id")]
    assert groups == [("DROPPED", "node-c"), ("KF12", "node-a,node-b"), ("MEMLOCK", "node-a,node-b")]
    assert "ansible-playbook playbooks/site.yml -i &lt;inventory&gt; --limit node-a,node-b --tags memlock" in page
    assert "ansible-playbook playbooks/site.yml -i &lt;inventory&gt; --limit node-c</pre>" in page
    assert page.index('id="problems"') < page.index('id="matrix"')  # the first thing under the counts
    assert [e["text"] for e in found if e["attrs"].get("id") == "dropped"][0].startswith("node-c (site.yml at t2: ")


def test_page_escapes_what_it_shows():
    summary = site_summary()
    summary["problems"][0]["evidence"] = "<img src=x onerror=alert(1)>"
    page = report.render_html(report.merge(None, "site", "site.yml", "t", {"<b>n</b>": summary}, []))
    assert "<img" not in page and "<b>n</b>" not in page and "&lt;img src=x" in page


def test_a_run_that_skipped_the_tests_keeps_the_last_results_shown():
    skipped = site_summary(build="up to date (fingerprint b150d5a96c6f39ea)")
    skipped["deepep"]["verification"] = []
    merged = report.merge(None, "site", "site.yml", "t1", {"a": site_summary(250.0)}, ["a"])
    merged = report.merge(merged, "site", "site.yml", "t2", {"a": skipped}, ["a"])
    cells = report.layer_cells(report.site_view(merged["hosts"]["a"]))
    assert cells["tests"]["text"] == "passed (earlier run)" and "results of the run at t1" in cells["tests"]["detail"]
    bars = [e["attrs"] for e in parse(report.render_html(merged)) if e["attrs"].get("data-metric")]
    assert [b["data-gbps"] for b in bars if b["data-metric"] == "intranode/dispatch_fp8"] == ["250.00"]


def test_a_run_with_fewer_layers_keeps_the_others_as_they_were():
    partial = site_summary()
    for key in ("cuda", "peermapping", "nvshmem", "nvshmem_root"):
        partial[key] = None
    partial["layers"] = {"doca_ofed": {"installed": None}, "cuda": {"home": None},
                         "nvidia_peermapping": {"required": None}, "gdrcopy": None,
                         "nvshmem_ibgda": {"method": "wheel", "build": None}}
    merged = report.merge(None, "site", "site.yml", "t1", {"a": site_summary()}, ["a"])
    merged = report.merge(merged, "site", "site.yml --tags deepep", "t2", {"a": partial}, ["a"])
    cells = report.layer_cells(merged["hosts"]["a"]["site"])
    assert cells["cuda"]["text"] == "12.9" and cells["nvidia_peermapping"]["text"] == "live"
    assert cells["doca_ofed"]["text"] == "installed"
    # The source NVSHMEM built in the first run is shown as there, not as built again.
    assert cells["nvshmem_ibgda"]["state"] == "ok" and cells["nvshmem_ibgda"]["text"] == "3.5.19"
    assert cells["gdrcopy"] == {"state": "ok", "text": "up to date", "fingerprint": "dcf8dadb22c8c19a", "detail": ""}


def test_a_layer_the_doctor_finds_broken_is_not_green_and_the_groups_order():
    # Two nodes: KF15 (NVSHMEM on RoCE) on both, KF10 (stops preflight) on one; the NVSHMEM cell follows the doctor.
    a, b = site_summary(), site_summary()
    kf15 = {"id": "KF15", "title": "ibv_create_ah_from_wc: Unable to create ah on RoCE", "status": "problem",
            "evidence": "NVSHMEM 3.4.5 on RoCE", "fix": "the ibv_ah_attr memset patch"}
    kf10 = {"id": "KF10", "title": "nv-p2p.h missing (gdrdrv)", "status": "problem", "evidence": "no nv-p2p.h",
            "fix": "install nvidia-kernel-source-<ver>"}
    a["problems"], b["problems"] = [kf15], [kf15, kf10]
    merged = report.merge(None, "site", "site.yml", "t1", {"a": a, "b": b}, ["a", "b"], inventory="inventories/x")
    cells = report.agreeing_cells(merged["hosts"]["a"])
    assert cells["nvshmem_ibgda"]["state"] == "failed" and cells["nvshmem_ibgda"]["text"] == "3.5.19: KF15"
    assert cells["nvshmem_ibgda"]["detail"].startswith("doctor: NVSHMEM 3.4.5 on RoCE")
    groups = report.problem_groups(merged["hosts"], "inventories/x")
    # What stops a node before any change first, then by how many nodes.
    assert [(g["id"], g["nodes"]) for g in groups] == [("KF10", ["b"]), ("KF15", ["a", "b"])]
    assert groups[1]["command"] == "ansible-playbook playbooks/site.yml -i inventories/x --limit a,b --tags nvshmem_ibgda"
    assert groups[0]["command"] is None  # no layer fixes it: the fix says what to do
    assert groups[1]["doc"].endswith("docs/doctor.md#kf15")
