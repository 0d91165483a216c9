#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_keyring
short_description: Put an apt repository's signing key in place only when its fingerprints are the pinned ones
version_added: "0.9.0"
description:
  - apt trusts every key of the file a source's C(signed-by) names. This module fetches that file from O(url) (binary
    like DOCA's C(doca_keyring.gpg) or ASCII-armored like CUDA's C(3bf863cc.pub)), reads the fingerprints of its
    primary keys without gpg, and writes it to O(dest) (ASCII-armored, as apt reads a C(.asc) file) only when every
    one of them is in O(fingerprints). Anything else is refused and nothing is written.
  - A O(dest) already in place is read again on every run. One whose keys are all pinned stays as it is (nothing is
    fetched); one that holds another key (a key the repository's host served before a rotation, a file changed
    since) is fetched again and replaced, or refused as above.
  - Without O(url), only checks O(dest) (the keyring a source the module did not write names, e.g. NVIDIA's
    C(cuda-keyring) package's) and fails when it holds a key not pinned.
author:
  - moe_infra maintainers (@moe-infra)
options:
  dest:
    description: The keyring file apt's C(signed-by) names.
    type: path
    required: true
  url:
    description: Where the key is published (C(https://), C(file://)); empty only checks O(dest).
    type: str
    default: ""
  fingerprints:
    description:
      - The fingerprints (40 hex digits for v4 keys, 64 for v6; spaces and case do not matter) of the keys this
        repository may be signed with. Every primary key of the file must be one of them.
    type: list
    elements: str
    required: true
  hint:
    description: What the operator should set when the key is refused (the role's variable names), added to the message.
    type: str
    default: ""
  timeout:
    description: Seconds for the download.
    type: int
    default: 30
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode the key is fetched and checked, nothing is written.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: The DOCA repository's key, pinned
  moe_infra.deepep.apt_keyring:
    url: https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu24.04/x86_64/doca_keyring.gpg
    dest: /etc/apt/keyrings/doca.asc
    fingerprints: [70454E6BF5D9C2D3B78709E8DC726C5E41B9CC50]

- name: Check the keyring NVIDIA's cuda-keyring package put in place
  moe_infra.deepep.apt_keyring:
    dest: /usr/share/keyrings/cuda-archive-keyring.gpg
    fingerprints: [EB693B3035CD5710E231E123A4B469963BF863CC]
"""

RETURN = r"""
fingerprints:
  description: The primary keys' fingerprints of the keyring now at O(dest) (or that would be, in check mode).
  returned: success
  type: list
  elements: str
fetched:
  description: Whether O(url) was read (O(dest) was missing or held a key not pinned).
  returned: always
  type: bool
unpinned:
  description: Fingerprints found that are not in O(fingerprints).
  returned: on failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.system.apt_keys import (
    KeyRefused,
    fetch_pinned_key,
    keyring_in_place,
    pins_or_problem,
    refuse_keyring_in_place,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.files import write_atomic


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            url=dict(type="str", default=""),
            fingerprints=dict(type="list", elements="str", required=True),
            hint=dict(type="str", default=""),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    pins, problem = pins_or_problem(p["fingerprints"])
    if problem:
        module.fail_json(msg=problem, fetched=False)
    hint = (" " + p["hint"]) if p["hint"] else ""

    current, found, error, pinned_only = keyring_in_place(p["dest"], pins)
    if pinned_only:
        module.exit_json(changed=False, fetched=False, fingerprints=found, msg="%s holds only pinned keys" % p["dest"])
    if not p["url"]:
        if current is None:
            module.fail_json(msg="%s does not exist; nothing to check" % p["dest"], fetched=False)
        module.fail_json(msg=refuse_keyring_in_place(p["dest"], found, error, pins, hint), fetched=False,
                         unpinned=sorted(set(found) - pins))
    try:
        armored, found = fetch_pinned_key(p["url"], pins, p["timeout"], hint)
    except KeyRefused as exc:
        extra = dict(unpinned=exc.unpinned, fingerprints=exc.fingerprints) if exc.unpinned else {}
        module.fail_json(msg=exc.msg, fetched=exc.fetched, **extra)
    changed = armored != current
    if changed and not module.check_mode:
        write_atomic(module, p["dest"], armored)
    module.exit_json(changed=changed, fetched=True, fingerprints=found,
                     msg="%s %s from %s (%s)" % ("would write" if module.check_mode else "wrote", p["dest"],
                                                 p["url"], ", ".join(found)) if changed else "%s unchanged" % p["dest"])


if __name__ == "__main__":
    main()
