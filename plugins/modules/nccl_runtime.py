#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_runtime
short_description: Put a verified NCCL build where torch loads NCCL, so torch and DeepEP V2 load one NCCL; undo it
version_added: "0.3.0"
description:
  - DeepEP V2 needs NCCL >= 2.30.4 and refuses a process with two NCCL runtimes ("Duplicate NCCL runtime"); torch
    loads the C(nvidia-nccl-cu12/cu13) wheel's C(nvidia/nccl/lib/libnccl.so.2). With V(present), the interpreter's
    wheel files (C(lib/libnccl.so.2) and the C(include/) tree, which DeepEP's build and JIT read) are replaced by
    the build in O(build_dir), after they are copied to O(backup_dir); a record in the wheel's directory
    (C(.moe_infra_nccl.json)) says what was replaced and where the originals are.
  - The library in place is then asked its version with C(ncclGetVersion); one that does not answer O(version) is
    taken out again (the originals put back) and the task fails.
  - Nothing is done when the files in place already match the build. Files that pip put back since (a torch
    upgrade reinstalls its NCCL wheel) are backed up anew before they are replaced.
  - V(absent) puts the wheel's original files back when the files in place are still the build's, and forgets the
    record either way; that is what a later C(deepep_version=v1) run or a rollback needs.
  - V(upgraded) is the nccl layer's wheel method. The interpreter's O(package) wheel is put at O(version) by
    the interpreter's own pip (C(python -m pip install --no-deps), O(pip_extra_args) after, tried again
    O(retries) times). The version it upgrades from is recorded first (C(.moe_infra_nccl_wheel.json) in the
    wheel's directory), so that a run stopped while pip ran still leaves a later DeepEP V1 run or a rollback the
    version to install again. The record keeps the first version the wheel was upgraded from. A pip that fails and
    leaves the wheel as it was leaves the record as it was too.
  - V(absent) removes a wheel upgrade record that no longer matches the installed wheel (pip put another version
    there since). With O(reinstall_wheel), a record that still matches is undone, the version it was upgraded from
    is installed again with the interpreter's pip, then the record is forgotten. A pip that cannot install it
    fails the task and keeps the record for the next run.
  - A wheel half-installed (the record there and no NCCL wheel installed, what a pip killed between its uninstall
    and its install leaves, torch unable to load NCCL) is taken as the record's. V(upgraded) installs O(version)
    and keeps the version the record names to go back to, V(absent) with O(reinstall_wheel) installs that version
    again, V(absent) without it keeps the record. Once pip has installed the wheel, what the stopped pip left of it
    (directories named C(~...) beside its files and its dist-info) is removed.
  - Half-installed without the record (a pip that was not this module's, stopped the same way), the stash its
    uninstall left of the dist-info it removed names the version it was replacing
    (C(~vidia_nccl_cu13-2.28.9.dist-info)). V(upgraded) keeps that version as the one to go back to, V(absent)
    with O(reinstall_wheel) installs it again.
  - Installed, but its C(libnccl.so.2) not the size the wheel's RECORD gives (a C(pip install -I), which uninstalls
    nothing and leaves no stash, stopped while it wrote the library), V(upgraded) at that version and V(absent)
    with O(reinstall_wheel) where no record names a version to go back to, install the version the metadata names
    again with C(--force-reinstall) (C(action=repaired)). The nccl layer's build in place of the wheel's library is
    not taken for one cut short. V(present) refuses a cut-short library before it changes anything (kept as the
    wheel's, it would be what V(absent) puts back).
  - It writes with umask 022 whatever the login's (a hardened 027 or 077), so that what torch loads stays readable
    by every user of the interpreter.
author:
  - moe_infra maintainers (@moe-infra)
options:
  python:
    description: The interpreter whose C(nvidia.nccl) package torch loads NCCL from.
    type: path
    required: true
  build_dir:
    description: A verified NCCL build (C(lib/libnccl.so.2), C(include/nccl.h)), e.g. the nccl layer's build
      directory. Required with O(state=present).
    type: path
  version:
    description: The NCCL version of O(build_dir) (C(2.30.7)); the library in place must answer it. Required with
      O(state=present).
    type: str
  backup_dir:
    description: Where the wheel's original files are kept while the build is in place (one subdirectory per
      original library digest).
    type: path
    required: true
  check_user:
    description:
      - Run the version check (loading the library in place) as this user when the module runs as root, e.g. the
        nccl layer's build user, since the library is build output and root does not load it. Empty, the module's
        own user loads it.
    type: str
    default: ""
  package:
    description: The NCCL wheel torch loads (C(nvidia-nccl-cu13) for a CUDA 13 torch). Required with
      O(state=upgraded).
    type: str
  pip_extra_args:
    description: More arguments for pip, split as a shell would split them but never run by one (C(--no-index
      --find-links /srv/wheels) for an air-gapped site's mirror, C(--index-url URL)).
    type: str
    default: ""
  retries:
    description: How many more times a pip that failed is run, O(retry_delay) seconds apart (an index that
      answered 503).
    type: int
    default: 3
  retry_delay:
    description: Seconds between pip's tries.
    type: int
    default: 10
  reinstall_wheel:
    description: With O(state=absent), install the version a wheel upgrade record says the wheel was upgraded from
      again (the interpreter's pip), then forget the record.
    type: bool
    default: false
  state:
    description: V(present) puts the build in place; V(absent) puts the originals back; V(upgraded) installs the
      wheel at O(version) and records the version it upgraded from.
    type: str
    choices: [present, absent, upgraded]
    default: present
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
notes:
  - The replacement is what C(pip install nvidia-nccl-cu13>=2.30.4 --no-deps) does for a site that can reach PyPI,
    for a build made from source (air-gapped sites, or an NCCL built for the GPUs' archs only).
"""

EXAMPLES = r"""
- name: Put NCCL 2.30.7 where torch loads it
  moe_infra.deepep.nccl_runtime:
    python: /opt/deepep/venv/bin/python
    build_dir: /opt/deepep/nccl/current
    version: 2.30.7
    backup_dir: /opt/deepep/nccl/replaced

- name: The NCCL wheel at 2.30.7 from a local mirror, the version before recorded for a later V1 run
  moe_infra.deepep.nccl_runtime:
    python: /opt/deepep/venv/bin/python
    package: nvidia-nccl-cu13
    version: 2.30.7
    pip_extra_args: --no-index --find-links /srv/wheels
    backup_dir: /opt/deepep/nccl/replaced
    state: upgraded

- name: Torch's own NCCL wheel again (a V2 run upgraded it)
  moe_infra.deepep.nccl_runtime:
    python: /opt/deepep/venv/bin/python
    backup_dir: /opt/deepep/nccl/replaced
    reinstall_wheel: true
    state: absent

- name: Put the wheel's NCCL back
  moe_infra.deepep.nccl_runtime:
    python: /opt/deepep/venv/bin/python
    backup_dir: /opt/deepep/nccl/replaced
    state: absent
"""

RETURN = r"""
nccl_dir:
  description: The interpreter's C(nvidia/nccl) package directory.
  returned: always
  type: str
  sample: /opt/deepep/venv/lib/python3.12/site-packages/nvidia/nccl
action:
  description: C(none), C(installed) (the build put in place), C(restored) (the originals put back),
    C(forgotten) (V(absent) found files pip put back since; only the record was removed), C(upgraded) (pip
    installed the wheel at O(version)), C(reinstalled) (pip installed the version the wheel was upgraded from) or
    C(repaired) (pip installed the version installed again over its cut-short library).
  returned: always
  type: str
loaded_version:
  description: What C(ncclGetVersion) of the library in place answers (C(2.30.7)); null in check mode before a
    change, or when no library is there.
  returned: always
  type: str
backup:
  description: The directory holding the wheel's original files; null when nothing is replaced.
  returned: always
  type: str
pip_installed:
  description: What the interpreter's pip installed in this task (C(nvidia-nccl-cu13==2.28.9)); null when pip did
    not run (nothing to do, or check mode).
  returned: always
  type: str
pip_leftovers_removed:
  description: What a pip stopped half-way had left of the wheel (C(~)-named directories), removed once pip
    installed it in this task; empty when there was none.
  returned: always
  type: list
  elements: str
wheel_upgrade:
  description: The wheel upgrade record in place after the task (C(package), C(version), C(version_before)); null
    when there is none.
  returned: always
  type: dict
  sample: {package: nvidia-nccl-cu13, version: 2.30.7, version_before: 2.28.9}
"""

import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.torch_probe import HALF_INSTALLED

RECORD = ".moe_infra_nccl.json"
WHEEL_RECORD = ".moe_infra_nccl_wheel.json"
LIB = os.path.join("lib", "libnccl.so.2")
FIND_PACKAGE = ("import importlib.util, json\n"
                "spec = importlib.util.find_spec('nvidia.nccl')\n"
                "print(json.dumps(list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations"
                " else None))\n")
# The installed NCCL wheel, and its libnccl.so.2 when that is not the size the wheel's RECORD gives (the probes'
# reading: a pip install -I stopped while it wrote the library): [package, version, [lib, size or None, recorded
# size] or None].
WHEEL_VERSION = HALF_INSTALLED + r"""
import importlib.metadata as md, json
found = None
for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
    try:
        found = [name, md.version(name), None]
    except md.PackageNotFoundError:
        continue
    cut = nccl_cut_short()
    found[2] = [cut["lib"], cut["size"], cut["recorded_size"]] if cut else None
    break
print(json.dumps(found))
"""
VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,3}$")
PACKAGE = re.compile(r"^nvidia-nccl-cu[0-9]+$")
# pip's stash of an uninstalled dist-info (the name with its first letters replaced by ~), e.g.
# ~vidia_nccl_cu13-2.28.9.dist-info.
PIP_STASH = re.compile(r"^~[^/]*_nccl_(cu[0-9]+)-([0-9]+(\.[0-9]+){1,3})\.dist-info$")
# What to do when pip was killed (the OOM killer, kill -9): nothing is wrong with the index or the wheel.
FIX_KILLED = "run again (the nccl layer installs it then)"
FIX_PIP = ("make it reachable (nccl_pip_extra_args: an index, or --find-links to a directory with it) and run "
           "again")
VERSION_CHECK = ("import ctypes, sys\n"
                 "code = ctypes.c_int()\n"
                 "ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(code))\n"
                 "print(code.value)\n")


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_digest(root):
    """Digest of the regular files under root by relative path (links followed as a loader would); None if absent."""
    if not os.path.isdir(root):
        return None
    entries = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            entries.append("%s %s" % (os.path.relpath(path, root), file_digest(path)))
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def decode_version(code):
    major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
    return "%d.%d.%d" % (major, rest // 100, rest % 100)


class NcclRuntime(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params

    def nccl_dir(self):
        rc, out, err = self.module.run_command([self.params["python"], "-c", FIND_PACKAGE], cwd="/")
        if rc != 0:
            self.module.fail_json(msg="%s could not look for nvidia.nccl: %s" % (self.params["python"], err.strip()))
        found = json.loads(out.strip().splitlines()[-1])
        if not found:
            self.module.fail_json(msg="%s has no nvidia.nccl package (the nvidia-nccl-cu12/cu13 wheel torch loads NCCL "
                                      "from): install torch from PyPI into it, or build DeepEP V1" % self.params["python"])
        return found

    def loaded_version(self, lib):
        argv = [self.params["python"], "-c", VERSION_CHECK, lib]
        user = self.params["check_user"]
        if user and os.geteuid() == 0:
            try:
                account = pwd.getpwnam(user)
            except KeyError:
                self.module.fail_json(msg="check_user: there is no user %s; create it (the nccl layer's build user) "
                                          "or set check_user to ''" % user)
            # Without root's groups or capabilities, from /: only what any process of that user could do.
            try:
                proc = subprocess.run(argv, cwd="/", user=account.pw_uid, group=account.pw_gid, extra_groups=[],
                                      capture_output=True, text=True, check=False)
                rc, out, err = proc.returncode, proc.stdout, proc.stderr
            except OSError as exc:  # the interpreter is not one that user may run
                rc, out, err = 126, "", "as %s: %s" % (user, exc)
        else:
            rc, out, err = self.module.run_command(argv, cwd="/")
        if rc != 0:
            return None, (err.strip().splitlines() or ["exit %d" % rc])[-1]
        return decode_version(int(out.strip().splitlines()[-1])), None

    def read_wheel(self):
        """(package, version, cut_short) of the interpreter's NCCL wheel, or (None, None, None). cut_short: (lib,
        size, recorded size) when its libnccl.so.2 is not the size the wheel's RECORD gives and no build of this
        module's is in its place (then it is not the wheel's file; torch_probe.HALF_INSTALLED), else None."""
        rc, out, err = self.module.run_command([self.params["python"], "-c", WHEEL_VERSION], cwd="/")
        if rc != 0:
            self.module.fail_json(msg="%s could not read its NCCL wheel's version: %s"
                                  % (self.params["python"], err.strip()))
        found = json.loads(out.strip().splitlines()[-1])
        if not found:
            return None, None, None
        package, version, cut = found
        return package, version, tuple(cut) if cut else None

    @staticmethod
    def stopped_pip(nccl_dir):
        """With no NCCL wheel installed and no record of this module's: the wheel a pip that was not this module's
        was changing when it was stopped, and the version it was replacing, from the stash its uninstall left of
        the dist-info it removed ({package, version: None, version_before, pip_stash}); None when there is none."""
        try:
            names = sorted(os.listdir(os.path.dirname(os.path.dirname(nccl_dir))))
        except OSError:
            return None
        for name in names:
            found = PIP_STASH.match(name)
            if found:
                return dict(package="nvidia-nccl-" + found.group(1), version=None, version_before=found.group(2),
                            pip_stash=name)
        return None

    @staticmethod
    def read_record(nccl_dir, name=RECORD):
        try:
            with open(os.path.join(nccl_dir, name)) as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    @staticmethod
    def put_files(from_dir, nccl_dir):
        """from_dir's lib/libnccl.so.2 and include/ in place of nccl_dir's, each swapped in by a rename."""
        lib = os.path.join(nccl_dir, LIB)
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        shutil.copy2(os.path.join(from_dir, LIB), lib + ".moe-new")
        os.replace(lib + ".moe-new", lib)
        include = os.path.join(nccl_dir, "include")
        for scratch in (include + ".moe-new", include + ".moe-old"):
            shutil.rmtree(scratch, ignore_errors=True)
        if os.path.isdir(os.path.join(from_dir, "include")):
            shutil.copytree(os.path.join(from_dir, "include"), include + ".moe-new", symlinks=False)
            if os.path.isdir(include):
                os.rename(include, include + ".moe-old")
            os.rename(include + ".moe-new", include)
            shutil.rmtree(include + ".moe-old", ignore_errors=True)

    def write_record(self, nccl_dir, record, name=RECORD):
        path = os.path.join(nccl_dir, name)
        with open(path + ".tmp", "w") as handle:
            json.dump(record, handle, indent=2, sort_keys=True)
        os.replace(path + ".tmp", path)

    def present(self, result):
        nccl_dir = result["nccl_dir"]
        build_dir = self.params["build_dir"]
        header = os.path.join(build_dir, "include", "nccl.h")
        if not os.path.isfile(os.path.join(build_dir, LIB)) or not os.path.isfile(header):
            self.module.fail_json(msg="build_dir %s holds no NCCL build (lib/libnccl.so.2 and include/nccl.h)" % build_dir,
                                  **result)
        lib = os.path.join(nccl_dir, LIB)
        want = dict(lib=file_digest(os.path.join(build_dir, LIB)), include=tree_digest(os.path.join(build_dir, "include")))
        have_lib = file_digest(lib) if os.path.isfile(lib) else None
        have = dict(lib=have_lib, include=tree_digest(os.path.join(nccl_dir, "include")))
        record = self.read_record(nccl_dir)
        if have == want and record and record.get("lib_sha256") == want["lib"]:
            result["backup"] = record.get("backup")
            return self.check_version(result, lib)
        ours = bool(record) and record.get("lib_sha256") == have_lib and os.path.isdir(record.get("backup") or "")
        backup = record["backup"] if ours else os.path.join(self.params["backup_dir"], (have_lib or "none")[:16])
        if not ours and have_lib:
            package, version, cut = self.read_wheel()
            if cut and not record:  # kept as the wheel's library, it would be what a DeepEP V1 run puts back
                self.module.fail_json(msg="torch's NCCL wheel is %s: install it again first (python -m pip install "
                                          "--force-reinstall --no-deps %s==%s), or set nccl_method: wheel; nothing "
                                          "was changed" % (self.wheel_state(version, package, cut), package, version),
                                      **result)
        result.update(changed=True, action="installed", backup=backup)
        if self.module.check_mode:
            return result
        if not ours and have_lib:  # what pip installed, kept before it is replaced
            shutil.rmtree(backup, ignore_errors=True)
            os.makedirs(os.path.join(backup, "lib"))
            shutil.copy2(lib, os.path.join(backup, LIB))
            if os.path.isdir(os.path.join(nccl_dir, "include")):
                shutil.copytree(os.path.join(nccl_dir, "include"), os.path.join(backup, "include"))
        self.put_files(build_dir, nccl_dir)
        self.write_record(nccl_dir, dict(build_dir=build_dir, version=self.params["version"], lib_sha256=want["lib"],
                                         backup=backup if have_lib else None, original_lib_sha256=(
                                             record.get("original_lib_sha256") if ours else have_lib)))
        return self.check_version(result, lib, undo=backup if have_lib else None)

    def check_version(self, result, lib, undo=None):
        version, error = self.loaded_version(lib)
        result["loaded_version"] = version
        if version != self.params["version"]:
            said = "answers %s, not %s" % (version, self.params["version"]) if version else (
                "cannot be loaded (%s)" % error)
            if undo:
                self.put_files(undo, result["nccl_dir"])
                os.unlink(os.path.join(result["nccl_dir"], RECORD))
                shutil.rmtree(undo, ignore_errors=True)
                said += "; the wheel's files were put back"
            self.module.fail_json(msg="the NCCL in place (%s) %s" % (lib, said), **result)
        return result

    def absent(self, result):
        self.restore_files(result)
        return self.forget_wheel_upgrade(result)

    def restore_files(self, result):
        nccl_dir = result["nccl_dir"]
        record = self.read_record(nccl_dir)
        if record is None:
            return result
        lib = os.path.join(nccl_dir, LIB)
        have_lib = file_digest(lib) if os.path.isfile(lib) else None
        backup = record.get("backup")
        restorable = have_lib == record.get("lib_sha256") and backup and os.path.isfile(os.path.join(backup, LIB))
        result.update(changed=True, action="restored" if restorable else "forgotten", backup=backup)
        if self.module.check_mode:
            return result
        if restorable:
            self.put_files(backup, nccl_dir)
        os.unlink(os.path.join(nccl_dir, RECORD))
        if restorable:
            shutil.rmtree(backup, ignore_errors=True)
            result["loaded_version"] = self.loaded_version(lib)[0]
        return result

    def forget_wheel_upgrade(self, result):
        """The upgrade record goes once the wheel installed is no longer the version it says pip put there; with
        reinstall_wheel, a record that still matches is undone first (pip installs the version before again)."""
        nccl_dir = result["nccl_dir"]
        record = self.read_record(nccl_dir, WHEEL_RECORD)
        if record is None and not self.params["reinstall_wheel"]:
            return result
        found, installed, cut = self.read_wheel()
        stopped = stale = None
        if cut and (record is None or installed != record.get("version")):
            # Installed, its library cut short (a pip install -I stopped while it wrote it): the version its
            # metadata names is installed again over it. A record of another version is forgotten with it.
            stale, record = record, None
            stopped = dict(package=found, version=installed, version_before=installed, pip_stash=None)
        if record is None:
            # No record, no wheel installed, and pip's stash beside its directory: another pip was stopped half-way.
            # The version it was replacing is installed again (what torch loaded before that pip).
            stopped = stopped or (self.stopped_pip(nccl_dir) if installed is None else None)
            if stopped is None:
                return result
            record = stopped
        # No wheel installed while the record is there: a pip that was changing it (this module's, or the reinstall
        # below) was stopped before it finished. The record keeps the version to install again.
        if installed == record.get("version") or installed is None:
            result["wheel_upgrade"] = None if stopped else record
            if not self.params["reinstall_wheel"]:
                if stale:  # no longer the version installed: forgotten, as below
                    result["changed"] = True
                    if not self.module.check_mode:
                        os.unlink(os.path.join(nccl_dir, WHEEL_RECORD))
                return result
            package, before = record.get("package"), record.get("version_before")
            if not PACKAGE.match(str(package)) or not VERSION.match(str(before)):  # only a version reaches pip
                self.module.fail_json(msg="%s: the wheel upgrade record names no package and version to install "
                                          "again (%r); remove it" % (os.path.join(nccl_dir, WHEEL_RECORD), record),
                                      **result)
            repair = bool(cut) and before == installed
            result.update(changed=True, action="repaired" if repair else "reinstalled")
            if self.module.check_mode:
                return result
            self.require_pip("%s==%s" % (package, before))
            error, fix = self.pip_install("%s==%s" % (package, before), force=repair)
            dummy, now, still_cut = self.read_wheel()
            if now != before or still_cut:
                result["changed"] = (now, still_cut) != (installed, cut)  # pip left the wheel as it was
                state = ("at %s (the nccl layer's wheel method installed it for DeepEP V2)" % now
                         if now and not still_cut else self.wheel_state(now, package, still_cut))
                why = ("the version its metadata names" if repair else "the version a stopped pip was replacing"
                       if stopped else "the version torch came with")
                self.module.fail_json(msg="torch's NCCL wheel stays %s: pip could not install %s==%s, %s; %s. "
                                          "pip: %s" % (state, package, before, why, fix, error), **result)
            result.update(wheel_upgrade=None, pip_installed="%s==%s" % (package, before),
                          pip_leftovers_removed=self.remove_pip_leftovers(nccl_dir))
        result["changed"] = True
        if not self.module.check_mode:
            if not stopped or stale:
                os.unlink(os.path.join(nccl_dir, WHEEL_RECORD))
            result["loaded_version"] = self.loaded_version(os.path.join(nccl_dir, LIB))[0]
        return result

    def require_pip(self, requirement):
        rc, dummy, err = self.module.run_command([self.params["python"], "-m", "pip", "--version"], cwd="/")
        if rc != 0:
            self.module.fail_json(msg="nccl: %s has no pip, which nccl_method wheel runs (python -m pip) to install "
                                      "%s: add it (python -m ensurepip), or set nccl_method: source."
                                  % (self.params["python"], requirement))

    def pip_extra_args(self):
        try:
            return shlex.split(self.params["pip_extra_args"])
        except ValueError as exc:
            self.module.fail_json(msg="pip_extra_args (nccl_pip_extra_args): %r cannot be split into arguments (%s); "
                                      "close its quotes" % (self.params["pip_extra_args"], exc))

    def pip_install(self, requirement, force=False):
        """The interpreter's own pip installs requirement, tried again as the network steps are. Returns what to say
        should the installed version not be the one asked for (the caller reads it to decide): pip's last error
        line when every try failed, and what to do about it."""
        argv = ([self.params["python"], "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                 "--no-input"] + (["--force-reinstall"] if force else []) + self.pip_extra_args() + [requirement])
        error, fix = None, FIX_PIP
        for attempt in range(max(self.params["retries"], 0) + 1):
            if attempt:
                time.sleep(max(self.params["retry_delay"], 0))
            rc, out, err = self.module.run_command(argv, cwd="/")
            if rc == 0:
                return "it exited 0 and the interpreter's NCCL wheel is not the version asked for", FIX_PIP
            if rc < 0:  # its last line is then whatever it had printed last ("Successfully uninstalled ...")
                error, fix = "pip was killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name), FIX_KILLED
                continue
            lines = (err or out).strip().splitlines() or ["exit %d" % rc]
            errors = [line for line in lines if line.startswith("ERROR")]
            error = (errors or [line for line in lines if not line.startswith("WARNING")] or lines)[-1]
            fix = FIX_PIP
        return error, fix

    def upgraded(self, result):
        nccl_dir = result["nccl_dir"]
        package, version = self.params["package"], self.params["version"]
        if not VERSION.match(version):
            self.module.fail_json(msg="version: %r is not a version (2.30.7)" % version, **result)
        if not PACKAGE.match(package):
            self.module.fail_json(msg="package: %r is not an NCCL wheel (nvidia-nccl-cu13)" % package, **result)
        self.pip_extra_args()  # bad input named before anything changes
        dummy, installed, cut = self.read_wheel()
        record = self.read_record(nccl_dir, WHEEL_RECORD)
        before = installed
        # Upgraded again, or a pip stopped half-way (no wheel installed): the first version is the one to go back to.
        if record and record.get("package") == package and installed in (record.get("version"), None):
            before = record.get("version_before")
        elif record is None and installed is None:
            # Another pip stopped half-way (its stash, no record): the version it was replacing is the one before.
            stopped = self.stopped_pip(nccl_dir)
            before = stopped["version_before"] if stopped and stopped["package"] == package else None
        want = None if before == version or not VERSION.match(str(before)) else dict(
            package=package, version=version, version_before=before)
        result["wheel_upgrade"] = want
        # At the version asked for with its library cut short (a pip install -I stopped while it wrote it): pip
        # installs that version again over it.
        repair = installed == version and cut is not None
        if installed == version and record == want and not repair:
            return result
        result["changed"] = True
        if installed != version or repair:
            result["action"] = "repaired" if repair else "upgraded"
            self.require_pip("%s==%s" % (package, version))
        if self.module.check_mode:
            return result
        if record != want:  # before pip: a run stopped while pip ran leaves the version to go back to
            self.write_wheel_record(nccl_dir, want)
        if installed == version and not repair:
            return result
        error, fix = self.pip_install("%s==%s" % (package, version), force=repair)
        dummy, now, still_cut = self.read_wheel()
        if now != version or still_cut:
            if (now, still_cut) == (installed, cut):  # pip left the wheel as it was: so is the record, nothing changed
                self.write_wheel_record(nccl_dir, record)
                result["changed"] = False
            self.module.fail_json(msg="nccl: pip could not install %s==%s into %s; torch's NCCL wheel stays %s: %s, "
                                      "or set nccl_method: source. pip: %s"
                                  % (package, version, self.params["python"],
                                     self.wheel_state(now, package, still_cut), fix, error), **result)
        result.update(loaded_version=self.loaded_version(os.path.join(nccl_dir, LIB))[0],
                      pip_installed="%s==%s" % (package, version),
                      pip_leftovers_removed=self.remove_pip_leftovers(nccl_dir))
        return result

    @staticmethod
    def wheel_state(version, package, cut=None):
        """How the message names the wheel's state after pip: its version, or half-installed (cut: read_wheel's)."""
        if version and cut:
            return ("half-installed (%s %s, its %s %s bytes where its RECORD says %d: a pip writing it was stopped "
                    "before it finished; torch cannot load its own NCCL until it is installed again)"
                    % (package, version, cut[0], "missing, not" if cut[1] is None else cut[1], cut[2]))
        if version:
            return "at %s" % version
        return ("half-installed (no %s installed: a pip changing it was stopped before it finished; torch cannot "
                "load its own NCCL until one is)" % package)

    @staticmethod
    def remove_pip_leftovers(nccl_dir):
        """What a pip stopped half-way left of this wheel (its uninstall moves the files to ~-named directories
        beside them, and only a pip that finishes removes those): once pip has installed the wheel, nothing of it
        is in use. Any pip run warns of them ("Ignoring invalid distribution ~vidia-nccl-cu13") until they go.
        Returns the paths removed."""
        site = os.path.dirname(os.path.dirname(nccl_dir))
        found = [os.path.join(nccl_dir, name) for name in os.listdir(nccl_dir) if name.startswith("~")]
        found += [os.path.join(site, name) for name in os.listdir(site) if PIP_STASH.match(name)]
        for path in sorted(found):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        return sorted(found)

    def write_wheel_record(self, nccl_dir, record):
        if record:
            self.write_record(nccl_dir, record, WHEEL_RECORD)
        elif os.path.exists(os.path.join(nccl_dir, WHEEL_RECORD)):
            os.unlink(os.path.join(nccl_dir, WHEEL_RECORD))

    def run(self):
        result = dict(changed=False, action="none", nccl_dir=self.nccl_dir(), loaded_version=None, backup=None,
                      wheel_upgrade=None, pip_installed=None, pip_leftovers_removed=[])
        if self.params["state"] == "present":
            return self.present(result)
        if self.params["state"] == "upgraded":
            return self.upgraded(result)
        return self.absent(result)


def main():
    # Whatever umask the login has (a hardened 027 or 077): every user of the node that runs jobs with this
    # interpreter must read what is installed into it.
    os.umask(0o022)
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            build_dir=dict(type="path"),
            version=dict(type="str"),
            package=dict(type="str"),
            pip_extra_args=dict(type="str", default=""),
            retries=dict(type="int", default=3),
            retry_delay=dict(type="int", default=10),
            reinstall_wheel=dict(type="bool", default=False),
            backup_dir=dict(type="path", required=True),
            state=dict(type="str", default="present", choices=["present", "absent", "upgraded"]),
            check_user=dict(type="str", default=""),
        ),
        required_if=[("state", "present", ("build_dir", "version")),
                     ("state", "upgraded", ("package", "version"))],
        supports_check_mode=True,
    )
    if not os.path.isfile(module.params["python"]) or not os.access(module.params["python"], os.X_OK):
        module.fail_json(msg="python: %s is not an executable interpreter" % module.params["python"])
    module.exit_json(**NcclRuntime(module).run())


if __name__ == "__main__":
    main()
