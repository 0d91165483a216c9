# -*- coding: utf-8 -*-
"""What the first real run left on the node and on the controller, after converge and idempotence: apt works
with the vendor's CUDA source reused, exactly one reboot, the build prerequisites installed (g++ by the run), the
env script and the doctor naming the mlx5_* devices the node has after DOCA-OFED's reboot, a second run that
changed nothing.
Then the scale-out (side_effect.yml): the bake through playbooks/gcp_image.yml, and the clone booted from a copy
of the baked disk, which the `host` fixture now reaches (the same port forward): a new node (its own hostname,
machine-id and SSH host keys) on which site.yml changed only per-node records, and nothing on its second run.
Everything the first node's disk held (packages, builds, the regkey) is on the clone, so the host checks below
hold for both."""

from __future__ import annotations

import json
import os
import re

# Kept after the scenario (molecule.yml: lifecycle_records).
RECORDS = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], ".build", "lifecycle")
HOST = "a4-b200-mig-7xk2"  # the instance name the GCP inventory gave
CLONE = "a4-b200-mig-9q4d"  # the MIG's new instance, booted from the baked image
MLX5 = ["mlx5_%d" % i for i in range(8)]


def log(name):
    with open(os.path.join(RECORDS, "logs", name)) as handle:
        return handle.read()


def recap(text):
    return dict((host, dict(zip(("ok", "changed", "failed"), map(int, counts)))) for host, *counts in re.findall(
        r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", text, re.M))


def test_the_run_went_through_the_gcp_inventory_as_its_user():
    first = log("site-1.log")
    assert first.startswith("$ ansible-playbook -i inventories/gcp-mig playbooks/site.yml")
    assert recap(first)[HOST]["failed"] == 0 and recap(first)[HOST]["changed"] > 0
    assert "rc=0" in first


def test_a_second_run_changed_nothing():
    for name in ("site-2.log", "doctor-2.log"):
        counts = recap(log(name))
        assert counts[HOST]["changed"] == 0 and counts[HOST]["failed"] == 0, (name, counts)


def test_exactly_one_reboot(host):
    boots = host.file("/opt/moe-fixtures/boots").content_string.split()
    # The boot prepare ran in, then the one reboot of the first run (the second run rebooted nothing); then the
    # clone's first boot (the image carries the file), and none since: its runs rebooted nothing either.
    assert len(boots) == 3 and len(set(boots)) == 3, boots
    assert host.file("/proc/sys/kernel/random/boot_id").content_string.strip() == boots[2]
    assert "Reboot for doca_ofed, nvidia_peermapping" in log("site-1.log")


def test_apt_works_with_the_vendor_source_reused(host):
    assert host.run("apt-get update").rc == 0
    assert not host.file("/etc/apt/sources.list.d/cuda.list").exists
    assert host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
    assert host.package("cuda-toolkit-12-9").is_installed
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.9"


def test_the_build_prerequisites_are_there(host):
    for package in ("gcc", "g++", "make", "cmake"):
        assert host.package(package).is_installed, package
    # The driver installer left the others (scripts/qemu-node-image): the first run installed g++ alone, from
    # Debian's archive.
    installs = re.findall(r"TASK \[moe_infra\.deepep\.build_prerequisites : (Install [^\]]*)\]", log("site-1.log"))
    assert [name for name in installs if name != "Install what is missing"] == ["Install g++"], installs
    # DOCA-OFED's own build of the rdma-core headers (the distribution's is not installed over it).
    assert host.package("libibverbs-dev").version == "2510mlnx58-1.2510061"
    kernel = host.check_output("uname -r")
    assert host.package("linux-headers-%s" % kernel).is_installed


def test_the_env_script_names_the_mlx5_devices(host):
    env = dict(re.findall(r"^export (\w+)='([^']*)'$", host.file("/opt/deepep/env.sh").content_string, re.M))
    assert env["NVSHMEM_HCA_PREFIX"] == "mlx5"
    mapping = env["DEEP_EP_DEVICE_TO_HCA_MAPPING"]
    assert "rocep" not in mapping and sorted(re.findall(r"mlx5_\d+", mapping)) == MLX5
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_the_doctor_names_them_too():
    with open(os.path.join(RECORDS, "doctor", "%s-doctor.json" % HOST)) as handle:
        report = json.load(handle)
    findings = dict((f["id"], f) for f in report["findings"])
    assert findings["KF01"]["status"] == "ok" and all(name in findings["KF01"]["evidence"] for name in MLX5)
    assert findings["KF03"]["status"] == "ok" and "mlx5_" in findings["KF03"]["evidence"]


def test_layers_verified_after_the_reboot(host):
    with open(os.path.join(RECORDS, "reports", "%s-system.json" % HOST)) as handle:
        state = json.load(handle)
    assert state["deepep_reboot_pending"] is False
    assert state["doca_ofed_reboot_required"] is False and state["nvidia_peermapping_reboot_required"] is False
    assert state["nvidia_peermapping_state"] == "live"
    params = host.file("/opt/moe-fixtures/proc/driver/nvidia/params").content_string
    assert 'RegistryDwords: "PeerMappingOverride=1;"' in params
    assert sorted(host.file("/opt/moe-fixtures/sys/class/infiniband").listdir()) == MLX5


def test_initramfs_refreshed_for_the_conf_file(host):
    conf = host.file("/etc/modprobe.d/nvidia-deepep.conf")
    stamp = host.file("/var/lib/moe_infra_deepep/nvidia-peermapping.initramfs").content_string.strip()
    assert stamp == conf.sha256sum
    assert "etc/modprobe.d/nvidia-deepep.conf" in host.check_output("lsinitramfs /boot/initrd.img-$(uname -r)")


def test_no_kernel_upgrade_arrives_without_the_headers_dkms_needs(host):
    # DOCA's modules are DKMS-built for the running kernel; its flavour's meta-package is held (doca_ofed_kernel_policy
    # hold), so an upgrade cannot boot a kernel without them (the inbox mlx5 driver and rocep* names again).
    flavour = host.check_output("uname -r").split("-", 2)[2]
    assert "linux-image-%s" % flavour in host.check_output("apt-mark showhold").split()


def test_a_users_jobs_and_services_get_unlimited_locked_memory(host):
    # Root's processes ignore RLIMIT_MEMLOCK; a user's job (a login session) and a service do not. The memlock
    # layer wrote pam_limits' file and systemd's default, and checked both as nobody; checked here again.
    assert "*    hard    memlock    unlimited" in host.file("/etc/security/limits.d/99-deepep-memlock.conf").content_string
    login = host.run("runuser -l nobody -s /bin/sh -c 'ulimit -l'")
    assert login.rc == 0 and login.stdout.strip() == "unlimited", login.stdout + login.stderr
    service = host.run("systemd-run --wait --pipe --quiet -p User=nobody /bin/sh -c 'ulimit -l'")
    assert service.rc == 0 and service.stdout.strip() == "unlimited", service.stdout + service.stderr


def test_the_builds_ran_unprivileged(host):
    summary = json.load(open(os.path.join(RECORDS, "site", "%s-site.json" % HOST)))
    assert summary["deepep"]["fingerprint"] and summary["nvshmem"] and summary["gdrcopy"]
    assert host.user("deepep-build").exists and host.user("deepep-build").shell == "/usr/sbin/nologin"


def changed_tasks(text):
    """The names of the tasks that reported changed, from ansible-playbook's default output."""
    names = []
    task = None
    for line in text.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \**$", line)
        if header:
            task = header.group(1)
        elif line.startswith("changed: [") and task is not None and task not in names:
            names.append(task)
    return names


def test_the_bake_went_through_the_gcp_playbook():
    bake = log("bake-1.log")
    assert "rc=0" in bake and bake.startswith("$ ansible-playbook -i inventories/gcp-mig playbooks/gcp_image.yml")
    for step in ("abandon: abandoned %s from a4-b200-mig" % HOST, "image: created deepep-b200-lifecycle in family deepep-b200",
                 "template: created deepep-b200-lifecycle (10 interfaces, boot from family deepep-b200)",
                 "rollout: template a4-b200-deepep -> deepep-b200-lifecycle"):
        assert step in bake, step
    generalized = changed_tasks(bake)
    for task in ("moe_infra.deepep.generalize : Empty the machine-id", "moe_infra.deepep.generalize : Remove the SSH host keys",
                 "moe_infra.deepep.generalize : Remove the per-node records", "moe_infra.deepep.generalize : Power the node off",
                 # Ansible's leftovers (~/.ansible/tmp, .ansible_async) and wtmp/lastlog are there on every node.
                 "moe_infra.deepep.generalize : Remove them"):
        assert task in generalized, (task, generalized)


def test_the_clone_is_a_new_node(host):
    with open(os.path.join(RECORDS, "original-identity.json")) as handle:
        original = json.load(handle)
    assert original["hostname"] == "vm-node"
    assert host.check_output("hostname") == CLONE
    machine_id = host.file("/etc/machine-id").content_string.strip()
    assert re.match(r"^[0-9a-f]{32}$", machine_id) and machine_id != original["machine_id"]
    key = host.check_output("ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f2")
    assert key.startswith("SHA256:") and key != original["ssh_host_key"]
    # The per-node records the image left out were made again on the clone, for the clone.
    assert host.file("/opt/deepep/reports/intranode.json").exists


# What site.yml may change on a node booted from a baked image: what is per node, and nothing a build, a
# package or a reboot changes. The env script names its node (and maps its GPUs to the NICs discovery found
# there); the controller keeps a record of each host's system layers. DeepEP's tests run again on the clone
# (their reports were left out of the image) but a test run is a check, not a change.
PER_NODE_TASKS = {
    "moe_infra.deepep.deepep : Write the env script",
    "Write each host's system-layer state on the controller",
}


def test_on_the_clone_site_yml_changed_only_per_node_records():
    first = log("clone-site-1.log")
    assert first.startswith("$ ansible-playbook -i inventories/gcp-mig playbooks/site.yml") and "rc=0" in first
    assert CLONE in recap(first) and HOST not in recap(first)
    changed = changed_tasks(first)
    assert changed and set(changed) <= PER_NODE_TASKS, changed
    for name in ("clone-site-2.log", "clone-doctor-2.log"):
        counts = recap(log(name))
        assert counts[CLONE]["changed"] == 0 and counts[CLONE]["failed"] == 0, (name, counts)


def test_the_clone_doctor_finds_nothing_the_first_node_did_not():
    """Both nodes report the same two problems, which this VM has by construction: no NVIDIA driver (KF12,
    libcuda.so) and the distribution's memlock limit (MEMLOCK, which site.yml does not change)."""
    def problems(path):
        with open(os.path.join(RECORDS, path)) as handle:
            report = json.load(handle)
        return report, sorted(f["id"] for f in report["findings"] if f["status"] == "problem")
    clone, clone_problems = problems(os.path.join("clone-doctor", "%s-doctor.json" % CLONE))
    first, first_problems = problems(os.path.join("doctor", "%s-doctor.json" % HOST))
    assert clone_problems == first_problems and set(clone_problems) <= {"KF12", "MEMLOCK"}, clone_problems
    assert clone["summary"] == first["summary"]
    findings = dict((f["id"], f) for f in clone["findings"])
    assert findings["KF01"]["status"] == "ok" and all(name in findings["KF01"]["evidence"] for name in MLX5)
    with open(os.path.join(RECORDS, "clone-timings.json")) as handle:
        timings = json.load(handle)
    assert 0 < timings["boot_to_ssh_s"] < timings["boot_to_clean_doctor_s"]


def test_the_env_script_names_the_clone(host):
    assert "DeepEP runtime environment for %s:" % CLONE in host.file("/opt/deepep/env.sh").content_string
