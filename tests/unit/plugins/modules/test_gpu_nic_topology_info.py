# -*- coding: utf-8 -*-
from __future__ import annotations

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import gpu_nic_topology_info as module
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import SysfsTree, ib_gids, write_nvidia_params


def topo(run_module, sysfs, **args):
    args["sysfs_root"] = str(sysfs)
    result, failed = run_module(module, args)
    assert not failed, result
    assert result["changed"] is False
    return result


@pytest.mark.parametrize("name", ["gcp_b200", "ib_with_frontend", "one_port_down", "h200_no_nics", "no_gpus"])
def test_mapping_string_of_every_fixture_machine(run_module, tmp_path, name):
    expected = machines.MACHINES[name](tmp_path)
    result = topo(run_module, tmp_path)
    assert result["deepep_device_to_hca_mapping"] == expected


def test_gcp_b200_one_nic_per_gpu_under_each_switch(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result = topo(run_module, tmp_path)
    assert result["deepep_device_to_hca_mapping"] == (
        "0:rocep4s0:1,1:rocep6s0:1,2:rocep68s0:1,3:rocep70s0:1,"
        "4:rocep132s0:1,5:rocep134s0:1,6:rocep196s0:1,7:rocep198s0:1")
    assert result["link_layer"] == "Ethernet"
    assert [m["distance"] for m in result["mapping"]] == ["PIX"] * 8
    assert len(set(m["hca"] for m in result["mapping"])) == 8
    # The switch neighbour NIC is PIX too (the balance case), other switches are PHB/SYS.
    assert result["distances"]["0"]["rocep6s0:1"] == "PIX"
    assert result["distances"]["0"]["rocep68s0:1"] == "NODE"
    assert result["distances"]["0"]["rocep132s0:1"] == "SYS"
    assert result["nvshmem_hca_list"].split(",")[0] == "rocep4s0:1"


def test_frontend_ethernet_nic_is_not_mapped(run_module, tmp_path):
    machines.ib_with_frontend(tmp_path)
    result = topo(run_module, tmp_path)
    assert result["link_layer"] == "InfiniBand"
    assert "mlx5_8" not in result["deepep_device_to_hca_mapping"]
    assert {"hca": "mlx5_8", "port": 1, "reason": "link layer Ethernet, mapping InfiniBand"}.items() <= \
        result["skipped_ports"][-1].items()
    assert result["distances"]["0"]["mlx5_1:1"] == "PXB"


def test_forced_ethernet_maps_everything_to_the_frontend_nic(run_module, tmp_path):
    machines.ib_with_frontend(tmp_path)
    result = topo(run_module, tmp_path, link_layer="Ethernet")
    assert result["deepep_device_to_hca_mapping"] == ",".join("%d:mlx5_8:1" % i for i in range(8))


def test_down_port_is_skipped_and_gpu_shares_nearest(run_module, tmp_path):
    machines.one_port_down(tmp_path)
    result = topo(run_module, tmp_path)
    assert result["deepep_device_to_hca_mapping"] == "0:mlx5_0:1,1:mlx5_0:1,2:mlx5_2:1,3:mlx5_3:1"
    assert result["skipped_ports"][0]["reason"] == "port state DOWN"


def test_exclude_and_include(run_module, tmp_path):
    machines.ib_with_frontend(tmp_path)
    excluded = topo(run_module, tmp_path, hca_exclude=["^mlx5_[0-3]$"])
    # GPUs 0-3 lose their own NIC; each goes to the nearest remaining one, balanced.
    assert excluded["deepep_device_to_hca_mapping"] == (
        "0:mlx5_4:1,1:mlx5_5:1,2:mlx5_6:1,3:mlx5_7:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1")
    included = topo(run_module, tmp_path, hca_include=["^mlx5_[01]$"])
    assert included["deepep_device_to_hca_mapping"] == (
        "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_0:1,3:mlx5_1:1,4:mlx5_0:1,5:mlx5_1:1,6:mlx5_0:1,7:mlx5_1:1")


def test_no_nics_is_a_message_not_a_failure(run_module, tmp_path):
    machines.h200_no_nics(tmp_path)
    result = topo(run_module, tmp_path)
    assert result["mapping"] == []
    assert result["deepep_device_to_hca_mapping"] == ""
    assert "no RDMA HCA found" in result["msg"]
    assert [g["pci_address"] for g in result["gpus"]] == ["0000:00:%02x.0" % s for s in range(6, 10)]


def test_no_gpus(run_module, tmp_path):
    machines.no_gpus(tmp_path)
    result = topo(run_module, tmp_path)
    assert result["mapping"] == [] and result["gpus"] == []
    assert "no NVIDIA GPU found" in result["msg"]


def test_equal_distance_is_balanced_round_robin(run_module, tmp_path):
    # 8 GPUs and 4 NICs all on different root ports of one host bridge: every pair is PHB.
    tree = SysfsTree(tmp_path)
    rc = tree.root_complex("pci0000:00", numa_node=0)
    for i in range(8):
        rc.bridge("0000:00:%02x.0" % (i + 1)).gpu("0000:%02x:00.0" % (i + 0x10))
    for i in range(4):
        rc.bridge("0000:00:%02x.0" % (i + 0x11)).hca("0000:%02x:00.0" % (i + 0x20), "mlx5_%d" % i,
                                                     [{"link_layer": "InfiniBand", "gids": ib_gids(i)}])
    result = topo(run_module, tmp_path)
    assert result["deepep_device_to_hca_mapping"] == (
        "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_0:1,5:mlx5_1:1,6:mlx5_2:1,7:mlx5_3:1")
    assert set(m["distance"] for m in result["mapping"]) == {"PHB"}


def test_constrained_gpu_is_not_crowded_out(run_module, tmp_path):
    # GPU0 is PHB to both NICs; GPU1 is PIX to mlx5_0 only. A greedy pass in GPU order would give
    # GPU0 mlx5_0 (first of two equals) and then crowd GPU1 onto it as well.
    tree = SysfsTree(tmp_path)
    rc = tree.root_complex("pci0000:00", numa_node=0)
    rc.bridge("0000:00:01.0").gpu("0000:01:00.0")
    switch = rc.bridge("0000:00:02.0").bridge("0000:02:00.0")
    switch.bridge("0000:03:00.0").gpu("0000:04:00.0")
    switch.bridge("0000:03:01.0").hca("0000:05:00.0", "mlx5_0", [{"link_layer": "InfiniBand"}])
    rc.bridge("0000:00:03.0").hca("0000:06:00.0", "mlx5_1", [{"link_layer": "InfiniBand"}])
    result = topo(run_module, tmp_path)
    assert result["distances"] == {"0": {"mlx5_0:1": "PHB", "mlx5_1:1": "PHB"},
                                   "1": {"mlx5_0:1": "PIX", "mlx5_1:1": "PHB"}}
    assert result["deepep_device_to_hca_mapping"] == "0:mlx5_1:1,1:mlx5_0:1"


def test_invalid_regex_fails_with_the_option_name(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result, failed = run_module(module, {"sysfs_root": str(tmp_path), "hca_exclude": ["mlx5_[("]})
    assert failed
    assert "hca_exclude" in result["msg"] and "mlx5_[(" in result["msg"]


def test_check_mode_gives_the_same_answer(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    normal = topo(run_module, tmp_path)
    checked, failed = run_module(module, {"sysfs_root": str(tmp_path)}, check_mode=True)
    assert not failed
    assert checked["mapping"] == normal["mapping"] and checked["changed"] is False


@pytest.mark.parametrize("name", ["gcp_b200", "gcp_b200_doca", "ib_with_frontend", "h200_no_nics", "no_gpus"])
def test_node_info_returns_what_each_discovery_module_returns(run_module, tmp_path, name):
    """deepep_node_info (preflight's one call) gives exactly the five modules' results, on every fixture machine."""
    from ansible_collections.moe_infra.deepep.plugins.modules import (
        cuda_toolkit_info, deepep_node_info, nvidia_driver_params, nvidia_gpu_info, rdma_hca_info)
    machines.MACHINES[name](tmp_path)
    sysfs, include, cuda_home = str(tmp_path), [str(tmp_path / "include")], str(tmp_path / "cuda")
    proc, modprobe = tmp_path / "proc", tmp_path / "modprobe.d"
    write_nvidia_params(proc, registry_dwords="PeerMappingOverride=1;")
    modprobe.mkdir()
    (modprobe / "nvidia-deepep.conf").write_text('options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n')
    wanted = dict(registry_dwords={"PeerMappingOverride": 1}, module_params={"EnableStreamMemOPs": "1"})
    combined, failed = run_module(deepep_node_info, dict(sysfs_root=sysfs, include_dirs=include, cuda_home=cuda_home,
                                                         hca_exclude=["^nothing$"], procfs_root=str(proc),
                                                         modprobe_dir=str(modprobe), **wanted))
    assert not failed and combined["changed"] is False, combined
    for key, single, args in (
            ("gpu", nvidia_gpu_info, dict(sysfs_root=sysfs)),
            ("rdma", rdma_hca_info, dict(sysfs_root=sysfs, include_dirs=include)),
            ("topology", module, dict(sysfs_root=sysfs, hca_exclude=["^nothing$"])),
            ("cuda", cuda_toolkit_info, dict(cuda_home=cuda_home)),
            ("driver_params", nvidia_driver_params, dict(procfs_root=str(proc), modprobe_dir=str(modprobe),
                                                         state="query", **wanted))):
        alone, failed = run_module(single, args)
        assert not failed, alone
        # nvidia_driver_params' notes and initramfs are about writing its conf file, which a query never does.
        # rdma_hca_info's waited_seconds is about its wait_for_active, which discovery does not do.
        left_out = ("changed", "invocation") + (("notes", "initramfs") if key == "driver_params" else ()) + (
            ("waited_seconds",) if key == "rdma" else ())
        expected = {k: v for k, v in alone.items() if k not in left_out}
        assert combined[key] == expected, key
    assert combined["gpu"]["gpu_count"] == len(combined["topology"]["gpus"])
    # The regkey is configured and live; EnableStreamMemOPs neither (the fixture's params do not set it).
    assert combined["driver_params"]["mismatched"] == ["EnableStreamMemOPs"]


def test_node_info_reads_the_compiler(run_module, tmp_path, fake_bin):
    from ansible_collections.moe_infra.deepep.plugins.modules import deepep_node_info
    fake_bin("gcc", stdout="12.2.0\n")
    result, failed = run_module(deepep_node_info, dict(sysfs_root=str(tmp_path), procfs_root=str(tmp_path)))
    assert not failed and result["compiler"] == {"gcc_version": "12.2.0"}, result
    fake_bin("gcc", stdout="", stderr="gcc: fatal error: no input files", rc=1)
    result, failed = run_module(deepep_node_info, dict(sysfs_root=str(tmp_path), procfs_root=str(tmp_path)))
    assert failed and "-dumpfullversion failed (rc 1): gcc: fatal error" in result["msg"], result


def test_node_info_without_a_compiler(run_module, tmp_path, monkeypatch):
    from ansible_collections.moe_infra.deepep.plugins.modules import deepep_node_info
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.get_bin_path", lambda self, name, *a, **k: None)
    result, failed = run_module(deepep_node_info, dict(sysfs_root=str(tmp_path), procfs_root=str(tmp_path)))
    assert not failed and result["compiler"] == {"gcc_version": ""}, result
    assert result["driver_params"]["driver_loaded"] is False, result


def test_node_info_refuses_a_bad_driver_setting(run_module, tmp_path):
    from ansible_collections.moe_infra.deepep.plugins.modules import deepep_node_info
    result, failed = run_module(deepep_node_info, dict(sysfs_root=str(tmp_path), registry_dwords={"Peer Mapping": 1}))
    assert failed and "registry_dwords: Peer Mapping=1 is not a setting name" in result["msg"], result


def test_node_info_refuses_a_bad_pattern(run_module, tmp_path):
    from ansible_collections.moe_infra.deepep.plugins.modules import deepep_node_info
    result, failed = run_module(deepep_node_info, dict(sysfs_root=str(tmp_path), hca_include=["("]))
    assert failed and "hca_include: '(' is not a valid regular expression" in result["msg"]
