#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_nic_topology_info
short_description: Map each GPU to its nearest RDMA NIC port from the PCIe hierarchy
version_added: "0.1.0"
description:
  - Finds NVIDIA GPUs and RDMA HCA ports in sysfs and computes, from the resolved sysfs device paths,
    the PCIe distance of every GPU to every usable port in C(nvidia-smi topo) terms
    (C(PIX), C(PXB), C(PHB), C(NODE), C(SYS)).
  - Each GPU gets one of its nearest ports. Among equally near ports the assignment is balanced,
    deterministic, and never puts more GPUs on one port than the hardware forces (two GPUs and two
    NICs under one PCIe switch get one NIC each, as on GCP B200). Sending every GPU to C(mlx5_0)
    cuts internode bandwidth from 50-80 GB/s to about 6.5 GB/s.
  - Returns the mapping and the C(DEEP_EP_DEVICE_TO_HCA_MAPPING) string of DeepEP PR 466.
  - Ports that are not ACTIVE, ports of the other link layer and excluded HCAs are not used.
    No usable port gives an empty mapping and a message, not a failure.
  - Read-only; never reports a change.
deprecated:
  removed_in: 1.0.0
  why: moe_infra.deepep.deepep_facts reads this part of a node, and any other, in one module.
  alternative: moe_infra.deepep.deepep_facts with gather_subset [topology], which returns it under deepep.topology.
author:
  - moe_infra maintainers (@moe-infra)
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read. Tests point it at a fixture tree laid out like the kernel's.
    type: path
    default: /sys
  hca_include:
    description:
      - Regular expressions; when given, only HCAs whose name matches one of them are used.
    type: list
    elements: str
    default: []
  hca_exclude:
    description:
      - Regular expressions; HCAs whose name matches one of them are not used.
    type: list
    elements: str
    default: []
  link_layer:
    description:
      - Link layer to map. C(auto) takes the link layer of most ACTIVE ports (InfiniBand on a tie),
        which keeps an Ethernet front-end NIC off an InfiniBand fabric.
    type: str
    choices: [auto, InfiniBand, Ethernet]
    default: auto
extends_documentation_fragment:
  - moe_infra.deepep.info_module
seealso:
  - module: moe_infra.deepep.rdma_hca_info
  - module: moe_infra.deepep.nvidia_gpu_info
"""

EXAMPLES = r"""
- name: Map GPUs to NICs, leaving the front-end NIC out
  moe_infra.deepep.gpu_nic_topology_info:
    hca_exclude: ["^mlx5_bond"]
  register: topo

- name: Export the mapping for DeepEP
  ansible.builtin.debug:
    msg: "DEEP_EP_DEVICE_TO_HCA_MAPPING={{ topo.deepep_device_to_hca_mapping }}"
"""

RETURN = r"""
gpus:
  description: GPUs in PCI bus order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi index.
      type: int
    pci_address:
      description: PCI address.
      type: str
    numa_node:
      description: NUMA node.
      type: int
hcas:
  description: Usable HCA ports (ACTIVE, selected link layer, not excluded).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: HCA name.
      type: str
    port:
      description: Port number.
      type: int
    pci_address:
      description: PCI address of the HCA.
      type: str
    numa_node:
      description: NUMA node of the HCA.
      type: int
    link_layer:
      description: Link layer of the port.
      type: str
    state:
      description: Port state.
      type: str
skipped_ports:
  description: HCA ports not used, each with a C(reason).
  returned: always
  type: list
  elements: dict
link_layer:
  description: Link layer that was mapped; null when no port is active.
  returned: always
  type: str
  sample: InfiniBand
mapping:
  description: One entry per GPU, in GPU order.
  returned: always
  type: list
  elements: dict
  contains:
    gpu:
      description: GPU index.
      type: int
    hca:
      description: HCA name.
      type: str
    port:
      description: HCA port.
      type: int
    distance:
      description: PCIe distance in nvidia-smi topo terms.
      type: str
      sample: PIX
  sample:
    - {gpu: 0, hca: mlx5_0, port: 1, distance: PIX}
    - {gpu: 1, hca: mlx5_1, port: 1, distance: PIX}
distances:
  description: Distance of every GPU to every usable port, keyed by GPU index then C(hca:port).
  returned: always
  type: dict
deepep_device_to_hca_mapping:
  description: Value for C(DEEP_EP_DEVICE_TO_HCA_MAPPING) (DeepEP PR 466); empty when nothing is mapped.
  returned: always
  type: str
  sample: "0:mlx5_0:1,1:mlx5_1:1"
nvshmem_hca_list:
  description: Mapped ports in GPU order, each once, for C(NVSHMEM_HCA_LIST).
  returned: always
  type: str
  sample: "mlx5_0:1,mlx5_1:1"
msg:
  description: Why the mapping is empty, or a summary.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.node_info import topology_info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            hca_include=dict(type="list", elements="str", default=[]),
            hca_exclude=dict(type="list", elements="str", default=[]),
            link_layer=dict(type="str", default="auto", choices=["auto", "InfiniBand", "Ethernet"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, **topology_info(module, p["sysfs_root"], p["hca_include"], p["hca_exclude"],
                                                    p["link_layer"]))


if __name__ == "__main__":
    main()
