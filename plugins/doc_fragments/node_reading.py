# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment(object):

    # What deepep_node_info and deepep_facts read, and from where (module_utils/node/node_info.py NODE_OPTIONS).
    DOCUMENTATION = r"""
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
"""
