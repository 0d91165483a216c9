# -*- coding: utf-8 -*-
"""Verify site.yml on four nodes: every node has the stack, each build ran once and was installed on the other
three from the controller cache, converge and the no-op rerun are on record with their wall time; then
--tags deepep after a torch change (1 node, then 4: timed), and a node killed mid-run drops out alone.

The timings go to $MOLECULE_EPHEMERAL_DIRECTORY/site-timings.json and, when set, $SITE_TIMINGS_OUT
(docs/results/site-molecule/ holds a copy). Every run writes into one cluster report; its JSON goes to
$CLUSTER_REPORT_OUT when set (tests/fixtures/cluster_report/ holds a copy: the browser test renders it)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
NODES = ("node1", "node2", "node3", "node4")
TIMINGS = os.path.join(EPHEMERAL, "site-timings.json")
VERIFY_RECORD = os.path.join(EPHEMERAL, "verify-changes.jsonl")
# Tasks a DeepEP rebuild may change: the deepep role's and the fan-out's it imports.
DEEPEP_LAYER = re.compile(r"^moe_infra\.deepep\.(deepep|build_fanout) : ")


@pytest.fixture
def name(host):
    return host.backend.get_hostname()


def records(path):
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def converge_and_idempotence():
    """The last two runs molecule recorded before verify: converge (fresh nodes) and idempotence (no-op)."""
    runs = [run for run in records(os.path.join(EPHEMERAL, "changes.jsonl")) if set(NODES) <= set(run["hosts"])]
    return runs[-2], runs[-1]


def save_timing(key, value):
    """Into site-timings.json; also into $SITE_TIMINGS_OUT when set (destroy removes the ephemeral directory)."""
    timings = {}
    if os.path.exists(TIMINGS):
        with open(TIMINGS) as handle:
            timings = json.load(handle)
    timings[key] = value
    for path in filter(None, (TIMINGS, os.environ.get("SITE_TIMINGS_OUT"))):
        with open(path, "w") as handle:
            json.dump(timings, handle, indent=2, sort_keys=True)
            handle.write("\n")


def playbook_command(*args, playbook="site.yml"):
    project = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(project, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", CHANGE_RECORD=VERIFY_RECORD, PYTHONUNBUFFERED="1",
               # The output these tests read: task lines without profile_tasks' timestamps in between.
               ANSIBLE_CALLBACKS_ENABLED="change_record")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", os.path.join(EPHEMERAL, "inventory"),
           os.path.join(project, "playbooks", playbook)] + list(args)
    return cmd, env


def busy_cpu_seconds():
    """CPU seconds this machine's cores spent busy so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def node_cpu_seconds():
    """CPU seconds the four containers (sshd, the modules, the builds) used so far, from their cgroups; None
    where the cgroup layout is not one of the two known."""
    total = 0.0
    for node in NODES:
        path = subprocess.run(["podman", "inspect", "-f", "{{.State.CgroupPath}}", node], capture_output=True,
                              text=True, check=True).stdout.strip().lstrip("/")
        v1, v2 = "/sys/fs/cgroup/cpuacct/%s/cpuacct.usage" % path, "/sys/fs/cgroup/%s/cpu.stat" % path
        if os.path.exists(v1):
            with open(v1) as handle:
                total += int(handle.read()) / 1e9
        elif os.path.exists(v2):
            with open(v2) as handle:
                total += int(dict(line.split() for line in handle)["usage_usec"]) / 1e6
        else:
            return None
    return total


def run_site(*args, profile=None):
    """(rc, output, the change record) of one site.yml run; the record gets the machine's busy CPU seconds during
    the run and the part of them the nodes used (the rest is the controller's). profile: a name for the run's task
    profile (moe_infra.deepep.task_profile's JSON, also beside $SITE_TIMINGS_OUT when set)."""
    # Summaries apart from converge's, which test_every_node_has_the_stack reads.
    cmd, env = playbook_command("-e", "deepep_site_report_dir=%s" % os.path.join(EPHEMERAL, "site-verify"), *args)
    if profile:
        os.makedirs(os.path.join(EPHEMERAL, "profiles"), exist_ok=True)
        env.update(ANSIBLE_CALLBACKS_ENABLED="change_record,moe_infra.deepep.task_profile",
                   MOE_INFRA_TASK_PROFILE_JSON=os.path.join(EPHEMERAL, "profiles", profile + ".json"))
    busy, nodes = busy_cpu_seconds(), node_cpu_seconds()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if profile and os.environ.get("SITE_TIMINGS_OUT"):
        shutil.copy(env["MOE_INFRA_TASK_PROFILE_JSON"], os.path.join(os.path.dirname(os.environ["SITE_TIMINGS_OUT"]),
                                                                     "profile-%s.json" % profile))
    record = records(VERIFY_RECORD)[-1]
    record["busy_cpu_s"] = round(busy_cpu_seconds() - busy, 1)
    record["node_cpu_s"] = None if nodes is None else round(node_cpu_seconds() - nodes, 1)
    if profile:
        # ansible-playbook's main process (serial: no number of cores shortens it) and its workers with their ssh.
        with open(env["MOE_INFRA_TASK_PROFILE_JSON"]) as handle:
            written = json.load(handle)
        record["controller_main_cpu_s"] = written["controller_main_cpu_s"]
        record["controller_workers_cpu_s"] = written["controller_workers_cpu_s"]
    return result.returncode, result.stdout + result.stderr, record


def set_torch(version, nodes=NODES):
    for node in nodes:
        subprocess.run(["podman", "exec", node, "python3", "/opt/moe-fixtures/python_site.py", "/opt/torch", version],
                       check=True, capture_output=True)


def fanout_roles(out, label="DeepEP"):
    """{host: role} from the fan-out's report, one line per fingerprint (e.g. 'DeepEP 3f2a...: build node1; wait
    node2, node3'), under the default callback's JSON or YAML result format. The same parser as
    tests/fixtures/fanout_report.py: the scenario's verifier runs outside the collection's test tree."""
    roles = {}
    for groups in re.findall(r"%s (?:[0-9a-f]+|\(fingerprint known once the source is on the node\)): "
                             r"([a-z]+ [\w.-]+(?:, [\w.-]+)*(?:; [a-z]+ [\w.-]+(?:, [\w.-]+)*)*)" % label, out):
        for group in groups.split("; "):
            role, hosts = group.split(" ", 1)
            roles.update((host, role) for host in hosts.split(", "))
    return roles


def summary(name, report_dir="site"):
    with open(os.path.join(EPHEMERAL, report_dir, name + "-site.json")) as handle:
        return json.load(handle)


def test_every_node_has_the_stack(host, name):
    site = summary(name)
    assert site["reboot_pending"] is False and site["peermapping"] == "live" and site["cuda"] == "13.0"
    assert site["gdrcopy"].startswith("/opt/deepep/gdrcopy/builds/")
    # DeepEP's two tests ran there and their parsed output came back (recorded H200 output, tests/fixtures).
    intranode, low_latency = site["deepep"]["tests"]
    assert intranode["checks_passed"] == intranode["checks"] == 24
    assert low_latency["summary"]["min_dispatch_gbps"] == 244.47
    current = host.file("/opt/deepep/deepep/current")
    assert current.is_symlink and current.linked_to.endswith(site["deepep"]["fingerprint"])
    assert host.file(current.linked_to + "/src/deep_ep_cpp.py").contains("TORCH_CUDA_ARCH_LIST = '10.0'")
    # The build's wheel is installed next to the stand-in torch (built there or installed from the cache).
    assert site["deepep"]["wheel"] == current.linked_to + "/src/dist/deep_ep-1.2.1-py3-none-any.whl"
    assert site["deepep"]["wheel_site_dir"] == "/opt/torch/site-packages"
    assert host.file("/opt/torch/site-packages/deep_ep_cpp.py").contains("TORCH_CUDA_ARCH_LIST = '10.0'")
    assert host.file("/opt/torch/site-packages/deep_ep-1.2.1.dist-info/RECORD").is_file
    assert host.file("/opt/deepep/env.sh").contains("DEEP_EP_DEVICE_TO_HCA_MAPPING")


def test_each_build_ran_once_and_was_installed_on_the_other_three():
    for component in ("deepep", "gdrcopy"):
        prefix = "/opt/deepep/deepep" if component == "deepep" else "/opt/deepep/gdrcopy"
        fingerprints, installed = set(), []
        for node in NODES:
            current = subprocess.run(["podman", "exec", node, "readlink", "-f", prefix + "/current"],
                                     capture_output=True, text=True, check=True).stdout.strip()
            fingerprints.add(os.path.basename(current))
            installed.append(subprocess.run(["podman", "exec", node, "test", "-f", current + "/install.log"],
                                            check=False).returncode == 0)
        assert len(fingerprints) == 1, (component, fingerprints)
        assert sorted(installed) == [False, True, True, True], (component, installed)  # one builder
        cached = sorted(f for f in os.listdir(os.path.join(EPHEMERAL, "cache")) if f.startswith(component + "-"))
        name = "%s-%s.tar.gz" % (component, fingerprints.pop())
        # The build and the digest the controller recorded when it fetched it from the builder.
        assert cached == [name, name + ".sha256"], cached
        with open(os.path.join(EPHEMERAL, "cache", name), "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        with open(os.path.join(EPHEMERAL, "cache", name + ".sha256")) as handle:
            assert handle.read() == "%s  %s\n" % (digest, name)


def test_converge_then_a_rerun_that_changes_nothing():
    converge, idempotence = converge_and_idempotence()
    assert not converge["failed"] and not converge["unreachable"] and not idempotence["failed"]
    assert all(converge["changed"][node] for node in NODES)
    assert idempotence["changed"] == {node: [] for node in idempotence["hosts"]}, idempotence["changed"]
    save_timing("converge_4_nodes_s", converge["seconds"])
    save_timing("noop_rerun_4_nodes_s", idempotence["seconds"])


def test_tags_deepep_after_a_torch_upgrade_on_1_node_then_4():
    # One node: it builds the new fingerprint and exports it.
    set_torch("2.12.0+cu130")
    rc, out, one = run_site("--tags", "deepep", "--limit", "node1", "--skip-tags", "deepep_verify",
                            profile="tags-deepep-1-node")
    assert rc == 0, out[-4000:]
    assert fanout_roles(out) == {"node1": "build"}, out[-4000:]
    assert "inputs.torch: 2.11.0+cu130 -> 2.12.0+cu130" in out

    # Four nodes, another torch: one builds, three install the build from the controller cache.
    set_torch("2.13.0+cu130")
    rc, out, four = run_site("--tags", "deepep", "--skip-tags", "deepep_verify", profile="tags-deepep-4-nodes")
    assert rc == 0, out[-4000:]
    roles = fanout_roles(out)
    assert sorted(roles.values()) == ["build", "wait", "wait", "wait"], roles
    for node in NODES:
        changed = four["changed"][node]
        assert changed and all(DEEPEP_LAYER.match(task) for task in changed), (node, changed)
    assert fanout_roles(out, "GDRCopy") == {}  # nothing under DeepEP was looked at again
    # The build user the converge made is there: the plan says so, and the account is not touched again.
    assert not re.search(r"TASK \[moe_infra.deepep.build_fanout : Create the unprivileged build user\][^\n]*\n"
                         r"(ok|changed):", out), out[-4000:]
    save_timing("tags_deepep_rebuild_1_node_s", one["seconds"])
    save_timing("tags_deepep_rebuild_4_nodes_s", four["seconds"])
    save_timing("tags_deepep_4_over_1", round(four["seconds"] / one["seconds"], 2))
    # Where the time goes on this machine: the CPU the runs kept busy, the nodes' part of it, and the least the
    # 4-node run could take with that much work on this many cores (its ratio to one node is the floor of 4/1).
    cores = os.cpu_count()
    for key, run in (("1_node", one), ("4_nodes", four)):
        for what in ("busy_cpu_s", "node_cpu_s", "controller_main_cpu_s", "controller_workers_cpu_s"):
            save_timing("tags_deepep_rebuild_%s_%s" % (key, what), run[what])
    save_timing("cores", cores)
    save_timing("tags_deepep_4_over_1_cpu_floor", round(four["busy_cpu_s"] / cores / one["seconds"], 2))
    # The floor with any number of cores: the 4-node run's main process alone, over the 1-node run's wall time.
    save_timing("tags_deepep_4_over_1_serial_floor", round(four["controller_main_cpu_s"] / one["seconds"], 2))


def test_internode_playbook_starts_every_rank_at_once_across_the_containers():
    """internode.yml's orchestration over the real connection, with DeepEP's stand-in test_internode.py (it needs
    all four ranks connected to rank 0 at once, then adds traffic to each node's fixture NIC counters). The
    containers reach node1 at its bridge address. A real internode run needs a real cluster with RDMA NICs."""
    master = subprocess.run(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", "node1"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert re.match(r"^\d+\.\d+\.\d+\.\d+$", master), master
    reports = os.path.join(EPHEMERAL, "internode")
    os.makedirs(reports, exist_ok=True)
    variables = {
        "deepep_internode_master_addr": master, "deepep_internode_sysfs_root": "/opt/moe-fixtures/sys",
        "deepep_internode_report_dir": reports, "deepep_internode_timeout": 120,
        "deepep_internode_env_extra": {"DEEPEP_FIXTURE_SYSFS": "/opt/moe-fixtures/sys",
                                       "DEEPEP_FIXTURE_OUTPUT": "/opt/moe-fixtures/deepep_output"}}
    cmd, env = playbook_command("-e", json.dumps(variables), playbook="internode.yml")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    results = []
    for node in NODES:
        with open(os.path.join(reports, node + "-internode.json")) as handle:
            results.append(json.load(handle))
    assert [(r["rank"], r["world_size"]) for r in results] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert {r["master"] for r in results} == {results[0]["master"]} and results[0]["master"].startswith(master + ":")
    for r in results:
        assert r["passed"] is True and len(r["traffic"]["ports"]) == 8 and r["traffic"]["idle"] == [], r


# Last in this file on purpose: node4 is stopped and stays down until destroy.
def test_a_node_killed_mid_run_drops_out_and_the_others_finish():
    set_torch("2.14.0+cu130")
    cmd, env = playbook_command("--tags", "deepep", "--skip-tags", "deepep_verify",
                                "-e", "deepep_site_report_dir=%s" % os.path.join(EPHEMERAL, "site-kill"))
    started = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, killed = [], False
    for line in proc.stdout:
        lines.append(line)
        if not killed and line.startswith("PLAY [DeepEP]"):
            subprocess.run(["podman", "kill", "node4"], check=True, capture_output=True)
            killed = True
    rc = proc.wait(timeout=900 - (time.time() - started))
    out = "".join(lines)
    assert killed and rc != 0, out[-4000:]
    recap = dict(re.findall(r"^(node\d)\s+:\s+(.*)$", out, re.M))
    assert "unreachable=1" in recap["node4"] or "failed=1" in recap["node4"], recap
    for node in ("node1", "node2", "node3"):
        assert "failed=0" in recap[node] and "unreachable=0" in recap[node], recap
        assert summary(node, "site-kill")["deepep"]["build"] != "not run"
    assert "1 host(s) dropped out: node4" in out
    assert not os.path.exists(os.path.join(EPHEMERAL, "site-kill", "node4-site.json"))
    # The cluster report holds every run of the scenario: node4 dropped out of the last one and keeps what it had.
    with open(os.path.join(EPHEMERAL, "cluster-report", "report.json")) as handle:
        report = json.load(handle)
    assert sorted(report["hosts"]) == list(NODES)
    assert report["runs"][-1]["dropped"] == ["node4"] and report["hosts"]["node4"]["dropped"]["playbook"] == "site.yml"
    assert report["hosts"]["node4"]["site"]["deepep"]["fingerprint"]  # its record from the runs before
    assert [report["hosts"][n]["dropped"] for n in NODES[:3]] == [None, None, None]
    for node in NODES:
        assert len(report["hosts"][node]["internode"]["traffic"]["ports"]) == 8
        assert report["hosts"][node]["best"]["intranode/dispatch_fp8"] == 246.63
    sources = [run["source"] for run in report["runs"]]
    assert sources.count("site") >= 5 and "internode" in sources, sources
    page = open(os.path.join(EPHEMERAL, "cluster-report", "report.html")).read()
    assert "dropped out of site.yml" in page and "<script" not in page
    if os.environ.get("CLUSTER_REPORT_OUT"):
        shutil.copy(os.path.join(EPHEMERAL, "cluster-report", "report.json"), os.environ["CLUSTER_REPORT_OUT"])
