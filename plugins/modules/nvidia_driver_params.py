#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_driver_params
short_description: Compare live and configured NVIDIA driver settings; write the one conf file that sets them
version_added: "0.1.0"
description:
  - >-
    Reads the settings the loaded NVIDIA driver runs with from C(<procfs_root>/driver/nvidia/params)
    (the C(RegistryDwords: "PeerMappingOverride=1;") line, and the older C(PeerMappingOverride: 1) line form;
    hex or decimal values) and the C(options nvidia ...) lines of C(<modprobe_dir>/*.conf) in the order
    modprobe reads them.
  - Compares both with the desired registry dwords (e.g. C(PeerMappingOverride=1)) and module parameters
    (e.g. C(EnableStreamMemOPs=1)) and reports whether they are live, configured, which ones differ and
    whether a reboot (driver reload) is required to make the configuration live.
  - With O(state=present) it writes one conf file idempotently (one C(options nvidia) line, no duplicates,
    atomic write, diff support, nothing written in check mode). Registry dwords that other files set are
    carried into it so they are not lost. It fails, writing nothing, when a file read later would override
    the desired values.
  - With O(state=present) and O(initramfs) other than C(none) it also refreshes the initramfs when the conf
    file's content differs from the content it was last refreshed for (a stamp file, O(initramfs_stamp)), so a
    run cut off between the write and the refresh still refreshes next time; in check mode it only predicts it.
  - It never reloads the driver or reboots; the C(nvidia_peermapping) role asks for the reboot from the returned
    C(reboot_required) and C(changed).
author:
  - moe_infra maintainers (@moe-infra)
options:
  procfs_root:
    description:
      - Root of the procfs tree. Tests point it at a fixture tree.
    type: path
    default: /proc
  modprobe_dir:
    description:
      - Directory of modprobe configuration files.
    type: path
    default: /etc/modprobe.d
  conf_name:
    description:
      - Name of the file under O(modprobe_dir) this module owns.
    type: str
    default: nvidia-deepep.conf
  registry_dwords:
    description:
      - Desired registry dwords (C(NVreg_RegistryDwords)), name to integer value.
    type: dict
    default: {}
  module_params:
    description:
      - Desired module parameters, without the C(NVreg_) prefix, name to integer value.
    type: dict
    default: {}
  state:
    description:
      - C(query) only reports. C(present) writes the conf file with the desired settings.
        C(absent) removes the conf file.
    type: str
    choices: [query, present, absent]
    default: query
  initramfs:
    description:
      - With O(state=present), how the initramfs is refreshed for the conf file. C(auto) picks
        C(update-initramfs) or C(dracut), whichever the node has (none when it has neither); C(none) never
        refreshes it (the driver reads O(modprobe_dir) from the root file system).
    type: str
    choices: [auto, update-initramfs, dracut, none]
    default: none
  initramfs_stamp:
    description:
      - File that records the SHA-256 of the conf file content the initramfs was last refreshed for.
    type: path
    default: /var/lib/moe_infra_deepep/nvidia-peermapping.initramfs
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
notes:
  - The driver applies C(/etc/modprobe.d) when it loads; when it is loaded from the initramfs the initramfs
    must be refreshed first (O(initramfs)).
seealso:
  - name: NVIDIA GPUDirect RDMA and dma-buf
    description: Why IBGDA needs C(PeerMappingOverride=1).
    link: https://docs.nvidia.com/cuda/gpudirect-rdma/
"""

EXAMPLES = r"""
- name: Report whether PeerMappingOverride is live
  moe_infra.deepep.nvidia_driver_params:
    registry_dwords:
      PeerMappingOverride: 1
  register: params

- name: Configure PeerMappingOverride and stream memory operations
  moe_infra.deepep.nvidia_driver_params:
    registry_dwords:
      PeerMappingOverride: 1
    module_params:
      EnableStreamMemOPs: 1
    state: present
    initramfs: auto
  register: params

- name: Tell whether the node must reboot
  ansible.builtin.debug:
    var: params.reboot_required
"""

RETURN = r"""
driver_loaded:
  description: Whether C(<procfs_root>/driver/nvidia/params) exists.
  returned: always
  type: bool
params_file:
  description: The params file read.
  returned: always
  type: str
registry_dwords_live:
  description: The live C(RegistryDwords) string; null when the driver is not loaded.
  returned: always
  type: str
  sample: "PeerMappingOverride=1;"
settings:
  description: One entry per desired setting.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Registry key or module parameter name.
      type: str
    kind:
      description: C(registry_dword) or C(module_param).
      type: str
    desired:
      description: Desired value.
      type: int
    live:
      description: Value the loaded driver runs with; null when not loaded or not shown.
      type: int
    configured:
      description: Value the modprobe configuration gives after this run; null when unset.
      type: int
    configured_in:
      description: File the configured value comes from.
      type: str
live:
  description: Whether every desired setting is live; null when the driver is not loaded.
  returned: always
  type: bool
configured:
  description: Whether every desired setting is configured after this run (or would be, in check mode).
  returned: always
  type: bool
mismatched:
  description: Names of settings whose live or configured value differs from the desired one.
  returned: always
  type: list
  elements: str
reboot_required:
  description: Whether the configuration differs from what the loaded driver runs with, so a reboot
    (driver reload) is needed for it to take effect.
  returned: always
  type: bool
conf_file:
  description: Path of the file this module owns.
  returned: always
  type: str
initramfs:
  description: The initramfs refresh (with O(state=present)).
  returned: always
  type: dict
  contains:
    tool:
      description: C(update-initramfs), C(dracut), or C(none) (not asked for, or no tool on the node).
      type: str
    refreshed:
      description: Whether it was refreshed in this run (would be, in check mode).
      type: bool
    stamp:
      description: The stamp file.
      type: str
msg:
  description: Summary.
  returned: always
  type: str
"""

import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.files import write_atomic
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.nvidia_params import (
    desired_settings,
    effective_options,
    parse_registry_dwords,
    read_driver_settings,
    read_modprobe_options,
    render_conf,
    settings_verdict,
)

HEADER = "# Managed by moe_infra.deepep.nvidia_driver_params. Local edits are overwritten."


def desired_values(module, option):
    values, error = desired_settings(option, module.params[option])
    if error:
        module.fail_json(msg=error)
    return values


def planned_settings(modprobe_dir, conf_path, new_content):
    """modprobe options as they will be once conf_path holds new_content (None: removed)."""
    settings = [entry for entry in read_modprobe_options(modprobe_dir) if entry[0] != conf_path]
    if new_content is not None:
        with tempfile.TemporaryDirectory() as scratch:
            with open(os.path.join(scratch, os.path.basename(conf_path)), "w") as handle:
                handle.write(new_content)
            ours = [(conf_path, name, value) for dummy, name, value in read_modprobe_options(scratch)]
        settings.extend(ours)
        settings.sort(key=lambda entry: os.path.basename(entry[0]))
    return settings


def read_text(path):
    """Exact content of a file, None when it does not exist."""
    if not os.path.isfile(path):
        return None
    with open(path, "r") as handle:
        return handle.read()


INITRAMFS_COMMANDS = {
    "update-initramfs": ["update-initramfs", "-u", "-k", "all"],
    "dracut": ["dracut", "-f", "--regenerate-all"],
}
SBIN_DIRS = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]


def find_initramfs_tool(module):
    """(tool, path) that refreshes the initramfs here; ("none", None) when not asked for or absent."""
    wanted = module.params["initramfs"]
    if module.params["state"] != "present" or wanted == "none":
        return "none", None
    search = os.environ.get("PATH", "").split(os.pathsep) + SBIN_DIRS
    for tool in [wanted] if wanted != "auto" else list(INITRAMFS_COMMANDS):
        for directory in search:
            path = os.path.join(directory, tool)
            if directory and os.access(path, os.X_OK):
                return tool, path
    if wanted != "auto":
        module.fail_json(msg="initramfs: %s is not on this node; set initramfs to auto or none" % wanted)
    return "none", None


def refresh_initramfs(module, tool, path, conf_content):
    """Refresh the initramfs when the conf content differs from the stamp's; returns the record."""
    stamp = module.params["initramfs_stamp"]
    record = dict(tool=tool, refreshed=False, stamp=stamp)
    if tool == "none":
        return record
    checksum = hashlib.sha256(conf_content.encode("utf-8")).hexdigest()
    if (read_text(stamp) or "").strip() == checksum:
        return record
    record["refreshed"] = True
    if module.check_mode:
        return record
    rc, out, err = module.run_command([path] + INITRAMFS_COMMANDS[tool][1:])
    if rc != 0:
        why = (err or out).strip()[-2000:]
        module.fail_json(msg="%s failed (rc %d): %s" % (" ".join(INITRAMFS_COMMANDS[tool]), rc, why), initramfs=record)
    if not os.path.isdir(os.path.dirname(stamp)):
        os.makedirs(os.path.dirname(stamp), 0o755)
    write_atomic(module, stamp, checksum + "\n")
    return record


def main():
    module = AnsibleModule(
        argument_spec=dict(
            procfs_root=dict(type="path", default="/proc"),
            modprobe_dir=dict(type="path", default="/etc/modprobe.d"),
            conf_name=dict(type="str", default="nvidia-deepep.conf"),
            registry_dwords=dict(type="dict", default={}),
            module_params=dict(type="dict", default={}),
            state=dict(type="str", default="query", choices=["query", "present", "absent"]),
            initramfs=dict(type="str", default="none", choices=["auto", "update-initramfs", "dracut", "none"]),
            initramfs_stamp=dict(type="path", default="/var/lib/moe_infra_deepep/nvidia-peermapping.initramfs"),
        ),
        supports_check_mode=True,
    )
    state = module.params["state"]
    modprobe_dir = module.params["modprobe_dir"]
    conf_name = module.params["conf_name"]
    if "/" in conf_name or not conf_name.endswith(".conf"):
        module.fail_json(msg="conf_name: %r must be a file name ending in .conf (modprobe ignores other files)"
                             % conf_name)
    conf_path = os.path.join(modprobe_dir, conf_name)
    dwords = desired_values(module, "registry_dwords")
    mparams = desired_values(module, "module_params")
    if state == "present" and not (dwords or mparams):
        module.fail_json(msg="state=present needs registry_dwords or module_params, "
                             "e.g. registry_dwords: {PeerMappingOverride: 1}")

    before = read_text(conf_path)
    current = effective_options(read_modprobe_options(modprobe_dir))
    new_content = before
    notes = []
    if state == "present":
        merged = {}
        foreign_value, foreign_file = current.get("NVreg_RegistryDwords", (None, None))
        if foreign_file and foreign_file != conf_path:
            merged.update(parse_registry_dwords(foreign_value))
            notes.append("%s also sets NVreg_RegistryDwords; its other keys are kept in %s"
                         % (foreign_file, conf_path))
        merged.update(dwords)
        new_content = render_conf(merged, mparams, HEADER)
    elif state == "absent":
        new_content = None
    planned = effective_options(planned_settings(modprobe_dir, conf_path, new_content))

    read = read_driver_settings(module.params["procfs_root"], planned, dwords, mparams)
    settings = read["settings"]
    if state == "present":
        overridden = [s for s in settings if s["configured"] != s["desired"]]
        if overridden:
            module.fail_json(
                msg="a file modprobe reads after %s overrides %s; remove the setting from that file or rename %s"
                    % (conf_path, ", ".join("%s (%s in %s)" % (s["name"], s["configured"], s["configured_in"])
                                            for s in overridden), conf_name),
                settings=settings)

    tool, tool_path = find_initramfs_tool(module)
    changed = new_content != before
    if changed and not module.check_mode:
        if new_content is None:
            os.unlink(conf_path)
        else:
            if not os.path.isdir(modprobe_dir):
                os.makedirs(modprobe_dir, 0o755)
            write_atomic(module, conf_path, new_content)
    initramfs = refresh_initramfs(module, tool, tool_path, new_content or "")
    changed = changed or initramfs["refreshed"]

    verdict = settings_verdict(read["driver_loaded"], read["params_file"], settings)
    result = dict(read, changed=changed, conf_file=conf_path, notes=notes, initramfs=initramfs, **verdict)
    if module._diff and new_content != before:
        result["diff"] = dict(before=before or "", after=new_content or "",
                              before_header=conf_path, after_header=conf_path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
