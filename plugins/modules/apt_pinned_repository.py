#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_pinned_repository
short_description: An apt repository signed by a key pinned by fingerprint, its package lists fetched, apt never left broken
version_added: "0.10.0"
description:
  - Query, decide and act for one flat apt repository (NVIDIA's CUDA and DOCA repositories) in one call.
  - With O(reuse_existing), an enabled source for O(uri) in another file (NVIDIA's C(cuda-keyring) package writes
    one) is used as it is, after checking that the keyring it names holds only pinned keys; this module's own
    O(source_file) is then removed (apt refuses every command when two entries for one repository name different
    C(signed-by) keyrings).
  - Otherwise the key from O(key_url) is written to O(keyring) only when every primary key in it is one of
    O(fingerprints) (a keyring in place is checked on every run and fetched again when it holds another key), and
    O(source_file) names it (C(deb [signed-by=KEYRING] URI SUITE)).
  - The package lists are fetched (C(apt-get update)) when this call changed the key or the source, or reuses another
    installer's source (nothing says its lists are current), see O(update_cache). When that fails on this repository,
    the key and the source this call changed are put back as they were, C(apt-get update) runs once more to say
    whether apt works again, and the task fails with apt's own error lines and what to do next. When apt's lines name
    only other repositories (a stale source of the image's), nothing is put back and the task fails naming them.
  - Fetching the key and the lists are network steps, tried again O(retries) more times O(retry_delay) seconds
    apart; a key that was fetched but refused, and lists apt refuses (a signature it cannot verify, a repository
    without a Release file), are not tried again.
author:
  - moe_infra maintainers (@moe-infra)
options:
  uri:
    description: The repository's URL as the source names it (C(https://), C(file:)).
    type: str
    required: true
  suite:
    description: What follows the URL in the source entry; flat repositories take C(/) (CUDA) or C(./) (DOCA).
    type: str
    default: /
  source_file:
    description: The one-line source file this module writes (and removes when it reuses another).
    type: path
    required: true
  keyring:
    description: Where the repository's key is written, ASCII-armored (apt reads a C(.asc) file as such).
    type: path
    required: true
  key_url:
    description: Where the key is published (C(https://), C(file://)). Needed unless another source is reused.
    type: str
    default: ""
  fingerprints:
    description:
      - The fingerprints (40 hex digits for v4 keys, 64 for v6; spaces and case do not matter) of the keys this
        repository may be signed with. Every primary key of the keyring apt uses for it must be one of them.
    type: list
    elements: str
    required: true
  reuse_existing:
    description: Use an enabled source for O(uri) that another file already holds, instead of adding this one.
    type: bool
    default: false
  update_cache:
    description:
      - V(changed) fetches the package lists when this call changed the key or the source, or reuses another
        source; V(always) on every run; V(never) leaves them (the caller fetches them).
    type: str
    choices: [changed, always, never]
    default: changed
  label:
    description: The name the messages start with (the role's).
    type: str
    default: apt_pinned_repository
  hint:
    description: What the operator should set when a key is refused (the role's variable names), added to the message.
    type: str
    default: ""
  retries:
    description: Further tries of a key download or C(apt-get update) that failed.
    type: int
    default: 3
  retry_delay:
    description: Seconds between those tries.
    type: int
    default: 10
  timeout:
    description: Seconds for the key download.
    type: int
    default: 30
  apt_dir:
    description:
      - apt's configuration directory (sources are read there and C(apt-get) is pointed at it); tests point it at a
        fixture tree.
    type: path
    default: /etc/apt
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - The key is fetched and checked; nothing is written and the lists are not fetched (RV(refreshed) says whether
        they would be).
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: The source file before and after.
seealso:
  - module: moe_infra.deepep.apt_keyring
  - module: moe_infra.deepep.apt_source_info
"""

EXAMPLES = r"""
- name: The CUDA repository, or the source NVIDIA's cuda-keyring package wrote for it
  moe_infra.deepep.apt_pinned_repository:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64
    source_file: /etc/apt/sources.list.d/cuda.list
    keyring: /etc/apt/keyrings/cuda-archive-keyring.asc
    key_url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub
    fingerprints: [EB693B3035CD5710E231E123A4B469963BF863CC]
    reuse_existing: true
    label: cuda

- name: The DOCA repository
  moe_infra.deepep.apt_pinned_repository:
    uri: https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu24.04/x86_64
    suite: ./
    source_file: /etc/apt/sources.list.d/doca.list
    keyring: /etc/apt/keyrings/doca.asc
    key_url: https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu24.04/x86_64/doca_keyring.gpg
    fingerprints: [70454E6BF5D9C2D3B78709E8DC726C5E41B9CC50]
    label: doca_ofed
"""

RETURN = r"""
source:
  description: The source file apt uses for the repository now (this module's, or the one reused).
  returned: success
  type: str
reused:
  description: Whether another file's source is used.
  returned: success
  type: bool
key_changed:
  description: Whether the keyring was (in check mode, would be) written.
  returned: success
  type: bool
source_changed:
  description: Whether O(source_file) was (would be) written or removed.
  returned: success
  type: bool
refreshed:
  description: Whether the package lists were (in check mode, would be) fetched.
  returned: success
  type: bool
fingerprints:
  description: The primary keys' fingerprints of the keyring apt uses for the repository.
  returned: success
  type: list
  elements: str
apt_errors:
  description: apt's error and warning lines from the failed C(apt-get update).
  returned: when the lists could not be fetched
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.system.apt_keys import (
    KeyRefused,
    fetch_pinned_key,
    keyring_in_place,
    pins_or_problem,
    put_back,
    read_file,
    refuse_keyring_in_place,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.files import write_atomic
from ansible_collections.moe_infra.deepep.plugins.module_utils.system.apt_sources import read_sources, sources_for

# What the roles' templates wrote before this module (same bytes: an upgraded node's source stays unchanged).
SOURCE_TEXT = "# Ansible managed\ndeb [signed-by=%s] %s %s\n"
# python-apt (ansible.builtin.apt's update_cache) fails when any list could not be fetched; apt-get only warns.
FAILED_FETCH = ("W: Failed to fetch", "W: Some index files failed to download", "W: GPG error", "E:")
# What apt refuses whatever the network does: not tried again.
REFUSED = ("NO_PUBKEY", "EXPKEYSIG", "BADSIG", "is not signed", "does not have a Release file",
           "Conflicting values set for option Signed-By")


def retried(attempt, retries, delay):
    """Call attempt() until it returns (True, value) or the tries are spent; returns the last value."""
    for number in range(retries + 1):
        done, value = attempt()
        if done or number == retries:
            return value
        time.sleep(delay)


def update_lists(module, apt_dir):
    """apt's error lines (empty: the lists were fetched)."""
    argv = [module.get_bin_path("apt-get", required=True), "update", "-o", "DPkg::Lock::Timeout=60"]
    if apt_dir.rstrip("/") != "/etc/apt":
        argv += ["-o", "Dir::Etc=%s" % apt_dir]
    rc, out, err = module.run_command(argv, environ_update=dict(LANG="C", LC_ALL="C"))
    lines = [line.strip() for line in (out + "\n" + err).splitlines()]
    errors = [line for line in lines if line.startswith(FAILED_FETCH)]
    if rc != 0 and not errors:
        errors = [line for line in lines if line][-3:] or ["apt-get update exited %d" % rc]
    return errors


def main():
    module = AnsibleModule(
        argument_spec=dict(
            uri=dict(type="str", required=True),
            suite=dict(type="str", default="/"),
            source_file=dict(type="path", required=True),
            keyring=dict(type="path", required=True),
            key_url=dict(type="str", default="", no_log=False),  # a URL, not a secret
            fingerprints=dict(type="list", elements="str", required=True),
            reuse_existing=dict(type="bool", default=False),
            update_cache=dict(type="str", choices=["changed", "always", "never"], default="changed"),
            label=dict(type="str", default="apt_pinned_repository"),
            hint=dict(type="str", default=""),
            retries=dict(type="int", default=3),
            retry_delay=dict(type="int", default=10),
            timeout=dict(type="int", default=30),
            apt_dir=dict(type="path", default="/etc/apt"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label, uri = p["label"], p["uri"].strip()
    pins, problem = pins_or_problem(p["fingerprints"])
    if problem:
        module.fail_json(msg="%s: %s. Nothing was changed." % (label, problem))
    if not uri or p["retries"] < 0 or p["retry_delay"] < 0:
        problem = "uri is empty" if not uri else "retries and retry_delay take 0 or more"
        module.fail_json(msg="%s: %s. Nothing was changed." % (label, problem))
    hint = (" " + p["hint"]) if p["hint"] else ""
    others = [entry for entry in sources_for(read_sources(p["apt_dir"]), uri)
              if os.path.abspath(entry["path"]) != os.path.abspath(p["source_file"])]
    reused = others[0] if p["reuse_existing"] and others else None
    own_before = read_file(p["source_file"])
    key_before = None
    key_changed = False

    if reused:
        signed_by = reused["signed_by"] or ""
        fingerprints = []
        if signed_by.startswith("/"):
            dummy, fingerprints, error, pinned_only = keyring_in_place(signed_by, pins)
            if not pinned_only:
                module.fail_json(msg="%s: the source %s names %s" % (label, reused["path"], refuse_keyring_in_place(
                    signed_by, fingerprints, error, pins, " Remove %s (then %s adds its own source and key).%s" % (
                        reused["path"], label, hint))),
                    unpinned=sorted(set(fingerprints) - pins))
        source, source_text = reused["path"], None
    else:
        if not p["key_url"]:
            module.fail_json(msg="%s: key_url is empty and no other source for %s is reused; set the repository's "
                                 "key URL. Nothing was changed." % (label, uri))
        key_before, fingerprints, error, pinned_only = keyring_in_place(p["keyring"], pins)
        if not pinned_only:
            def fetch():
                try:
                    return True, fetch_pinned_key(p["key_url"], pins, p["timeout"], hint)
                except KeyRefused as exc:
                    return exc.fetched, exc
            fetched = retried(fetch, p["retries"], p["retry_delay"])
            if isinstance(fetched, KeyRefused):
                module.fail_json(msg="%s: %s" % (label, fetched.msg), unpinned=fetched.unpinned or [])
            armored, fingerprints = fetched
            key_changed = armored != key_before
        source, source_text = p["source_file"], SOURCE_TEXT % (p["keyring"], uri, p["suite"])

    source_changed = (own_before is not None) if reused else (source_text.encode() != own_before)
    refresh = p["update_cache"] == "always" or (
        p["update_cache"] == "changed" and (key_changed or source_changed or reused is not None))
    result = dict(changed=key_changed or source_changed, source=source, reused=reused is not None,
                  key_changed=key_changed, source_changed=source_changed, refreshed=refresh,
                  fingerprints=fingerprints)
    if source_changed:
        result["diff"] = dict(before_header=p["source_file"], after_header=p["source_file"],
                              before=(own_before or b"").decode(errors="replace"), after=source_text or "")
    if module.check_mode:
        module.exit_json(msg="%s: %s" % (label, describe(result, p, would=True)), **result)

    if key_changed:
        os.makedirs(os.path.dirname(p["keyring"]) or ".", mode=0o755, exist_ok=True)
        write_atomic(module, p["keyring"], armored)
    if source_changed:
        if reused:
            os.unlink(p["source_file"])
        else:
            write_atomic(module, p["source_file"], source_text)
    if refresh:
        errors = retried(lambda: update_attempt(module, p), p["retries"], p["retry_delay"])
        if errors:
            fail_after_update(module, result, p, errors, own_before, key_before, reused)
    module.exit_json(msg="%s: %s" % (label, describe(result, p, would=False)), **result)


def update_attempt(module, p):
    """(done, apt's error lines) for retried(): done also when trying again cannot help (a key or source apt refuses)."""
    errors = update_lists(module, p["apt_dir"])
    return not errors or any(word in line for line in errors for word in REFUSED), errors


def describe(result, p, would):
    """One line: what this call did (or would do) to the repository."""
    done = []
    if result["key_changed"]:
        done.append("wrote %s" % p["keyring"])
    if result["source_changed"]:
        done.append(("removed %s" if result["reused"] else "wrote %s") % p["source_file"])
    if result["refreshed"]:
        done.append("fetched the package lists")
    where = ("reuses %s" if result["reused"] else "%s") % result["source"]
    text = "; ".join(done) if done else "nothing to do"
    return "%s (%s)" % (("would: " + text) if would and done else text, where)


def only_other_sources(errors, uri):
    """Whether apt's lines name repositories, none of them this one (then it is not the cause)."""
    ours = uri.strip().rstrip("/")
    named = [line for line in errors if "://" in line or "file:" in line]
    return bool(named) and not any(ours in line for line in errors)


def fail_after_update(module, result, p, errors, own_before, key_before, reused):
    """Put back what this call changed, say whether apt works again, and fail with apt's lines and the next step."""
    label, hint = p["label"], (" " + p["hint"]) if p["hint"] else ""
    if reused:
        what = "reusing %s (signed-by %s)" % (result["source"], reused["signed_by"] or "the trusted keys")
    elif result["source_changed"] or result["key_changed"]:
        what = "adding %s" % p["source_file"] if own_before is None else "changing %s" % p["source_file"]
    else:
        what = "refreshing the lists of %s" % p["source_file"]
    text = "%s: apt-get update failed after %s for %s: %s." % (label, what, p["uri"].strip(), " | ".join(errors[:6]))
    if only_other_sources(errors, p["uri"]):
        # Another source is broken (a stale third-party repository on the image): this one is not the cause, and
        # putting it back would not make apt work. It stays; the sources apt names must be fixed.
        module.fail_json(msg="%s: apt-get update fails on other sources, not on %s: %s. %s is in place; fix or remove "
                             "the sources apt names, then run the play again." % (
                                 label, p["uri"].strip(), " | ".join(errors[:6]), result["source"]),
                         apt_errors=errors, **dict(result, refreshed=False))
    put_back_any = not reused and (result["source_changed"] or result["key_changed"])
    if put_back_any:
        restored = []
        if result["source_changed"]:
            put_back(module, p["source_file"], own_before)
            restored.append(p["source_file"])
        if result["key_changed"]:
            put_back(module, p["keyring"], key_before)
            restored.append(p["keyring"])
        again = update_lists(module, p["apt_dir"])
        text += " %s put back as %s; apt-get update %s." % (
            " and ".join(restored), "they were" if len(restored) > 1 else "it was",
            "works again" if not again else "still fails (%s)" % " | ".join(again[:3]))
    if reused:
        text += (" Fix or remove that source (its key may have been rotated: the vendor's current keyring package "
                 "brings the new one), or remove it and let %s add its own." % label)
    text += " Check the repository and key URLs, then run the play again." + ("" if reused else hint)
    result.update(changed=False if put_back_any else result["changed"], refreshed=False)
    module.fail_json(msg=text, apt_errors=errors, **result)


if __name__ == "__main__":
    main()
