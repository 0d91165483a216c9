# -*- coding: utf-8 -*-
"""deepep_facts: the node reading every layer uses, as ansible_facts.deepep (deepep_node_info's reading, the
hand-written mapping applied, the layer plan, where and when it was read)."""
from __future__ import annotations

import grp
import hashlib
import os

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.layer_plan import layer_plan
from ansible_collections.moe_infra.deepep.plugins.modules import deepep_doctor, deepep_facts, deepep_node_info, torch_stack_info
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import make_python_site


def gather(run_module, tmp_path, **args):
    args.setdefault("sysfs_root", str(tmp_path))
    args.setdefault("procfs_root", str(tmp_path / "proc"))
    result, failed = run_module(deepep_facts, args)
    return result, failed


def test_facts_are_the_node_reading_with_the_plan_and_where_it_was_read(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result, failed = gather(run_module, tmp_path, cuda_version="13.0", include_dirs=[str(tmp_path / "include")])
    assert not failed and result["changed"] is False, result
    facts = result["ansible_facts"]["deepep"]
    reading, failed = run_module(deepep_node_info, dict(sysfs_root=str(tmp_path), procfs_root=str(tmp_path / "proc"),
                                                        include_dirs=[str(tmp_path / "include")]))
    assert not failed, reading
    for key in ("gpu", "rdma", "topology", "cuda", "driver_params", "compiler"):
        assert facts[key] == reading[key], key
    assert facts["gpu"]["gpu_count"] == 8
    assert facts["layers"] == layer_plan(reading, "13.0")
    assert [entry["layer"] for entry in facts["layers"]][:2] == ["doca_ofed", "cuda"]
    assert facts["read_from"] == {
        "sysfs_root": str(tmp_path), "procfs_root": str(tmp_path / "proc"), "modprobe_dir": "/etc/modprobe.d",
        "include_dirs": [str(tmp_path / "include")], "cuda_home": "/usr/local/cuda", "nvidia_smi": "nvidia-smi",
        "hca_include": [], "hca_exclude": [], "link_layer": "auto", "registry_dwords": {}, "module_params": {},
        "hca_mapping": "", "cuda_version": "13.0", "preflight_checks": None, "interpreter": None, "builds": None,
        "nccl": None, "prerequisites": None}
    assert "checks" not in facts and "interpreter" not in facts and "builds" not in facts  # only when asked for


def test_each_reading_is_told_apart_by_when_it_was_made(run_module, tmp_path):
    machines.h200_no_nics(tmp_path)
    first, first_failed = gather(run_module, tmp_path)
    second, second_failed = gather(run_module, tmp_path)
    assert not first_failed and not second_failed
    assert second["ansible_facts"]["deepep"]["read_at"] > first["ansible_facts"]["deepep"]["read_at"] > 0


def test_a_hand_written_mapping_replaces_the_discovered_one(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result, failed = gather(run_module, tmp_path, hca_mapping="0:rocep6s0:1, 1:rocep4s0")
    assert not failed, result
    topology = result["ansible_facts"]["deepep"]["topology"]
    assert topology["deepep_device_to_hca_mapping"] == "0:rocep6s0:1,1:rocep4s0:1"
    assert topology["nvshmem_hca_list"] == "rocep6s0:1,rocep4s0:1"
    assert topology["mapping_source"] == "deepep_hca_mapping"
    listed, failed = gather(run_module, tmp_path, hca_mapping=["1:rocep4s0:1", "0:rocep6s0:1"])
    assert not failed and listed["ansible_facts"]["deepep"]["topology"]["mapping"] == topology["mapping"]


def test_a_bad_hand_written_mapping_fails_naming_the_entry(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result, failed = gather(run_module, tmp_path, hca_mapping="8:rocep4s0:1,0:mlx5_0:1")
    assert failed, result
    assert result["msg"].startswith(
        "deepep_hca_mapping: '8:rocep4s0:1' is not accepted (GPU 8 does not exist, this node has 8); accepted: "
        "GPU indexes 0-7; deepep_hca_mapping: '0:mlx5_0:1' is not accepted (no RDMA device mlx5_0); accepted: the "
        "RDMA devices here: rocep132s0, rocep134s0, "), result["msg"]
    assert result["msg"].endswith(". Nothing was changed.")
    assert "ansible_facts" not in result


def test_no_mapping_keeps_the_discovered_one(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    for empty in ("", []):
        result, failed = gather(run_module, tmp_path, hca_mapping=empty)
        assert not failed and result["ansible_facts"]["deepep"]["topology"].get("mapping_source") != "deepep_hca_mapping"


def test_same_as_reads_again_with_what_an_earlier_reading_recorded(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    first, failed = gather(run_module, tmp_path, hca_mapping="0:rocep6s0:1", cuda_version="12.9",
                           hca_exclude=["^rocep198"])
    assert not failed, first
    recorded = first["ansible_facts"]["deepep"]["read_from"]
    # The other options are left out: a layer that changed the node knows none of the preflight role's settings.
    again, failed = run_module(deepep_facts, dict(same_as=recorded))
    assert not failed, again
    facts = again["ansible_facts"]["deepep"]
    assert facts["read_from"] == recorded
    assert facts["topology"]["deepep_device_to_hca_mapping"] == "0:rocep6s0:1"
    assert facts["layers"] == first["ansible_facts"]["deepep"]["layers"]
    assert facts["read_at"] > first["ansible_facts"]["deepep"]["read_at"]


def test_same_as_refuses_what_no_reading_records(run_module, tmp_path):
    result, failed = run_module(deepep_facts, dict(same_as={"sysfs_root": str(tmp_path), "rdma_include_dirs": []}))
    assert failed and result["msg"].startswith("same_as: rdma_include_dirs is not an option of an earlier reading")


def test_preflight_checks_run_on_what_was_just_read_as_the_doctor_runs_them(run_module, tmp_path):
    # 8 B200s, no NVIDIA driver loaded (no params under procfs_root), gdrdrv asked for and no kernel source under
    # root: the doctor's DRIVER and KF10, from the facts' own reading, with no second module call.
    machines.gcp_b200(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    checks = {"root": str(root), "gdrcopy_kernel_module": True, "build_user": ""}
    result, failed = gather(run_module, tmp_path, cuda_version="13.0", preflight_checks=checks)
    assert not failed, result
    found = result["ansible_facts"]["deepep"]["checks"]
    doctor, failed = run_module(deepep_doctor, dict(sysfs_root=str(tmp_path), procfs_root=str(tmp_path / "proc"),
                                                    root=str(root), gdrcopy_kernel_module=True, build_user="",
                                                    cuda_version="13.0", preflight_only=True))
    assert not failed, doctor
    assert found["findings"] == doctor["findings"] and found["summary"] == doctor["summary"]
    assert found["node"] == doctor["node"] and found["node"]["gpu_count"] == 8
    status = dict((f["id"], f["status"]) for f in found["findings"])
    assert status["KF10"] == "problem" and status["DRIVER"] == "problem"
    # Only the checks no layer fixes: nothing that needs the interpreter or a build.
    assert set(status) == {"KF10", "KF30", "KF33", "KF35", "PYTAR", "REACH", "DRIVER"}
    # A reading again with same_as runs them again, on the node as it is then.
    again, failed = gather(run_module, tmp_path, same_as=result["ansible_facts"]["deepep"]["read_from"])
    assert not failed and again["ansible_facts"]["deepep"]["checks"]["summary"] == found["summary"]


def test_the_build_interpreter_is_read_with_the_node_and_again_with_same_as(run_module, tmp_path):
    machines.h200_no_nics(tmp_path)
    venv = tmp_path / "venv" / "bin" / "python"
    asked = {"python": str(venv), "pythonpath": [str(tmp_path / "src")], "cache_dir": "", "run_as": ""}
    # The deepep role's venv before the role creates it: an answer, not an error.
    before, failed = gather(run_module, tmp_path, interpreter=asked)
    assert not failed, before
    facts = before["ansible_facts"]["deepep"]
    assert facts["interpreter"]["exists"] is False and facts["interpreter"]["torch"]["version"] is None
    assert facts["read_from"]["interpreter"] == asked
    # After the install (a layer read the node again with what the first reading recorded): the same as
    # torch_stack_info reads it, with the node.
    python = make_python_site(tmp_path / "site", nccl_runtime=(2, 30, 7))
    venv.parent.mkdir(parents=True)
    venv.symlink_to(python)
    (tmp_path / "src").mkdir()  # the build tree the import check is for
    after, failed = run_module(deepep_facts, dict(same_as=facts["read_from"]))
    assert not failed, after
    direct, failed = run_module(torch_stack_info, dict(asked, missing_ok=True))
    assert not failed, direct
    stack = after["ansible_facts"]["deepep"]["interpreter"]
    assert stack["exists"] is True and stack["torch"]["nccl"] == "2.30.7"
    assert stack == dict((key, value) for key, value in direct.items() if key not in ("changed", "invocation"))
    assert after["ansible_facts"]["deepep"]["gpu"] == facts["gpu"]


def test_no_deep_ep_import_runs_while_there_is_no_build_to_check(run_module, tmp_path):
    """A DeepEP the interpreter has from elsewhere (here one that fails to import on an undefined symbol, KF18) is
    not imported while the build tree on pythonpath does not exist; once it does, the import runs and its answer is
    torch_stack_info's."""
    machines.h200_no_nics(tmp_path)
    error = "/site/deep_ep_cpp.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
    python = make_python_site(tmp_path / "site", deep_ep_error=error)
    asked = {"python": python, "pythonpath": [str(tmp_path / "src")], "cache_dir": "", "run_as": ""}
    result, failed = gather(run_module, tmp_path, interpreter=asked)
    assert not failed, result
    stack = result["ansible_facts"]["deepep"]["interpreter"]
    assert stack["torch"]["version"] == "2.11.0+cu130"
    assert stack["deep_ep"] == {"importable": None, "file": None, "undefined_symbol": False,
                                "nvshmem_host_loaded": None,
                                "error": "not checked: no DeepEP build at %s" % (tmp_path / "src")}
    # No pythonpath at all: the interpreter's own deep_ep is what is asked about, as torch_stack_info reads it.
    bare, failed = gather(run_module, tmp_path, interpreter=dict(asked, pythonpath=[]))
    assert not failed and bare["ansible_facts"]["deepep"]["interpreter"]["deep_ep"]["undefined_symbol"] is True, bare
    (tmp_path / "src").mkdir()
    again, failed = gather(run_module, tmp_path, same_as=result["ansible_facts"]["deepep"]["read_from"])
    assert not failed, again
    direct, failed = run_module(torch_stack_info, dict(asked, missing_ok=True))
    assert not failed, direct
    assert again["ansible_facts"]["deepep"]["interpreter"]["deep_ep"] == direct["deep_ep"]
    assert direct["deep_ep"]["importable"] is False and direct["deep_ep"]["undefined_symbol"] is True


def test_an_interpreter_without_python_is_refused(run_module, tmp_path):
    machines.h200_no_nics(tmp_path)
    result, failed = run_module(deepep_facts, dict(same_as={"sysfs_root": str(tmp_path), "interpreter": {"run_as": ""}}))
    assert failed and result["msg"].startswith("interpreter: python is required"), result


def test_the_build_prefixes_are_read_with_the_node_and_again_with_same_as(run_module, tmp_path):
    """Each directory under the prefix that source_build installs into (current, builds): the fingerprint current
    points at, whether it is stamped (verified), the files asked for (never through a link), the lock's holder."""
    machines.h200_no_nics(tmp_path / "sys")
    opt = tmp_path / "opt"
    build = opt / "gdrcopy" / "builds" / "0123456789abcdef"
    (build / "include").mkdir(parents=True)
    (build / "include" / "gdrapi.h").write_text("#define GDR_API_MAJOR_VERSION 2\n")
    (build / ".moe_infra_stamp.json").write_text('{"fingerprint": "0123456789abcdef"}')
    (opt / "gdrcopy" / "current").symlink_to("builds/0123456789abcdef")
    (opt / "nvshmem" / "builds").mkdir(parents=True)  # a build that failed before it went live
    (opt / "venv").mkdir()  # not a build prefix
    (tmp_path / "secret").write_text("root only\n")
    (build / "imports.node-record").symlink_to(tmp_path / "secret")
    (opt / "env.sh").write_text("export NVSHMEM_IB_GID_INDEX=3\n")
    (opt / "env.sh").chmod(0o640)
    (opt / "linked.sh").symlink_to(opt / "env.sh")
    (opt / "jit-cache" / "cache").mkdir(parents=True)
    (opt / "jit-cache").chmod(0o2775)
    (opt / "jit-cache" / "cache").chmod(0o700)
    (opt / "jit-cache" / "tmp").symlink_to(tmp_path)  # a link is not the directory the role creates
    kernel = opt / "jit-cache" / "cache" / "kernel.dispatch.0123"
    kernel.mkdir()
    (kernel / "kernel.cu").write_text("// cu\n")
    (kernel / "kernel.cubin").write_text("cubin")
    reports = opt / "reports"
    reports.mkdir()
    (reports / "elastic_ep.json").write_text('{"passed": true, "verification_key": "0123456789abcdef"}')
    (reports / "elastic_ep.log").write_text("not a report\n")
    (reports / "listed.json").write_text("[1, 2]")
    (reports / "torn.json").write_text('{"passed": tr')
    (reports / "linked.json").symlink_to(reports / "elastic_ep.json")
    asked = {"root": str(opt), "read_files": ["include/gdrapi.h", "imports.node-record"], "build_user": "root",
             "digests": [str(opt / "env.sh"), str(opt / "linked.sh"), str(opt / "missing.sh")],
             "directories": [str(opt / "jit-cache"), str(opt / "jit-cache" / "cache"), str(opt / "jit-cache" / "tmp"),
                             str(opt / "env.sh"), str(opt / "missing")],
             "report_dir": str(reports), "jit_cache": str(opt / "jit-cache")}
    result, failed = gather(run_module, tmp_path / "sys", builds=asked)
    assert not failed, result
    builds = result["ansible_facts"]["deepep"]["builds"]
    assert builds["digests"] == {
        str(opt / "env.sh"): {"mode": "0640", "sha256": hashlib.sha256(b"export NVSHMEM_IB_GID_INDEX=3\n").hexdigest()},
        str(opt / "linked.sh"): None, str(opt / "missing.sh"): None}
    group = grp.getgrgid(os.getgid()).gr_name
    assert builds["directories"] == {
        str(opt / "jit-cache"): {"mode": "2775", "group": group},
        str(opt / "jit-cache" / "cache"): {"mode": "0700", "group": group},
        str(opt / "jit-cache" / "tmp"): None, str(opt / "env.sh"): None, str(opt / "missing"): None}
    # The reports: JSON objects by path (a torn or non-object one null, a link or another file not read).
    assert builds["reports"] == {str(reports / "elastic_ep.json"): {"passed": True, "verification_key": "0123456789abcdef"},
                                 str(reports / "listed.json"): None, str(reports / "torn.json"): None}
    assert builds["jit_cache"]["kernels"] == 1 and builds["jit_cache"]["dir"] == str(opt / "jit-cache")
    assert builds["build_user_exists"] is True and builds["read_files"] == ["imports.node-record", "include/gdrapi.h"]
    assert builds["prefixes"] == {
        str(opt / "gdrcopy"): {"current": "0123456789abcdef", "install_dir": str(build), "stamped": True,
                               "lock_holder": None, "files": {"include/gdrapi.h": "#define GDR_API_MAJOR_VERSION 2\n"}},
        str(opt / "nvshmem"): {"current": None, "install_dir": None, "stamped": False, "files": {}, "lock_holder": None}}
    # A later reading with what this one recorded sees a build that is no longer verified.
    (build / ".moe_infra_stamp.json").unlink()
    again, failed = run_module(deepep_facts, dict(same_as=result["ansible_facts"]["deepep"]["read_from"]))
    assert not failed, again
    assert again["ansible_facts"]["deepep"]["builds"]["prefixes"][str(opt / "gdrcopy")]["stamped"] is False
    refused, failed = gather(run_module, tmp_path / "sys", builds=dict(asked, read_files=["../etc/shadow"]))
    assert failed and refused["msg"].startswith("builds: read_files '../etc/shadow' is not accepted")


def test_the_preflight_outcome_reports_each_layer_and_says_why_a_host_stops(run_module, tmp_path):
    """_deepep_preflight_outcome on the facts this module returns: the node report's lines, then the stop reasons
    in their order (no GPU, then the checks' problems, then the caller's)."""
    from ansible_collections.moe_infra.deepep.plugins.filter.doctor import deepep_preflight_outcome
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.layer_plan import report_lines

    machines.gcp_b200(tmp_path)
    result, failed = gather(run_module, tmp_path, cuda_version="13.0")
    assert not failed, result
    facts = result["ansible_facts"]["deepep"]
    outcome = deepep_preflight_outcome(facts, "node1")
    assert outcome == {"lines": report_lines(facts, facts["layers"]), "stop": ""}
    checks = {"summary": {"ok": 1, "problem": 1}, "findings": [
        {"id": "KF10", "status": "ok", "evidence": "gdrdrv absent", "fix": ""},
        {"id": "KF21", "status": "problem", "evidence": "memlock 64 KiB", "fix": "set memlock unlimited"}]}
    outcome = deepep_preflight_outcome(facts, "node1", checks, True, ["interpreter /x has no python"])
    from ansible_collections.moe_infra.deepep.plugins.filter.doctor import deepep_doctor_table
    assert outcome["lines"] == report_lines(facts, facts["layers"]) + [
        "node1: preflight checks %s" % (checks["summary"],)] + deepep_doctor_table(checks["findings"])
    assert outcome["stop"] == "node1: KF21 | memlock 64 KiB | set memlock unlimited. Nothing was changed."
    assert deepep_preflight_outcome(facts, "node1", None, True, ["a", "b"])["stop"] == (
        "node1: a; b. Nothing was changed.")
    # No GPU stops first, whatever else is wrong; without preflight_require_gpus it is no reason.
    no_gpu = dict(facts, gpu=dict(facts["gpu"], gpu_count=0, gpus=[]))
    stop = deepep_preflight_outcome(no_gpu, "node1", checks, True, ["a"], "/fixture/sys")["stop"]
    assert stop.startswith("No NVIDIA GPU under /fixture/sys/bus/pci/devices on node1: nothing was changed. Layers: "
                           "doca_ofed=") and "run playbooks/facts.yml (make facts)" in stop
    assert deepep_preflight_outcome(no_gpu, "node1", None, False)["stop"] == ""


def test_a_subset_is_read_alone_and_returned_not_as_facts(run_module, tmp_path):
    """gather_subset other than all: only those parts, under deepep, so the node's facts stay as they are."""
    machines.gcp_b200(tmp_path)
    whole, failed = gather(run_module, tmp_path, include_dirs=[str(tmp_path / "include")])
    assert not failed, whole
    part, failed = gather(run_module, tmp_path, include_dirs=[str(tmp_path / "include")], gather_subset=["gpu", "cuda"])
    assert not failed and part["changed"] is False, part
    assert "ansible_facts" not in part
    assert sorted(part["deepep"]) == ["cuda", "gpu", "read_from"]
    facts = whole["ansible_facts"]["deepep"]
    assert part["deepep"]["gpu"] == facts["gpu"] and part["deepep"]["cuda"] == facts["cuda"]
    assert part["deepep"]["gpu"]["gpu_count"] == 8
    assert part["deepep"]["read_from"] == dict(
        (name, value) for name, value in facts["read_from"].items()
        if name not in ("hca_mapping", "cuda_version", "preflight_checks", "interpreter", "builds", "nccl",
                        "prerequisites"))


def test_a_subset_refuses_what_needs_the_whole_node(run_module, tmp_path):
    machines.gcp_b200(tmp_path)
    result, failed = gather(run_module, tmp_path, gather_subset=["rdma"], hca_mapping="0:rocep6s0:1",
                            cuda_version="13.0")
    assert failed and result["msg"] == (
        "hca_mapping, cuda_version: read with gather_subset all (they need the whole node); gather_subset rdma "
        "reads only those parts. Nothing was changed."), result


def test_a_subset_with_same_as_reads_the_trees_of_an_earlier_reading(run_module, tmp_path):
    """A layer reading again after its own change passes the facts' read_from: the mapping and the plan, which
    a part does not read, are left out, not refused."""
    machines.gcp_b200(tmp_path)
    first, failed = gather(run_module, tmp_path, hca_mapping="0:rocep6s0:1", cuda_version="13.0")
    assert not failed, first
    recorded = first["ansible_facts"]["deepep"]["read_from"]
    again, failed = run_module(deepep_facts, dict(same_as=recorded, gather_subset=["topology", "rdma"]))
    assert not failed, again
    assert again["deepep"]["rdma"] == first["ansible_facts"]["deepep"]["rdma"]
    assert again["deepep"]["topology"]["deepep_device_to_hca_mapping"] != "0:rocep6s0:1"  # the discovered one
    assert first["ansible_facts"]["deepep"]["topology"]["deepep_device_to_hca_mapping"] == "0:rocep6s0:1"
    assert again["deepep"]["read_from"]["sysfs_root"] == str(tmp_path)
    assert "hca_mapping" not in again["deepep"]["read_from"]


def test_wait_for_active_reads_the_hcas_again_until_their_links_are_up(run_module, tmp_path):
    """After a reboot a port is DOWN for a while: the reading waits for it (a thread brings it up 3 s in)."""
    import threading
    import time
    machines.one_port_down(tmp_path)
    (state,) = list(tmp_path.glob("devices/**/infiniband/mlx5_1/ports/1/state"))
    timer = threading.Timer(3, lambda: state.write_text("4: ACTIVE\n"))
    timer.start()
    started = time.time()
    try:
        result, failed = gather(run_module, tmp_path, gather_subset=["rdma"], include_dirs=[], wait_for_active=60)
    finally:
        timer.cancel()
    assert not failed, result
    ports = [hca["ports"][0]["state"] for hca in result["deepep"]["rdma"]["hcas"]]
    assert ports == ["ACTIVE"] * 4 and 2 <= result["deepep"]["rdma"]["waited_seconds"] < 30
    assert time.time() - started < 30
    state.write_text("1: DOWN\n")
    result, failed = gather(run_module, tmp_path, gather_subset=["rdma"], include_dirs=[])
    assert not failed and "waited_seconds" not in result["deepep"]["rdma"]  # read once, as the facts read it
    assert result["deepep"]["rdma"]["hcas"][1]["ports"][0]["state"] == "DOWN"


def test_the_nccl_layer_is_planned_on_the_interpreters_reading(run_module, tmp_path):
    machines.h200_no_nics(tmp_path)
    python = make_python_site(tmp_path / "site", nccl_runtime=(2, 28, 9))
    asked = {"python": python, "pythonpath": [], "cache_dir": "", "run_as": ""}
    result, failed = gather(run_module, tmp_path, interpreter=asked,
                            nccl={"deepep_version": "v2", "settings": {"nccl_version": "2.30.7", "other": 1}})
    assert not failed, result
    layers = result["ansible_facts"]["deepep"]["layers"]
    assert [entry["layer"] for entry in layers][-2:] == ["nccl", "deepep"]
    assert layers[-2]["status"] == "change" and layers[-2]["found"].startswith("torch loads NCCL 2.28.9")
    assert layers[-2]["action"].startswith("pip-install nvidia-nccl-cu13==2.30.7 where torch loads NCCL")
    # Another method from the site's variables; one the layer does not have is refused.
    source, failed = gather(run_module, tmp_path, interpreter=asked,
                            nccl={"deepep_version": "v2", "settings": {"nccl_method": "source"}})
    assert not failed and source["ansible_facts"]["deepep"]["layers"][-2]["action"].startswith(
        "build NCCL 2.30.7 from source"), source
    refused, failed = gather(run_module, tmp_path, nccl={"deepep_version": "v2", "settings": {"nccl_method": "git"}})
    assert failed and refused["msg"] == "nccl: nccl_method 'git' is not accepted; accepted: wheel, source, none"
    plain, failed = gather(run_module, tmp_path)
    assert not failed and "nccl" not in [entry["layer"] for entry in plain["ansible_facts"]["deepep"]["layers"]]


def test_the_build_prerequisites_are_read_as_their_role_queries_them(run_module, tmp_path, monkeypatch):
    """A need met by a command counts wherever the command is (the build path first: cmake from pip), the others by
    dpkg's status, in one dpkg-query (a fixture printing what dpkg-query prints, an unknown package on stderr)."""
    machines.h200_no_nics(tmp_path / "sys")
    bin_dir, build_path = tmp_path / "bin", tmp_path / "cmake-venv" / "bin"
    for directory, command in ((build_path, "cmake"), (bin_dir, "gcc"), (bin_dir, "make")):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / command).write_text("#!/bin/sh\n")
        (directory / command).chmod(0o755)
    (bin_dir / "dpkg-query").write_text(
        "#!/bin/sh\nprintf '%%s\\n' \"$@\" > %s\n"
        "printf 'g++ deinstall ok config-files\\nlibibverbs-dev install ok installed\\npython3-dev install ok installed\\n'\n"
        "echo 'dpkg-query: no packages found matching python3-venv' >&2\nexit 1\n" % (tmp_path / "dpkg-query.args"))
    (bin_dir / "dpkg-query").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing of this machine's own
    result, failed = gather(run_module, tmp_path, sysfs_root=str(tmp_path / "sys"),
                            prerequisites={"build_path": [str(build_path)]})
    assert not failed, result
    facts = result["ansible_facts"]["deepep"]
    # g++ removed (its config files left), git and python3-venv not there: missing; the rest present.
    assert facts["prerequisites"] == {"build_path": [str(build_path)],
                                      "present": ["cmake", "gcc", "libibverbs-dev", "make", "python3-dev"]}
    assert facts["read_from"]["prerequisites"] == {"build_path": [str(build_path)]}
    # dpkg-query was asked once, for the packages no command stood for.
    assert (tmp_path / "dpkg-query.args").read_text().splitlines() == [
        "--show", "--showformat=${Package} ${Status}\\n", "g++", "git", "python3-dev", "python3-venv", "libibverbs-dev"]
    # Without the option, nothing is read.
    result, failed = gather(run_module, tmp_path, sysfs_root=str(tmp_path / "sys"))
    assert not failed and "prerequisites" not in result["ansible_facts"]["deepep"], result
