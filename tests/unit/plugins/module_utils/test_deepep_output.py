# -*- coding: utf-8 -*-
"""The parser on DeepEP's real output (PR #466 tests, 2 x H200: tests/fixtures/deepep_output/)."""
from __future__ import annotations

import os

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.deepep_output import (
    below_thresholds,
    parse_internode,
    parse_intranode,
    parse_elastic_barrier,
    parse_elastic_ep,
    parse_low_latency,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "deepep_output")


def recorded(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_intranode_recorded_output():
    parsed = parse_intranode(recorded("intranode.log"))
    assert parsed["checks"] == 24 and parsed["checks_passed"] == 24
    assert parsed["best"]["dispatch_fp8"] == {"sms": 24, "nvl_chunk": 24, "gbps": 246.63, "us": 244.63}
    assert parsed["best"]["dispatch_bf16"] == {"sms": 24, "nvl_chunk": 12, "gbps": 339.06, "us": 345.1}
    assert parsed["best"]["combine_bf16"] == {"sms": 24, "nvl_chunk": 7, "gbps": 286.78, "us": 408.01}


def test_intranode_cut_short_counts_only_what_passed():
    text = recorded("intranode.log")
    cut = text[:text.index("[testing] Running with FP8, with top-k (async=True, previous=False)")]
    cut += "[testing] Running with FP8, with top-k (async=True, previous=False) ...Traceback (most recent call last):\n"
    parsed = parse_intranode(cut)
    assert parsed["checks"] == 12 and parsed["checks_passed"] == 11
    assert parsed["best"]["dispatch_fp8"] is None


def test_low_latency_recorded_output():
    parsed = parse_low_latency(recorded("low_latency.log"))
    assert parsed["ranks"] == [
        {"rank": 0, "dispatch_gbps": 244.47, "dispatch_us": 30.73, "combine_gbps": 358.6, "combine_us": 40.54},
        {"rank": 1, "dispatch_gbps": 259.65, "dispatch_us": 28.93, "combine_gbps": 363.04, "combine_us": 40.04}]
    assert parsed["summary"] == {"min_dispatch_gbps": 244.47, "max_dispatch_gbps": 259.65,
                                 "min_combine_gbps": 358.6, "max_combine_gbps": 363.04}


def test_low_latency_ranks_sharing_a_line_are_both_read():
    # The end of a real log (2 x H200, docs/results/v2-rollback-h200x2): rank 0's result came before rank 1's newline.
    # The run was read as "1 of 2 ranks reported bandwidth" and its good build rolled back.
    parsed = parse_low_latency(recorded("low_latency-interleaved.log"))
    assert [rank["rank"] for rank in parsed["ranks"]] == [0, 1]
    assert parsed["ranks"][0] == {"rank": 0, "dispatch_gbps": 249.29, "dispatch_us": 30.13, "combine_gbps": 374.46,
                                  "combine_us": 38.82}
    assert parsed["summary"]["min_dispatch_gbps"] == 249.29 and parsed["summary"]["max_combine_gbps"] == 374.46


def test_elastic_ranks_sharing_a_line_are_both_read():
    # The recorded 2-rank V2 lines, each pair joined as two ranks printing at once would leave them.
    ep = [line.strip() for line in recorded("elastic_ep.log").splitlines() if " EP:" in line]
    joined = ep[0] + ep[1] + "\n" + "\n".join(ep[2:])
    assert parse_elastic_ep(joined)["results"] == parse_elastic_ep("\n".join(ep))["results"]
    assert len(parse_elastic_ep(joined)["results"]) == len(ep)
    barrier = parse_elastic_barrier("> EP:   1/  2, barrier time: 8.346 us> EP:   0/  2, barrier time: 24.290 us\n")
    assert barrier["barrier_us"] == {0: 24.29, 1: 8.346}


def test_thresholds():
    intranode = parse_intranode(recorded("intranode.log"))
    assert below_thresholds("intranode", intranode, {"dispatch_fp8": 246, "combine_bf16": 286}) == []
    assert below_thresholds("intranode", intranode, {"dispatch_fp8": 247}) == ["dispatch_fp8 246.63 < 247 GB/s"]
    low_latency = parse_low_latency(recorded("low_latency.log"))
    assert below_thresholds("low_latency", low_latency, {"dispatch": 200, "combine": 248}) == []
    assert below_thresholds("low_latency", low_latency, {"dispatch": 250}) == [
        "dispatch on the slowest rank 244.47 < 250 GB/s"]
    assert below_thresholds("low_latency", parse_low_latency(""), {"combine": 1}) == [
        "combine on the slowest rank None < 1 GB/s"]


def test_internode_output_format():
    # internode.log follows test_internode.py's format strings (a fixture, not a recording).
    parsed = parse_internode(recorded("internode.log"))
    assert (parsed["checks"], parsed["checks_passed"]) == (32, 32)
    assert parsed["best"]["dispatch_fp8"] == {"sms": 24, "nvl_chunk": 20, "rdma_chunk": 16, "us": 709.0,
                                              "gbps": 44.72, "nvl_gbps": 146.03}
    assert parsed["best"]["dispatch_bf16"]["gbps"] == 45.40
    assert parsed["best"]["combine_bf16"] == {"sms": 24, "nvl_chunk": 4, "rdma_chunk": 24, "us": 1391.23,
                                              "gbps": 44.91, "nvl_gbps": 146.65}
    # The per-config tuning lines are not the best.
    assert below_thresholds("internode", parsed, {"dispatch_bf16": 45, "combine_bf16": 46}) == [
        "combine_bf16 44.91 < 46 GB/s"]
    # The intranode parser does not take internode lines for its own (RDMA chunk in the line).
    assert parse_intranode(recorded("internode.log"))["best"]["dispatch_bf16"] is None
