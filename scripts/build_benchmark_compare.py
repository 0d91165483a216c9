"""Collection / hand, per step and in total, for a build benchmark run (scripts/gpu-build-benchmark,
scripts/gpu-v2-build-benchmark): writes OUT/compare.json and prints compare.txt's lines.
  python3 scripts/build_benchmark_compare.py OUT --hand STEP=SECONDS ... --row LABEL PLAY STEP[,STEP] ...
      [--cpu LAYER ...]
- --hand: each hand step's wall seconds (the benchmark timed them);
- --row: one line of the table: the collection's seconds are the play PLAY's task seconds (the task profile's JSON,
  OUT/<run>.profile.json), the hand's the sum of the steps named;
- --cpu: a layer whose build CPU time is compared: OUT/hand-LAYER.cpu (the hand step's processes) against the
  collection's build stamp, OUT/<run>-LAYER-stamp.json.
The collection runs are OUT/collection-first.* (collection first) and OUT/collection-second.* (hand first); their
total is ansible-playbook's wall time (OUT/<run>.wall), the rest of the plays is "everything else"."""
import argparse
import json

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--hand", nargs="+", required=True)
parser.add_argument("--row", nargs=3, action="append", required=True, metavar=("LABEL", "PLAY", "STEPS"))
parser.add_argument("--cpu", action="append", default=[])
args = parser.parse_args()
out = args.out
hand_s = {step: float(seconds) for step, seconds in (item.split("=", 1) for item in args.hand)}
hand = [(label, sum(hand_s[step] for step in steps.split(","))) for label, dummy, steps in args.row]
hand_total = sum(hand_s.values())
result = {"hand": dict(hand, total=round(hand_total, 1))}
for run, order in (("collection-first", "collection first"), ("collection-second", "hand first")):
    profile = json.load(open("%s/%s.profile.json" % (out, run)))
    plays = {}
    for task in profile["tasks"]:
        plays[task["play"]] = plays.get(task["play"], 0.0) + task["seconds"]
    wall = float(open("%s/%s.wall" % (out, run)).read())  # the ansible-playbook process, start to exit
    steps = [(label, plays.pop(play, 0.0)) for label, play, dummy in args.row]
    steps += [("everything else (variables, discovery, probes, checks)", sum(plays.values())),
              ("ansible-playbook start and exit", wall - profile["wall"])]
    print("%s (%s):" % (order, run))
    rows = []
    for (name, coll), hand_step in zip(steps, [h for dummy, h in hand] + [0.0, 0.0]):
        rows.append({"step": name, "hand_s": round(hand_step, 1), "collection_s": round(coll, 1),
                     "ratio": round(coll / hand_step, 3) if hand_step else None})
        print("  %-56s hand %7.1f s  collection %7.1f s  ratio %s" % (name, hand_step, coll, rows[-1]["ratio"]))
    ratio = wall / hand_total
    rows.append({"step": "total (collection: ansible-playbook's wall time)", "hand_s": round(hand_total, 1),
                 "collection_s": round(wall, 1), "ratio": round(ratio, 3)})
    print("  %-56s hand %7.1f s  collection %7.1f s  ratio %.3f" % ("total", hand_total, wall, ratio))
    print("  collection / hand = %.3f with the %s: %s" % (ratio, order, "meets 1.10" if ratio <= 1.10 else "ABOVE 1.10"))
    # The builds' CPU time (user + system of all their processes): the same work should cost the same CPU.
    cpu = {}
    for layer in args.cpu:
        stamp = json.load(open("%s/%s-%s-stamp.json" % (out, run, layer)))
        hand_cpu = float(open("%s/hand-%s.cpu" % (out, layer)).read())
        cpu[layer] = {"hand_cpu_s": hand_cpu, "collection_build_cpu_s": stamp.get("build_cpu_seconds"),
                      "collection_build_s": stamp.get("build_seconds")}
        print("  %-56s hand %7.1f CPU-s  collection build %s CPU-s in %s s" % (
            layer + " CPU time (hand: the whole step)", hand_cpu, stamp.get("build_cpu_seconds"),
            stamp.get("build_seconds")))
    rows.append({"step": "cpu", "layers": cpu})
    result[order] = rows
json.dump(result, open("%s/compare.json" % out, "w"), indent=2)
