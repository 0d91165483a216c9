# -*- coding: utf-8 -*-
"""Verify the system layers on each node over the podman connection, against the fixture it carries, and that
--check on the fresh nodes predicted exactly the changes converge then made."""

from __future__ import annotations

import hashlib
import json
import os

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
        "nonic-node": (False, False, False, "absent"),
    }[name]
    assert (state["doca_ofed_reboot_required"], state["nvidia_peermapping_reboot_required"],
            state["deepep_reboot_pending"], state["nvidia_peermapping_state"]) == expected
    if name == "b200-node":
        assert sorted(k for k, v in state["deepep_reboot_reasons"].items() if v) == ["doca_ofed",
                                                                                     "nvidia_peermapping"]


def test_gdrcopy_stamp_only_after_the_system_layers_settled(host, name, state):
    current = host.file("/opt/deepep/gdrcopy/current")
    if name == "b200-node":
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
    release = "12.9" if name == "b200-node" else "13.0"
    assert nvcc.rc == 0 and "release %s," % release in nvcc.stdout
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-%s" % release
    assert host.run("bash -lc 'command -v nvcc'").stdout.strip() == "/usr/local/cuda/bin/nvcc"
    repo = host.file("/etc/apt/sources.list.d/cuda.list")
    if name == "b200-node":
        assert "[signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] file:/opt/moe-fixtures/repos/cuda /" in \
            repo.content_string
        assert "Pin: release l=cuda\nPin-Priority: 600" in host.file(
            "/etc/apt/preferences.d/cuda-repository-pin-600").content_string
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
