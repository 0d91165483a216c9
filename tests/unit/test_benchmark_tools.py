# -*- coding: utf-8 -*-
"""The build benchmarks' result tools (scripts/build_benchmark_compare.py, scripts/cpu_samples_phases.py and the
phase/sample helpers of scripts/gpu-bench-common; scripts/qemu_cpu_share.py for CI runs), on a committed run's
results as the fixture: what they print and write must be what that run committed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN2 = os.path.join(REPO, "docs", "results", "build-v2-both-orders-h200x2", "run2")
# The hand steps' seconds as the run printed them (its times.txt: "hand: gdrcopy 2.9 s, nccl 124.9 s, ...").
HAND = ["gdrcopy=2.9", "nccl=124.9", "deepep=98.6", "env_script=0.1"]
ROWS = [["GDRCopy library", "GDRCopy library", "gdrcopy"],
        ["NCCL build + put where torch loads it", "NCCL for DeepEP V2", "nccl"],
        ["DeepEP wheel + install, env script", "DeepEP", "deepep,env_script"]]


def script(name, *args, **kwargs):
    return subprocess.run([sys.executable, os.path.join(REPO, "scripts", name)] + list(args), capture_output=True,
                          text=True, check=False, **kwargs)


def test_the_comparison_of_a_committed_run_is_that_run_s_compare_txt_and_json(tmp_path):
    out = tmp_path / "run2"
    shutil.copytree(RUN2, str(out))
    os.remove(str(out / "compare.json"))
    args = [str(out), "--hand"] + HAND
    for row in ROWS:
        args += ["--row"] + row
    proc = script("build_benchmark_compare.py", *(args + ["--cpu", "nccl", "--cpu", "deepep"]))
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(RUN2, "compare.txt")) as handle:
        assert proc.stdout == handle.read()
    with open(os.path.join(RUN2, "compare.json")) as committed:
        assert json.loads((out / "compare.json").read_text()) == json.load(committed)
    assert "collection / hand = 1.089 with the hand first: meets 1.10" in proc.stdout


def test_cpu_phases_of_a_committed_run_from_bounds_given_and_from_phases_txt(tmp_path):
    bounds = ["warm-up=1795859529:1795859825", "collection first=1795859830:1795860069",
              "hand NCCL=1795860072:1795860197", "hand DeepEP=1795860197:1795860296",
              "hand first (collection)=1795860296:1795860543"]
    proc = script("cpu_samples_phases.py", os.path.join(RUN2, "cpu-samples.log"), *bounds)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(RUN2, "cpu-phases.txt")) as handle:
        assert proc.stdout == handle.read()
    # The same phases written as gpu-bench-common's phase() writes them: one folder argument.
    shutil.copy(os.path.join(RUN2, "cpu-samples.log"), str(tmp_path))
    (tmp_path / "phases.txt").write_text("hand-nccl 1795860072 1795860197\nempty 1 2\n")
    proc = script("cpu_samples_phases.py", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "hand-nccl                 120 s  busy  90.1 %  steal 0.02 %  MHz 2100",
        "empty                    fewer than two samples"]


def test_steal_and_busy_are_shares_of_all_cpu_time(tmp_path):
    # Two samples 10 s apart: of 1000 ticks, 600 user, 100 system, 200 idle, 100 steal.
    log = tmp_path / "cpu-samples.log"
    log.write_text("100 cpu  1000 0 500 9000 10 0 0 50 0 0 mhz 2000\n"
                   "110 cpu  1600 0 600 9200 10 0 0 150 0 0 mhz 1900\n")
    proc = script("cpu_samples_phases.py", str(log), "all=100:110", "none=200:300")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["all                        10 s  busy  70.0 %  steal 10.00 %  MHz 1900 2000",
                                        "none                     fewer than two samples"]


def test_the_benchmark_helpers_record_each_phase_and_sample_the_cpus_until_exit(tmp_path):
    # Waits for the second sample (one every 5 s) rather than sleeping a fixed time: a loaded machine is late.
    shell = ('out="$1"; . "$2"; sample_cpu; start=$(now); sleep 1; phase a-step "$start"; '
             'for i in $(seq 120); do [ "$(wc -l < "$out/cpu-samples.log")" -ge 2 ] && break; sleep 0.5; done')
    proc = subprocess.run(["bash", "-c", shell, "-", str(tmp_path), os.path.join(REPO, "scripts", "gpu-bench-common")],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    name, start, end = (tmp_path / "phases.txt").read_text().split()
    assert name == "a-step" and 1 <= int(end) - int(start) <= 30
    samples = (tmp_path / "cpu-samples.log").read_text().splitlines()
    assert len(samples) >= 2 and all(" cpu " in line and " mhz " in line for line in samples)
    proc = script("cpu_samples_phases.py", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.startswith("a-step"), proc.stdout + proc.stderr


def test_the_qemu_share_of_the_committed_ci_run_is_what_its_readme_says():
    # docs/results/ci-clean-clone/README.md (the run of 95bbf64) quotes these two lines.
    proc = script("qemu_cpu_share.py", "summary", os.path.join(REPO, "docs", "results", "ci-clean-clone",
                                                               "qemu-cpu-95bbf64.log"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("qemu 10141: 1406 CPU-s in the 1785 s it was seen (0.79 of a core)\n"
                           "qemu 18863: 309 CPU-s in the 541 s it was seen (0.57 of a core)\n")


def test_qemu_cpu_share_samples_in_the_format_its_summary_reads(tmp_path):
    # A stand-in QEMU: Python, started with the emulator's name as its argv[0] (what /proc/PID/cmdline shows).
    busy = subprocess.Popen(["qemu-system-x86_64", "-c", "import time\nend = time.time() + 1\n"
                             "while time.time() < end: pass\ntime.sleep(30)"], executable=sys.executable)
    log = tmp_path / "samples.log"
    sampler = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts", "qemu_cpu_share.py"), "sample",
                                str(log)])
    try:
        deadline = time.time() + 10
        while not log.exists() and time.time() < deadline:
            time.sleep(0.1)
    finally:
        sampler.kill()
        busy.kill()
        sampler.wait()
        busy.wait()
    # Under CI the lifecycle scenario's own QEMU runs too: it is sampled beside the stand-in.
    line = log.read_text()
    left, right = line.split("|", 1)
    assert left.split()[1] == "cpu" and str(busy.pid) in [item.split(":")[0] for item in right.split()], line
    proc = script("qemu_cpu_share.py", "summary", str(log))
    assert proc.returncode == 0 and "qemu %d: " % busy.pid in proc.stdout, proc
