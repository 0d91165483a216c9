# -*- coding: utf-8 -*-
"""Run the real playbooks with ansible-playbook against this host, on fixture trees."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.cuda_home import make_cuda_home
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import make_python_site
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import write_nvidia_module_version, write_nvidia_params

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def playbook(name, tmp_path, *extra, machine=None, registry=""):
    sysfs, proc, modprobe = tmp_path / "sys", tmp_path / "proc", tmp_path / "modprobe.d"
    if machine:
        machines.MACHINES[machine](sysfs)
        write_nvidia_params(proc, registry_dwords=registry)
    modprobe.mkdir(exist_ok=True)  # a second run on the same fixture node passes no machine
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    cmd = [PLAYBOOK_BIN, "-i", os.path.join(REPO, "inventories", "local"), os.path.join(REPO, "playbooks", name),
           "-e", "preflight_sysfs_root=%s preflight_procfs_root=%s preflight_modprobe_dir=%s deepep_cluster_report_dir=%s"
           " deepep_probe_cache_dir=%s" % (sysfs, proc, modprobe, tmp_path / "report", tmp_path / "probes"),
           # The fixture interpreters run this test environment's Python, under /root where no other user may go:
           # probed and tested as root here (unit tests, molecule/site and the GPU runs do it unprivileged).
           "-e", json.dumps({"deepep_test_user": "", "doctor_probe_user": ""})] + list(extra)
    proc_result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc_result.returncode, proc_result.stdout + proc_result.stderr


def recap(output):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def test_site_on_a_node_without_gpus_stops_in_preflight_and_changes_nothing(tmp_path):
    rc, out = playbook("site.yml", tmp_path, machine="no_gpus")
    assert rc == 2, out
    assert "No NVIDIA GPU under %s/bus/pci/devices" % (tmp_path / "sys") in out
    assert "nvidia_peermapping=blocked" in out and "deepep=blocked" in out
    assert recap(out)["changed"] == 0 and recap(out)["failed"] == 1
    # The report printed before stopping names what was found.
    assert "HCAs: 2 (prefix mlx5" in out and "mlx5_0:1" in out


def test_site_on_a_gpu_node_passes_preflight(tmp_path):
    rc, out = playbook("site.yml", tmp_path, "--tags", "preflight", machine="gcp_b200")
    assert rc == 0, out
    assert recap(out) == {"ok": recap(out)["ok"], "changed": 0, "unreachable": 0, "failed": 0}


@pytest.mark.parametrize("check", [False, True])
def test_facts_report_for_gcp_b200(tmp_path, check):
    out_dir = tmp_path / "report"
    extra = ["-e", "deepep_facts_dir=%s" % out_dir] + (["--check"] if check else [])
    rc, out = playbook("facts.yml", tmp_path, *extra, machine="gcp_b200")
    assert rc == 0, out
    if check:
        # Nothing is written in check mode, not even on the controller.
        assert not out_dir.exists()
        assert "Mapping: 0:rocep4s0:1,1:rocep6s0:1" in out
        return
    report = (out_dir / "localhost.txt").read_text()
    data = json.loads((out_dir / "localhost.json").read_text())
    expected = machines.gcp_b200(tmp_path / "again")
    assert data["node"]["topology"]["deepep_device_to_hca_mapping"] == expected
    assert "Mapping: %s" % expected in report
    assert "GPUs: 8 (arch 10.0" in report
    layers = {entry["layer"]: entry["status"] for entry in data["layers"]}
    assert layers == {"doca_ofed": "reboot", "cuda": layers["cuda"], "nvidia_peermapping": "reboot",
                      "gdrcopy": "change", "nvshmem_ibgda": "change", "nccl": "skip", "deepep": "change"}
    assert "rocep* names (KF01)" in report


@pytest.mark.parametrize("pin, status", [("13.0", "ok"), ("12.9", "change")])
def test_facts_judge_the_toolkit_against_the_pin(tmp_path, pin, status):
    # CUDA 13.0 on the node (a stand-in nvcc): ok only when cuda_version pins 13.0.
    cuda = make_cuda_home(tmp_path / "cuda")
    out_dir = tmp_path / "report"
    rc, out = playbook("facts.yml", tmp_path, "-e", "deepep_facts_dir=%s cuda_version=%s preflight_cuda_home=%s"
                       % (out_dir, pin, cuda), machine="gcp_b200")
    assert rc == 0, out
    layer = [e for e in json.loads((out_dir / "localhost.json").read_text())["layers"] if e["layer"] == "cuda"][0]
    assert layer["status"] == status and layer["found"] == "CUDA 13.0 at %s" % cuda
    if status == "change":
        assert layer["action"].startswith("install CUDA 12.9 (the pin, cuda_version)")


@pytest.mark.parametrize("deepep_version, status, action", [
    ("v1", "ok", "nothing: DeepEP V1 uses torch's own NCCL"),
    ("v2", "change", "pip-install nvidia-nccl-cu13==2.30.7 where torch loads NCCL (the version before kept for "
                     "DeepEP V1)")])
def test_facts_with_an_interpreter_report_its_torch_and_the_nccl_layer(tmp_path, deepep_version, status, action):
    # deepep_python given: facts.yml reads it with the node, read-only, and plans the nccl layer on it as site.yml
    # does (torch 2.11's NCCL 2.28.9 wheel here, a fixture interpreter).
    python = make_python_site(tmp_path / "venv", nccl_runtime=(2, 28, 9))
    out_dir = tmp_path / "report"
    rc, out = playbook("facts.yml", tmp_path, "-e", json.dumps({
        "deepep_facts_dir": str(out_dir), "deepep_python": python, "deepep_version": deepep_version}),
        machine="h200_no_nics")
    assert rc == 0, out
    layers = {e["layer"]: e for e in json.loads((out_dir / "localhost.json").read_text())["layers"]}
    assert layers["nccl"]["status"] == status and layers["nccl"]["action"] == action, layers["nccl"]
    assert layers["nccl"]["found"] == "torch loads NCCL 2.28.9; nvidia-nccl-cu13 2.28.9"
    assert [e["layer"] for e in json.loads((out_dir / "localhost.json").read_text())["layers"]][-2:] == [
        "nccl", "deepep"]
    # Without it, as before: no interpreter read, and the nccl line says so.
    rc, out = playbook("facts.yml", tmp_path, "-e", "deepep_facts_dir=%s" % out_dir)
    assert rc == 0, out
    layers = {e["layer"]: e for e in json.loads((out_dir / "localhost.json").read_text())["layers"]}
    assert layers["nccl"]["found"] == "interpreter not read" and layers["nccl"]["status"] == "skip"


def test_facts_on_a_node_without_nics_reports_peermapping_not_required(tmp_path):
    out_dir = tmp_path / "report"
    rc, out = playbook("facts.yml", tmp_path, "-e", "deepep_facts_dir=%s" % out_dir, machine="h200_no_nics")
    assert rc == 0, out
    layers = {e["layer"]: e for e in json.loads((out_dir / "localhost.json").read_text())["layers"]}
    assert layers["nvidia_peermapping"]["status"] == "skip"
    assert layers["doca_ofed"]["status"] == "skip"
    assert "KF36" in layers["nvshmem_ibgda"]["found"]


def test_site_preflight_stops_on_what_no_layer_fixes(tmp_path):
    # gdrdrv asked for, but no NVIDIA kernel source on this host: the doctor's KF10, before any change.
    rc, out = playbook("site.yml", tmp_path, "-e", "gdrcopy_kernel_module=true", machine="gcp_b200")
    assert rc == 2, out
    assert "localhost: KF10 | no nv-p2p.h under /usr/src/nvidia-* | install nvidia-kernel-source-<ver>" in out
    assert "Nothing was changed." in out
    assert recap(out)["changed"] == 0 and recap(out)["failed"] == 1


def test_site_on_gpus_without_a_driver_stops_in_preflight_and_changes_nothing(tmp_path):
    # A plain image (GCP's ubuntu-2204-lts, which the A4 VM blueprint boots before it installs nvidia-open-570):
    # the GPUs are on the bus, no NVIDIA driver is loaded. Without this stop every layer would run for about an
    # hour before DeepEP's tests failed.
    machines.MACHINES["gcp_b200"](tmp_path / "sys")
    rc, out = playbook("site.yml", tmp_path)
    assert rc == 2, out
    assert "localhost: DRIVER | 8 NVIDIA GPU(s) and no NVIDIA driver loaded" in out, out
    assert "nvidia-open-<branch> from NVIDIA's CUDA repository" in out and "Nothing was changed." in out
    assert recap(out)["changed"] == 0 and recap(out)["failed"] == 1
    # Every host stopped in preflight: the cluster report is still written, the host dropped out with why.
    with open(str(tmp_path / "report" / "report.json")) as handle:
        dropped = json.load(handle)["hosts"]["localhost"]["dropped"]
    assert dropped["playbook"] == "site.yml (preflight)"
    assert dropped["why"].startswith("localhost: DRIVER | 8 NVIDIA GPU(s) and no NVIDIA driver loaded"), dropped
    page = (tmp_path / "report" / "report.html").read_text()
    assert 'data-id="DROPPED" data-nodes="localhost"' in page and "8 NVIDIA GPU(s) and no NVIDIA driver" in page


@pytest.mark.parametrize("branch, cuda, rc, line", [
    ("580", "13.0", 0, r"DRIVER +ok +no NVIDIA driver loaded: the nvidia_driver layer installs"),
    # A branch below what the CUDA pin needs (13.0: R580) is refused before any change (the GPUs' own need, R570
    # for B200, is the unit tests': a toolkit on the machine running this test would count too).
    ("575", "13.0", 2, re.escape("localhost: DRIVER | no NVIDIA driver loaded, and nvidia_driver_branch 575 is below "
                                 "R580 which CUDA 13.0 needs | set nvidia_driver_branch to 580 or later")),
])
def test_site_with_the_driver_layer_lets_a_plain_image_through_preflight(tmp_path, branch, cuda, rc, line):
    machines.MACHINES["gcp_b200"](tmp_path / "sys")
    result, out = playbook("site.yml", tmp_path, "--tags", "preflight", "-e",
                           "nvidia_driver_install=true nvidia_driver_branch=%s cuda_version=%s" % (branch, cuda))
    assert result == rc, out
    assert re.search(line, out), out
    assert recap(out)["changed"] == 0


VERIFY_PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: moe_infra.deepep.nvidia_driver
        tasks_from: verify
    - ansible.builtin.debug:
        msg: "reasons {{ deepep_reboot_reasons | to_json }}"
"""


@pytest.mark.parametrize("loaded, message", [
    ("580.105.08", None),
    ("570.195.03", "nvidia_driver: after the reboot driver 570.195.03 is loaded, not branch 580 or later."),
    (None, "nvidia_driver: after the reboot no NVIDIA driver is loaded (no {proc}/driver/nvidia/params). Look at "
           "`dkms status`"),
])
def test_driver_verified_after_the_reboot(tmp_path, loaded, message):
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    machines.MACHINES["gcp_b200"](sysfs)
    if loaded:
        write_nvidia_params(proc)
        write_nvidia_module_version(str(sysfs), loaded)
    play = tmp_path / "verify.yml"
    play.write_text(VERIFY_PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run([PLAYBOOK_BIN, "-i", os.path.join(REPO, "inventories", "local"), str(play), "-e",
                             "nvidia_driver_sysfs_root=%s nvidia_driver_procfs_root=%s nvidia_driver_branch=580"
                             % (sysfs, proc)], env=env, capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout + result.stderr
    if message is None:
        assert result.returncode == 0, out
        assert 'reasons {\\"nvidia_driver\\": \\"\\"}' in out or 'reasons {"nvidia_driver": ""}' in out, out
    else:
        assert result.returncode == 2, out
        assert message.format(proc=proc) in out, out


def test_doctor_on_a_node_without_gpus(tmp_path):
    out_dir = tmp_path / "doctor"
    rc, out = playbook("doctor.yml", tmp_path, "-e", "doctor_report_dir=%s" % out_dir,
                       "-e", "doctor_sysfs_root=%s doctor_procfs_root=%s doctor_modprobe_dir=%s doctor_deepep_prefix=%s"
                       % (tmp_path / "sys", tmp_path / "proc", tmp_path / "modprobe.d", tmp_path / "opt"),
                       machine="no_gpus")
    assert rc == 0, out
    report = json.loads((out_dir / "localhost-doctor.json").read_text())
    status = dict((f["id"], f["status"]) for f in report["findings"])
    assert status["GPUS"] == "not_applicable"
    assert status["KF14"] == "ok"  # two IB HCAs
    assert status["KF30"] == "not_applicable"  # one node in the inventory
    assert report["node"] == {"hostname": report["evidence"]["hostname"], "gpu_count": 0, "hca_count": 2}
    text = (out_dir / "localhost-doctor.txt").read_text().splitlines()
    assert text[0].split() == ["ID", "STATUS", "EVIDENCE", "FIX"] and len(text) == len(report["findings"]) + 1
    assert recap(out)["failed"] == 0


@pytest.mark.parametrize("extra, message", [
    ("deepep_version=v3", "deepep_version: 'v3' is not accepted; accepted: v1 | v2"),
    ("nvshmem_ibgda_method=pip", "nvshmem_ibgda_method: 'pip' is not accepted; accepted: wheel | source"),
    ("deepep_git_ref=main", "deepep_git_ref: 'main' is not accepted (neither V1 nor V2-shaped"),
    ('{"deepep_arch_list": ["sm90"]}', "deepep_arch_list: 'sm90' is not accepted"),
    ("deepep_serial=0", "deepep_serial: '0' is not accepted; accepted: a batch size >= 1"),
    ("deepep_offline=true deepep_cache_dir=/nonexistent/deepep-cache",
     "deepep_cache_dir: '/nonexistent/deepep-cache' is not accepted (it does not exist on the controller)"),
    ("deepep_src=/nonexistent/DeepEP.tar.gz",
     "deepep_src: '/nonexistent/DeepEP.tar.gz' is not accepted (it does not exist on the controller)"),
])
def test_site_refuses_bad_variables_before_touching_a_host(tmp_path, extra, message):
    rc, out = playbook("site.yml", tmp_path, "-e", extra, machine="gcp_b200")
    assert rc == 2, out
    assert message in out and "Nothing was changed." in out
    # Stopped in the validation play: discovery never ran.
    assert "Discover GPUs, RDMA HCAs" not in out
    assert recap(out)["changed"] == 0 and recap(out)["failed"] == 1


@pytest.mark.parametrize("var", ["deepep_git_url", "gdrcopy_git_url", "nvshmem_ibgda_git_url"])
@pytest.mark.parametrize("check", [False, True])
def test_a_git_url_that_git_would_read_as_an_option_is_refused_before_anything_runs(tmp_path, var, check):
    pwned = tmp_path / "pwned"
    value = "--upload-pack=touch %s;" % pwned
    rc, out = playbook("site.yml", tmp_path, "-e", json.dumps({var: value, "nvshmem_ibgda_method": "source"}),
                       *(["--check"] if check else []), machine="gcp_b200")
    assert "%s: %r is not accepted (it would be read as an option)" % (var, value) in out, out
    assert not pwned.exists()
    assert rc == 2 and "Nothing was changed." in out, out
    assert "Discover GPUs, RDMA HCAs" not in out  # stopped in the validation play
    assert recap(out)["changed"] == 0 and recap(out)["failed"] == 1


def test_hand_written_mapping_replaces_the_discovered_one(tmp_path):
    out_dir = tmp_path / "report"
    rc, out = playbook("facts.yml", tmp_path, "-e", "deepep_facts_dir=%s" % out_dir,
                       "-e", "deepep_hca_mapping=0:rocep6s0:1,1:rocep4s0:1", machine="gcp_b200")
    assert rc == 0, out
    data = json.loads((out_dir / "localhost.json").read_text())
    assert data["node"]["topology"]["deepep_device_to_hca_mapping"] == "0:rocep6s0:1,1:rocep4s0:1"
    assert data["node"]["topology"]["mapping_source"] == "deepep_hca_mapping"
    # The file holds no time of reading: the same node gives the same file, and a rerun changes nothing (molecule
    # discovery's idempotence check failed when it held read_at).
    assert "read_at" not in data["node"] and data["node"]["read_from"]["hca_mapping"] == "0:rocep6s0:1,1:rocep4s0:1"
    rc, out = playbook("facts.yml", tmp_path, "-e", "deepep_facts_dir=%s" % out_dir,
                       "-e", "deepep_hca_mapping=0:rocep6s0:1,1:rocep4s0:1")
    assert rc == 0 and recap(out)["changed"] == 0, out


@pytest.mark.parametrize("mapping, message", [
    ("8:rocep4s0:1", "deepep_hca_mapping: '8:rocep4s0:1' is not accepted (GPU 8 does not exist, this node has 8)"),
    ("0:mlx5_0:1", "deepep_hca_mapping: '0:mlx5_0:1' is not accepted (no RDMA device mlx5_0)"),
    ("0:rocep4s0:1,gpu1", "deepep_hca_mapping: 'gpu1' is not accepted (malformed entry)"),
])
def test_site_refuses_a_bad_hand_written_mapping(tmp_path, mapping, message):
    rc, out = playbook("site.yml", tmp_path, "--tags", "preflight", "-e", "deepep_hca_mapping=%s" % mapping,
                       machine="gcp_b200")
    assert rc == 2, out
    assert message in out and "Nothing was changed." in out
    assert recap(out)["changed"] == 0


def test_site_refuses_an_arch_list_that_misses_the_gpus(tmp_path):
    rc, out = playbook("site.yml", tmp_path, "--tags", "preflight", "-e", '{"deepep_arch_list": ["9.0"]}',
                       machine="gcp_b200")
    assert rc == 2, out
    assert "deepep_arch_list: ['9.0'] (9.0) does not cover the GPUs of localhost (10.0)" in out
    assert recap(out)["changed"] == 0
    rc, out = playbook("site.yml", tmp_path / "again", "--tags", "preflight", "-e", '{"deepep_arch_list": ["10.0"]}',
                       machine="gcp_b200")
    assert rc == 0, out


@pytest.mark.parametrize("machine, policy, refused", [
    ("h200_no_nics", "auto", "doca_ofed layer will not install them (skipped: no Mellanox hardware"),
    ("gcp_b200", "never", "doca_ofed layer will not install them (skipped: doca_ofed_policy=never"),
    ("gcp_b200", "auto", None),  # DOCA-OFED installs IBGDA-capable rdma-core before NVSHMEM is built
])
def test_site_refuses_a_source_nvshmem_build_without_ibgda_rdma_core(tmp_path, machine, policy, refused):
    include = tmp_path / "include"
    include.mkdir()
    rc, out = playbook("site.yml", tmp_path, "--tags", "preflight", "-e", json.dumps({
        "nvshmem_ibgda_method": "source", "doca_ofed_policy": policy, "preflight_rdma_include_dirs": [str(include)]}),
        machine=machine)
    if refused is None:
        assert rc == 0, out
        return
    assert rc == 2, out
    assert "localhost: nvshmem_ibgda_method: 'source' is not accepted (IBGDA needs DOCA-OFED's rdma-core headers " \
           "(KF11, KF19): no infiniband/mlx5_api.h under %s, and the %s" % (include, refused) in out
    assert "accepted: wheel (the torch wheel's NVSHMEM)" in out and "Nothing was changed." in out
    assert recap(out)["changed"] == 0


@pytest.mark.parametrize("defines", [True, False])
def test_site_reads_the_nvshmem_source_for_the_rdma_core_50_symbol(tmp_path, defines):
    """Ubuntu 24.04's rdma-core 50 headers lack MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, and a node without
    Mellanox NICs gets no DOCA-OFED: a source that defines the symbol itself (NVSHMEM v3.4.5-0 does) builds
    there, one that does not is refused before any change."""
    include = tmp_path / "include" / "infiniband"
    include.mkdir(parents=True)
    (include / "mlx5dv.h").write_text("/* fixture: rdma-core 50 */\n")
    (include / "mlx5_api.h").write_text("#define MLX5DV_REG_DMABUF_ACCESS_REMOTE_WRITE 1\n")
    tree = tmp_path / "nvshmem" / "src" / "modules" / "transport" / "common"
    tree.mkdir(parents=True)
    (tree / "transport_ib_common.h").write_text(
        "#ifndef MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT\n#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT 1\n#endif\n"
        if defines else "#include <infiniband/mlx5dv.h>\n")
    archive = tmp_path / "nvshmem-src.tar.gz"
    subprocess.run(["tar", "-C", str(tmp_path), "-czf", str(archive), "nvshmem"], check=True)
    rc, out = playbook("site.yml", tmp_path, "--tags", "preflight", "-e", json.dumps({
        "nvshmem_ibgda_method": "source", "nvshmem_ibgda_src": str(archive),
        "preflight_rdma_include_dirs": [str(tmp_path / "include")]}), machine="h200_no_nics")
    if defines:
        assert rc == 0, out
        return
    assert rc == 2, out
    assert "which this NVSHMEM source does not define itself (read nvshmem/src/modules/transport/common/" \
        "transport_ib_common.h in %s)" % archive in re.sub(r"\s*\n\s*", " ", out), out
    assert recap(out)["changed"] == 0


def test_site_refuses_a_tag_that_names_no_layer(tmp_path):
    rc, out = playbook("site.yml", tmp_path, "--tags", "deepp", machine="gcp_b200")
    assert rc == 2, out
    assert "localhost: --tags deepp: no layer or step has that tag; accepted: preflight, system" in out
    assert "Nothing was changed." in out and recap(out)["changed"] == 0
    assert "PLAY [Preflight" not in out


@pytest.mark.parametrize("version, torch, nccl_method, refused", [
    ("v1", "2.11.0+cu130", "wheel", None),
    # The nccl layer (default: the wheel at 2.30.7) provides what V2 needs; without it the interpreter's counts.
    ("v2", "2.11.0+cu130", "wheel", None),
    ("v2", "2.11.0+cu130", "none", "(its NCCL is 2.28.9; DeepEP V2 needs NCCL >= 2.30.4 (KF31))"),
    ("v2", "2.9.1+cu129", "wheel", "(its torch is 2.9.1+cu129; DeepEP V2 needs torch >= 2.10)"),
])
def test_site_reads_the_given_interpreter_before_any_layer(tmp_path, version, torch, nccl_method, refused):
    # The GPU machine's interpreter (stand-in, tests/fixtures/python_site): NCCL 2.28.9.
    python = make_python_site(tmp_path / "venv", torch=torch)
    rc, out = playbook("site.yml", tmp_path, "--tags", "preflight", "-e", json.dumps({
        "deepep_python": python, "deepep_version": version, "nccl_method": nccl_method}), machine="gcp_b200")
    # Read with the node, in the preflight role's one call (ansible_facts.deepep.interpreter): no second reading.
    assert "Read the node and the build interpreter" not in out
    if refused is None:
        assert rc == 0 and "PLAY [System layers" in out, out
        # The nccl layer's line of the per-layer report, on that reading (before DeepEP's).
        lines = re.sub(r"\s+", " ", out).replace("''", "'")  # YAML's quoting of the report's lines
        assert re.search(r"nccl (ok|change) torch loads NCCL 2\.28\.9; nvidia-nccl-cu13 2\.28\.9 -- %s" % re.escape(
            "nothing: DeepEP V1 uses torch's own NCCL" if version == "v1" else
            "pip-install nvidia-nccl-cu13==2.30.7 where torch loads NCCL"), lines), out
        assert lines.index(" nccl ") < lines.index(" deepep change ")
        return
    assert rc == 2, out
    assert "localhost: deepep_python: '%s' is not accepted %s; accepted: an interpreter" % (python, refused) in out
    assert "Nothing was changed." in out and recap(out)["changed"] == 0
    assert "PLAY [System layers" not in out


def test_tags_deepep_reads_the_interpreter_once_and_deepeps_own_check_refuses(tmp_path):
    # --tags deepep runs no system layer: the preflight play reads the given interpreter with the node (one call);
    # the build layers' input check uses that reading (no second one) and refuses V2 with NCCL 2.28.9 (KF31) before
    # DeepEP changes anything (nccl_method none: no layer provides another NCCL).
    python = make_python_site(tmp_path / "venv", torch="2.11.0+cu130")
    rc, out = playbook("site.yml", tmp_path, "--tags", "deepep", "-e", json.dumps({
        "deepep_python": python, "deepep_version": "v2", "deepep_git_ref": "0123abcd", "cuda_version": "13.0",
        "nccl_method": "none"}), machine="gcp_b200")
    assert rc == 2, out
    task = "TASK [moe_infra.deepep.deepep : Read the node and the build interpreter]"
    assert task not in out or out[out.index(task):].split("\n", 2)[1].startswith("skipping: [localhost]"), out
    reading = "TASK [moe_infra.deepep.preflight : Discover GPUs"
    assert out.count(reading) == 1 and out.index(reading) < out.index(
        "PLAY [Check the DeepEP inputs before changing anything]"), out
    assert "[KF31] DeepEP V2 needs NCCL >= 2.30.4; found 2.28.9" in re.sub(r"\s*\n\s*", " ", out), out
    assert recap(out)["changed"] == 0
