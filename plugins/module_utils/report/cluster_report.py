# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The cluster report: what site.yml, the doctor and internode.yml found per host, merged run after run into one
JSON document, and that document as one self-contained HTML page (inline CSS, no script, nothing fetched)."""

from __future__ import annotations

import html

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor import CHECKS, FIXED_BY_LAYER

FORMAT = 1
# The matrix's columns, in the order the layers are provisioned.
LAYERS = (
    ("doca_ofed", "DOCA-OFED"),
    ("cuda", "CUDA"),
    ("nvidia_peermapping", "PeerMapping"),
    ("gdrcopy", "GDRCopy"),
    ("nvshmem_ibgda", "NVSHMEM"),
    ("nccl", "NCCL"),
    ("deepep", "DeepEP"),
    ("tests", "DeepEP tests"),
    ("doctor", "Doctor"),
)
STATES = ("ok", "changed", "reboot", "failed", "skipped", "unknown", "dropped")
# Bandwidth figures per test: (test, metric, where in the parsed result, the threshold's name).
METRICS = (
    ("intranode", "dispatch_fp8", ("best", "dispatch_fp8", "gbps"), "dispatch_fp8"),
    ("intranode", "dispatch_bf16", ("best", "dispatch_bf16", "gbps"), "dispatch_bf16"),
    ("intranode", "combine_bf16", ("best", "combine_bf16", "gbps"), "combine_bf16"),
    ("low_latency", "dispatch (slowest rank)", ("summary", "min_dispatch_gbps"), "dispatch"),
    ("low_latency", "combine (slowest rank)", ("summary", "min_combine_gbps"), "combine"),
)
SOURCES = ("site", "doctor", "internode")
# What a build layer did (build_fanout's action), in words.
ACTIONS = {"none": "up to date", "build": "built", "cache": "from the cache", "artifact": "from another node",
           "wait": "from another node"}
KEPT_RUNS = 20
# Where the doctor's entries are read (the collection's repository, as galaxy.yml names it); a check's row there.
DOCTOR_DOC = "https://github.com/moe-infra/ansible-collection-deepep/blob/main/docs/doctor.md"
PREFLIGHT_CHECKS = set(check.id for check in CHECKS if check.preflight)
TITLES = dict((check.id, check.title) for check in CHECKS)


def _get(data, path):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _fp(value):
    return (value or "")[:16] or None


def _build_cell(build, text):
    """A build layer's cell from its build_fanout/source_build result."""
    if not isinstance(build, dict) or not build:
        return {"state": "unknown", "text": text or "not run", "fingerprint": None, "detail": ""}
    action = build.get("action") or "none"
    state = "changed" if build.get("changed") or action not in ("none", "") else "ok"
    reason = build.get("reason") or ""
    return {"state": state, "text": text or ACTIONS.get(action, action), "fingerprint": _fp(build.get("fingerprint")),
            "detail": "" if reason.startswith("up to date") and not text else reason}


def layer_cells(site):
    """The site summary of one host -> {layer: {state, text, fingerprint, detail}}."""
    layers = site.get("layers") or {}
    reasons = set(site.get("reboot_reasons") or [])
    cells = {}

    doca = layers.get("doca_ofed") or {}
    if "doca_ofed" in reasons:
        cells["doca_ofed"] = {"state": "reboot", "text": "reboot pending", "detail": "installed, not loaded yet"}
    elif doca.get("installed") is None:
        cells["doca_ofed"] = {"state": "skipped", "text": "not run", "detail": ""}
    else:
        cells["doca_ofed"] = {"state": "changed" if doca.get("changed") else ("ok" if doca["installed"] else "skipped"),
                              "text": "installed" if doca["installed"] else "not installed",
                              "detail": doca.get("msg") or ""}

    cuda = layers.get("cuda") or {}
    release = site.get("cuda")
    cells["cuda"] = {"state": ("changed" if cuda.get("changed") else "ok") if release else "skipped",
                     "text": release or "not run", "detail": cuda.get("home") or ""}

    peer = site.get("peermapping")
    peer_state = {"live": "ok", "driver_not_loaded": "skipped", None: "skipped"}.get(peer, "failed")
    if "nvidia_peermapping" in reasons:
        peer_state = "reboot"
    elif peer == "absent" and not (layers.get("nvidia_peermapping") or {}).get("required", True):
        peer_state = "skipped"
    cells["nvidia_peermapping"] = {"state": peer_state, "text": peer or "not run", "detail": ""}

    cells["gdrcopy"] = _build_cell(layers.get("gdrcopy"), None)
    if not layers.get("gdrcopy") and site.get("gdrcopy"):
        cells["gdrcopy"] = {"state": "ok", "text": "built", "detail": site["gdrcopy"]}

    nvshmem = layers.get("nvshmem_ibgda") or {}
    version = site.get("nvshmem")
    if nvshmem.get("build"):
        cells["nvshmem_ibgda"] = _build_cell(nvshmem["build"], version)
    else:
        cells["nvshmem_ibgda"] = {"state": "ok" if version else "skipped", "text": version or "not run",
                                  "detail": " ".join(part for part in (nvshmem.get("method"), site.get("nvshmem_root"))
                                                     if part)}

    nccl = layers.get("nccl") or {}
    if not nccl.get("method"):
        cells["nccl"] = {"state": "skipped", "text": "not run", "detail": "DeepEP V2 only"}
    else:
        # The source method's build, else the wheel (or the interpreter's own NCCL with method none).
        cells["nccl"] = _build_cell(nccl["build"], nccl.get("version")) if nccl.get("build") else {
            "state": "ok", "text": nccl.get("version") or "as found", "fingerprint": None, "detail": nccl["method"]}
        if nccl["method"] == "restore":  # DeepEP V1 after V2: the wheel's own files back
            cells["nccl"].update(state="changed" if nccl.get("changed") else "ok",
                                 detail="torch's own NCCL wheel files back in place of V2's build")
        elif nccl.get("changed"):
            cells["nccl"].update(state="changed", detail=(cells["nccl"]["detail"] + "; " if cells["nccl"]["detail"]
                                                          else "") + "put where torch loads NCCL")

    deepep = site.get("deepep") or {}
    build = deepep.get("build") or ""
    deepep_state = "unknown"
    if deepep.get("fingerprint"):
        deepep_state = "ok" if build.startswith("up to date") else "changed"
    cells["deepep"] = {"state": deepep_state, "text": deepep.get("version") or "not run",
                       "fingerprint": _fp(deepep.get("fingerprint")),
                       "detail": "up to date" if build.startswith("up to date") else build}

    runs = deepep.get("verification") or []
    if not runs:
        cells["tests"] = {"state": "skipped", "text": "not run", "detail": ""}
    else:
        failed = [run["test"] for run in runs if not run.get("passed")]
        reused = all(run.get("reused") for run in runs)
        earlier = runs[0].get("earlier")
        cells["tests"] = {"state": "failed" if failed else "ok",
                          "text": ("failed: " + ", ".join(failed)) if failed else
                          ("passed (earlier run)" if reused or earlier else "passed"),
                          "detail": "; ".join([b for run in runs for b in run.get("below_thresholds") or []]
                                              + [_jit_warmup(run) for run in runs if run.get("test") == "jit_warmup"
                                                 and run.get("jit")]
                                              + (["results of the run at %s" % earlier] if earlier else []))}

    doctor = site.get("doctor") or {}
    cells["doctor"] = _doctor_cell(doctor, [p.get("id") for p in site.get("problems") or []])
    for cell in cells.values():
        cell.setdefault("fingerprint", None)
    return cells


def _jit_warmup(run):
    jit = run["jit"]
    size = "%d kernels, %.1f MiB" % (jit.get("kernels") or 0, (jit.get("bytes") or 0) / 1048576.0)
    if run.get("reused"):
        return "JIT cache warmed by an earlier run (%s then)" % size
    return "JIT warm-up %s s: %d kernels compiled (cache %s)" % (run.get("seconds"), jit.get("compiled") or 0, size)


def _doctor_cell(summary, ids=()):
    """ids: the problems' check ids, named in the cell (up to three, then how many more)."""
    if not summary:
        return {"state": "unknown", "text": "not run", "detail": "", "fingerprint": None}
    problems = int(summary.get("problem") or 0)
    ids = list(ids or [])
    named = ", ".join(ids[:3]) + (" +%d" % (len(ids) - 3) if len(ids) > 3 else "") if ids else ""
    return {"state": "failed" if problems else "ok",
            "text": named or ("%d problem%s" % (problems, "" if problems == 1 else "s")) if problems else "clean",
            "detail": "%s ok, %s not applicable, %s unknown" % (
                summary.get("ok", 0), summary.get("not_applicable", 0), summary.get("unknown", 0)),
            "fingerprint": None}


def bandwidths(site):
    """[{test, metric, gbps, threshold}] from the DeepEP tests of a site summary."""
    found = []
    for run in (site.get("deepep") or {}).get("verification") or []:
        thresholds = run.get("thresholds") or {}
        for test, metric, path, threshold in METRICS:
            if run.get("test") != test:
                continue
            value = _get(run.get("result") or {}, path)
            if isinstance(value, (int, float)):
                limit = thresholds.get(threshold)
                found.append({"test": test, "metric": metric, "gbps": float(value),
                              "threshold": float(limit) if limit not in (None, "") else None})
    return found


def _unchanged_since(value):
    """A layer's record from an earlier run, shown as what the node has (not as a change of this run)."""
    if isinstance(value, dict) and "action" in value:
        return dict(value, action="none", changed=False, reason="up to date (an earlier run)")
    if isinstance(value, dict):
        return dict((key, _unchanged_since(item)) for key, item in value.items())
    return value


def _not_run(value):
    if isinstance(value, dict):
        return all(_not_run(item) for key, item in value.items() if key != "method")
    return value in (None, "", [], {})


def carry_forward(previous, record):
    """A site record of a run that left layers out (--tags deepep, a layer skipped) completed with what the host's
    earlier record says about those layers."""
    if not isinstance(previous, dict):
        return record
    out = dict(record)
    for key in ("cuda", "peermapping", "gdrcopy", "nvshmem", "nvshmem_root"):
        if _not_run(out.get(key)) and not _not_run(previous.get(key)):
            out[key] = previous[key]
    if _not_run(out.get("deepep")) and not _not_run(previous.get("deepep")):
        out["deepep"] = dict(previous["deepep"], build="up to date (an earlier run)")
    layers = dict(out.get("layers") or {})
    for name, earlier in (previous.get("layers") or {}).items():
        if _not_run(layers.get(name)) and not _not_run(earlier):
            layers[name] = _unchanged_since(earlier)
    out["layers"] = layers
    return out


def merge(previous, source, playbook, at, hosts, targeted, check_mode=False, reasons=None, inventory=""):
    """The report after a run: previous (the report so far, or None), source (site | doctor | internode), hosts
    ({host: that run's record}), targeted (every host the run was meant for: those missing from hosts dropped
    out), reasons ({host: why it stopped}, where the playbook knows it), inventory (what the page's commands name).
    A host's best bandwidth per metric is kept across runs."""
    if source not in SOURCES:
        raise ValueError("source must be one of %s, not %r" % (", ".join(SOURCES), source))
    report = previous if isinstance(previous, dict) and previous.get("format") == FORMAT else {}
    report = {"format": FORMAT, "runs": list(report.get("runs") or []), "hosts": dict(report.get("hosts") or {}),
              "inventory": inventory or report.get("inventory") or ""}
    dropped = sorted(set(targeted or []) - set(hosts))
    report["runs"] = (report["runs"] + [{"source": source, "playbook": playbook, "at": at, "check_mode": check_mode,
                                         "hosts": sorted(hosts), "dropped": dropped}])[-KEPT_RUNS:]
    for name, record in hosts.items():
        entry = dict(report["hosts"].get(name) or {})
        if source == "site":
            record = carry_forward(entry.get("site"), record)
        entry[source] = record
        entry[source + "_at"] = at
        entry["dropped"] = None
        if source == "site" and (record.get("deepep") or {}).get("verification"):
            # A run that skipped the tests (--skip-tags deepep_verify) leaves the last results shown.
            entry["verification"] = record["deepep"]["verification"]
            entry["verification_at"] = at
        if source == "site":
            best = dict(entry.get("best") or {})
            for figure in bandwidths(record):
                key = "%s/%s" % (figure["test"], figure["metric"])
                best[key] = max(best.get(key, 0.0), figure["gbps"])
            entry["best"] = best
        report["hosts"][name] = entry
    for name in dropped:
        entry = dict(report["hosts"].get(name) or {})
        entry["dropped"] = {"at": at, "playbook": playbook, "why": (reasons or {}).get(name) or (
            "failed or unreachable in %s (its error is in that run's output)" % (playbook or "the run"))}
        report["hosts"][name] = entry
    return report


def site_view(entry):
    """A host's newest site summary, with the newest DeepEP test results it has when that run skipped them."""
    site = entry.get("site")
    if not site:
        return None
    deepep = site.get("deepep") or {}
    if deepep.get("verification") or not entry.get("verification"):
        return site
    earlier = [dict(run, earlier=entry.get("verification_at")) for run in entry["verification"]]
    return dict(site, deepep=dict(deepep, verification=earlier))


# ---- the page ---------------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde6;padding-bottom:4px}
.meta{color:#5a6475;margin-bottom:12px}.counts span{margin-right:14px}
table{border-collapse:collapse}th,td{border:1px solid #d8dde6;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f8;font-weight:600}
td.cell{min-width:92px}td.cell .text{font-weight:600}td.cell .fp{font:11px ui-monospace,monospace;color:#5a6475}
.state-ok{background:#d9f2dc}.state-changed{background:#d6e6fb}.state-reboot{background:#ffe2bf}
.state-failed{background:#f8d0d0}.state-skipped{background:#eceff3;color:#5a6475}.state-unknown{background:#f6f1d5}
.state-dropped{background:#e8d8f0}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;font-weight:600}
.bars{display:grid;grid-template-columns:160px 220px 420px 1fr;gap:4px 10px;align-items:center}
.track{position:relative;height:16px;background:#eceff3;border-radius:3px}
.bar{position:absolute;left:0;top:0;bottom:0;border-radius:3px}
.bar.pass{background:#2e7d32}.bar.fail{background:#c62828}.bar.nothreshold{background:#1565c0}
.mark{position:absolute;top:-3px;bottom:-3px;width:2px}.mark.threshold{background:#111}.mark.best{background:#ef6c00}
.legend span{margin-right:16px}.legend i{display:inline-block;width:12px;height:12px;vertical-align:-2px;margin-right:4px}
.nic{font:12px ui-monospace,monospace}.small{font-size:12px;color:#5a6475}
pre.cmd{font:12px ui-monospace,monospace;background:#f2f4f8;padding:4px 6px;margin:4px 0 0;white-space:pre-wrap}
#problems td:first-child{border-left:4px solid #b71c1c}
"""


def _e(value):
    return html.escape("" if value is None else str(value))


def _gb(value):
    return "%.2f GB/s" % value


def agreeing_cells(entry):
    """A host's matrix cells, where the doctor's newest findings overrule its layers: a layer whose check found a
    problem is not shown as fine."""
    site = site_view(entry)
    cells = layer_cells(site) if site else {}
    problems = host_problems(entry)
    if not site and entry.get("doctor"):
        cells["doctor"] = _doctor_cell((entry["doctor"] or {}).get("summary") or {}, [p.get("id") for p in problems])
    for layer in set(FIXED_BY_LAYER.get(p.get("id")) for p in problems) & set(name for name, dummy in LAYERS):
        ids = [p.get("id") for p in problems if FIXED_BY_LAYER.get(p.get("id")) == layer]
        cell = dict(cells.get(layer) or {"text": "no report", "detail": "", "fingerprint": None})
        cells[layer] = dict(cell, state="failed", text="%s: %s" % (cell.get("text"), ", ".join(ids)),
                            detail="; ".join(["doctor: %s" % p.get("evidence") for p in problems if p.get("id") in ids]
                                             + ([cell["detail"]] if cell.get("detail") else [])))
    return cells


def _matrix(hosts):
    rows = ["<table id=\"matrix\"><thead><tr><th>node</th>%s<th>last run</th></tr></thead><tbody>"
            % "".join("<th>%s</th>" % _e(title) for dummy, title in LAYERS)]
    for name in sorted(hosts):
        entry = hosts[name]
        site = site_view(entry)
        dropped = entry.get("dropped")
        cells = agreeing_cells(entry)
        parts = ["<tr data-host=\"%s\"><th>%s%s</th>" % (_e(name), _e(name),
                 " <span class=\"badge state-dropped\">dropped out</span>" if dropped else "")]
        for layer, dummy in LAYERS:
            cell = cells.get(layer) or {"state": "unknown", "text": "no report", "detail": "", "fingerprint": None}
            # A host that dropped out: what it had before is no longer known to hold, so nothing of it is green.
            state = "dropped" if dropped else cell["state"]
            parts.append("<td class=\"cell state-%s\" data-layer=\"%s\" data-state=\"%s\" title=\"%s\">"
                         "<div class=\"text\">%s</div>%s</td>"
                         % (state, layer, state, _e(cell.get("detail")), _e(cell["text"]),
                            "<div class=\"fp\">%s</div>" % _e(cell["fingerprint"]) if cell.get("fingerprint") else ""))
        last = dropped["at"] if dropped else entry.get("site_at") or entry.get("doctor_at") or entry.get("internode_at")
        parts.append("<td class=\"small\">%s%s%s</td></tr>" % (
            "dropped out of %s at " % _e(dropped["playbook"]) if dropped else "", _e(last),
            ": %s" % _e(dropped.get("why")) if dropped and dropped.get("why") else ""))
        rows.append("".join(parts))
    rows.append("</tbody></table>")
    return "\n".join(rows)


def _bars(hosts):
    figures = []
    for name in sorted(hosts):
        site = site_view(hosts[name]) or {}
        best = hosts[name].get("best") or {}
        for figure in bandwidths(site):
            figure = dict(figure, host=name, best=best.get("%s/%s" % (figure["test"], figure["metric"])))
            figures.append(figure)
    if not figures:
        return "<p id=\"bandwidth-none\">No DeepEP test results in this report yet.</p>"
    scale = max(max(f["gbps"], f["threshold"] or 0, f["best"] or 0) for f in figures) * 1.05
    rows = ["<div class=\"legend small\"><span><i style=\"background:#2e7d32\"></i>meets its threshold</span>"
            "<span><i style=\"background:#c62828\"></i>below its threshold</span>"
            "<span><i style=\"background:#1565c0\"></i>no threshold set</span>"
            "<span><i style=\"background:#111\"></i>threshold</span><span><i style=\"background:#ef6c00\"></i>"
            "best seen on this node</span></div>", "<div class=\"bars\" id=\"bandwidth\">"]
    for f in figures:
        kind = "nothreshold" if f["threshold"] is None else ("pass" if f["gbps"] >= f["threshold"] else "fail")
        marks = ""
        if f["threshold"] is not None:
            marks += "<div class=\"mark threshold\" style=\"left:%.2f%%\"></div>" % (100 * f["threshold"] / scale)
        if f["best"]:
            marks += "<div class=\"mark best\" style=\"left:%.2f%%\"></div>" % (100 * f["best"] / scale)
        note = []
        if f["threshold"] is not None:
            note.append("threshold %s" % _gb(f["threshold"]))
        if f["best"]:
            note.append("best %s" % _gb(f["best"]))
        rows.append("<div>%s</div><div>%s %s</div><div class=\"track\"><div class=\"bar %s\" style=\"width:%.2f%%\" "
                    "data-host=\"%s\" data-metric=\"%s/%s\" data-gbps=\"%.2f\"></div>%s</div><div>%s <span "
                    "class=\"small\">%s</span></div>"
                    % (_e(f["host"]), _e(f["test"]), _e(f["metric"]), kind, 100 * f["gbps"] / scale, _e(f["host"]),
                       _e(f["test"]), _e(f["metric"]), f["gbps"], marks, _gb(f["gbps"]), _e(", ".join(note))))
    rows.append("</div>")
    return "\n".join(rows)


def _traffic(hosts):
    rows = []
    for name in sorted(hosts):
        record = hosts[name].get("internode")
        if not record:
            continue
        traffic = record.get("traffic") or {}
        ports = traffic.get("ports") or []
        top = max([max(p.get("xmit_bytes") or 0, p.get("rcv_bytes") or 0) for p in ports] + [1])
        rows.append("<h3>%s <span class=\"badge state-%s\">%s</span> <span class=\"small\">rank %s of %s</span></h3>"
                    % (_e(name), "ok" if record.get("passed") else "failed", "passed" if record.get("passed")
                       else "failed", _e(record.get("rank")), _e(record.get("world_size"))))
        rows.append("<table class=\"traffic\" data-host=\"%s\"><tr><th>NIC:port</th><th>sent</th><th>received</th>"
                    "<th></th></tr>" % _e(name))
        idle = set(traffic.get("idle") or [])
        for port in ports:
            sent, received = port.get("xmit_bytes") or 0, port.get("rcv_bytes") or 0
            # A NIC that sent or received nothing carried none of this run's traffic both ways.
            state = "failed" if port.get("nic") in idle or not sent or not received else "ok"
            rows.append("<tr class=\"state-%s\" data-nic=\"%s\"><td class=\"nic\">%s</td><td>%s</td><td>%s</td><td>"
                        "<div class=\"track\" style=\"width:240px\"><div class=\"bar %s\" style=\"width:%.2f%%\"></div>"
                        "</div></td></tr>" % (state, _e(port.get("nic")), _e(port.get("nic")), _bytes(sent),
                                              _bytes(received), "pass" if state == "ok" else "fail",
                                              100.0 * max(sent, received) / top))
        rows.append("</table>")
        for problem in traffic.get("problems") or []:
            rows.append("<p class=\"small\">%s</p>" % _e(problem))
    return "\n".join(rows) or "<p id=\"traffic-none\">No internode run in this report yet.</p>"


def _bytes(count):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (count, unit)
        count /= 1024.0
    return str(count)


def host_problems(entry):
    """The doctor's problems on a host as its newest record says (the doctor's own run when it is newer than
    site.yml's)."""
    found = (entry.get("site") or {}).get("problems")
    doctor = entry.get("doctor") or {}
    if doctor and (entry.get("doctor_at") or "") >= (entry.get("site_at") or ""):
        found = [f for f in doctor.get("findings") or [] if f.get("status") == "problem"]
    return list(found or [])


def _command(report_inventory, nodes, layer=None):
    return "ansible-playbook playbooks/site.yml -i %s --limit %s%s" % (
        report_inventory or "<inventory>", ",".join(nodes), " --tags %s" % layer if layer else "")


def problem_groups(hosts, inventory=""):
    """The problems across nodes, one group per failure: [{id, title, nodes, evidence, fix, command, doc, why}],
    worst first: hosts that dropped out, then what stops a node before any change (preflight), then by how many
    nodes have it, then by id. A dropped host's earlier findings are stale: only its drop is listed."""
    groups = {}
    dropped = []
    for name in sorted(hosts):
        entry = hosts[name]
        if entry.get("dropped"):
            dropped.append(name)
            continue
        for problem in host_problems(entry):
            check = problem.get("id") or "?"
            group = groups.setdefault(check, {"id": check, "title": problem.get("title") or TITLES.get(check, ""),
                                              "nodes": [], "evidence": {}, "fix": problem.get("fix") or ""})
            group["nodes"].append(name)
            group["evidence"][name] = problem.get("evidence") or ""
    ordered = []
    for name in dropped:
        why = hosts[name]["dropped"]
        ordered.append({"id": "DROPPED", "title": "dropped out of %s at %s" % (why.get("playbook"), why.get("at")),
                        "nodes": [name], "evidence": {name: why.get("why") or "no reason recorded"},
                        "fix": "fix what stopped it (the reason, and that run's output), then run the node again",
                        "command": _command(inventory, [name]), "doc": None})
    for group in sorted(groups.values(), key=lambda g: (g["id"] not in PREFLIGHT_CHECKS, -len(g["nodes"]), g["id"])):
        layer = FIXED_BY_LAYER.get(group["id"])
        group["command"] = _command(inventory, group["nodes"], layer) if layer else None
        group["doc"] = "%s#%s" % (DOCTOR_DOC, group["id"].lower()) if group["id"] in TITLES else None
        ordered.append(group)
    return ordered


def _problems(hosts, inventory=""):
    groups = problem_groups(hosts, inventory)
    if not groups:
        return "<p id=\"problems-none\">The doctor found no problem on any node.</p>"
    rows = []
    for group in groups:
        nodes = group["nodes"]
        evidence = sorted(set(group["evidence"].values()))
        shown = group["evidence"][nodes[0]] if len(evidence) == 1 else "; ".join(
            "%s: %s" % (node, group["evidence"][node]) for node in nodes[:3]) + (
            " (and %d more)" % (len(nodes) - 3) if len(nodes) > 3 else "")
        what = "<b>%s</b> %s" % (_e(group["id"]), _e(group["title"]))
        if group["doc"]:
            what += " <a class=\"small\" href=\"%s\">doctor entry</a>" % _e(group["doc"])
        fix = _e(group["fix"])
        if group["command"]:
            fix += "<pre class=\"cmd\">%s</pre>" % _e(group["command"])
        rows.append("<tr data-id=\"%s\" data-nodes=\"%s\"><td>%s</td><td><b>%d</b> node%s: %s</td><td>%s</td>"
                    "<td>%s</td></tr>" % (_e(group["id"]), _e(",".join(nodes)), what, len(nodes),
                                          "" if len(nodes) == 1 else "s", _e(", ".join(nodes)), _e(shown), fix))
    return ("<table id=\"problems\"><thead><tr><th>problem</th><th>where</th><th>evidence</th><th>fix</th></tr>"
            "</thead><tbody>%s</tbody></table>" % "".join(rows))


def _dropped_line(hosts, dropped):
    if not dropped:
        return "none"
    return "; ".join("%s (%s at %s: %s)" % (_e(name), _e(hosts[name]["dropped"].get("playbook")),
                                            _e(hosts[name]["dropped"].get("at")),
                                            _e(hosts[name]["dropped"].get("why") or "no reason recorded"))
                     for name in dropped)


def render_html(report):
    hosts = report.get("hosts") or {}
    runs = report.get("runs") or []
    last = runs[-1] if runs else {}
    counts = dict((state, 0) for state in ("ok", "attention", "dropped"))
    for entry in hosts.values():
        if entry.get("dropped"):
            counts["dropped"] += 1
            continue
        cells = agreeing_cells(entry)
        bad = [c for c in cells.values() if c["state"] in ("failed", "reboot")]
        counts["attention" if bad else "ok"] += 1
    dropped = [name for name in sorted(hosts) if hosts[name].get("dropped")]
    history = "".join("<tr><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%s</td></tr>"
                      % (_e(run.get("at")), _e(run.get("playbook")), "check" if run.get("check_mode") else "",
                         len(run.get("hosts") or []), _e(", ".join(run.get("dropped") or []) or "none"))
                      for run in reversed(runs))
    return """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>DeepEP cluster report</title>
<style>%s</style></head><body>
<h1>DeepEP cluster report</h1>
<div class="meta">Last run: <b id="last-run">%s</b> at %s (%s). %d node(s) in this report.</div>
<div class="counts" id="counts"><span class="badge state-ok">%d ready</span><span class="badge state-reboot">%d need
attention</span><span class="badge state-dropped">%d dropped out</span></div>
<h2>Problems, worst first, and what to run</h2>
%s
<h2>Nodes and layers</h2>
%s
<p class="legend small"><span class="badge state-ok">ok</span> <span class="badge state-changed">changed this run</span>
<span class="badge state-reboot">reboot pending</span> <span class="badge state-failed">failed / problem</span>
<span class="badge state-skipped">not applicable</span> <span class="badge state-dropped">dropped out</span>
Fingerprints identify each build; hover a cell for the detail.</p>
<h2>DeepEP bandwidth per node</h2>
%s
<h2>Internode traffic per NIC</h2>
%s
<h2>Hosts that dropped out</h2>
<p id="dropped">%s</p>
<h2>Runs</h2>
<table id="runs"><thead><tr><th>at</th><th>playbook</th><th>mode</th><th>hosts</th><th>dropped out</th></tr></thead>
<tbody>%s</tbody></table>
</body></html>
""" % (CSS, _e(last.get("playbook")), _e(last.get("at")), _e(last.get("source")), len(hosts), counts["ok"],
       counts["attention"], counts["dropped"], _problems(hosts, report.get("inventory")), _matrix(hosts), _bars(hosts),
       _traffic(hosts), _dropped_line(hosts, dropped), history)
