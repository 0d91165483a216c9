# -*- coding: utf-8 -*-
"""playbooks/deepep.yml end to end on fixtures: fixture sysfs (4 x H200, no NICs), a stand-in Python
environment laid out like the GPU machine's, and the stand-in DeepEP, GDRCopy and NVSHMEM sources
(tests/fixtures/{deepep,gdrcopy}_src, tests/fixtures/nvshmem_tree.py). GDRCopy's stand-in really compiles with gcc; NVSHMEM's with cmake."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import BUILD_USER, open_to_others
from ansible_collections.moe_infra.deepep.tests.fixtures.cuda_home import make_cuda_home
from ansible_collections.moe_infra.deepep.tests.fixtures.fanout_report import fanout_roles
from ansible_collections.moe_infra.deepep.tests.fixtures.nvshmem_tree import make_nvshmem_tree
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import (killed_pip_interpreter, make_pip_site,
                                                                             make_python_site, nccl_wheel)
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import write_nvidia_module_version, write_nvidia_params
from ansible_collections.moe_infra.deepep.tests.fixtures.wheel_index import make_wheel_index

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


@pytest.fixture(scope="session")
def shared_inputs(tmp_path_factory):
    """What no test changes, made once per session (per shard): the source archives (the same bytes every time,
    so the same fingerprints), the CUDA toolkit stand-in, and a build cache shared by the tests that do not test
    the GDRCopy build itself: GDRCopy's stand-in is compiled by the first test and installed from the cache by
    the others (one build per fingerprint, as on a fleet)."""
    root = tmp_path_factory.mktemp("shared")
    open_to_others(root)  # the build user reads the archives and writes the cache
    archives = {}
    nvshmem_tree = make_nvshmem_tree(root / "nvshmem_tree")
    for name, fixture, top in (("deepep", "deepep_src", "DeepEP"), ("gdrcopy", "gdrcopy_src", "gdrcopy"),
                               ("nvshmem", nvshmem_tree, "nvshmem")):
        archives[name] = root / ("%s-fixture.tar.gz" % top if name != "nvshmem" else "nvshmem-3.5.19-1.tar.gz")
        with tarfile.open(str(archives[name]), "w:gz") as tar:
            tar.add(os.path.join(FIXTURES, fixture), arcname=top)  # an absolute path stays as it is
    cache = root / "gdrcopy-cache"
    cache.mkdir(mode=0o777)
    return {"archives": archives, "cuda": make_cuda_home(root), "gdrcopy_cache": cache}


def make_node(home, shared_inputs):
    """The fixture node in the directory home: 4 x H200 without NICs, rdma-core's header, the stand-in interpreter;
    its prefix is home/opt."""
    open_to_others(home)  # the build user reaches its build directory, as under /opt on a node
    sysfs = home / "sys"
    machines.h200_no_nics(sysfs)
    archives = shared_inputs["archives"]
    rdma_include = home / "include"
    (rdma_include / "infiniband").mkdir(parents=True)
    (rdma_include / "infiniband" / "mlx5dv.h").write_text("/* fixture: rdma-core's header is present */\n")
    return {"tmp": home, "sysfs": sysfs, "archive": archives["deepep"], "archives": archives,
            "rdma_include": rdma_include, "prefix": home / "opt", "gdrcopy_cache": shared_inputs["gdrcopy_cache"],
            "python": make_python_site(home / "venv"), "cuda": shared_inputs["cuda"]}


@pytest.fixture
def node(tmp_path, shared_inputs):
    return make_node(tmp_path, shared_inputs)


def run_inventory(node, extra, playbook="deepep.yml"):
    """Like run() against the inventory given in extra (-i ...), without the single-host recap."""
    variables = dict(VARIABLES(node))
    variables.pop("deepep_prefix")  # per host in that inventory
    variables.pop("deepep_python")  # likewise
    variables.pop("gdrcopy_cache_dir")  # the fan-out tests use their own cache (deepep_cache_dir)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    cmd = [PLAYBOOK_BIN, os.path.join(REPO, "playbooks", playbook), "-e", json.dumps(variables)] + list(extra)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def VARIABLES(node):  # noqa: N802  (a table, computed per node)
    return {
        "preflight_sysfs_root": str(node["sysfs"]), "preflight_procfs_root": str(node["tmp"] / "proc"),
        "preflight_modprobe_dir": str(node["tmp"] / "modprobe.d"), "preflight_cuda_home": node["cuda"],
        "deepep_python": node["python"], "deepep_src": str(node["archive"]), "deepep_prefix": str(node["prefix"]),
        # gdrcopy_prefix and nvshmem_ibgda_prefix are left to their defaults: under deepep_prefix.
        "gdrcopy_src": str(node["archives"]["gdrcopy"]), "nvshmem_ibgda_src": str(node["archives"]["nvshmem"]),
        "gdrcopy_cache_dir": str(node["gdrcopy_cache"]), "deepep_cluster_report_dir": str(node["tmp"] / "report"),
        "deepep_probe_cache_dir": str(node["tmp"] / "probes"),
        "nvshmem_ibgda_cuda_home": node["cuda"], "nvshmem_ibgda_rdma_include_dir": str(node["rdma_include"]),
        "deepep_cuda_home": node["cuda"], "deepep_verify_num_processes": 2,
        "deepep_env_extra": {"DEEPEP_FIXTURE_OUTPUT": os.path.join(FIXTURES, "deepep_output")},
        "deepep_intranode_thresholds": {"dispatch_fp8": 240}, "deepep_low_latency_thresholds": {"dispatch": 240},
        # The stand-in builds take a second: check on them every second, not every 5-15 s.
        "gdrcopy_build_poll": 1, "nvshmem_ibgda_build_poll": 1, "deepep_build_poll": 1,
        # GDRCopy and NVSHMEM build unprivileged as on a node ('nobody' is on every machine: the tests create no
        # user). DeepEP's stand-in build runs this test environment's interpreter, which lives under /root where
        # no other user may go: it builds as root here (molecule/site builds it as the role's user).
        "gdrcopy_build_user": BUILD_USER, "nvshmem_ibgda_build_user": BUILD_USER, "deepep_build_user": "",
        # For the same reason the interpreter is probed and DeepEP's stand-in tests run as root here (unit tests,
        # molecule/site and the GPU runs do both unprivileged).
        "deepep_test_user": "", "doctor_probe_user": "",
        # This machine is the test host: its packages are .ci/run's business (molecule/lifecycle installs them).
        "deepep_install_prerequisites": False,
    }


def task_lines(out, header):
    """What the run printed for the task with this header, up to the next task or play."""
    assert header in out, out
    return re.split(r"\n(?:TASK|PLAY|RUNNING HANDLER) \[", out[out.index(header) + len(header):].lstrip(" *\n"))[0]


def run(node, *extra, playbook="deepep.yml"):
    variables = VARIABLES(node)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    cmd = [PLAYBOOK_BIN, "-i", os.path.join(REPO, "inventories", "local"),
           os.path.join(REPO, "playbooks", playbook), "-e", json.dumps(variables)] + list(extra)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    assert match, out
    return proc.returncode, int(match.group(2)), out


def test_build_env_script_tests_then_nothing_to_do(node):
    rc, changed, out = run(node)
    assert rc == 0, out
    current = node["prefix"] / "deepep" / "current"
    built = (current / "src" / "deep_ep_cpp.py").read_text()
    # CUDA 13: the CCCL include dir goes on CPATH (KF21); the arch comes from the GPUs (0x2335 -> 9.0).
    assert "TORCH_CUDA_ARCH_LIST = '9.0'" in built
    assert "CPATH = '%s/include/cccl'" % node["cuda"] in built
    # The interpreter's nvidia-nvshmem wheel is found by setup.py itself: no NVSHMEM_DIR.
    assert "NVSHMEM_DIR = None" in built
    # The wheel (bdist_wheel) went next to the interpreter's torch, and deep_ep imports from there without the tree.
    site = node["tmp"] / "venv" / "site-packages"
    assert (site / "deep_ep_cpp.py").read_text() == built
    assert (current / "src" / "dist" / "deep_ep-1.2.1-py3-none-any.whl").is_file()
    assert "Check that deep_ep imports with the env script's environment and from the installed wheel" in out
    script = (node["prefix"] / "env.sh").read_text()
    assert "NVSHMEM_REMOTE_TRANSPORT" not in script and "KF36" in script
    assert "%s/src" % current in script
    report = json.loads((node["prefix"] / "reports" / "intranode.json").read_text())
    assert report["passed"] is True and report["result"]["checks_passed"] == 24
    low_latency = json.loads((node["prefix"] / "reports" / "low_latency.json").read_text())
    assert low_latency["result"]["summary"]["min_dispatch_gbps"] == 244.47

    # GDRCopy's library was built (library only) and NVSHMEM opens it through the env script.
    gdrcopy = os.path.realpath(str(node["prefix"] / "gdrcopy" / "current"))
    assert os.path.islink(os.path.join(gdrcopy, "lib", "libgdrapi.so"))
    assert os.path.isfile(os.path.join(gdrcopy, "lib", "libgdrapi.so.2.5"))
    assert "%s/lib" % gdrcopy in script and "LD_LIBRARY_PATH" in script
    # The tests share one GDRCopy build per session: whichever test ran first built it, the others installed it.
    assert sorted(p.name.split("-")[0] for p in node["gdrcopy_cache"].iterdir()) == ["gdrcopy", "gdrcopy"]  # + digest
    # The rerun that changes nothing and the rebuild after a torch upgrade: site.yml runs these same layers in
    # test_site_runs_every_layer_in_order_then_nothing_to_do.


def test_the_build_prerequisites_are_taken_from_preflights_reading(node):
    """With deepep_install_prerequisites (every node's default), the build_prerequisites role takes what preflight's
    reading found (deepep_facts' prerequisites) and runs no query of its own; what the build layers need here (gcc,
    g++, make: the sources are archives, the interpreter is given) is on this test machine, so nothing is installed.
    Looked for on another build path than preflight's, the role queries the node itself."""
    rc, changed, out = run(node, "--skip-tags", "deepep_verify", "-e", '{"deepep_install_prerequisites": true}')
    assert rc == 0, out
    assert task_lines(out, "build_prerequisites : Find which of them are missing]").startswith("skipping"), out
    assert task_lines(out, "build_prerequisites : Install what is missing]").startswith("skipping"), out
    rc, changed, out = run(node, "--skip-tags", "deepep_verify", "-e", json.dumps(
        {"deepep_install_prerequisites": True, "build_prerequisites_path": [str(node["tmp"] / "cmake-bin")]}))
    assert rc == 0 and changed == 0, out
    assert task_lines(out, "build_prerequisites : Find which of them are missing]").startswith("ok"), out
    assert task_lines(out, "build_prerequisites : Install what is missing]").startswith("skipping"), out


def test_check_mode_on_a_fresh_node_predicts_and_writes_nothing(node):
    # A build user that is not there yet: --check predicts its creation and creates nothing.
    user = "moe-check-%d" % os.getpid()
    rc, changed, out = run(node, "--check", "-e", "deepep_build_user=%s gdrcopy_build_user=%s" % (user, user))
    assert rc == 0, out
    assert subprocess.run(["id", user], capture_output=True, check=False).returncode != 0
    assert changed >= 3  # source directory, archive copy, build, env script, report directory
    # The fingerprint is known before the archive is on the node: its digest is taken on the controller.
    assert re.search(r"GDRCopy: no previous build; fingerprint [0-9a-f]{16}", out), out
    assert not node["prefix"].exists()


def test_v2_stops_before_building_naming_nccl(node):
    # No nccl layer (nccl_method none): the interpreter's NCCL 2.28.9 is what DeepEP would get.
    rc, changed, out = run(node, "-e", "deepep_version=v2 nccl_method=none")
    assert rc == 2 and changed == 0, out
    assert "[KF31] DeepEP V2 needs NCCL >= 2.30.4; found 2.28.9" in out
    assert not node["prefix"].exists()


def test_bench_threshold_failure_is_reported(node):
    rc, changed, out = run(node, "-e", '{"deepep_intranode_thresholds": {"dispatch_fp8": 255}}')
    assert rc == 2, out
    assert "DeepEP intranode test failed: dispatch_fp8 246.63 < 255 GB/s" in out


def _nvshmem_source(node, *extra):
    return run(node, "-e", "nvshmem_ibgda_method=source", *extra)


def test_nvshmem_source_build_and_deepep_against_it(node):
    rc, changed, out = _nvshmem_source(node, "--skip-tags", "deepep_verify")
    assert rc == 0, out
    nvshmem = os.path.realpath(str(node["prefix"] / "nvshmem" / "current"))
    gdrcopy = os.path.realpath(str(node["prefix"] / "gdrcopy" / "current"))
    info = subprocess.run([os.path.join(nvshmem, "bin", "nvshmem-info"), "-a"], capture_output=True, text=True,
                          check=True).stdout
    # cmake got IBGDA on, the GPUs' arch (H200 -> 90) and the gdrcopy role's build.
    assert "NVSHMEM_IBGDA_SUPPORT=ON" in info and "CMAKE_CUDA_ARCHITECTURES=90" in info
    assert "NVSHMEM_USE_GDRCOPY=ON" in info
    assert os.path.isfile(os.path.join(nvshmem, "lib", "nvshmem_transport_ibgda.so.3"))
    assert not os.path.exists(os.path.join(nvshmem, "src", "build"))  # object tree removed after install
    log = open(os.path.join(nvshmem, "build.log")).read()
    assert "-DGDRCOPY_HOME='%s'" % gdrcopy in log and "-DNVSHMEM_MPI_SUPPORT='OFF'" in log
    # DeepEP built against it (NVSHMEM_DIR = the build's own directory) and the env script preloads its host
    # library so torch's wheel cannot win (KF05).
    built = (node["prefix"] / "deepep" / "current" / "src" / "deep_ep_cpp.py").read_text()
    assert "NVSHMEM_DIR = '%s'" % nvshmem in built
    script = (node["prefix"] / "env.sh").read_text()
    assert "%s/lib/libnvshmem_host.so.3" % nvshmem in script and "LD_PRELOAD" in script

    # A torch upgrade with --tags deepep: only DeepEP rebuilds (changed=1), still against the source NVSHMEM. (A
    # plain rerun of a source NVSHMEM changing nothing: test_build_once_install_everywhere_for_gdrcopy_and_nvshmem.)
    make_python_site(node["tmp"] / "venv", torch="2.12.0+cu130")
    rc, changed, out = _nvshmem_source(node, "--tags", "deepep", "--skip-tags", "deepep_verify")
    assert rc == 0 and changed == 1, out
    assert "inputs.torch: 2.11.0+cu130 -> 2.12.0+cu130" in out
    assert "nvshmem_dir" not in out.split("inputs changed:", 1)[1].splitlines()[0]
    assert os.path.realpath(str(node["prefix"] / "nvshmem" / "current")) == nvshmem
    built = (node["prefix"] / "deepep" / "current" / "src" / "deep_ep_cpp.py").read_text()
    assert "NVSHMEM_DIR = '%s'" % nvshmem in built


def test_nvshmem_source_without_rdma_headers_stops_with_kf11(node):
    (node["rdma_include"] / "infiniband" / "mlx5dv.h").unlink()
    rc, changed, out = _nvshmem_source(node, "--skip-tags", "deepep_verify")
    assert rc == 2, out
    assert "[KF11]" in out and "infiniband/mlx5dv.h not found" in out
    assert not (node["prefix"] / "nvshmem" / "builds").exists()


def test_nvshmem_source_of_another_version_than_declared_is_refused(node):
    rc, changed, out = _nvshmem_source(node, "--skip-tags", "deepep_verify", "-e", "nvshmem_ibgda_source_version=3.5.20")
    assert rc == 2, out
    assert "this source is NVSHMEM 3.5.19.0, not 3.5.20" in out
    assert not (node["prefix"] / "nvshmem" / "current").exists()


def test_nvshmem_3_4_5_gets_the_roce_patch(node):
    # 3.4.5 selects the KF15 patch (sent from the controller with the build's module call); the fixture tree has no
    # ibgda.cpp, so it cannot apply and the build stops naming the patch, with nothing switched.
    rc, changed, out = _nvshmem_source(node, "--skip-tags", "deepep_verify", "-e", "nvshmem_ibgda_source_version=3.4.5")
    assert rc == 2, out
    assert "/.moe_infra_patches/ibgda-roce-ah-attr-memset.patch does not apply to nvshmem" in out
    assert not (node["prefix"] / "nvshmem" / "patches").exists()
    assert not (node["prefix"] / "nvshmem" / "current").exists()


def _role_venv(node, *extra, **pin):
    index = make_wheel_index(node["tmp"] / "index")
    variables = {"deepep_python": "", "deepep_venv": str(node["prefix"] / "venv"),
                 "deepep_torch_version": pin.get("torch", "2.11.0+cu130"),
                 "deepep_torch_index_url": pin.get("index", index),
                 "deepep_pip_extra_args": "--index-url %s" % index}
    return run(node, "-e", json.dumps(variables), *extra)


def test_role_owned_venv_with_the_pinned_torch(node):
    rc, changed, out = _role_venv(node)
    assert rc == 0, out
    python = node["prefix"] / "venv" / "bin" / "python"
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    for line in ("torch==2.11.0+cu130", "nvidia-nvshmem-cu13==3.4.5", "nvidia-nccl-cu13==2.28.9", "numpy==2.5.2"):
        assert line in freeze, freeze
    # DeepEP was built and tested with the venv's interpreter.
    report = json.loads((node["prefix"] / "reports" / "intranode.json").read_text())
    assert report["command"][0] == str(python) and report["passed"] is True

    rc, changed, out = _role_venv(node, "--skip-tags", "deepep_verify")
    assert rc == 0 and changed == 0, out


def test_role_owned_venv_in_check_mode_writes_nothing(node):
    rc, changed, out = _role_venv(node, "--check")
    assert rc == 0, out
    assert "the deepep role creates %s" % (node["prefix"] / "venv") in out
    assert not (node["prefix"] / "venv").exists() and not (node["prefix"] / "deepep").exists()


def test_torch_pin_from_an_index_of_another_cuda_build_is_refused_before_any_change(node):
    rc, changed, out = _role_venv(node, torch="2.11.0+cu130", index="https://download.pytorch.org/whl/cu129")
    assert rc == 2 and changed == 0, out
    assert "torch 2.11.0+cu130 is a cu130 build but deepep_torch_index_url serves cu129" in out
    assert not node["prefix"].exists()


def site_args(node):
    """site.yml's extra arguments on the node's fixture trees: the system layers report only (this host must not be
    reconfigured), with its NVIDIA driver loaded (preflight refuses one without, the doctor's DRIVER)."""
    write_nvidia_params(str(node["tmp"] / "proc"))
    write_nvidia_module_version(str(node["sysfs"]))
    return ["-e", "@%s" % os.path.join(REPO, "playbooks", "vars", "report-only.yml"), "-e", json.dumps({
        "doca_ofed_sysfs_root": str(node["sysfs"]), "nvidia_peermapping_sysfs_root": str(node["sysfs"]),
        "nvidia_peermapping_procfs_root": str(node["tmp"] / "proc"),
        "nvidia_peermapping_modprobe_dir": str(node["tmp"] / "modprobe.d"),
        "cuda_version": "13.0", "deepep_site_report_dir": str(node["tmp"] / "site"),
        # Locked memory on the fixture tree, with no user's login or service to check here.
        "memlock_root": str(node["tmp"]), "memlock_verify_user": ""})]


def test_site_runs_every_layer_in_order_then_nothing_to_do(node):
    site = site_args(node)
    rc, changed, out = run(node, *site, playbook="site.yml")
    assert rc == 0, out
    order = re.findall(r"^PLAY \[(.*?)\]", out, re.M)
    checks = ["Check that the inventory gives hosts to run on",
              "Validate the variables (on the controller, before any host is touched)"]
    system = ["System layers, one reboot at most, then GDRCopy", "Report per host what the system layers left"]
    build = ["Check the DeepEP inputs before changing anything",
             "Python environment for DeepEP (the given interpreter, or a venv with the pinned torch)",
             "GDRCopy library", "NVSHMEM with IBGDA", "NCCL for DeepEP V2", "DeepEP", "Summary per host"]
    # The variables checked and the node read once: site.yml imports the layers' plays without the checks and the
    # preflight system.yml and deepep.yml start with.
    assert order == checks + ["Preflight (read-only discovery and per-layer report)"] + system + build
    assert out.count("TASK [Check the variables set for this host]") == 1
    summary = json.loads((node["tmp"] / "site" / "localhost-site.json").read_text())
    # The driver runs without the regkey, which a node without RDMA NICs does not need: nothing to do, no reboot.
    assert summary["reboot_pending"] is False and summary["peermapping"] == "absent"
    assert summary["gdrcopy"].startswith(str(node["prefix"] / "gdrcopy" / "builds"))
    assert summary["deepep"]["fingerprint"] and len(summary["deepep"]["tests"]) == 2
    # The doctor ran last, on what the layers left: DeepEP's stamp says 9.0, the fixture GPUs are 9.0 (KF07).
    assert set(summary["doctor"]) == {"ok", "problem", "not_applicable", "unknown"}
    assert summary["doctor"]["problem"] == len(summary["problems"])
    assert "KF07" not in [p["id"] for p in summary["problems"]]
    # It looked for GDRCopy where the role put it: under deepep_prefix, the one prefix given.
    assert "KF02" not in [p["id"] for p in summary["problems"]]
    assert "0 host(s) dropped out: none" in out and "Could not match supplied host pattern" not in out
    # Preflight and GDRCopy ran once: the build layers' own copies saw them done.

    def outcomes(task):
        return re.findall(r"TASK \[%s\][^\n]*\n(\w+):" % re.escape(task), out)
    # No system layer changed what discovery read (and no reboot): it is not read again (facts.yml is the refresh
    # too, under the same task name).
    discover = ("moe_infra.deepep.preflight : Discover GPUs, RDMA HCAs, the GPU-to-NIC mapping, the CUDA toolkit "
                "and the driver settings")
    assert outcomes(discover) == ["ok"]
    # The regkey layer decided from that reading (its settings are among preflight's): no query of its own.
    assert outcomes("moe_infra.deepep.nvidia_peermapping : Read the live and configured driver settings") == ["skipping"]
    build = "moe_infra.deepep.gdrcopy : Summarize the GDRCopy build"
    assert outcomes(build) == ["ok"]  # deepep.yml's GDRCopy play saw gdrcopy_root and left the role out

    # The cluster report: the run's page and JSON on the controller, one row for this host, every layer in it.
    report = json.loads((node["tmp"] / "report" / "report.json").read_text())
    cells = report["hosts"]["localhost"]["site"]["layers"]
    assert cells["gdrcopy"]["fingerprint"] and cells["nvshmem_ibgda"]["method"] == "wheel"
    assert [v["test"] for v in report["hosts"]["localhost"]["verification"]] == ["intranode", "low_latency"]
    assert "cluster report: %s" % (node["tmp"] / "report" / "report.html") in out

    # Rerun; a relative report directory is taken from where ansible-playbook runs (here the repository root).
    probes = sorted(p.name for p in (node["tmp"] / "probes").iterdir())
    relative = os.path.relpath(str(node["tmp"] / "report-relative"), REPO)
    rc, changed, out = run(node, *site, "--skip-tags", "deepep_verify", "-e", "deepep_cluster_report_dir=" + relative,
                           playbook="site.yml")
    assert rc == 0 and changed == 0, out
    # Every interpreter probe of the no-op run was answered from the cache the first run left (the build run read
    # the interpreter again after installing): none imported torch, none wrote a new answer.
    assert sorted(p.name for p in (node["tmp"] / "probes").iterdir()) == probes
    assert "up to date (fingerprint" in out
    assert (node["tmp"] / "report-relative" / "report.html").is_file()
    # No layer gave a reason to reboot: the reboot contract is one skipped include, not its ten tasks.
    assert outcomes("Reboot once if a layer needs it, then verify those layers") == ["skipping"], out
    assert "Plan the reboot from the layers' record" not in out

    # After a torch upgrade, --tags deepep rebuilds DeepEP and touches nothing else.
    make_python_site(node["tmp"] / "venv", torch="2.12.0+cu130")
    rc, changed, out = run(node, *site, "--tags", "deepep", "--skip-tags", "deepep_verify", playbook="site.yml")
    assert rc == 0 and changed == 1, out
    assert "inputs.torch: 2.11.0+cu130 -> 2.12.0+cu130" in out
    # The compiler (a build input) is discovery's reading of this run: gcc is not run a second time.
    assert outcomes("moe_infra.deepep.deepep : Find the compiler") == ["skipping"], out
    # GDRCopy is not rebuilt but exported from `current` as the node's reading (preflight's) holds it, with no
    # command of its own: the same root as the full run (the env script, which names its lib directory, did not
    # change: changed=1 above is DeepEP's build).
    assert outcomes("moe_infra.deepep.gdrcopy : Find the verified GDRCopy build and read its version") == [
        "skipping"], out
    rebuilt = json.loads((node["tmp"] / "site" / "localhost-site.json").read_text())
    assert rebuilt["gdrcopy"] == summary["gdrcopy"] and rebuilt["deepep"]["fingerprint"] != summary["deepep"]["fingerprint"]


def test_build_once_install_everywhere(node, tmp_path):
    """Two inventory nodes of this host (own prefixes) with the same inputs: one builds DeepEP, the build comes
    back to the controller cache, the other installs and verifies it."""
    cache = tmp_path / "cache"
    hosts = {}
    for name in ("n1", "n2"):
        # One interpreter path on every node, as on a fleet (it is a build input); here it is one interpreter.
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "deepep_prefix": str(tmp_path / name / "opt"), "deepep_python": node["python"]}
    inventory = tmp_path / "two-nodes.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    # One fork: the nodes share that interpreter, so their wheel installs must not run at the same time.
    fanout = ["-i", str(inventory), "-e", json.dumps({"deepep_cache_dir": str(cache)}), "--skip-tags", "deepep_verify",
              "--tags", "deepep", "--forks", "1"]

    def roles(out):
        return fanout_roles(out, "DeepEP")

    # --check first: the same plan, and nothing written on the nodes or in the cache.
    rc, out = run_inventory(node, fanout + ["--check"])
    assert rc == 0, out
    assert roles(out) == {"n1": "build", "n2": "wait"}, out
    assert "would install the build of another node" in out
    assert not cache.exists() and not (tmp_path / "n1").exists() and not (tmp_path / "n2").exists()

    rc, out = run_inventory(node, fanout)
    assert rc == 0, out
    assert roles(out) == {"n1": "build", "n2": "wait"}, out
    cached = sorted(p.name for p in cache.iterdir())
    # The artifact and the digest the controller recorded when it fetched it; the cache is the controller's alone.
    assert len(cached) == 2 and cached[0].startswith("deepep-") and cached[0].endswith(".tar.gz"), cached
    assert cached[1] == cached[0] + ".sha256" and oct(cache.stat().st_mode & 0o777) == "0o700"
    assert (cache / cached[1]).read_text() == "%s  %s\n" % (
        hashlib.sha256((cache / cached[0]).read_bytes()).hexdigest(), cached[0])
    n1 = os.path.realpath(str(tmp_path / "n1" / "opt" / "deepep" / "current"))
    n2 = os.path.realpath(str(tmp_path / "n2" / "opt" / "deepep" / "current"))
    assert os.path.basename(n1) == os.path.basename(n2)  # one fingerprint
    assert os.path.isfile(os.path.join(n1, "build.log")) and not os.path.isfile(os.path.join(n1, "install.log"))
    assert os.path.isfile(os.path.join(n2, "install.log"))  # verified there, not built
    assert os.path.isfile(os.path.join(n2, "src", "deep_ep_cpp.py"))
    # n2 got the build straight from the controller cache in its install task: no copy task, none left behind.
    assert "installed from the controller cache's deepep-%s.tar.gz" % os.path.basename(n1) in out, out
    assert "Copy the build made on another host" not in out
    assert not (tmp_path / "n2" / "opt" / "artifacts").exists()
    # The one build's wheel is installed next to the torch; n2 found it there already (same files, same site).
    installed = node["tmp"] / "venv" / "site-packages" / "deep_ep_cpp.py"
    assert installed.read_text() == open(os.path.join(n1, "src", "deep_ep_cpp.py")).read()
    wheel_task = re.search(r"TASK \[moe_infra.deepep.deepep : Install the DeepEP wheel next to its torch\][^\n]*\n"
                           r"(\w+): \[n1\]\n(\w+): \[n2\]", out)
    assert wheel_task and wheel_task.groups() == ("changed", "ok"), out

    rc, out = run_inventory(node, fanout)
    assert rc == 0, out
    assert re.search(r"n1\s+: ok=\d+\s+changed=0", out) and re.search(r"n2\s+: ok=\d+\s+changed=0", out), out

    # A third node that joins later installs from the cache; offline, a node whose build is not cached fails.
    hosts["n3"] = dict(hosts["n1"], deepep_prefix=str(tmp_path / "n3" / "opt"))
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    rc, out = run_inventory(node, fanout + ["-e", "deepep_offline=true", "--limit", "n3"])
    assert rc == 0, out
    assert roles(out) == {"n3": "cache"}, out
    assert "installed from the controller cache's deepep-%s.tar.gz" % os.path.basename(n1) in out, out
    assert not (tmp_path / "n3" / "opt" / "artifacts").exists()
    for old in cache.iterdir():
        old.unlink()
    hosts["n4"] = dict(hosts["n1"], deepep_prefix=str(tmp_path / "n4" / "opt"))
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    rc, out = run_inventory(node, fanout + ["-e", "deepep_offline=true", "--limit", "n4"])
    assert rc == 2, out
    assert "offline: the cache lacks the build n4 (fingerprint" in out
    assert not (tmp_path / "n4" / "opt" / "deepep" / "current").exists()


def test_build_once_install_everywhere_for_gdrcopy_and_nvshmem(node, tmp_path):
    """The GDRCopy library and a source NVSHMEM fan out like DeepEP: one build per fingerprint, the other nodes
    install the cached tree and verify it (NVSHMEM: nvshmem-info -a shows IBGDA on)."""
    cache = tmp_path / "cache"
    inventory = tmp_path / "nodes.json"

    def nodes(*names, **extra):
        hosts = {}
        for name in names:
            hosts[name] = dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                "deepep_prefix": str(tmp_path / name / "opt"), "deepep_python": node["python"]},
                               **extra)
        inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
        # Each node's layers land under its own deepep_prefix (the prefixes' defaults).
        return ["-i", str(inventory), "-e", json.dumps({"deepep_cache_dir": str(cache), "nvshmem_ibgda_method": "source"}),
                "--tags", "gdrcopy,nvshmem_ibgda"]

    rc, out = run_inventory(node, nodes("n1", "n2"))
    assert rc == 0, out
    assert fanout_roles(out, "GDRCopy") == {"n1": "build", "n2": "wait"}, out
    # NVSHMEM's tree records the GDRCopy it was built with, and each node's GDRCopy lives under its own prefix:
    # two fingerprints, two builds.
    assert fanout_roles(out, "NVSHMEM") == {"n1": "build", "n2": "build"}, out
    cached = sorted(p.name.split("-")[0] for p in cache.iterdir() if p.name.endswith(".tar.gz"))
    assert cached == ["gdrcopy", "nvshmem", "nvshmem"], cached
    assert len([p for p in cache.iterdir() if p.name.endswith(".tar.gz.sha256")]) == 3
    gdrcopy = [os.path.realpath(str(tmp_path / n / "opt" / "gdrcopy" / "current")) for n in ("n1", "n2")]
    assert os.path.basename(gdrcopy[0]) == os.path.basename(gdrcopy[1])
    # n2 installed n1's tree (its build.log came along) and ran the verify command itself.
    assert os.path.isfile(os.path.join(gdrcopy[1], "install.log")) and not os.path.isfile(
        os.path.join(gdrcopy[0], "install.log"))
    assert os.path.isfile(os.path.join(gdrcopy[1], "lib", "libgdrapi.so.2.5"))

    rc, out = run_inventory(node, nodes("n1", "n2"))
    assert rc == 0, out
    assert re.search(r"n1\s+: ok=\d+\s+changed=0", out) and re.search(r"n2\s+: ok=\d+\s+changed=0", out), out

    # Without GDRCopy the NVSHMEM inputs match across nodes: one builds, the other installs and checks the tree.
    rc, out = run_inventory(node, nodes("n3", "n4", gdrcopy_enabled=False))
    assert rc == 0, out
    assert fanout_roles(out, "NVSHMEM") == {"n3": "build", "n4": "wait"}, out
    n4 = os.path.realpath(str(tmp_path / "n4" / "opt" / "nvshmem" / "current"))
    n3 = os.path.realpath(str(tmp_path / "n3" / "opt" / "nvshmem" / "current"))
    assert os.path.basename(n3) == os.path.basename(n4)
    assert os.path.isfile(os.path.join(n4, "install.log")) and not os.path.isfile(os.path.join(n3, "install.log"))
    info = subprocess.run([os.path.join(n4, "bin", "nvshmem-info"), "-a"], capture_output=True, text=True,
                          check=True).stdout
    assert "NVSHMEM_IBGDA_SUPPORT=ON" in info


def v2_inputs(node, **more):
    """DeepEP V2 on fixtures: an interpreter whose torch loads its NCCL wheel's library (2.28.9, with its headers),
    the NCCL and DeepEP V2 fixture sources as archives, NCCL built from source by the nccl layer."""
    python = make_python_site(node["tmp"] / "venv2", nccl_runtime=(2, 28, 9))
    nccl_dir = node["tmp"] / "venv2" / "site-packages" / "nvidia" / "nccl"
    (nccl_dir / "include").mkdir()
    (nccl_dir / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n")
    archives = {}
    for name, fixture, top in (("nccl-2.30.7-1.tar.gz", "nccl_src", "nccl"), ("DeepEP-v2.tar.gz", "deepep_v2_src",
                                                                              "DeepEP")):
        archives[top] = node["tmp"] / name
        with tarfile.open(str(archives[top]), "w:gz") as tar:
            tar.add(os.path.join(FIXTURES, fixture), arcname=top)
    return dict({"deepep_version": "v2", "deepep_python": python, "deepep_src": str(archives["DeepEP"]),
                 "nccl_method": "source", "nccl_src": str(archives["nccl"]),
                 "nccl_prefix": str(node["prefix"] / "nccl"), "nccl_build_user": "", "nccl_build_poll": 1,
                 "deepep_verify_num_processes": 1}, **more)


def test_v2_end_to_end_nccl_then_deepep_built_against_it_tested_then_nothing_to_do(node):
    # DeepEP V2 on fixtures: the interpreter's torch loads its NCCL wheel's library (2.28.9, with its headers); the
    # nccl layer builds 2.30.7 and puts it there; DeepEP V2 (tests/fixtures/deepep_v2_src) is built against those
    # headers with the checked compiler, imported (deep_ep._C), tested (tests/elastic, the recorded 1 x H100
    # output), and the env script names the JIT cache. A second run changes nothing.
    extra = json.dumps(v2_inputs(node))
    nccl_dir = node["tmp"] / "venv2" / "site-packages" / "nvidia" / "nccl"
    rc, changed, out = run(node, "-e", extra)
    assert rc == 0, out
    current = node["prefix"] / "deepep" / "current" / "src"
    built = (current / "deep_ep" / "_C.py").read_text()
    assert "NCCL_HEADERS = '2.30.7'" in built and "NCCL_ROOT = '%s'" % nccl_dir in built and "CXX = 'g++'" in built
    assert "EP_NCCL_ROOT_DIR" not in (current / "deep_ep" / "envs.py").read_text()  # KF37
    reports = node["prefix"] / "reports"
    ep = json.loads((reports / "elastic_ep.json").read_text())
    assert ep["passed"] is True and ep["result"]["summary"]["min_dispatch_su_gbps"] == 1120.0
    assert json.loads((reports / "elastic_barrier.json").read_text())["result"]["summary"]["max_barrier_us"] == 1.931
    assert not (reports / "intranode.json").exists()
    # The JIT warm-up ran first and filled the cache; the tests after it compiled nothing.
    warmup = json.loads((reports / "jit_warmup.json").read_text())
    assert warmup["passed"] is True and warmup["jit"]["compiled"] == 10 and warmup["jit"]["kernels_before"] == 0
    assert warmup["command"][-2:] == ["--skip-check", "--skip-perf-test"]
    assert ep["jit"]["compiled"] == 0 and ep["jit"]["kernels"] == 10
    cache = node["prefix"] / "jit-cache"
    assert sorted(os.listdir(str(cache))) == ["cache", "tmp"] and oct(cache.stat().st_mode & 0o7777) == "0o755"
    script = (node["prefix"] / "env.sh").read_text()
    jit_line = ("if [ -w '{0}/cache' ] && [ -w '{0}/tmp' ]; then export EP_JIT_CACHE_DIR='{0}'; fi\n"
                .format(cache))
    assert jit_line in script, script
    # No RDMA NIC on this fixture node: NCCL has no Gin network, so V2 runs without its Gin backend (deepep_gin auto).
    assert "export EP_DISABLE_GIN='1'\n" in script, script
    assert re.search(r"\n +compiled: 10\n", out), out  # the warm-up in this node's recorded result
    jit_task = "TASK [moe_infra.deepep.deepep : Create DeepEP V2's JIT cache]"
    assert task_lines(out, jit_task).count("changed: [localhost] => (item=") == 3, out
    rc, changed, out = run(node, "-e", extra, "-vvv")  # -vvv: each module run names its module file
    assert rc == 0 and changed == 0, out
    assert re.search(r"\n +compiled: 10\n", out) and "item=jit_warmup" in out, out
    # The node's reading (preflight) shows the cache's directories as wanted: the task runs no module.
    assert "skipping: [localhost]" in task_lines(out, jit_task) and "(item=" not in task_lines(out, jit_task), out
    # The tests that passed are answered on the controller from that reading (deepep_bench's action plugin).
    tests = task_lines(out, "TASK [moe_infra.deepep.deepep : Run DeepEP's tests]")
    assert tests.count("reused: true") == 3 and "modules/deepep_bench.py" not in tests, tests
    assert "modules/deepep_facts.py" in out  # what a module run prints at -vvv
    # NCCL's build is in place and loaded, as the interpreter's reading shows: no module run puts it there again.
    assert "modules/nccl_runtime.py" not in out, out
    assert "skipping" in task_lines(out, "TASK [moe_infra.deepep.nccl : Put the build where torch loads NCCL"), out
    # One changed since (by hand) is read as such and set again, the others are not touched.
    (cache / "tmp").chmod(0o700)
    rc, changed, out = run(node, "-e", extra)
    assert rc == 0 and changed == 1, out
    assert task_lines(out, jit_task).count("(item=") == 1 and "changed: [localhost] => (item=%s/tmp)" % cache in out
    assert oct((cache / "tmp").stat().st_mode & 0o7777) == "0o755"


def test_v1_after_v2_puts_torchs_own_nccl_back_once(node):
    # A node that ran V1, then V2 (the nccl layer put its 2.30.7 build in place of the wheel's files), asked for V1
    # again: torch gets the wheel's own library back and the record goes; the kept V1 build goes live again with its
    # imports checked; the next V1 run changes nothing (docs/results/upgrade-v1-v2-h200 saw V2's NCCL stay under V1).
    v2 = v2_inputs(node, deepep_jit_warmup=False)
    nccl_dir = node["tmp"] / "venv2" / "site-packages" / "nvidia" / "nccl"
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    v1 = {"deepep_version": "v1", "deepep_python": v2["deepep_python"], "nccl_prefix": v2["nccl_prefix"]}
    restore = "TASK [moe_infra.deepep.nccl : Put torch's own NCCL files back (a V2 run put a build in their place)]"
    imports = "TASK [moe_infra.deepep.deepep : Check that deep_ep imports with the env script's environment"
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0, out
    assert "skipping" in task_lines(out, "TASK [Torch's own NCCL back for DeepEP V1]"), out
    v1_build = os.readlink(str(node["prefix"] / "deepep" / "current"))
    rc, changed, out = run(node, "-e", json.dumps(v2))
    assert rc == 0, out
    assert (nccl_dir / ".moe_infra_nccl.json").exists() and (nccl_dir / "lib" / "libnccl.so.2").read_bytes() != original
    # --check says what V1 would do (put the files back, switch back) and does neither.
    rc, changed, out = run(node, "-e", json.dumps(v1), "--check")
    assert rc == 0 and "changed: [localhost]" in task_lines(out, restore), out
    assert (nccl_dir / ".moe_infra_nccl.json").exists() and (nccl_dir / "lib" / "libnccl.so.2").read_bytes() != original
    assert os.readlink(str(node["prefix"] / "deepep" / "current")) != v1_build
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0, out
    assert "changed: [localhost]" in task_lines(out, restore), out
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original
    assert not (nccl_dir / ".moe_infra_nccl.json").exists()
    assert "switch current to the existing build" in out and os.readlink(str(node["prefix"] / "deepep" / "current")) \
        == v1_build, out
    assert imports in out and "ok: [localhost]" in task_lines(out, imports), out  # the switched-back build, checked
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0 and changed == 0, out
    assert restore not in out and "skipping" in task_lines(out, "TASK [Torch's own NCCL back for DeepEP V1]"), out
    assert imports not in out, out


def test_v2_with_gin_on_a_node_without_rdma_fails_like_the_gpu_machine_and_nothing_goes_live(node):
    # 2 x H100 without RDMA NICs (docs/results/site-v2-h100x2): with NCCL's Gin backend left on, test_ep.py's
    # ElasticBuffer of two ranks stops with "NCCL GIN is unavailable"; the build was rolled back. The fixture's
    # tests fail the same way (more than one rank, no Gin network, EP_DISABLE_GIN unset).
    extra = json.dumps(v2_inputs(node, deepep_gin="enabled", deepep_verify_num_processes=2, deepep_jit_warmup=False))
    nccl_dir = node["tmp"] / "venv2" / "site-packages" / "nvidia" / "nccl"
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    rc, changed, out = run(node, "-e", extra)
    assert rc != 0, out
    assert "DeepEP elastic_ep test failed: exit status 1; 0 of 2 ranks reported results" in out, out
    assert "The new build is not live" in out and "no env script was written" in out, out
    assert not (node["prefix"] / "deepep" / "current").exists()
    log = (node["prefix"] / "reports" / "elastic_ep.log").read_text()
    assert "NCCL GIN is unavailable" in log, log
    assert not (node["prefix"] / "env.sh").exists()
    # Nothing was installed before: torch loads its own NCCL again, as before the run.
    assert "torch's own NCCL files are back (NCCL 2.28.9)" in out, out
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original
    assert not (nccl_dir / ".moe_infra_nccl.json").exists()


def test_v2_that_fails_its_tests_on_a_v1_node_leaves_v1_with_torchs_own_nccl(node):
    # The upgrade a user asks for most: a node running V1 asked for V2, whose tests fail. The V1 build goes live
    # again and torch loads the NCCL it loaded under V1 (the nccl layer's 2.30.7 build goes back out); the next V1
    # run has nothing to undo.
    v2 = v2_inputs(node, deepep_gin="enabled", deepep_verify_num_processes=2, deepep_jit_warmup=False)
    nccl_dir = node["tmp"] / "venv2" / "site-packages" / "nvidia" / "nccl"
    original = (nccl_dir / "lib" / "libnccl.so.2").read_bytes()
    v1 = {"deepep_version": "v1", "deepep_python": v2["deepep_python"], "nccl_prefix": v2["nccl_prefix"]}
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0, out
    v1_build = os.readlink(str(node["prefix"] / "deepep" / "current"))
    rc, changed, out = run(node, "-e", json.dumps(v2))
    assert rc != 0, out
    assert "DeepEP elastic_ep test failed" in out and "The new build is not live" in out, out
    assert os.readlink(str(node["prefix"] / "deepep" / "current")) == v1_build
    assert "torch's own NCCL files are back (NCCL 2.28.9) in place of the nccl layer's;" in out, out
    assert (nccl_dir / "lib" / "libnccl.so.2").read_bytes() == original
    assert not (nccl_dir / ".moe_infra_nccl.json").exists()
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0 and changed == 0, out
    assert "skipping" in task_lines(out, "TASK [Torch's own NCCL back for DeepEP V1]"), out


def v2_from_the_nccl_wheel(node, **more):
    """V2 on fixtures with nccl_method wheel: an interpreter whose pip manages its NCCL wheel (a real venv without
    bin/pip, as on the GPU machine) at torch 2.11's 2.28.9, the fixture wheels 2.28.9 and 2.30.7 in a local
    directory (an air-gapped site's mirror). Returns (the V2 variables, the interpreter, the wheel directory)."""
    wheels = node["tmp"] / "wheels"
    wheels.mkdir()
    nccl_wheel(wheels, (2, 28, 9))
    nccl_wheel(wheels, (2, 30, 7), padding=1 << 20)  # cut short by a killed pip, loading it dies of SIGBUS
    python = make_pip_site(node["tmp"] / "pip-site", wheels)
    v2 = dict(v2_inputs(node, deepep_jit_warmup=False), deepep_python=python, nccl_method="wheel",
              nccl_pip_extra_args="--no-index --find-links %s" % wheels, **more)
    return v2, python, wheels


def test_v2_from_the_nccl_wheel_then_v1_installs_the_wheel_torch_came_with_again(node):
    # nccl_method wheel (the default) on an interpreter whose pip manages its NCCL wheel (a real venv, fixture
    # wheels 2.28.9 and 2.30.7 in a local directory, as an air-gapped site's mirror). A node running V1 asked for
    # V2 whose tests fail: V1 live again and pip puts torch's 2.28.9 back. A mirror without 2.28.9: said, and put
    # back by the next run that has it. V2 that passes upgrades the wheel, and V1 after it installs 2.28.9 again.
    # Then nothing to do.
    v2, python, wheels = v2_from_the_nccl_wheel(node)
    nccl_dir = node["tmp"] / "pip-site" / "site-packages" / "nvidia" / "nccl"
    record = nccl_dir / ".moe_infra_nccl_wheel.json"

    def wheel_version():
        return subprocess.run([python, "-c", "import importlib.metadata as md; print(md.version('nvidia-nccl-cu13'))"],
                              capture_output=True, text=True, check=True).stdout.strip()

    def loaded():
        return subprocess.run([python, "-c", "import ctypes; v = ctypes.c_int(); ctypes.CDLL(%r).ncclGetVersion("
                               "ctypes.byref(v)); print(v.value)" % str(nccl_dir / "lib" / "libnccl.so.2")],
                              capture_output=True, text=True, check=True).stdout.strip()

    failing_v2 = dict(v2, deepep_gin="enabled", deepep_verify_num_processes=2)
    v1 = {"deepep_version": "v1", "deepep_python": python, "nccl_prefix": v2["nccl_prefix"],
          "nccl_pip_extra_args": v2["nccl_pip_extra_args"]}
    back = "TASK [moe_infra.deepep.nccl : Install torch's NCCL wheel again (a V2 run upgraded it, or a stopped pip cut its library short)]"
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0, out
    v1_build = os.readlink(str(node["prefix"] / "deepep" / "current"))

    rc, changed, out = run(node, "-e", json.dumps(failing_v2))
    assert rc != 0 and "DeepEP elastic_ep test failed" in out and "The new build is not live" in out, out
    assert "changed: [localhost]" in task_lines(out, back), out
    assert "torch's own NCCL wheel is back (pip installed nvidia-nccl-cu13==2.28.9 again; NCCL 2.28.9);" in out, out
    assert os.readlink(str(node["prefix"] / "deepep" / "current")) == v1_build
    assert wheel_version() == "2.28.9" and loaded() == "22809" and not record.exists()

    # A mirror without the version torch came with: the rollback says so after what failed, V1 stops saying so;
    # the record stays, and the run after the mirror has it puts it back.
    stays = ("torch's NCCL wheel stays at 2.30.7 (the nccl layer's wheel method installed it for DeepEP V2): pip "
             "could not install nvidia-nccl-cu13==2.28.9, the version torch came with")
    (wheels / "nvidia_nccl_cu13-2.28.9-py3-none-any.whl").rename(wheels / "kept-aside")
    rc, changed, out = run(node, "-e", json.dumps(dict(failing_v2, deepep_network_retries=0)))
    assert rc != 0, out
    # What failed comes first, as without the wheel's trouble (the pip error does not take its place).
    assert ("Action failed: DeepEP elastic_ep test failed: exit status 1; 0 of 2 ranks reported results. The new "
            "build is not live") in out, out
    assert stays in out and "torch's own NCCL wheel is back" not in out and "files are back" not in out, out
    assert os.readlink(str(node["prefix"] / "deepep" / "current")) == v1_build
    assert wheel_version() == "2.30.7" and record.exists()
    rc, changed, out = run(node, "-e", json.dumps(dict(v1, deepep_network_retries=0)))
    assert rc != 0 and stays in out, out
    assert wheel_version() == "2.30.7" and record.exists()
    (wheels / "kept-aside").rename(wheels / "nvidia_nccl_cu13-2.28.9-py3-none-any.whl")
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0 and "changed: [localhost]" in task_lines(out, back), out
    assert wheel_version() == "2.28.9" and loaded() == "22809" and not record.exists()

    rc, changed, out = run(node, "-e", json.dumps(v2))
    assert rc == 0, out
    assert wheel_version() == "2.30.7" and loaded() == "23007"
    assert json.loads(record.read_text()) == {"package": "nvidia-nccl-cu13", "version": "2.30.7",
                                              "version_before": "2.28.9"}
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0 and "changed: [localhost]" in task_lines(out, back), out
    assert wheel_version() == "2.28.9" and loaded() == "22809" and not record.exists()
    assert os.readlink(str(node["prefix"] / "deepep" / "current")) == v1_build
    rc, changed, out = run(node, "-e", json.dumps(v1))
    assert rc == 0 and changed == 0, out
    assert "skipping" in task_lines(out, "TASK [Torch's own NCCL back for DeepEP V1]"), out


def test_ctrl_c_while_pip_upgrades_the_nccl_wheel_leaves_v1_what_to_put_back(node):
    # The operator's Ctrl-C while the wheel method's pip runs (the whole foreground group gets SIGINT): once pip
    # had installed 2.30.7, the record of the version before was already written, so DeepEP V1 installs torch's
    # 2.28.9 again; before pip changed anything, the wheel is torch's and the record names a version not installed
    # (nothing for V1 to do), and the next V2 run upgrades as usual. The interpreter as the wheel method's pip runs
    # it is a wrapper (a fixture) that waits there, after pip's install or before it.
    v2, python, wheels = v2_from_the_nccl_wheel(node)
    nccl_dir = node["tmp"] / "pip-site" / "site-packages" / "nvidia" / "nccl"
    record = nccl_dir / ".moe_infra_nccl_wheel.json"
    marker = node["tmp"] / "pip-reached"
    slow = node["tmp"] / "slow-pip-python"

    def wheel_version():
        return subprocess.run([python, "-c", "import importlib.metadata as md; print(md.version('nvidia-nccl-cu13'))"],
                              capture_output=True, text=True, check=True).stdout.strip()

    def interrupted_v2(after_install):
        install = '"%s" "$@"; ' % python if after_install else ""
        slow.write_text('#!/bin/sh\ncase "$*" in *"-m pip install"*) %stouch "%s"; sleep 120; exit 1 ;; esac\n'
                        'exec "%s" "$@"\n' % (install, marker, python))
        slow.chmod(0o755)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
        cmd = [PLAYBOOK_BIN, "-i", os.path.join(REPO, "inventories", "local"),
               os.path.join(REPO, "playbooks", "deepep.yml"), "-e", json.dumps(VARIABLES(node)),
               "-e", json.dumps(dict(v2, deepep_python=str(slow))), "--tags", "nccl"]
        with open(str(node["tmp"] / "interrupted.log"), "w") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            deadline = time.time() + 300
            while not marker.exists() and proc.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            assert marker.exists(), (node["tmp"] / "interrupted.log").read_text()
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        marker.unlink()
        assert proc.returncode != 0

    v1 = {"deepep_version": "v1", "deepep_python": python, "nccl_prefix": v2["nccl_prefix"],
          "nccl_pip_extra_args": v2["nccl_pip_extra_args"]}
    back = "TASK [moe_infra.deepep.nccl : Install torch's NCCL wheel again (a V2 run upgraded it, or a stopped pip cut its library short)]"
    interrupted_v2(after_install=True)
    assert wheel_version() == "2.30.7"
    assert json.loads(record.read_text()) == {"package": "nvidia-nccl-cu13", "version": "2.30.7",
                                              "version_before": "2.28.9"}
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    assert rc == 0 and "changed: [localhost]" in task_lines(out, back), out
    assert wheel_version() == "2.28.9" and not record.exists()

    interrupted_v2(after_install=False)
    assert wheel_version() == "2.28.9" and record.exists()
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    assert rc == 0 and changed == 0 and wheel_version() == "2.28.9", out
    rc, changed, out = run(node, "-e", json.dumps(v2), "--tags", "nccl")
    assert rc == 0 and wheel_version() == "2.30.7", out
    assert json.loads(record.read_text())["version_before"] == "2.28.9"


def nccl_wheel_version(python):
    """The interpreter's nvidia-nccl-cu13 as its metadata says ('' when none is installed)."""
    return subprocess.run([python, "-c", "import importlib.metadata as md; print(md.version('nvidia-nccl-cu13'))"],
                          capture_output=True, text=True, check=False).stdout.strip()


def pip_leftovers(nccl_dir):
    """What a stopped pip left of the NCCL wheel: ~-named directories in its directory and its dist-info's stash."""
    return [name for name in os.listdir(str(nccl_dir)) if name.startswith("~")] + [
        name for name in os.listdir(str(nccl_dir.parent.parent)) if name.startswith("~") and "nccl" in name]


def test_a_pip_killed_half_way_through_the_nccl_wheel_is_finished_by_the_next_v1_or_v2_run(node):
    # pip killed with SIGKILL (the OOM killer, kill -9) after its uninstall of torch's 2.28.9, half-way through
    # writing 2.30.7's library (the fixture's wrapper interpreter; the GPU machine's case): no NCCL wheel installed,
    # and importing torch dies of SIGBUS. Said so; --check for V1 and V2 says what each would install and changes
    # nothing; then a DeepEP V1 run installs 2.28.9 again, and after the same once more, a whole V2 site.yml run
    # installs the pin and builds.
    v2, python, wheels = v2_from_the_nccl_wheel(node)
    nccl_dir = node["tmp"] / "pip-site" / "site-packages" / "nvidia" / "nccl"
    record = nccl_dir / ".moe_infra_nccl_wheel.json"
    killed = killed_pip_interpreter(python, node["tmp"] / "killed-pip-python", during="library")
    said = "torch is missing its own NCCL; nvidia-nccl-cu13 half-installed (a pip changing it was stopped before it finished"

    def killed_v2():
        rc, changed, out = run(node, "-e", json.dumps(dict(v2, deepep_python=killed)), "--tags", "nccl")
        assert rc != 0 and re.sub(r"\s+", " ", out).count(
            "torch's NCCL wheel stays half-installed (no nvidia-nccl-cu13 installed: a pip changing it was stopped "
            "before it finished; torch cannot load its own NCCL until one is): run again (the nccl layer installs it then), "
            "or set nccl_method: source. pip: pip was killed by signal 9 (SIGKILL)"), out
        assert nccl_wheel_version(python) == "" and pip_leftovers(nccl_dir) and json.loads(record.read_text()) == {
            "package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9"}

    killed_v2()
    v1 = {"deepep_version": "v1", "deepep_python": python, "nccl_prefix": v2["nccl_prefix"],
          "nccl_pip_extra_args": v2["nccl_pip_extra_args"]}
    back = "TASK [moe_infra.deepep.nccl : Install torch's NCCL wheel again (a V2 run upgraded it, or a stopped pip cut its library short)]"
    # --check on the half-installed node: each version's nccl layer says what it would install, and nothing changes.
    for variables, task in ((v1, back), (v2, "TASK [moe_infra.deepep.nccl : Install the NCCL wheel torch loads, "
                                             "at the pinned version]")):
        before = pip_leftovers(nccl_dir)
        rc, changed, out = run(node, "-e", json.dumps(variables), "--check")
        assert rc == 0 and said in re.sub(r"\s+", " ", out) and "changed: [localhost]" in task_lines(out, task), out
        assert nccl_wheel_version(python) == "" and pip_leftovers(nccl_dir) == before
        assert json.loads(record.read_text()) == {
            "package": "nvidia-nccl-cu13", "version": "2.30.7", "version_before": "2.28.9"}
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    flat = re.sub(r"\s+", " ", out)
    assert rc == 0 and said in flat and "pip-install nvidia-nccl-cu13==2.28.9 again" in flat, out
    assert nccl_wheel_version(python) == "2.28.9" and not record.exists() and not pip_leftovers(nccl_dir)

    killed_v2()
    # As a user runs it: site.yml's preflight leaves the wheel to the nccl layer (torch is installed, not imported).
    rc, changed, out = run(node, *site_args(node), "-e", json.dumps(v2), playbook="site.yml")
    assert rc == 0 and said in re.sub(r"\s+", " ", out), out
    assert nccl_wheel_version(python) == "2.30.7" and not pip_leftovers(nccl_dir)
    assert (node["prefix"] / "deepep" / "current").exists()
    assert json.loads(record.read_text())["version_before"] == "2.28.9"


def test_another_pip_killed_half_way_through_the_nccl_wheel_is_finished_by_the_next_run(node):
    # A pip that was not the nccl layer's (a user's `pip install -U`: no record) killed with SIGKILL half-way through
    # writing 2.30.7's library over torch's 2.28.9: importing torch dies of SIGBUS, which stopped every later run at
    # preflight ("could not run the probe: it died of signal 7 (SIGBUS)"). The stash pip's uninstall left names
    # 2.28.9: a V1 run installs it again; after the same once more, a whole V2 site.yml run installs the pin and
    # builds, with 2.28.9 as the version to go back to.
    v2, python, wheels = v2_from_the_nccl_wheel(node)
    nccl_dir = node["tmp"] / "pip-site" / "site-packages" / "nvidia" / "nccl"
    record = nccl_dir / ".moe_infra_nccl_wheel.json"
    killed = killed_pip_interpreter(python, node["tmp"] / "killed-pip-python", during="library")
    said = ("torch is missing its own NCCL; nvidia-nccl-cu13 half-installed (a pip changing it was stopped before it finished; "
            "it was replacing 2.28.9)")

    def user_pip_killed():
        subprocess.run([killed, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--find-links", str(wheels),
                        "nvidia-nccl-cu13==2.30.7"], check=False)
        assert nccl_wheel_version(python) == "" and pip_leftovers(nccl_dir) and not record.exists()
        assert subprocess.run([python, "-c", "import torch"], check=False).returncode == -signal.SIGBUS

    user_pip_killed()
    v1 = {"deepep_version": "v1", "deepep_python": python, "nccl_prefix": v2["nccl_prefix"],
          "nccl_pip_extra_args": v2["nccl_pip_extra_args"]}
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    flat = re.sub(r"\s+", " ", out)
    assert rc == 0 and said in flat, out
    assert "pip-install nvidia-nccl-cu13==2.28.9 again, the version a stopped pip was replacing" in flat, out
    assert nccl_wheel_version(python) == "2.28.9" and not record.exists() and not pip_leftovers(nccl_dir)
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    assert rc == 0 and changed == 0, out

    user_pip_killed()
    rc, changed, out = run(node, *site_args(node), "-e", json.dumps(v2), playbook="site.yml")
    assert rc == 0 and said in re.sub(r"\s+", " ", out), out
    assert nccl_wheel_version(python) == "2.30.7" and not pip_leftovers(nccl_dir)
    assert (node["prefix"] / "deepep" / "current").exists()
    assert json.loads(record.read_text()) == {"package": "nvidia-nccl-cu13", "version": "2.30.7",
                                              "version_before": "2.28.9"}


def test_a_pip_install_ignore_installed_killed_in_the_nccl_library_is_repaired_by_the_next_run(node):
    # `pip install -I` (a user's ignore-installed: no uninstall, no stash, no record) killed with SIGKILL half-way
    # through writing 2.30.7's library over torch's 2.28.9: the metadata still says 2.28.9, importing torch dies of
    # SIGBUS. The library not being the size its RECORD gives says what happened: a V1 run installs 2.28.9 again
    # over it; after the same once more, a whole V2 site.yml run installs the pin and builds; the pin's library cut
    # short the same way, V2's nccl layer installs the pin again over it and keeps 2.28.9 to go back to.
    v2, python, wheels = v2_from_the_nccl_wheel(node)
    nccl_dir = node["tmp"] / "pip-site" / "site-packages" / "nvidia" / "nccl"
    record = nccl_dir / ".moe_infra_nccl_wheel.json"
    library = nccl_dir / "lib" / "libnccl.so.2"
    recorded = library.stat().st_size
    killed = killed_pip_interpreter(python, node["tmp"] / "killed-pip-python", during="library")
    said = ("torch is missing its own NCCL; nvidia-nccl-cu13 half-installed (a pip changing it was stopped before it finished; "
            "its metadata names 2.28.9)")

    def ignore_installed_killed(installed="2.28.9"):
        subprocess.run([killed, "-m", "pip", "install", "-q", "-I", "--no-deps", "--no-index", "--find-links",
                        str(wheels), "nvidia-nccl-cu13==2.30.7"], check=False)
        assert nccl_wheel_version(python) == installed and library.stat().st_size != recorded
        assert not pip_leftovers(nccl_dir) and record.exists() == (installed != "2.28.9")
        assert subprocess.run([python, "-c", "import torch"], check=False).returncode == -signal.SIGBUS

    ignore_installed_killed()
    v1 = {"deepep_version": "v1", "deepep_python": python, "nccl_prefix": v2["nccl_prefix"],
          "nccl_pip_extra_args": v2["nccl_pip_extra_args"]}
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    flat = re.sub(r"\s+", " ", out)
    assert rc == 0 and said in flat, out
    assert "pip-install nvidia-nccl-cu13==2.28.9 again, the version its metadata names, over its cut-short library" in flat
    back = ("TASK [moe_infra.deepep.nccl : Install torch's NCCL wheel again (a V2 run upgraded it, or a stopped pip cut "
            "its library short)]")
    assert "changed: [localhost]" in task_lines(out, back), out
    assert nccl_wheel_version(python) == "2.28.9" and library.stat().st_size == recorded and not record.exists()
    assert subprocess.run([python, "-c", "import torch"], check=False).returncode == 0
    rc, changed, out = run(node, "-e", json.dumps(v1), "--tags", "nccl")
    assert rc == 0 and changed == 0, out

    ignore_installed_killed()
    rc, changed, out = run(node, *site_args(node), "-e", json.dumps(v2), playbook="site.yml")
    assert rc == 0 and said in re.sub(r"\s+", " ", out), out
    assert nccl_wheel_version(python) == "2.30.7" and not pip_leftovers(nccl_dir)
    assert (node["prefix"] / "deepep" / "current").exists()
    assert json.loads(record.read_text()) == {"package": "nvidia-nccl-cu13", "version": "2.30.7",
                                              "version_before": "2.28.9"}

    recorded = library.stat().st_size
    ignore_installed_killed(installed="2.30.7")
    rc, changed, out = run(node, "-e", json.dumps(v2), "--tags", "nccl")
    flat = re.sub(r"\s+", " ", out)
    assert rc == 0 and said.replace("its metadata names", "torch came with") in flat, out
    assert ("pip-install nvidia-nccl-cu13==2.30.7 again, over its cut-short library (the version before kept for "
            "DeepEP V1)") in flat, out
    pin_task = "TASK [moe_infra.deepep.nccl : Install the NCCL wheel torch loads, at the pinned version]"
    assert "changed: [localhost]" in task_lines(out, pin_task), out
    assert nccl_wheel_version(python) == "2.30.7" and library.stat().st_size == recorded
    assert subprocess.run([python, "-c", "import torch"], check=False).returncode == 0
    assert json.loads(record.read_text()) == {"package": "nvidia-nccl-cu13", "version": "2.30.7",
                                              "version_before": "2.28.9"}


def test_v2_from_the_nccl_wheel_on_an_interpreter_without_pip_is_named_and_the_wheel_stays_torchs(node):
    # The wheel method runs the interpreter's pip; one without (a venv made without it) is named before pip runs:
    # the wheel stays torch's, no DeepEP build is made.
    v2, python, _wheels = v2_from_the_nccl_wheel(node)
    subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "pip"], check=True)
    rc, changed, out = run(node, "-e", json.dumps(v2))
    assert rc != 0, out
    assert ("nccl: %s has no pip, which nccl_method wheel runs (python -m pip) to install "
            "nvidia-nccl-cu13==2.30.7: add it (python -m ensurepip), or set nccl_method: source." % python) in out, out
    version = subprocess.run([python, "-c", "import importlib.metadata as md; print(md.version('nvidia-nccl-cu13'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == "2.28.9" and not (node["prefix"] / "deepep" / "current").exists()
    # site.yml names it at its preflight, before the system layers and GDRCopy change the node (there the nccl
    # layer would have come after them); the plan's nccl line says why.
    site = site_args(node)
    before = sorted((str(path), path.stat().st_mtime_ns) for path in node["prefix"].rglob("*"))
    rc, changed, out = run(node, *site, "-e", json.dumps(v2), playbook="site.yml")
    flat = re.sub(r"\s+", " ", out)
    assert rc != 0 and ("deepep_python: %r is not accepted (it has no pip, which nccl_method wheel runs (python -m "
                        "pip) to install NCCL 2.30.7); accepted: an interpreter with pip (python -m ensurepip), or "
                        "nccl_method: source. Nothing was changed." % python) in flat, out
    assert ("nccl blocked torch loads NCCL 2.28.9; nvidia-nccl-cu13 2.28.9 -- the interpreter has no pip to install "
            "NCCL 2.30.7 with") in flat, out
    assert "moe_infra.deepep.gdrcopy :" not in out and "moe_infra.deepep.nccl :" not in out, out
    assert sorted((str(path), path.stat().st_mtime_ns) for path in node["prefix"].rglob("*")) == before


@pytest.mark.parametrize("nccl_method", ["wheel", "source"])
def test_v2_with_the_role_owned_venv_in_check_mode_says_what_it_would_do_and_writes_nothing(node, nccl_method):
    # The deepep role's venv does not exist before a real run creates it: --check says what each layer would do
    # with it instead of failing on the missing interpreter, and changes nothing.
    index = make_wheel_index(node["tmp"] / "index")
    variables = dict(v2_inputs(node), deepep_python="", deepep_venv=str(node["prefix"] / "venv"),
                     deepep_torch_version="2.11.0+cu130", deepep_torch_index_url=index,
                     deepep_pip_extra_args="--index-url %s" % index, nccl_method=nccl_method)
    rc, changed, out = run(node, "-e", json.dumps(variables), "--check")
    assert rc == 0, out
    assert "the deepep role creates %s" % (node["prefix"] / "venv") in out
    assert ("check mode: %s does not exist yet; NCCL 2.30.7 (nccl_method %s) is provided where its torch loads NCCL "
            "once it does" % (node["prefix"] / "venv" / "bin" / "python", nccl_method)) in re.sub(r"\s+", " ", out), out
    assert not (node["prefix"] / "venv").exists() and not (node["prefix"] / "nccl").exists()
    assert not (node["prefix"] / "deepep").exists()
