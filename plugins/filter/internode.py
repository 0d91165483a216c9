# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the internode test (module_utils/report/nic_traffic.py).

Each filter imports its module_utils when called: to find any one filter of a collection, ansible-core imports every
filter file of it, from source, in every task's worker process (docs/roles-and-modules.md, "Filters")."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def deepep_nic_traffic(before, after, mapped, min_bytes=1 << 20):
    """rdma_hca_info's hcas before and after, the mapped NIC ports -> {ports, idle, unknown, problems}."""
    from ansible_collections.moe_infra.deepep.plugins.module_utils.report.nic_traffic import traffic

    for name, value in (("before", before), ("after", after), ("mapped", mapped)):
        if not isinstance(value, list):
            raise AnsibleFilterError("_deepep_nic_traffic: %s must be a list, got %r" % (name, value))
    return traffic(before, after, mapped, int(min_bytes))


class FilterModule(object):
    def filters(self):
        return {"_deepep_nic_traffic": deepep_nic_traffic}
