# -*- coding: utf-8 -*-
"""scripts/run-integration's shards share one list of tests (TEST_CLAIMS, tests/conftest.py's pytest_runtestloop):
each test runs once, in one shard, a shard that holds a slow test leaves the rest to the others, and module
fixtures are set up and torn down as in one pytest process. The tests it runs are fixtures written here."""
from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RECORDER = '''
import os
import time

import pytest


def record(line):
    with open(os.environ["CLAIMS_LOG"], "a") as handle:
        handle.write("%d %s\\n" % (os.getpid(), line))


@pytest.fixture(scope="module")
def module_state(request):
    record("setup " + request.module.__name__)
    yield
    record("teardown " + request.module.__name__)
'''

SLOW = RECORDER + '''

def test_slow(module_state):
    # Holds its shard until another shard has run 6 of test_short.py's 8 tests: a fixed split would give the other
    # shard about half of them, and this test would fail at the deadline.
    deadline = time.time() + 120
    while time.time() < deadline:
        with open(os.environ["CLAIMS_LOG"]) as handle:
            lines = [line.split() for line in handle]
        if sum(1 for pid, *what in lines if what[:1] == ["ran"] and int(pid) != os.getpid() and "short" in what[1]) >= 6:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no other shard took test_short.py's tests")
    record("ran slow")
'''

SHORT = RECORDER + '''

@pytest.mark.parametrize("number", range(8))
def test_short(module_state, number):
    record("ran short%d" % number)
'''

LAST = RECORDER + '''

@pytest.mark.parametrize("number", range(3))
def test_last(module_state, number):
    record("ran last%d" % number)
'''


def test_each_test_runs_once_and_a_shard_with_a_slow_test_leaves_the_rest_to_the_others(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(REPO, "scripts", "run-integration"), str(tmp_path / "scripts"))
    tests = tmp_path / "tests" / "integration"
    tests.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "tests", "conftest.py"), str(tmp_path / "tests"))
    for name, text in (("test_a_slow.py", SLOW), ("test_b_short.py", SHORT), ("test_c_last.py", LAST)):
        (tests / name).write_text(text)
    log = tmp_path / "claims.log"
    log.write_text("")
    env = dict(os.environ, CLAIMS_LOG=str(log), TEST_JOBS="2")
    proc = subprocess.run([os.path.join("scripts", "run-integration"), sys.executable], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    ran = collections.Counter(what for _pid, what in lines if what.startswith("ran "))
    assert sorted(ran) == sorted(["ran slow"] + ["ran short%d" % n for n in range(8)] + ["ran last%d" % n for n in range(3)])
    assert set(ran.values()) == {1}, ran
    by_shard = collections.defaultdict(list)
    for pid, what in lines:
        by_shard[pid].append(what)
    assert len(by_shard) == 2, lines
    # Each shard set up the module fixture of every module it ran a test of, once, and tore it down after.
    for events in by_shard.values():
        modules = [what.split()[1] for what in events if what.startswith("setup ")]
        assert len(modules) == len(set(modules))
        assert sorted(what.split()[1] for what in events if what.startswith("teardown ")) == sorted(modules)
        for module in modules:
            assert events.index("setup " + module) < events.index("teardown " + module)
    assert "passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout
