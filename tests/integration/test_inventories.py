# -*- coding: utf-8 -*-
"""The example inventories parse, their settings pass the site's validation, and the dynamic one uses only
options the bundled google.cloud.gcp_compute plugin documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.moe_infra.deepep.plugins.module_utils.site_validate import validate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def run(*argv):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"))
    result = subprocess.run([os.path.join(BIN, argv[0])] + list(argv[1:]), cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_b200_cluster_inventory():
    data = json.loads(run("ansible-inventory", "-i", "inventories/b200-cluster", "--list"))
    hosts = data["deepep_b200"]["hosts"]
    assert hosts == ["b200-0", "b200-1", "b200-2", "b200-3"]
    hostvars = data["_meta"]["hostvars"]
    addresses = [hostvars[h]["ansible_host"] for h in hosts]
    assert len(set(addresses)) == len(addresses)
    first = hostvars["b200-0"]
    profile = tuple(first[k] for k in ("cuda_version", "doca_ofed_version", "nvshmem_ibgda_git_ref",
                                       "deepep_torch_version", "deepep_arch_list"))
    assert profile == ("12.9", "3.2.1", "v3.5.19-1", "2.9.1+cu129", ["10.0"])
    # How the nodes are reached lives in the group_vars the GCP dynamic inventory shares.
    assert (first["ansible_user"], first["ansible_become"]) == ("ubuntu", True)
    site_vars = dict((k, v) for k, v in first.items() if not k.startswith("ansible_"))
    assert validate(site_vars) == []


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


def site(inventory):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory,
                           os.path.join(REPO, "playbooks", "site.yml")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_gcp_mig_without_the_gcp_extras_fails_naming_what_to_install():
    # The test environment has no google-auth (requirements/gcp.txt is not part of it): the plugin cannot start.
    result = site("inventories/gcp-mig")
    out = result.stdout + result.stderr
    assert "google-auth" in out  # ansible's own warning: the inventory did not parse
    assert result.returncode == 2, out
    assert "The inventory gave no host to run on" in out and "install the google.cloud collection and " \
        "google-auth and requests" in out.replace("\n        ", " ")


def test_an_empty_inventory_fails(tmp_path):
    empty = tmp_path / "hosts.yml"
    empty.write_text("all:\n  hosts: {}\n")
    result = site(str(empty))
    assert result.returncode == 2 and "The inventory gave no host to run on" in result.stdout, result.stdout
