# -*- coding: utf-8 -*-
"""Every decision branch of the system layers: the regkey (absent / configured-not-live / live / driver not
loaded; required or not), DOCA (needed / not needed / no hardware / policy), dkms, the reboot plan. The regkey
cases run nvidia_driver_params on fixture trees, so the decision sees what the module really returns."""
from __future__ import annotations

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.system import system_layers as sl
from ansible_collections.moe_infra.deepep.plugins.modules import nvidia_driver_params
from ansible_collections.moe_infra.deepep.plugins.modules import rdma_hca_info
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import write_nvidia_params

PEER = {"PeerMappingOverride": 1}
OUR_LINE = 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n'


def driver_params(run_module, tmp_path, live, conf=None, state="query", loaded=True):
    proc, modprobe = tmp_path / "proc", tmp_path / "modprobe.d"
    modprobe.mkdir(exist_ok=True)
    if loaded:
        write_nvidia_params(str(proc), registry_dwords=live)
    if conf is not None:
        (modprobe / "nvidia-deepep.conf").write_text(conf)
    result, failed = run_module(nvidia_driver_params, dict(
        procfs_root=str(proc), modprobe_dir=str(modprobe), registry_dwords=PEER, state=state))
    assert not failed, result
    return result


def test_regkey_absent_with_nics_is_required_and_written_then_needs_reboot(run_module, tmp_path):
    query = sl.peermapping_decision(8, driver_params(run_module, tmp_path, live=""))
    assert query["required"] and query["state"] == "absent" and not query["reboot_required"]
    assert query["action"] == "write the conf file, refresh the initramfs, reboot"
    written = sl.peermapping_decision(8, driver_params(run_module, tmp_path, live="", state="present"))
    assert written["state"] == "configured_not_live" and written["reboot_required"] is True


def test_regkey_configured_not_live_asks_for_reboot_without_writing(run_module, tmp_path):
    decision = sl.peermapping_decision(2, driver_params(run_module, tmp_path, live="", conf=OUR_LINE))
    assert decision["state"] == "configured_not_live" and decision["reboot_required"] is True
    assert decision["action"].startswith("reboot")


def test_regkey_live_needs_nothing(run_module, tmp_path):
    decision = sl.peermapping_decision(8, driver_params(run_module, tmp_path, live="PeerMappingOverride=1;",
                                                        conf=OUR_LINE))
    assert decision["state"] == "live" and decision["reboot_required"] is False
    assert decision["registry_dwords_live"] == "PeerMappingOverride=1;"


def test_no_nics_not_required_unless_forced(run_module, tmp_path):
    params = driver_params(run_module, tmp_path, live="")
    decision = sl.peermapping_decision(0, params)
    assert decision["required"] is False and decision["action"] == "nothing: not required"
    assert "no RDMA HCA" in decision["why"]
    forced = sl.peermapping_decision(0, params, force=True)
    assert forced["required"] is True and "forced" in forced["why"]


def test_driver_not_loaded_applies_at_load_without_reboot(run_module, tmp_path):
    decision = sl.peermapping_decision(8, driver_params(run_module, tmp_path, live="", state="present", loaded=False))
    assert decision["state"] == "driver_not_loaded" and decision["reboot_required"] is False
    assert "applies when the driver loads" in decision["action"]


def test_regkey_report_line_and_reboot_reason(run_module, tmp_path):
    settings = dict(conf_file="/etc/modprobe.d/nvidia-deepep.conf", settings=["PeerMappingOverride"])
    written = sl.peermapping_decision(8, driver_params(run_module, tmp_path, live="", state="present"), **settings)
    assert written["reboot_reason"] == ("PeerMappingOverride configured in /etc/modprobe.d/nvidia-deepep.conf, live "
                                        "RegistryDwords ''")
    assert written["report"] == ("configured_not_live; required (8 RDMA HCA(s): IBGDA needs the GPU to map the NIC's "
                                 "doorbells); RegistryDwords live \"\"; reboot: configured in modprobe.d, not live")
    # Report-only (the conf file written above is there, not live): the report says what it would do, and the reboot
    # play gets no reason.
    only = sl.peermapping_decision(8, driver_params(run_module, tmp_path, live=""), report_only=True, **settings)
    assert only["reboot_reason"] == "" and only["report"].endswith('""; would: reboot: configured in modprobe.d, not live')
    # No driver loaded: no reason of its own, unless a driver installed in this run loads at the reboot.
    (tmp_path / "no_driver").mkdir()
    params = driver_params(run_module, tmp_path / "no_driver", live="", state="present", loaded=False)
    assert sl.peermapping_decision(8, params, **settings)["reboot_reason"] == ""
    pending = sl.peermapping_decision(8, params, driver_reboot_pending=True, **settings)
    assert pending["reboot_reason"].startswith("PeerMappingOverride configured in ")
    assert pending["report"].endswith("RegistryDwords live null; write the conf file; it applies when the driver loads")
    (tmp_path / "live").mkdir()
    live = sl.peermapping_decision(8, driver_params(run_module, tmp_path / "live", live="PeerMappingOverride=1;",
                                                    conf=OUR_LINE), report_only=True, **settings)
    assert live["reboot_reason"] == "" and live["report"].endswith(
        'RegistryDwords live "PeerMappingOverride=1;"; nothing: live in /proc/driver/nvidia/params')


def rdma(run_module, tmp_path, machine, include=None):
    if not (tmp_path / machine).exists():
        machines.MACHINES[machine](str(tmp_path / machine))
    result, failed = run_module(rdma_hca_info, dict(sysfs_root=str(tmp_path / machine),
                                                    include_dirs=[str(include)] if include else []))
    assert not failed
    return result


def header(tmp_path):
    include = tmp_path / "include"
    (include / "infiniband").mkdir(parents=True)
    (include / "infiniband" / "mlx5_api.h").write_text(
        "enum mlx5dv_reg_dmabuf_access {\n\tMLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT = (1 << 0),\n};\n")
    return include


def test_doca_needed_for_rocep_names_and_old_rdma_core(run_module, tmp_path):
    decision = sl.doca_decision(rdma(run_module, tmp_path, "gcp_b200"))
    assert decision["install"] is True
    assert any("KF01" in r for r in decision["reasons"]) and any("KF19" in r for r in decision["reasons"])


def test_doca_needed_for_old_rdma_core_only(run_module, tmp_path):
    decision = sl.doca_decision(rdma(run_module, tmp_path, "gcp_b200_doca"))
    assert decision["install"] is True and decision["reasons"] == [
        "rdma-core headers lack MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (KF19)"]


def test_doca_not_needed_with_mlx5_names_and_new_rdma_core(run_module, tmp_path):
    done = rdma(run_module, tmp_path, "gcp_b200_doca", header(tmp_path))
    decision = sl.doca_decision(done)
    assert decision["install"] is False and decision["skip"] is False
    assert decision["msg"].startswith("nothing to do")
    forced = sl.doca_decision(done, "always")
    assert forced["install"] is True and forced["reasons"] == ["doca_ofed_policy=always"]


def test_doca_skipped_without_mellanox_hardware_even_when_forced(run_module, tmp_path):
    for policy in sl.DOCA_POLICIES:
        decision = sl.doca_decision(rdma(run_module, tmp_path, "h200_no_nics"), policy)
        assert decision["install"] is False and decision["skip"] is True
        assert "no Mellanox hardware" in decision["msg"]


def test_doca_unbound_nic_counts_as_hardware(run_module, tmp_path):
    decision = sl.doca_decision(rdma(run_module, tmp_path, "h200_unbound_nic"), "always")
    assert decision["install"] is True


def test_doca_policy_never_and_bad_policy(run_module, tmp_path):
    result = rdma(run_module, tmp_path, "gcp_b200")
    never = sl.doca_decision(result, "never")
    assert never["install"] is False and "would install for" in never["msg"]
    with pytest.raises(sl.DecisionError, match="doca_ofed_policy: 'sometimes' is not one of auto, always, never"):
        sl.doca_decision(result, "sometimes")


def test_doca_reboot_reason_and_verify(run_module, tmp_path):
    before = rdma(run_module, tmp_path, "gcp_b200")
    assert sl.doca_reboot_reason(before).startswith("HCAs still enumerate as rocep")
    assert "rocep4s0 is not an mlx5_* name (KF01)" in sl.doca_verify_problems(before)
    after = rdma(run_module, tmp_path, "gcp_b200_doca")
    assert sl.doca_reboot_reason(after) == "" and sl.doca_verify_problems(after) == []
    down = rdma(run_module, tmp_path, "one_port_down")
    assert sl.doca_verify_problems(down) == ["mlx5_1 has no ACTIVE port"]
    assert sl.doca_verify_problems({"hcas": []})[0].startswith("no HCA")


DKMS = """mlnx-ofed-kernel/25.10.OFED.25.10.1.7.1, 6.8.0-1015-gcp, x86_64: installed
knem/1.1.4.90mlnx3, 6.8.0-1014-gcp, x86_64: installed
iser, 25.10, 6.8.0-1015-gcp, x86_64: built
srp, 25.10, 6.8.0-1015-gcp, x86_64: installed (original_module exists)
"""


def test_dkms_status_per_running_kernel():
    assert sl.dkms_problems(DKMS, "6.8.0-1015-gcp", ["mlnx-ofed-kernel", "srp"]) == []
    assert sl.dkms_problems(DKMS, "6.8.0-1015-gcp", ["knem", "iser"]) == [
        "knem is not built for the running kernel 6.8.0-1015-gcp (dkms status)",
        "iser is not built for the running kernel 6.8.0-1015-gcp (dkms status)"]
    assert sl.dkms_problems("", "6.8.0", ["mlnx-ofed-kernel"]) != []


def test_apt_origin():
    assert sl.apt_origin("https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu24.04/x86_64/") == \
        "linux.mellanox.com"
    assert sl.apt_origin("file:/opt/repo/doca") == ""


def test_reboot_plan_branches():
    reasons = {"nvidia_peermapping": "configured, not live", "doca_ofed": "rocep names", "cuda": ""}
    plan = sl.reboot_plan("auto", reasons)
    assert plan["action"] == "reboot" and plan["layers"] == ["doca_ofed", "nvidia_peermapping"]
    assert sl.reboot_plan("never", reasons)["action"] == "pending"
    assert "deepep_reboot=never" in sl.reboot_plan("never", reasons)["msg"]
    assert sl.reboot_plan("auto", reasons, rebooted=True)["action"] == "already_rebooted"
    assert sl.reboot_plan("auto", {"cuda": ""})["action"] == "none"
    with pytest.raises(sl.DecisionError, match="deepep_reboot: 'yes' is not one of auto, never"):
        sl.reboot_plan("yes", reasons)


def test_gdrdrv_refused_in_containers_and_without_sources():
    assert sl.gdrdrv_problems([], ["/usr/src/nvidia-580.95.05"], True) == []
    problems = sl.gdrdrv_problems(["/run/.containerenv"], [], False)
    assert [p.split(" ")[0] for p in problems] == ["this", "no", "no"]
    assert "(KF35)" in problems[0] and "(KF10)" in problems[1]


B200 = {"gpus": [{"index": i, "compute_cap": "10.0"} for i in range(8)], "driver_version": None,
        "driver_module_version": None}


def test_driver_installed_only_where_none_is_loaded_and_asked_for():
    no_driver = {"driver_loaded": False}
    plan = sl.driver_decision(B200, no_driver, ["12.9"], install=True, branch="580")
    assert plan["action"] == "install" and plan["packages"] == ["nvidia-open-580", "nvidia-utils-580"]
    assert plan["needed"] == 570 and plan["why"] == "compute capability 10.x"
    refused = sl.driver_decision(B200, no_driver, ["12.9"])
    assert refused["action"] == "refuse" and "set nvidia_driver_install" in refused["msg"]
    loaded = dict(B200, driver_module_version="580.159.04")
    assert sl.driver_decision(loaded, {"driver_loaded": True}, ["13.0"], True, "580")["action"] == "nothing"
    # A loaded driver is never replaced, even one too old: named, not swapped.
    old = sl.driver_decision(dict(B200, driver_module_version="565.57.01"), {"driver_loaded": True}, ["12.9"],
                             install=True, branch="580")
    assert old["action"] == "refuse" and old["packages"] == [] and "below R570" in old["msg"]
    assert sl.driver_decision({"gpus": []}, no_driver, [], install=True, branch="580")["action"] == "skip"
    # The layer's line and the reason it gives the reboot play: only an install that happens reboots.
    assert plan["reboot_reason"] == "nvidia-open-580 nvidia-utils-580 installed, no NVIDIA driver loaded"
    assert plan["report"] == plan["msg"]
    reported = sl.driver_decision(B200, no_driver, ["12.9"], install=True, branch="580", report_only=True)
    assert reported["reboot_reason"] == "" and reported["report"] == "would: " + plan["msg"]
    assert refused["reboot_reason"] == "" and refused["report"] == refused["msg"]


@pytest.mark.parametrize("branch, releases, message", [
    ("570", ["13.0"], "nvidia_driver_branch: 570 is below R580, which CUDA 13.0 needs: set 580 or later"),
    ("565", ["12.9"], "nvidia_driver_branch: 565 is below R570, which compute capability 10.x needs"),
    ("580-open", [], "nvidia_driver_branch: '580-open' is not a driver branch like 580"),
    ("", [], "nvidia_driver_branch: '' is not a driver branch like 580"),
])
def test_driver_branch_below_the_need_or_malformed_is_refused(branch, releases, message):
    with pytest.raises(sl.DecisionError) as exc:
        sl.driver_decision(B200, {"driver_loaded": False}, releases, install=True, branch=branch)
    assert str(exc.value).startswith(message)
