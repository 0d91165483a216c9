# -*- coding: utf-8 -*-
"""source_build's action plugin on the controller: a role's build description (build:) becomes the module's
options, and the controller's patches go as text; the module call itself is a stand-in that records its options."""
from __future__ import annotations

import os
import tarfile
from unittest import mock

import pytest

from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.moe_infra.deepep.plugins.action.source_build import ActionModule, plan_from_reading
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_state import read_builds
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.fingerprint import file_digest
from ansible_collections.moe_infra.deepep.plugins.modules import source_build as module


def action(args):
    task = Task()
    task.args = args
    task.async_val = 0
    plugin = ActionModule(task, mock.MagicMock(), PlayContext(), mock.MagicMock(), None, None)
    sent = {}

    def execute_module(module_name=None, module_args=None, task_vars=None, wrap_async=False):
        sent.update(module_args)
        return {"changed": False, "fingerprint": "0123456789abcdef"}
    plugin._execute_module = execute_module
    plugin._remove_tmp_path = lambda path: None
    return plugin, sent


def test_the_build_description_becomes_the_modules_options():
    plugin, sent = action({"build": {"name": "nvshmem", "prefix": "/opt/deepep/nvshmem", "build_command": "make",
                                     "src": "", "git_url": None, "verify_command": "true", "force": False},
                           "verify_command": "given on the task", "network_retries": 2})
    result = plugin.run(task_vars={})
    assert not result.get("failed"), result
    # Empty and null values are left out; what the task itself gives wins.
    assert {k: sent[k] for k in ("name", "prefix", "build_command", "verify_command", "force", "network_retries")} == {
        "name": "nvshmem", "prefix": "/opt/deepep/nvshmem", "build_command": "make",
        "verify_command": "given on the task", "force": False, "network_retries": 2}
    assert "src" not in sent and "git_url" not in sent and "build" not in sent


def test_a_controller_archive_goes_under_the_prefix_and_the_git_source_is_not_used(tmp_path):
    archive = tmp_path / "nccl-2.30.4-1.tar.gz"
    with tarfile.open(str(archive), "w:gz"):
        pass
    plugin, sent = action({"build": {"name": "nccl", "prefix": "/opt/deepep/nccl", "controller_src": str(archive),
                                     "git_url": "https://github.com/NVIDIA/nccl.git", "git_ref": "v2.30.4-1"}})
    plugin._find_needle = lambda folder, path: path
    result = plugin.run(task_vars={})
    assert not result.get("failed"), result
    assert sent["src"] == "/opt/deepep/nccl/sources/nccl-2.30.4-1.tar.gz"
    assert sent["src_digest"] == "sha256:" + file_digest(str(archive))
    assert "git_url" not in sent and "git_ref" not in sent
    # The copy task takes the node's path from the plan's options.
    assert result["build_options"]["src"] == sent["src"] and "git_url" not in result["build_options"]
    # A path the description names wins.
    plugin, sent = action({"build": {"name": "deepep", "prefix": "/opt/deepep/deepep", "controller_src": str(archive),
                                     "src": "/opt/deepep/sources/nccl-2.30.4-1.tar.gz"}})
    plugin._find_needle = lambda folder, path: path
    assert not plugin.run(task_vars={}).get("failed")
    assert sent["src"] == "/opt/deepep/sources/nccl-2.30.4-1.tar.gz"


@pytest.mark.parametrize("build, words", [
    ({"name": "x", "artifact_in": "/tmp/forged.tar.gz"}, "not accepted: artifact_in"),
    (["name"], "not accepted: list"),
])
def test_a_build_description_with_other_options_is_refused(build, words):
    plugin, sent = action({"build": build})
    result = plugin.run(task_vars={})
    assert result["failed"] and words in result["msg"] and "build: a dict of name, src," in result["msg"]
    assert sent == {}


def test_controller_patches_go_as_text(tmp_path):
    patch = tmp_path / "fix.patch"
    patch.write_text("--- a/x\n+++ b/x\n")
    plugin, sent = action({"name": "nvshmem", "prefix": "/opt/p", "build_command": "make",
                           "controller_patches": [str(patch)]})
    plugin._find_needle = lambda kind, path: path
    assert not plugin.run(task_vars={}).get("failed")
    assert sent["patch_texts"] == [{"name": "fix.patch", "content": "--- a/x\n+++ b/x\n"}]
    assert "controller_patches" not in sent


def test_a_controller_patch_that_is_not_there_is_named(tmp_path):
    plugin, sent = action({"name": "nvshmem", "prefix": "/opt/p", "build_command": "make",
                           "controller_patches": [str(tmp_path / "missing.patch")]})
    plugin._find_needle = lambda kind, path: path
    result = plugin.run(task_vars={})
    assert result["failed"] and "controller_patches: cannot read %s" % (tmp_path / "missing.patch") in result["msg"]
    assert sent == {}


PATCH = "--- a/input.txt\n+++ b/input.txt\n@@ -1 +1 @@\n-hello\n+hello, patched\n"


def archive_build(tmp_path, run_module):
    """A verified build of a fixture archive made by the module itself, with the module's own plan of it."""

    source = tmp_path / "demo"
    source.mkdir()
    (source / "input.txt").write_text("hello\n")
    archive = tmp_path / "demo.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(source), arcname="demo")
    args = dict(name="demo", src=str(archive), src_digest="sha256:" + file_digest(str(archive)),
                prefix=str(tmp_path / "opt" / "demo"), build_command="cp input.txt built.txt && echo 2.5.1 > VERSION",
                verify_command="test -s built.txt", environment={"ARCH": "9.0", "JOBS": 4},
                inputs={"torch": "2.11.0", "arch_list": ["9.0"]}, read_files=["src/VERSION"],
                patch_texts=[{"name": "fix.patch", "content": PATCH}])
    built, failed = run_module(module, args)
    assert not failed and built["action"] == "build", built
    plan, failed = run_module(module, args, check_mode=True)
    assert not failed and plan["action"] == "none", plan
    return args, plan


def test_an_up_to_date_plan_is_answered_from_the_reading_as_the_module_answers(tmp_path, run_module):

    args, plan = archive_build(tmp_path, run_module)
    known = read_builds(str(tmp_path / "opt"), ["src/VERSION", "include/gdrapi.h"], "")
    assert list(known["prefixes"]) == [args["prefix"]]
    answer = plan_from_reading(args, known)
    assert answer == dict((k, v) for k, v in plan.items() if k not in ("invocation", "warnings")), answer
    assert answer["files"] == {"src/VERSION": "2.5.1\n"}

    # Anything the reading cannot answer goes to the module.
    assert plan_from_reading(dict(args, inputs={"torch": "2.12.0", "arch_list": ["9.0"]}), known) is None
    assert plan_from_reading(dict(args, force=True), known) is None
    assert plan_from_reading(dict(args, prefix=str(tmp_path / "elsewhere")), known) is None
    # Spelled otherwise than the reading names it: the module's paths would be spelled so too (they go into the
    # fingerprints of the layers above), so the module answers.
    assert plan_from_reading(dict(args, prefix=args["prefix"].replace("/opt/", "/opt//")), known) is None
    assert plan_from_reading(dict(args, read_files=["src/OTHER"]), known) is None
    assert plan_from_reading(dict(args, build_user="deepep-build"), known) is None
    assert plan_from_reading(dict(args, patch_texts=[]), known) is None
    assert plan_from_reading(dict(args, src_digest=None), known) is None
    os.unlink(os.path.join(args["prefix"], "current", ".moe_infra_stamp.json"))
    assert plan_from_reading(args, read_builds(str(tmp_path / "opt"), ["src/VERSION"], "")) is None


def test_the_plan_task_runs_no_module_when_the_reading_answers(tmp_path, run_module):
    args, plan = archive_build(tmp_path, run_module)
    known = read_builds(str(tmp_path / "opt"), ["src/VERSION"], "")
    task_args = dict(args, known_builds=known)
    del task_args["src_digest"]
    task_args["controller_src"] = task_args["src"]
    plugin, sent = action(task_args)
    plugin._play_context.check_mode = True
    plugin._find_needle = lambda kind, path: path
    result = plugin.run(task_vars={})
    assert sent == {} and result["action"] == "none" and result["fingerprint"] == plan["fingerprint"], result
    # Not in check mode (a build task), the module runs.
    plugin, sent = action(task_args)
    plugin._find_needle = lambda kind, path: path
    plugin.run(task_vars={})
    assert sent["src_digest"] == args["src_digest"] and "known_builds" not in sent
