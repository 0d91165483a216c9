# -*- coding: utf-8 -*-
from __future__ import annotations

import json
import threading
import time

from ansible_collections.moe_infra.deepep.plugins.modules import source_build_status as module


def test_running_build_gives_its_phase_and_keeps_the_job_file(run_module, tmp_path):
    job = tmp_path / "j1.2"
    # What ansible-core's async wrapper writes when the job starts.
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1.2"}))
    log = tmp_path / "build.log"
    log.write_text("$ make -j16 lib lib_install\n[ 50%] Building C object src/gdrapi.o\n")
    result, failed = run_module(module, dict(results_file=str(job), log=str(log)))
    assert not failed and result["finished"] is False and result["result"] == {}
    assert result["phase"] == "make -j16 lib lib_install: [50%] Building C object src/gdrapi.o"
    assert job.exists()


def test_finished_build_gives_its_result_and_removes_the_job_file(run_module, tmp_path):
    job = tmp_path / "j1.3"
    job.write_text(json.dumps({"changed": True, "action": "build", "fingerprint": "3f9a0c1d2b4e5f60"}))
    result, failed = run_module(module, dict(results_file=str(job), log=str(tmp_path / "missing.log")))
    assert not failed and result["finished"] is True and result["result"]["fingerprint"] == "3f9a0c1d2b4e5f60"
    assert result["phase"] == "starting" and not job.exists()


def test_half_written_job_file_is_a_running_build(run_module, tmp_path):
    job = tmp_path / "j1.4"
    job.write_text('{"changed": tr')
    result, failed = run_module(module, dict(results_file=str(job)))
    assert not failed and result["finished"] is False and job.exists()


def test_missing_job_file_says_what_happened(run_module, tmp_path):
    result, failed = run_module(module, dict(results_file=str(tmp_path / "gone")))
    assert failed and "the background build is gone" in result["msg"]


def test_wait_answers_as_soon_as_the_build_ends(run_module, tmp_path):
    # The job ends 0.6 s into a 30 s wait: the answer comes then, with the result, not after the wait.
    job = tmp_path / "j1.5"
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1.5"}))

    def finish():
        time.sleep(0.6)
        job.write_text(json.dumps({"changed": True, "action": "build", "fingerprint": "ab" * 8}))
    writer = threading.Thread(target=finish)
    writer.start()
    started = time.time()
    result, failed = run_module(module, dict(results_file=str(job), wait=30))
    writer.join()
    assert not failed and result["finished"] is True and result["result"]["fingerprint"] == "ab" * 8
    assert 0.5 < time.time() - started < 5


def test_wait_on_a_build_that_goes_on_answers_after_the_wait(run_module, tmp_path):
    job = tmp_path / "j1.6"
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1.6"}))
    started = time.time()
    result, failed = run_module(module, dict(results_file=str(job), wait=0.8))
    assert not failed and result["finished"] is False and job.exists()
    assert 0.7 < time.time() - started < 5
