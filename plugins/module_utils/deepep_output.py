# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Parse the output of DeepEP's tests/test_intranode.py, test_internode.py and test_low_latency.py (V1)."""

from __future__ import annotations

import re

CHECK_RE = re.compile(r"^\[testing\] Running with (FP8|BF16), (with|without) top-k .*\.\.\.(.*)$")
BEST_DISPATCH_RE = re.compile(
    r"\[tuning\] Best dispatch \((FP8|BF16)\): SMs (\d+), NVL chunk (\d+), ([\d.]+) GB/s \(NVL\), t: ([\d.]+) us")
BEST_COMBINE_RE = re.compile(r"\[tuning\] Best combine: SMs (\d+), NVL chunk (\d+): ([\d.]+) GB/s \(NVL\), t: ([\d.]+) us")
# test_internode.py (V1, e.g. PR #466 head): bandwidths over RDMA and NVLink; RDMA is what the NICs carry.
BEST_INTERNODE_DISPATCH_RE = re.compile(
    r"\[tuning\] Best dispatch \((FP8|BF16)\): SMs (\d+), NVL chunk (\d+), RDMA chunk (\d+): ([\d.]+) \+ ([\d.]+) us, "
    r"([\d.]+) GB/s \(RDMA\), ([\d.]+) GB/s \(NVL\)")
BEST_INTERNODE_COMBINE_RE = re.compile(
    r"\[tuning\] Best combine: SMs (\d+), NVL chunk (\d+), RDMA chunk (\d+), ([\d.]+) \+ ([\d.]+) us, "
    r"([\d.]+) GB/s \(RDMA\), ([\d.]+) GB/s \(NVL\)")
LL_RE = re.compile(r"\[rank (\d+)\] Dispatch bandwidth: ([\d.]+) GB/s, avg_t=([\d.]+) us \| "
                   r"Combine bandwidth: ([\d.]+) GB/s, avg_t=([\d.]+) us")


def _best(current, candidate, key="gbps"):
    return candidate if current is None or candidate[key] > current[key] else current


def parse_intranode(text):
    checks, passed = 0, 0
    best = {"dispatch_fp8": None, "dispatch_bf16": None, "combine_bf16": None}
    for line in (text or "").splitlines():
        line = line.strip()
        match = CHECK_RE.match(line)
        if match:
            checks += 1
            passed += 1 if "passed" in match.group(3) else 0
            continue
        match = BEST_DISPATCH_RE.search(line)
        if match:
            key = "dispatch_" + match.group(1).lower()
            best[key] = _best(best[key], {"sms": int(match.group(2)), "nvl_chunk": int(match.group(3)),
                                          "gbps": float(match.group(4)), "us": float(match.group(5))})
            continue
        match = BEST_COMBINE_RE.search(line)
        if match:
            best["combine_bf16"] = _best(best["combine_bf16"], {
                "sms": int(match.group(1)), "nvl_chunk": int(match.group(2)),
                "gbps": float(match.group(3)), "us": float(match.group(4))})
    return {"checks": checks, "checks_passed": passed, "best": best}


def parse_internode(text):
    """Checks and the best tuning results; C(gbps) is the RDMA bandwidth, C(nvl_gbps) the NVLink one."""
    checks, passed = 0, 0
    best = {"dispatch_fp8": None, "dispatch_bf16": None, "combine_bf16": None}
    for line in (text or "").splitlines():
        line = line.strip()
        match = CHECK_RE.match(line)
        if match:
            checks += 1
            passed += 1 if "passed" in match.group(3) else 0
            continue
        match = BEST_INTERNODE_DISPATCH_RE.search(line)
        if match:
            key = "dispatch_" + match.group(1).lower()
            best[key] = _best(best[key], {
                "sms": int(match.group(2)), "nvl_chunk": int(match.group(3)), "rdma_chunk": int(match.group(4)),
                "us": float(match.group(6)), "gbps": float(match.group(7)), "nvl_gbps": float(match.group(8))})
            continue
        match = BEST_INTERNODE_COMBINE_RE.search(line)
        if match:
            best["combine_bf16"] = _best(best["combine_bf16"], {
                "sms": int(match.group(1)), "nvl_chunk": int(match.group(2)), "rdma_chunk": int(match.group(3)),
                "us": float(match.group(5)), "gbps": float(match.group(6)), "nvl_gbps": float(match.group(7))})
    return {"checks": checks, "checks_passed": passed, "best": best}


def parse_low_latency(text):
    ranks = {}
    for line in (text or "").splitlines():
        match = LL_RE.search(line)
        if match:
            ranks[int(match.group(1))] = {
                "dispatch_gbps": float(match.group(2)), "dispatch_us": float(match.group(3)),
                "combine_gbps": float(match.group(4)), "combine_us": float(match.group(5))}
    ordered = [dict(rank=rank, **ranks[rank]) for rank in sorted(ranks)]
    summary = {}
    if ordered:
        for key in ("dispatch_gbps", "combine_gbps"):
            summary["min_" + key] = min(r[key] for r in ordered)
            summary["max_" + key] = max(r[key] for r in ordered)
    return {"ranks": ordered, "summary": summary}


# The keys each kind of test's thresholds may use (the bandwidths its parser reports).
THRESHOLD_KEYS = {
    "intranode": ("dispatch_fp8", "dispatch_bf16", "combine_bf16"),
    "internode": ("dispatch_fp8", "dispatch_bf16", "combine_bf16"),
    "low_latency": ("dispatch", "combine"),
}


def below_thresholds(kind, parsed, thresholds):
    """Names of thresholds not met: 'dispatch_fp8 247.0 < 250' style strings."""
    misses = []
    if kind in ("intranode", "internode"):
        for key, minimum in thresholds.items():
            best = parsed["best"].get(key)
            if best is None or best["gbps"] < float(minimum):
                misses.append("%s %s < %s GB/s" % (key, best["gbps"] if best else "missing", minimum))
    else:
        for key, minimum in thresholds.items():
            value = parsed["summary"].get("min_%s_gbps" % key)
            if value is None or value < float(minimum):
                misses.append("%s on the slowest rank %s < %s GB/s" % (key, value, minimum))
    return misses
