# -*- coding: utf-8 -*-
"""scripts/run-molecule with a lifecycle run that `make test` started first (--start) and that has already ended
when the molecule stage gets to it: its result and log are taken, it is not run a second time (a rerun overwrote a
failed run's log and cost a passed one ~17 minutes of CI). podman, qemu and molecule are stand-in commands."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def executable(path, text):
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def tree(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(REPO, "scripts", "run-molecule"), tmp_path / "scripts" / "run-molecule")
    executable(tmp_path / "scripts" / "podman-node-image", "exit 0\n")
    (tmp_path / "molecule" / "lifecycle").mkdir(parents=True)
    (tmp_path / "molecule" / "lifecycle" / "molecule.yml").write_text("---\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "podman", "exit 0\n")
    executable(bin_dir / "qemu-system-x86_64", "exit 0\n")
    executable(bin_dir / "molecule", 'echo "$*" >> "$MOLECULE_CALLS"\necho "molecule ran again"\n')
    build = tmp_path / ".build"
    build.mkdir()
    # Its own stage-times file: under `make test` STAGE_TIMES names the real table, which a stand-in run must not
    # add a line to.
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), MOLECULE_CALLS=str(tmp_path / "calls"),
               STAGE_TIMES=str(build / "stage-times"))
    return build, env


def ended_pid():
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def run(tmp_path, env):
    return subprocess.run(["sh", "scripts/run-molecule", "lifecycle"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)


def test_an_ended_failed_run_is_reported_not_rerun(tmp_path):
    build, env = tree(tmp_path)
    (build / "molecule-lifecycle.started").write_text("%d\n" % ended_pid())
    (build / "molecule-lifecycle.rc").write_text("2\n")
    (build / "molecule-lifecycle.log").write_text("the first run's log: converge failed\n")

    result = run(tmp_path, env)

    assert result.returncode == 1
    assert "the first run's log: converge failed" in result.stdout
    assert not (tmp_path / "calls").exists()
    assert (build / "molecule-lifecycle.log").read_text() == "the first run's log: converge failed\n"


def test_an_ended_passed_run_counts(tmp_path):
    build, env = tree(tmp_path)
    (build / "molecule-lifecycle.started").write_text("%d\n" % ended_pid())
    (build / "molecule-lifecycle.rc").write_text("0\n")
    (build / "molecule-lifecycle.log").write_text("lifecycle passed\n")

    result = run(tmp_path, env)

    assert result.returncode == 0
    assert "lifecycle passed" in result.stdout
    assert not (tmp_path / "calls").exists()


def test_without_an_earlier_start_it_runs(tmp_path):
    build, env = tree(tmp_path)

    result = run(tmp_path, env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "calls").read_text().startswith("test -s lifecycle")
    assert "molecule ran again" in (build / "molecule-lifecycle.log").read_text()
    (line,) = (build / "stage-times").read_text().splitlines()
    assert line.split()[0] == "lifecycle" and line.endswith(" s  passed")
