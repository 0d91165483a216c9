#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_facts
short_description: Read a node once for every layer, as the C(deepep) facts
version_added: "0.3.0"
description:
  - Reads a node's GPUs, RDMA HCAs, GPU-to-NIC mapping, CUDA toolkit, NVIDIA driver settings and compiler in one
    call (as M(moe_infra.deepep.deepep_node_info) does), applies a hand-written GPU-to-NIC mapping when one is given,
    plans what each layer would do, and returns it all as C(ansible_facts.deepep).
  - The C(preflight) role gathers it at the start of a run; a layer that changes what it read (DOCA-OFED, the CUDA
    toolkit, a reboot) gathers it again right after with O(same_as), so the layers after it read the node as it is
    now. A layer
    reads on its own only where it is told to read elsewhere (its own C(sysfs_root), C(cuda_home), ...), as the facts
    say where they were read (C(read_from)), with O(gather_subset), only the parts it needs, not as facts.
  - A hand-written mapping that names a GPU or a port the node does not have fails the task, naming the entry and
    what is accepted; nothing is changed.
  - Read-only; never reports a change.
author:
  - moe_infra maintainers (@moe-infra)
options:
  hca_mapping:
    description:
      - A hand-written GPU-to-NIC mapping that replaces the discovered one (C(deepep_hca_mapping)),
        comma-separated C(<gpu>:<hca>[:<port>]) entries or a list of them. Empty keeps the discovered mapping.
    type: raw
    default: ""
  cuda_version:
    description:
      - The CUDA release the C(cuda) layer pins (C(13.0)); the layer plan compares the toolkit found with it.
        Empty compares with nothing.
    type: str
    default: ""
  preflight_checks:
    description:
      - Also run the doctor's checks for what no layer fixes (M(moe_infra.deepep.deepep_doctor) with
        O(moe_infra.deepep.deepep_doctor#module:preflight_only)) on the trees just read, and return them under
        C(checks). What those checks need to know besides those trees, as the doctor's options of the same names.
        Unset, no checks run. No interpreter is started.
    type: dict
    suboptions:
      root:
        description: The node's root directory (the NVIDIA kernel source under C(usr/src), dpkg's status).
        type: path
        default: /
      deepep_prefix:
        description: Where the build layers install (C(deepep_prefix)).
        type: path
        default: /opt/deepep
      build_user:
        description: The unprivileged user the build layers build as (C(deepep_build_user)); empty, none.
        type: str
        default: deepep-build
      gdrcopy_kernel_module:
        description: Whether the run builds and loads gdrdrv (C(gdrcopy_kernel_module)).
        type: bool
        default: false
      nvshmem_method:
        description: Where NVSHMEM comes from (C(nvshmem_ibgda_method)).
        type: str
        choices: [wheel, source]
        default: wheel
      nvidia_driver_branch:
        description: The driver branch the C(nvidia_driver) layer installs (when it is on); empty, none.
        type: str
        default: ""
  interpreter:
    description:
      - Also read the interpreter DeepEP is built with (torch, the NCCL it loads, the NVSHMEM and NCCL wheels,
        whether C(deep_ep) imports), as M(moe_infra.deepep.torch_stack_info) does with these options and
        C(missing_ok), and return it under C(interpreter). Recorded in C(read_from), so a layer that changes the
        node or the interpreter (a reboot, an install into the venv, another NCCL) reads it again with O(same_as).
      - Unset, no interpreter is started.
    type: dict
    suboptions:
      python:
        description: The interpreter (C(deepep_python), or the deepep role's venv, which may not exist yet).
        type: path
        required: true
      pythonpath:
        description:
          - C(PYTHONPATH) for the C(deep_ep) import check (the current DeepEP build's source tree).
          - When it names directories and none of them exists there is no build to check and no import runs
            (C(deep_ep.importable) null). Another C(deep_ep) the interpreter has (a hand install, the image's) is the one the C(deepep) role
            replaces, and importing it costs seconds on every reading of a V2 node.
        type: list
        elements: path
        default: []
      cache_dir:
        description: Where the probe's answers are kept between runs (C(deepep_probe_cache_dir)); empty, nowhere.
        type: path
        default: ""
      run_as:
        description: The unprivileged user the interpreter runs as (C(deepep_test_user)); empty, the module's user.
        type: str
        default: ""
  builds:
    description:
      - Also read what the build layers installed under O(builds.root) (each directory there with a C(current) or
        C(builds) of M(moe_infra.deepep.source_build)), and return it under C(builds). With it, the plan of an
        up-to-date build (M(moe_infra.deepep.source_build) in check mode given C(known_builds)) is answered on the
        controller, without starting that module on the node. Unset, none is read.
    type: dict
    suboptions:
      root:
        description: The collection's prefix (C(deepep_prefix)), whose directories are the build prefixes.
        type: path
        required: true
      read_files:
        description: Files of each current build to read, relative to it (the layers' C(read_files)).
        type: list
        elements: str
        default: []
      build_user:
        description: The unprivileged build user (C(deepep_build_user)), whether it exists is read; empty, none.
        type: str
        default: ""
      digests:
        description:
          - Files whose sha256 and mode are read (the env script the C(deepep) role writes), so that an unchanged
            one is not written again. A file that is missing, a link or not a regular file reads as null.
        type: list
        elements: path
        default: []
      directories:
        description:
          - Directories whose mode and group are read (DeepEP V2's JIT cache, which the C(deepep) role creates), so
            that one already as the role wants it is not set again. One that is missing, a link or not a directory
            reads as null.
        type: list
        elements: path
        default: []
      report_dir:
        description:
          - The directory of DeepEP's test reports (C(deepep_report_dir)), each C(*.json) regular file directly in it
            (not through a link, up to 1 MiB) is read, so that M(moe_infra.deepep.deepep_bench) answers a test that
            passed before without a module run on the node. Unset, none is read.
        type: path
      jit_cache:
        description:
          - DeepEP V2's JIT cache (C(deepep_jit_cache_dir)), whose kernels are counted, so that a warm-up that passed
            before is answered without a module run while the cache still holds what it left. Unset, not read.
        type: path
  nccl:
    description:
      - Also plan the C(nccl) layer (DeepEP V2's NCCL where torch loads it; torch's own back for V1 after V2) on
        the O(interpreter) reading, as an entry of C(layers) before DeepEP's. Unset, C(layers) has no C(nccl) entry.
    type: dict
    suboptions:
      deepep_version:
        description: The DeepEP version the run installs (C(deepep_version)).
        type: str
        choices: [v1, v2]
        required: true
      settings:
        description: The site's C(nccl_*) variables (C(nccl_method), C(nccl_version), C(nccl_src), ...); missing ones
          take the C(nccl) role's defaults.
        type: dict
        default: {}
  prerequisites:
    description:
      - Also read which of the build prerequisites are there (the packages the C(build_prerequisites) role
        installs, gcc, g++, make, cmake, git, libibverbs-dev, python3-venv and python3-dev), as that role's own
        query finds them, and return them under C(prerequisites). A need met by a command counts when the command
        is on O(prerequisites.build_path) or C(PATH), the others when dpkg has the package installed (one
        C(dpkg-query) for all of them; none without dpkg). With it, that role runs no query of its own in a run
        whose reading has them. Unset, none is read.
    type: dict
    suboptions:
      build_path:
        description: Directories looked in before C(PATH) (C(nvshmem_ibgda_build_path), a pip-installed cmake's C(bin)).
        type: list
        elements: path
        default: []
  gather_subset:
    description:
      - What to read. V(all) reads everything and returns it as C(ansible_facts.deepep), with the layer plan and
        what O(preflight_checks), O(interpreter) and O(builds) ask for.
      - Any other list reads only those parts (C(gpu), the GPUs; C(rdma), the RDMA HCAs and rdma-core;
        C(topology), the GPU-to-NIC mapping; C(cuda), the CUDA toolkit; C(driver_params), the NVIDIA driver
        settings; C(compiler), gcc) with the other options, and returns them under RV(deepep), not as facts, so a
        layer reading its own trees (its C(cuda_home), another C(sysfs_root)) or reading again after a change of
        its own leaves the node's reading as it is. Such a reading takes none of O(hca_mapping), O(cuda_version),
        O(preflight_checks), O(interpreter), O(builds) and O(prerequisites) (they need the whole node).
    type: list
    elements: str
    choices: [all, gpu, rdma, topology, cuda, driver_params, compiler]
    default: [all]
  wait_for_active:
    description:
      - Seconds to keep reading the RDMA HCAs (every 2 s) until every HCA has an C(ACTIVE) port and every active
        RoCE port its RoCE v2 IPv4 GID (links come up a while after a boot). C(rdma.waited_seconds) says how long it
        waited. 0 reads once. Not recorded in C(read_from).
    type: int
    default: 0
  same_as:
    description:
      - Read again with the options an earlier reading recorded (its C(read_from)), in place of the other options
        (but for O(gather_subset) and O(wait_for_active)).
        A layer that changed the node passes C(ansible_facts.deepep.read_from) and needs none of the preflight
        role's settings.
      - An unknown key fails the task.
    type: dict
extends_documentation_fragment:
  - moe_infra.deepep.info_module
  - moe_infra.deepep.node_reading
seealso:
  - module: moe_infra.deepep.deepep_node_info
"""

EXAMPLES = r"""
- name: Read the node for every layer
  moe_infra.deepep.deepep_facts:
    registry_dwords: {PeerMappingOverride: 1}
    cuda_version: "13.0"

- name: Show the GPUs, the mapping and the plan
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts.deepep.gpu.gpu_count }} GPUs; {{ ansible_facts.deepep.topology.deepep_device_to_hca_mapping }};
      {{ ansible_facts.deepep.layers | map(attribute='layer') | zip(ansible_facts.deepep.layers
         | map(attribute='status')) | map('join', '=') | join(', ') }}

- name: Read only the GPUs and the driver settings, after this layer's reboot, leaving the facts as they are
  moe_infra.deepep.deepep_facts:
    gather_subset: [gpu, driver_params]
  register: after_reboot

- name: Read the HCAs until their links are up (at most 2 minutes)
  moe_infra.deepep.deepep_facts:
    gather_subset: [rdma]
    wait_for_active: 120
  register: hcas
"""

RETURN = r"""
ansible_facts:
  description: The node as read now.
  returned: with O(gather_subset) V(all)
  type: dict
  contains:
    deepep:
      description:
        - C(gpu), C(rdma), C(topology), C(cuda), C(driver_params) and C(compiler) as
          M(moe_infra.deepep.deepep_node_info) returns them (C(topology) with the hand-written mapping in place when
          one was given, then C(mapping_source) is C(deepep_hca_mapping)).
        - C(layers), what each layer would do (C(layer), C(status) of C(ok), C(change), C(reboot), C(skip) or
          C(blocked), C(found), C(action)).
        - C(read_from), every option it was read with (C(sysfs_root), C(procfs_root), C(modprobe_dir),
          C(include_dirs), C(cuda_home), C(hca_mapping), C(cuda_version), ...), what O(same_as) takes.
        - C(interpreter), with O(interpreter), what M(moe_infra.deepep.torch_stack_info) returns for it
          (C(exists) false for an interpreter not created yet; C(deep_ep.importable) null when no directory of
          O(interpreter.pythonpath) exists, not checked); absent otherwise.
        - C(checks), with O(preflight_checks), the doctor's checks for what no layer fixes (C(findings),
          C(summary), C(node) as M(moe_infra.deepep.deepep_doctor) returns them); absent otherwise.
        - C(builds), with O(builds), C(root), C(read_files), C(build_user), C(build_user_exists) and per build
          prefix (C(prefixes)) the fingerprint C(current) points at and its C(install_dir), whether that build is
          C(stamped) (verified),
          its C(files) and the C(lock_holder) (the run building there now; null when none); C(digests), the
          C(sha256) and C(mode) of each file of O(builds.digests) (null when it is not a regular file); C(directories),
          the C(mode) and C(group) of each directory of O(builds.directories) (null when it is not a directory);
          C(reports), with O(builds.report_dir), each JSON report there by path (null when it is not a JSON object);
          C(jit_cache), with O(builds.jit_cache), the cache's C(dir), C(exists), C(kernels), C(corrupted), C(bytes),
          C(tmp_entries), C(mode) and C(gid).
        - C(prerequisites), with O(prerequisites), C(build_path) and C(present), the names of the packages found
          there (sorted); absent otherwise.
        - C(read_at), when it was read (nanoseconds since the epoch), so that a reading kept from an earlier one is told
          apart by it.
      type: dict
      returned: with O(gather_subset) V(all)
deepep:
  description:
    - With a O(gather_subset) other than V(all), the parts it names, each as C(ansible_facts.deepep) has it
      (C(rdma.waited_seconds) with O(wait_for_active)), and C(read_from), the options it was read with (those a
      reading of parts takes).
  returned: with a O(gather_subset) other than V(all)
  type: dict
  sample: {"cuda": {"found": true, "release": "13.0", "nvcc": "/usr/local/cuda/bin/nvcc"}}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_state import read_builds
from ansible_collections.moe_infra.deepep.plugins.module_utils.report.doctor_evidence import PREFLIGHT_OPTIONS, preflight_checks
from ansible_collections.moe_infra.deepep.plugins.module_utils.build import nccl as nccl_plan
from ansible_collections.moe_infra.deepep.plugins.module_utils.report.layer_plan import layer_plan, with_nccl
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.node_info import NODE_OPTIONS, NODE_PARTS, read_node
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.topology import apply_manual_mapping
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.torch_probe import read_stack
from ansible_collections.moe_infra.deepep.plugins.module_utils.system.prerequisites import packages_present

INTERPRETER_OPTIONS = dict(python=dict(type="path", required=True),
                           pythonpath=dict(type="list", elements="path", default=[]),
                           cache_dir=dict(type="path", default=""), run_as=dict(type="str", default=""))


BUILDS_OPTIONS = dict(root=dict(type="path", required=True), read_files=dict(type="list", elements="str", default=[]),
                      build_user=dict(type="str", default=""), digests=dict(type="list", elements="path", default=[]),
                      directories=dict(type="list", elements="path", default=[]), report_dir=dict(type="path"),
                      jit_cache=dict(type="path"))

PREREQUISITES_OPTIONS = dict(build_path=dict(type="list", elements="path", default=[]))

NCCL_OPTIONS = dict(deepep_version=dict(type="str", required=True, choices=["v1", "v2"]),
                    settings=dict(type="dict", default={}))

# What only a whole reading (gather_subset all) takes: they need every part.
WHOLE_NODE_OPTIONS = ("hca_mapping", "cuda_version", "preflight_checks", "interpreter", "builds", "nccl",
                      "prerequisites")

READ_OPTIONS = dict(NODE_OPTIONS, hca_mapping=dict(type="raw", default=""), cuda_version=dict(type="str", default=""),
                    preflight_checks=dict(type="dict", options=PREFLIGHT_OPTIONS),
                    interpreter=dict(type="dict", options=INTERPRETER_OPTIONS),
                    builds=dict(type="dict", options=BUILDS_OPTIONS),
                    nccl=dict(type="dict", options=NCCL_OPTIONS),
                    prerequisites=dict(type="dict", options=PREREQUISITES_OPTIONS))


def main():
    module = AnsibleModule(argument_spec=dict(
        READ_OPTIONS, same_as=dict(type="dict"),
        gather_subset=dict(type="list", elements="str", default=["all"], choices=["all"] + list(NODE_PARTS)),
        wait_for_active=dict(type="int", default=0)), supports_check_mode=True)
    p = dict((name, module.params[name]) for name in READ_OPTIONS)
    if module.params["same_as"] is not None:
        unknown = sorted(set(module.params["same_as"]) - set(READ_OPTIONS))
        if unknown:
            module.fail_json(msg="same_as: %s is not an option of an earlier reading; accepted: a read_from of "
                             "ansible_facts.deepep (%s)" % (", ".join(unknown), ", ".join(sorted(READ_OPTIONS))))
        p = dict((name, spec.get("default")) for name, spec in READ_OPTIONS.items())
        p.update(module.params["same_as"])
    subset = module.params["gather_subset"]
    if "all" not in subset:
        whole_node = [name for name in WHOLE_NODE_OPTIONS if p[name] not in (None, "", [])]
        if whole_node and module.params["same_as"] is None:
            module.fail_json(msg="%s: read with gather_subset all (they need the whole node); gather_subset %s reads "
                             "only those parts. Nothing was changed." % (", ".join(whole_node), ", ".join(subset)))
        reading = read_node(module, p, subset, module.params["wait_for_active"])
        # An earlier whole reading's same_as names them too: they were not read now.
        reading["read_from"] = dict((name, value) for name, value in p.items() if name not in WHOLE_NODE_OPTIONS)
        module.exit_json(changed=False, deepep=reading)
    node = read_node(module, p, wait_for_active=module.params["wait_for_active"])
    if p["hca_mapping"] not in (None, "", []):
        node["topology"], problems = apply_manual_mapping(node["topology"], p["hca_mapping"],
                                                          node["gpu"]["gpu_count"], node["rdma"]["hcas"])
        if problems:
            module.fail_json(msg="%s. Nothing was changed." % "; ".join(problem["msg"] for problem in problems),
                             problems=problems)
    node["layers"] = layer_plan(node, p["cuda_version"])
    if p["preflight_checks"] is not None:
        node["checks"] = preflight_checks(module, p, p["preflight_checks"])
    if p["interpreter"] is not None:
        interpreter = dict((name, spec.get("default")) for name, spec in INTERPRETER_OPTIONS.items())
        interpreter.update(p["interpreter"])
        if not interpreter["python"]:
            module.fail_json(msg="interpreter: python is required (the interpreter DeepEP is built with)")
        p["interpreter"] = interpreter
        node["interpreter"] = read_stack(module, dict(interpreter, environment={}, missing_ok=True), build_only=True)
    if p["nccl"] is not None:
        settings = nccl_plan.with_defaults(p["nccl"]["settings"])
        if settings["nccl_method"] not in nccl_plan.METHODS:
            module.fail_json(msg="nccl: nccl_method %r is not accepted; accepted: %s" % (
                settings["nccl_method"], ", ".join(nccl_plan.METHODS)))
        node["layers"] = with_nccl(node["layers"], node.get("interpreter"), p["nccl"]["deepep_version"],
                                   settings["nccl_method"], nccl_plan.planned_version(settings))
    if p["builds"] is not None:
        builds = dict((name, spec.get("default")) for name, spec in BUILDS_OPTIONS.items())
        builds.update(p["builds"])
        for rel in builds["read_files"] or []:
            if os.path.isabs(rel) or os.path.normpath(rel).split(os.sep)[0] == "..":
                module.fail_json(msg="builds: read_files %r is not accepted; accepted: a path inside a build "
                                     "directory, relative to it (e.g. include/gdrapi.h)" % rel)
        if not builds["root"]:
            module.fail_json(msg="builds: root is required (the collection's prefix, deepep_prefix)")
        p["builds"] = builds
        node["builds"] = read_builds(builds["root"], builds["read_files"] or [], builds["build_user"] or "",
                                     builds["digests"] or [], builds["directories"] or [], builds["report_dir"],
                                     builds["jit_cache"])
    if p["prerequisites"] is not None:
        build_path = list(p["prerequisites"].get("build_path") or [])
        p["prerequisites"] = dict(build_path=build_path)
        node["prerequisites"] = dict(build_path=build_path, present=packages_present(module, build_path))
    node["read_from"] = p
    node["read_at"] = time.time_ns()
    module.exit_json(changed=False, ansible_facts=dict(deepep=node))


if __name__ == "__main__":
    main()
