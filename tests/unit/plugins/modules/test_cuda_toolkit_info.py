# -*- coding: utf-8 -*-
from __future__ import annotations

import pathlib

from ansible_collections.moe_infra.deepep.plugins.modules import cuda_toolkit_info as module
from ansible_collections.moe_infra.deepep.tests.fixtures.cuda_home import make_cuda_home as fixture_cuda_home


def make_cuda_home(tmp_path, cccl=True):
    return pathlib.Path(fixture_cuda_home(tmp_path, cccl=cccl))


def test_finds_cuda_13_with_cccl(run_module, tmp_path):
    home = make_cuda_home(tmp_path)
    result, failed = run_module(module, {"cuda_home": str(home)})
    assert not failed and result["changed"] is False
    assert result["found"] is True and result["release"] == "13.0" and result["major"] == 13
    assert result["full_version"] == "13.0.2"
    assert result["cuda_home"] == str(home)
    assert result["cccl_include_dir"] == str(home / "include" / "cccl")


def test_nvcc_on_path_when_cuda_home_is_empty(run_module, tmp_path, monkeypatch):
    home = make_cuda_home(tmp_path, cccl=False)
    monkeypatch.setenv("PATH", str(home / "bin"))
    result, failed = run_module(module, {"cuda_home": str(tmp_path / "missing")})
    assert result["found"] is True and result["nvcc"] == str(home / "bin" / "nvcc")
    assert result["cccl_include_dir"] is None


def test_no_toolkit(run_module, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result, failed = run_module(module, {"cuda_home": str(tmp_path / "missing")})
    assert not failed
    assert result["found"] is False and result["release"] is None and result["nvcc"] is None
