# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""When a DeepEP test need not run again: its report holds a pass for the same build, command, environment and
thresholds. deepep_bench asks this on the node; its action plugin asks it on the controller with the report as the
node's reading (deepep_facts' builds.reports) has it, so that a run that changes nothing starts no module for a test
that passed before."""

from __future__ import annotations

import hashlib
import json
import posixpath

SCRIPTS = {"intranode": "test_intranode.py", "internode": "test_internode.py", "low_latency": "test_low_latency.py",
           "elastic_ep": "elastic/test_ep.py", "elastic_barrier": "elastic/test_barrier.py",
           "jit_warmup": "elastic/test_ep.py"}
REPORT_KEYS = ("passed", "rc", "seconds", "result", "below_thresholds", "command", "jit", "user")
ARGUMENT_SPEC = dict(
    python=dict(type="path", required=True),
    deepep_dir=dict(type="path", required=True),
    test=dict(type="str", required=True, choices=list(SCRIPTS)),
    num_processes=dict(type="int", required=True),
    extra_args=dict(type="list", elements="str", default=[]),
    environment=dict(type="dict", default={}),
    env_script=dict(type="path"),
    timeout=dict(type="int", default=900),
    thresholds=dict(type="dict", default={}),
    min_checks_passed=dict(type="int", default=24, no_log=False),
    log=dict(type="path", required=True),
    report=dict(type="path"),
    verified_for=dict(type="str", default=""),
    rerun=dict(type="bool", default=False),
    jit_cache_dir=dict(type="path"),
    run_as=dict(type="str", default=""),
    known_builds=dict(type="dict"),  # the action plugin's (the node's reading); the module ignores it
)


def bench_command(params):
    """The command the test runs: the interpreter, the test's script in the DeepEP tree, its processes and args."""
    script = posixpath.join(params["deepep_dir"], "tests", SCRIPTS[params["test"]])
    return [params["python"], script, "--num-processes", str(params["num_processes"])] + list(params["extra_args"])


def verification_key(params, command):
    """Digest of what a pass vouches for: the build, the command, its environment and the thresholds."""
    if not params["verified_for"]:
        return None
    what = dict(verified_for=params["verified_for"], command=command, timeout=params["timeout"],
                environment={k: str(v) for k, v in params["environment"].items()}, env_script=params["env_script"],
                thresholds=params["thresholds"], min_checks_passed=params["min_checks_passed"],
                jit_cache_dir=params["jit_cache_dir"], run_as=params["run_as"])
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def reusable(params, report, jit_kernels):
    """The module's answer for a test not run again (report: the test's report as read; jit_kernels: the kernels in
    the JIT cache now), else None: rerun asked, no pass under this key, or a warm-up whose cache lost kernels since
    (a warm-up vouches for the cache it left; one emptied or pruned is warmed again)."""
    if params["rerun"] or not isinstance(report, dict):
        return None
    key = verification_key(params, bench_command(params))
    if not key or report.get("verification_key") != key or report.get("passed") is not True:
        return None
    if params["test"] == "jit_warmup" and params["jit_cache_dir"]:
        if jit_kernels is None or jit_kernels < ((report.get("jit") or {}).get("kernels") or 0):
            return None
    return dict({k: report.get(k) for k in REPORT_KEYS}, changed=False, reused=True, log=params["log"],
                msg="DeepEP %s test not run again: it passed for %s with the same command, environment and "
                    "thresholds (%s); rerun runs it" % (params["test"], params["verified_for"], params["report"]))
