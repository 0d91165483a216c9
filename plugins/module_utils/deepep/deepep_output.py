# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Parse the output of DeepEP's tests/test_intranode.py, test_internode.py and test_low_latency.py (V1), and of
V2's tests/elastic/test_ep.py and test_barrier.py."""

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


# V2 (tests/elastic/test_ep.py): one line per rank, case and kind; SO is the scale-out (RDMA) bandwidth, SU the
# scale-up (NVLink) one. One rank has no scale-out: its SO is 0.
# The ranks print at once, so two ranks' results can share a line (one rank's text before the other's newline; seen
# in test_low_latency.py's output on 2 x H200, docs/results/v2-rollback-h200x2): every parser of per-rank lines
# takes each match in a line, not the line's first.
ELASTIC_CASE_RE = re.compile(r"^> Testing with (.*?) \.\.\.$")
ELASTIC_EP_RE = re.compile(
    r"[*\-#@+] EP:\s*(\d+)/(\d+) \| (dispatch|expanded dispatch|cached dispatch|combine|reduced combine): "
    r"(\d+) GB/s \(SO\), (\d+) GB/s \(SU\), ([\d.]+) us, (\d+) bytes")
ELASTIC_BARRIER_RE = re.compile(r"> EP:\s*(\d+)/\s*(\d+), barrier time: ([\d.]+) us")


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
    for match in LL_RE.finditer(text or ""):
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


def parse_elastic_ep(text):
    """Every case's per-rank results, and per kind the lowest bandwidths and the longest time over ranks and
    cases (min_dispatch_su_gbps, min_combine_so_gbps, max_dispatch_us, ...)."""
    case, cases, results = None, [], []
    for line in (text or "").splitlines():
        line = line.strip()
        match = ELASTIC_CASE_RE.match(line)
        if match:
            case = match.group(1)
            cases.append(case)
            continue
        for match in ELASTIC_EP_RE.finditer(line):
            results.append({"case": case, "rank": int(match.group(1)), "num_ranks": int(match.group(2)),
                            "kind": match.group(3).replace(" ", "_"), "so_gbps": float(match.group(4)),
                            "su_gbps": float(match.group(5)), "us": float(match.group(6)), "bytes": int(match.group(7))})
    summary = {}
    for kind in sorted(set(item["kind"] for item in results)):
        mine = [item for item in results if item["kind"] == kind]
        summary["min_%s_su_gbps" % kind] = min(item["su_gbps"] for item in mine)
        summary["min_%s_so_gbps" % kind] = min(item["so_gbps"] for item in mine)
        summary["max_%s_us" % kind] = max(item["us"] for item in mine)
    return {"cases": cases, "ranks": sorted(set(item["rank"] for item in results)), "results": results,
            "summary": summary}


def parse_elastic_barrier(text):
    """Each rank's barrier time, and the longest."""
    ranks = {}
    for line in (text or "").splitlines():
        for match in ELASTIC_BARRIER_RE.finditer(line):
            ranks[int(match.group(1))] = float(match.group(3))
    return {"ranks": sorted(ranks), "barrier_us": ranks,
            "summary": {"max_barrier_us": max(ranks.values()) if ranks else None}}


# The keys each kind of test's thresholds may use (the bandwidths its parser reports). V2's are the lowest over
# every rank and case of that kind; a one-node run has no scale-out (SO) bandwidth.
THRESHOLD_KEYS = {
    "intranode": ("dispatch_fp8", "dispatch_bf16", "combine_bf16"),
    "internode": ("dispatch_fp8", "dispatch_bf16", "combine_bf16"),
    "low_latency": ("dispatch", "combine"),
    "elastic_ep": ("dispatch_su", "combine_su", "dispatch_so", "combine_so"),
    "elastic_barrier": (),
    "jit_warmup": (),
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
