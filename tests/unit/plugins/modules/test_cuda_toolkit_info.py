# -*- coding: utf-8 -*-
from __future__ import annotations

import json

from ansible_collections.moe_infra.deepep.plugins.modules import cuda_toolkit_info as module

# `nvcc --version` of CUDA 13.0 as the GPU test machine prints it.
NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


def make_cuda_home(tmp_path, cccl=True):
    home = tmp_path / "cuda-13.0"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    out = tmp_path / "nvcc.out"
    out.write_text(NVCC_13)
    nvcc.write_text("#!/bin/sh\nexec /bin/cat '%s'\n" % out)
    nvcc.chmod(0o755)
    (home / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}))
    if cccl:
        (home / "include" / "cccl").mkdir(parents=True)
    return home


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
