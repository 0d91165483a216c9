# -*- coding: utf-8 -*-
"""The task_profile callback prints each run's slowest tasks, slowest first, with the run's task count."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait a second
      ansible.builtin.command: sleep 1
      changed_when: false
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
"""


def test_the_slowest_task_comes_first(tmp_path):
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="moe_infra.deepep.task_profile", MOE_INFRA_TASK_PROFILE_COUNT="5",
               MOE_INFRA_TASK_PROFILE_JSON=str(tmp_path / "profile.json"))
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "pb.yml"],
                            cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    profile = result.stdout.split("TASK PROFILE")[1]
    assert re.search(r"2 tasks started, [\d.]+ s in all; the 2 slowest:", profile), profile
    rows = re.findall(r"^\s+([\d.]+) s  (.+)$", profile, re.M)
    assert [name for seconds, name in rows] == ["Wait a second", "Say hello"], rows
    assert float(rows[0][0]) >= 1.0
    # The JSON a benchmark adds up: every task with its play, in order, and the run's wall time.
    written = json.loads((tmp_path / "profile.json").read_text())
    assert [(task["play"], task["task"]) for task in written["tasks"]] == [
        ("localhost", "Wait a second"), ("localhost", "Say hello")]
    assert written["tasks"][0]["seconds"] >= 1.0 and written["wall"] >= written["tasks"][0]["seconds"]
    # The controller's CPU: the main process parsed and ran the play; the workers ran the tasks (a sleep is not
    # CPU, so less than the wall time); the same figures are printed.
    assert 0 < written["controller_main_cpu_s"] < written["wall"] + 5, written
    assert 0 < written["controller_workers_cpu_s"] < written["wall"], written
    assert re.search(r"controller CPU: [\d.]+ s in the main process, [\d.]+ s in the workers and their connections",
                     profile), profile
