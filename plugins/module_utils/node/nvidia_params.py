# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""NVIDIA kernel module settings: live (/proc/driver/nvidia/params) vs configured (modprobe.d)."""

from __future__ import annotations

import os
import re
import shlex

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.sysfs import list_dir, read_attr

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


SETTING_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def desired_settings(option, values):
    """registry_dwords / module_params as given -> ({name: int}, None), or (None, error message)."""
    desired = {}
    for name, value in (values or {}).items():
        if option == "module_params" and name.startswith("NVreg_"):
            name = name[len("NVreg_"):]
        number = parse_int(value) if not isinstance(value, bool) else None
        if not SETTING_NAME_RE.match(name) or number is None or number < 0:
            return None, ("%s: %s=%r is not a setting name with a non-negative integer value "
                          "(e.g. PeerMappingOverride: 1)" % (option, name, value))
        if option == "module_params" and name == "RegistryDwords":
            return None, "module_params: set RegistryDwords through registry_dwords, not module_params"
        desired[name] = number
    return desired, None


def configured_value(options, kind, name):
    """(value, file) the modprobe configuration gives a setting, or (None, None)."""
    if kind == "registry_dword":
        value, path = options.get("NVreg_RegistryDwords", (None, None))
        dwords = parse_registry_dwords(value)
        return (dwords.get(name), path) if name in dwords else (None, None)
    value, path = options.get("NVreg_" + name, (None, None))
    return (parse_int(value), path) if value is not None else (None, None)


def read_driver_settings(procfs_root, options, registry_dwords, module_params):
    """Each desired setting live (the loaded driver's params) and configured (options: effective modprobe options).

    Returns {driver_loaded, params_file, registry_dwords_live, settings}: settings one
    {name, kind, desired, live, configured, configured_in} per desired setting, registry dwords first.
    """
    params_file = os.path.join(procfs_root, "driver", "nvidia", "params")
    params_text = read_attr(params_file)
    driver_loaded = params_text is not None
    params, live_dwords = parse_params(params_text)
    settings = []
    desired = [("registry_dword", k, v) for k, v in registry_dwords.items()]
    desired += [("module_param", k, v) for k, v in module_params.items()]
    for kind, name, value in desired:
        if not driver_loaded:
            live = None
        elif kind == "registry_dword":
            live = live_registry_value(params, live_dwords, name)
        else:
            live = parse_int(params.get(name))
        configured, configured_in = configured_value(options, kind, name)
        settings.append(dict(name=name, kind=kind, desired=value, live=live,
                             configured=configured, configured_in=configured_in))
    return dict(driver_loaded=driver_loaded, params_file=params_file, settings=settings,
                registry_dwords_live=params.get("RegistryDwords", "").strip('"') if driver_loaded else None)


def settings_verdict(driver_loaded, params_file, settings):
    """{live, configured, mismatched, reboot_required, msg} of read_driver_settings' settings."""
    mismatched = [s["name"] for s in settings
                  if (driver_loaded and s["live"] != s["desired"]) or s["configured"] != s["desired"]]
    all_live = all(s["live"] == s["desired"] for s in settings) if driver_loaded else None
    all_configured = all(s["configured"] == s["desired"] for s in settings)
    reboot_required = bool(driver_loaded and settings and any(
        s["configured"] != s["live"] and s["configured"] == s["desired"] for s in settings))
    if not settings:
        msg = "no desired settings given: reported the live RegistryDwords only"
    elif not driver_loaded:
        msg = "NVIDIA driver not loaded (%s absent): settings apply when it loads" % params_file
    elif all_live:
        msg = "all desired settings are live"
    elif reboot_required:
        msg = "configured but not live: %s; reboot (or reload the nvidia module) to apply" % ", ".join(
            s["name"] for s in settings if s["live"] != s["desired"])
    else:
        msg = "not configured and not live: %s" % ", ".join(mismatched)
    return dict(live=all_live, configured=all_configured, mismatched=mismatched,
                reboot_required=reboot_required, msg=msg)


def query_driver_params(procfs_root, modprobe_dir, conf_name, registry_dwords, module_params):
    """What nvidia_driver_params returns with state=query (less changed, notes and initramfs).

    registry_dwords / module_params: checked by desired_settings.
    """
    read = read_driver_settings(procfs_root, effective_options(read_modprobe_options(modprobe_dir)),
                                registry_dwords, module_params)
    result = dict(read, conf_file=os.path.join(modprobe_dir, conf_name))
    result.update(settings_verdict(read["driver_loaded"], read["params_file"], read["settings"]))
    return result


def subset_driver_params(result, registry_dwords, module_params):
    """A query result for fewer settings, from a query of more (same node, same moment); None when result lacks
    one of them (another setting, another desired value) and a query of its own is needed."""
    wanted = [("registry_dword", k, v) for k, v in registry_dwords.items()]
    wanted += [("module_param", k, v) for k, v in module_params.items()]
    by_key = {(s["kind"], s["name"], s["desired"]): s for s in result.get("settings") or []}
    if not wanted or any(key not in by_key for key in wanted):
        return None
    settings = [by_key[key] for key in wanted]
    subset = dict(result, settings=settings)
    subset.update(settings_verdict(result["driver_loaded"], result["params_file"], settings))
    return subset
