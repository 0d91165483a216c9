"""How much of this machine the lifecycle scenario's QEMU takes while CI runs beside it.

    python3 scripts/qemu_cpu_share.py sample LOG      # every 20 s until stopped: time, /proc/stat's cpu line, each QEMU's ticks
    python3 scripts/qemu_cpu_share.py summary LOG     # per QEMU process: CPU-s, the seconds it was seen, the cores it took

Start `sample` beside `.ci/run` (setsid), stop it after, then read the summary
(docs/results/ci-clean-clone/README.md, run of 95bbf64).
"""
import os
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def qemu_ticks():
    """{pid: utime + stime in clock ticks} of every qemu-system-x86_64 process."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                if not handle.read().startswith(b"qemu-system-x86_64"):
                    continue
            with open("/proc/%s/stat" % pid) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return found


def sample(log):
    while True:
        with open("/proc/stat") as handle:
            cpu = handle.readline().strip()
        line = "%d %s | %s\n" % (time.time(), cpu, " ".join("%s:%d" % item for item in sorted(qemu_ticks().items())))
        with open(log, "a") as handle:
            handle.write(line)
        time.sleep(20)


def summary(log):
    seen = {}
    with open(log) as handle:
        for line in handle:
            left, right = line.split("|", 1)
            when = int(left.split()[0])
            for item in right.split():
                pid, ticks = item.split(":")
                first = seen[pid][0] if pid in seen else when
                seen[pid] = (first, int(ticks), when)
    for pid, (first, ticks, last) in sorted(seen.items(), key=lambda item: item[1][0]):
        span = max(last - first, 1)
        seconds = ticks / TICKS
        print("qemu %s: %.0f CPU-s in the %d s it was seen (%.2f of a core)" % (pid, seconds, span, seconds / span))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("sample", "summary"):
        sys.exit(__doc__)
    (sample if sys.argv[1] == "sample" else summary)(sys.argv[2])
