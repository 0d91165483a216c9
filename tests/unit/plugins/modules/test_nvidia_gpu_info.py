# -*- coding: utf-8 -*-
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.modules import nvidia_gpu_info as module
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import SysfsTree

# nvidia-smi --query-gpu=index,pci.bus_id,name,compute_cap,driver_version,memory.total,uuid
#            --format=csv,noheader,nounits, in the form driver 580 prints it.
H200_SMI = "".join(
    "%d, 00000000:00:%02X.0, NVIDIA H200, 9.0, 580.159.04, 143771, GPU-%08d-0000-0000-0000-000000000000\n"
    % (i, 6 + i, i) for i in range(4))


def info(run_module, sysfs, **args):
    args["sysfs_root"] = str(sysfs)
    result, failed = run_module(module, args)
    assert not failed, result
    assert result["changed"] is False
    return result


def test_gcp_b200_pci_order_and_arch_from_device_id(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result = info(run_module, tmp_path, nvidia_smi="nvidia-smi-absent")
    assert result["gpu_count"] == 8
    assert [g["pci_address"] for g in result["gpus"]] == [
        "0000:03:00.0", "0000:05:00.0", "0000:43:00.0", "0000:45:00.0",
        "0000:83:00.0", "0000:85:00.0", "0000:c3:00.0", "0000:c5:00.0"]
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert result["gpus"][0]["compute_cap_source"] == "pci_device_id"
    assert result["torch_cuda_arch_list"] == "10.0"
    assert result["cmake_cuda_architectures"] == "100"
    assert result["nvidia_smi"] is None
    assert "nvidia-smi not found" in result["notes"][0]


def test_nvidia_smi_enriches_by_pci_address(run_module, tmp_path, fake_bin):
    machines.h200_no_nics(tmp_path)
    smi = fake_bin("nvidia-smi", H200_SMI)
    result = info(run_module, tmp_path)
    assert result["nvidia_smi"] == smi
    first = result["gpus"][0]
    assert first == {**first, "name": "NVIDIA H200", "compute_cap": "9.0", "compute_cap_source": "nvidia-smi",
                     "driver_version": "580.159.04", "memory_total_mib": 143771, "numa_node": -1,
                     "pci_class": "0x030200", "pci_device_id": "0x2335"}
    assert result["driver_version"] == "580.159.04"
    assert result["compute_caps"] == ["9.0"]
    assert result["notes"] == []


# Recorded on the 2 x H200 test machine (docs/results/discovery-h200x2/raw-state.txt).
RECORDED_H200X2 = """0, 00000000:00:06.0, NVIDIA H200, 9.0, 580.159.04, 143771, GPU-12d8ce7a-c793-6a51-c805-4c63f4af7bf1
1, 00000000:00:07.0, NVIDIA H200, 9.0, 580.159.04, 143771, GPU-caf307a4-e476-a445-be57-8d80620586ce
"""


def test_recorded_h200_output(run_module, tmp_path, fake_bin):
    tree = SysfsTree(tmp_path)
    rc = tree.root_complex("pci0000:00", numa_node=-1)
    rc.gpu("0000:00:06.0")
    rc.gpu("0000:00:07.0")
    fake_bin("nvidia-smi", RECORDED_H200X2)
    result = info(run_module, tmp_path)
    assert [(g["index"], g["name"], g["uuid"][:12]) for g in result["gpus"]] == [
        (0, "NVIDIA H200", "GPU-12d8ce7a"), (1, "NVIDIA H200", "GPU-caf307a4")]
    assert result["torch_cuda_arch_list"] == "9.0" and result["notes"] == []


def test_gpu_missing_from_nvidia_smi_is_reported(run_module, tmp_path, fake_bin):
    machines.h200_no_nics(tmp_path)
    fake_bin("nvidia-smi", "".join(H200_SMI.splitlines(True)[:3]))
    result = info(run_module, tmp_path)
    assert result["gpus"][3]["name"] is None
    assert "0000:00:09.0" in result["notes"][0]


def test_nvidia_smi_failure_keeps_sysfs_data(run_module, tmp_path, fake_bin):
    machines.h200_no_nics(tmp_path)
    fake_bin("nvidia-smi", "", rc=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the driver")
    result = info(run_module, tmp_path)
    assert result["gpu_count"] == 4 and result["nvidia_smi"] is None
    assert "couldn't communicate with the driver" in result["notes"][0]
    assert result["torch_cuda_arch_list"] == "9.0"


def test_unknown_device_without_nvidia_smi_has_no_arch(run_module, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.root_complex().gpu("0000:00:05.0", device="0xffff")
    result = info(run_module, tmp_path, nvidia_smi="nvidia-smi-absent")
    assert result["gpus"][0]["compute_cap"] is None
    assert result["torch_cuda_arch_list"] == ""
    assert "compute capability unknown for 1 of 1 GPUs" in result["notes"]


def test_nvswitch_and_other_vendors_are_not_gpus(run_module, tmp_path):
    machines.no_gpus(tmp_path)
    result = info(run_module, tmp_path)
    assert result["gpus"] == [] and result["gpu_count"] == 0
