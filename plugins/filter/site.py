# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Validation of the site's variables before any host is touched (module_utils/site_validate.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.module_utils.site_validate import validate


def deepep_site_problems(site_vars):
    """{name: value} of the variables set for a host -> [{var, value, accepted, msg}]."""
    if not isinstance(site_vars, dict):
        raise AnsibleFilterError("deepep_site_problems: expected a dict of variables, got %r" % (site_vars,))
    return validate(site_vars)


class FilterModule(object):
    def filters(self):
        return {"deepep_site_problems": deepep_site_problems}
