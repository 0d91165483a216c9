# -*- coding: utf-8 -*-
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.modules import rdma_hca_info as module
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.machines import roce_port
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import SysfsTree


def info(run_module, sysfs, **args):
    args["sysfs_root"] = str(sysfs)
    args.setdefault("include_dirs", [])
    result, failed = run_module(module, args)
    assert not failed, result
    assert result["changed"] is False
    return result


def test_gcp_b200_rocep_names_gid_index_and_prefix(run_module, tmp_path):
    machines.gcp_b200(tmp_path / "sys")
    result = info(run_module, tmp_path / "sys")
    assert [h["name"] for h in result["hcas"]] == [
        "rocep4s0", "rocep6s0", "rocep68s0", "rocep70s0", "rocep132s0", "rocep134s0", "rocep196s0", "rocep198s0"]
    first = result["hcas"][0]
    assert first["family"] == "rocep"
    assert first["pci_address"] == "0000:04:00.0"
    assert first["numa_node"] == 0
    assert result["hcas"][4]["numa_node"] == 1
    assert first["netdevs"] == ["enp4s0"]
    assert first["virtual_function"] is False
    port = first["ports"][0]
    assert port == {**port, "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "Ethernet",
                    "rate": "400 Gb/sec (4X NDR)", "roce_v2_ipv4_gid_index": 3,
                    "port_xmit_data": 1024, "port_rcv_data": 2048}
    assert [g["index"] for g in port["gids"]] == [0, 1, 2, 3]
    assert port["gids"][3]["type"] == "RoCE v2" and port["gids"][3]["netdev"] == "enp4s0"
    assert result["hca_prefix"] == "rocep"
    assert result["ofed_version"] is None


def test_ib_node_prefix_and_no_gid_index(run_module, tmp_path):
    machines.ib_with_frontend(tmp_path)
    result = info(run_module, tmp_path)
    names = [h["name"] for h in result["hcas"]]
    assert names == ["mlx5_%d" % i for i in range(9)]
    assert result["hca_prefix"] == "mlx5"
    assert result["hcas"][0]["ports"][0]["roce_v2_ipv4_gid_index"] is None
    assert result["hcas"][8]["ports"][0]["link_layer"] == "Ethernet"
    assert result["hcas"][8]["ports"][0]["roce_v2_ipv4_gid_index"] == 3


def test_natural_order_puts_mlx5_10_after_mlx5_2(run_module, tmp_path):
    tree = SysfsTree(tmp_path)
    rc = tree.root_complex()
    for i, name in enumerate(["mlx5_10", "mlx5_2", "mlx5_1"]):
        rc.bridge("0000:00:%02x.0" % (i + 1)).hca("0000:%02x:00.0" % (i + 1), name, [{"link_layer": "InfiniBand"}])
    assert [h["name"] for h in info(run_module, tmp_path)["hcas"]] == ["mlx5_1", "mlx5_2", "mlx5_10"]


def test_down_port_and_gid_index_other_than_3(run_module, tmp_path):
    tree = SysfsTree(tmp_path)
    rc = tree.root_complex()
    rc.bridge("0000:00:01.0").hca("0000:01:00.0", "mlx5_0", [roce_port(1, "eth1", v2_index=5)], netdevs=["eth1"])
    rc.bridge("0000:00:02.0").hca("0000:02:00.0", "mlx5_1", [roce_port(2, "eth2", state="DOWN")], netdevs=["eth2"])
    result = info(run_module, tmp_path)
    assert result["hcas"][0]["ports"][0]["roce_v2_ipv4_gid_index"] == 5
    assert result["hcas"][1]["ports"][0]["state"] == "DOWN"
    assert result["hcas"][1]["ports"][0]["phys_state"] == "Disabled"
    assert result["hca_prefix"] == "mlx5"


def test_no_nics(run_module, tmp_path):
    machines.h200_no_nics(tmp_path)
    result = info(run_module, tmp_path)
    assert result["hcas"] == [] and result["hca_prefix"] is None


def test_missing_sysfs_class_is_empty_not_an_error(run_module, tmp_path):
    assert info(run_module, tmp_path / "nothing")["hcas"] == []


def test_sriov_virtual_function_is_flagged(run_module, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.root_complex().bridge("0000:00:01.0").hca(
        "0000:01:00.1", "mlx5_3", [{"link_layer": "InfiniBand"}], virtual_function=True)
    assert info(run_module, tmp_path)["hcas"][0]["virtual_function"] is True


def test_ofed_info_and_dmabuf_header(run_module, tmp_path, fake_bin):
    fake_bin("ofed_info", "OFED-internal-25.01-0.6.0:\n")
    with_symbol = tmp_path / "doca" / "infiniband"
    with_symbol.mkdir(parents=True)
    (with_symbol / "mlx5_api.h").write_text("#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT 1\n")
    distro = tmp_path / "distro" / "infiniband"
    distro.mkdir(parents=True)
    (distro / "mlx5_api.h").write_text("/* rdma-core 50 */\n")
    result = info(run_module, tmp_path / "sys", include_dirs=[str(tmp_path / "doca")])
    assert result["ofed_version"] == "OFED-internal-25.01-0.6.0"
    assert result["dmabuf_data_direct"] is True
    result = info(run_module, tmp_path / "sys", include_dirs=[str(tmp_path / "distro"), str(tmp_path / "doca")])
    assert result["mlx5_api_header"] == str(distro / "mlx5_api.h")
    assert result["dmabuf_data_direct"] is False
    # Where rdma-core's direct-verbs header is (the nvshmem_ibgda role's KF11 check reads it from the facts).
    assert result["mlx5dv_include_dirs"] == []
    (with_symbol / "mlx5dv.h").write_text("/* mlx5dv */\n")
    result = info(run_module, tmp_path / "sys", include_dirs=[str(tmp_path / "distro"), str(tmp_path / "doca")])
    assert result["mlx5dv_include_dirs"] == [str(tmp_path / "doca")]


def test_mellanox_pci_functions_with_and_without_a_driver(run_module, tmp_path):
    machines.h200_unbound_nic(tmp_path / "unbound")
    result = info(run_module, tmp_path / "unbound")
    assert result["hcas"] == [] and result["mellanox_pci_devices"] == ["0000:01:00.0"]
    machines.gcp_b200(tmp_path / "b200")
    assert len(info(run_module, tmp_path / "b200")["mellanox_pci_devices"]) == 8
    machines.h200_no_nics(tmp_path / "none")
    assert info(run_module, tmp_path / "none")["mellanox_pci_devices"] == []


def test_b200_after_doca_enumerates_mlx5(run_module, tmp_path):
    machines.gcp_b200_doca(tmp_path / "sys")
    result = info(run_module, tmp_path / "sys")
    assert [h["name"] for h in result["hcas"]] == ["mlx5_%d" % i for i in range(8)]
    assert result["hca_prefix"] == "mlx5"


def test_wait_for_active_reads_again_until_the_link_is_up(run_module, tmp_path):
    """Right after a reboot a port is DOWN for a while: with wait_for_active the module reads again until it is
    ACTIVE (a thread brings it up 3 s in); without it, one read."""
    import threading
    import time
    tree = SysfsTree(tmp_path)
    rc = tree.root_complex()
    rc.bridge("0000:00:01.0").hca("0000:01:00.0", "mlx5_0", [roce_port(1, "eth1", state="DOWN")], netdevs=["eth1"])
    (state,) = list(tmp_path.glob("devices/**/infiniband/mlx5_0/ports/1/state"))
    assert info(run_module, tmp_path)["hcas"][0]["ports"][0]["state"] == "DOWN"
    timer = threading.Timer(3, lambda: state.write_text("4: ACTIVE\n"))
    timer.start()
    started = time.time()
    try:
        result = info(run_module, tmp_path, wait_for_active=60)
    finally:
        timer.cancel()
    assert result["hcas"][0]["ports"][0]["state"] == "ACTIVE" and 2 <= result["waited_seconds"] < 30
    assert time.time() - started < 30
    state.write_text("1: DOWN\n")
    result = info(run_module, tmp_path, wait_for_active=2)  # gives up and returns what it read
    assert result["hcas"][0]["ports"][0]["state"] == "DOWN" and result["waited_seconds"] >= 2
