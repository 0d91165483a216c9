# -*- coding: utf-8 -*-
"""The example inventories parse, their settings pass the site's validation, and the dynamic one uses only
options the bundled google.cloud.gcp_compute plugin documents."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import yaml

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.site_validate import validate
from ansible_collections.moe_infra.deepep.tests.fixtures import gcp_inventory

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def run(*argv):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"))
    result = subprocess.run([os.path.join(BIN, argv[0])] + list(argv[1:]), cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def site_inventory(tmp_path):
    """What the README has a user do: copy the sample to inventories/site-<name> and list the nodes (here
    documentation addresses, RFC 5737). Returns its path."""
    copy = tmp_path / "inventories" / "site-test"
    shutil.copytree(os.path.join(REPO, "inventories", "b200-cluster"), str(copy))
    hosts = yaml.safe_load((copy / "hosts.yml").read_text())
    hosts["all"]["children"]["deepep_b200"]["hosts"] = dict(
        ("b200-%d" % i, {"ansible_host": "192.0.2.%d" % (10 + i)}) for i in range(4))
    (copy / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return str(copy)


def test_the_sample_inventory_is_inert():
    # As shipped: no node (a run against it changes nothing anywhere) and no reboot until the user allows one.
    data = json.loads(run("ansible-inventory", "-i", "inventories/b200-cluster", "--list"))
    assert [h for group in data.values() if isinstance(group, dict) for h in group.get("hosts", [])] == []
    with open(os.path.join(REPO, "inventories", "b200-cluster", "group_vars", "all.yml")) as handle:
        assert yaml.safe_load(handle)["deepep_reboot"] == "never"


def test_b200_cluster_inventory(tmp_path):
    data = json.loads(run("ansible-inventory", "-i", site_inventory(tmp_path), "--list"))
    hosts = data["deepep_b200"]["hosts"]
    assert hosts == ["b200-0", "b200-1", "b200-2", "b200-3"]
    hostvars = data["_meta"]["hostvars"]
    addresses = [hostvars[h]["ansible_host"] for h in hosts]
    assert len(set(addresses)) == len(addresses)
    first = hostvars["b200-0"]
    profile = tuple(first[k] for k in ("cuda_version", "doca_ofed_version", "nvshmem_ibgda_git_ref",
                                       "deepep_torch_version", "deepep_arch_list"))
    assert profile == ("12.9", "3.2.1", "v3.5.19-1", "2.9.1+cu129", ["10.0"])
    # One node per fingerprint builds; the others install from the controller's cache (in the operator's home).
    out = run("ansible", "-i", site_inventory(tmp_path / "again"), "b200-0", "-c", "local", "-m", "debug", "-a",
              "var=deepep_cache_dir")
    assert "deepep_cache_dir: %s/.cache/moe_infra_deepep/builds" % os.environ["HOME"] in out, out
    # How the nodes are reached lives in the group_vars the GCP dynamic inventory shares.
    assert (first["ansible_user"], first["ansible_become"]) == ("ubuntu", True)
    site_vars = dict((k, v) for k, v in first.items() if not k.startswith("ansible_"))
    assert validate(site_vars) == []


def test_only_the_nodes_become_root_not_the_controllers_implicit_localhost(tmp_path):
    # Ansible's implicit localhost takes group_vars/all: become there would sudo on the controller for the report
    # tasks delegated to it.
    for inventory in ("inventories/b200-cluster", "inventories/gcp-mig"):
        with open(os.path.join(REPO, inventory, "group_vars", "all.yml")) as handle:
            assert not [k for k in yaml.safe_load(handle) if k.startswith("ansible_")], inventory
    out = run("ansible", "-i", "inventories/b200-cluster", "localhost", "-m", "debug", "-a", "var=ansible_become")
    assert "'ansible_become' is undefined" in out, out
    out = run("ansible", "-i", site_inventory(tmp_path), "b200-0", "-c", "local", "-m", "debug", "-a",
              "var=ansible_become")
    assert re.search(r"ansible_become: true", out), out


def test_b200_v2_profile_on_the_b200_inventory_passes_the_site_validation(tmp_path):
    """playbooks/vars/b200-v2.yml over the B200 inventory's settings (-e wins over group_vars)."""
    data = json.loads(run("ansible-inventory", "-i", site_inventory(tmp_path), "--list"))
    first = data["_meta"]["hostvars"]["b200-0"]
    with open(os.path.join(REPO, "playbooks", "vars", "b200-v2.yml")) as handle:
        profile = yaml.safe_load(handle)
    site_vars = dict((k, v) for k, v in first.items() if not k.startswith("ansible_"))
    site_vars.update(profile)
    assert validate(site_vars) == []
    assert (site_vars["deepep_version"], site_vars["cuda_version"], site_vars["deepep_torch_version"]) == (
        "v2", "13.0", "2.11.0+cu130")
    # A V2 profile whose torch is too old or whose NCCL pin is under 2.30.4 is refused with what to set.
    old = validate(dict(site_vars, nccl_version="2.28.9"))
    assert old and "nccl_version" in old[0]["msg"], old


def test_gcp_mig_inventory_uses_only_documented_options():
    with open(os.path.join(REPO, "inventories", "gcp-mig", "gcp_compute.yml")) as handle:
        config = yaml.safe_load(handle)
    assert config["plugin"] == "google.cloud.gcp_compute"
    doc = json.loads(run("ansible-doc", "-t", "inventory", "-j", "google.cloud.gcp_compute"))
    options = set(doc["google.cloud.gcp_compute"]["doc"]["options"])
    assert set(config) - {"plugin"} <= options, set(config) - options
    # The B200 profile is shared with the static example.
    assert os.path.realpath(os.path.join(REPO, "inventories", "gcp-mig", "group_vars")) == \
        os.path.realpath(os.path.join(REPO, "inventories", "b200-cluster", "group_vars"))


def plain(value):
    """ansible-inventory marks what a plugin set as {"__ansible_unsafe": value}."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return dict((k, plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def test_gcp_mig_inventory_from_a_recorded_api_answer(tmp_path):
    """The real plugin on the real inventory file, answered from a Compute API answer on file (through the
    plugin's own inventory cache): the A4 instance, its groups, its address, and become from group_vars."""
    cache = tmp_path / "cache"
    inventory = os.path.join(REPO, "inventories", "gcp-mig")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"))
    seeded = subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "gcp_inventory.py"),
                             os.path.join(REPO, "tests", "fixtures", "gcp", "aggregated_instances.json"), inventory,
                             str(cache)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert seeded.returncode == 0 and seeded.stdout.split() == ["a4-b200-mig-7xk2"], seeded.stderr
    env.update(gcp_inventory.CACHE_ENV, ANSIBLE_INVENTORY_CACHE_CONNECTION=str(cache))
    listed = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", inventory, "--list"], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    assert "WARNING" not in listed.stderr, listed.stderr  # no reserved names, no unparsed file in the directory
    data = plain(json.loads(listed.stdout))
    assert data["deepep_b200"]["hosts"] == ["a4-b200-mig-7xk2"]
    host = data["_meta"]["hostvars"]["a4-b200-mig-7xk2"]
    assert (host["ansible_host"], host["ansible_user"], host["ansible_become"]) == ("10.128.0.12", "ubuntu", True)
    assert host["gcp_machineType"] == "a4-highgpu-8g" and host["gcp_labels"] == {"deepep": "b200"}
    site_vars = dict((k, v) for k, v in host.items() if not k.startswith(("ansible_", "gcp_")))
    assert validate(site_vars) == []
    # The IAP path's names, as the inventory gives them, pass the check validate.yml makes before connecting.
    names = [name for name in ("gcp_name", "gcp_zone", "gcp_project") if name in host]
    iap_vars = dict(site_vars, deepep_ssh_via="iap", **dict((name, host[name]) for name in names))
    assert "gcp_zone" in iap_vars and "gcp_project" in iap_vars and validate(iap_vars) == []
    # A controller outside the VPC tunnels through IAP to the instance by name, in its zone and project; with OS
    # Login the user is the operator's POSIX name (given with -e) and sudo comes from roles/compute.osAdminLogin.
    seen = subprocess.run([os.path.join(BIN, "ansible"), "-i", inventory, "a4-b200-mig-7xk2", "-m", "debug", "-a",
                           "var=[ansible_user,ansible_become,ansible_ssh_common_args]",
                           "-e", "deepep_ssh_via=iap", "-e", "ansible_user=sa_123456789012345678901"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert seen.returncode == 0, seen.stdout + seen.stderr
    flat = re.sub(r"\s+", " ", seen.stdout)
    assert "- sa_123456789012345678901 - true - -o ProxyCommand=\"gcloud compute start-iap-tunnel a4-b200-mig-7xk2 " \
        "%p --listen-on-stdin --zone=us-central1-b --project=my-project\"" in flat, flat
    direct = subprocess.run([os.path.join(BIN, "ansible"), "-i", inventory, "a4-b200-mig-7xk2", "-m", "debug", "-a",
                             "var=ansible_ssh_common_args"], env=env, capture_output=True, text=True, timeout=120,
                            check=False)
    assert "ansible_ssh_common_args: ''" in direct.stdout, direct.stdout + direct.stderr


def site(inventory, env_extra=None):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               **(env_extra or {}))
    return subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory,
                           os.path.join(REPO, "playbooks", "site.yml")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_gcp_mig_without_the_gcp_extras_fails_naming_what_to_install(tmp_path):
    # A controller without google-auth: a package named google that fails to import stands in for its absence
    # (the test environment has the GCP extras, for the test above and molecule/lifecycle).
    (tmp_path / "google").mkdir()
    (tmp_path / "google" / "__init__.py").write_text("raise ImportError('No module named google.auth')\n")
    result = site("inventories/gcp-mig", {"PYTHONPATH": str(tmp_path)})
    out = result.stdout + result.stderr
    assert "google-auth" in out  # ansible's own warning: the inventory did not parse
    assert result.returncode == 2, out
    flat = re.sub(r"\s+", " ", out)
    assert "The inventory gave no host to run on" in out and "run `make gcp-extras` on the controller (the " \
        "google.cloud collection, google-auth and requests)" in flat, flat
    assert '(docs/usage.md, "GCP managed instance groups")' in flat, flat


def test_an_empty_inventory_fails(tmp_path):
    empty = tmp_path / "hosts.yml"
    empty.write_text("all:\n  hosts: {}\n")
    result = site(str(empty))
    assert result.returncode == 2 and "The inventory gave no host to run on" in result.stdout, result.stdout
