# -*- coding: utf-8 -*-
"""source_build's action plugin on the controller: a role's build description (build:) becomes the module's
options, and the controller's patches go as text; the module call itself is a stand-in that records its options."""
from __future__ import annotations

from unittest import mock

import pytest

from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.moe_infra.deepep.plugins.action.source_build import ActionModule


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
