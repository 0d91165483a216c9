#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_hca_info
short_description: Discover RDMA HCAs, their ports and GID tables from sysfs
version_added: "0.1.0"
description:
  - Reads every device under C(<sysfs_root>/class/infiniband) and reports its name, name family,
    PCI address, NUMA node, netdevs and, per port, state, physical state, link layer, rate and the
    RoCE v2 IPv4-mapped GID index that C(NVSHMEM_IB_GID_INDEX) needs.
  - Also reports the common HCA name prefix for C(NVSHMEM_HCA_PREFIX), the installed MLNX_OFED/DOCA-OFED
    version (C(ofed_info -s)) and whether the rdma-core headers declare
    C(MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT), which IBGDA builds need.
  - Read-only; never reports a change.
deprecated:
  removed_in: 1.0.0
  why: moe_infra.deepep.deepep_facts reads this part of a node, and any other, in one module.
  alternative: moe_infra.deepep.deepep_facts with gather_subset [rdma], which returns it under deepep.rdma.
author:
  - moe_infra maintainers (@moe-infra)
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read. Tests point it at a fixture tree laid out like the kernel's.
    type: path
    default: /sys
  include_dirs:
    description:
      - Include directories searched, in order, for C(infiniband/mlx5_api.h).
    type: list
    elements: path
    default: [/usr/include]
  wait_for_active:
    description:
      - Seconds to wait, re-reading every 2 s, until every HCA has an C(ACTIVE) port and every C(ACTIVE) Ethernet
        (RoCE) port has a RoCE v2 IPv4 GID. Right after a reboot the links and their addresses take a while;
        0 reads once. The module returns what it read last either way (the caller judges it).
    type: int
    default: 0
extends_documentation_fragment:
  - moe_infra.deepep.info_module
notes:
  - A GID slot whose type attribute cannot be read (the kernel returns EINVAL for empty slots) is skipped.
seealso:
  - module: moe_infra.deepep.gpu_nic_topology_info
"""

EXAMPLES = r"""
- name: Discover RDMA HCAs
  moe_infra.deepep.rdma_hca_info:
  register: rdma

- name: Show the NVSHMEM HCA prefix and RoCE GID index of the first HCA
  ansible.builtin.debug:
    msg: "{{ rdma.hca_prefix }} / {{ rdma.hcas[0].ports[0].roce_v2_ipv4_gid_index }}"
  when: rdma.hcas | length > 0
"""

RETURN = r"""
hcas:
  description: Every RDMA device, in natural name order (mlx5_2 before mlx5_10).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Device name under C(/sys/class/infiniband).
      type: str
      sample: mlx5_0
    family:
      description: Name family, C(mlx5), C(rocep) (rdma-core PCI naming, as on GCP B200 before DOCA) or C(other).
      type: str
      sample: mlx5
    pci_address:
      description: PCI address of the HCA (4-digit domain, lower case).
      type: str
      sample: "0000:1b:00.0"
    numa_node:
      description: NUMA node of the PCI device (-1 when the platform does not say).
      type: int
      sample: 0
    netdevs:
      description: Network interfaces of the PCI device.
      type: list
      elements: str
      sample: [ens1f0np0]
    virtual_function:
      description: Whether the device is an SR-IOV virtual function (IBGDA needs physical functions).
      type: bool
    fw_ver:
      description: Firmware version.
      type: str
    board_id:
      description: Board id.
      type: str
    node_type:
      description: Node type as sysfs prints it.
      type: str
    ports:
      description: Ports in number order.
      type: list
      elements: dict
      contains:
        port:
          description: Port number.
          type: int
        state:
          description: Logical state (C(ACTIVE), C(DOWN), C(INIT), ...).
          type: str
        phys_state:
          description: Physical state (C(LinkUp), C(Disabled), ...).
          type: str
        link_layer:
          description: C(InfiniBand) or C(Ethernet) (RoCE).
          type: str
        rate:
          description: Rate as sysfs prints it.
          type: str
          sample: 400 Gb/sec (4X NDR)
        roce_v2_ipv4_gid_index:
          description: Lowest GID index of type RoCE v2 holding an IPv4-mapped address; null on InfiniBand or when none.
          type: int
          sample: 3
        port_xmit_data:
          description: C(counters/port_xmit_data), data sent in units of 4 bytes; null without counters.
          type: int
        port_rcv_data:
          description: C(counters/port_rcv_data), data received in units of 4 bytes; null without counters.
          type: int
        gids:
          description: Non-empty GID entries with index, gid, type and netdev.
          type: list
          elements: dict
hca_prefix:
  description: Name prefix shared by the HCAs that have an ACTIVE port, for C(NVSHMEM_HCA_PREFIX); null when none.
  returned: always
  type: str
  sample: rocep
ofed_version:
  description: First line of C(ofed_info -s) without the trailing colon; null when C(ofed_info) is absent.
  returned: always
  type: str
  sample: OFED-internal-25.01-0.6.0
mlx5_api_header:
  description: Path of the C(infiniband/mlx5_api.h) that was read; null when none was found.
  returned: always
  type: str
dmabuf_data_direct:
  description: Whether that header declares C(MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT).
  returned: always
  type: bool
mlx5dv_include_dirs:
  description: The O(include_dirs) that hold rdma-core's direct-verbs header C(infiniband/mlx5dv.h), in their order.
  returned: always
  type: list
  elements: str
waited_seconds:
  description: How long the module waited for the ports (O(wait_for_active)); 0 when the first read was ready.
  returned: always
  type: float
mellanox_pci_devices:
  description:
    - PCI addresses of Mellanox (vendor 0x15b3) Ethernet or InfiniBand functions under
      C(<sysfs_root>/bus/pci/devices), whether or not a driver bound them. The C(doca_ofed) role uses it to tell
      "no Mellanox hardware" from "hardware without an RDMA driver".
  returned: always
  type: list
  elements: str
  sample: ["0000:04:00.0"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.node_info import rdma_info_when_ready


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            include_dirs=dict(type="list", elements="path", default=["/usr/include"]),
            wait_for_active=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, **rdma_info_when_ready(module, p["sysfs_root"], p["include_dirs"], p["wait_for_active"]))


if __name__ == "__main__":
    main()
