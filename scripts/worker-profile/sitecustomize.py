# -*- coding: utf-8 -*-
"""Loaded by every Python process that has this directory on PYTHONPATH (scripts/controller-worker-profile puts it
there for one ansible-playbook run). With WORKER_PROFILE_DIR set it records, for each of ansible-playbook's forked
workers (one task on one host), one JSON file: the task, the host, the worker's own CPU seconds (after the fork), its
garbage collections (all, and the full ones: generation 2) with their CPU, and every Jinja template it compiled with
the CPU that took. Nothing changes what the run does. Without WORKER_PROFILE_DIR it does nothing."""
from __future__ import annotations

import os
import sys

# Only in ansible-playbook itself (its workers are forks of it), not in the modules it runs on the controller.
DIRECTORY = os.environ.get("WORKER_PROFILE_DIR") if os.path.basename(sys.argv[0]) == "ansible-playbook" else None

if DIRECTORY:
    import gc
    import json
    import time

    import jinja2
    from ansible.executor.process import worker

    _state = {"compiles": [], "gc_cpu": 0.0, "gc_runs": 0, "full_gc_cpu": 0.0, "full_gc_runs": 0, "gc_start": 0.0}

    def _on_gc(phase, info):
        if phase == "start":
            _state["gc_start"] = time.process_time()
            return
        spent = time.process_time() - _state["gc_start"]
        _state["gc_cpu"] += spent
        _state["gc_runs"] += 1
        if info.get("generation") == 2:
            _state["full_gc_cpu"] += spent
            _state["full_gc_runs"] += 1

    gc.callbacks.append(_on_gc)
    _compile = jinja2.Environment.compile

    def _counted_compile(self, source, *args, **kwargs):
        start = time.process_time()
        try:
            return _compile(self, source, *args, **kwargs)
        finally:
            _state["compiles"].append([source if isinstance(source, str) else repr(source)[:300],
                                       time.process_time() - start])

    jinja2.Environment.compile = _counted_compile
    _run = worker.WorkerProcess._run

    def _profiled_run(self):
        # What the main process recorded before the fork is not this worker's.
        _state.update(compiles=[], gc_cpu=0.0, gc_runs=0, full_gc_cpu=0.0, full_gc_runs=0)
        start = time.process_time()
        try:
            return _run(self)
        finally:
            record = dict(task=self._task.get_name(), host=self._host.name, cpu_s=time.process_time() - start,
                          gc_cpu_s=_state["gc_cpu"], gc_runs=_state["gc_runs"], full_gc_cpu_s=_state["full_gc_cpu"],
                          full_gc_runs=_state["full_gc_runs"], compiles=_state["compiles"])
            with open(os.path.join(DIRECTORY, "%s-%d.json" % (self._host.name, os.getpid())), "w") as handle:
                json.dump(record, handle)

    worker.WorkerProcess._run = _profiled_run
