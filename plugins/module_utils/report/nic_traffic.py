# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Which NICs carried an internode test's traffic (KF03: every GPU on mlx5_0 gives ~6.5 GB/s and one NIC's
port_xmit_data grows). Pure: takes rdma_hca_info's results before and after the test."""

from __future__ import annotations

# port_xmit_data / port_rcv_data count 4-byte words.
WORD = 4


def _ports(hcas):
    return dict(((hca["name"], port["port"]), port) for hca in hcas or [] for port in hca.get("ports", []))


def traffic(before, after, mapped, min_bytes=1 << 20):
    """Per mapped NIC port the bytes sent and received during the test; the mapped ports that carried less
    than min_bytes are idle.

    mapped: ['mlx5_0:1', ...] (the NICs the GPU-to-NIC mapping gives the GPUs; a bare name means port 1).
    """
    start, end = _ports(before), _ports(after)
    ports, idle, unknown = [], [], []
    for entry in mapped:
        name, port = (str(entry).split(":", 1) + ["1"])[:2]
        key = (name, int(port))
        first, last = start.get(key), end.get(key)
        if first is None or last is None or first.get("port_xmit_data") is None \
                or last.get("port_xmit_data") is None:
            unknown.append("%s:%d" % key)
            continue
        sent = (last["port_xmit_data"] - first["port_xmit_data"]) * WORD
        received = ((last.get("port_rcv_data") or 0) - (first.get("port_rcv_data") or 0)) * WORD
        ports.append({"nic": "%s:%d" % key, "xmit_bytes": sent, "rcv_bytes": received})
        if sent < min_bytes:
            idle.append("%s:%d" % key)
    problems = []
    if idle:
        busy = [p["nic"] for p in ports if p["nic"] not in idle]
        problems.append("KF03: mapped NIC(s) %s carried less than %d bytes while %s carried the traffic: the GPUs "
                        "share one NIC (set DEEP_EP_DEVICE_TO_HCA_MAPPING / NVSHMEM_HCA_LIST)"
                        % (", ".join(idle), min_bytes, ", ".join(busy) or "none"))
    if unknown:
        problems.append("no port_xmit_data counter for %s: traffic cannot be checked" % ", ".join(unknown))
    return {"ports": ports, "idle": idle, "unknown": unknown, "problems": problems}
