#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dpkg_state
short_description: Find, and repair before any apt step, a dpkg left half-done by an interrupted or failed install
version_added: "0.4.0"
description:
  - A package install cut off by the operator (Ctrl-C, a killed run, a lost connection) or a maintainer script that
    failed leaves dpkg half-done; every later apt step then fails with apt's bare C(dpkg was interrupted, you must
    manually run 'dpkg --configure -a'). The layers that install packages call this module first.
  - Reads C(dpkg --audit) (packages half-configured, half-installed, unpacked but not configured) and the journal
    under C(<admindir>/updates) (a dpkg run that was interrupted).
  - With O(state=repaired), a dpkg in that state is repaired with C(dpkg --configure -a); what is still broken after
    that is fixed with C(apt-get -f install) only when apt's simulation of it removes no package, else the module
    fails naming the command and the packages. A maintainer script that fails is reported with its package and the
    tail of its output.
author:
  - moe_infra maintainers (@moe-infra)
options:
  state:
    description:
      - V(query) only reads. V(repaired) repairs a broken state as above (check mode reports what it would run).
    type: str
    choices: [query, repaired]
    default: repaired
  root:
    description:
      - The root of the file system dpkg manages (C(dpkg --root)). Tests point it at a fixture tree; its maintainer
        scripts then run outside a chroot (C(--force-script-chrootless)) with C(DPKG_ROOT) set.
    type: path
    default: /
  explain:
    description:
      - The output of an apt or dpkg run that failed (the apt task's C(stdout) and C(stderr)). Each maintainer script
        failure in it is returned in RV(script_failures), so the message names the package and what its script said.
    type: str
  failed_result:
    description:
      - The result of the apt task that failed (C(ansible_failed_result) in a rescue); its C(msg), C(stdout) and
        C(stderr) are read as O(explain) is.
    type: dict
  failed_step:
    description:
      - What failed, for a rescue after an apt install (the DOCA layer says C(doca_ofed) then C(installing the
        DOCA-OFED packages)). With it and O(failed_result) or O(explain), the module fails itself with one message that
        names each package whose maintainer script failed and the tail of what it printed (else the last lines of
        O(explain)), says whether dpkg is left half-done (the next run repairs it first), and what to do next. Nothing
        is repaired (whatever O(state) says).
    type: str
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
notes:
  - Returns the fact C(deepep_dpkg_healthy), so the layers of one run ask once.
"""

EXAMPLES = r"""
- name: Repair dpkg before installing packages (a run cut off during an earlier install)
  moe_infra.deepep.dpkg_state:
  when: not (deepep_dpkg_healthy | default(false))

- name: Say which maintainer script failed in an apt task's output
  moe_infra.deepep.dpkg_state:
    state: query
    explain: "{{ ansible_failed_result.stdout | default('') }}\n{{ ansible_failed_result.stderr | default('') }}"
  register: dpkg_after_failure

- name: Install the driver, and when that fails, stop naming the package whose script failed
  block:
    - name: Install the driver
      ansible.builtin.apt:
        name: nvidia-open-580
  rescue:
    - name: Stop, naming the package and what its script said
      moe_infra.deepep.dpkg_state:
        state: query
        failed_step: "nvidia_driver: installing nvidia-open-580"
        failed_result: "{{ ansible_failed_result }}"
"""

RETURN = r"""
healthy:
  description: Whether dpkg is in a usable state now (after a repair, with O(state=repaired)).
  returned: always
  type: bool
interrupted:
  description: Whether the journal held the updates of an interrupted dpkg run (when first read).
  returned: always
  type: bool
packages:
  description: The packages C(dpkg --audit) named (when first read).
  returned: always
  type: list
  elements: str
  sample: [doca-ofed, mlnx-ofed-kernel-dkms]
audit:
  description: C(dpkg --audit)'s output (when first read).
  returned: always
  type: str
script_failures:
  description: With O(explain), each maintainer script that failed in that output.
  returned: always
  type: list
  elements: dict
  sample:
    - package: mlnx-ofed-kernel-dkms
      reason: installed mlnx-ofed-kernel-dkms package post-installation script subprocess returned error exit status 10
      output: "Error! Bad return status for module build on kernel: 6.8.0-1015-gcp (x86_64)"
repairs:
  description: The commands run (or, in check mode, that would run) to repair it.
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

FAILED_PACKAGE = re.compile(r"^dpkg: error processing package (\S+) \(--(\w+)\):", re.M)
AUDIT_PACKAGE = re.compile(r"^ (\S+)\s", re.M)
REMOVES = re.compile(r"^Remv (\S+)", re.M)


def script_failures(output):
    """[(package, the tail of what its maintainer script printed, dpkg's reason)] from dpkg's output."""
    failures = []
    for match in FAILED_PACKAGE.finditer(output):
        package = match.group(1)
        before = output[:match.start()]
        start = before.rfind("Setting up %s " % package)
        lines = [line for line in before[start if start >= 0 else 0:].splitlines()[1:] if line.strip()]
        reason = output[match.end():].strip().splitlines()[0].strip() if output[match.end():].strip() else ""
        failures.append((package, "\n".join(lines[-15:]), reason))
    return failures


class Dpkg(object):
    def __init__(self, module):
        self.module = module
        self.root = module.params["root"]
        self.admindir = os.path.join(self.root, "var", "lib", "dpkg")
        self.dpkg = module.get_bin_path("dpkg", required=True)
        self.env = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

    def args(self):
        if self.root in ("/", ""):
            return [self.dpkg]
        return [self.dpkg, "--root=%s" % self.root, "--force-script-chrootless"]

    def read(self):
        rc, out, err = self.module.run_command(self.args() + ["--audit"], environ_update=self.env)
        audit = (out + err).strip()
        updates = os.path.join(self.admindir, "updates")
        try:
            journal = [name for name in os.listdir(updates) if name.isdigit()]
        except OSError:
            journal = []
        return dict(audit=audit, packages=AUDIT_PACKAGE.findall(out), interrupted=bool(journal),
                    healthy=not audit and not journal)

    def configure_all(self):
        rc, out, err = self.module.run_command(self.args() + ["--configure", "-a"], environ_update=self.env)
        return rc, out + err

    def fix_with_apt(self, state):
        apt = self.module.get_bin_path("apt-get")
        command = "apt-get -f install"
        if not apt or self.root not in ("/", ""):
            return "dpkg --configure -a left %s broken and %s is not available here" % (
                ", ".join(state["packages"]) or "packages", command)
        rc, out, err = self.module.run_command([apt, "-s", "-f", "install"], environ_update=self.env)
        removes = REMOVES.findall(out)
        if rc != 0 or removes:
            return "dpkg --configure -a left %s broken, and %s would %s; run it by hand if that is what you want" % (
                ", ".join(state["packages"]) or "packages", command,
                "remove %s" % ", ".join(removes) if removes else "fail: %s" % (err or out).strip()[-500:])
        rc, out, err = self.module.run_command([apt, "-y", "-f", "install"], environ_update=self.env)
        if rc != 0:
            return "%s failed: %s" % (command, (err or out).strip()[-1000:])
        return None


def failed_step_message(step, explain, found, failures):
    """One message for an install that failed: the scripts that failed (else apt's last lines), dpkg's state, what next."""
    if failures:
        what = "; ".join("package %s: %s; its output ends: %s" % (
            failure["package"], failure["reason"] or "its maintainer script failed",
            " / ".join(failure["output"].splitlines()[-5:]) or "nothing") for failure in failures)
    else:
        what = " / ".join([line.strip() for line in explain.splitlines() if line.strip()][-3:]) or "no output"
    left = ("dpkg is left half-done (%s): the next run repairs it first (dpkg --configure -a). " % (
        ", ".join(found["packages"]) or "an interrupted run") if not found["healthy"] else "")
    return "%s failed: %s. %sFix the cause, then run the play again." % (step, what.rstrip("."), left)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="repaired", choices=["query", "repaired"]),
            root=dict(type="path", default="/"),
            explain=dict(type="str"),
            failed_result=dict(type="dict"),
            failed_step=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    dpkg = Dpkg(module)
    found = dpkg.read()
    failed_task = module.params["failed_result"] or {}
    explain = "\n".join([module.params["explain"] or ""] + [
        str(failed_task.get(key) or "") for key in ("msg", "stdout", "stderr")]).strip()
    result = dict(found, changed=False, repairs=[], script_failures=[
        dict(package=package, output=tail, reason=reason) for package, tail, reason in script_failures(explain)])
    if module.params["failed_step"]:
        module.fail_json(msg=failed_step_message(module.params["failed_step"], explain, found,
                                                 result["script_failures"]), **result)
    if found["healthy"] or module.params["state"] == "query":
        module.exit_json(ansible_facts={"deepep_dpkg_healthy": found["healthy"]}, **result)
    what = "an interrupted dpkg run" if found["interrupted"] else "packages left half-done (%s)" % ", ".join(
        found["packages"])
    result["repairs"] = ["dpkg --configure -a"]
    if module.check_mode:
        result["changed"] = True
        module.exit_json(msg="would repair %s: dpkg --configure -a" % what, **result)
    rc, output = dpkg.configure_all()
    result["changed"] = True
    if rc != 0:
        failures = script_failures(output)
        if failures:
            text = "; ".join("package %s: %s%s" % (package, reason or "its maintainer script failed",
                                                   ", its output ends:\n%s\n" % tail if tail else "")
                             for package, tail, reason in failures)
        else:
            text = output.strip()[-1500:]
        module.fail_json(msg="dpkg was left half-done by %s; dpkg --configure -a failed: %s. Fix what that script "
                             "needs, run 'dpkg --configure -a' on the node, then run the play again"
                             % (what, text), failed_packages=[f[0] for f in failures], output=output, **result)
    after = dpkg.read()
    if not after["healthy"]:
        result["repairs"].append("apt-get -f install")
        problem = dpkg.fix_with_apt(after)
        if problem:
            module.fail_json(msg="dpkg was left half-done by %s: %s. Nothing else was changed." % (what, problem),
                             **result)
        after = dpkg.read()
    result["healthy"] = after["healthy"]
    if not after["healthy"]:
        module.fail_json(msg="dpkg is still half-done after %s: %s" % (" and ".join(result["repairs"]), after["audit"]),
                         **result)
    module.exit_json(ansible_facts={"deepep_dpkg_healthy": True},
                     msg="repaired %s with %s" % (what, " and ".join(result["repairs"])), **result)


if __name__ == "__main__":
    main()
