# -*- coding: utf-8 -*-
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.modules import torch_stack_info as module
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import make_python_site


def test_gpu_machine_like_stack(run_module, tmp_path):
    python = make_python_site(tmp_path)
    result, failed = run_module(module, {"python": python})
    assert not failed, result
    assert result["changed"] is False
    assert result["torch"] == {"version": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9"}
    wheel = result["nvshmem_wheel"]
    assert wheel["package"] == "nvidia-nvshmem-cu13" and wheel["version"] == "3.4.5"
    assert wheel["ibgda_transport"] is True and wheel["host_lib"].endswith("libnvshmem_host.so.3")
    assert result["nccl_wheel"]["version"] == "2.28.9"
    assert result["deep_ep"]["importable"] is False and result["deep_ep"]["undefined_symbol"] is False


def test_wheel_without_ibgda_and_missing_nvshmem(run_module, tmp_path):
    result, dummy = run_module(module, {"python": make_python_site(tmp_path / "a", ibgda_transport=False)})
    assert result["nvshmem_wheel"]["ibgda_transport"] is False
    result, dummy = run_module(module, {"python": make_python_site(tmp_path / "b", nvshmem=None)})
    assert result["nvshmem_wheel"] is None


def test_deep_ep_built_against_another_torch_is_flagged(run_module, tmp_path):
    error = "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so: undefined symbol: _ZNK3c1010TensorImpl7stridesEv"
    result, dummy = run_module(module, {"python": make_python_site(tmp_path, deep_ep_error=error)})
    assert result["deep_ep"]["undefined_symbol"] is True and "TensorImpl" in result["deep_ep"]["error"]


def test_interpreter_must_exist(run_module, tmp_path):
    result, failed = run_module(module, {"python": str(tmp_path / "nope")})
    assert failed and "is not an executable interpreter" in result["msg"]
