# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of moe_infra.deepep.deepep_bench: a test that passed before is answered on the controller.

known_builds: the node's reading of what the build layers installed (ansible_facts.deepep.builds, deepep_facts),
with the JSON reports of the report directory (builds.reports) and the JIT cache's kernel count (builds.jit_cache).
A test whose report there holds a pass for the same build, command, environment and thresholds (bench_reuse, the
module's own rule) is answered here as the module answers it: no module process starts on the node (one per test
in a run that changes nothing). Anything else (no reading, another key, rerun, a report the reading does not hold, a
warm-up whose cache lost kernels) goes to the module, which decides again on the node."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.bench_reuse import ARGUMENT_SPEC, reusable


def answer_from_reading(args, reading):
    """The module's answer for args (the task's options without known_builds) from the node's reading, or None."""
    if not isinstance(reading, dict) or not isinstance(reading.get("reports"), dict):
        return None
    validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(args)
    if validated.error_messages:
        return None  # the module says what is wrong
    params = validated.validated_parameters
    if params["report"] not in reading["reports"]:
        return None
    kernels = None
    cache = reading.get("jit_cache")
    if isinstance(cache, dict) and params["jit_cache_dir"] and cache.get("dir") == params["jit_cache_dir"]:
        kernels = cache.get("kernels")
    return reusable(params, reading["reports"][params["report"]], kernels)


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        known_builds = args.pop("known_builds", None)
        # An async task (the internode test, started on every node at once) is polled for its job: the module's.
        answer = None if self._task.async_val else answer_from_reading(args, known_builds)
        if answer is not None:
            return merge_hash(result, answer)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(module_name="moe_infra.deepep.deepep_bench", module_args=args,
                                                         task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
