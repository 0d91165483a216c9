# -*- coding: utf-8 -*-
"""source_build's action plugin on the controller: a role's build description (build:) becomes the module's
options, and the controller's patches go as text; the module call itself is a stand-in that records its options."""
from __future__ import annotations

import os
import shutil
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


def test_send_source_puts_the_archive_on_the_node_for_the_build_outside_check_mode(tmp_path):
    archive = tmp_path / "demo.tar.gz"
    with tarfile.open(str(archive), "w:gz"):
        pass
    for check_mode, send, expected in ((False, True, "/remote/tmp/demo.tar.gz"), (True, True, None),
                                       (False, False, None)):
        plugin, sent = action({"build": {"name": "demo", "prefix": "/opt/demo", "controller_src": str(archive)},
                               "send_source": send})
        plugin._find_needle = lambda folder, path: path
        plugin._play_context.check_mode = check_mode
        plugin._put_artifact = lambda local: "/remote/tmp/" + os.path.basename(local)
        assert not plugin.run(task_vars={}).get("failed")
        assert sent.get("src_in") == expected and "send_source" not in sent


def export_action(tmp_path, node_bytes, written_digest=None, become=False):
    """The build task of a host that exports its build (artifact_out, controller_cache): the module stand-in reports
    an export written on the node (a file under tmp_path/node), the connection copies it or slurp reads it."""
    import base64
    import hashlib
    node = tmp_path / "node"
    node.mkdir(exist_ok=True)
    artifact = node / "demo-0123456789abcdef.tar.gz"
    artifact.write_bytes(node_bytes)
    cache = tmp_path / "cache"
    plugin, sent = action({"name": "demo", "prefix": "/opt/demo", "build_command": "make",
                           "artifact_out": str(artifact), "controller_cache": str(cache)})
    plugin._loader.path_dwim = lambda path: path
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, wrap_async=False):
        calls.append(module_name)
        if module_name == "ansible.legacy.slurp":
            return {"content": base64.b64encode(artifact.read_bytes()).decode(), "encoding": "base64"}
        sent.update(module_args)
        return {"changed": True, "fingerprint": "0123456789abcdef", "artifact": str(artifact), "artifact_written": True,
                "artifact_digest": written_digest or "sha256:" + hashlib.sha256(node_bytes).hexdigest()}
    plugin._execute_module = execute_module
    plugin._connection.become = object() if become else None
    plugin._connection.fetch_file = shutil.copyfile
    return plugin, cache, artifact, calls


@pytest.mark.parametrize("become", [False, True])
def test_a_build_the_node_exported_comes_back_to_the_controller_cache_with_its_record(tmp_path, become):
    import hashlib
    plugin, cache, artifact, calls = export_action(tmp_path, b"the verified build", become=become)
    result = plugin.run(task_vars={})
    assert not result.get("failed"), result
    entry = cache / artifact.name
    assert result["fetched"] == str(entry) and result["cached"] is True
    assert entry.read_bytes() == b"the verified build"
    # sha256sum's format, as a carried-in cache brings it; the cache is the controller user's alone.
    assert (cache / (artifact.name + ".sha256")).read_text() == "%s  %s\n" % (
        hashlib.sha256(b"the verified build").hexdigest(), artifact.name)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert sorted(p.name for p in cache.iterdir()) == [artifact.name, artifact.name + ".sha256"]
    # Through become, read as the fetch action reads it (slurp); else copied over the connection.
    assert calls == ["moe_infra.deepep.source_build"] + (["ansible.legacy.slurp"] if become else [])


def test_a_fetched_copy_that_differs_from_what_the_node_wrote_stays_out_of_the_cache(tmp_path):
    plugin, cache, artifact, calls = export_action(tmp_path, b"cut short", written_digest="sha256:" + "0" * 64)
    result = plugin.run(task_vars={})
    assert result["failed"] and "has another sha256" in result["msg"] and "nothing was put in the controller cache" \
        in result["msg"]
    assert list(cache.iterdir()) == []


def test_a_cache_others_can_write_is_refused_before_anything_is_fetched(tmp_path):
    plugin, cache, artifact, calls = export_action(tmp_path, b"the verified build")
    cache.mkdir(mode=0o777)
    os.chmod(str(cache), 0o777)
    result = plugin.run(task_vars={})
    assert result["failed"] and "can be written by users other than its owner" in result["msg"]
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("rolled_back", [True, False])
def test_a_rolled_back_build_leaves_the_controller_cache(tmp_path, rolled_back):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    failed, other = cache / "deepep-0123456789abcdef.tar.gz", cache / "deepep-fedcba9876543210.tar.gz"
    for path in (failed, other):
        path.write_bytes(b"a build")
        (cache / (path.name + ".sha256")).write_text("digest  %s\n" % path.name)
    plugin, sent = action({"name": "deepep", "prefix": "/opt/deepep/deepep", "state": "rolled_back",
                           "rollback_from": "0123456789abcdef", "controller_cache": str(cache)})
    plugin._loader.path_dwim = lambda path: path
    plugin._execute_module = lambda **kwargs: {"changed": rolled_back, "action": "rollback" if rolled_back else "none"}
    result = plugin.run(task_vars={})
    # Only the failed fingerprint goes, and only when the rollback was done (a rerun finds nothing to roll back).
    assert result["uncached"] == (str(failed) if rolled_back else None)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [other.name, other.name + ".sha256"] + ([] if rolled_back else [failed.name, failed.name + ".sha256"]))


def test_the_result_holds_the_options_once():
    plugin, sent = action({"build": {"name": "demo", "prefix": "/opt/demo", "build_command": "make"}})

    def execute_module(module_name=None, module_args=None, task_vars=None, wrap_async=False):
        return {"changed": False, "fingerprint": "0123456789abcdef", "invocation": {"module_args": dict(module_args)}}
    plugin._execute_module = execute_module
    result = plugin.run(task_vars={})
    assert "invocation" not in result
    assert result["build_options"] == {"name": "demo", "prefix": "/opt/demo", "build_command": "make"}
