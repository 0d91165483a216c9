#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_source_info
short_description: Find the apt sources already configured for a repository URL
version_added: "0.2.0"
description:
  - Reads apt's sources (C(sources.list), C(sources.list.d/*.list) one-line entries and C(sources.list.d/*.sources)
    deb822 stanzas) and reports the enabled C(deb) entries for O(uri), with the file, line and C(Signed-By) of
    each. URLs compare without a trailing slash and with C(file:///x) as C(file:/x).
  - >-
    apt refuses every command when two entries for one URL name different C(Signed-By) keyrings
    ("Conflicting values set for option Signed-By"). NVIDIA's C(cuda-keyring) package, which GPU driver
    installers and install guides use, writes C(cuda-<distro>-x86_64.list) signed by
    C(/usr/share/keyrings/cuda-archive-keyring.gpg); the C(cuda) role uses this module to reuse such an entry
    instead of adding its own.
  - Read-only; never reports a change.
author:
  - moe_infra maintainers (@moe-infra)
options:
  uri:
    description:
      - Repository URL to look for, as it would appear in a source entry.
    type: str
    required: true
  exclude:
    description:
      - Source files left out of RV(found) (the calling role's own file), still listed in RV(sources).
    type: list
    elements: path
    default: []
  apt_dir:
    description:
      - apt's configuration directory; tests point it at a fixture tree.
    type: path
    default: /etc/apt
extends_documentation_fragment:
  - moe_infra.deepep.info_module
"""

EXAMPLES = r"""
- name: Find a source another installer wrote for NVIDIA's CUDA repository
  moe_infra.deepep.apt_source_info:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
    exclude: [/etc/apt/sources.list.d/cuda.list]
  register: cuda_sources

- name: Say which one is reused
  ansible.builtin.debug:
    msg: "{{ cuda_sources.others[0].path }} (signed by {{ cuda_sources.others[0].signed_by }})"
  when: cuda_sources.found
"""

RETURN = r"""
found:
  description: Whether an entry for O(uri) exists outside the O(exclude) files.
  returned: always
  type: bool
sources:
  description: Every enabled C(deb) entry for O(uri), in apt's reading order.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: File holding the entry.
      type: str
      sample: /etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list
    line:
      description: Line of the entry (of the stanza's first field for deb822).
      type: int
    signed_by:
      description: The entry's C(Signed-By) keyring path, C(<inline key>) for a deb822 inline key, null when unset.
      type: str
      sample: /usr/share/keyrings/cuda-archive-keyring.gpg
    suites:
      description: The entry's suites (C(/) for NVIDIA's flat repositories).
      type: list
      elements: str
others:
  description: The entries of RV(sources) outside the O(exclude) files.
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.moe_infra.deepep.plugins.module_utils.system.apt_sources import read_sources, sources_for


def main():
    module = AnsibleModule(
        argument_spec=dict(
            uri=dict(type="str", required=True),
            exclude=dict(type="list", elements="path", default=[]),
            apt_dir=dict(type="path", default="/etc/apt"),
        ),
        supports_check_mode=True,
    )
    if not module.params["uri"].strip():
        module.fail_json(msg="uri: empty; give the repository URL as a source entry names it")
    sources = [dict((key, entry[key]) for key in ("path", "line", "signed_by", "suites"))
               for entry in sources_for(read_sources(module.params["apt_dir"]), module.params["uri"])]
    excluded = set(os.path.realpath(path) for path in module.params["exclude"])
    others = [entry for entry in sources if os.path.realpath(entry["path"]) not in excluded]
    module.exit_json(changed=False, found=bool(others), sources=sources, others=others)


if __name__ == "__main__":
    main()
