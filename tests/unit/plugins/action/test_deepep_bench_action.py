# -*- coding: utf-8 -*-
"""deepep_bench's action plugin: a test whose report, as the node's reading holds it, records a pass for the same
build, command, environment and thresholds is answered on the controller exactly as the module answers it on the
node, and nothing else is. The reports come from the module itself, run on the stand-in DeepEP tree
(tests/fixtures/deepep_src with deepep_v2_src's tests/elastic); the plugin's module call is a stand-in that records it was made."""
from __future__ import annotations

import os
import shutil
import sys
from unittest import mock

import pytest

from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.moe_infra.deepep.plugins.action.deepep_bench import ActionModule
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_state import read_builds
from ansible_collections.moe_infra.deepep.plugins.modules import deepep_bench as module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")
MODULE_RAN = {"changed": False, "module": "ran"}


@pytest.fixture
def node(tmp_path):
    src = tmp_path / "src"  # the stand-in tree of deepep_bench's own tests
    shutil.copytree(os.path.join(FIXTURES, "deepep_src"), str(src))
    shutil.copytree(os.path.join(FIXTURES, "deepep_v2_src", "tests", "elastic"), str(src / "tests" / "elastic"))
    (src / "deep_ep_cpp.py").write_text("")
    cache = tmp_path / "jit"
    environment = {"DEEPEP_FIXTURE_OUTPUT": os.path.abspath(os.path.join(FIXTURES, "deepep_output")),
                   "PYTHONPATH": str(src), "EP_JIT_CACHE_DIR": str(cache)}
    reports = tmp_path / "reports"
    reports.mkdir()

    def args(test, **more):
        return dict(dict(python=sys.executable, deepep_dir=str(src), test=test, num_processes=1,
                         environment=environment, log=str(reports / (test + ".log")),
                         report=str(reports / (test + ".json")), verified_for="0123456789abcdef",
                         jit_cache_dir=str(cache),
                         extra_args=["--skip-check", "--skip-perf-test"] if test == "jit_warmup" else []), **more)
    return dict(args=args, reports=reports, cache=cache, tmp=tmp_path)


def reading(node):
    """What preflight's deepep_facts reads with the node (ansible_facts.deepep.builds)."""
    return read_builds(str(node["tmp"] / "opt"), [], "", report_dir=str(node["reports"]), jit_cache=str(node["cache"]))


def plugin_answer(args, known_builds, async_val=0):
    task = Task()
    task.args = dict(args, known_builds=known_builds)
    task.async_val = async_val
    connection = mock.MagicMock(has_native_async=False)
    plugin = ActionModule(task, connection, PlayContext(), mock.MagicMock(), None, None)
    sent = []

    def execute_module(module_name=None, module_args=None, task_vars=None, wrap_async=False):
        sent.append((module_name, module_args, wrap_async))
        return dict(MODULE_RAN)
    plugin._execute_module = execute_module
    plugin._remove_tmp_path = lambda path: None
    return plugin.run(task_vars={}), sent


def test_a_test_that_passed_is_answered_on_the_controller_as_the_module_answers_it(run_module, node):
    for test in ("jit_warmup", "elastic_ep", "elastic_barrier"):
        first, failed = run_module(module, node["args"](test))
        assert not failed and first["reused"] is False, first
    known = reading(node)
    # The warm-up's 10 kernels and the barrier's own.
    assert known["jit_cache"]["kernels"] == 11 and known["reports"][node["args"]("elastic_ep")["report"]]["passed"]
    for test in ("jit_warmup", "elastic_ep", "elastic_barrier"):
        on_node, failed = run_module(module, node["args"](test))
        assert not failed and on_node["reused"] is True, on_node
        answer, sent = plugin_answer(node["args"](test), known)
        assert sent == [], "a module ran for %s" % test
        assert {k: answer[k] for k in on_node if k not in ("invocation",)} == {
            k: v for k, v in on_node.items() if k != "invocation"}


@pytest.mark.parametrize("change", [
    dict(thresholds={"dispatch_su": 1}),  # other thresholds: another key
    dict(num_processes=2),  # another command
    dict(verified_for="fedcba9876543210"),  # another build
    dict(rerun=True),
    dict(verified_for=""),  # never reused
])
def test_anything_the_pass_does_not_vouch_for_goes_to_the_module(run_module, node, change):
    passed, failed = run_module(module, node["args"]("elastic_ep"))
    assert not failed, passed
    answer, sent = plugin_answer(node["args"]("elastic_ep", **change), reading(node))
    assert answer["module"] == "ran" and len(sent) == 1 and sent[0][0] == "moe_infra.deepep.deepep_bench"
    assert "known_builds" not in sent[0][1]


def test_no_reading_or_one_without_the_report_or_the_cache_goes_to_the_module(run_module, node):
    for test in ("jit_warmup", "elastic_ep"):
        passed, failed = run_module(module, node["args"](test))
        assert not failed, passed
    known = reading(node)
    for args, builds in ((node["args"]("elastic_ep"), None),  # no preflight reading (the role run on its own)
                         (node["args"]("elastic_ep"), dict(known, reports=None)),  # read without report_dir
                         (node["args"]("elastic_ep"), dict(known, reports={})),  # the report is not there
                         (node["args"]("jit_warmup"), dict(known, jit_cache=None))):  # kernels not counted
        answer, sent = plugin_answer(args, builds)
        assert answer["module"] == "ran" and len(sent) == 1, (args["test"], builds)
    # A warm-up whose cache lost kernels since is warmed again, as the module decides.
    shutil.rmtree(str(node["cache"] / "cache" / sorted(os.listdir(str(node["cache"] / "cache")))[0]))
    answer, sent = plugin_answer(node["args"]("jit_warmup"), reading(node))
    assert answer["module"] == "ran" and len(sent) == 1
    # An async task (the internode test) is the module's: it is polled for its job.
    answer, sent = plugin_answer(node["args"]("elastic_ep"), known, async_val=600)
    assert answer["module"] == "ran" and len(sent) == 1 and sent[0][2]
    # Bad options are the module's to report.
    answer, sent = plugin_answer(dict(node["args"]("elastic_ep"), num_processes="two"), known)
    assert answer["module"] == "ran" and len(sent) == 1
