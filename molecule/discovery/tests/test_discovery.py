# -*- coding: utf-8 -*-
"""Verify discovery on each node, over the podman connection, against the fixture it carries."""

from __future__ import annotations

import json
import os

import pytest

EXPECTED_MAPPING = {
    "b200-node": ("0:rocep4s0:1,1:rocep6s0:1,2:rocep68s0:1,3:rocep70s0:1,"
                  "4:rocep132s0:1,5:rocep134s0:1,6:rocep196s0:1,7:rocep198s0:1"),
    "ib-node": ",".join("%d:mlx5_%d:1" % (i, i) for i in range(8)),
    "cpu-node": "",
}
EXPECTED_LAYERS = {
    "b200-node": {"doca_ofed": "reboot", "nvidia_peermapping": "reboot", "deepep": "change"},
    "ib-node": {"nvidia_peermapping": "reboot", "deepep": "change"},
    "cpu-node": {"nvidia_peermapping": "blocked", "deepep": "blocked"},
}


@pytest.fixture
def name(host):
    return host.backend.get_hostname()


@pytest.fixture
def report(name):
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "facts", name + ".json")
    with open(path) as handle:
        return json.load(handle)


def test_mapping_in_the_saved_report(name, report):
    assert report["node"]["topology"]["deepep_device_to_hca_mapping"] == EXPECTED_MAPPING[name]


def test_layer_plan(name, report):
    layers = {entry["layer"]: entry["status"] for entry in report["layers"]}
    assert {key: layers[key] for key in EXPECTED_LAYERS[name]} == EXPECTED_LAYERS[name]


def test_module_over_the_connection_matches(host, name):
    result = host.ansible("moe_infra.deepep.deepep_facts", "gather_subset=topology sysfs_root=/opt/moe-fixtures/sys",
                          check=True)
    assert result["deepep"]["topology"]["deepep_device_to_hca_mapping"] == EXPECTED_MAPPING[name]
    assert result["changed"] is False


def test_discovery_changed_nothing_on_the_node(host):
    # Read-only: no conf file was written, and the params fixture is as planted.
    assert host.file("/opt/moe-fixtures/modprobe.d").is_directory
    assert host.run("ls -A /opt/moe-fixtures/modprobe.d").stdout == ""
    assert not host.file("/etc/modprobe.d/nvidia-deepep.conf").exists


def test_driver_params_as_planted(host, name, report):
    params = report["node"]["driver_params"]
    assert params["driver_loaded"] is True
    if name == "ib-node":
        assert params["registry_dwords_live"] == "PeerMappingOverride=1;"
        assert params["settings"][0]["live"] == 1 and params["settings"][0]["configured"] is None
    else:
        assert params["registry_dwords_live"] == ""
