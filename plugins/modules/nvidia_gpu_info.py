#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_info
short_description: Discover NVIDIA GPUs from sysfs, enriched by nvidia-smi
version_added: "0.1.0"
description:
  - Lists NVIDIA display and 3D controllers (vendor C(0x10de), PCI class C(0x0300xx) or C(0x0302xx)) under
    C(<sysfs_root>/bus/pci/devices) in PCI bus order, the order C(nvidia-smi) and
    C(CUDA_DEVICE_ORDER=PCI_BUS_ID) number them. NVSwitches and audio functions are not GPUs and are left out.
  - When C(nvidia-smi) is on the node, adds name, compute capability, driver version, memory and UUID.
    Without it (before the driver is installed) the compute capability comes from the PCI device id
    where the device is known.
  - Returns the CUDA arch list to build for in the forms PyTorch (C(TORCH_CUDA_ARCH_LIST)) and CMake
    (C(CMAKE_CUDA_ARCHITECTURES)) take.
  - Read-only; never reports a change.
deprecated:
  removed_in: 1.0.0
  why: moe_infra.deepep.deepep_facts reads this part of a node, and any other, in one module.
  alternative: moe_infra.deepep.deepep_facts with gather_subset [gpu], which returns it under deepep.gpu.
author:
  - moe_infra maintainers (@moe-infra)
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read. Tests point it at a fixture tree laid out like the kernel's.
    type: path
    default: /sys
  nvidia_smi:
    description:
      - Path or name of C(nvidia-smi). When it cannot be found, only sysfs data is returned.
    type: str
    default: nvidia-smi
extends_documentation_fragment:
  - moe_infra.deepep.info_module
seealso:
  - module: moe_infra.deepep.gpu_nic_topology_info
"""

EXAMPLES = r"""
- name: Discover GPUs
  moe_infra.deepep.nvidia_gpu_info:
  register: gpu

- name: Build for the GPUs found
  ansible.builtin.debug:
    msg: "TORCH_CUDA_ARCH_LIST={{ gpu.torch_cuda_arch_list }}"
"""

RETURN = r"""
gpus:
  description: GPUs in PCI bus order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: Position in PCI bus order (the nvidia-smi index).
      type: int
      sample: 0
    pci_address:
      description: PCI address (4-digit domain, lower case).
      type: str
      sample: "0000:00:06.0"
    numa_node:
      description: NUMA node (-1 when the platform does not say).
      type: int
    pci_device_id:
      description: PCI device id.
      type: str
      sample: "0x2335"
    pci_class:
      description: PCI class code.
      type: str
      sample: "0x030200"
    name:
      description: Product name from nvidia-smi; null without it.
      type: str
      sample: NVIDIA H200
    compute_cap:
      description: Compute capability; null when neither nvidia-smi nor the device id tells.
      type: str
      sample: "9.0"
    compute_cap_source:
      description: Where compute_cap came from, C(nvidia-smi), C(name) or C(pci_device_id).
      type: str
    driver_version:
      description: Driver version from nvidia-smi.
      type: str
      sample: "580.159.04"
    memory_total_mib:
      description: Memory in MiB from nvidia-smi.
      type: int
    uuid:
      description: GPU UUID from nvidia-smi.
      type: str
gpu_count:
  description: Number of GPUs found.
  returned: always
  type: int
  sample: 8
compute_caps:
  description: Distinct compute capabilities, ascending; empty when unknown.
  returned: always
  type: list
  elements: str
  sample: ["9.0"]
torch_cuda_arch_list:
  description: Value for C(TORCH_CUDA_ARCH_LIST); empty string when unknown.
  returned: always
  type: str
  sample: "9.0"
cmake_cuda_architectures:
  description: Value for C(CMAKE_CUDA_ARCHITECTURES); empty string when unknown.
  returned: always
  type: str
  sample: "90"
driver_version:
  description: Driver version of the first GPU nvidia-smi reports; null without nvidia-smi.
  returned: always
  type: str
driver_module_version:
  description: Version of the loaded C(nvidia) kernel module (C(module/nvidia/version) under O(sysfs_root)); null when
    no NVIDIA driver is loaded. Read without nvidia-smi.
  returned: always
  type: str
  sample: 580.159.04
nvidia_smi:
  description: Path of the nvidia-smi that was run, null when none was found or it failed.
  returned: always
  type: str
notes:
  description: Why data is incomplete (nvidia-smi missing or failing, GPUs nvidia-smi does not show).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.node_info import gpu_info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **gpu_info(module, module.params["sysfs_root"], module.params["nvidia_smi"]))


if __name__ == "__main__":
    main()
