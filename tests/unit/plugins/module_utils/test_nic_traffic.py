# -*- coding: utf-8 -*-
"""Which mapped NIC ports carried an internode test's traffic (KF03)."""
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.nic_traffic import traffic


def hcas(words, rcv=0):
    return [{"name": name, "ports": [{"port": 1, "port_xmit_data": count, "port_rcv_data": rcv}]}
            for name, count in words.items()]


BEFORE = hcas({"mlx5_0": 100, "mlx5_1": 100, "mlx5_2": 100})


def test_every_mapped_port_sent_data():
    after = hcas({"mlx5_0": 100 + (1 << 20), "mlx5_1": 100 + (1 << 20), "mlx5_2": 100}, rcv=10)
    result = traffic(BEFORE, after, ["mlx5_0:1", "mlx5_1"])
    assert result["ports"] == [{"nic": "mlx5_0:1", "xmit_bytes": 4 << 20, "rcv_bytes": 40},
                               {"nic": "mlx5_1:1", "xmit_bytes": 4 << 20, "rcv_bytes": 40}]
    assert result["idle"] == [] and result["problems"] == []


def test_every_gpu_on_one_nic_is_kf03():
    after = hcas({"mlx5_0": 100 + (1 << 24), "mlx5_1": 101, "mlx5_2": 100})
    result = traffic(BEFORE, after, ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1"])
    assert result["idle"] == ["mlx5_1:1", "mlx5_2:1"]
    assert result["problems"][0].startswith("KF03: mapped NIC(s) mlx5_1:1, mlx5_2:1 carried less than 1048576 bytes "
                                            "while mlx5_0:1 carried the traffic")


def test_port_without_counters_cannot_be_checked():
    after = [{"name": "mlx5_0", "ports": [{"port": 1, "port_xmit_data": None}]}]
    result = traffic(BEFORE, after, ["mlx5_0:1", "mlx5_9:1"])
    assert result["unknown"] == ["mlx5_0:1", "mlx5_9:1"]
    assert result["problems"] == ["no port_xmit_data counter for mlx5_0:1, mlx5_9:1: traffic cannot be checked"]
