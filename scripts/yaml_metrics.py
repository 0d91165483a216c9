"""The role YAML measures issue 33 sets goals for, from the tree it runs in:
  python scripts/yaml_metrics.py [ROOT]
- set_fact share: set_fact tasks among all tasks of roles/*/tasks and roles/*/handlers (blocks counted by their
  tasks, not as tasks);
- brace-Jinja share: non-blank, non-comment lines with "{{" among those of the same files;
- the run-state protocol variables still named in roles/ and playbooks/ (preflight_node_stale, ...)."""
import glob
import os
import re
import sys

import yaml

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PROTOCOL = ("preflight_node", "preflight_node_stale", "preflight_generation", "preflight_read_from",
            "deepep_inputs_checked", "deepep_probe_stale", "deepep_stack_reading", "deepep_validated")


def walk(items, counts):
    for task in items or []:
        if not isinstance(task, dict):
            continue
        if "block" in task:
            for key in ("block", "rescue", "always"):
                walk(task.get(key), counts)
            continue
        counts["tasks"] += 1
        if "set_fact" in task or "ansible.builtin.set_fact" in task:
            counts["set_fact"] += 1


counts = {"tasks": 0, "set_fact": 0, "lines": 0, "brace": 0}
files = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
               + glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "*.yml")))
for path in files:
    with open(path) as handle:
        text = handle.read()
    walk(yaml.safe_load(text), counts)
    for line in text.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            counts["lines"] += 1
            counts["brace"] += "{{" in line
mentions = {}
for path in glob.glob(os.path.join(ROOT, "roles", "**", "*.yml"), recursive=True) + glob.glob(
        os.path.join(ROOT, "playbooks", "*.yml")):
    with open(path) as handle:
        text = handle.read()
    for name in PROTOCOL:
        found = len(re.findall(r"\b%s\b" % name, text))
        if found:
            mentions[name] = mentions.get(name, 0) + found
print("role task files: %d" % len(files))
print("set_fact: %d of %d tasks = %.1f %% (goal <= 12 %%)" % (
    counts["set_fact"], counts["tasks"], 100.0 * counts["set_fact"] / counts["tasks"]))
print("brace-Jinja: %d of %d lines = %.1f %% (goal <= 22 %%)" % (
    counts["brace"], counts["lines"], 100.0 * counts["brace"] / counts["lines"]))
print("run-state protocol variables named: %s" % (", ".join(
    "%s %d" % (name, mentions[name]) for name in PROTOCOL if name in mentions) or "none"))
