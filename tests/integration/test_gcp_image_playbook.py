# -*- coding: utf-8 -*-
"""playbooks/gcp_image.yml's Compute API requests, checked offline: the real inventory plugin reads the
instance from its cache (tests/fixtures/gcp_inventory.py) and the playbook's requests reach a local stand-in of
the Compute endpoints through HTTPS_PROXY (tests/fixtures/compute_api.py), which records each one. The node's
generalization is left out here (--skip-tags source_node): the lifecycle scenario runs it on a VM and boots a
copy of its disk."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
FIXTURES = os.path.join(REPO, "tests", "fixtures")
HOST = "a4-b200-mig-7xk2"
MIG = "projects/my-project/zones/us-central1-b/instanceGroupManagers/a4-b200-mig"


@pytest.fixture
def api(tmp_path):
    """The stand-in's state directory and the environment a run reaches it with."""
    server, state, env = start_api(tmp_path, os.path.join(FIXTURES, "gcp", "aggregated_instances.json"))
    yield state, env
    server.kill()
    server.wait()


def start_api(tmp_path, instances):
    """The stand-in serving the instances of the aggregated list in file instances, and the inventory's cache of
    them."""
    state = tmp_path / "api"
    state.mkdir()
    server = subprocess.Popen([sys.executable, os.path.join(FIXTURES, "compute_api.py"), str(state), str(instances)],
                              stdout=subprocess.PIPE, text=True)
    port = server.stdout.readline().strip()
    cache = tmp_path / "inventory-cache"
    subprocess.run([sys.executable, os.path.join(FIXTURES, "gcp_inventory.py"), str(instances),
                    os.path.join(REPO, "inventories", "gcp-mig"), str(cache)], check=True, capture_output=True)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_CACHE="true", ANSIBLE_INVENTORY_CACHE_PLUGIN="ansible.builtin.jsonfile",
               ANSIBLE_INVENTORY_CACHE_CONNECTION=str(cache), HTTPS_PROXY="http://127.0.0.1:%s" % port,
               REQUESTS_CA_BUNDLE=str(state / "ca.pem"), NO_PROXY="")
    env.pop("https_proxy", None)
    env["HOME"] = str(tmp_path / "home")  # the bakes' records (gcp_image_record_dir) stay in this test
    return server, state, env


def bake(env, *extra, skip="source_node"):
    argv = [os.path.join(BIN, "ansible-playbook"), "-i", "inventories/gcp-mig", "playbooks/gcp_image.yml",
            "--skip-tags", skip, "-e", "gcp_image_source=" + HOST, "-e", "gcp_image_family=deepep-b200",
            "-e", "gcp_image_name=deepep-b200-20261124", "-e", "gcp_image_auth_kind=accesstoken",
            "-e", "gcp_image_access_token=fixture-token"] + list(extra)
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return result.returncode, result.stdout + result.stderr


def requests_made(state):
    path = state / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def changes(state):
    """(what, path) of each request that changes something."""
    return [(r["method"], r["path"].split("/compute/v1/", 1)[1]) for r in requests_made(state) if r["method"] != "GET"
            and not r["path"].endswith("/listManagedInstances")]


def recap(out):
    return dict(zip(("ok", "changed", "failed"), map(int, re.search(
        r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out).groups())))


def test_check_mode_asks_and_changes_nothing_then_the_bake_then_a_rerun_changes_nothing(api):
    state, env = api
    rc, out = bake(env, "--check")
    assert rc == 0, out
    assert recap(out)["changed"] == 2 and changes(state) == [], out
    assert "abandon: abandoned %s from a4-b200-mig" % HOST in out

    rc, out = bake(env)
    assert rc == 0, out
    assert changes(state) == [
        ("POST", MIG + "/abandonInstances"),
        ("POST", "projects/my-project/zones/us-central1-b/instances/%s/stop" % HOST),
        ("POST", "projects/my-project/global/images"),
        ("POST", "projects/my-project/global/instanceTemplates"),
        ("POST", MIG + "/setInstanceTemplate"),
        ("POST", MIG + "/resize"),
    ]
    posts = dict((r["path"].rsplit("/", 1)[1], r) for r in requests_made(state) if r["method"] == "POST")
    assert posts["abandonInstances"]["body"] == {"instances": ["projects/my-project/zones/us-central1-b/instances/" + HOST]}
    image = posts["images"]["body"]
    assert (image["name"], image["family"], image["storageLocations"]) == \
        ("deepep-b200-20261124", "deepep-b200", ["us-central1"])
    assert image["sourceDisk"].endswith("/zones/us-central1-b/disks/" + HOST)
    template = posts["instanceTemplates"]["body"]["properties"]
    assert template["machineType"] == "a4-highgpu-8g"
    assert template["disks"][0]["initializeParams"]["sourceImage"] == "projects/my-project/global/images/family/deepep-b200"
    nics = template["networkInterfaces"]
    assert [n["nicType"] for n in nics] == ["GVNIC"] * 2 + ["MRDMA"] * 8
    assert not any("accessConfigs" in n for n in nics)
    # The source instance's ssh-keys, startup script and OS Login override are not given to the group, nor printed.
    assert template["metadata"] == {"items": [{"key": "google-logging-enable", "value": "true"}]}
    for secret in ("FixtureOperatorKeyDoNotCopy", "fixture-startup-script-do-not-copy"):
        assert secret not in json.dumps(requests_made(state)) and secret not in out
    assert posts["setInstanceTemplate"]["body"] == {"instanceTemplate": "projects/my-project/global/instanceTemplates/deepep-b200-20261124"}
    # The group gets back the size it had before the node left it.
    assert posts["resize"]["query"] == {"size": ["1"]}

    before = len(requests_made(state))
    rc, out = bake(env)
    assert rc == 0 and recap(out)["changed"] == 0, out
    assert [r["method"] for r in requests_made(state)[before:]] == ["GET"] * len(requests_made(state)[before:])
    assert "image: 'exists: deepep-b200-20261124 (family deepep-b200)'" in out or \
        "exists: deepep-b200-20261124 (family deepep-b200)" in out

    # A template cannot change: other interfaces under the same name are refused, with what to set.
    rc, out = bake(env, "-e", '{"gcp_image_network_interfaces": [{"network": "default", "nic_type": "GVNIC"}]}')
    assert rc != 0 and "set gcp_image_template_name to a new name" in out, out
    assert changes(state)[6:] == []
    # Other metadata is refused the same way, named, its values never printed (the template's nor the request's).
    rc, out = bake(env, "-e", '{"gcp_image_metadata": {"ssh-keys": "root:ssh-ed25519 AAAA-template-secret"}}', "-v")
    assert rc != 0 and "exists with other metadata (templates cannot change)" in out, out
    assert "AAAA-template-secret" not in out


def test_bad_settings_are_refused_before_any_request(api):
    state, env = api
    rc, out = bake(env, "-e", "gcp_image_name=DeepEP_2026", "-e", "gcp_image_storage_location=mars-1",
                   "-e", "gcp_image_zone=us-central1")
    assert rc != 0
    assert "nothing was asked of GCP" in out
    for variable in ("gcp_image_name: 'DeepEP_2026'", "gcp_image_storage_location: 'mars-1'", "gcp_image_zone: 'us-central1'"):
        assert variable in out, out
    assert requests_made(state) == []
    # The role's spec refuses a wrong type or choice before the module runs.
    rc, out = bake(env, "-e", "gcp_image_on_host_maintenance=REBOOT")
    assert rc != 0 and "gcp_image_on_host_maintenance" in out and requests_made(state) == []
    # The source must be given.
    rc, out = bake(env, "-e", "gcp_image_source=")
    assert rc != 0 and requests_made(state) == [], out


def test_a_node_site_yml_did_not_finish_is_not_baked(api, tmp_path):
    """The source node is checked before anything changes (here it is reached locally and lacks the env script
    and DeepEP's report); with them there the bake goes on."""
    state, env = api
    # The generalize play (tag generalize) never runs here; the check is the controller play's, delegated.
    local = ["-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable]
    env_script, report = tmp_path / "env.sh", tmp_path / "reports" / "intranode.json"
    required = ["-e", json.dumps({"gcp_image_source_required": [str(env_script), str(report)]})]
    rc, out = bake(env, *(local + required), skip="generalize")
    assert rc != 0 and "%s lacks %s, %s: run playbooks/site.yml on it first" % (HOST, env_script, report) in out, out
    assert changes(state) == []
    env_script.write_text("export X=1\n")
    report.parent.mkdir()
    report.write_text("{}\n")
    rc, out = bake(env, *(local + required + ["--check"]), skip="generalize")
    assert "Check that site.yml provisioned the node" in out and "lacks" not in out, out
    assert "moe_infra.deepep.generalize" not in out
    assert changes(state) == []


def test_a_reservation_bound_placed_shared_vpc_instance_gives_a_template_that_keeps_all_three(tmp_path):
    # An A4 as cluster-toolkit's blueprint makes it: capacity from a specific reservation (RESERVATION_BOUND), a
    # compact placement policy, and nic0 in a Shared VPC of a host project. The template keeps all three: without
    # them the resized group's instances would ask for any reservation, unplaced, in the service project's network.
    with open(os.path.join(FIXTURES, "gcp", "aggregated_instances.json")) as handle:
        listing = json.load(handle)
    instance = listing["items"]["zones/us-central1-b"]["instances"][0]
    instance["scheduling"].update(provisioningModel="RESERVATION_BOUND", instanceTerminationAction="STOP")
    instance["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                       "key": "compute.googleapis.com/reservation-name", "values": ["a4-reservation"]}
    instance["resourcePolicies"] = [
        "https://www.googleapis.com/compute/v1/projects/my-project/regions/us-central1/resourcePolicies/a4-compact"]
    host = "https://www.googleapis.com/compute/v1/projects/host-proj/"
    instance["networkInterfaces"][0].update(network=host + "global/networks/net-0",
                                            subnetwork=host + "regions/us-central1/subnetworks/net-0-sub")
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps(listing))
    server, state, env = start_api(tmp_path, instances)
    try:
        rc, out = bake(env)
    finally:
        server.kill()
        server.wait()
    assert rc == 0, out
    posts = dict((r["path"].rsplit("/", 1)[1], r) for r in requests_made(state) if r["method"] == "POST")
    template = posts["instanceTemplates"]["body"]["properties"]
    assert template["scheduling"] == {"onHostMaintenance": "TERMINATE", "automaticRestart": True, "preemptible": False,
                                      "provisioningModel": "RESERVATION_BOUND", "instanceTerminationAction": "STOP"}
    assert template["reservationAffinity"] == instance["reservationAffinity"]
    assert template["resourcePolicies"] == ["a4-compact"]
    nic0 = template["networkInterfaces"][0]
    assert (nic0["network"], nic0["subnetwork"]) == ("projects/host-proj/global/networks/net-0",
                                                     "projects/host-proj/regions/us-central1/subnetworks/net-0-sub")
    assert template["networkInterfaces"][1]["network"] == "projects/my-project/global/networks/a4-net-1"


@pytest.mark.parametrize("interrupted_at, stopped", [
    ("/stop", False),  # the node left its group, still runs
    ("/global/images", True),  # stopped: inventories/gcp-mig (status = RUNNING) no longer lists it
    ("/resize", True),  # image and template made, the group on the new template at the smaller size
])
def test_a_bake_interrupted_half_way_resumes_where_it_stopped(api, tmp_path, interrupted_at, stopped):
    state, env = api
    (state / "fail-once").write_text("POST %s\n" % interrupted_at)
    rc, out = bake(env)
    assert rc != 0 and "fixture: interrupted at" in out, out
    record = tmp_path / "home" / ".cache" / "moe_infra_deepep" / "bakes" / "deepep-b200-20261124.json"
    assert json.loads(record.read_text())["size_before"] == 1
    if stopped:
        # What the inventory then shows: the group's other instances, not the stopped source.
        with open(os.path.join(FIXTURES, "gcp", "aggregated_instances.json")) as handle:
            listing = json.load(handle)
        listing["items"]["zones/us-central1-b"]["instances"] = []
        (tmp_path / "running.json").write_text(json.dumps(listing))
        shutil.rmtree(str(tmp_path / "inventory-cache"))  # the plugin asks again, as after the cache's timeout
        subprocess.run([sys.executable, os.path.join(FIXTURES, "gcp_inventory.py"), str(tmp_path / "running.json"),
                        os.path.join(REPO, "inventories", "gcp-mig"), str(tmp_path / "inventory-cache")],
                       check=True, capture_output=True)
    rc, out = bake(env)
    assert rc == 0, out
    made = [c for c in changes(state) if c[0] == "POST"]
    # Each step once over both runs (the interrupted request is counted: it reached the stand-in), the group back
    # at the size it had before the bake, not the size the abandon left.
    steps = ["abandonInstances", "stop", "images", "instanceTemplates", "setInstanceTemplate", "resize"]
    at = steps.index(interrupted_at.rsplit("/", 1)[1])
    assert [change[1].rsplit("/", 1)[1] for change in made] == steps[:at + 1] + steps[at:], made
    resize = [r for r in requests_made(state) if r["path"].endswith("/resize") and r["status"] == 200]
    assert [r["query"] for r in resize] == [{"size": ["1"]}]
    assert not record.exists()


def test_image_only_leaves_the_group_to_its_owner(api):
    # gcp_image_rollout=false: the node leaves the group and is imaged into the family; no template is made and the
    # group is neither pointed at one nor resized (its Terraform or cluster-toolkit owner does that).
    state, env = api
    rc, out = bake(env, "-e", "gcp_image_rollout=false")
    assert rc == 0, out
    assert [c[1].rsplit("/", 1)[1] for c in changes(state)] == ["abandonInstances", "stop", "images"]
    flat = re.sub(r"\s+", " ", out)
    assert "The group a4-b200-mig was left to its owner: it is one instance smaller" in flat, flat
    before = len(requests_made(state))
    rc, out = bake(env, "-e", "gcp_image_rollout=false")
    assert rc == 0 and recap(out)["changed"] == 0, out
    assert [r["method"] for r in requests_made(state)[before:]] == ["GET"] * len(requests_made(state)[before:])
