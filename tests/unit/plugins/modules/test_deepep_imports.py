# -*- coding: utf-8 -*-
"""deepep_imports on the stand-in interpreter of tests/fixtures/python_site.py: a build tree on PYTHONPATH, a wheel
in the interpreter's site-packages, the record written only when both imported as they must."""
from __future__ import annotations

import os

from ansible_collections.moe_infra.deepep.plugins.modules import deepep_facts
from ansible_collections.moe_infra.deepep.plugins.modules import deepep_imports as module
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.python_site import (make_python_site, probes_overlapped,
                                                                             timing_interpreter)


def tree_with_deep_ep(root, body="MARKER = 'tree'\n"):
    package = root / "deep_ep"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body)
    return str(root)


def wheel_in(site):
    package = site / "deep_ep"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("MARKER = 'wheel'\n")


def test_both_imports_pass_then_the_record_is_written(run_module, tmp_path):
    python = make_python_site(tmp_path / "py")
    site = tmp_path / "py" / "site-packages"
    wheel_in(site)
    record = tmp_path / "imports.node-record"
    result, failed = run_module(module, {"python": python, "src_dir": tree_with_deep_ep(tmp_path / "build"),
                                         "wheel_site_dir": str(site), "record": str(record), "record_key": "k1",
                                         "environment": {"PYTHONPATH": "/elsewhere", "X": "1"}})
    assert not failed, result
    assert result["changed"] is False and result["checked"] is True
    # The build tree is searched before the site-packages that hold the wheel; without it the wheel imports.
    assert result["with_build_tree"]["file"] == str(tmp_path / "build" / "deep_ep" / "__init__.py")
    assert result["installed_wheel"]["file"] == str(site / "deep_ep" / "__init__.py")
    assert record.read_text() == "k1\n" and oct(record.stat().st_mode & 0o777) == "0o644"


def test_a_build_that_does_not_import_fails_and_writes_no_record(run_module, tmp_path):
    python = make_python_site(tmp_path / "py")
    record = tmp_path / "imports.node-record"
    tree = tree_with_deep_ep(tmp_path / "build", "raise ImportError('undefined symbol: _ZN3c10 (fixture)')\n")
    result, failed = run_module(module, {"python": python, "src_dir": tree, "record": str(record), "record_key": "k"})
    assert failed and result["msg"] == ("import deep_ep failed from / with %s on PYTHONPATH: ImportError: undefined "
                                        "symbol: _ZN3c10 (fixture)" % tree)
    assert result["with_build_tree"]["undefined_symbol"] is True and not record.exists()


def test_a_wheel_that_is_not_what_imports_fails(run_module, tmp_path):
    python = make_python_site(tmp_path / "py")
    record = tmp_path / "imports.node-record"
    # No deep_ep in the interpreter's site-packages: without the build tree nothing imports.
    result, failed = run_module(module, {"python": python, "src_dir": tree_with_deep_ep(tmp_path / "build"),
                                         "wheel_site_dir": str(tmp_path / "venv" / "site-packages"),
                                         "record": str(record), "record_key": "k"})
    assert failed and result["msg"].startswith("import deep_ep without PYTHONPATH: ModuleNotFoundError")
    assert result["msg"].endswith("not the wheel installed in %s" % (tmp_path / "venv" / "site-packages"))
    assert not record.exists()
    # A wheel elsewhere than the site directory named: refused too, naming the file that imported.
    wheel_in(tmp_path / "py" / "site-packages")
    result, failed = run_module(module, {"python": python, "src_dir": tree_with_deep_ep(tmp_path / "build2"),
                                         "wheel_site_dir": str(tmp_path / "venv" / "site-packages")})
    assert failed and "import deep_ep without PYTHONPATH: %s, not the wheel" % (
        tmp_path / "py" / "site-packages" / "deep_ep" / "__init__.py") in result["msg"]


def test_check_mode_imports_and_writes_nothing(run_module, tmp_path):
    record = tmp_path / "imports.node-record"
    result, failed = run_module(module, {"python": str(tmp_path / "not-there-yet"), "src_dir": str(tmp_path / "b"),
                                         "record": str(record), "record_key": "k"}, check_mode=True)
    assert not failed and result["checked"] is False and result["changed"] is False, result
    assert not os.path.exists(str(record))


def recording(tmp_path, name):
    """A deep_ep __init__ (fixture) that writes when its import began and ended, with a second between."""
    return ("import os, time\nwith open(os.path.join(%r, %r + '.began'), 'w') as f: f.write(repr(time.time()))\n"
            "time.sleep(1.5)\nwith open(os.path.join(%r, %r + '.ended'), 'w') as f: f.write(repr(time.time()))\n"
            % (str(tmp_path), name, str(tmp_path), name))


def test_the_two_imports_run_at_once(run_module, tmp_path):
    python = make_python_site(tmp_path / "py")
    site = tmp_path / "py" / "site-packages"
    (site / "deep_ep").mkdir(parents=True)
    (site / "deep_ep" / "__init__.py").write_text(recording(tmp_path, "wheel"))
    tree = tree_with_deep_ep(tmp_path / "build", recording(tmp_path, "tree"))
    result, failed = run_module(module, {"python": python, "src_dir": tree, "wheel_site_dir": str(site)})
    assert not failed, result
    began = dict((name, float((tmp_path / (name + ".began")).read_text())) for name in ("tree", "wheel"))
    ended = dict((name, float((tmp_path / (name + ".ended")).read_text())) for name in ("tree", "wheel"))
    # Each began before the other ended: the imports overlapped (one after the other, one began after the other
    # ended).
    assert began["tree"] < ended["wheel"] and began["wheel"] < ended["tree"], (began, ended)


def test_the_interpreter_read_runs_beside_the_imports_and_the_next_read_answers_from_the_cache(run_module, tmp_path):
    python = make_python_site(tmp_path / "py", nccl_runtime=(2, 30, 7))
    site = tmp_path / "py" / "site-packages"
    wheel_in(site)
    tree = tree_with_deep_ep(tmp_path / "build")
    log = tmp_path / "probes.log"
    timed = timing_interpreter(python, log)
    cache = str(tmp_path / "cache")
    result, failed = run_module(module, {"python": timed, "src_dir": tree, "wheel_site_dir": str(site),
                                         "environment": {"X": "1"}, "cache_dir": cache,
                                         "read_interpreter": True})
    assert not failed, result
    # The two imports, the stack probe and the build tree's import without the environment: all four at once.
    assert probes_overlapped(log) == (4, True)
    reading = result["interpreter"]
    assert reading["cached"] is False and reading["torch"]["nccl"] == "2.30.7"
    assert reading["deep_ep"]["file"] == str(tmp_path / "build" / "deep_ep" / "__init__.py")
    # The deepep role's next task (probe.yml): the deepep facts' interpreter read with the same options starts no
    # interpreter and answers what the import check read.
    machines.h200_no_nics(tmp_path / "sys")
    facts, failed = run_module(deepep_facts, {
        "sysfs_root": str(tmp_path / "sys"), "procfs_root": str(tmp_path / "sys" / "proc"),
        "interpreter": {"python": timed, "pythonpath": [tree], "cache_dir": cache, "run_as": ""}})
    assert not failed, facts
    assert probes_overlapped(log)[0] == 4
    assert facts["ansible_facts"]["deepep"]["interpreter"] == dict(reading, cached=True)


def test_without_read_interpreter_no_reading_is_made(run_module, tmp_path):
    python = make_python_site(tmp_path / "py")
    log = tmp_path / "probes.log"
    result, failed = run_module(module, {"python": timing_interpreter(python, log, seconds=0),
                                         "src_dir": tree_with_deep_ep(tmp_path / "build")})
    assert not failed and "interpreter" not in result and probes_overlapped(log)[0] == 1, result
