# -*- coding: utf-8 -*-
"""FIXTURE, run at every boot of the test VM by moe-boot-fixture.service. The VM has no NVIDIA driver and no HCAs;
this stands in for what their drivers do when they load at boot:
- the NVIDIA driver applies the `options nvidia` lines of /etc/modprobe.d: their NVreg_RegistryDwords and
  NVreg_EnableStreamMemOPs go into <fixture>/proc/driver/nvidia/params, in the driver's own format;
- DOCA's mlx5 driver renames the HCAs: once the stand-in doca-ofed is installed (its ofed_info exists), the
  sysfs tree is the GCP B200 after DOCA (mlx5_*), before it the one with rocep* names.
It also appends the boot id to <fixture>/boots, so the tests can count reboots."""

import glob
import os
import shlex
import shutil
import sys

FIXTURE = "/opt/moe-fixtures"
sys.path.insert(0, FIXTURE)

import machines  # noqa: E402
from sysfs_tree import write_nvidia_params  # noqa: E402


def modprobe_nvidia_options():
    options = {}
    for path in sorted(glob.glob("/etc/modprobe.d/*.conf")):
        with open(path) as handle:
            for line in handle:
                words = shlex.split(line, comments=True)
                if len(words) >= 3 and words[:2] == ["options", "nvidia"]:
                    for word in words[2:]:
                        name, dummy, value = word.partition("=")
                        options[name] = value
    return options


def main():
    options = modprobe_nvidia_options()
    proc = os.path.join(FIXTURE, "proc")
    shutil.rmtree(proc, ignore_errors=True)
    write_nvidia_params(proc, registry_dwords=options.get("NVreg_RegistryDwords", ""),
                        stream_memops=int(options.get("NVreg_EnableStreamMemOPs", "0")))
    sysfs = os.path.join(FIXTURE, "sys")
    shutil.rmtree(sysfs, ignore_errors=True)
    (machines.gcp_b200_doca if os.path.exists("/usr/bin/ofed_info") else machines.gcp_b200)(sysfs)
    with open("/proc/sys/kernel/random/boot_id") as handle:
        boot_id = handle.read().strip()
    with open(os.path.join(FIXTURE, "boots"), "a") as handle:
        handle.write(boot_id + "\n")


if __name__ == "__main__":
    main()
