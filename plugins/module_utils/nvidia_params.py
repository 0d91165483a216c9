# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""NVIDIA kernel module settings: live (/proc/driver/nvidia/params) vs configured (modprobe.d)."""

from __future__ import annotations

import os
import re
import shlex

from ansible_collections.moe_infra.deepep.plugins.module_utils.sysfs import list_dir, read_attr

PARAMS_LINE_RE = re.compile(r"^([A-Za-z0-9_]+):\s*(.*)$")


def parse_int(value):
    """'1', '0x1', ' 0X01 ' -> 1; None for anything else."""
    if value is None:
        return None
    text = str(value).strip().strip('"')
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def parse_registry_dwords(text):
    """'PeerMappingOverride=1;RMFoo=0x10' -> {'PeerMappingOverride': 1, 'RMFoo': 16} (keys in order)."""
    result = {}
    for item in (text or "").strip().strip('"').split(";"):
        if "=" not in item:
            continue
        key, value = item.split("=", 1)
        key = key.strip()
        if key:
            result[key] = parse_int(value) if parse_int(value) is not None else value.strip()
    return result


def format_registry_dwords(dwords):
    """{'PeerMappingOverride': 1} -> 'PeerMappingOverride=1;' (the form the driver echoes)."""
    return "".join("%s=%s;" % (key, value) for key, value in dwords.items())


def parse_params(text):
    """/proc/driver/nvidia/params -> ({name: raw value}, {registry key: value}).

    Registry dwords come from `RegistryDwords: "K=V;"`; older drivers also
    print a `PeerMappingOverride: 1` line, which counts for that key.
    """
    params = {}
    for line in (text or "").splitlines():
        match = PARAMS_LINE_RE.match(line.strip())
        if match:
            params[match.group(1)] = match.group(2).strip()
    registry = parse_registry_dwords(params.get("RegistryDwords", ""))
    return params, registry


def live_registry_value(params, registry, key):
    if key in registry:
        return registry[key]
    # Older drivers: registry keys they know show as their own line.
    if key in params:
        return parse_int(params[key])
    return None


def read_modprobe_options(modprobe_dir, module="nvidia"):
    """`options <module> ...` settings in <modprobe_dir>/*.conf, in the order modprobe reads them.

    Returns a list of (file, parameter, value). Later entries win.
    """
    settings = []
    for entry in list_dir(modprobe_dir):
        if not entry.endswith(".conf"):
            continue
        path = os.path.join(modprobe_dir, entry)
        text = read_attr(path, "")
        for line in re.sub(r"\\\n", " ", text).splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if len(words) < 3 or words[0] != "options" or words[1] != module:
                continue
            for word in words[2:]:
                name, dummy, value = word.partition("=")
                settings.append((path, name, value))
    return settings


def effective_options(settings):
    """{parameter: (value, file)} with the last setting of each parameter winning."""
    effective = {}
    for path, name, value in settings:
        effective[name] = (value, path)
    return effective


def render_conf(registry_dwords, module_params, header):
    """Content of the one conf file the module owns."""
    words = []
    if registry_dwords:
        words.append('NVreg_RegistryDwords="%s"' % format_registry_dwords(registry_dwords))
    for name, value in module_params.items():
        words.append("NVreg_%s=%s" % (name, value))
    return "%s\noptions nvidia %s\n" % (header, " ".join(words))
