#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_node_info
short_description: Read a node's GPUs, RDMA HCAs, GPU-to-NIC mapping, CUDA toolkit and driver settings in one call
version_added: "0.3.0"
description:
  - What M(moe_infra.deepep.deepep_facts) reads, returned as this task's result instead of as facts, so the results
    of M(moe_infra.deepep.nvidia_gpu_info), M(moe_infra.deepep.rdma_hca_info),
    M(moe_infra.deepep.gpu_nic_topology_info), M(moe_infra.deepep.cuda_toolkit_info) and
    M(moe_infra.deepep.nvidia_driver_params) (O(moe_infra.deepep.nvidia_driver_params#module:state=query)),
    unchanged, under C(gpu), C(rdma), C(topology), C(cuda) and C(driver_params), and the host compiler's version
    under C(compiler) (the GDRCopy and DeepEP builds' input).
  - Read-only; never reports a change.
author:
  - moe_infra maintainers (@moe-infra)
extends_documentation_fragment:
  - moe_infra.deepep.info_module
  - moe_infra.deepep.node_reading
seealso:
  - module: moe_infra.deepep.deepep_facts
  - module: moe_infra.deepep.nvidia_gpu_info
  - module: moe_infra.deepep.rdma_hca_info
  - module: moe_infra.deepep.gpu_nic_topology_info
  - module: moe_infra.deepep.cuda_toolkit_info
  - module: moe_infra.deepep.nvidia_driver_params
"""

EXAMPLES = r"""
- name: Read the node
  moe_infra.deepep.deepep_node_info:
    hca_exclude: ["^mlx5_bond"]
    registry_dwords: {PeerMappingOverride: 1}
  register: node

- name: Show the GPUs and the mapping
  ansible.builtin.debug:
    msg: "{{ node.gpu.gpu_count }} GPUs; {{ node.topology.deepep_device_to_hca_mapping }}"
"""

RETURN = r"""
gpu:
  description: What M(moe_infra.deepep.nvidia_gpu_info) returns (C(gpus), C(gpu_count), C(compute_caps), ...).
  returned: always
  type: dict
rdma:
  description: What M(moe_infra.deepep.rdma_hca_info) returns (C(hcas), C(hca_prefix), C(ofed_version), ...).
  returned: always
  type: dict
topology:
  description: What M(moe_infra.deepep.gpu_nic_topology_info) returns (C(mapping),
    C(deepep_device_to_hca_mapping), ...).
  returned: always
  type: dict
cuda:
  description: What M(moe_infra.deepep.cuda_toolkit_info) returns (C(found), C(release), C(cuda_home), ...).
  returned: always
  type: dict
driver_params:
  description: What M(moe_infra.deepep.nvidia_driver_params) returns with
    O(moe_infra.deepep.nvidia_driver_params#module:state=query) (C(driver_loaded), C(settings), C(live),
    C(configured), C(reboot_required), C(msg), ...), less C(changed), C(notes) and C(initramfs).
  returned: always
  type: dict
compiler:
  description: The host compiler the source builds use.
  returned: always
  type: dict
  contains:
    gcc_version:
      description: What C(gcc -dumpfullversion) prints; empty when there is no C(gcc) on C(PATH).
      type: str
      sample: "12.2.0"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.node_info import NODE_OPTIONS, read_node


def main():
    module = AnsibleModule(argument_spec=dict(NODE_OPTIONS), supports_check_mode=True)
    module.exit_json(changed=False, **read_node(module, module.params))


if __name__ == "__main__":
    main()
