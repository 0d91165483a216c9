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
  - What the C(preflight) role reads before any layer changes, in one module call instead of six; the results
    of M(moe_infra.deepep.nvidia_gpu_info), M(moe_infra.deepep.rdma_hca_info),
    M(moe_infra.deepep.gpu_nic_topology_info), M(moe_infra.deepep.cuda_toolkit_info) and
    M(moe_infra.deepep.nvidia_driver_params) (O(moe_infra.deepep.nvidia_driver_params#module:state=query)),
    unchanged, under C(gpu), C(rdma), C(topology), C(cuda) and C(driver_params), and the host compiler's version
    under C(compiler) (the GDRCopy and DeepEP builds' input).
  - Read-only; never reports a change.
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
      - Path or name of C(nvidia-smi). When it cannot be found, only sysfs data is returned for the GPUs.
    type: str
    default: nvidia-smi
  include_dirs:
    description:
      - Include directories searched, in order, for C(infiniband/mlx5_api.h).
    type: list
    elements: path
    default: [/usr/include]
  hca_include:
    description:
      - Regular expressions; when given, only HCAs whose name matches one of them are mapped.
    type: list
    elements: str
    default: []
  hca_exclude:
    description:
      - Regular expressions; HCAs whose name matches one of them are not mapped.
    type: list
    elements: str
    default: []
  link_layer:
    description:
      - Link layer to map; C(auto) takes the link layer of most ACTIVE ports.
    type: str
    choices: [auto, InfiniBand, Ethernet]
    default: auto
  cuda_home:
    description:
      - CUDA installation to look at first (then C(nvcc) on C(PATH)).
    type: path
    default: /usr/local/cuda
  procfs_root:
    description:
      - Root of the procfs tree the loaded NVIDIA driver's settings are read from (C(driver/nvidia/params)).
    type: path
    default: /proc
  modprobe_dir:
    description:
      - Directory of the modprobe configuration the driver's configured settings are read from.
    type: path
    default: /etc/modprobe.d
  registry_dwords:
    description:
      - Registry dwords to report live and configured, as for M(moe_infra.deepep.nvidia_driver_params).
    type: dict
    default: {}
  module_params:
    description:
      - NVIDIA module parameters to report live and configured, as for M(moe_infra.deepep.nvidia_driver_params).
    type: dict
    default: {}
extends_documentation_fragment:
  - moe_infra.deepep.info_module
seealso:
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

from ansible_collections.moe_infra.deepep.plugins.module_utils.node_info import (
    cuda_info,
    gpu_info,
    rdma_info,
    topology_info,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.nvidia_params import (
    desired_settings,
    query_driver_params,
)

# The conf file nvidia_driver_params writes by default (the regkey layer's); reported, not read on its own.
CONF_NAME = "nvidia-deepep.conf"


def gcc_version(module):
    """gcc -dumpfullversion, '' without a gcc on PATH (a node before its build prerequisites)."""
    gcc = module.get_bin_path("gcc")
    if not gcc:
        return ""
    rc, out, err = module.run_command([gcc, "-dumpfullversion"])
    if rc != 0:
        module.fail_json(msg="%s -dumpfullversion failed (rc %d): %s" % (gcc, rc, (err or out).strip()))
    return out.strip()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            include_dirs=dict(type="list", elements="path", default=["/usr/include"]),
            hca_include=dict(type="list", elements="str", default=[]),
            hca_exclude=dict(type="list", elements="str", default=[]),
            link_layer=dict(type="str", default="auto", choices=["auto", "InfiniBand", "Ethernet"]),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            procfs_root=dict(type="path", default="/proc"),
            modprobe_dir=dict(type="path", default="/etc/modprobe.d"),
            registry_dwords=dict(type="dict", default={}),
            module_params=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    desired = {}
    for option in ("registry_dwords", "module_params"):
        desired[option], error = desired_settings(option, p[option])
        if error:
            module.fail_json(msg=error)
    topology = topology_info(module, p["sysfs_root"], p["hca_include"], p["hca_exclude"], p["link_layer"])
    module.exit_json(
        changed=False,
        gpu=gpu_info(module, p["sysfs_root"], p["nvidia_smi"]),
        rdma=rdma_info(module, p["sysfs_root"], p["include_dirs"]),
        topology=topology,
        cuda=cuda_info(module, p["cuda_home"]),
        driver_params=query_driver_params(p["procfs_root"], p["modprobe_dir"], CONF_NAME,
                                          desired["registry_dwords"], desired["module_params"]),
        compiler=dict(gcc_version=gcc_version(module)),
    )


if __name__ == "__main__":
    main()
