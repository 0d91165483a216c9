# -*- coding: utf-8 -*-
"""Verify the system layers on each node over SSH (as real nodes are reached), against the fixture it carries,
and that --check on the fresh nodes predicted exactly the changes converge then made."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

CONF = ("# Managed by moe_infra.deepep.nvidia_driver_params. Local edits are overwritten.\n"
        'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n')
EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]


@pytest.fixture
def name(host):
    return host.backend.get_hostname()


@pytest.fixture
def state(name):
    with open(os.path.join(EPHEMERAL, "reports", name + "-system.json")) as handle:
        return json.load(handle)


def runs():
    with open(os.path.join(EPHEMERAL, "changes.jsonl")) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_regkey_conf_file(host, name):
    conf = host.file("/etc/modprobe.d/nvidia-deepep.conf")
    if name == "nonic-node":
        assert not conf.exists  # no RDMA NIC: not required, nothing written
        return
    # The backend strips trailing newlines from command output: compare the bytes by digest.
    assert conf.sha256sum == hashlib.sha256(CONF.encode()).hexdigest(), conf.content_string
    assert conf.mode == 0o644 and conf.user == "root"


def test_reboot_required_facts(name, state):
    expected = {
        "b200-node": (True, True, True, "configured_not_live"),
        "done-node": (False, False, False, "live"),
        # No driver loaded (a plain image): the nvidia_driver layer installed one, which loads at the reboot.
        "nonic-node": (False, False, True, "driver_not_loaded"),
    }[name]
    assert (state["doca_ofed_reboot_required"], state["nvidia_peermapping_reboot_required"],
            state["deepep_reboot_pending"], state["nvidia_peermapping_state"]) == expected
    reasons = sorted(k for k, v in state["deepep_reboot_reasons"].items() if v)
    assert reasons == {"b200-node": ["doca_ofed", "nvidia_peermapping"], "done-node": [],
                       "nonic-node": ["nvidia_driver"]}[name]
    if name == "nonic-node":
        assert state["deepep_reboot_reasons"]["nvidia_driver"] == ("nvidia-open-580 nvidia-utils-580 installed, no "
                                                                   "NVIDIA driver loaded")


def test_driver_installed_from_the_cuda_repository_and_held_only_where_none_was_loaded(host, name):
    held = host.run("apt-mark showhold").stdout.split()
    for package in ("nvidia-open-580", "nvidia-utils-580"):
        if name == "nonic-node":
            assert host.package(package).is_installed and package in held
            # From the CUDA repository (the fixture's), pinned at 400 like the repository's other driver packages.
            assert "400 file:/opt/moe-fixtures/repos/cuda" in host.check_output("apt-cache policy %s" % package)
        else:
            assert not host.package(package).is_installed  # a driver is loaded there: never replaced


def test_gdrcopy_stamp_only_after_the_system_layers_settled(host, name, state):
    current = host.file("/opt/deepep/gdrcopy/current")
    if name in ("b200-node", "nonic-node"):
        # Its play ended with the reboot pending: nothing after the system layers ran there.
        assert not host.file("/opt/deepep/gdrcopy").exists and state["gdrcopy_root"] is None
        return
    assert current.is_symlink
    stamp = json.loads(host.file(current.linked_to + "/.moe_infra_stamp.json").content_string)
    assert stamp["name"] == "gdrcopy" and stamp["fingerprint"] in current.linked_to
    assert host.file(current.linked_to + "/lib/libgdrapi.so").exists


def test_doca_repository_pin_and_packages(host, name):
    source = host.file("/etc/apt/sources.list.d/doca.list")
    if name != "b200-node":
        assert not source.exists  # done: nothing to do; no Mellanox hardware: skipped
        return
    assert "deb [signed-by=/etc/apt/keyrings/doca.asc] file:/opt/moe-fixtures/repos/doca ./" in source.content_string
    assert host.file("/etc/apt/keyrings/doca.asc").content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK")
    assert not host.file("/etc/apt/trusted.gpg").exists  # never apt-key
    assert host.package("doca-ofed").is_installed
    # The CUDA repository (added after DOCA's) offers mft 4.34.0-1; the pin keeps DOCA's.
    policy = host.check_output("apt-cache policy mft")
    assert "Candidate: 4.30.0-139" in policy and "4.34.0-1" in policy
    assert host.package("mft").version == "4.30.0-139"
    assert host.check_output("ofed_info -s") == "OFED-internal-25.10-1.7.1:"


def test_cuda(host, name):
    nvcc = host.run("/usr/local/cuda/bin/nvcc --version")
    release = "13.0" if name == "done-node" else "12.9"
    assert nvcc.rc == 0 and "release %s," % release in nvcc.stdout
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-%s" % release
    assert host.run("bash -lc 'command -v nvcc'").stdout.strip() == "/usr/local/cuda/bin/nvcc"
    repo = host.file("/etc/apt/sources.list.d/cuda.list")
    if name == "b200-node":
        assert "[signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] file:/opt/moe-fixtures/repos/cuda /" in \
            repo.content_string
        pin = host.file("/etc/apt/preferences.d/cuda-repository-pin-600").content_string
        # The toolkit's packages over the distribution's, the repository's others (the driver's) below them.
        assert "Package: cuda-* libcublas*" in pin and "Pin: release l=cuda\nPin-Priority: 600" in pin
        assert "Package: *\nPin: release l=cuda\nPin-Priority: 400" in pin
        # The image's driver package is held: no upgrade takes the repository's.
        assert "nvidia-utils-570" in host.run("apt-mark showhold").stdout.split()
    elif name == "nonic-node":
        # The image's cuda-keyring source was reused (no second entry for the repository); its lists were fetched.
        assert not repo.exists and host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
        assert host.run("apt-cache policy cuda-toolkit-12-9").stdout.count("file:/opt/moe-fixtures/repos/cuda") >= 1
    else:
        assert not repo.exists  # the pinned nvcc was there: nothing to install


def test_check_mode_predicted_what_converge_changed():
    recorded = runs()  # also create/prepare (before) and destroy (not yet): start at the --check run
    first = [index for index, run in enumerate(recorded) if run["check"]][-1]
    check, converge, idempotence = recorded[first:first + 3]
    assert converge["check"] is False and idempotence["check"] is False
    assert set(check["hosts"]) >= {"b200-node", "done-node", "nonic-node"}
    assert check["changed"] == converge["changed"]
    assert converge["changed"]["b200-node"], "the fresh B200 node must have been changed"
    assert all(not tasks for tasks in idempotence["changed"].values()), idempotence["changed"]


def run_playbook(playbook, *args):
    """ansible-playbook against this scenario's inventory, without the change recorder."""
    project = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    env = {key: value for key, value in os.environ.items()
           if key not in ("ANSIBLE_CALLBACKS_ENABLED", "CHANGE_RECORD", "ANSIBLE_CALLBACK_PLUGINS")}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(project, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", os.path.join(EPHEMERAL, "inventory"),
         os.path.join(project, "playbooks", playbook)] + list(args),
        env=env, capture_output=True, text=True, timeout=600, check=False)


# Broken fixtures for the doctor, the way users break nodes: an env script with the CPU NIC handler, a wrong
# GID index and no GPU-to-NIC mapping (b200-node), a static IBGDA env on a node without NICs (nonic-node), and a
# test log with the duplicate-hostname failure. Written after converge, so nothing else reads them.
BROKEN_ENV = {
    "b200-node": "export NVSHMEM_IBGDA_NIC_HANDLER='cpu'\nexport NVSHMEM_IB_GID_INDEX='0'\n"
                 "export NVSHMEM_HCA_PREFIX='mlx5'\n",
    "nonic-node": "export NVSHMEM_REMOTE_TRANSPORT='ibgda'\nexport NVSHMEM_IB_ENABLE_IBGDA='1'\n",
}
DOCTOR_EXPECTED = {
    # (problems that must be found, checks that must be ok)
    "b200-node": ({"KF01", "KF03", "KF04", "KF17", "KF20", "KF23", "KF24", "KF30"}, {"KF14", "KF33", "KF35", "KF36"}),
    "done-node": (set(), {"KF01", "KF19", "KF20", "KF22", "KF24", "KF30", "KF33"}),
    # DRIVER: the layer installed nvidia-open-580; no reboot yet, so none is loaded.
    "nonic-node": ({"KF36", "DRIVER"}, {"KF09", "KF30"}),
}


@pytest.fixture(scope="module")
def doctor_reports():
    for node, text in BROKEN_ENV.items():
        subprocess.run(["podman", "exec", node, "sh", "-c", "mkdir -p /opt/deepep && printf \"%s\" > /opt/deepep/env.sh"
                        % text], check=True)
    subprocess.run(["podman", "exec", "b200-node", "sh", "-c", "mkdir -p /opt/deepep/reports && echo '[rank 3] "
                    "Fatal IPC Failure in exchange_heap_memory_handle' > /opt/deepep/reports/internode.log"], check=True)
    out = os.path.join(EPHEMERAL, "doctor")
    try:
        result = run_playbook("doctor.yml", "-e", "doctor_sysfs_root=/opt/moe-fixtures/sys",
                              "-e", '{"doctor_include_dirs": ["/opt/moe-fixtures/include", "/usr/include"]}',
                              "-e", "doctor_procfs_root=/opt/moe-fixtures/proc", "-e", "doctor_report_dir=%s" % out)
    finally:
        for node in BROKEN_ENV:
            subprocess.run(["podman", "exec", node, "rm", "-rf", "/opt/deepep/env.sh", "/opt/deepep/reports"],
                           check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]  # read-only: never fails on findings
    reports = {}
    for node in DOCTOR_EXPECTED:
        with open(os.path.join(out, node + "-doctor.json")) as handle:
            reports[node] = json.load(handle)
    return reports


def test_doctor_finds_the_broken_fixtures(name, doctor_reports):
    report = doctor_reports[name]
    status = dict((f["id"], f["status"]) for f in report["findings"])
    problems, healthy = DOCTOR_EXPECTED[name]
    found = set(i for i, s in status.items() if s == "problem")
    assert problems <= found, report["findings"]
    assert all(status[i] == "ok" for i in healthy), dict((i, status[i]) for i in healthy)
    assert all(f["fix"] for f in report["findings"] if f["status"] == "problem")
    assert report["summary"]["problem"] == len(found)
    if name == "nonic-node":
        driver = [f for f in report["findings"] if f["id"] == "DRIVER"][0]
        assert driver["evidence"] == "nvidia-open-580 installed and no NVIDIA driver loaded: it loads at the next boot"
    if name == "b200-node":
        kf30 = [f for f in report["findings"] if f["id"] == "KF30"][0]
        assert "internode.log: [rank 3] Fatal IPC Failure" in kf30["evidence"]


def test_doctor_changed_nothing_on_the_nodes(host, name, doctor_reports):
    # The broken fixtures were removed again; the doctor itself wrote nothing on the node.
    assert not host.file("/opt/deepep/env.sh").exists
    assert not host.file("/opt/deepep/doctor").exists


# Last in this file on purpose: it reruns the play with reboots allowed (the layers change nothing by now).
def test_a_host_that_does_not_come_back_fails_alone(host, name):
    if name != "b200-node":
        pytest.skip("run once, from the node that needs the reboot")
    # Fixture: a `shutdown` that accepts the reboot and does nothing, so the boot id never changes, like a node
    # that hangs in firmware. The reboot module finds it first on its search path.
    host.run("printf '#!/bin/sh\\nexit 0\\n' > /usr/local/sbin/shutdown && chmod 755 /usr/local/sbin/shutdown")
    try:
        # nonic-node would reboot too (for its driver), which a container cannot: left out.
        result = run_playbook("system.yml", "--limit", "b200-node,done-node", "-e", "deepep_reboot=auto",
                              "-e", "node_reboot_timeout=20",
                              "-e", "node_reboot_post_delay=0",
                              "-e", "deepep_system_report_dir=%s" % os.path.join(EPHEMERAL, "reports-reboot"))
    finally:
        host.run("rm -f /usr/local/sbin/shutdown")
    out = result.stdout + result.stderr  # the failure goes to stderr
    assert result.returncode == 2, out[-4000:]
    assert ("b200-node: the reboot for doca_ofed, nvidia_peermapping did not complete within 20 s" in out), out[-4000:]
    recap = dict(re.findall(r"^(\S+-node)\s+:\s+(.*)$", out, re.M))
    assert "failed=1" in recap["b200-node"]
    for other in ("done-node",):
        assert "failed=0" in recap[other] and "unreachable=0" in recap[other], recap
        # The others finished the whole play, report included.
        assert os.path.exists(os.path.join(EPHEMERAL, "reports-reboot", other + "-system.json"))
    # The failed host did not go on to GDRCopy or the report.
    assert not os.path.exists(os.path.join(EPHEMERAL, "reports-reboot", "b200-node-system.json"))
    assert not host.file("/opt/deepep/gdrcopy").exists
