# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the image bake (module_utils/gcp/gcp_rollout.py).

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def gcp_instance_profile(hostvars, metadata_keys=None):
    """A provisioned instance's host variables (google.cloud.gcp_compute, vars_prefix gcp_) -> the bake's
    defaults; of its metadata only the keys in metadata_keys."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.gcp.gcp_rollout import TEMPLATE_METADATA_KEYS, instance_profile

    if metadata_keys is None:
        metadata_keys = TEMPLATE_METADATA_KEYS
    if not isinstance(hostvars, dict) and not hasattr(hostvars, "get"):
        raise AnsibleFilterError("_gcp_instance_profile: want a host's variables, got %r" % (hostvars,))
    return instance_profile(dict((key, hostvars.get(key)) for key in (
        "gcp_name", "gcp_project", "gcp_zone", "gcp_metadata", "gcp_networkInterfaces", "gcp_serviceAccounts",
        "gcp_scheduling", "gcp_disks", "gcp_machineType", "gcp_guestAccelerators", "gcp_labels",
        "gcp_reservationAffinity", "gcp_resourcePolicies")),
        tuple(metadata_keys or ()))


class FilterModule(object):
    def filters(self):
        return {"_gcp_instance_profile": gcp_instance_profile}
