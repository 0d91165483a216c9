#!/usr/bin/env python3
"""What the CPUs did in each phase of a build benchmark, from the OUT/cpu-samples.log that gpu-bench-common's
sample_cpu writes (one /proc/stat "cpu" line and the mean "cpu MHz" every 5 s).

    scripts/cpu_samples_phases.py OUT/cpu-samples.log NAME=START:END ...   (START, END: Unix seconds)

Per phase: busy (user + nice + system + irq + softirq) and steal (time the host gave other guests) as a share of all
CPU time, and the clock values seen.
"""
import sys


def read_samples(path):
    samples = []
    for line in open(path):
        fields = line.split()
        # "EPOCH cpu user nice system idle iowait irq softirq steal guest guest_nice mhz MHZ"
        samples.append((int(fields[0]), [int(v) for v in fields[2:12]], fields[-1]))
    return samples


def phase(samples, start, end):
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return None
    delta = [b - a for a, b in zip(inside[0][1], inside[-1][1])]
    total = sum(delta) or 1
    user, nice, system, _idle, _iowait, irq, softirq, steal = delta[:8]
    return {"seconds": inside[-1][0] - inside[0][0], "busy": 100.0 * (user + nice + system + irq + softirq) / total,
            "steal": 100.0 * steal / total, "mhz": sorted({s[2] for s in inside})}


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    samples = read_samples(argv[1])
    for arg in argv[2:]:
        name, _, span = arg.partition("=")
        start, _, end = span.partition(":")
        found = phase(samples, int(start), int(end))
        if found is None:
            print("%-24s fewer than two samples" % name)
        else:
            print("%-24s %4d s  busy %5.1f %%  steal %.2f %%  MHz %s"
                  % (name, found["seconds"], found["busy"], found["steal"], " ".join(found["mhz"])))


if __name__ == "__main__":
    main(sys.argv)
