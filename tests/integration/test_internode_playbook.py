# -*- coding: utf-8 -*-
"""playbooks/internode.yml's orchestration on two inventory nodes of this host (local connection), each with
its own fixture sysfs tree (GCP B200: 8 GPUs, 8 RoCE NICs with counters) and the stand-in test_internode.py,
which needs both ranks up at once and adds traffic to the fixture counters. A real multi-node run needs a real
cluster; this checks the ranks, the rendezvous, the counters and the failures."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.moe_infra.deepep.tests.fixtures import machines

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")


@pytest.fixture
def cluster(tmp_path):
    src = tmp_path / "deepep" / "src"
    shutil.copytree(os.path.join(FIXTURES, "deepep_src"), str(src))
    (src / "deep_ep_cpp.py").write_text("# what the fixture build_ext writes\n")
    (tmp_path / "env.sh").write_text("export PYTHONPATH='%s'\nexport NVSHMEM_IBGDA_NIC_HANDLER='gpu'\n" % src)
    hosts = {}
    for name, machine in (("node-a", machines.gcp_b200), ("node-b", machines.gcp_b200)):
        machine(str(tmp_path / name / "sys"))
        hosts[name] = {"ansible_connection": "local", "ansible_host": "127.0.0.1",
                       "ansible_python_interpreter": sys.executable,
                       "deepep_internode_sysfs_root": str(tmp_path / name / "sys"),
                       "deepep_report_dir": str(tmp_path / name / "reports")}
    inventory = {"all": {"hosts": hosts, "vars": {
        "deepep_python": sys.executable, "deepep_internode_src_dir": str(src),
        "deepep_env_script": str(tmp_path / "env.sh"), "deepep_internode_timeout": 120,
        "deepep_internode_report_dir": str(tmp_path / "out"),
        "deepep_internode_env_extra": {"DEEPEP_FIXTURE_SYSFS": "{{ deepep_internode_sysfs_root }}",
                                       "DEEPEP_FIXTURE_OUTPUT": os.path.join(FIXTURES, "deepep_output")}}}}
    (tmp_path / "out").mkdir()
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    return tmp_path


def run(cluster, *extra):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(cluster / "inventory.yml"),
         os.path.join(REPO, "playbooks", "internode.yml"), "-e",
         "deepep_cluster_report_dir=%s" % (cluster / "cluster-report"),
         # This environment's Python lives under /root: the fixture test runs as root here.
         "-e", json.dumps({"deepep_test_user": ""})] + list(extra),
        env=env, capture_output=True, text=True, timeout=600, check=False)
    return result.returncode, result.stdout + result.stderr


def report(cluster, host):
    with open(str(cluster / "out" / ("%s-internode.json" % host))) as handle:
        return json.load(handle)


def test_both_ranks_meet_and_every_mapped_nic_carries_traffic(cluster):
    rc, out = run(cluster)
    assert rc == 0, out
    a, b = report(cluster, "node-a"), report(cluster, "node-b")
    assert (a["rank"], b["rank"], a["world_size"], b["world_size"]) == (0, 1, 2, 2)
    assert a["master"] == b["master"] and re.match(r"^127\.0\.0\.1:\d+$", a["master"])
    assert a["passed"] and b["passed"]
    assert a["best"]["dispatch_bf16"]["gbps"] == 45.40 and a["best"]["combine_bf16"]["gbps"] == 44.91
    assert [p["nic"] for p in a["traffic"]["ports"]] == [
        "rocep4s0:1", "rocep6s0:1", "rocep68s0:1", "rocep70s0:1", "rocep132s0:1", "rocep134s0:1", "rocep196s0:1",
        "rocep198s0:1"]
    assert all(p["xmit_bytes"] == 256 * 1024 * 1024 for p in a["traffic"]["ports"] + b["traffic"]["ports"])
    assert a["traffic"]["idle"] == [] and a["traffic"]["problems"] == []
    # Each rank logged its own run, with the rendezvous it was given.
    log = (cluster / "node-b" / "reports" / "internode.log").read_text()
    assert "rank 1 of 2 met at %s with 8 processes" % b["master"] in log


def test_one_nic_for_every_gpu_fails_with_kf03(cluster):
    rc, out = run(cluster, "-e", '{"deepep_internode_env_extra": {"DEEPEP_FIXTURE_SYSFS": '
                  '"{{ deepep_internode_sysfs_root }}", "DEEPEP_FIXTURE_OUTPUT": "%s", '
                  '"DEEPEP_FIXTURE_ONLY_NIC": "rocep4s0"}}' % os.path.join(FIXTURES, "deepep_output"))
    assert rc == 2, out
    assert "node-a (rank 0): KF03: mapped NIC(s) rocep6s0:1, rocep68s0:1" in out
    assert "while rocep4s0:1 carried the traffic" in out
    assert report(cluster, "node-b")["traffic"]["idle"][0] == "rocep6s0:1"
    # The cluster report holds the failed run too, idle NICs included (written before the verdict).
    page = json.loads((cluster / "cluster-report" / "report.json").read_text())
    assert page["runs"][-1]["source"] == "internode" and page["runs"][-1]["hosts"] == ["node-a", "node-b"]
    assert page["hosts"]["node-b"]["internode"]["traffic"]["idle"][0] == "rocep6s0:1"


def test_bandwidth_under_the_threshold_fails(cluster):
    rc, out = run(cluster, "-e", '{"deepep_internode_thresholds": {"dispatch_bf16": 50}}')
    assert rc == 2, out
    assert "DeepEP internode test failed: dispatch_bf16 45.4 < 50 GB/s" in out


def test_a_single_node_is_refused_before_anything_runs(cluster):
    rc, out = run(cluster, "-e", "deepep_internode_hosts=node-a")
    assert rc == 2, out
    assert "deepep_internode_hosts=node-a: 1 node(s) (node-a) with GPU counts [8]" in out
    assert "Start DeepEP's internode test" not in out
    assert not (cluster / "node-a" / "reports").exists()


def test_nodes_of_different_shapes_are_refused(cluster):
    shutil.rmtree(str(cluster / "node-b" / "sys"))
    machines.h200_no_nics(str(cluster / "node-b" / "sys"))
    rc, out = run(cluster)
    assert rc == 2, out
    assert "2 node(s) (node-a, node-b) with GPU counts [8, 4] and no GPU-to-NIC mapping on node-b" in out


def test_a_node_that_dropped_out_gets_no_rank_and_the_others_run(cluster):
    # A third node that cannot be reached: the ranks and WORLD_SIZE count the nodes still in the play, so the two
    # others meet instead of waiting for it in the rendezvous until the timeout.
    inventory = yaml.safe_load((cluster / "inventory.yml").read_text())
    machines.gcp_b200(str(cluster / "node-c" / "sys"))
    inventory["all"]["hosts"]["node-c"] = dict(inventory["all"]["hosts"]["node-b"], ansible_connection="ssh",
                                               ansible_host="127.0.0.1", ansible_port=9, ansible_user="nobody",
                                               deepep_internode_sysfs_root=str(cluster / "node-c" / "sys"))
    (cluster / "inventory.yml").write_text(yaml.safe_dump(inventory))
    rc, out = run(cluster)
    assert "node-c" in out and re.search(r"node-c\s+: ok=\d+ .*unreachable=1", out), out
    a, b = report(cluster, "node-a"), report(cluster, "node-b")
    assert (a["rank"], b["rank"], a["world_size"], b["world_size"]) == (0, 1, 2, 2)
    assert a["passed"] and b["passed"], out
