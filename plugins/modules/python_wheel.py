#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_wheel
short_description: Install a locally built wheel into an interpreter's site directory when its files differ
version_added: "0.1.0"
description:
  - Installs one wheel file (e.g. DeepEP's C(setup.py bdist_wheel) output) with the interpreter's own pip,
    C(--no-deps --no-index --upgrade --target), into the site directory that holds the module named by
    O(next_to) (default C(torch), since an extension goes where the torch it was built against lives).
  - Idempotent by content, not by version string (DeepEP builds of one release all say C(1.2.1)). Nothing is
    done when every file the wheel's C(RECORD) lists is installed with the same hash; a rebuild against another
    torch has other hashes and is installed.
  - pip runs with umask 022 whatever the login's (a hardened 027 or 077), so every user of the interpreter can
    import what it installs.
  - Check mode reports what would be installed and changes nothing; a wheel that is not there yet (its build has
    not run in check mode) is reported as a change.
  - A wheel is refused, and nothing installed, when it holds a top-level C(.pth) file (the interpreter runs its
    import lines at every start, as root for root's jobs), scripts, headers or data (C(.data/) other than
    C(purelib) and C(platlib)), or a path out of the site directory; a DeepEP wheel holds none of them.
author:
  - moe_infra maintainers (@moe-infra)
options:
  python:
    description:
      - The interpreter to install into; it must have pip.
    type: path
    required: true
  wheel:
    description:
      - The wheel file, or a directory holding exactly one C(.whl) (a build's C(dist/)). Required with
        O(state=present).
    type: path
  state:
    description:
      - V(present) installs O(wheel). V(absent) removes the distribution named O(distribution) from the site
        directory, every file its installed C(RECORD) lists (only files inside that directory) and its
        C(.dist-info). That is what undoing a first install of a build that failed its checks needs.
    type: str
    choices: [present, absent]
    default: present
  distribution:
    description: With O(state=absent), the distribution's name as in its C(.dist-info) directory (e.g. C(deep_ep)).
    type: str
  next_to:
    description:
      - Install into the site directory from which the interpreter imports this module.
      - Empty for the interpreter's own C(purelib) directory.
    type: str
    default: torch
  pip_args:
    description:
      - Further pip arguments.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Compares the wheel's files with the site directory and reports whether it would install.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Install DeepEP's wheel next to the torch it was built against
  moe_infra.deepep.python_wheel:
    python: /opt/torch/.venv/bin/python3
    wheel: /opt/deepep/deepep/current/src/dist

- name: Take a failed first install back out
  moe_infra.deepep.python_wheel:
    python: /opt/torch/.venv/bin/python3
    state: absent
    distribution: deep_ep
"""

RETURN = r"""
wheel:
  description: The wheel file.
  returned: when the wheel exists
  type: str
  sample: /opt/deepep/deepep/current/src/dist/deep_ep-1.2.1-cp312-cp312-linux_x86_64.whl
distribution:
  description: C(name) and C(version) from the wheel's file name.
  returned: when the wheel exists
  type: dict
  sample: {name: deep_ep, version: 1.2.1}
site_dir:
  description: Where the wheel is (or would be) installed.
  returned: always
  type: str
  sample: /opt/torch/.venv/lib/python3.12/site-packages
reason:
  description: Why it was installed or left alone.
  sample: "installed: 1 of 9 files differ or are missing (first deep_ep_cpp.cpython-312-x86_64-linux-gnu.so)"
  returned: always
  type: str
"""

import base64
import csv
import glob
import hashlib
import io
import json
import os
import shutil
import zipfile

from ansible.module_utils.basic import AnsibleModule

# Finds the module without importing it (importing torch takes seconds on a GPU node).
SITE_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
name = sys.argv[1]
if not name:
    print(json.dumps({"site": sysconfig.get_paths()["purelib"], "error": None}))
else:
    try:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            raise ModuleNotFoundError("No module named %r" % name)
        path = os.path.abspath(spec.origin)
        # A package's origin is <site>/<name>/__init__.py; a single module's is <site>/<name>.py.
        site = os.path.dirname(os.path.dirname(path) if spec.submodule_search_locations is not None else path)
        print(json.dumps({"site": site, "error": None}))
    except Exception as exc:
        print(json.dumps({"site": None, "error": "%s: %s" % (type(exc).__name__, exc)}))
"""


def find_wheel(path):
    """The wheel file at path (a file, or a directory with exactly one .whl); (file or None, problem or None)."""
    if os.path.isfile(path):
        return path, None
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.whl")))
        if len(found) == 1:
            return found[0], None
        return None, "%s holds %d wheels (%s); give the wheel file" % (path, len(found), ", ".join(
            os.path.basename(f) for f in found) or "none")
    return None, "%s does not exist" % path


def parse_record(text):
    """{path: hash} of a RECORD (entries without a hash, like RECORD itself, are left out)."""
    entries = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1]:
            entries[row[0]] = row[1]
    return entries


def wheel_record(wheel):
    """(dist-info directory name, {path: hash}) from the wheel's own RECORD."""
    with zipfile.ZipFile(wheel) as archive:
        records = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise ValueError("%s has %d .dist-info/RECORD files; not a wheel" % (wheel, len(records)))
        return records[0].split("/")[0], parse_record(archive.read(records[0]).decode("utf-8"))


def unsafe_entries(wheel):
    """[(name, why)] of the wheel's files that a DeepEP wheel never holds and that would run or land outside its
    package: a top-level .pth (the interpreter runs its import lines at every start), scripts, headers or data
    (.data/ other than purelib and platlib), a path that leaves the site directory."""
    found = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            parts = name.split("/")
            if name.startswith("/") or ".." in parts:
                found.append((name, "it would land outside the site directory"))
            elif len(parts) == 1 and name.endswith(".pth"):
                found.append((name, "a .pth file runs its import lines at every start of the interpreter"))
            elif parts[0].endswith(".data") and len(parts) > 2 and parts[1] not in ("purelib", "platlib"):
                found.append((name, "%s installs outside the package" % parts[1]))
    return found


def file_hash(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def differing(site, expected):
    """Paths of the wheel's files that are missing in site or have another hash there, sorted."""
    out = []
    for path, want in sorted(expected.items()):
        target = os.path.normpath(os.path.join(site, path))
        if not os.path.isfile(target) or file_hash(target) != want:
            out.append(path)
    return out


def remove_distribution(module, site, name):
    """state=absent: the distribution's files (as its installed RECORD lists them, inside site) and its dist-info."""
    found = sorted(glob.glob(os.path.join(site, "%s-*.dist-info" % name.replace("-", "_"))))
    if not found:
        module.exit_json(changed=False, site_dir=site, reason="%s is not installed in %s" % (name, site))
    if module.check_mode:
        module.exit_json(changed=True, site_dir=site, reason="would remove %s" % ", ".join(
            os.path.basename(f) for f in found))
    root = os.path.realpath(site)
    removed = 0
    for dist_info in found:
        try:
            with open(os.path.join(dist_info, "RECORD")) as handle:
                paths = [row[0] for row in csv.reader(handle) if row]
        except (OSError, IOError):
            paths = []
        dirs = set()
        for rel in paths:
            target = os.path.normpath(os.path.join(site, rel))
            if not os.path.realpath(os.path.dirname(target)).startswith(root + os.sep) and \
                    os.path.realpath(os.path.dirname(target)) != root:
                continue  # a RECORD entry outside the site directory is not ours to remove
            if os.path.lexists(target) and not os.path.isdir(target):
                os.unlink(target)
                removed += 1
                dirs.add(os.path.dirname(target))
        for path in sorted(dirs, key=len, reverse=True):
            while path.startswith(root + os.sep) and os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
                path = os.path.dirname(path)
        if os.path.isdir(dist_info):
            shutil.rmtree(dist_info)
    module.exit_json(changed=True, site_dir=site, reason="removed %s (%d files)" % (
        ", ".join(os.path.basename(f) for f in found), removed))


def main():
    # Whatever umask the login has (a hardened 027 or 077): every user of the node that runs jobs with this
    # interpreter must read what is installed into it.
    os.umask(0o022)
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            wheel=dict(type="path"),
            next_to=dict(type="str", default="torch"),
            pip_args=dict(type="list", elements="str", default=[]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            distribution=dict(type="str"),
        ),
        required_if=[("state", "present", ("wheel",)), ("state", "absent", ("distribution",))],
        supports_check_mode=True,
    )
    python, name = module.params["python"], module.params["next_to"]
    if not os.access(python, os.X_OK):
        module.fail_json(msg="python: %s is not an executable interpreter" % python)
    rc, out, err = module.run_command([python, "-c", SITE_PROBE, name], cwd="/")
    try:
        probe = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg="%s could not tell its site directory: %s" % (python, (err or out).strip()[-2000:]))
    if not probe["site"]:
        module.fail_json(msg="next_to: %s does not import with %s (%s); install it first or set next_to to a module "
                             "that does, or to '' for the interpreter's own site directory"
                             % (name, python, probe["error"]))
    site = probe["site"]
    if module.params["state"] == "absent":
        remove_distribution(module, site, module.params["distribution"])
    wheel, problem = find_wheel(module.params["wheel"])
    if wheel is None:
        if module.check_mode and not os.path.exists(module.params["wheel"]):
            module.exit_json(changed=True, site_dir=site,
                             reason="would install the wheel once it is built (%s)" % problem)
        module.fail_json(msg="wheel: %s" % problem, site_dir=site)
    try:
        dist_info, expected = wheel_record(wheel)
        unsafe = unsafe_entries(wheel)
    except (ValueError, zipfile.BadZipFile, KeyError) as exc:
        module.fail_json(msg="wheel: %s" % exc, site_dir=site)
    if unsafe:
        module.fail_json(msg="wheel: %s holds %s (%s)%s: nothing was installed; a build that makes this is not "
                             "DeepEP's" % (wheel, unsafe[0][0], unsafe[0][1],
                                           " and %d more such files" % (len(unsafe) - 1) if len(unsafe) > 1 else ""),
                         unsafe=[name for name, dummy in unsafe], site_dir=site)
    dist_name, dummy, version = dist_info[:-len(".dist-info")].partition("-")
    result = dict(wheel=wheel, distribution={"name": dist_name, "version": version}, site_dir=site)
    stale = differing(site, expected)
    if not stale:
        module.exit_json(changed=False, reason="installed (every file of the wheel matches)", **result)
    reason = "%d of %d files differ or are missing (first %s)" % (len(stale), len(expected), stale[0])
    if module.check_mode:
        module.exit_json(changed=True, reason="would install: " + reason, **result)
    cmd = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--upgrade", "--no-warn-script-location",
           "--disable-pip-version-check", "--target", site] + module.params["pip_args"] + [wheel]
    rc, out, err = module.run_command(cmd, cwd="/")
    if rc != 0:
        module.fail_json(msg="%s -m pip install %s failed: %s" % (python, os.path.basename(wheel),
                                                                  (err or out).strip()[-2000:]), rc=rc, **result)
    still = differing(site, expected)
    if still:
        module.fail_json(msg="pip installed %s but %s still differs in %s" % (wheel, still[0], site), **result)
    module.exit_json(changed=True, reason="installed: " + reason, **result)


if __name__ == "__main__":
    main()
