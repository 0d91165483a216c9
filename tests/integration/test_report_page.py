# -*- coding: utf-8 -*-
"""The cluster report page in a real headless browser (Debian's chromium), rendered from a recorded multi-node
result: molecule/site's report after its runs (converge, the no-op rerun, --tags deepep on 1 then 4 nodes, the
internode run across the containers, node4 killed mid-run), kept in tests/fixtures/cluster_report/.

The browser's DOM after loading says what the page holds; its screenshot says what is displayed (the state colours
of the matrix and the bars, decoded from the PNG). REPORT_SCREENSHOT_OUT=path keeps the screenshot
(docs/images/cluster-report.png is one)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.cluster_report import render_html
from ansible_collections.moe_infra.deepep.tests.unit.plugins.module_utils.test_cluster_report import parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = os.path.join(REPO, "tests", "fixtures", "cluster_report", "molecule-site-report.json")
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
# What the page paints (its CSS): the matrix's ok / changed / failed / dropped cells and the passing bars.
COLOURS = {"ok": (0xd9, 0xf2, 0xdc), "changed": (0xd6, 0xe6, 0xfb), "failed": (0xf8, 0xd0, 0xd0),
           "dropped": (0xe8, 0xd8, 0xf0), "bar_pass": (0x2e, 0x7d, 0x32), "problem_mark": (0xb7, 0x1c, 0x1c)}


@pytest.fixture
def page(tmp_path):
    if not BROWSER:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with open(RECORDED) as handle:
        report = json.load(handle)
    path = tmp_path / "report.html"
    path.write_text(render_html(report))
    return report, path


def browse(path, tmp_path, *args):
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--user-data-dir=%s" % (tmp_path / "profile")] + list(args) + ["file://%s" % path]
    # The page needs no network: none is offered (no proxy, no DNS) beyond what the machine has.
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB/RGBA, non-interlaced PNG (what chromium writes)."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, dummy, dummy, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
        elif kind == b"IDAT":
            idat += body
    raw, bpp = zlib.decompress(idat), 3 if colour == 2 else 4
    stride, prev, rows, i = width * bpp, bytearray(width * bpp), [], 0
    for dummy in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up, corner = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def test_the_browser_shows_every_node_its_layers_bandwidths_traffic_and_who_dropped_out(page, tmp_path):
    report, path = page
    dom = browse(path, tmp_path, "--dump-dom").stdout
    found = parse(dom)

    # The matrix: one row per node of the recorded run, one cell per layer; node4 dropped out of the last run.
    # First under the counts: the problems, one row per failure across the nodes, worst first (the host that dropped
    # out, with why and when; then by how many nodes), each with its fix, the command where a layer fixes it, and
    # a link to its doctor entry. node4's earlier findings are stale and not repeated.
    assert dom.index('id="problems"') < dom.index('id="matrix"') < dom.index('id="bandwidth"')
    groups = [(e["attrs"]["data-id"], e["attrs"]["data-nodes"]) for e in found
              if e["tag"] == "tr" and e["attrs"].get("data-id")]
    assert groups == [("DROPPED", "node4"), ("KF12", "node1,node2,node3"), ("KF15", "node1,node2,node3"),
                      ("KF27", "node1,node2,node3"), ("KF28", "node1,node2,node3"), ("MEMLOCK", "node1,node2,node3")]
    commands = [e["text"] for e in found if e["tag"] == "pre"]
    run = "ansible-playbook playbooks/site.yml -i %s --limit " % report["inventory"]  # the scenario's inventory
    assert commands == [run + "node4", run + "node1,node2,node3 --tags deepep",
                        run + "node1,node2,node3 --tags nvshmem_ibgda", run + "node1,node2,node3 --tags doca_ofed",
                        run + "node1,node2,node3 --tags memlock"]
    links = [e["attrs"]["href"] for e in found if e["tag"] == "a"]
    assert len(links) == 5 and all(link.startswith(
        "https://github.com/moe-infra/ansible-collection-deepep/blob/main/docs/doctor.md#") for link in links)
    # Each lands on its check's row there.
    with open(os.path.join(REPO, "docs", "doctor.md")) as handle:
        doctor_md = handle.read()
    assert all('<a id="%s"></a>' % link.split("#", 1)[1] in doctor_md for link in links), links

    rows = dict((e["attrs"]["data-host"], e["text"]) for e in found if e["tag"] == "tr" and e["attrs"].get("data-host")
                and e["attrs"].get("data-nic") is None and "data-id" not in e["attrs"])
    assert sorted(rows) == ["node1", "node2", "node3", "node4"]
    assert "dropped out" in rows["node4"] and "dropped out" not in rows["node1"]
    cells = [e for e in found if e["attrs"].get("data-layer")]
    assert len(cells) == 4 * 9
    states = dict(((c["attrs"]["data-layer"]), c["attrs"]["data-state"]) for c in cells)
    assert set(states) == {"doca_ofed", "cuda", "nvidia_peermapping", "gdrcopy", "nvshmem_ibgda", "nccl", "deepep",
                           "tests", "doctor"}
    live = cells[:3 * 9]  # node1-3 (rows in name order); node4's nine follow
    # A V1 run: no NCCL layer, shown as skipped; node4 dropped out: none of its cells is green.
    assert {c["attrs"]["data-state"] for c in live if c["attrs"]["data-layer"] == "nccl"} == {"skipped"}
    assert {c["attrs"]["data-state"] for c in cells[3 * 9:]} == {"dropped"}
    tests = [c["text"].strip() for c in live if c["attrs"]["data-layer"] == "tests"]
    assert all(text.startswith("passed") for text in tests), tests
    # The layers agree with the doctor: KF15 (NVSHMEM on RoCE) on each live node makes its NVSHMEM cell a problem,
    # KF12 its DeepEP cell, KF27 its DOCA-OFED cell; the doctor cell names the problems.
    for layer, text in (("nvshmem_ibgda", "3.4.5: KF15"), ("deepep", "v1: KF12"), ("doctor", "KF12, KF15, KF27 +2")):
        found_cells = [(c["attrs"]["data-state"], c["text"].strip()) for c in live if c["attrs"]["data-layer"] == layer]
        # (The text, then the build's fingerprint where there is one.)
        assert [(state, shown.startswith(text)) for state, shown in found_cells] == [("failed", True)] * 3, found_cells

    # DeepEP's bars: five figures per node against the scenario's thresholds (dispatch_fp8 240, dispatch 240).
    bars = [e["attrs"] for e in found if "bar " in e["attrs"].get("class", "") + " " and e["attrs"].get("data-metric")]
    assert len(bars) == 4 * 5
    fp8 = [b for b in bars if b["data-metric"] == "intranode/dispatch_fp8"]
    assert [(b["data-gbps"], b["class"]) for b in fp8] == [("246.63", "bar pass")] * 4

    # Internode: every node's eight NICs sent 256 MiB and received nothing (the containers' stand-in counters count
    # only what is sent): one-way traffic is not a green bar.
    nics = [e["attrs"] for e in found if e["attrs"].get("data-nic")]
    assert len(nics) == 4 * 8 and {n["class"] for n in nics} == {"state-failed"}
    # When and where it dropped out, and why as far as the run knows (killed mid-run: its error is in the output).
    dropped = report["hosts"]["node4"]["dropped"]
    assert [e["text"] for e in found if e["attrs"].get("id") == "dropped"] == [
        "node4 (site.yml at %s: failed or unreachable in site.yml (its error is in that run's output))" % dropped["at"]]

    # What is displayed: the matrix's colours and the green bars are painted.
    shot = tmp_path / "report.png"
    browse(path, tmp_path, "--window-size=1300,1900", "--force-device-scale-factor=0.5",
           "--screenshot=%s" % shot)
    width, height, rows_px = png_pixels(str(shot))
    assert (width, height) == (650, 950)
    painted = dict((name, sum(row.count(colour) for row in rows_px)) for name, colour in COLOURS.items())
    assert painted["ok"] > 500 and painted["bar_pass"] > 500 and painted["dropped"] > 50, painted
    # The first screen an on-call engineer sees (1300 x 900): the problems are on it.
    first = tmp_path / "first-screen.png"
    browse(path, tmp_path, "--window-size=1300,900", "--screenshot=%s" % first)
    width, height, rows_px = png_pixels(str(first))
    marked = [y for y, row in enumerate(rows_px) if COLOURS["problem_mark"] in row]
    assert marked and max(marked) < 900 and len(marked) > 6 * 20, (len(marked), marked[:3])
    if os.environ.get("REPORT_SCREENSHOT_OUT"):
        browse(path, tmp_path, "--window-size=1300,1900", "--screenshot=%s" % os.environ["REPORT_SCREENSHOT_OUT"])
