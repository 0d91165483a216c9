# -*- coding: utf-8 -*-
"""Every doctor check against evidence that triggers it and evidence that does not.

BASE is a healthy 8 x B200 RoCE node after the whole stack (DOCA, regkey live, NVSHMEM 3.5.19 source build with
IBGDA, DeepEP V1 with the 3.5 fix, env script from the deepep role); each case breaks one thing the way
its known failure (KF id) describes it."""

from __future__ import annotations

import copy
import os
import re

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.report import doctor

NVSHMEM = "/opt/deepep/nvshmem/builds/abc"
WHEEL = "/venv/lib/python3.12/site-packages/nvidia/nvshmem"


def _hca(index, family="mlx5", vf=False, link_layer="Ethernet"):
    name = "mlx5_%d" % index if family == "mlx5" else "rocep%ds0" % (index * 2 + 4)
    return {"name": name, "family": family, "netdevs": ["enp%ds0" % index], "virtual_function": vf,
            "ports": [{"port": 1, "state": "ACTIVE", "link_layer": link_layer,
                       "roce_v2_ipv4_gid_index": 3 if link_layer == "Ethernet" else None}]}


BASE = {
    "hostname": "b200-0", "kernel": "6.8.0-1015-gcp",
    "gpus": [{"index": i, "compute_cap": "10.0"} for i in range(8)], "gpu_count": 8,
    "hcas": [_hca(i) for i in range(8)],
    "mellanox_pci": ["0000:%02x:00.0" % (i + 4) for i in range(8)],
    "dmabuf_header": "/usr/include/infiniband/mlx5_api.h", "dmabuf_data_direct": True, "mlx5dv_header": True,
    "ofed_version": "OFED-internal-25.10-1.7.1",
    "driver_params": {"driver_loaded": True, "registry_dwords_live": "PeerMappingOverride=1;",
                      "peermapping_live": True, "peermapping_configured": True,
                      "configured_in": "/etc/modprobe.d/nvidia-deepep.conf"},
    "nvidia_peermem_loaded": False,
    "cuda": {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "release": "12.9", "cccl": None},
    "libcuda": ["/usr/lib/x86_64-linux-gnu/libcuda.so"],
    "env_script": {"path": "/opt/deepep/env.sh", "exists": True, "vars": {
        "NVSHMEM_IB_GID_INDEX": "3", "NVSHMEM_HCA_PREFIX": "mlx5", "NVSHMEM_REMOTE_TRANSPORT": "ibgda",
        "NVSHMEM_IBGDA_NIC_HANDLER": "gpu",
        "DEEP_EP_DEVICE_TO_HCA_MAPPING": ",".join("%d:mlx5_%d:1" % (i, i) for i in range(8))}},
    "deepep_stamp": {"name": "deepep", "inputs": {"inputs": {
        "deepep_version": "v1", "torch": "2.9.1+cu129", "nvshmem": "3.5.19", "nvshmem_dir": NVSHMEM,
        "arch_list": ["10.0"]}}},
    "deepep_version": "v1", "deepep_nvshmem_35_fix": True,
    "deepep_tree": {"root": "/opt/deepep/deepep/current/src", "owner": 1000, "foreign_owned": []},
    "nvshmem": {"root": NVSHMEM, "version": "3.5.19", "ibgda": True, "source_build": True, "patched_ah_attr": False},
    "gdrcopy": {"root": "/opt/deepep/gdrcopy/current", "header": "/opt/deepep/gdrcopy/current/include/gdrapi.h"},
    "python": {"python": "/venv/bin/python", "error": None,
               "torch": {"version": "2.9.1+cu129", "cuda": "12.9", "nccl": "2.27.5"},
               "nvshmem_wheel": {"dir": WHEEL, "version": "3.3.20", "ibgda_transport": True}, "nccl_wheel": None,
               "deep_ep": {"importable": True, "undefined_symbol": False, "error": None,
                           "nvshmem_host_loaded": [NVSHMEM + "/lib/libnvshmem_host.so.3"]}},
    "want_gdrdrv": False, "nv_p2p_headers": [], "gdrdrv_dkms_installed": False,
    "netdevs": ["lo", "ens3"] + ["enp%ds0" % i for i in range(8)], "bonded_hcas": [],
    "memlock_soft": -1, "tarfile": {"python": "3.12.3", "data_filter": True, "fixes_2025": True},
    "build_user": "deepep-build", "logs": {},
    "prefix_reach": {"user": "deepep-build", "prefix": "/opt/deepep", "blocked": None},
    "container": False, "container_markers": [], "cap_ipc_lock": False,
    "cap_eff": "0000000000000000",
}


def evidence(change=None):
    ev = copy.deepcopy(BASE)
    if change:
        change(ev)
    return ev


def env(**values):
    def change(ev):
        for key, value in values.items():
            if value is None:
                ev["env_script"]["vars"].pop(key, None)
            else:
                ev["env_script"]["vars"][key] = value
    return change


def inputs(**values):
    return lambda ev: ev["deepep_stamp"]["inputs"]["inputs"].update(values)


def all_of(*changes):
    def change(ev):
        for one in changes:
            one(ev)
    return change


def rocep(ev):
    ev["hcas"] = [_hca(i, family="rocep") for i in range(8)]


def no_hcas(ev):
    ev["hcas"] = []
    ev["mellanox_pci"] = []


def wheel_build(ev):
    ev["deepep_stamp"]["inputs"]["inputs"]["nvshmem_dir"] = WHEEL
    ev["nvshmem"] = {"root": WHEEL, "version": "3.3.20", "ibgda": True, "source_build": False,
                     "patched_ah_attr": False}


# (check id, what breaks it; None when only a log line can) for every check.
TRIGGERS = {
    "KF01": rocep,
    "KF02": lambda ev: ev["gdrcopy"].update(header=None),
    "KF03": env(DEEP_EP_DEVICE_TO_HCA_MAPPING=None),
    "KF04": env(NVSHMEM_IBGDA_NIC_HANDLER="cpu"),
    "KF05": lambda ev: ev["python"]["deep_ep"].update(nvshmem_host_loaded=[WHEEL + "/lib/libnvshmem_host.so.3"]),
    "KF06": lambda ev: ev["deepep_tree"].update(
        foreign_owned=[{"path": "/opt/deepep/deepep/current/src/build/x", "uid": 0}]),
    "KF07": inputs(arch_list=["9.0"]),
    "KF08": lambda ev: ev["nvshmem"].update(ibgda=False),
    "KF09": lambda ev: ev["cuda"].update(nvcc=None, release=None),
    "KF10": lambda ev: ev.update(want_gdrdrv=True),
    "KF11": lambda ev: ev.update(mlx5dv_header=False, nvshmem_method="source",
                                 nvshmem={"root": None, "version": None, "ibgda": None, "source_build": False}),
    "KF12": lambda ev: ev.update(libcuda=[]),
    "KF13": lambda ev: ev.update(want_gdrdrv=True, logs={
        "/opt/deepep/gdrcopy/current/build.log": "gdrdrv.c:120: error: redefinition of 'vm_flags_set'"}),
    "KF14": lambda ev: ev.update(hcas=[]),
    "KF15": all_of(lambda ev: ev["nvshmem"].update(version="3.4.5"), inputs(nvshmem="3.4.5")),
    "KF16": lambda ev: ev["python"]["deep_ep"].update(nvshmem_host_loaded=[WHEEL + "/lib/libnvshmem_host.so.3"]),
    "KF17": env(NVSHMEM_IB_GID_INDEX="0"),
    "KF18": lambda ev: ev["python"]["torch"].update(version="2.10.0+cu129"),
    "KF19": lambda ev: ev.update(dmabuf_data_direct=False),
    "KF20": lambda ev: ev["driver_params"].update(registry_dwords_live="", peermapping_live=False),
    "KF21": lambda ev: ev["cuda"].update(release="13.0", cccl=None),
    "KF22": lambda ev: ev["driver_params"].update(peermapping_live=False),
    "KF23": lambda ev: ev["driver_params"].update(peermapping_live=False, peermapping_configured=False),
    "KF24": all_of(rocep, env(NVSHMEM_HCA_PREFIX=None)),
    "KF25": lambda ev: ev.update(deepep_nvshmem_35_fix=False),
    "KF26": lambda ev: ev.update(logs={"/opt/deepep/nvshmem/current/build.log": "ld: multiple definition of "
                                       "`nvshmemi_ibgda_device_state_d'; first defined here"}),
    "KF27": lambda ev: ev.update(ofed_version=None),
    "KF28": lambda ev: ev.update(container=True, cap_ipc_lock=False),
    "KF29": all_of(env(NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME="eth0")),
    "KF30": lambda ev: ev.update(logs={"/opt/deepep/reports/internode.log":
                                       "WARN: Fatal IPC Failure in exchange_heap_memory_handle"}),
    "KF31": all_of(lambda ev: ev.update(deepep_version="v2"),
                   lambda ev: ev["python"].update(nccl_wheel={"version": "2.28.9"})),
    "KF32": lambda ev: ev.update(gpu_count=4, gpus=BASE["gpus"][:4]),
    "KF33": lambda ev: ev.update(hcas=[_hca(i, vf=True) for i in range(8)]),
    "KF34": lambda ev: ev.update(deepep_version="v2", bonded_hcas=["enp0s0 in bond0"]),
    "KF35": lambda ev: ev.update(container=True, gdrdrv_dkms_installed=True),
    "KF36": all_of(no_hcas),
    "MEMLOCK": lambda ev: ev.update(memlock_soft=64 * 1024 * 1024),
    # Debian 12's Python without a build user: root would unpack unfiltered.
    "PYTAR": lambda ev: ev.update(build_user="", tarfile={"python": "3.11.2", "data_filter": False, "fixes_2025": False}),
    # A prefix under /root: the build user stops there.
    "REACH": lambda ev: ev.update(prefix_reach={
        "user": "deepep-build", "prefix": "/root/deepep", "blocked": "/root",
        "text": "deepep-build cannot reach /root/deepep: /root (mode 0700, owner root:root) does not let it search"}),
    "KF37": all_of(lambda ev: ev.update(deepep_version="v2"), lambda ev: ev["python"]["torch"].update(nccl_libs=[
        "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2", "/opt/nccl/lib/libnccl.so.2.30.7"])),
    "CXXRT": lambda ev: ev.update(deepep_cxx_runtime=[{"path": "deep_ep/_C.cpython-312-x86_64-linux-gnu.so",
                                                       "defines": ["std::locale::classic()"]}]),
    "V2CUDA": lambda ev: ev.update(deepep_version="v2", cuda=dict(BASE["cuda"], release="12.8")),
    "JITCACHE": lambda ev: ev.update(deepep_version="v2", jit_cache=dict(JIT, kernels=0, bytes=0)),
    # V2 on a node without RDMA NICs whose env script leaves NCCL's Gin backend on (2 x H100, docs/results).
    "GIN": all_of(lambda ev: ev.update(deepep_version="v2"), no_hcas),
    # A plain image (GCP's ubuntu-2204-lts, as the A4 VM blueprint boots before it installs nvidia-open-570).
    "DRIVER": lambda ev: ev["driver_params"].update(driver_loaded=False),
}
# DeepEP V2's warmed JIT cache as docs/results/site-v2-h100 left it (jit_cache_stats).
JIT = {"dir": "/opt/deepep/jit-cache", "exists": True, "kernels": 11, "corrupted": [], "bytes": 331776,
       "tmp_entries": 0, "mode": "0755", "gid": 0}


def status_of(check_id, ev):
    return doctor.run_check(doctor.BY_ID[check_id], ev)


def test_every_check_has_a_triggering_case():
    node_checks = set(c.id for c in doctor.CHECKS) - {"GPUS"}
    assert node_checks == set(TRIGGERS)
    assert set("KF%02d" % i for i in range(1, 38)) <= set(c.id for c in doctor.CHECKS)


@pytest.mark.parametrize("check_id", sorted(TRIGGERS))
def test_check_finds_the_problem(check_id):
    finding = status_of(check_id, evidence(TRIGGERS[check_id]))
    assert finding["status"] == "problem", finding
    assert finding["fix"] and finding["evidence"]
    assert finding["id"] == check_id and finding["title"] == doctor.BY_ID[check_id].title


@pytest.mark.parametrize("check_id", sorted(TRIGGERS))
def test_check_is_quiet_on_the_healthy_node(check_id):
    finding = status_of(check_id, evidence())
    assert finding["status"] != "problem", finding
    assert finding["fix"] == "" or finding["status"] == "unknown"


# Checks that say ok (not just "not a problem") on the healthy node.
HEALTHY_OK = ["KF01", "KF02", "KF03", "KF04", "KF05", "KF06", "KF07", "KF08", "KF09", "KF11", "KF12", "KF14", "KF17",
              "KF18", "KF19", "KF20", "KF22", "KF24", "KF25", "KF27", "KF32", "KF33", "KF36", "MEMLOCK", "PYTAR", "REACH",
              "DRIVER", "GPUS"]


@pytest.mark.parametrize("check_id", HEALTHY_OK)
def test_healthy_node_is_ok(check_id):
    assert status_of(check_id, evidence())["status"] == "ok"


def _v2(ev):
    ev.update(deepep_version="v2")


def test_v2_nccl_is_judged_by_the_library_loaded_and_one_runtime():
    v2 = _v2
    # The nccl layer's 2.30.7 in place of the wheel's files: the wheel's metadata still says 2.28.9.
    placed = all_of(v2, lambda ev: ev["python"]["torch"].update(
        nccl="2.30.7", nccl_libs=["/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"]),
        lambda ev: ev["python"].update(nccl_wheel={"version": "2.28.9"}))
    assert status_of("KF31", evidence(placed))["status"] == "ok"
    assert status_of("KF37", evidence(placed))["status"] == "ok"
    persisted = all_of(placed, lambda ev: ev.update(deepep_persisted_nccl_root="/opt/nccl/build"))
    finding = status_of("KF37", evidence(persisted))
    assert finding["status"] == "problem" and "persists EP_NCCL_ROOT_DIR=/opt/nccl/build" in finding["evidence"]
    logged = all_of(placed, lambda ev: ev.update(logs={"/opt/deepep/reports/elastic_ep.log": (
        "AssertionError: Duplicate NCCL runtime found in the current system: a and b")}))
    assert status_of("KF37", evidence(logged))["status"] == "problem"
    assert status_of("CXXRT", evidence(lambda ev: ev.update(deepep_cxx_runtime=[])))["status"] == "ok"


def test_kf31_names_a_node_nccl_torch_loads_first():
    gib = all_of(_v2, lambda ev: ev["python"].update(nccl_wheel={"version": "2.28.9", "dir": "/venv/nvidia/nccl"}),
                 lambda ev: ev["python"]["torch"].update(nccl="2.30.4", nccl_lib="/usr/local/gib/lib64/libnccl.so.2"))
    finding = status_of("KF31", evidence(gib))
    assert finding["status"] == "ok" and finding["evidence"] == (
        "NCCL 2.30.4 from /usr/local/gib/lib64/libnccl.so.2, the node's, before the interpreter's nvidia/nccl "
        "(LD_PRELOAD or LD_LIBRARY_PATH)")
    old = all_of(gib, lambda ev: ev["python"]["torch"].update(nccl="2.27.7"))
    assert status_of("KF31", evidence(old))["status"] == "problem"


def test_v2_without_the_legacy_kernels_is_judged_by_nccls_settings():
    def v2_script(**variables):
        def update(ev):
            ev.update(deepep_version="v2")
            ev["env_script"] = {"path": "/opt/deepep/env.sh", "exists": True, "vars": variables}
        return update
    nccl_only = v2_script(NCCL_IB_GID_INDEX="3", NCCL_IB_HCA="=mlx5_0:1", EP_NIC_NAME="mlx5_0")
    roce = status_of("KF17", evidence(nccl_only))
    assert roce["status"] == "ok" and roce["evidence"] == "NCCL_IB_GID_INDEX=3", roce
    wrong = status_of("KF17", evidence(v2_script(NCCL_IB_GID_INDEX="0")))
    assert wrong["status"] == "problem" and wrong["evidence"].startswith("NCCL_IB_GID_INDEX=0, RoCE v2 IPv4 GID")
    # With the legacy kernels' NVSHMEM settings, both variables are checked.
    both = status_of("KF17", evidence(v2_script(NCCL_IB_GID_INDEX="3", NVSHMEM_REMOTE_TRANSPORT="ibgda")))
    assert both["status"] == "problem" and both["evidence"].startswith("NVSHMEM_IB_GID_INDEX unset")
    # rocep* names matter to NVSHMEM only.
    rocep = all_of(nccl_only, lambda ev: ev.update(hcas=[_hca(i, family="rocep") for i in range(8)]))
    assert status_of("KF01", evidence(rocep))["status"] == "not_applicable"
    assert status_of("KF24", evidence(rocep))["status"] == "not_applicable"


def test_jit_cache_each_failure_names_its_evidence():
    def finding(**stats):
        return status_of("JITCACHE", evidence(lambda ev: ev.update(deepep_version="v2", jit_cache=dict(JIT, **stats))))
    warm = finding()
    assert warm["status"] == "ok" and warm["evidence"] == "/opt/deepep/jit-cache: 11 kernels, 324 KiB, mode 0755"
    assert "does not exist" in finding(exists=False, kernels=0)["evidence"]
    broken = finding(corrupted=["/opt/deepep/jit-cache/cache/kernel.combine.9a68"])
    assert broken["status"] == "problem" and "kernel.combine.9a68" in broken["evidence"]
    unnamed = status_of("JITCACHE", evidence(lambda ev: ev.update(deepep_version="v2", jit_cache=None)))
    assert unnamed["status"] == "problem" and "names no EP_JIT_CACHE_DIR" in unnamed["evidence"]
    assert status_of("JITCACHE", evidence(lambda ev: ev.update(jit_cache=None)))["status"] == "not_applicable"
    logged = status_of("JITCACHE", evidence(lambda ev: ev.update(deepep_version="v2", jit_cache=JIT, logs={
        "/opt/deepep/reports/elastic_ep.log": "Corrupted JIT cache directory (missing kernel.cu or kernel.cubin): x"})))
    assert logged["status"] == "problem"


def test_v2_cuda_from_the_toolkit_or_the_build_log():
    assert status_of("V2CUDA", evidence(_v2))["status"] == "ok"  # 12.9
    logged = status_of("V2CUDA", evidence(all_of(_v2, lambda ev: ev.update(logs={
        "/opt/deepep/deepep/builds/x/build.log": "csrc/kernels/elastic/api.cuh(41): error: identifier "
                                                 "\"__cvta_generic_to_shared\" is undefined"}))))
    assert logged["status"] == "problem"


def test_kf18_says_when_a_stopped_pip_is_why_torch_does_not_import():
    ev = evidence()
    ev["python"]["torch"].update(version=None)
    assert status_of("KF18", ev)["evidence"] == "torch not importable by %s" % ev["python"]["python"]
    ev["python"]["nccl_wheel"] = {"package": "nvidia-nccl-cu13", "version": None, "upgraded_from": "2.28.9",
                                  "half_installed": True}
    finding = status_of("KF18", ev)
    assert (finding["status"], finding["evidence"]) == (
        "unknown", "torch not importable by %s: its NCCL wheel nvidia-nccl-cu13 is half-installed (a pip changing it "
                   "was stopped before it finished); the nccl layer installs it again (run playbooks/deepep.yml)"
        % ev["python"]["python"])


def test_kf36_is_the_h200_without_nics_case():
    # The GPU machine of this project: no HCAs, and an env script exporting IBGDA anyway.
    finding = status_of("KF36", evidence(no_hcas))
    assert "exports NVSHMEM_REMOTE_TRANSPORT=ibgda, no HCA here" in finding["evidence"]
    assert status_of("KF36", evidence(all_of(no_hcas, env(NVSHMEM_REMOTE_TRANSPORT=None))))["status"] == "ok"


def test_kf20_names_the_state():
    configured = status_of("KF20", evidence(lambda ev: ev["driver_params"].update(
        registry_dwords_live="", peermapping_live=False)))
    assert 'RegistryDwords: ""; configured in /etc/modprobe.d/nvidia-deepep.conf, not live' in configured["evidence"]
    assert configured["fix"].startswith("reboot")
    absent = status_of("KF20", evidence(lambda ev: ev["driver_params"].update(
        registry_dwords_live="", peermapping_live=False, peermapping_configured=False)))
    assert "not configured" in absent["evidence"]
    not_required = status_of("KF20", evidence(all_of(no_hcas, lambda ev: ev["driver_params"].update(
        registry_dwords_live="", peermapping_live=False))))
    assert not_required["status"] == "not_applicable" and "not required" in not_required["evidence"]


def test_no_gpu_machine_reports_what_does_not_apply():
    def bare(ev):
        no_hcas(ev)
        ev.update(gpus=[], gpu_count=0, libcuda=[],
                  env_script={"path": "/opt/deepep/env.sh", "exists": False, "vars": {}},
                  deepep_stamp=None, deepep_tree={"root": None}, python=None, deepep_version=None,
                  gdrcopy={"root": None, "header": None},
                  nvshmem={"root": None, "version": None, "ibgda": None, "source_build": False},
                  driver_params={"driver_loaded": False, "registry_dwords_live": "", "peermapping_live": False,
                                 "peermapping_configured": False, "configured_in": None})
        ev["cuda"].update(nvcc=None, release=None)
    findings = doctor.diagnose(evidence(bare))
    statuses = dict((f["id"], f["status"]) for f in findings)
    assert "problem" not in statuses.values(), [f for f in findings if f["status"] == "problem"]
    assert statuses["GPUS"] == "not_applicable" and statuses["KF09"] == "not_applicable"
    assert statuses["KF20"] == "not_applicable"


def test_log_only_checks_are_unknown_without_logs_and_ok_with_clean_logs():
    assert status_of("KF26", evidence())["status"] == "unknown"
    clean = status_of("KF26", evidence(lambda ev: ev.update(logs={"/x/build.log": "[100%] Built target nvshmem"})))
    assert clean["status"] == "ok" and clean["evidence"] == "no match in 1 log(s)"


def test_a_log_line_is_the_evidence():
    finding = status_of("KF08", evidence(lambda ev: ev.update(logs={
        "/opt/deepep/reports/internode.log": "ok\nDeepEP error: timeout (dispatch CPU)\n"})))
    assert finding["status"] == "problem"
    assert finding["evidence"] == "/opt/deepep/reports/internode.log: DeepEP error: timeout (dispatch CPU)"


def test_kf03_mapping_onto_one_nic():
    one = env(DEEP_EP_DEVICE_TO_HCA_MAPPING=",".join("%d:mlx5_0:1" % i for i in range(8)))
    assert status_of("KF03", evidence(one))["status"] == "problem"
    assert status_of("KF03", evidence(env(DEEP_EP_DEVICE_TO_HCA_MAPPING=None, NVSHMEM_HCA_LIST="mlx5_0:1,mlx5_1:1"))
                     )["status"] == "ok"


def test_kf03_mapping_written_before_the_hcas_were_renamed():
    # The env script kept the rocep* names discovery saw before DOCA-OFED's reboot; the node has mlx5_* now.
    stale = env(DEEP_EP_DEVICE_TO_HCA_MAPPING=",".join("%d:rocep%ds0:1" % (i, i) for i in range(8)))
    finding = status_of("KF03", evidence(stale))
    assert finding["status"] == "problem"
    assert finding["evidence"].startswith("the mapping names rocep0s0,rocep1s0,") and "which this node does not" \
        " have (it has mlx5_0," in finding["evidence"]


def test_kf05_wheel_build_needs_no_preload():
    finding = status_of("KF05", evidence(all_of(wheel_build, lambda ev: ev["python"]["deep_ep"].update(
        nvshmem_host_loaded=[WHEEL + "/lib/libnvshmem_host.so.3"]))))
    assert finding["status"] == "not_applicable" and "no LD_PRELOAD needed" in finding["evidence"]


def test_kf15_patched_source_build_is_ok():
    patched = all_of(TRIGGERS["KF15"], lambda ev: ev["nvshmem"].update(patched_ah_attr=True))
    assert status_of("KF15", evidence(patched))["status"] == "ok"


def test_kf24_prefix_that_matches_no_hca():
    finding = status_of("KF24", evidence(all_of(rocep, env(NVSHMEM_HCA_PREFIX="mlx5"))))
    assert finding["status"] == "problem" and "matches none of" in finding["evidence"]


def test_fleet_duplicate_hostnames_and_gpu_counts():
    nodes = [{"host": "a", "hostname": "vm", "gpu_count": 8, "hca_count": 8},
             {"host": "b", "hostname": "vm", "gpu_count": 8, "hca_count": 8},
             {"host": "c", "hostname": "c", "gpu_count": 4, "hca_count": 4}]
    fleet = doctor.fleet_findings(nodes)
    assert fleet["a"][0]["status"] == "problem" and "also b's" in fleet["a"][0]["evidence"]
    assert fleet["c"][0]["status"] == "ok"
    assert all(fleet[h][1]["status"] == "problem" for h in "abc")
    fine = doctor.fleet_findings(nodes[:1] + nodes[2:3])
    assert fine["a"][1]["status"] == "problem"  # 8 vs 4 GPUs
    single = doctor.fleet_findings(nodes[:1])
    assert [f["status"] for f in single["a"]] == ["not_applicable", "not_applicable"]


def test_merge_keeps_a_problem_the_logs_showed():
    node = doctor.diagnose(evidence(TRIGGERS["KF30"]), ["KF30", "KF01"])
    fleet = doctor.fleet_findings([{"host": "a", "hostname": "a", "gpu_count": 8, "hca_count": 8},
                                   {"host": "b", "hostname": "b", "gpu_count": 8, "hca_count": 8}])["a"]
    merged = doctor.merge(node, fleet)
    assert [f["id"] for f in merged] == ["KF01", "KF30", "GPUCOUNT"]
    assert merged[1]["status"] == "problem"
    healthy = doctor.merge(doctor.diagnose(evidence(), ["KF30"]), fleet)
    assert healthy[0]["status"] == "ok" and "unique among 2 nodes" in healthy[0]["evidence"]


def test_unknown_check_id_is_refused():
    with pytest.raises(ValueError, match="unknown id.*KF99"):
        doctor.diagnose(evidence(), ["KF99"])


def test_table_and_summary():
    findings = doctor.diagnose(evidence(TRIGGERS["KF04"]), ["KF04", "KF33"])
    lines = doctor.table(findings, width=60)
    assert lines[0].split() == ["ID", "STATUS", "EVIDENCE", "FIX"]
    assert lines[1].startswith("KF04      problem        env script: NVSHMEM_IBGDA_NIC_HANDLER=cpu")
    assert lines[1].endswith("NVSHMEM_IBGDA_NIC_HANDLER=gpu")
    assert doctor.summary(findings) == {"ok": 1, "problem": 1, "not_applicable": 0, "unknown": 0}


def test_the_docs_table_is_the_checks():
    readme = os.path.join(os.path.dirname(os.path.abspath(doctor.__file__)), "..", "..", "..", "docs", "doctor.md")
    with open(readme) as handle:
        row = r"^\| (<a id=\"[a-z0-9]+\"></a>)?(KF\d\d|CXXRT|V2CUDA|JITCACHE|GIN|MEMLOCK|PYTAR|REACH|DRIVER|GPUS) \|"
        rows = [line.rstrip("\n") for line in handle if re.match(row, line)]
    assert rows == doctor.coverage()


def test_the_docs_counts():
    known = [c for c in doctor.CHECKS if c.id.startswith("KF")]
    state = [c for c in known if c.detect == doctor.STATE]
    assert (len(known), len(state), sum(1 for c in state if c.log_patterns)) == (37, 34, 24)
    assert sorted(c.id for c in known if c.detect == doctor.LOG) == ["KF13", "KF26"]
    assert [c.id for c in known if c.detect == doctor.FLEET] == ["KF30"]


def test_kf11_only_where_a_source_build_needs_the_headers():
    assert status_of("KF11", evidence(TRIGGERS["KF08"]))["status"] == "problem"  # built, IBGDA off
    wheel = evidence(all_of(TRIGGERS["KF11"], lambda ev: ev.update(nvshmem_method="wheel")))
    assert status_of("KF11", wheel)["status"] == "not_applicable"


def test_no_env_script_yet_is_not_a_problem():
    def missing(ev):
        ev.update(env_script={"path": "/opt/deepep/env.sh", "exists": False, "vars": {}})
    for check_id in ("KF03", "KF04", "KF17", "KF36"):
        assert status_of(check_id, evidence(missing))["status"] == "not_applicable", check_id


def test_nvshmem_not_installed_yet():
    def fresh(ev):
        ev.update(deepep_stamp=None, nvshmem={"root": None, "version": None, "ibgda": None})
    assert status_of("KF15", evidence(fresh))["status"] == "not_applicable"
    finding = status_of("KF24", evidence(all_of(fresh, rocep, env(NVSHMEM_HCA_PREFIX=None))))
    assert finding["status"] == "not_applicable" and "no NVSHMEM installed here yet" in finding["evidence"]


def test_pytar_unpacks_as_the_build_user_without_a_filter_and_names_the_fixed_pythons():
    ev = evidence(lambda e: e.update(tarfile={"python": "3.11.2", "data_filter": False, "fixes_2025": False}))
    finding = status_of("PYTAR", ev)
    assert finding["status"] == "ok" and "unpacked as deepep-build" in finding["evidence"]
    ev = evidence(lambda e: e.update(build_user="", tarfile={"python": "3.11.7", "data_filter": True, "fixes_2025": False}))
    finding = status_of("PYTAR", ev)
    assert finding["status"] == "ok" and "without its June 2025 fixes" in finding["evidence"]
    assert "3.9.23, 3.10.18, 3.11.13, 3.12.11, 3.13.4 have them" in finding["evidence"]
    finding = status_of("PYTAR", evidence(TRIGGERS["PYTAR"]))
    assert "3.9.23, 3.10.18, 3.11.13, 3.12.11, 3.13.4" in finding["fix"]


# ElasticBuffer's assertion as DeepEP main dd758ca printed it in tests/elastic/test_ep.py on 2 x H100 without RDMA
# NICs (docs/results/site-v2-h100x2).
GIN_LINE = ('RuntimeError: Assertion exception (/opt/deepep/deepep/builds/c418b9d514853c05/src/csrc/kernels/backend/'
            'nccl.cu:87): (allow_hybrid_mode ? props.railedGinType : props.ginType) != NCCL_GIN_TYPE_NONE and "NCCL '
            'GIN is unavailable. This is usually due to a network configuration issue, " "such as `allow_hybrid_mode=0` '
            '(disable direct RDMA kernels) in multi-plane network."')


def test_gin_off_without_rdma_and_the_assertion_line_named_by_gin_not_by_the_nccl_version():
    v2_no_nics = all_of(_v2, no_hcas, lambda ev: ev["python"]["torch"].update(nccl="2.30.7"))
    finding = status_of("GIN", evidence(v2_no_nics))
    assert finding["status"] == "problem" and "EP_DISABLE_GIN is unset" in finding["evidence"]
    assert "EP_DISABLE_GIN=1" in finding["fix"]
    off = status_of("GIN", evidence(all_of(v2_no_nics, env(EP_DISABLE_GIN="1"))))
    assert off["status"] == "ok" and off["evidence"].startswith("no RDMA HCA: EP_DISABLE_GIN=1")
    logged = all_of(v2_no_nics, lambda ev: ev.update(logs={"/opt/deepep/reports/elastic_ep.log": GIN_LINE}))
    finding = status_of("GIN", evidence(all_of(logged, env(EP_DISABLE_GIN="1"))))
    assert finding["status"] == "problem" and finding["evidence"].startswith("/opt/deepep/reports/elastic_ep.log: ")
    # NCCL 2.30.7 is new enough: KF31 (the version) stays quiet on the same log.
    assert status_of("KF31", evidence(logged))["status"] == "ok"
    assert status_of("GIN", evidence(lambda ev: ev.update(deepep_version="v1")))["status"] == "not_applicable"


def test_driver_branch_by_the_gpus_and_the_cuda_toolkit():
    # BASE: 8 x B200 (10.0) with CUDA 12.9. R570 is their branch; R565 is not.
    assert status_of("DRIVER", evidence(lambda ev: ev.update(driver_version="570.133.20")))["status"] == "ok"
    old = status_of("DRIVER", evidence(lambda ev: ev.update(driver_version="565.57.01")))
    assert old["status"] == "problem" and old["evidence"] == "driver 565.57.01, below R570 which compute capability 10.x needs"
    assert "nvidia-open-570" in old["fix"]
    # CUDA 13 needs R580, whatever the GPUs.
    cuda13 = status_of("DRIVER", evidence(lambda ev: ev.update(driver_version="575.51.03",
                                                               cuda=dict(BASE["cuda"], release="13.0"))))
    assert cuda13["status"] == "problem" and "below R580 which CUDA 13.0 needs" in cuda13["evidence"]
    # Before the cuda layer installs 13.0: the release it will install counts too.
    planned = status_of("DRIVER", evidence(lambda ev: ev.update(driver_version="575.51.03", cuda_planned="13.0")))
    assert planned["status"] == "problem" and "below R580 which CUDA 13.0 needs" in planned["evidence"]
    hopper = status_of("DRIVER", evidence(lambda ev: ev.update(
        driver_version="535.230.02", gpus=[{"index": 0, "compute_cap": "9.0"}], gpu_count=1)))
    assert hopper["status"] == "ok" and hopper["evidence"] == "driver 535.230.02"
    none = status_of("DRIVER", evidence(TRIGGERS["DRIVER"]))
    assert none["evidence"].startswith("8 NVIDIA GPU(s) and no NVIDIA driver loaded")
    assert status_of("DRIVER", evidence(lambda ev: ev.update(gpu_count=0, gpus=[])))["status"] == "not_applicable"


def test_driver_layer_planned_lets_preflight_through_and_a_pending_reboot_is_named():
    missing = TRIGGERS["DRIVER"]
    # nvidia_driver_install: preflight (the only mode that stops a node) sees the plan, not a problem.
    planned = status_of("DRIVER", evidence(all_of(missing, lambda ev: ev.update(driver_install="580",
                                                                                preflight_only=True))))
    assert planned["status"] == "ok"
    assert planned["evidence"] == ("no NVIDIA driver loaded: the nvidia_driver layer installs nvidia-open-580 "
                                   "nvidia-utils-580 (held) and reboots (nvidia_driver_install)")
    # A branch below what the B200s need stops the node before any change, naming the variable.
    low = status_of("DRIVER", evidence(all_of(missing, lambda ev: ev.update(driver_install="565", preflight_only=True))))
    assert low["status"] == "problem" and "nvidia_driver_branch 565 is below R570" in low["evidence"]
    assert low["fix"] == "set nvidia_driver_branch to 570 or later"
    # Installed by an earlier run whose reboot did not happen (deepep_reboot=never): preflight lets the layer
    # reboot it; the full doctor says what is pending.
    installed = all_of(missing, lambda ev: ev.update(driver_packages=["nvidia-open-580"]))

    def planned(ev):
        ev.update(driver_install="580", preflight_only=True)
    again = status_of("DRIVER", evidence(all_of(installed, planned)))
    assert again["status"] == "ok" and "the nvidia_driver layer finds nvidia-open-580 (held)" in again["evidence"]
    pending = status_of("DRIVER", evidence(all_of(installed, lambda ev: ev.update(driver_install="580"))))
    assert pending["status"] == "problem"
    assert pending["evidence"] == "nvidia-open-580 installed and no NVIDIA driver loaded: it loads at the next boot"
    assert pending["fix"].startswith("reboot the node")
    # Without the layer, the fix names it.
    assert "nvidia_driver_install: true" in status_of("DRIVER", evidence(missing))["fix"]


def test_reach_names_the_directory_and_the_fix_or_stands_aside_without_a_build_user():
    finding = status_of("REACH", evidence(TRIGGERS["REACH"]))
    assert finding["evidence"] == ("deepep-build cannot reach /root/deepep: /root (mode 0700, owner root:root) does "
                                   "not let it search")
    assert "chmod o+x /root" in finding["fix"] and "deepep_build_user: ''" in finding["fix"]
    assert status_of("REACH", evidence(lambda ev: ev.update(prefix_reach=None)))["status"] == "not_applicable"
    unasked = status_of("REACH", evidence(lambda ev: ev.update(prefix_reach={
        "user": "deepep-build", "prefix": "/opt/deepep", "blocked": None, "error": "could not ask as uid 999 ..."})))
    assert (unasked["status"], unasked["evidence"]) == ("unknown", "could not ask as uid 999 ..."), unasked
