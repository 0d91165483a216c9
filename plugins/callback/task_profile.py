# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: task_profile
type: aggregate
short_description: Where a run's time went, task by task
version_added: "0.3.0"
description:
  - At the end of a run, prints the wall time of the run, how many tasks started, and the slowest tasks with
    their time (a task that runs on several hosts counts once, from its start to the next task's start).
  - >-
    Also prints the CPU the controller spent, in C(ansible-playbook)'s main process (it runs the strategy and
    handles every result one at a time, the part more forks or cores cannot spread) and in its workers with
    the connections they ran (C(ssh) clients; with a C(local) connection, the modules too).
  - Needs only ansible-core, so it works on a controller without the bundled collections
    (C(ansible.posix.profile_tasks) does the same where those are installed).
requirements:
  - enable it with C(callbacks_enabled = moe_infra.deepep.task_profile) in C(ansible.cfg), or
    C(ANSIBLE_CALLBACKS_ENABLED=moe_infra.deepep.task_profile)
options:
  count:
    description: How many of the slowest tasks to print.
    type: int
    default: 20
    env:
      - name: MOE_INFRA_TASK_PROFILE_COUNT
    ini:
      - section: callback_task_profile
        key: count
  json:
    description:
      - Also write every task (its play, its name, its seconds and the controller's CPU seconds from its start to
        the next task's, C(main_cpu_s) and C(workers_cpu_s), in the order they started), the run's wall time and the
        controller's CPU seconds (C(controller_main_cpu_s), C(controller_workers_cpu_s)) to this file as JSON, for
        benchmarks that add up a play's time.
    type: path
    env:
      - name: MOE_INFRA_TASK_PROFILE_JSON
    ini:
      - section: callback_task_profile
        key: json
"""

import json
import multiprocessing
import resource
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "moe_infra.deepep.task_profile"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._started = time.time()
        self._current = None
        self._play = ""
        self._tasks = []  # [name, seconds, play] in the order they started
        self._cpu_at_start = self._cpu()

    @staticmethod
    def _cpu():
        """(main process, its waited-for children: the workers and what they ran) CPU seconds so far. The workers
        that have ended are waited for first (ansible-core waits for them only when it starts the next ones)."""
        multiprocessing.active_children()
        main, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return main.ru_utime + main.ru_stime, children.ru_utime + children.ru_stime

    def _close_current(self):
        if self._current is not None:
            self._current[1] = time.time() - self._current[1]
            self._current[3] = [now - then for now, then in zip(self._cpu(), self._current[3])]
            self._tasks.append(self._current)
            self._current = None

    def _start(self, task):
        self._close_current()
        role = task._role.get_name() if getattr(task, "_role", None) else ""
        name = task.get_name().strip()
        self._current = ["%s : %s" % (role, name) if role and not name.startswith(role) else name, time.time(),
                         self._play, self._cpu()]

    def v2_playbook_on_play_start(self, play):
        self._close_current()
        self._play = play.get_name().strip()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def v2_playbook_on_stats(self, stats):
        self._close_current()
        count = self.get_option("count")
        wall = time.time() - self._started
        self._display.banner("TASK PROFILE")
        self._display.display("%d tasks started, %.1f s in all; the %d slowest:"
                              % (len(self._tasks), wall, min(count, len(self._tasks))))
        for name, seconds, dummy, dummy_cpu in sorted(self._tasks, key=lambda entry: -entry[1])[:count]:
            self._display.display("%8.2f s  %s" % (seconds, name))
        main, workers = [now - then for now, then in zip(self._cpu(), self._cpu_at_start)]
        self._display.display("controller CPU: %.1f s in the main process, %.1f s in the workers and their connections"
                              % (main, workers))
        if self.get_option("json"):
            with open(self.get_option("json"), "w") as handle:
                json.dump({"wall": round(wall, 2), "controller_main_cpu_s": round(main, 2),
                           "controller_workers_cpu_s": round(workers, 2),
                           "tasks": [{"play": play, "task": name, "seconds": round(seconds, 3),
                                      "main_cpu_s": round(cpu[0], 3), "workers_cpu_s": round(cpu[1], 3)}
                                     for name, seconds, play, cpu in self._tasks]}, handle, indent=1)
