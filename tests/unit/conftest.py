# -*- coding: utf-8 -*-
"""Run modules in-process: module args patched in, exit_json/fail_json output captured."""

from __future__ import annotations

import json
import os
import stat

import pytest

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.18 (make compat): the module arguments go where AnsibleModule reads them
    import contextlib

    from ansible.module_utils import basic

    @contextlib.contextmanager
    def patch_module_args(args):
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = None


class ModuleRunner(object):
    def __init__(self, capsys):
        self.capsys = capsys

    def __call__(self, module, args=None, check_mode=False, diff=False):
        """Run module.main() and return (result, failed)."""
        args = dict(args or {})
        args["_ansible_check_mode"] = check_mode
        args["_ansible_diff"] = diff
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exit_info:
                module.main()
        result = json.loads(self.capsys.readouterr().out)
        return result, exit_info.value.code != 0


@pytest.fixture
def run_module(capsys):
    return ModuleRunner(capsys)


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """A directory first on PATH where tests place stand-in commands (fixtures) printing recorded output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ.get("PATH", "")))

    def make(name, stdout="", rc=0, stderr=""):
        path = bin_dir / name
        out_file = bin_dir / (name + ".stdout")
        err_file = bin_dir / (name + ".stderr")
        out_file.write_text(stdout)
        err_file.write_text(stderr)
        path.write_text("#!/bin/sh\ncat '%s'\ncat '%s' >&2\nexit %d\n" % (out_file, err_file, rc))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(path)

    return make
