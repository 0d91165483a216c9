# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The variables the collection's roles document (each role's meta/argument_specs.yml), read on the controller once
per process: validate.yml checks every host's variables against them (controller-side code: plugin_utils)."""

from __future__ import annotations

import os

import yaml

try:  # libyaml's parser when PyYAML has it
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader

# plugins/plugin_utils/ -> the collection's roles/
ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
_READ = {}


def role_options(roles=ROLES):
    """{name: option} from every role's meta/argument_specs.yml under roles (every entry point; main last, so that a
    role's main entry point says what its variables accept). Read once per process and directory; callers only read
    the options."""
    if roles not in _READ:
        options = {}
        for role in sorted(os.listdir(roles)):
            path = os.path.join(roles, role, "meta", "argument_specs.yml")
            if os.path.isfile(path):
                with open(path) as handle:
                    entry_points = (yaml.load(handle, Loader=SafeLoader) or {}).get("argument_specs") or {}
                for name in sorted(entry_points, key=lambda entry_point: entry_point == "main"):
                    options.update((entry_points[name] or {}).get("options") or {})
        _READ[roles] = options
    return dict(_READ[roles])
