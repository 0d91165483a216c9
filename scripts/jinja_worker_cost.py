"""What a task's Jinja costs the controller per host (issue 33): ansible-core compiles each template again in every
task's worker process, so a long expression in a role is paid once per task and host. Two playbooks of N set_fact
tasks on 4 local hosts, run in turns: one task writes the value with a 1 KB expression (the shape of the preflight
stop message that used to live in roles/preflight/vars/main.yml, each task's text a little different), the other
with one call of a filter of this collection (what the roles do now). Their plays select hosts as this
collection's playbooks do (`_deepep_play_hosts`, which loads the collection's filters in the main process before
the workers fork), so the difference is the expression, not the filter's loading. Prints, and writes as JSON, the
CPU seconds (ansible-playbook and its workers) of each run and the difference per task and host.
  .venv/bin/python scripts/jinja_worker_cost.py OUT.json [TASKS] [ROUNDS]"""
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) < 2:
    sys.exit(__doc__)
OUT = sys.argv[1]
TASKS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
HOSTS = 4
# The preflight stop as a Jinja expression (the variables it reads are set in the play).
LONG = (
    "{{ (('No NVIDIA GPU under %s/bus/pci/devices on %s: nothing was changed. Layers: %s. Run this on a GPU node; '"
    " ~ 'to only report what each layer would do, run playbooks/facts.yml (make facts), which changes nothing.')"
    " % (sysfs_root, inventory_hostname, facts.layers | map(attribute='layer')"
    " | zip(facts.layers | map(attribute='status')) | map('join', '=') | join(', ')))"
    " if require_gpus | bool and facts.gpu.gpu_count | int == 0"
    " else ('%s: %s. Nothing was changed.' % (inventory_hostname, problems | map(attribute='id')"
    " | zip(problems | map(attribute='evidence'), problems | map(attribute='fix'))"
    " | map('join', ' | ') | join('; ')))"
    " if checks | bool and summary.problem > 0"
    " else ('%s: %s. Nothing was changed. (task TASK)' % (inventory_hostname, site_problems | join('; ')))"
    " if site_problems | length > 0 else '' }}")
SHORT = "{{ ['9.0', 'TASK'] | moe_infra.deepep.cmake_arch if false else '' }}"
PLAY_VARS = {"sysfs_root": "/sys", "require_gpus": True, "checks": True, "site_problems": [], "problems": [],
             "summary": {"problem": 0}, "facts": {"layers": [{"layer": "cuda", "status": "ok"}], "gpu": {"gpu_count": 8}}}


def playbook(path, expression):
    tasks = [{"name": "t%d" % i, "ansible.builtin.set_fact": {"x%d" % i: expression.replace("TASK", str(i))}}
             for i in range(TASKS)]
    with open(path, "w") as handle:
        json.dump([{"hosts": "{{ groups | moe_infra.deepep._deepep_play_hosts }}", "gather_facts": False,
                    "vars": PLAY_VARS, "tasks": tasks}], handle)


def cpu_of(args, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2)


work = tempfile.mkdtemp(prefix="jinja-worker-cost.")
with open(os.path.join(work, "hosts.ini"), "w") as handle:
    handle.write("\n".join("h%d ansible_connection=local ansible_python_interpreter=%s" % (i, sys.executable)
                           for i in range(HOSTS)) + "\n")
playbook(os.path.join(work, "long.json"), LONG)
playbook(os.path.join(work, "short.json"), SHORT)
# The collection as the playbooks find it (make's .build/dev link to this checkout).
env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(HERE, ".build", "dev"), ANSIBLE_NOCOLOR="1")
runs = {"long": [], "short": []}
for _ in range(ROUNDS):
    for name in ("long", "short"):
        runs[name].append(cpu_of([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                                  os.path.join(work, "hosts.ini"), os.path.join(work, name + ".json")], env))
shutil.rmtree(work)
per_task_host_ms = round(1000 * (min(runs["long"]) - min(runs["short"])) / (TASKS * HOSTS), 1)
result = {"command": "python scripts/jinja_worker_cost.py %s %d %d" % (OUT, TASKS, ROUNDS), "machine": platform.node(),
          "cpus": os.cpu_count(), "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
          "tasks": TASKS, "hosts": HOSTS, "long_expression_chars": len(LONG), "cpu_s": runs,
          "long_minus_short_ms_per_task_and_host": per_task_host_ms}
with open(OUT, "w") as handle:
    json.dump(result, handle, indent=2)
print(json.dumps(result, indent=2))
