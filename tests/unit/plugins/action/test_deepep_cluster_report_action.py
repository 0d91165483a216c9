# -*- coding: utf-8 -*-
"""deepep_cluster_report's action plugin writes the report in the controller's process, as the module would: the
same arguments accepted and refused, nothing written in check mode, and no module sent anywhere."""
from __future__ import annotations

import json
from unittest import mock

from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.moe_infra.deepep.plugins.action.deepep_cluster_report import ActionModule
from ansible_collections.moe_infra.deepep.tests.unit.plugins.module_utils.test_cluster_report import site_summary


def action(args, check_mode=False):
    task = Task()
    task.args = args
    task.async_val = 0
    context = PlayContext()
    context.check_mode = check_mode
    plugin = ActionModule(task, mock.MagicMock(), context, mock.MagicMock(), None, None)
    plugin._execute_module = mock.Mock(side_effect=AssertionError("no module process for the report"))
    return plugin


def test_writes_the_report_here_and_nothing_in_check_mode(tmp_path):
    dest = tmp_path / "report"
    args = {"dest": str(dest), "records_dir": str(tmp_path / "site"), "source": "site", "playbook": "site.yml",
            "targeted": ["n1", "n2"], "hosts": {"n1": site_summary()}}
    result = action(args, check_mode=True).run(task_vars={})
    assert not result.get("failed"), result
    assert result["html"] == str(dest / "report.html") and result["dropped"] == ["n2"] and not dest.exists()

    result = action(args).run(task_vars={})
    assert not result.get("failed"), result
    assert result["changed"] is True and result["summary"][1] == "n2: dropped out"
    assert (dest / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((tmp_path / "site" / "n1-site.json").read_text()) == site_summary()
    assert list(json.loads((dest / "report.json").read_text())["hosts"]) == ["n1", "n2"]


def test_arguments_are_checked_against_the_modules_spec(tmp_path):
    result = action({"source": "site", "hosts": {}}).run(task_vars={})
    assert result["failed"] and "one of the following is required: dest, records_dir" in result["msg"]
    result = action({"dest": str(tmp_path), "source": "nightly", "hosts": {}}).run(task_vars={})
    assert result["failed"] and "value of source must be one of" in result["msg"]
    target = tmp_path / "file"
    target.write_text("")
    result = action({"dest": str(target), "source": "site", "hosts": {}}).run(task_vars={})
    assert result["failed"] and "is not a directory: set deepep_cluster_report_dir to a directory" in result["msg"]
