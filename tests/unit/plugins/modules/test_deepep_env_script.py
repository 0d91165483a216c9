# -*- coding: utf-8 -*-
"""deepep_env_script writes the script when its content or mode differs, in check mode only says so, shows the
diff, makes missing parent directories, and refuses a directory as dest and a mode that is not octal."""
from __future__ import annotations

import stat

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import deepep_env_script as module

SCRIPT = "# shellcheck shell=bash\nexport DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_0:1\n"


def mode_of(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_then_changes_nothing(run_module, tmp_path):
    dest = tmp_path / "env.sh"
    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT}, check_mode=True, diff=True)
    assert not failed and result["changed"] and not dest.exists()
    assert result["diff"]["before"] == "" and result["diff"]["after"] == SCRIPT

    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT})
    assert not failed and result["changed"] and dest.read_text() == SCRIPT and mode_of(dest) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["env.sh"]  # no temporary file left

    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT}, diff=True)
    assert not failed and not result["changed"] and "diff" not in result


def test_a_changed_mode_alone_is_a_change(run_module, tmp_path):
    dest = tmp_path / "env.sh"
    dest.write_text(SCRIPT)
    dest.chmod(0o600)
    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT, "mode": "0644"})
    assert not failed and result["changed"] and mode_of(dest) == 0o644


def test_new_content_replaces_the_old(run_module, tmp_path):
    dest = tmp_path / "env.sh"
    dest.write_text("old\n")
    dest.chmod(0o644)
    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT}, diff=True)
    assert not failed and result["changed"] and result["diff"]["before"] == "old\n" and dest.read_text() == SCRIPT


def test_missing_parent_directories_are_made_outside_check_mode(run_module, tmp_path):
    dest = tmp_path / "opt" / "deepep" / "env.sh"
    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT}, check_mode=True)
    assert not failed and result["changed"] and not (tmp_path / "opt").exists()
    result, failed = run_module(module, {"dest": str(dest), "content": SCRIPT})
    assert not failed and result["changed"] and dest.read_text() == SCRIPT and mode_of(dest.parent) == 0o755


@pytest.mark.parametrize("dest, mode, message", [
    ("", "0644", "is a directory; set deepep_env_script to a file path"),
    ("env.sh", "rw-r--r--", "mode: 'rw-r--r--' is not octal permissions like '0644'"),
    ("env.sh", "77777", "mode: '77777' is not octal permissions like '0644'"),
])
def test_bad_input_is_refused_and_nothing_written(run_module, tmp_path, dest, mode, message):
    result, failed = run_module(module, {"dest": str(tmp_path / dest), "content": SCRIPT, "mode": mode})
    assert failed and (message % tmp_path if "%s" in message else message) in result["msg"]
    assert not (tmp_path / "env.sh").exists()
