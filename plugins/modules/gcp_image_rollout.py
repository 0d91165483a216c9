#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gcp_image_rollout
short_description: Bake a provisioned GCP instance into an image and roll it out to its managed instance group
version_added: "0.3.0"
description:
  - The steps a MIG of DeepEP nodes is scaled with, each idempotent and each a desired state read first (GET)
    and changed only where it differs, in the order given by O(steps)
  - C(abandon) takes O(instance) out of O(mig) (so the group neither heals nor deletes it while it is stopped);
    C(stop) stops it; C(image) creates O(image.name) in O(image.family) from its boot disk (refused while the
    instance runs); C(template) creates the instance template O(template.name) booting from the family, with
    the interfaces given (an RDMA interface never gets an external address); C(rollout) points O(mig) at the
    template and sets its size to O(target_size).
  - An image or a template that exists is left as it is (both are immutable in GCP); a template of that name
    with other properties fails, asking for a new name.
  - Every setting is checked before the first request; bad ones fail together, naming the variable to set
    (O(variables) maps option names to the playbook's variable names).
  - Authenticates through the google.cloud collection's session (the same O(auth_kind) and C(GCP_*)
    environment variables as its modules); it needs google-auth and requests on the controller
    (C(make gcp-extras)). The google.cloud modules are not used for these calls because, in 1.10.2, the image
    module has no storage location, the template module no interface type (MRDMA), and the MIG module updates
    with a PUT of the whole resource.
author:
  - moe_infra maintainers (@moe-infra)
options:
  steps:
    description: The steps to run, in this order.
    type: list
    elements: str
    choices: [abandon, stop, image, template, rollout]
    default: [abandon, stop, image, template, rollout]
  project:
    description: The project.
    type: str
    required: true
  zone:
    description: The zone of the instance and of the (zonal) MIG.
    type: str
    required: true
  instance:
    description: The provisioned instance the image is made from.
    type: str
    required: true
  mig:
    description: The managed instance group.
    type: str
    required: true
  image:
    description: The image.
    type: dict
    required: true
    suboptions:
      name:
        description: Its name.
        type: str
        required: true
      family:
        description: The family it joins (the template boots from the family's newest image).
        type: str
        required: true
      storage_location:
        description: A region or multi-region to store it in; empty lets GCP choose (the source's multi-region).
        type: str
        default: ""
      description:
        description: Its description.
        type: str
        default: ""
      labels:
        description: Its labels.
        type: dict
        default: {}
  template:
    description: The instance template.
    type: dict
    required: true
    suboptions:
      name:
        description: Its name.
        type: str
        required: true
      description:
        description: Its description.
        type: str
        default: ""
      machine_type:
        description: The machine type, e.g. C(a4-highgpu-8g).
        type: str
        required: true
      boot_disk_size_gb:
        description: The boot disk's size; 0 takes the image's.
        type: int
        default: 0
      boot_disk_type:
        description: The boot disk's type (A4 and A3 Ultra take Hyperdisk only).
        type: str
        default: hyperdisk-balanced
      network_interfaces:
        description:
          - The interfaces, in order (an A4 has 2 gVNIC and 8 MRDMA). C(network) and C(subnetwork) are names
            or paths; C(nic_type) one of GVNIC, VIRTIO_NET, MRDMA, IRDMA, IDPF; C(external_ip) gives the
            interface an ephemeral external address (refused on MRDMA).
        type: list
        elements: dict
        required: true
      accelerators:
        description: Guest accelerators as C(type) and C(count); empty where the machine type implies them.
        type: list
        elements: dict
        default: []
      on_host_maintenance:
        description: GPU instances must terminate on host maintenance.
        type: str
        choices: [TERMINATE, MIGRATE]
        default: TERMINATE
      automatic_restart:
        description: Restart after a host event.
        type: bool
        default: true
      scheduling:
        description:
          - Further scheduling fields in the API's form, as the source instance has them (the role copies them)
            C(provisioningModel) (C(RESERVATION_BOUND), C(SPOT), C(FLEX_START), ...), C(instanceTerminationAction),
            C(maxRunDuration), C(preemptible), C(onInstanceStopAction), C(locationHint), C(nodeAffinities).
        type: dict
        default: {}
      reservation_affinity:
        description:
          - The reservation the instances consume, in the API's form (C(consumeReservationType), C(key),
            C(values)). Without it GCP takes any reservation, which a reservation for specific use does not serve.
        type: dict
        default: {}
      resource_policies:
        description: Resource policy names (a compact placement policy) the instances are created with.
        type: list
        elements: str
        default: []
      service_account:
        description: C(email) and C(scopes) of the instances' service account; no email, none.
        type: dict
        default: {}
      labels:
        description: The instances' labels (the GCP inventory finds nodes by one).
        type: dict
        default: {}
      metadata:
        description:
          - The instances' metadata (the role copies only an allow-list of the source instance's). Never printed,
            also not when an existing template differs.
        type: dict
        default: {}
  target_size:
    description: The MIG's size after the rollout; omitted, the size is left as it is.
    type: int
  operation_timeout:
    description: Seconds to wait for each operation (an image of a large disk takes minutes).
    type: int
    default: 1800
  request_retries:
    description:
      - Further tries of a request the API answered with 429 or 503 (or a GET with any 5xx, or a connection that
        broke), waiting 2, 4, 8 ... seconds; the last answer is reported.
    type: int
    default: 3
  variables:
    description: The playbook's variable for each option, so an error names what to set.
    type: dict
    default: {}
  auth_kind:
    description: How to authenticate, as the google.cloud modules do.
    type: str
    choices: [application, machineaccount, serviceaccount, accesstoken]
    required: true
  service_account_file:
    description: The service account's JSON key file (O(auth_kind=serviceaccount)).
    type: path
  service_account_contents:
    description: The service account's JSON key (O(auth_kind=serviceaccount)).
    type: jsonarg
  service_account_email:
    description: The machine account's email (O(auth_kind=machineaccount)).
    type: str
  access_token:
    description: An OAuth2 access token (O(auth_kind=accesstoken)).
    type: str
  scopes:
    description: The OAuth2 scopes.
    type: list
    elements: str
    default: [https://www.googleapis.com/auth/compute]
  env_type:
    description: Added to the user agent, as the google.cloud modules do.
    type: str
requirements:
  - google.cloud collection (its module_utils), google-auth and requests on the controller
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
notes:
  - In check mode only GET requests are sent; RV(steps) says what each step would do.
"""

EXAMPLES = r"""
- name: Take the node out of its group before it is stopped
  moe_infra.deepep.gcp_image_rollout:
    steps: [abandon]
    project: my-project
    zone: us-central1-b
    instance: a4-b200-mig-7xk2
    mig: a4-b200-mig
    image: {name: deepep-b200-20261124, family: deepep-b200, storage_location: us-central1}
    template:
      name: deepep-b200-20261124
      machine_type: a4-highgpu-8g
      network_interfaces:
        - {network: default, subnetwork: default, nic_type: GVNIC}
        - {network: a4-rdma, subnetwork: a4-rdma-0, nic_type: MRDMA}
    auth_kind: application
"""

RETURN = r"""
steps:
  description: What each step did (or would do, in check mode), by step.
  returned: always
  type: dict
  sample: {abandon: "abandoned a4-b200-mig-7xk2 from a4-b200-mig", image: "exists: deepep-b200-20261124"}
size_before:
  description: The MIG's target size before the abandon step (the role's default size after the rollout).
  returned: when the abandon step read the group
  type: int
group_size:
  description: The MIG's target size now (null when there is no such group).
  returned: when no step is asked for and the image does not exist yet
  type: int
image_exists:
  description: Whether the image was there before this call (a bake already made it).
  returned: always
  type: bool
image:
  description: The image's link (empty before it exists).
  returned: always
  type: str
template:
  description: The template's link (empty before it exists).
  returned: always
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.moe_infra.deepep.plugins.module_utils.gcp.gcp_rollout import (
    STEPS, covers, differing, image_body, problems, same_resource, template_body)

try:
    from ansible_collections.google.cloud.plugins.module_utils.gcp_utils import GcpSession
    HAS_GOOGLE_CLOUD = True
except ImportError:
    HAS_GOOGLE_CLOUD = False

API = "https://compute.googleapis.com/compute/v1/"


class Compute(object):
    def __init__(self, module):
        self.module = module
        self.session = GcpSession(module, "compute")
        self.project = module.params["project"]
        self.zone = module.params["zone"]

    def url(self, path):
        return API + "projects/%s/%s" % (self.project, path)

    def answer(self, response, allow_missing=False):
        if allow_missing and response.status_code == 404:
            return None
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code >= 400:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            message = error.get("message") or response.text[:500]
            self.module.fail_json(msg="%s %s: %s %s" % (response.request.method, response.url, response.status_code, message))
        return data

    def send(self, method, url, **kwargs):
        """One request, tried again on a transient answer: 429/503 for any method (the API did not act on it), any
        5xx or a broken connection for a GET (reading twice is harmless)."""
        call = self.session.full_get if method == "GET" else self.session.full_post
        tries = 1 + max(self.module.params["request_retries"], 0)
        for attempt in range(1, tries + 1):
            try:
                response = call(url, **kwargs)
            except Exception as exc:  # requests' ConnectionError/Timeout (requests may not be importable here)
                if method != "GET" or attempt == tries or "Connection" not in type(exc).__name__ \
                        and "Timeout" not in type(exc).__name__:
                    raise
                time.sleep(2 ** attempt)
                continue
            transient = response.status_code in (429, 503) or method == "GET" and response.status_code >= 500
            if not transient or attempt == tries:
                return response
            time.sleep(2 ** attempt)
        return response

    def get(self, path, allow_missing=False):
        return self.answer(self.send("GET", self.url(path)), allow_missing)

    def post(self, path, body=None, params=None):
        operation = self.answer(self.send("POST", self.url(path), json=body, params=params))
        deadline = time.time() + self.module.params["operation_timeout"]
        while operation.get("status") != "DONE":
            if time.time() > deadline:
                self.module.fail_json(msg="%s did not finish in %ss" % (operation.get("name"),
                                                                        self.module.params["operation_timeout"]))
            time.sleep(2)
            operation = self.answer(self.send("GET", operation["selfLink"].replace(
                "https://www.googleapis.com/compute/v1/", API)))
        if operation.get("error"):
            self.module.fail_json(msg="%s failed: %s" % (operation.get("operationType"), operation["error"]))
        return operation


def run(module, compute):
    p = module.params
    zone = "zones/%s/" % p["zone"]
    mig_path = zone + "instanceGroupManagers/" + p["mig"]
    instance_path = zone + "instances/" + p["instance"]
    image_path = "global/images/" + p["image"]["name"]
    template_path = "global/instanceTemplates/" + p["template"]["name"]
    done = {}
    image = compute.get(image_path, allow_missing=True)
    result = {"image_exists": image is not None, "image": (image or {}).get("selfLink", ""), "template": ""}
    changed = False
    if image is None and not p["steps"]:
        # The size a bake that starts now gives the group back (the role records it before the abandon step, so
        # that a bake resumed after the abandon does not take the smaller size).
        group = compute.get(mig_path, allow_missing=True)
        result["group_size"] = int(group.get("targetSize", 0)) if group is not None else None
    for step in [s for s in STEPS if s in p["steps"]]:
        if step == "abandon":
            if image is not None:
                done[step] = "skipped: the image exists (the instance was baked already)"
                continue
            result["size_before"] = int(compute.get(mig_path).get("targetSize", 0))
            members = compute.answer(compute.send("POST", compute.url(mig_path + "/listManagedInstances")))
            links = [m.get("instance", "") for m in members.get("managedInstances", [])]
            if not any(same_resource(link, instance_path) for link in links):
                done[step] = "%s is not a member of %s" % (p["instance"], p["mig"])
                continue
            changed = True
            done[step] = "abandoned %s from %s" % (p["instance"], p["mig"])
            if not module.check_mode:
                compute.post(mig_path + "/abandonInstances", {"instances": ["projects/%s/%s" % (p["project"], instance_path)]})
        elif step == "stop":
            if image is not None:
                done[step] = "skipped: the image exists"
                continue
            state = compute.get(instance_path)["status"]
            if state in ("TERMINATED", "STOPPED"):
                done[step] = "%s is stopped" % p["instance"]
                continue
            changed = True
            done[step] = "stopped %s (was %s)" % (p["instance"], state)
            if not module.check_mode:
                compute.post(instance_path + "/stop")
        elif step == "image":
            if image is not None:
                done[step] = "exists: %s (family %s)" % (p["image"]["name"], image.get("family"))
                continue
            instance = compute.get(instance_path)
            boot = [d for d in instance.get("disks", []) if d.get("boot")]
            if not boot:
                module.fail_json(msg="%s has no boot disk to make the image from" % p["instance"])
            changed = True
            done[step] = "created %s in family %s from %s" % (p["image"]["name"], p["image"]["family"],
                                                              boot[0]["source"].rsplit("/", 1)[-1])
            if module.check_mode:
                continue
            # Stopped first (the stop step): an image of a running disk is refused unless forced, and a
            # forced one may hold a half-written file system.
            if instance.get("status") not in ("TERMINATED", "STOPPED"):
                module.fail_json(msg="%s is %s: stop it before imaging its disk (the stop step)"
                                 % (p["instance"], instance.get("status")))
            compute.post("global/images", image_body(p, boot[0]["source"]))
            result["image"] = compute.get(image_path)["selfLink"]
        elif step == "template":
            wanted = template_body(p)
            existing = compute.get(template_path, allow_missing=True)
            if existing is not None:
                if not covers(existing.get("properties"), wanted["properties"]):
                    # Names only: the metadata may hold keys and scripts.
                    differs = differing(existing.get("properties"), wanted["properties"])
                    module.fail_json(msg="instance template %s exists with other %s (templates cannot change): set "
                                         "%s to a new name" % (p["template"]["name"], ", ".join(differs),
                                                               p["variables"].get("template_name", "template.name")),
                                     differs=differs)
                done[step] = "exists: %s" % p["template"]["name"]
                result["template"] = existing["selfLink"]
                continue
            changed = True
            done[step] = "created %s (%d interfaces, boot from family %s)" % (
                p["template"]["name"], len(wanted["properties"]["networkInterfaces"]), p["image"]["family"])
            if not module.check_mode:
                compute.post("global/instanceTemplates", wanted)
                result["template"] = compute.get(template_path)["selfLink"]
        elif step == "rollout":
            mig = compute.get(mig_path)
            actions = []
            if not same_resource(mig.get("instanceTemplate"), "projects/%s/%s" % (p["project"], template_path)):
                actions.append("template %s -> %s" % (mig.get("instanceTemplate", "").rsplit("/", 1)[-1],
                                                      p["template"]["name"]))
                if not module.check_mode:
                    compute.post(mig_path + "/setInstanceTemplate",
                                 {"instanceTemplate": "projects/%s/%s" % (p["project"], template_path)})
            if p["target_size"] is not None and int(mig.get("targetSize", -1)) != p["target_size"]:
                actions.append("size %s -> %d" % (mig.get("targetSize"), p["target_size"]))
                if not module.check_mode:
                    compute.post(mig_path + "/resize", params={"size": p["target_size"]})
            changed = changed or bool(actions)
            done[step] = "; ".join(actions) if actions else "%s already uses %s%s" % (
                p["mig"], p["template"]["name"], "" if p["target_size"] is None else " at size %d" % p["target_size"])
    result.update(changed=changed, steps=done)
    return result


def main():
    gcp_env = dict(project="GCP_PROJECT", auth_kind="GCP_AUTH_KIND", service_account_file="GCP_SERVICE_ACCOUNT_FILE",
                   service_account_contents="GCP_SERVICE_ACCOUNT_CONTENTS",
                   service_account_email="GCP_SERVICE_ACCOUNT_EMAIL", access_token="GCP_ACCESS_TOKEN")
    spec = dict(
        steps=dict(type="list", elements="str", choices=list(STEPS), default=list(STEPS)),
        project=dict(type="str", required=True),
        zone=dict(type="str", required=True),
        instance=dict(type="str", required=True),
        mig=dict(type="str", required=True),
        image=dict(type="dict", required=True, options=dict(
            name=dict(type="str", required=True), family=dict(type="str", required=True),
            storage_location=dict(type="str", default=""), description=dict(type="str", default=""),
            labels=dict(type="dict", default={}))),
        template=dict(type="dict", required=True, options=dict(
            name=dict(type="str", required=True), description=dict(type="str", default=""),
            machine_type=dict(type="str", required=True), boot_disk_size_gb=dict(type="int", default=0),
            boot_disk_type=dict(type="str", default="hyperdisk-balanced"),
            network_interfaces=dict(type="list", elements="dict", required=True),
            accelerators=dict(type="list", elements="dict", default=[]),
            on_host_maintenance=dict(type="str", choices=["TERMINATE", "MIGRATE"], default="TERMINATE"),
            automatic_restart=dict(type="bool", default=True),
            scheduling=dict(type="dict", default={}), reservation_affinity=dict(type="dict", default={}),
            resource_policies=dict(type="list", elements="str", default=[]),
            service_account=dict(type="dict", default={}),
            labels=dict(type="dict", default={}), metadata=dict(type="dict", default={}, no_log=True))),
        target_size=dict(type="int"),
        operation_timeout=dict(type="int", default=1800),
        request_retries=dict(type="int", default=3),
        variables=dict(type="dict", default={}),
        auth_kind=dict(type="str", required=True, choices=["application", "machineaccount", "serviceaccount", "accesstoken"]),
        service_account_file=dict(type="path"),
        service_account_contents=dict(type="jsonarg", no_log=True),
        service_account_email=dict(type="str"),
        access_token=dict(type="str", no_log=True),
        scopes=dict(type="list", elements="str", default=["https://www.googleapis.com/auth/compute"]),
        env_type=dict(type="str"),
    )
    for option, variable in gcp_env.items():
        spec[option]["fallback"] = (env_fallback, [variable])
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    found = problems(module.params)
    if found:
        module.fail_json(msg="The image bake's settings are wrong; nothing was asked of GCP:\n- " + "\n- ".join(found),
                         problems=found)
    if not HAS_GOOGLE_CLOUD:
        module.fail_json(msg=missing_required_lib("the google.cloud collection (make gcp-extras)"))
    module.exit_json(**run(module, Compute(module)))


if __name__ == "__main__":
    main()
