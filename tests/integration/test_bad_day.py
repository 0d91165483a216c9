# -*- coding: utf-8 -*-
"""An operator's bad day, on the fixture node of test_deepep_playbook.py: one fault at a time injected into a run
on a node where an earlier build works (deepep.yml, stand-in DeepEP source). Each case checks that the old install
still works (the env script sourced in a clean shell imports deep_ep from the old build), that the message names
the cause and what to do, and that a run without the fault recovers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import pytest
import yaml

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import PrefixLock
from ansible_collections.moe_infra.deepep.tests.fixtures.dpkg_root import PACKAGE, make_broken_dpkg_root
# node and shared_inputs are pytest fixtures: imported to be used by name.
from ansible_collections.moe_infra.deepep.tests.integration.test_deepep_playbook import (  # noqa: F401  pylint: disable=unused-import
    FIXTURES, PLAYBOOK_BIN, REPO, VARIABLES, make_node, node, run, run_inventory, shared_inputs)


def deepep_archive(tmp_path, name, setup_prefix="", marker=None):
    """The stand-in DeepEP source, with lines put before its setup.py (a failing or slow build) or a marker file (a
    new source: another fingerprint)."""
    tree = tmp_path / ("src-" + name) / "DeepEP"
    shutil.copytree(os.path.join(FIXTURES, "deepep_src"), str(tree))
    if setup_prefix:
        setup = tree / "setup.py"
        setup.write_text(setup_prefix + setup.read_text())
    if marker:
        init = tree / "deep_ep" / "__init__.py"
        init.write_text(init.read_text() + "MARKER = %r\n" % marker)
    archive = tmp_path / ("DeepEP-%s.tar.gz" % name)
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tree), arcname="DeepEP")
    return archive


def live_build(node):
    """The build the env script's clean shell imports deep_ep from (its directory under builds/), or the error."""
    script = node["prefix"] / "env.sh"
    probe = "import deep_ep, os; print(os.path.realpath(deep_ep.__file__))"
    proc = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", '. "$1" && cd / && "$2" -c "$3"', "-",
                           str(script), node["python"], probe], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return "error: " + proc.stderr.strip()[-300:]
    path = proc.stdout.strip()
    builds = str(node["prefix"] / "deepep" / "builds") + "/"
    return path[len(builds):].split("/")[0] if path.startswith(builds) else path


def current(node):
    link = node["prefix"] / "deepep" / "current"
    return os.path.basename(os.readlink(str(link))) if os.path.islink(str(link)) else None


def installed_wheel(node):
    """What the wheel next to torch holds (the fixture's extension records its build's marker)."""
    path = node["tmp"] / "venv" / "site-packages" / "deep_ep" / "__init__.py"
    text = path.read_text() if path.exists() else ""
    return text.split("MARKER = ")[1].strip().strip("'") if "MARKER = " in text else "(no marker)"


@pytest.fixture(scope="module")
def first_build(tmp_path_factory, shared_inputs):
    """A node with a first build that passed everything, made once per module (per shard), its tree kept aside:
    (the node, its fingerprint, the archive of a new source, the kept tree)."""
    base = tmp_path_factory.mktemp("first-build")
    (base / "node").mkdir()
    node = make_node(base / "node", shared_inputs)
    old = deepep_archive(base, "old", marker="old")
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % old)
    assert rc == 0, out
    fp = current(node)
    assert live_build(node) == fp and installed_wheel(node) == "old"
    shutil.copytree(str(node["tmp"]), str(base / "kept"), symlinks=True)
    return node, fp, deepep_archive(base, "new", marker="new"), base / "kept"


@pytest.fixture
def provisioned(first_build):
    """The node as its first build left it, for each test: the kept tree copied back to the same place (the run
    recorded absolute paths: the env script, current, the wheel's records). (node, fingerprint, new archive)."""
    node, fp, new, kept = first_build
    shutil.rmtree(str(node["tmp"]))
    shutil.copytree(str(kept), str(node["tmp"]), symlinks=True)
    return node, fp, new


def assert_old_install_works(node, fp):
    assert current(node) == fp
    assert live_build(node) == fp
    assert installed_wheel(node) == "old"


def test_a_build_whose_tests_fail_is_rolled_back_current_wheel_and_env_script(provisioned, tmp_path):
    node, fp, new = provisioned
    env_script = (node["prefix"] / "env.sh").read_text()
    # As after a torch upgrade: --tags deepep (the rollback runs whatever the tags selected).
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % new, "-e", '{"deepep_intranode_thresholds": {"dispatch_fp8": 255}}',
                         "--tags", "deepep")
    assert rc == 2, out
    assert "DeepEP intranode test failed: dispatch_fp8 246.63 < 255 GB/s." in out
    assert "is not live: rolled back from" in out and "points at the previous build %s again" % fp in out, out
    assert "the wheel: installed" in out and "the env script was not changed" in out
    assert "Fix the cause and run again" in out
    assert_old_install_works(node, fp)
    assert (node["prefix"] / "env.sh").read_text() == env_script
    failed = [n for n in os.listdir(str(node["prefix"] / "deepep" / "builds")) if n != fp]
    assert len(failed) == 1
    assert "dispatch_fp8 246.63 < 255" in (node["prefix"] / "deepep" / "builds" / failed[0] / "FAILED").read_text()
    # Without the fault: built again (not switched to), tested, live.
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % new)
    assert rc == 0, out
    assert current(node) == failed[0] and live_build(node) == failed[0] and installed_wheel(node) == "new"


def test_a_first_install_whose_tests_fail_leaves_nothing_live(node, tmp_path):
    rc, dummy, out = run(node, "-e", '{"deepep_intranode_thresholds": {"dispatch_fp8": 255}}')
    assert rc == 2, out
    assert "current removed (nothing was installed before)" in out and "the wheel: removed deep_ep-1.2.1.dist-info" in out
    assert "no env script was written" in out and "the env script was not changed" not in out, out
    assert current(node) is None and installed_wheel(node) == "(no marker)"
    assert not (node["tmp"] / "venv" / "site-packages" / "deep_ep").exists()
    assert not (node["prefix"] / "env.sh").exists()
    rc, dummy, out = run(node)
    assert rc == 0, out
    assert live_build(node) == current(node)


def test_a_build_whose_tests_fail_leaves_the_controller_cache_and_is_built_anew(node, tmp_path):
    # 2 x H200 (docs/results/v2-rollback-h200x2): the build that failed its tests stayed in the controller cache, and
    # the next run installed it from there instead of building it anew as the message said.
    cache = tmp_path / "cache"
    extra = {"deepep_cache_dir": str(cache)}
    rc, dummy, out = run(node, "-e", json.dumps(dict(extra, deepep_intranode_thresholds={"dispatch_fp8": 255})))
    assert rc == 2, out
    (fp,) = os.listdir(str(node["prefix"] / "deepep" / "builds"))
    entry = cache / ("deepep-%s.tar.gz" % fp)
    flat = " ".join(out.replace("''", "'").split())
    assert "removed from the controller cache: %s" % entry in flat, out
    assert not entry.exists() and not (cache / (entry.name + ".sha256")).exists()
    assert not (node["prefix"] / "artifacts" / entry.name).exists()  # the node's export of it
    rc, dummy, out = run(node, "-e", json.dumps(extra))
    assert rc == 0, out
    assert "installed from the controller cache" not in out and current(node) == fp, out
    assert entry.exists() and (cache / (entry.name + ".sha256")).exists()


def test_a_failed_build_is_named_reduced_to_its_log_and_the_old_one_stays(provisioned, tmp_path):
    node, fp, dummy = provisioned
    broken = deepep_archive(tmp_path, "broken", "import sys\nprint('error: nvcc died')\nsys.exit(3)\n", marker="new")
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % broken)
    assert rc == 2, out
    assert "build of deepep failed (exit 3)" in out and "current still points at the previous build %s" % fp in out
    assert "the failed build was reduced to its log" in out and "GiB free on the prefix's filesystem" in out
    assert_old_install_works(node, fp)
    failed = [n for n in os.listdir(str(node["prefix"] / "deepep" / "builds")) if n != fp]
    assert len(failed) == 1
    assert sorted(os.listdir(str(node["prefix"] / "deepep" / "builds" / failed[0]))) == ["FAILED", "build.log"]
    assert "error: nvcc died" in (node["prefix"] / "deepep" / "builds" / failed[0] / "build.log").read_text()
    assert not [n for n in os.listdir(str(node["prefix"] / "deepep" / "builds")) if "." in n]  # no scratch
    rc, dummy, out = run(node)
    assert rc == 0, out


@pytest.mark.parametrize("damage, words", [
    (lambda data: data[:len(data) // 2], "is damaged (truncated: "),
    (lambda data: b"<html>503 Service Unavailable</html>\n" * 50, "is damaged ("),
], ids=["truncated", "not-gzip"])
def test_a_damaged_source_archive_is_named_and_changes_nothing(provisioned, tmp_path, damage, words):
    node, fp, new = provisioned
    bad = tmp_path / "DeepEP-damaged.tar.gz"
    bad.write_bytes(damage(new.read_bytes()))
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % bad)
    assert rc == 2, out
    flat = " ".join(out.split())
    assert words in flat and "nothing was built from it. Replace it with a good copy and run again" in flat, out
    assert_old_install_works(node, fp)
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % new)
    assert rc == 0, out
    assert installed_wheel(node) == "new"


def test_a_damaged_cache_entry_is_named_on_the_controller_and_leaves_no_scratch(node, tmp_path):
    cache = tmp_path / "cache"
    hosts = {}
    for name in ("n1", "n2"):
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "deepep_prefix": str(tmp_path / name / "opt"), "deepep_python": node["python"]}
    inventory = tmp_path / "nodes.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    fanout = ["-i", str(inventory), "-e", json.dumps({"deepep_cache_dir": str(cache)}), "--skip-tags",
              "deepep_verify", "--tags", "deepep", "--forks", "1"]
    rc, out = run_inventory(node, fanout + ["--limit", "n1"])
    assert rc == 0, out
    (entry,) = [p for p in cache.iterdir() if p.name.endswith(".tar.gz")]
    entry.write_bytes(entry.read_bytes()[:300])  # a copy cut short
    # Its bytes no longer match the digest recorded when it was fetched: refused on the controller.
    rc, out = run_inventory(node, fanout + ["--limit", "n2"])
    assert rc == 2, out
    assert "does not match the digest recorded when it was fetched" in " ".join(out.split()), out
    assert not (tmp_path / "n2" / "opt" / "deepep" / "current").exists()
    # A carried-in cache whose record was made from the damaged copy: the node finds the damage itself.
    record = cache / (entry.name + ".sha256")
    record.write_text("%s  %s\n" % (hashlib.sha256(entry.read_bytes()).hexdigest(), entry.name))
    rc, out = run_inventory(node, fanout + ["--limit", "n2"])
    assert rc == 2, out
    flat = " ".join(out.replace("''", "'").split())  # YAML folds and quotes the message
    assert "the build archive the controller cache's %s (%s on the controller) is damaged (truncated: " % (
        entry.name, entry) in flat, out
    assert "ansible-tmp-" not in out  # the temporary copy on the node is never what the operator is told about
    assert "nothing was installed from it" in out and "Delete it and run again" in out
    builds = tmp_path / "n2" / "opt" / "deepep" / "builds"
    assert not (tmp_path / "n2" / "opt" / "deepep" / "current").exists() and os.listdir(str(builds)) == []
    entry.unlink()
    record.unlink()
    rc, out = run_inventory(node, fanout + ["--limit", "n2"])
    assert rc == 0, out


def test_a_second_run_refuses_naming_the_run_that_holds_the_lock(provisioned, tmp_path):
    node, fp, new = provisioned
    other = PrefixLock(str(node["prefix"] / "deepep"))
    other.acquire(0, dict(name="deepep", action="building", fingerprint="0123456789abcdef", run_by="ops@ctl pid 7"))
    try:
        rc, dummy, out = run(node, "-e", "deepep_src=%s" % new, "-e", "deepep_lock_timeout=2")
    finally:
        other.release()
    assert rc == 2, out
    assert "another run holds deepep's lock on this node: pid %d on " % os.getpid() in out
    assert "building deepep 0123456789abcdef (run by ops@ctl pid 7)" in out and "Nothing was changed" in out
    assert_old_install_works(node, fp)
    assert os.listdir(str(node["prefix"] / "deepep" / "builds")) == [fp]
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % new)
    assert rc == 0, out


def test_ctrl_c_stops_the_background_build_and_a_rerun_waits_for_it(provisioned, tmp_path):
    node, fp, new = provisioned
    pid_file = tmp_path / "build.pid"
    slow = deepep_archive(tmp_path, "slow", "import os, time\nopen(%r, 'w').write(str(os.getpid()))\n"
                          "print('[ 10%%] compiling', flush=True)\ntime.sleep(300)\n" % str(pid_file), marker="slow")
    proc, log = _start(node, tmp_path, slow)
    builds = node["prefix"] / "deepep" / "builds"
    started = _wait_for_build(node, fp, log)
    os.killpg(proc.pid, signal.SIGINT)  # the operator's Ctrl-C reaches the whole foreground group
    proc.wait(timeout=60)
    assert proc.returncode != 0
    interrupted_at = time.time()
    # The build goes on for a while (nobody can tell it at once); a rerun at once waits for it, then builds.
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % new)
    assert rc == 0, out
    assert time.time() - interrupted_at < 200
    assert "stopped: nobody checked on this build" in _read(builds / started / "build.log")
    assert sorted(os.listdir(str(builds / started))) == ["FAILED", "build.log"]
    assert installed_wheel(node) == "new" and live_build(node) == current(node) != fp
    assert not os.path.exists("/proc/%s" % pid_file.read_text().strip())  # the build's process was ended


def _read(path):
    try:
        return path.read_text()
    except OSError:
        return ""


def test_a_new_build_that_does_not_import_is_caught_despite_the_old_wheel_and_rolled_back(provisioned, tmp_path):
    """The build's import check runs with PYTHONPATH=<the new build>, which a real interpreter searches before the
    site-packages holding the old wheel (the stand-in interpreter once did not, so this check passed on the old
    wheel and the broken build went live)."""
    node, fp, dummy = provisioned
    broken = deepep_archive(tmp_path, "no-import", marker="new")
    init = tmp_path / "src-no-import" / "DeepEP" / "deep_ep" / "__init__.py"
    init.write_text("raise ImportError('undefined symbol: _ZNK3c1010TensorImpl (fixture)')\n" + init.read_text())
    with tarfile.open(str(broken), "w:gz") as tar:
        tar.add(str(init.parent.parent), arcname="DeepEP")
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % broken)
    assert rc == 2, out
    flat = " ".join(out.split())
    assert "verification (the build itself succeeded) of deepep failed" in flat, out
    assert "current still points at the previous build %s" % fp in flat
    failed = [n for n in os.listdir(str(node["prefix"] / "deepep" / "builds")) if n != fp]
    assert "undefined symbol: _ZNK3c1010TensorImpl (fixture)" in _read(
        node["prefix"] / "deepep" / "builds" / failed[0] / "build.log")
    assert_old_install_works(node, fp)
    rc, dummy, out = run(node)
    assert rc == 0, out


def test_two_runs_at_once_the_second_refuses_and_the_first_finishes(provisioned, tmp_path):
    node, fp, new = provisioned
    # The first run's build goes on until the test lets it finish (however slow the machine is that day).
    release = tmp_path / "release"
    slow = deepep_archive(tmp_path, "slow", "import os, time\nprint('[ 10%%] compiling', flush=True)\n"
                          "for _ in range(400):\n    if os.path.exists(%r):\n        break\n    time.sleep(0.5)\n"
                          % str(release), marker="slow")
    first, log = _start(node, tmp_path, slow)
    started = _wait_for_build(node, fp, log)
    rc, dummy, out = run(node, "-e", "deepep_src=%s" % new, "-e", "deepep_lock_timeout=1")
    assert rc == 2, out
    flat = " ".join(out.split())
    assert "another run holds deepep's lock on this node" in flat and "building deepep %s" % started in flat, out
    assert "Nothing was changed" in flat
    assert (node["prefix"] / "deepep" / "builds" / started / "src").is_dir()  # not removed as debris
    assert first.poll() is None  # still building: the refusal was not the end of the first run
    release.write_text("")
    assert first.wait(timeout=240) == 0, log.read_text()
    assert current(node) == started and installed_wheel(node) == "slow" and live_build(node) == started


def _start(node, tmp_path, archive):
    variables = dict(VARIABLES(node), deepep_src=str(archive))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    cmd = [PLAYBOOK_BIN, "-i", os.path.join(REPO, "inventories", "local"),
           os.path.join(REPO, "playbooks", "deepep.yml"), "-e", json.dumps(variables)]
    log = tmp_path / ("run-%s.log" % os.path.basename(str(archive)))
    with open(str(log), "w") as handle:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log


def _wait_for_build(node, old_fp, log):
    builds = node["prefix"] / "deepep" / "builds"
    deadline = time.time() + 240
    while time.time() < deadline:
        time.sleep(1)
        for name in os.listdir(str(builds)):
            if name != old_fp and "[ 10%] compiling" in _read(builds / name / "build.log"):
                return name
    raise AssertionError(log.read_text())


def _dpkg_state(root):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(PLAYBOOK_BIN), "ansible"), "localhost", "-c", "local",
                           "-m", "moe_infra.deepep.dpkg_state", "-a", "root=%s" % root], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg and dpkg-deb (Debian, Ubuntu)")
def test_a_failed_package_script_is_named_then_repaired_once_its_cause_is_fixed(tmp_path):
    root = make_broken_dpkg_root(tmp_path)
    rc, out = _dpkg_state(root)
    assert rc != 0, out
    assert "dpkg --configure -a failed: package %s: installed %s package post-installation script" % (
        PACKAGE, PACKAGE) in out and "Your kernel headers for kernel 6.8.0-1015-gcp cannot be found." in out, out
    (root / "ok").write_text("")
    rc, out = _dpkg_state(root)
    assert rc == 0 and "repaired packages left half-done (%s)" % PACKAGE in out, out
    rc, out = _dpkg_state(root)
    assert rc == 0 and "changed: false" in out, out


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg and dpkg-deb (Debian, Ubuntu)")
def test_a_dpkg_run_cut_off_mid_install_is_repaired_before_apt(tmp_path):
    root = make_broken_dpkg_root(tmp_path, interrupted=True)
    (root / "ok").write_text("")
    rc, out = _dpkg_state(root)
    assert rc == 0 and "repaired an interrupted dpkg run with dpkg --configure -a" in out, out
    assert list((root / "var" / "lib" / "dpkg" / "updates").iterdir()) == []


def _install_block_with_rescue(path):
    """The layer's install block whose rescue names a failed maintainer script (dpkg_state failed_step)."""
    def blocks(items):
        for task in items or []:
            if isinstance(task, dict) and "block" in task:
                yield task
                for key in ("block", "rescue", "always"):
                    yield from blocks(task.get(key))
    with open(os.path.join(REPO, path)) as handle:
        found = [task for task in blocks(yaml.safe_load(handle)) if any(
            "failed_step" in (step.get("moe_infra.deepep.dpkg_state") or {}) for step in task.get("rescue") or [])]
    assert len(found) == 1, path
    return found[0]


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg and dpkg-deb (Debian, Ubuntu)")
@pytest.mark.parametrize("path, step", [
    ("roles/doca_ofed/tasks/install.yml", "doca_ofed: installing the DOCA-OFED packages"),
    ("roles/cuda/tasks/install.yml", "cuda: installing cuda-toolkit-12-9"),
    ("roles/nvidia_driver/tasks/install.yml", "nvidia_driver: installing nvidia-open-580 nvidia-utils-580")])
def test_a_layers_install_whose_package_script_fails_is_not_retried_and_names_it(tmp_path, path, step):
    """The layer's own install block and rescue, its apt task replaced by dpkg installing the fixture package whose
    postinst fails (dpkg's output in stdout, as apt-get prints it), with the same register, until and retries."""
    make_broken_dpkg_root(tmp_path)  # builds tmp_path/fixture.deb
    root = tmp_path / "node"
    for sub in ("info", "updates", "triggers"):
        (root / "var" / "lib" / "dpkg" / sub).mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").write_text("")
    block = _install_block_with_rescue(path)
    apt_task = next(task for task in block["block"] if "ansible.builtin.apt" in task)
    stand_in = dict((key, apt_task[key]) for key in ("name", "register", "until", "retries", "delay"))
    stand_in["ansible.builtin.command"] = {"argv": ["sh", "-c", 'dpkg "--root=$1" --force-script-chrootless --install '
                                                    '"$2" 2>&1', "sh", str(root), str(tmp_path / "fixture.deb")]}
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "module_defaults": {"moe_infra.deepep.dpkg_state": {"root": str(root)}},
             "vars": {"deepep_network_retries": 2, "deepep_network_retry_delay": 0, "__cuda_package": "cuda-toolkit-12-9",
                      "__nvidia_driver_missing": ["nvidia-open-580", "nvidia-utils-580"],
                      "__nvidia_driver_decision": {"packages": ["nvidia-open-580", "nvidia-utils-580"]},
                      "doca_ofed_packages": ["doca-ofed"]},
             "tasks": [{"name": "Install", "block": [stand_in], "rescue": block["rescue"]}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([PLAYBOOK_BIN, str(tmp_path / "play.yml")], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    install, named = tasks[0]["hosts"]["localhost"], tasks[1]["hosts"]["localhost"]
    assert install["failed"] and install["attempts"] == 1, install  # not tried again
    assert named["msg"].startswith("%s failed: package %s: installed %s package post-installation script subprocess "
                                   "returned error exit status 1; its output ends: " % (step, PACKAGE, PACKAGE)), named
    assert "Error! Your kernel headers for kernel 6.8.0-1015-gcp cannot be found" in named["msg"]
    assert named["msg"].endswith("dpkg is left half-done (%s): the next run repairs it first (dpkg --configure -a). "
                                 "Fix the cause, then run the play again." % PACKAGE)
