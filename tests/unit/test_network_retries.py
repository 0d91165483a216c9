# -*- coding: utf-8 -*-
"""Every task of the roles that reaches the network (apt, pip, downloads) retries a transient failure, with the
site's count and delay (deepep_network_retries, deepep_network_retry_delay); every play that changes nodes takes
the site's proxy settings. At fleet scale one mirror hiccup would otherwise drop a node."""
from __future__ import annotations

import glob
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETWORK_MODULES = ("ansible.builtin.apt", "ansible.builtin.pip", "ansible.builtin.get_url", "ansible.builtin.git",
                   "ansible.builtin.uri", "ansible.builtin.apt_key", "ansible.builtin.apt_repository",
                   "moe_infra.deepep.apt_keyring", "moe_infra.deepep.apt_pinned_repository",
                   "moe_infra.deepep.nccl_runtime")
# Modules that try a network step again themselves (they know a refused key from a mirror hiccup; nccl_runtime
# writes its record before pip and reads the wheel after each try).
RETRYING_MODULES = ("moe_infra.deepep.apt_pinned_repository", "moe_infra.deepep.nccl_runtime")


def tasks(items):
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks(task.get(key))


def network_tasks():
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))):
        with open(path) as handle:
            for task in tasks(yaml.safe_load(handle)):
                module = next((m for m in NETWORK_MODULES if m in task), None)
                if module == "moe_infra.deepep.apt_keyring" and not (task[module] or {}).get("url"):
                    continue  # only checks a keyring in place
                if module == "moe_infra.deepep.nccl_runtime" and not (
                        task[module].get("state") == "upgraded" or task[module].get("reinstall_wheel")):
                    continue  # puts files in place or back: no pip
                if module:
                    found.append((os.path.relpath(path, REPO), task.get("name"), task))
    return found


def test_the_roles_network_tasks_are_found():
    names = [name for dummy, name, dummy in network_tasks()]
    assert len(names) >= 10 and "Install the pinned torch into the role's venv" in names


def retries_with_the_site_settings(task):
    module = next((m for m in RETRYING_MODULES if m in task), None)
    if module:
        return (task[module].get("retries") == "{{ deepep_network_retries }}"
                and task[module].get("retry_delay") == "{{ deepep_network_retry_delay }}" and "until" not in task)
    return (str(task.get("until", "")).startswith(task.get("register", "?") + " is succeeded")
            and task.get("retries") == "{{ deepep_network_retries }}"
            and task.get("delay") == "{{ deepep_network_retry_delay }}")


def test_every_network_task_retries_with_the_site_settings():
    found = network_tasks()
    # apt_pinned_repository in the cuda and doca_ofed layers; nccl_runtime's pip in the nccl layer's wheel method
    # and its restore.
    assert len([task for dummy, dummy, task in found if any(m in task for m in RETRYING_MODULES)]) == 4
    assert [(path, name) for path, name, task in found if not retries_with_the_site_settings(task)] == []


def test_every_play_that_changes_nodes_takes_the_proxy_settings():
    plays = {}
    for name in ("system_layers.yml", "build_layers.yml"):
        with open(os.path.join(REPO, "playbooks", name)) as handle:
            for play in yaml.safe_load(handle):
                if "roles" in play or "tasks" in play:
                    plays[(name, play["name"])] = play.get("environment", "")
    changing = [key for key in plays if any(word in key[1] for word in ("System layers,", "Python environment",
                                                                        "GDRCopy", "NVSHMEM", "NCCL", "DeepEP"))
                and not key[1].startswith("Check")]
    assert len(changing) == 6, plays.keys()
    assert [key for key in changing if "deepep_proxy_env" not in plays[key]] == []
