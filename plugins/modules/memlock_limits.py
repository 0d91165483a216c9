#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memlock_limits
short_description: Raise the locked-memory limit users' processes get (logins and systemd services), and check it
version_added: "0.3.0"
description:
  - RDMA memory registration (NVSHMEM's IBGDA, NCCL's Gin and IB transports) locks memory. Root's processes are not
    held by C(RLIMIT_MEMLOCK), so tests run as root pass where a user's job or a service fails. Google's A4
    blueprints write C(/etc/security/limits.d/99-unlimited.conf) (C(* - memlock unlimited)) for this.
  - With O(state=present) writes O(limits_file) (C(* soft memlock) and C(* hard memlock), applied by pam_limits to
    each new login session) and, where systemd runs, O(systemd_dropin) (C(DefaultLimitMEMLOCK), for services started
    after C(systemctl daemon-reexec), which the module runs when it changed the drop-in). Services already running
    keep their limit until restarted.
  - Then checks what a non-root user gets, as a job would, with C(runuser -l O(verify_user) -c 'ulimit -l') (a PAM login
    session) and, where systemd runs, C(systemd-run --wait --pipe -p User=O(verify_user) ...) (a service). A check
    that does not give O(limit) fails the module with what each gave.
  - In a container nothing is written or checked (RV(container)); the runtime sets the limit
    (C(--ulimit memlock=-1:-1)); PAM cannot raise it past the container's.
author:
  - moe_infra maintainers (@moe-infra)
options:
  limit:
    description: C(unlimited), or the limit in KiB.
    type: str
    default: unlimited
  state:
    description: V(present) writes and checks; V(query) only checks (report-only).
    type: str
    choices: [present, query]
    default: present
  limits_file:
    description: The pam_limits file this module owns.
    type: path
    default: /etc/security/limits.d/99-deepep-memlock.conf
  systemd_dropin:
    description: The systemd manager drop-in this module owns.
    type: path
    default: /etc/systemd/system.conf.d/99-deepep-memlock.conf
  verify_user:
    description: The non-root user whose login and service are checked; empty checks nothing.
    type: str
    default: nobody
  root:
    description: Prefix of every path read and written (tests point it at a fixture tree).
    type: path
    default: /
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Locked memory unlimited for users' logins and services
  moe_infra.deepep.memlock_limits:
    limit: unlimited
"""

RETURN = r"""
written:
  description: The files written (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
reexec:
  description: Whether C(systemctl daemon-reexec) ran (or would run) for the changed drop-in.
  returned: always
  type: bool
container:
  description: Whether the node is a container (nothing written or checked).
  returned: always
  type: bool
systemd:
  description: Whether systemd runs here (the drop-in and the service check apply).
  returned: always
  type: bool
seen:
  description: What C(ulimit -l) gave the verify user in a login session (C(login)) and as a service (C(service)).
  returned: always
  type: dict
  sample: {login: unlimited, service: unlimited}
problems:
  description: With O(state=query), the checks that did not give O(limit).
  returned: when O(state=query) found the limit lower
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

# A user name as useradd takes it: never an option to runuser or a property to systemd-run.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")

CONTAINER_MARKERS = ("run/.containerenv", ".dockerenv")


def limits_text(limit):
    return ("# Managed by moe_infra.deepep.memlock_limits: RDMA memory registration needs locked memory.\n"
            "*    soft    memlock    %s\n*    hard    memlock    %s\n" % (limit, limit))


def dropin_text(limit):
    value = "infinity" if limit == "unlimited" else "%dK" % int(limit)
    return ("# Managed by moe_infra.deepep.memlock_limits: services get the locked-memory limit logins get.\n"
            "[Manager]\nDefaultLimitMEMLOCK=%s\n" % value)


def in_container(root):
    if any(os.path.exists(os.path.join(root, marker)) for marker in CONTAINER_MARKERS):
        return True
    try:
        with open(os.path.join(root, "proc/1/environ"), "rb") as handle:
            return b"container=" in handle.read()
    except OSError:
        return False


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            limit=dict(type="str", default="unlimited"),
            state=dict(type="str", default="present", choices=["present", "query"]),
            limits_file=dict(type="path", default="/etc/security/limits.d/99-deepep-memlock.conf"),
            systemd_dropin=dict(type="path", default="/etc/systemd/system.conf.d/99-deepep-memlock.conf"),
            verify_user=dict(type="str", default="nobody"),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    limit = p["limit"].strip()
    if limit != "unlimited" and not limit.isdigit():
        module.fail_json(msg="limit: %r is not accepted; set memlock_limit to unlimited or a number of KiB. "
                             "Nothing was changed." % p["limit"])
    if p["verify_user"] and not USER_NAME.match(p["verify_user"]):
        module.fail_json(msg="verify_user: %r is not a user name; set memlock_verify_user to one (e.g. nobody), or "
                             "empty to check nothing. Nothing was changed." % p["verify_user"])
    root = p["root"]
    result = dict(changed=False, written=[], reexec=False, container=in_container(root),
                  systemd=os.path.isdir(os.path.join(root, "run/systemd/system")), seen={})
    if result["container"]:
        module.exit_json(msg="a container: the runtime sets the locked-memory limit (--ulimit memlock=-1:-1); "
                             "nothing written or checked", **result)

    def under_root(path):
        return os.path.join(root, path.lstrip("/"))

    wanted = [(p["limits_file"], limits_text(limit))]
    if result["systemd"]:
        wanted.append((p["systemd_dropin"], dropin_text(limit)))
    stale = [(path, text) for path, text in wanted if read(under_root(path)) != text]
    if p["state"] == "present" and stale:
        result.update(changed=True, written=[path for path, _text in stale])
        result["reexec"] = any(path == p["systemd_dropin"] for path, _text in stale)
        if not module.check_mode:
            for path, text in stale:
                target = under_root(path)
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                tmp = target + ".tmp"
                with open(tmp, "w") as handle:
                    handle.write(text)
                os.chmod(tmp, 0o644)
                os.rename(tmp, target)
            if result["reexec"]:
                rc, out, err = module.run_command([module.get_bin_path("systemctl", required=True), "daemon-reexec"])
                if rc != 0:
                    module.fail_json(msg="systemctl daemon-reexec failed (rc %d): %s" % (rc, (err or out).strip()),
                                     **result)
    user = p["verify_user"]
    if not user or (module.check_mode and result["changed"]):
        module.exit_json(**result)
    runuser = module.get_bin_path("runuser", required=True)
    checks = [("login", [runuser, "-l", user, "-s", "/bin/sh", "-c", "ulimit -l"])]
    if result["systemd"]:
        checks.append(("service", [module.get_bin_path("systemd-run", required=True), "--wait", "--pipe", "--quiet",
                                   "-p", "User=%s" % user, "/bin/sh", "-c", "ulimit -l"]))
    wrong = []
    for name, argv in checks:
        rc, out, err = module.run_command(argv)
        seen = out.strip().splitlines()[-1] if rc == 0 and out.strip() else "rc %d: %s" % (rc, (err or out).strip())
        result["seen"][name] = seen
        if seen != limit:
            wrong.append("%s %s" % (name, seen))
    if wrong and p["state"] == "query":
        module.exit_json(problems=wrong, msg="locked memory for %s is not %s: %s (report only: nothing written)"
                         % (user, limit, ", ".join(wrong)), **result)
    if wrong:
        module.fail_json(msg="locked memory for %s is not %s: %s (%s). A login needs pam_limits in its PAM session; "
                             "a service started before the drop-in needs a restart." % (
                                 user, limit, ", ".join(wrong),
                                 "after writing %s" % ", ".join(path for path, _text in wanted)),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
