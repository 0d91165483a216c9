#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_bench
short_description: Run DeepEP's own tests and judge their results
version_added: "0.1.0"
description:
  - Runs C(tests/test_intranode.py) or C(tests/test_low_latency.py) of a DeepEP V1 source tree with one
    process per GPU, parses the checks that passed and the best bandwidths (intranode) or every rank's
    dispatch and combine bandwidth (low-latency), and fails when the test fails or a bandwidth is under
    its threshold.
  - For V2, C(tests/elastic/test_ep.py) (O(test=elastic_ep); every rank's scale-up and scale-out bandwidth and time
    of each dispatch and combine kind in each case; C(--test-first-only) in O(extra_args) runs the first case) and
    C(tests/elastic/test_barrier.py) (O(test=elastic_barrier), every rank's barrier time). Their kernels are
    compiled at run time (C(EP_JIT_CACHE_DIR) in O(environment)).
  - O(test=jit_warmup) runs C(tests/elastic/test_ep.py) with O(extra_args) (e.g. C(--skip-check --skip-perf-test),
    every case without its checks and timing) to fill the JIT cache O(jit_cache_dir) for this node's GPUs, so that
    jobs of the same shape compile nothing. It passes when the test exits 0 and the cache then holds kernels.
  - With O(jit_cache_dir), the result says how many kernels the run compiled into the cache and its size.
  - Keeps the full output in O(log) and, with O(report), writes the parsed result as JSON.
  - Running a test changes nothing on the node, so the module reports C(changed=false); in check mode it
    runs nothing and says so.
  - >-
    With O(verified_for) (the build's fingerprint) and O(report), a test that passed for the same build, command,
    environment and thresholds is not run again; its report is returned with C(reused=true), unless O(rerun).
author:
  - moe_infra maintainers (@moe-infra)
options:
  python:
    description: Interpreter with torch and DeepEP.
    type: path
    required: true
  deepep_dir:
    description: DeepEP source tree holding C(tests/) (the build's C(src) directory).
    type: path
    required: true
  test:
    description: Which test to run.
    type: str
    choices: [intranode, internode, low_latency, elastic_ep, elastic_barrier, jit_warmup]
    required: true
  num_processes:
    description: Processes (one per GPU).
    type: int
    required: true
  extra_args:
    description: Further test arguments (e.g. C(--num-tokens 4096)).
    type: list
    elements: str
    default: []
  environment:
    description: Environment for the test (the env script's variables, C(PYTHONPATH)); wins over O(env_script).
    type: dict
    default: {}
  env_script:
    description: An env script (the deepep role's) whose exported variables the test gets, as if sourced.
    type: path
  timeout:
    description: Seconds before the test is killed and counted as failed (a hang is a failure).
    type: int
    default: 900
  thresholds:
    description:
      - Minimum bandwidths in GB/s (none for C(elastic_barrier)). Intranode and internode keys C(dispatch_fp8), C(dispatch_bf16),
        C(combine_bf16) (best of the tuning; for internode the RDMA bandwidth); low-latency keys C(dispatch),
        C(combine) (the slowest rank); C(elastic_ep) keys C(dispatch_su), C(combine_su) (scale-up, NVLink),
        C(dispatch_so), C(combine_so) (scale-out, RDMA; 0 on one node), each the lowest over ranks and cases.
    type: dict
    default: {}
  min_checks_passed:
    description: Intranode only, the checks that must pass (24 with the test's defaults). Internode requires
      every check it printed to pass, and at least one.
    type: int
    default: 24
  log:
    description: File that receives the test's whole output.
    type: path
    required: true
  report:
    description: JSON file that receives the parsed result.
    type: path
  verified_for:
    description:
      - What is tested, e.g. the DeepEP build's fingerprint. Kept in O(report) with the command, environment and
        thresholds; a later call with all of them unchanged returns that passing report instead of running the
        test again. Empty means always run.
    type: str
    default: ""
  rerun:
    description: Run the test even when O(report) holds a pass for the same O(verified_for) and inputs.
    type: bool
    default: false
  jit_cache_dir:
    description:
      - DeepEP V2's JIT cache (the C(EP_JIT_CACHE_DIR) of O(environment)); its kernels are counted before and
        after the run. Required for O(test=jit_warmup).
    type: path
  known_builds:
    description:
      - The node's reading of what the build layers installed, as M(moe_infra.deepep.deepep_facts) read it
        (C(ansible_facts.deepep.builds), with C(reports) and C(jit_cache)), handled by the action plugin. A test
        whose O(report) there holds a pass under the same O(verified_for), command, environment and thresholds (and,
        for a warm-up, a JIT cache with no fewer kernels than it left) is answered from that reading, as this module
        would answer it (C(reused)), with no module run on the node. Any other case runs this module as without it.
    type: dict
  run_as:
    description:
      - Run the test as this unprivileged user (the build user) instead of the module's user, with no
        supplementary group, a scratch C(HOME) of its own and locked memory unlimited; whatever the test leaves
        running is ended afterwards. Root then runs nothing of the build it tests. Empty runs it as the module's
        user.
      - With O(jit_cache_dir), the cache's C(cache) and C(tmp) trees are the user's while the test runs and go back
        to their owner afterwards without following a link, with no write bit for others and no setuid bit
        (group write kept where the cache is a group's, setgid).
    type: str
    default: ""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Runs nothing in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Intranode test on 8 GPUs
  moe_infra.deepep.deepep_bench:
    python: /opt/deepep/venv/bin/python
    deepep_dir: /opt/deepep/deepep/current/src
    test: intranode
    num_processes: 8
    environment: "{{ deepep_env }}"
    thresholds: {dispatch_fp8: 247, dispatch_bf16: 253, combine_bf16: 348}
    log: /var/log/deepep/intranode.log
    report: /var/log/deepep/intranode.json
"""

RETURN = r"""
passed:
  description: Whether the test exited 0, its checks passed and every threshold was met.
  returned: always
  type: bool
rc:
  description: Exit status of the test; -9 when killed at the timeout.
  returned: when the test ran (not in check mode)
  type: int
seconds:
  description: Wall time of the test.
  returned: always
  type: float
result:
  description: Parsed output. Intranode C(checks), C(checks_passed), C(best) (C(dispatch_fp8), C(dispatch_bf16),
    C(combine_bf16), each C(sms), C(nvl_chunk), C(gbps), C(us)); low-latency C(ranks) and C(summary).
  returned: always
  type: dict
below_thresholds:
  description: Thresholds not met.
  returned: always
  type: list
  elements: str
command:
  description: The command that ran.
  returned: always
  type: list
  elements: str
user:
  description: Who ran the test (O(run_as), or the module's user).
  returned: when the test ran (not in check mode)
  type: str
reused:
  description: Whether the result is an earlier pass read from O(report) (nothing ran).
  returned: always
  type: bool
jit:
  description:
    - With O(jit_cache_dir), C(kernels_before), C(kernels) (after the run), C(compiled), C(bytes) (the cache's
      size), C(corrupted) (kernel directories without C(kernel.cu) and C(kernel.cubin)).
  returned: when jit_cache_dir is given
  type: dict
"""

import json
import os
import pwd
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.deepep_output import (
    THRESHOLD_KEYS,
    below_thresholds,
    parse_elastic_barrier,
    parse_elastic_ep,
    parse_internode,
    parse_intranode,
    parse_low_latency,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.bench_reuse import (
    ARGUMENT_SPEC,
    REPORT_KEYS,
    bench_command,
    reusable,
    verification_key,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.envscript import parse_env_script
from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.jit_cache import jit_cache_stats
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import account_of, lend_tree, run_as

PARSERS = {"intranode": parse_intranode, "internode": parse_internode, "low_latency": parse_low_latency,
           "elastic_ep": parse_elastic_ep, "elastic_barrier": parse_elastic_barrier, "jit_warmup": parse_elastic_ep}


SEARCH_PATHS = ("PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH")


def read_report(path):
    """The JSON report at path, or None."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    command = bench_command(p)
    script = command[1]
    verification = verification_key(p, command)
    earlier = reusable(p, read_report(p["report"]), jit_cache_stats(p["jit_cache_dir"])["kernels"]
                       if p["test"] == "jit_warmup" and p["jit_cache_dir"] else None)
    if earlier:
        module.exit_json(**earlier)
    if module.check_mode:
        # Nothing runs in check mode; the tree may not even be built yet.
        # No rc key: Ansible reads any rc other than 0 as a failure.
        module.exit_json(changed=False, passed=None, seconds=None, result={}, below_thresholds=[], reused=False,
                         command=command, msg="check mode: would run %s" % " ".join(command))
    if not os.path.isfile(script):
        module.fail_json(msg="deepep_dir: %s not found; point deepep_dir at a DeepEP V1 source tree" % script)
    if p["test"] == "jit_warmup" and not p["jit_cache_dir"]:
        module.fail_json(msg="jit_cache_dir: required for test=jit_warmup; set it to the EP_JIT_CACHE_DIR of environment")
    if p["num_processes"] < 1:
        module.fail_json(msg="num_processes: %s; set it to the number of GPUs" % p["num_processes"])
    account = None
    if p["run_as"] and os.geteuid() == 0:
        try:
            account = account_of(p["run_as"])
        except KeyError:
            module.fail_json(msg="run_as: there is no user %s on this node; create it (the deepep role's build user) "
                                 "or set run_as to '' to test as root" % p["run_as"])
    allowed = set(THRESHOLD_KEYS[p["test"]])
    unknown = sorted(set(p["thresholds"]) - allowed)
    if unknown:
        module.fail_json(msg="thresholds: %s not known for %s; use %s"
                             % (", ".join(unknown), p["test"], ", ".join(sorted(allowed))))

    env = {}
    if p["env_script"]:
        script_env = parse_env_script(p["env_script"])
        if not script_env["exists"]:
            module.fail_json(msg="env_script: %s not found; run the deepep role first or point it at the env script"
                                 % p["env_script"])
        env.update(script_env["vars"])
    env.update((key, str(value)) for key, value in p["environment"].items())
    # Search paths are prepended to the node's own, as the env script does, never replace them.
    for key in SEARCH_PATHS:
        inherited = os.environ.get(key)
        if key in env and inherited and env[key] not in inherited.split(":"):
            env[key] = "%s:%s" % (env[key], inherited)
    os.makedirs(os.path.dirname(p["log"]) or ".", exist_ok=True)
    timeout_bin = module.get_bin_path("timeout", required=True)
    jit_before = jit_cache_stats(p["jit_cache_dir"]) if p["jit_cache_dir"] else None
    started = time.time()
    # A hang is a failure: timeout kills the test (and, 30 s later, whatever ignores SIGTERM).
    argv = [timeout_bin, "--kill-after=30", str(p["timeout"])] + command
    if account:
        lent = [os.path.join(p["jit_cache_dir"], name) for name in ("cache", "tmp")] if p["jit_cache_dir"] else []
        with lend_tree(lent, account):
            rc, out, err = run_as(account, argv, p["deepep_dir"], env, scratch_home=True)
    else:
        rc, out, err = module.run_command(argv, cwd=p["deepep_dir"], environ_update=env)
    seconds = round(time.time() - started, 1)
    text = out + err
    with open(p["log"], "w") as log:
        log.write(text)
    if rc in (124, 137):
        rc = -9
    parsed = PARSERS[p["test"]](text)
    misses = below_thresholds(p["test"], parsed, p["thresholds"])
    problems = []
    if rc != 0:
        problems.append("exit status %s%s" % (rc, " (killed after %ss)" % p["timeout"] if rc == -9 else ""))
    if p["test"] == "intranode" and parsed["checks_passed"] < p["min_checks_passed"]:
        problems.append("%d/%d checks passed, %d required"
                        % (parsed["checks_passed"], parsed["checks"], p["min_checks_passed"]))
    if p["test"] == "internode" and (parsed["checks"] == 0 or parsed["checks_passed"] < parsed["checks"]):
        problems.append("%d/%d checks passed" % (parsed["checks_passed"], parsed["checks"]))
    if p["test"] == "low_latency" and len(parsed["ranks"]) != p["num_processes"]:
        problems.append("%d of %d ranks reported bandwidth" % (len(parsed["ranks"]), p["num_processes"]))
    if p["test"].startswith("elastic_") and len(parsed["ranks"]) != p["num_processes"]:
        problems.append("%d of %d ranks reported %s" % (len(parsed["ranks"]), p["num_processes"],
                                                        "results" if p["test"] == "elastic_ep" else "a barrier time"))
    problems.extend(misses)
    jit = None
    if jit_before is not None:
        after = jit_cache_stats(p["jit_cache_dir"])
        jit = dict(kernels_before=jit_before["kernels"], kernels=after["kernels"],
                   compiled=max(after["kernels"] - jit_before["kernels"], 0), bytes=after["bytes"],
                   corrupted=after["corrupted"])
        if after["corrupted"]:
            problems.append("%d corrupted kernel directories in the JIT cache (no kernel.cu or kernel.cubin): %s"
                            % (len(after["corrupted"]), ", ".join(after["corrupted"][:3])))
        if p["test"] == "jit_warmup" and rc == 0 and after["kernels"] == 0:
            problems.append("the warm-up left no kernel in %s/cache: the environment's EP_JIT_CACHE_DIR must name "
                            "jit_cache_dir" % p["jit_cache_dir"])
    result = dict(changed=False, passed=not problems, rc=rc, seconds=seconds, result=parsed,
                  below_thresholds=misses, command=command, log=p["log"], reused=False, jit=jit,
                  user=account.pw_name if account else pwd.getpwuid(os.geteuid()).pw_name)
    if p["report"]:
        with open(p["report"], "w") as handle:
            json.dump(dict(test=p["test"], num_processes=p["num_processes"], verified_for=p["verified_for"],
                           verification_key=verification, **{k: result[k] for k in REPORT_KEYS}), handle, indent=2)
    if problems:
        tail = "".join(text.splitlines(True)[-30:])
        module.fail_json(msg="DeepEP %s test failed: %s" % (p["test"], "; ".join(problems)), log_tail=tail, **result)
    compiled = "" if jit is None else ", %d kernels compiled (%d in the JIT cache, %d KiB)" % (
        jit["compiled"], jit["kernels"], jit["bytes"] // 1024)
    module.exit_json(msg="DeepEP %s test passed in %ss%s" % (p["test"], seconds, compiled), **result)


if __name__ == "__main__":
    main()
