# -*- coding: utf-8 -*-
"""source_build's action plugin through ansible-playbook: a background build prints its step, its build tool's
progress and the elapsed time at each check; an archive on the controller is confirmed by its digest without being
on the node; bad values for what only the action plugin reads are refused with a message."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
# What a cmake build prints between source_build's "$ <command>" lines.
# Each phase lasts longer than a check takes (the interval plus the status call, 2 s or more on a busy machine).
SLOW_BUILD = 'for p in 10 40 80; do echo "[ $p%] Building C object src/x$p.o"; sleep 3; done'


def play(tmp_path, *tasks):
    (tmp_path / "pb.yml").write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    result = subprocess.run([PLAYBOOK_BIN, "-i", "localhost,", "-c", "local", "-e",
                             "ansible_python_interpreter=%s" % sys.executable, "pb.yml"],
                            cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)
    return result.returncode, result.stdout + result.stderr


def build_task(tmp_path, **extra):
    args = dict(name="demo", src=str(tmp_path / "src"), prefix=str(tmp_path / "opt"), build_command="true")
    args.update(extra)
    return {"moe_infra.deepep.source_build": args, "register": "built"}


def test_a_background_build_prints_its_phase(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "input.txt").write_text("hello\n")
    # The plan names the log the checks read (build_fanout passes its plan's the same way).
    plan = dict(build_task(tmp_path, build_command=SLOW_BUILD), check_mode=True, register="plan")
    task = build_task(tmp_path, build_command=SLOW_BUILD, build_timeout=120, progress_interval=1,
                      progress_log="{{ plan.log }}")
    rc, out = play(tmp_path, plan, task)
    assert rc == 0, out
    lines = re.findall(r"^  demo on localhost: (\d+) s, (.*)$", out, re.M)
    assert lines, out
    assert any("[40%] Building C object src/x40.o" in phase for dummy, phase in lines), lines
    assert all(phase.startswith("for p in 10 40 80") or phase == "starting" for dummy, phase in lines), lines
    assert "ASYNC POLL" not in out
    assert os.readlink(str(tmp_path / "opt" / "current")).startswith("builds/")


def test_an_archive_on_the_controller_is_confirmed_without_a_copy(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "input.txt").write_text("hello\n")
    archive = tmp_path / "demo.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tmp_path / "src"), arcname="demo")
    node_copy = tmp_path / "node" / "demo.tar.gz"
    task = build_task(tmp_path, src=str(node_copy), controller_src=str(archive),
                      controller_cache=str(tmp_path / "cache"))
    say = {"ansible.builtin.debug": {"msg": "needs_source={{ built.needs_source }} cached={{ built.cached }}"}}
    rc, out = play(tmp_path, dict(task, check_mode=True), say)
    assert rc == 0 and "needs_source=True cached=False" in out, out
    # Without the copy a build is refused before anything is built, saying what to do.
    rc, out = play(tmp_path, task)
    assert rc == 2 and "is not on the node" in out and "copy it there first" in out, out
    node_copy.parent.mkdir()
    node_copy.write_bytes(archive.read_bytes())
    rc, out = play(tmp_path, task)
    assert rc == 0 and "changed: [localhost]" in out, out
    # Built: confirmed by the controller's digest alone, the node's copy gone.
    node_copy.unlink()
    rc, out = play(tmp_path, task, say)
    assert rc == 0 and "needs_source=False cached=False" in out and "changed=0" in out, out
    # The controller cache holding this fingerprint (the artifact and its digest record) is read in the same call.
    fingerprint = os.path.basename(os.readlink(str(tmp_path / "opt" / "current")))
    (tmp_path / "cache").mkdir(mode=0o700)
    (tmp_path / "cache" / ("demo-%s.tar.gz" % fingerprint)).write_bytes(b"")
    rc, out = play(tmp_path, task, say)
    assert rc == 0 and "needs_source=False cached=False" in out, out  # no record: not counted
    (tmp_path / "cache" / ("demo-%s.tar.gz.sha256" % fingerprint)).write_text(
        "%s  demo-%s.tar.gz\n" % (hashlib.sha256(b"").hexdigest(), fingerprint))
    rc, out = play(tmp_path, task, say)
    assert rc == 0 and "needs_source=False cached=True" in out, out


def test_bad_values_for_the_action_plugin_are_refused(tmp_path):
    (tmp_path / "src").mkdir()
    rc, out = play(tmp_path, build_task(tmp_path, build_timeout="soon"))
    assert rc == 2 and "build_timeout and progress_interval are whole numbers of seconds" in out, out
    rc, out = play(tmp_path, build_task(tmp_path, controller_src=str(tmp_path / "missing.tar.gz")))
    assert rc == 2 and "controller_src: %s is not on the controller" % (tmp_path / "missing.tar.gz") in out, out
    not_archive = tmp_path / "notes.txt"
    not_archive.write_text("x")
    rc, out = play(tmp_path, build_task(tmp_path, controller_src=str(not_archive)))
    assert rc == 2 and "is not accepted; accepted: a tar archive" in out, out
    assert not (tmp_path / "opt").exists()
    rc, out = play(tmp_path, build_task(tmp_path, controller_artifact=str(tmp_path / "cache" / "demo-0.tar.gz")))
    assert rc == 2 and "controller_artifact: %s is not on the controller" % (tmp_path / "cache" / "demo-0.tar.gz") \
        in out, out
    assert not (tmp_path / "opt").exists()


def test_a_cached_build_is_sent_and_installed_in_one_task(tmp_path):
    """controller_artifact: the cache's archive goes to the node's temporary directory and is installed from there;
    the reason names the cache entry, and nothing of it is left on the node."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "input.txt").write_text("hello\n")
    first = build_task(tmp_path, prefix=str(tmp_path / "a"), artifact_out=str(tmp_path / "cache" / "demo.tar.gz"))
    rc, out = play(tmp_path, first)
    assert rc == 0 and (tmp_path / "cache" / "demo.tar.gz").is_file(), out
    # What build_fanout records when it fetches an artifact: its digest, beside it.
    (tmp_path / "cache" / "demo.tar.gz.sha256").write_text("%s  demo.tar.gz\n" % hashlib.sha256(
        (tmp_path / "cache" / "demo.tar.gz").read_bytes()).hexdigest())
    second = dict(build_task(tmp_path, prefix=str(tmp_path / "b"), artifact_in=str(tmp_path / "b-artifacts" / "x.tar.gz"),
                             controller_artifact=str(tmp_path / "cache" / "demo.tar.gz")))
    show = {"ansible.builtin.debug": {"msg": "{{ built.action }}: {{ built.reason }}"}}
    rc, out = play(tmp_path, second, show)
    assert rc == 0, out
    assert "artifact: installed from the controller cache's demo.tar.gz (built once on another node)" in out, out
    assert os.readlink(str(tmp_path / "b" / "current")) == os.readlink(str(tmp_path / "a" / "current"))
    assert not (tmp_path / "b-artifacts").exists()
    # In check mode nothing is sent: the install is predicted from artifact_in, which is not on the node.
    rc, out = play(tmp_path, dict(second, check_mode=True), show)
    assert rc == 0 and "ok: [localhost]" in out, out


def test_through_become_the_source_goes_with_the_build_and_the_export_comes_back_by_slurp(tmp_path):
    """As on a cloud node (a login user, become for root; here su from root): a background build of a controller
    archive gets the archive in the task (send_source), and its export comes back to the controller cache through
    become (slurp, as the fetch action reads under become), with the digest record made on the controller."""
    tree = tmp_path / "tree" / "demo"
    tree.mkdir(parents=True)
    (tree / "input.txt").write_text("hello\n")
    archive = tmp_path / "demo.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tree), arcname="demo")
    cache = tmp_path / "cache"
    task = dict(build_task(tmp_path, src=str(tmp_path / "node" / "sources" / "demo.tar.gz"),
                           controller_src=str(archive), send_source=True, build_timeout=120, progress_interval=1,
                           build_command="cp input.txt built.txt", artifact_out=str(tmp_path / "node" / "demo.tar.gz"),
                           controller_cache=str(cache)),
                become=True, become_method="su")
    rc, out = play(tmp_path, task, {"debug": {"var": "built"}})
    assert rc == 0, out
    assert (tmp_path / "node" / "sources" / "demo.tar.gz").read_bytes() == archive.read_bytes()
    assert (tmp_path / "opt" / "current" / "src" / "built.txt").read_text() == "hello\n"
    (entry,) = [p for p in cache.iterdir() if p.name.endswith(".tar.gz")]
    assert entry.read_bytes() == (tmp_path / "node" / "demo.tar.gz").read_bytes()
    assert (cache / (entry.name + ".sha256")).read_text() == "%s  %s\n" % (
        hashlib.sha256(entry.read_bytes()).hexdigest(), entry.name)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    flat = " ".join(out.split())
    assert '"source_installed": true' in flat and '"fetched": "%s"' % entry in flat, out
