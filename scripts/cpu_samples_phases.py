"""What the CPUs did in each phase of a build benchmark, from the OUT/cpu-samples.log that gpu-bench-common's
sample_cpu writes (one /proc/stat "cpu" line and the mean "cpu MHz" every 5 s).

    python3 scripts/cpu_samples_phases.py OUT                                      (the phases in OUT/phases.txt)
    python3 scripts/cpu_samples_phases.py OUT/cpu-samples.log NAME=START:END ...   (START, END: Unix seconds)

Per phase: busy (user + nice + system + irq + softirq) and steal (time the host gave other guests) as a share of all
CPU time, and the clock values seen.
"""
import os
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


def phases_of(argv):
    """(name, start, end) per phase: from OUT/phases.txt ("NAME START END" lines, gpu-bench-common's phase) when
    the argument is a results folder, else from the NAME=START:END arguments."""
    if os.path.isdir(argv[1]):
        with open(os.path.join(argv[1], "phases.txt")) as handle:
            return [(name, int(start), int(end)) for name, start, end in (line.split() for line in handle if line.strip())]
    spans = []
    for arg in argv[2:]:
        name, dummy, span = arg.partition("=")
        start, dummy, end = span.partition(":")
        spans.append((name, int(start), int(end)))
    return spans


def main(argv):
    if len(argv) < 2 or (len(argv) < 3 and not os.path.isdir(argv[1])):
        sys.exit(__doc__)
    log = os.path.join(argv[1], "cpu-samples.log") if os.path.isdir(argv[1]) else argv[1]
    samples = read_samples(log)
    for name, start, end in phases_of(argv):
        found = phase(samples, start, end)
        if found is None:
            print("%-24s fewer than two samples" % name)
        else:
            print("%-24s %4d s  busy %5.1f %%  steal %.2f %%  MHz %s"
                  % (name, found["seconds"], found["busy"], found["steal"], " ".join(found["mhz"])))


if __name__ == "__main__":
    main(sys.argv)
