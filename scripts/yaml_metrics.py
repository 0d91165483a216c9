"""The role YAML measures issue 33 sets goals for, from the tree it runs in:
  python scripts/yaml_metrics.py [ROOT]
- set_fact share: set_fact tasks among all tasks of roles/*/tasks and roles/*/handlers (blocks counted by their
  tasks, not as tasks);
- brace-Jinja share: non-blank, non-comment lines with "{{" among those of the same files;
- the run-state protocol variables still named in roles/ and playbooks/ (preflight_node_stale, ...);
- where the brace-Jinja lines are: by kind (an option that only passes a variable on, the same with one filter, a
  task name, the rest: expressions) and the ten files with the most;
- the lines that are one plain item of a block-style list (`- some_tag` under `tags:`, one condition under `when:`):
  a style that adds lines without braces, for comparing trees written in flow style (`tags: [a, b]`);
- the lines of operator messages (`msg`, `fail_msg`, `success_msg`, one line or a folded block) and the brace
  share without them and without the one-item list lines: the two trees compared like for like, whatever their
  list style and however much their tasks explain to the operator;
- the pass-through lines repeated in their file (the same `option: "{{ variable }}"` seen before in it): the most
  that a `module_defaults` per file could take away, and the brace share without them."""
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


PLAIN = re.compile(r'^\s*(- )?[A-Za-z_]+: "\{\{ [A-Za-z_][A-Za-z0-9_.]* \}\}"$')
ONE_FILTER = re.compile(r'^\s*(- )?[A-Za-z_]+: "\{\{ [A-Za-z_][A-Za-z0-9_.]* \| [a-z_]+(\([^()]*\))? \}\}"$')
NAME = re.compile(r"^\s*- name: ")  # a task's name (a module's name option has no "- ")
KEY = re.compile(r"^(\s*)(- )?([A-Za-z_]+):(.*)$")
MESSAGE_KEYS = ("msg", "fail_msg", "success_msg")
LIST_ITEM = re.compile(r"^\s+- [A-Za-z0-9_.\"'/ =!-]+$")
counts = {"tasks": 0, "set_fact": 0, "lines": 0, "brace": 0, "list_items": 0, "message": 0, "message_brace": 0,
          "repeated_plain": 0}
kinds = {"plain": 0, "one filter": 0, "task name": 0, "expression": 0}
per_file = {}
files = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
               + glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "*.yml")))
for path in files:
    with open(path) as handle:
        text = handle.read()
    walk(yaml.safe_load(text), counts)
    folded = None  # (indent, key) of the folded or literal block the line is in
    plain_seen = set()
    for line in text.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            counts["lines"] += 1
            counts["list_items"] += bool(LIST_ITEM.match(line))
            indent = len(line) - len(line.lstrip())
            if folded and indent <= folded[0]:
                folded = None
            key = folded[1] if folded else None
            match = KEY.match(line) if not folded else None
            if match:
                key = match.group(3)
                if match.group(4).strip() in (">-", ">", "|", "|-"):
                    folded = (len(match.group(1)) + (2 if match.group(2) else 0), key)
            if key in MESSAGE_KEYS:
                counts["message"] += 1
                counts["message_brace"] += "{{" in line
            if "{{" in line:
                counts["brace"] += 1
                per_file[os.path.relpath(path, ROOT)] = per_file.get(os.path.relpath(path, ROOT), 0) + 1
                kind = ("plain" if PLAIN.match(line) else "one filter" if ONE_FILTER.match(line)
                        else "task name" if NAME.match(line) and ": " in line and "{{" in line.split(": ", 1)[1]
                        else "expression")
                kinds[kind] += 1
                if kind == "plain":
                    option = line.strip().lstrip("- ")
                    counts["repeated_plain"] += option in plain_seen
                    plain_seen.add(option)
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
print("brace-Jinja lines by kind: %s" % ", ".join("%s %d" % item for item in kinds.items()))
print("one-item block-list lines: %d of %d" % (counts["list_items"], counts["lines"]))
like_lines = counts["lines"] - counts["message"] - counts["list_items"]
print("operator message lines: %d (%d with braces); brace-Jinja without them and the one-item list lines: "
      "%d of %d = %.1f %%" % (counts["message"], counts["message_brace"], counts["brace"] - counts["message_brace"],
                              like_lines, 100.0 * (counts["brace"] - counts["message_brace"]) / like_lines))
repeated = counts["repeated_plain"]
print("pass-through lines repeated in their file: %d; brace-Jinja without them: %d of %d = %.1f %%" % (
    repeated, counts["brace"] - repeated, counts["lines"] - repeated,
    100.0 * (counts["brace"] - repeated) / (counts["lines"] - repeated)))
print("most brace-Jinja lines: %s" % ", ".join(
    "%s %d" % item for item in sorted(per_file.items(), key=lambda item: (-item[1], item[0]))[:10]))
