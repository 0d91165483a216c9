# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Pure logic of the image bake (playbooks/gcp_image.yml): what the settings must look like before any API
call, the request bodies of the Compute API calls, and the profile a provisioned instance gives (its inventory
host variables from google.cloud.gcp_compute, prefixed gcp_)."""

from __future__ import annotations

import re

# GCP resource names (RFC 1035 labels, 1 to 63 characters).
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# Multi-regions an image may be stored in, besides any region.
MULTI_REGIONS = ("us", "eu", "asia")
PROJECT = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$|^[a-z][-a-z0-9.:]{4,60}[a-z0-9]$")
LABEL_KEY = re.compile(r"^[a-z][-_a-z0-9]{0,62}$")
LABEL_VALUE = re.compile(r"^[-_a-z0-9]{0,63}$")
NIC_TYPES = ("GVNIC", "VIRTIO_NET", "MRDMA", "IRDMA", "IDPF")
STEPS = ("abandon", "stop", "image", "template", "rollout")
# A network path: a name, global/networks/NAME, projects/P/global/networks/NAME or the full URL.
NETWORK = re.compile(r"^(?:(?:https://www\.googleapis\.com/compute/v1/)?projects/[^/]+/)?(?:global/networks/)?[a-z][-a-z0-9]{0,62}$")
SUBNETWORK = re.compile(r"^(?:(?:https://www\.googleapis\.com/compute/v1/)?projects/[^/]+/)?"
                        r"(?:regions/[a-z]+-[a-z]+[0-9]+/subnetworks/)?[a-z][-a-z0-9]{0,62}$")


def basename(value):
    """The last part of a link; the inventory plugin turns some links into {name, selfLink, ...}."""
    if isinstance(value, dict):
        value = value.get("selfLink") or value.get("name")
    return (value or "").rstrip("/").rsplit("/", 1)[-1]


def project_path(value, project):
    """A network or subnetwork link as the template takes it: its name when it is in the instance's own project,
    projects/<host>/... when it is not (a Shared VPC's host project must stay named)."""
    if isinstance(value, dict):
        value = value.get("selfLink") or value.get("name")
    link = (value or "").split("/compute/v1/", 1)[-1]
    if link.startswith("projects/") and link.split("/")[1] != project:
        return link
    return basename(link)


# Scheduling fields copied from the source instance besides onHostMaintenance and automaticRestart: how its
# capacity is provisioned (RESERVATION_BOUND, SPOT, FLEX_START) and what ends it. Left out, the group's instances
# would be STANDARD and could not take A4 capacity bound to a reservation.
SCHEDULING_KEYS = ("provisioningModel", "instanceTerminationAction", "maxRunDuration", "preemptible",
                   "onInstanceStopAction", "locationHint", "nodeAffinities")
RESERVATION_TYPES = ("ANY_RESERVATION", "SPECIFIC_RESERVATION", "NO_RESERVATION", "SPECIFIC_THEN_ANY_RESERVATION",
                     "SPECIFIC_THEN_NO_RESERVATION")


def region_of(zone):
    return zone.rsplit("-", 1)[0] if zone else ""


def problems(params):
    """Every setting that would make an API call fail or do the wrong thing, as the variable to set."""
    found = []
    var = params.get("variables", {})

    def say(option, text):
        found.append("%s: %s" % (var.get(option, option), text))

    def name(option, value, what):
        if not value:
            say(option, "empty; set the %s" % what)
        elif not NAME.match(value):
            say(option, "%r is not a GCP resource name (lowercase letters, digits and '-', 1-63, starting with a "
                        "letter)" % value)

    steps = params.get("steps") or []
    for step in steps:
        if step not in STEPS:
            say("steps", "%r is not one of %s" % (step, ", ".join(STEPS)))
    if not params.get("project") or not PROJECT.match(params["project"]):
        say("project", "%r is not a GCP project ID" % params.get("project"))
    if not params.get("zone") or not ZONE.match(params["zone"]):
        say("zone", "%r is not a GCP zone (like us-central1-b)" % params.get("zone"))
    name("instance", params.get("instance"), "instance the image is made from")
    name("mig", params.get("mig"), "managed instance group")
    image = params.get("image") or {}
    name("image_name", image.get("name"), "image name")
    name("image_family", image.get("family"), "image family")
    location = image.get("storage_location") or ""
    if location and not (REGION.match(location) or location in MULTI_REGIONS):
        say("image_storage_location", "%r is neither a region (like us-central1) nor one of %s"
            % (location, ", ".join(MULTI_REGIONS)))
    template = params.get("template") or {}
    name("template_name", template.get("name"), "instance template name")
    name("machine_type", template.get("machine_type"), "machine type (like a4-highgpu-8g)")
    if template.get("boot_disk_type"):
        name("boot_disk_type", template["boot_disk_type"], "boot disk type (like hyperdisk-balanced)")
    nics = template.get("network_interfaces") or []
    if not nics:
        say("network_interfaces", "empty; list the instance's network interfaces (an A4 has 2 gVNIC and 8 MRDMA)")
    for index, nic in enumerate(nics):
        if not nic.get("network") or not NETWORK.match(nic["network"]):
            say("network_interfaces", "interface %d: network %r is not a network name or path" % (index, nic.get("network")))
        if nic.get("subnetwork") and not SUBNETWORK.match(nic["subnetwork"]):
            say("network_interfaces", "interface %d: subnetwork %r is not a subnetwork name or path"
                % (index, nic["subnetwork"]))
        if nic.get("nic_type") and nic["nic_type"] not in NIC_TYPES:
            say("network_interfaces", "interface %d: nic_type %r is not one of %s"
                % (index, nic["nic_type"], ", ".join(NIC_TYPES)))
        if nic.get("nic_type") == "MRDMA" and nic.get("external_ip"):
            say("network_interfaces", "interface %d: an MRDMA interface cannot have an external address" % index)
    for index, accel in enumerate(template.get("accelerators") or []):
        if not accel.get("type") or not NAME.match(accel["type"]) or int(accel.get("count") or 0) < 1:
            say("accelerators", "entry %d: want a type (like nvidia-b200) and a count >= 1" % index)
    for option, labels in (("image_labels", image.get("labels")), ("template_labels", template.get("labels"))):
        for key, value in (labels or {}).items():
            if not LABEL_KEY.match(str(key)) or not LABEL_VALUE.match(str(value)):
                say(option, "label %s=%s: keys and values are lowercase letters, digits, '-' and '_'" % (key, value))
    size = params.get("target_size")
    if size is not None and int(size) < 0:
        say("target_size", "%s is below 0" % size)
    if int(template.get("boot_disk_size_gb") or 0) < 0:
        say("boot_disk_size_gb", "below 0")
    for key in sorted(set(template.get("scheduling") or {}) - set(SCHEDULING_KEYS)):
        say("scheduling", "%r is not one of %s" % (key, ", ".join(SCHEDULING_KEYS)))
    affinity = template.get("reservation_affinity") or {}
    if affinity:
        if set(affinity) - {"consumeReservationType", "key", "values"}:
            say("reservation_affinity", "takes consumeReservationType, key and values only")
        if affinity.get("consumeReservationType") not in RESERVATION_TYPES:
            say("reservation_affinity", "consumeReservationType %r is not one of %s"
                % (affinity.get("consumeReservationType"), ", ".join(RESERVATION_TYPES)))
    for policy in template.get("resource_policies") or []:
        if not NAME.match(str(policy)):
            say("resource_policies", "%r is not a resource policy name" % (policy,))
    return found


def image_body(params, source_disk):
    image = params["image"]
    body = {"name": image["name"], "family": image["family"], "sourceDisk": source_disk}
    if image.get("storage_location"):
        body["storageLocations"] = [image["storage_location"]]
    if image.get("description"):
        body["description"] = image["description"]
    if image.get("labels"):
        body["labels"] = dict(image["labels"])
    return body


def network_path(project, value, kind, region):
    """A network or subnetwork as the API takes it in a template (projects/P/...)."""
    if "/" not in value:
        value = ("global/networks/%s" if kind == "network" else "regions/" + region + "/subnetworks/%s") % value
    if value.startswith("https://"):
        value = value.split("/compute/v1/", 1)[1]
    if not value.startswith("projects/"):
        value = "projects/%s/%s" % (project, value)
    return value


def template_body(params):
    project, template, image = params["project"], params["template"], params["image"]
    region = region_of(params["zone"])
    initialize = {"sourceImage": "projects/%s/global/images/family/%s" % (project, image["family"])}
    if template.get("boot_disk_size_gb"):
        initialize["diskSizeGb"] = str(template["boot_disk_size_gb"])
    if template.get("boot_disk_type"):
        initialize["diskType"] = template["boot_disk_type"]
    nics = []
    for nic in template["network_interfaces"]:
        entry = {"network": network_path(project, nic["network"], "network", region)}
        if nic.get("subnetwork"):
            entry["subnetwork"] = network_path(project, nic["subnetwork"], "subnetwork", region)
        if nic.get("nic_type"):
            entry["nicType"] = nic["nic_type"]
        # No accessConfigs: no external address (never on the RDMA interfaces).
        if nic.get("external_ip"):
            entry["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]
        nics.append(entry)
    properties = {
        "machineType": template["machine_type"],
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT", "initializeParams": initialize}],
        "networkInterfaces": nics,
        "scheduling": dict({"onHostMaintenance": template.get("on_host_maintenance") or "TERMINATE",
                            "automaticRestart": bool(template.get("automatic_restart", True))},
                           **dict(template.get("scheduling") or {})),
    }
    # The reservation the instances take their capacity from (without it: any reservation, which a
    # SPECIFIC-only reservation does not serve) and the placement policy that keeps them together.
    if template.get("reservation_affinity"):
        properties["reservationAffinity"] = dict(template["reservation_affinity"])
    if template.get("resource_policies"):
        properties["resourcePolicies"] = list(template["resource_policies"])
    if template.get("accelerators"):
        properties["guestAccelerators"] = [{"acceleratorType": a["type"], "acceleratorCount": int(a["count"])}
                                           for a in template["accelerators"]]
    account = template.get("service_account") or {}
    if account.get("email"):
        properties["serviceAccounts"] = [{"email": account["email"],
                                          "scopes": list(account.get("scopes") or
                                                         ["https://www.googleapis.com/auth/cloud-platform"])}]
    if template.get("labels"):
        properties["labels"] = dict(template["labels"])
    if template.get("metadata"):
        properties["metadata"] = {"items": [{"key": k, "value": str(v)} for k, v in sorted(template["metadata"].items())]}
    body = {"name": template["name"], "properties": properties}
    if template.get("description"):
        body["description"] = template["description"]
    return body


def same_resource(left, right):
    """Whether two links name the same resource (full URLs, projects/... or zones/... forms)."""
    def tail(link):
        link = (link or "").split("/compute/v1/", 1)[-1]
        return link.split("/", 2)[2] if link.startswith("projects/") else link
    return bool(left) and tail(left) == tail(right)


def differing(existing, wanted):
    """The names of the template properties that differ from the request (values not shown: metadata may hold
    keys and scripts)."""
    existing = existing or {}
    return sorted(key for key, value in wanted.items() if not covers(existing.get(key), value))


def covers(existing, wanted):
    """Whether a resource GCP returns holds everything a request asked for: GCP adds fields (kind, names,
    fingerprints) and writes links in full, so equality would call every existing template different."""
    if isinstance(wanted, dict):
        return isinstance(existing, dict) and all(covers(existing.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(existing, list) and len(existing) == len(wanted) and all(
            covers(e, w) for e, w in zip(existing, wanted))
    if isinstance(wanted, str) and isinstance(existing, str) and ("/" in wanted or "/" in existing):
        return existing == wanted or same_resource(existing, wanted) or basename(existing) == wanted
    return existing == wanted or str(existing) == str(wanted)


# What the MIG sets on its instances: never copied into a template.
MIG_METADATA = ("instance-template", "created-by")
# The instance metadata a template copies by default: settings of Google's agents, nothing that grants a login
# (ssh-keys, enable-oslogin overrides) or runs code (startup-script, user-data) on every instance of the group.
TEMPLATE_METADATA_KEYS = ("google-logging-enable", "google-monitoring-enable", "enable-guest-attributes",
                          "enable-osconfig")


def instance_profile(hostvars, metadata_keys=TEMPLATE_METADATA_KEYS):
    """The bake's defaults from a provisioned instance's host variables (google.cloud.gcp_compute with
    vars_prefix gcp_): its project, zone, MIG, machine type, interfaces, accelerators, scheduling, service
    account, labels and the metadata named in metadata_keys (metadata_left_out: the names of the others, never
    their values). Empty values where the host is not from that inventory."""
    hv = hostvars or {}
    metadata = hv.get("gcp_metadata") or {}
    if "items" in metadata:  # the API's form; the inventory plugin flattens it to key: value
        metadata = dict((item.get("key"), item.get("value")) for item in metadata["items"])
    created_by = metadata.get("created-by") or ""
    nics = []
    project = hv.get("gcp_project") or ""
    for nic in hv.get("gcp_networkInterfaces") or []:
        entry = {"network": project_path(nic.get("network"), project),
                 "subnetwork": project_path(nic.get("subnetwork"), project),
                 "nic_type": nic.get("nicType") or "", "external_ip": bool(nic.get("accessConfigs"))}
        nics.append(entry)
    accounts = hv.get("gcp_serviceAccounts") or []
    scheduling = hv.get("gcp_scheduling") or {}
    boot = [d for d in hv.get("gcp_disks") or [] if d.get("boot")]
    return {
        "instance": hv.get("gcp_name") or "",
        "project": hv.get("gcp_project") or "",
        "zone": basename(hv.get("gcp_zone")),
        "region": region_of(basename(hv.get("gcp_zone"))),
        "mig": basename(created_by) if "/instanceGroupManagers/" in created_by else "",
        "machine_type": basename(hv.get("gcp_machineType")),
        "network_interfaces": nics,
        "accelerators": [{"type": basename(a.get("acceleratorType")), "count": int(a.get("acceleratorCount") or 0)}
                         for a in hv.get("gcp_guestAccelerators") or []],
        "on_host_maintenance": scheduling.get("onHostMaintenance") or "TERMINATE",
        "scheduling": dict((k, v) for k, v in scheduling.items() if k in SCHEDULING_KEYS),
        "reservation_affinity": dict(hv.get("gcp_reservationAffinity") or {}),
        "resource_policies": [basename(link) for link in hv.get("gcp_resourcePolicies") or []],
        "service_account": {"email": accounts[0].get("email", ""), "scopes": accounts[0].get("scopes") or []}
        if accounts else {"email": "", "scopes": []},
        "labels": dict(hv.get("gcp_labels") or {}),
        "metadata": dict((k, v) for k, v in metadata.items() if k in metadata_keys and k not in MIG_METADATA),
        "metadata_left_out": sorted(k for k in metadata if k not in metadata_keys
                                    and k not in MIG_METADATA + ("kind", "fingerprint")),
        "boot_disk_size_gb": int((boot[0].get("diskSizeGb") if boot else 0) or 0),
    }
