# -*- coding: utf-8 -*-
"""The image bake's settings check, request bodies and the profile read from an instance's inventory
variables (the Compute API answer on file, as google.cloud.gcp_compute turns it into host variables)."""

from __future__ import annotations

import copy
import json
import os

from ansible_collections.moe_infra.deepep.plugins.module_utils.gcp.gcp_rollout import (
    covers, differing, image_body, instance_profile, problems, template_body)

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gcp", "aggregated_instances.json")


def inventory_vars():
    """The host variables the inventory plugin makes of the fixture instance (links of networks become
    {name, region, selfLink}; metadata becomes key: value), prefixed gcp_."""
    with open(FIXTURE) as handle:
        instance = json.load(handle)["items"]["zones/us-central1-b"]["instances"][0]
    hv = dict(("gcp_" + key, value) for key, value in instance.items())
    hv["gcp_project"] = "my-project"
    hv["gcp_zone"] = "us-central1-b"
    hv["gcp_machineType"] = "a4-highgpu-8g"
    hv["gcp_metadata"] = dict((i["key"], i["value"]) for i in instance["metadata"]["items"])
    for nic in hv["gcp_networkInterfaces"]:
        nic["network"] = {"name": nic["network"].rsplit("/", 1)[1], "selfLink": nic["network"]}
    return hv


def settings(**changes):
    profile = instance_profile(inventory_vars())
    params = {"steps": ["abandon", "stop", "image", "template", "rollout"], "project": profile["project"],
              "zone": profile["zone"], "instance": profile["instance"], "mig": profile["mig"],
              "image": {"name": "deepep-b200-20261124", "family": "deepep-b200", "storage_location": "us-central1",
                        "labels": {}},
              "template": {"name": "deepep-b200-20261124", "machine_type": profile["machine_type"],
                           "network_interfaces": profile["network_interfaces"],
                           "accelerators": profile["accelerators"], "boot_disk_size_gb": 200,
                           "boot_disk_type": "hyperdisk-balanced", "labels": profile["labels"],
                           "service_account": profile["service_account"], "metadata": {}},
              "target_size": 4, "variables": {"image_name": "gcp_image_name", "zone": "gcp_image_zone",
                                              "network_interfaces": "gcp_image_network_interfaces"}}
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            params[outer] = dict(params[outer], **{inner: value})
        else:
            params[key] = value
    return params


def test_profile_of_an_a4_instance():
    profile = instance_profile(inventory_vars())
    assert (profile["project"], profile["zone"], profile["region"], profile["mig"]) == \
        ("my-project", "us-central1-b", "us-central1", "a4-b200-mig")
    assert profile["machine_type"] == "a4-highgpu-8g" and profile["boot_disk_size_gb"] == 200
    assert [n["nic_type"] for n in profile["network_interfaces"]] == ["GVNIC"] * 2 + ["MRDMA"] * 8
    assert [n["subnetwork"] for n in profile["network_interfaces"][2:]] == ["a4-rdma-%d" % i for i in range(8)]
    assert profile["accelerators"] == [{"type": "nvidia-b200", "count": 8}]
    # Of the metadata only Google's agent settings: not what the MIG sets itself, not the operator's ssh-keys, the
    # startup script or the OS Login override (they would reach every instance of the group); their names are said.
    assert profile["metadata"] == {"google-logging-enable": "true"} and profile["labels"] == {"deepep": "b200"}
    assert profile["metadata_left_out"] == ["enable-oslogin", "ssh-keys", "startup-script"]
    wider = instance_profile(inventory_vars(), metadata_keys=("google-logging-enable", "enable-oslogin"))
    assert wider["metadata"] == {"google-logging-enable": "true", "enable-oslogin": "FALSE"}


def test_a_differing_template_is_named_by_its_properties_never_its_values():
    wanted = template_body(settings(**{"template.metadata": {"ssh-keys": "root:ssh-ed25519 AAAA-secret"}}))["properties"]
    existing = dict(wanted, metadata={"items": [{"key": "ssh-keys", "value": "root:ssh-ed25519 BBBB-other"}]})
    assert not covers(existing, wanted)
    assert differing(existing, wanted) == ["metadata"]


def test_profile_of_a_static_host_is_empty():
    profile = instance_profile({"ansible_host": "10.0.0.5"})
    assert profile["project"] == profile["zone"] == profile["mig"] == "" and profile["network_interfaces"] == []
    # ... and the check says what to set.
    found = problems(settings(project="", zone="", mig=""))
    assert any(p.startswith("project:") for p in found) and any(p.startswith("gcp_image_zone:") for p in found)
    assert any(p.startswith("mig: empty") for p in found)


def test_good_settings_pass():
    assert problems(settings()) == []


def test_bad_settings_name_the_variable():
    found = problems(settings(**{"image.name": "DeepEP_Image", "zone": "us-central1",
                                 "image.storage_location": "mars-1"}))
    assert any(p.startswith("gcp_image_name: 'DeepEP_Image' is not a GCP resource name") for p in found), found
    assert any(p.startswith("gcp_image_zone: 'us-central1' is not a GCP zone") for p in found), found
    assert any(p.startswith("image_storage_location: 'mars-1'") for p in found), found
    nics = copy.deepcopy(settings()["template"]["network_interfaces"])
    nics[2]["external_ip"] = True
    nics[3]["nic_type"] = "RDMA"
    nics[4]["network"] = "a4 rdma; rm -rf /"
    found = problems(settings(**{"template.network_interfaces": nics}))
    assert "gcp_image_network_interfaces: interface 2: an MRDMA interface cannot have an external address" in found
    assert any("interface 3: nic_type 'RDMA' is not one of" in p for p in found)
    assert any("interface 4: network 'a4 rdma; rm -rf /' is not a network name or path" in p for p in found)
    assert any(p.startswith("target_size:") for p in problems(settings(target_size=-2)))
    assert any(p.startswith("boot_disk_type: 'pd ssd'") for p in problems(settings(**{"template.boot_disk_type": "pd ssd"})))
    assert any(p.startswith("steps:") for p in problems(settings(steps=["abandon", "delete"])))


def test_image_request():
    body = image_body(settings(), "https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-b/disks/d")
    assert body == {"name": "deepep-b200-20261124", "family": "deepep-b200", "storageLocations": ["us-central1"],
                    "sourceDisk": "https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-b/disks/d"}


def test_template_request_boots_from_the_family_with_the_rdma_nics_unaddressed():
    props = template_body(settings())["properties"]
    assert props["disks"][0]["initializeParams"] == {
        "sourceImage": "projects/my-project/global/images/family/deepep-b200", "diskSizeGb": "200",
        "diskType": "hyperdisk-balanced"}
    nics = props["networkInterfaces"]
    assert len(nics) == 10 and not any("accessConfigs" in nic for nic in nics)
    assert nics[2] == {"network": "projects/my-project/global/networks/a4-rdma", "nicType": "MRDMA",
                       "subnetwork": "projects/my-project/regions/us-central1/subnetworks/a4-rdma-0"}
    assert props["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert props["guestAccelerators"] == [{"acceleratorType": "nvidia-b200", "acceleratorCount": 8}]
    nic0 = dict(settings()["template"]["network_interfaces"][0], external_ip=True)
    with_nat = template_body(settings(**{"template.network_interfaces": [nic0]}))["properties"]["networkInterfaces"]
    assert with_nat[0]["accessConfigs"] == [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]


def test_an_existing_template_as_gcp_returns_it_covers_the_request():
    wanted = template_body(settings())["properties"]
    returned = copy.deepcopy(wanted)
    returned["machineType"] = "a4-highgpu-8g"
    for index, nic in enumerate(returned["networkInterfaces"]):
        nic.update(kind="compute#networkInterface", name="nic%d" % index,
                   network="https://www.googleapis.com/compute/v1/" + nic["network"])
    returned["disks"][0]["kind"] = "compute#attachedDisk"
    assert covers(returned, wanted)
    returned["networkInterfaces"][3]["nicType"] = "GVNIC"
    assert not covers(returned, wanted)
    assert not covers(dict(returned, networkInterfaces=returned["networkInterfaces"][:9]), wanted)


def reservation_bound_shared_vpc():
    """An A4 as cluster-toolkit's blueprint makes it: RESERVATION_BOUND capacity from a specific reservation, a
    compact placement policy, and its first interfaces in a Shared VPC of another (host) project."""
    hv = inventory_vars()
    hv["gcp_scheduling"] = {"onHostMaintenance": "TERMINATE", "automaticRestart": True, "preemptible": False,
                            "provisioningModel": "RESERVATION_BOUND", "instanceTerminationAction": "STOP"}
    hv["gcp_reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                     "key": "compute.googleapis.com/reservation-name", "values": ["a4-reservation"]}
    hv["gcp_resourcePolicies"] = [
        "https://www.googleapis.com/compute/v1/projects/my-project/regions/us-central1/resourcePolicies/a4-compact"]
    host = "https://www.googleapis.com/compute/v1/projects/host-proj/"
    hv["gcp_networkInterfaces"][0]["network"] = {"name": "net-0", "selfLink": host + "global/networks/net-0"}
    hv["gcp_networkInterfaces"][0]["subnetwork"] = host + "regions/us-central1/subnetworks/net-0-sub"
    return hv


def test_the_template_keeps_the_capacity_placement_and_shared_vpc_of_the_source():
    profile = instance_profile(reservation_bound_shared_vpc())
    assert profile["scheduling"] == {"preemptible": False, "provisioningModel": "RESERVATION_BOUND",
                                     "instanceTerminationAction": "STOP"}
    assert profile["resource_policies"] == ["a4-compact"]
    nic0 = profile["network_interfaces"][0]
    assert (nic0["network"], nic0["subnetwork"]) == ("projects/host-proj/global/networks/net-0",
                                                     "projects/host-proj/regions/us-central1/subnetworks/net-0-sub")
    assert profile["network_interfaces"][1]["network"] == "a4-net-1"  # the instance's own project: by name
    params = settings(**{"template.network_interfaces": profile["network_interfaces"],
                         "template.scheduling": profile["scheduling"],
                         "template.reservation_affinity": profile["reservation_affinity"],
                         "template.resource_policies": profile["resource_policies"]})
    assert problems(params) == []
    props = template_body(params)["properties"]
    assert props["scheduling"] == {"onHostMaintenance": "TERMINATE", "automaticRestart": True, "preemptible": False,
                                   "provisioningModel": "RESERVATION_BOUND", "instanceTerminationAction": "STOP"}
    assert props["reservationAffinity"]["consumeReservationType"] == "SPECIFIC_RESERVATION"
    assert props["reservationAffinity"]["values"] == ["a4-reservation"]
    assert props["resourcePolicies"] == ["a4-compact"]
    # The Shared VPC stays in its host project (it was re-rooted in the service project: my-project).
    assert props["networkInterfaces"][0]["network"] == "projects/host-proj/global/networks/net-0"
    assert props["networkInterfaces"][0]["subnetwork"] == "projects/host-proj/regions/us-central1/subnetworks/net-0-sub"
    assert props["networkInterfaces"][1]["network"] == "projects/my-project/global/networks/a4-net-1"


def test_scheduling_affinity_and_policies_are_checked():
    found = problems(settings(**{"template.scheduling": {"onHostMaintenance": "MIGRATE"},
                                 "template.reservation_affinity": {"consumeReservationType": "SOME"},
                                 "template.resource_policies": ["A Policy"]}))
    assert "scheduling: 'onHostMaintenance' is not one of provisioningModel, instanceTerminationAction, " \
        "maxRunDuration, preemptible, onInstanceStopAction, locationHint, nodeAffinities" in found, found
    assert any(p.startswith("reservation_affinity: consumeReservationType 'SOME' is not one of") for p in found)
    assert "resource_policies: 'A Policy' is not a resource policy name" in found
