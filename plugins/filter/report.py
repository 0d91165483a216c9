# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""What a run's summary and report are made of (module_utils/report/cluster_report.py).

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

OUTCOME_KEYS = ("action", "changed", "fingerprint", "reason", "build_seconds")


def deepep_build_outcome(result):
    """A build_fanout/source_build result -> {action, changed, fingerprint, reason, build_seconds} (None: not
    run)."""
    if result is None or result == "":
        return None
    if not isinstance(result, dict):
        raise AnsibleFilterError("_deepep_build_outcome: expected a build result (dict), got %r" % (result,))
    if result.get("skipped"):
        return None
    return dict((key, result.get(key)) for key in OUTCOME_KEYS)


def deepep_test_runs(registered):
    """The registered loop of deepep_bench (deepep_tests) -> [{test, passed, reused, seconds, thresholds,
    below_thresholds, result, jit}] for the tests that ran or were reused."""
    if registered is None or registered == "":
        return []
    if not isinstance(registered, dict):
        raise AnsibleFilterError("_deepep_test_runs: expected the registered result of the deepep_bench loop")
    runs = []
    for item in registered.get("results") or []:
        if not isinstance(item, dict) or "result" not in item:
            continue
        loop = item.get("item") or {}
        runs.append({"test": loop.get("test"), "thresholds": loop.get("thresholds") or {},
                     "passed": bool(item.get("passed")), "reused": bool(item.get("reused")),
                     "seconds": item.get("seconds"), "below_thresholds": item.get("below_thresholds") or [],
                     "result": item.get("result") or {}, "jit": item.get("jit")})
    return runs


def deepep_result(build, version, env_script, wheel=None, env=None, tests=None):
    """What the deepep role records for a node (deepep_result): the build (its registered result, None when not
    run), the wheel, the env script's IBGDA settings and the tests, from the role's registered results."""
    for name, value in (("build", build), ("wheel", wheel), ("env", env), ("tests", tests)):
        if value is not None and value != "" and not isinstance(value, Mapping):
            raise AnsibleFilterError("_deepep_result: %s: expected a registered result (dict), got %r" % (name, value))
    build, wheel, env = build or {}, wheel or {}, env or {}
    return {"version": version, "fingerprint": build.get("fingerprint"), "build": build.get("reason", "not run"),
            "build_seconds": build.get("build_seconds"), "env_script": env_script, "wheel": wheel.get("wheel"),
            "wheel_site_dir": wheel.get("site_dir"), "ibgda_env": env.get("ibgda"),
            "tests": [item["result"] for item in (tests or {}).get("results") or []
                      if isinstance(item, Mapping) and "result" in item],
            # The same tests with their names, thresholds and whether the pass is an earlier one (the cluster report).
            "verification": deepep_test_runs(tests)}


def deepep_summary_lines(summary):
    """A host's site summary (one of _deepep_site_summaries') -> lines for the end of the run: one per layer, then the
    doctor's problems with their fixes."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.cluster_report import LAYERS, layer_cells

    if not isinstance(summary, dict):
        raise AnsibleFilterError("_deepep_summary_lines: expected a site summary (dict)")
    cells = layer_cells(summary)
    lines = []
    for layer, title in LAYERS:
        cell = cells[layer]
        extra = [part for part in (cell.get("fingerprint"), cell.get("detail")) if part]
        if len(extra) == 2 and extra[0] in extra[1]:
            extra = extra[1:]  # the reason names the fingerprint already
        lines.append("%-12s %-8s %s%s" % (title, cell["state"], cell["text"],
                                          "  (%s)" % "; ".join(extra) if extra else ""))
    if summary.get("reboot_pending"):
        lines.append("reboot pending: %s" % ", ".join(summary.get("reboot_reasons") or []))
    for problem in summary.get("problems") or []:
        lines.append("problem %s %s: %s -> fix: %s" % (
            problem.get("id"), problem.get("title"), problem.get("evidence"), problem.get("fix")))
    return lines


def _site_summary(host, host_vars):
    """One host's record at the end of site.yml, from the variables its layers set (defaults where a layer did not
    run here)."""
    def var(name, default=None):
        value = host_vars.get(name, default)
        return default if value is None and default is not None else value

    doctor = var("doctor_report") or {}
    nccl = var("nccl_provided") or {}
    return {
        "host": host,
        "reboot_pending": var("deepep_reboot_pending", False),
        "reboot_reasons": [layer for layer, reason in (var("deepep_reboot_reasons") or {}).items() if reason],
        "rebooted": var("deepep_rebooted", False),
        "cuda": var("cuda_release"),
        "peermapping": var("nvidia_peermapping_state"),
        "gdrcopy": var("gdrcopy_root"),
        "nvshmem": var("nvshmem_ibgda_version"),
        "nvshmem_root": var("nvshmem_ibgda_root"),
        # The deepep role's record: version, fingerprint, what the build did, the tests' parsed results.
        "deepep": var("deepep_result"),
        # The doctor's verdict: counts, and the problems with their fixes.
        "doctor": doctor.get("summary"),
        "problems": [finding for finding in doctor.get("findings") or [] if finding.get("status") == "problem"],
        # Per layer, what this run did (the cluster report's matrix).
        "layers": {
            "doca_ofed": {"installed": var("doca_ofed_installed")},
            "cuda": {"home": var("cuda_home")},
            "nvidia_peermapping": {"required": var("nvidia_peermapping_required")},
            "gdrcopy": deepep_build_outcome(var("gdrcopy_build")),
            "nvshmem_ibgda": {"method": var("nvshmem_ibgda_method", "wheel"),
                              "build": deepep_build_outcome(var("nvshmem_ibgda_build"))},
            # V2's NCCL (the nccl layer); none for V1.
            "nccl": {"method": nccl.get("method"), "version": nccl.get("version"),
                     "changed": nccl.get("updated", False), "build": deepep_build_outcome(var("nccl_build"))},
        },
    }


def deepep_site_summaries(hostvars, hosts):
    """hostvars, the play's hosts -> {host: its site summary}, in play order: what each host has at the end of
    site.yml, read once for the play (the cluster report's records, and the lines printed)."""
    if not isinstance(hostvars, Mapping) or isinstance(hosts, (str, Mapping)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("_deepep_site_summaries: expected hostvars and the play's hosts (a list)")
    return dict((host, _site_summary(host, hostvars[host])) for host in hosts)


def _registered(name, value):
    if value is None or value == "":
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("_deepep_rollback_message: %s: expected a registered result (dict), got %r"
                                 % (name, value))
    return value


def deepep_rollback_message(failure, went_live, fingerprint, env_script, digests, rollback=None, wheels=None,
                            nccl=None):
    """What the deepep role's rollback says when DeepEP's checks or tests failed: what failed, then what is live
    now. went_live: this run put the failed build live (then rollback, the wheel steps (registered results, skipped
    ones left out) and the nccl layer's restore (nccl_provided) say what was put back); else the build was live
    before the run and stays. digests: the files' digests as the node's reading holds them (the env script's None:
    there was none; any other reading, or none, says it was not changed)."""
    if not isinstance(failure, str) or not failure:
        raise AnsibleFilterError("_deepep_rollback_message: expected what failed (a string), got %r" % (failure,))
    if not boolean(went_live, strict=True):
        return ("%s. This build (%s) was live before this run and stays as it is. Fix the cause and run again "
                "(deepep_verify_rerun=true runs the tests again)." % (failure, fingerprint or "?"))
    if not isinstance(digests, Mapping):
        raise AnsibleFilterError("_deepep_rollback_message: digests: expected the node reading's digests (dict), "
                                 "got %r" % (digests,))
    rollback, nccl = _registered("rollback", rollback), _registered("nccl", nccl)
    parts = ["The new build is not live: %s" % rollback.get("reason")]
    if rollback.get("uncached"):
        parts[0] += "; removed from the controller cache: %s" % rollback["uncached"]
    for index, wheel in enumerate(wheels or []):
        wheel = _registered("wheels[%d]" % index, wheel)
        if "reason" in wheel:
            parts.append("the wheel: %s" % wheel["reason"])
    if nccl.get("method") == "restore" and nccl.get("reinstalled"):
        parts.append("torch's own NCCL wheel is back (pip installed %s again; NCCL %s)"
                     % (nccl["reinstalled"], nccl.get("version")))
    elif nccl.get("method") == "restore" and nccl.get("updated"):
        parts.append("torch's own NCCL files are back (NCCL %s) in place of the nccl layer's" % nccl.get("version"))
    if nccl.get("error"):
        parts.append(nccl["error"])
    parts.append("%s (%s)" % ("no env script was written" if digests.get(env_script, 0) is None
                              else "the env script was not changed", env_script))
    return ("%s. %s. Fix the cause and run again: the build is made anew and tested before it stays."
            % (failure, "; ".join(parts)))


def deepep_controller_path(path):
    """A controller path, relative ones taken from the directory ansible-playbook was started in (a module run
    on localhost, or a lookup, works in the playbook's directory instead)."""
    if not isinstance(path, str) or not path:
        raise AnsibleFilterError("_deepep_controller_path: expected a path, got %r" % (path,))
    return os.path.normpath(os.path.join(os.getcwd(), os.path.expanduser(path)))


class FilterModule(object):
    def filters(self):
        return {"_deepep_build_outcome": deepep_build_outcome, "_deepep_test_runs": deepep_test_runs,
                "_deepep_result": deepep_result, "_deepep_rollback_message": deepep_rollback_message,
                "_deepep_summary_lines": deepep_summary_lines, "_deepep_controller_path": deepep_controller_path,
                "_deepep_site_summaries": deepep_site_summaries}
