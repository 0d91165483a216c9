#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: source_build
short_description: Fingerprinted, versioned build of a source tree with an atomic C(current) switch
version_added: "0.1.0"
description:
  - Builds one component (NVSHMEM, GDRCopy, DeepEP, ...) from a pinned source into
    C(<prefix>/builds/<fingerprint>) and points C(<prefix>/current) at it only after the build and its
    verification succeeded, so a failed or killed build leaves the previous install working.
  - The fingerprint hashes every input - the source digest (tree digest of a directory, sha256 of an archive,
    or the resolved git commit), the build and verify commands, the environment, the patches and the
    caller's O(inputs) (CUDA release, compiler, torch version, NVSHMEM identity, arch list, ...). A stamp
    holding them is written last. Unchanged inputs give C(changed=false) without building.
  - In check mode it reports whether it would build and why (which inputs changed), building nothing.
  - Long builds should run in the background (O(build_timeout)) so SSH timeouts do not kill them; the log is kept
    under the build directory.
  - It runs with umask 022 whatever the login's (a hardened 027 or 077), so that every user of the node can read what
    it installs and the build user can reach its build directory.
author:
  - moe_infra maintainers (@moe-infra)
options:
  name:
    description:
      - Component name, recorded in the stamp and the fingerprint.
    type: str
    required: true
  src:
    description:
      - Source on the node, a directory or a tar archive (C(.tar), C(.tar.gz), C(.tgz), C(.tar.xz)). An archive
        with a single top-level directory is unpacked without it. Mutually exclusive with O(git_url).
    type: path
  git_url:
    description:
      - Git repository to fetch O(git_ref) from (into a cache under O(prefix)). An C(https://), C(ssh://) or
        C(file://) URL, C(user@host:path), or an absolute path; a value starting with C(-) or using git's
        C(<transport>::) form is refused before git runs, and git always gets it after C(--).
    type: str
  git_ref:
    description:
      - Commit, tag, branch or full ref (e.g. C(refs/pull/466/head)) to build. Pin a commit for
        reproducible builds.
    type: str
  prefix:
    description:
      - Directory holding C(builds/), C(current) and the git cache.
    type: path
    required: true
  build_command:
    description:
      - Shell command (bash, C(-e -o pipefail)) run in the unpacked source. C(SRC_DIR) and C(INSTALL_DIR)
        are set in its environment. Required with O(state=built).
      - Each command runs in a process group of its own; whatever it leaves running is ended when it returns.
    type: str
  verify_command:
    description:
      - Shell command run after the build with the same environment; the build only becomes C(current)
        when it exits 0.
    type: str
  environment:
    description:
      - Environment for both commands, part of the fingerprint.
    type: dict
    default: {}
  inputs:
    description:
      - Further inputs that must trigger a rebuild when they change (versions, arch list, compiler).
    type: dict
    default: {}
  patches:
    description:
      - Patch files on the node applied with C(patch -p1) in the source before building, in order.
    type: list
    elements: path
    default: []
  build:
    description:
      - The component's options in one dict, for a role that describes its build once and passes it to several
        tasks; expanded by the action plugin. Keys C(name), C(src), C(git_url), C(git_ref), C(prefix),
        C(build_command), C(verify_command), C(environment), C(inputs), C(patches), C(controller_patches), C(keep),
        C(force), C(build_user), C(controller_src), C(read_files), C(cxx_runtime_check); an option set on the task
        itself wins, and a key whose value is empty or null is left out. Any other key is refused. With
        C(controller_src), C(src) defaults to C(<prefix>/sources/<the archive's name>) and C(git_url) and
        C(git_ref) are not used.
    type: dict
  controller_patches:
    description:
      - Patch files on the controller (paths, or files of the role's C(files/)), handled by the action plugin, which
        sends their text as O(patch_texts), so no task copies them to the node. Applied after O(patches), in order.
    type: list
    elements: path
  patch_texts:
    description:
      - The patches of O(controller_patches) as the action plugin sends them, each a C(name) and its C(content).
        Their digests are those of the files (the fingerprint is the same as with the files on the node); a build
        writes them into its directory (C(.moe_infra_patches/)) and applies them from there.
    type: list
    elements: dict
    default: []
  keep:
    description:
      - Builds to keep besides C(current); older ones are removed.
    type: int
    default: 2
  force:
    description:
      - Build even when the fingerprint is already built.
    type: bool
    default: false
  rebuild_current:
    description:
      - Build again when C(current) already points at this fingerprint, which the caller found broken (the deepep
        role, when C(import deep_ep) of it fails on an undefined symbol because torch moved under it). Unlike
        O(force), a kept build of another fingerprint is still switched to, and a cache build installed, since the
        failed import was not theirs (DeepEP V1 asked for after V2, whose extension does not load against torch's
        own NCCL).
    type: bool
    default: false
  artifact_in:
    description:
      - An archive of a verified build made on another node with the same inputs (build once, fan out). When
        this node needs a build and the file exists, it is unpacked instead of building, its stamp's
        fingerprint must equal this node's, and O(verify_command) runs here before C(current) switches.
    type: path
  artifact_out:
    description:
      - Where to write the verified build as a tar.gz for the other nodes (with O(controller_cache), the action
        plugin fetches a newly written one into it). Not rewritten while it holds this fingerprint. Files of the build directory named
        C(*.node-record) (what a role checked on this node) are left out. Exports of builds no longer kept
        (C(<name>-<fingerprint>.tar.gz) beside it) are removed (RV(artifacts_removed)).
      - With O(state=rolled_back), the failed build's export, as its build run had it. It is removed with the
        build, so that a rebuild of the same inputs is exported anew.
    type: path
  controller_src:
    description:
      - A source archive on the controller (a path, or a file of the role's C(files/)), handled by this module's
        action plugin. Its sha256, computed on the controller, stands for the source in the fingerprint, so an
        up-to-date build is confirmed without the archive on the node. O(src) is where it goes on the node; a
        result with RV(needs_source) says a build needs it there (O(send_source) sends it then).
    type: path
  send_source:
    description:
      - With O(controller_src), outside check mode, the action plugin puts the archive in the task's temporary
        directory on the node (O(src_in)); a build that needs it (O(src) missing, or other bytes than the
        controller's) installs it at O(src) first (its directory 0755, the file 0644). No tasks of its own; the
        roles set it when the plan said RV(needs_source).
    type: bool
    default: false
  src_in:
    description:
      - Set by the action plugin (O(send_source)), not by a task. The controller's archive on the node, installed at
        O(src) when a build needs it there, once its sha256 equals O(src_digest).
    type: path
  controller_cache:
    description:
      - A directory of verified builds on the controller (C(<name>-<fingerprint>.tar.gz)), handled by the action
        plugin, which returns in RV(cached) whether this fingerprint's archive is there. With O(artifact_out),
        outside check mode, a build this run exported (RV(artifact_written)) is fetched into it, with its digest
        record (C(<archive>.sha256), sha256sum's format) taken on the controller (RV(fetched)); the directory is
        made 0700 when missing. The other nodes install it from there (O(controller_artifact)).
      - With O(state=rolled_back), outside check mode, the failed build's archive and its record are removed from
        it once the rollback is done (RV(uncached)). No node installs a build that failed its checks, and the next
        run builds it anew.
    type: path
  known_builds:
    description:
      - The node's build prefixes as M(moe_infra.deepep.deepep_facts) read them with the node
        (C(ansible_facts.deepep.builds)), handled by the action plugin. In check mode, a build of O(controller_src)
        whose fingerprint (taken on the controller as this module takes it) is the verified build C(current) points
        at is answered from that reading, as this module would answer (up to date), with no module run on the node.
        Any other case (another fingerprint, a git source, O(patches), a prefix or a file of O(read_files) the
        reading does not hold) runs this module as without it.
    type: dict
  controller_artifact:
    description:
      - An archive of a verified build in the controller cache (what another node made with the same inputs),
        handled by the action plugin, which puts it on the node and installs it as O(artifact_in) (no task of its
        own, no copy left on the node). In check mode it is not sent, and the install is predicted from
        O(artifact_in). The install answers at once, so O(build_timeout) does not apply.
    type: path
  build_timeout:
    description:
      - Seconds the module may run. Above 0 the action plugin runs it in the background (a long build outlives an
        SSH session) and checks it every O(progress_interval) seconds with M(moe_infra.deepep.source_build_status),
        printing the build's phase and elapsed time each time; 0 runs it in the foreground. Use it instead of the
        task's C(async)/C(poll) (which still work, with Ansible's bare poll lines).
    type: int
    default: 0
  progress_interval:
    description: Seconds between two checks on a background build (O(build_timeout)).
    type: int
    default: 10
  progress_log:
    description:
      - The log whose tail gives the phase (the RV(log) of this fingerprint, e.g. from a check-mode run of the same
        task); without it the phase reads C(starting).
    type: path
  src_digest:
    description:
      - The source's digest as C(sha256:<64 hex digits>), set by the action plugin from O(controller_src). The node's
        copy at O(src) is read only for a build, and must have this digest.
    type: str
  read_files:
    description:
      - Files of the build to return in RV(files) (paths relative to its build directory, e.g.
        C(include/gdrapi.h)), so that a layer reads its version from the build it confirms, with no task of its own.
    type: list
    elements: str
    default: []
  cxx_runtime_check:
    description:
      - After O(verify_command), refuse the build (or the cache artifact being installed) when a shared object in
        its source tree defines parts of libstdc++ itself (C(std::locale::classic()) and the like), as a compiler
        that has only a static libstdc++ makes it. Two C++ runtimes in one process crash (a Python extension loaded
        beside torch). The failure names each file and what it defines.
      - Not part of the fingerprint.
    type: bool
    default: false
  build_user:
    description:
      - Run the patches, O(build_command) and O(verify_command) as this (unprivileged) user, so a hostile source
        tree cannot write outside its build directory. The build directory is handed to the user for the build
        and back to the module's user (root) once it is verified; C(HOME) is a scratch directory beside it.
      - After each command every process of the build user that the command started is ended, also those that left
        its process group (C(setsid)); the tree is handed back without following a link (each directory opened
        with C(O_NOFOLLOW) from its parent), with no write bit for group and others and no setuid, setgid or
        sticky bit, and FIFOs and sockets removed. O(read_files) never reads through a link.
      - Where the user could not reach its build directory (a directory on the way to O(prefix) it may not
        search, as for a prefix under C(/root) or a 0700 home), the module fails before it builds, naming that
        directory and the fix.
      - Not part of the fingerprint. Empty or unset, the commands run as the module's user. The user must exist.
    type: str
  state:
    description:
      - V(built) builds (or installs, or switches to) this fingerprint. V(rolled_back) undoes a switch whose build
        then failed a check that runs against the live path (DeepEP's tests). C(current) goes back to
        O(rollback_to), or is removed when that is empty (nothing was installed before), and the failed build is
        reduced to its log, so the next run builds it again instead of switching to it. Nothing happens when
        C(current) is not O(rollback_from) any more.
    type: str
    choices: [built, rolled_back]
    default: built
  rollback_from:
    description: With O(state=rolled_back), the fingerprint whose build failed (RV(fingerprint) of the build run).
    type: str
  rollback_to:
    description:
      - With O(state=rolled_back), the fingerprint to put back (RV(previous_fingerprint) of the build run); empty
        when there was none.
    type: str
  failure:
    description: With O(state=rolled_back), what failed, written beside the failed build's log (C(FAILED)).
    type: str
  lock_timeout:
    description:
      - Seconds to wait for the prefix's lock (C(<prefix>/.lock)) when another run on this node holds it. The lock
        is held from planning to the switch, so two runs never build, prune or switch one component at once; after
        the wait the module fails naming the other run (node, pid, start time, fingerprint, controller) and changes
        nothing. Check mode takes no lock and reports the holder in RV(lock_holder).
    type: int
    default: 300
  abandon_after:
    description:
      - Seconds a build may go on with nobody checking on it (its O(heartbeat) file, touched by every status check
        of the run that started it). When the run is interrupted (Ctrl-C, a killed controller, a
        lost connection), the build is stopped that long after its last check, reduced to its log and the lock
        released. 0 never stops it. The action plugin sets it for background builds (O(build_timeout)).
    type: int
    default: 0
  heartbeat:
    description:
      - A file of this run (set by the action plugin for background builds, one per run) whose modification time
        says when the run last checked on the build; removed when the module ends. See O(abandon_after).
    type: path
  run_by:
    description: Who started the run (the controller's user, host and pid; set by the action plugin), in the lock record.
    type: str
  network_retries:
    description: Further tries of a git network step (C(ls-remote), C(fetch)) that failed.
    type: int
    default: 3
  network_retry_delay:
    description: Seconds before the first retry of a network step; each further retry waits that much longer.
    type: int
    default: 5
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Reports the reason it would build; a git source is resolved with C(git ls-remote).
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
notes:
  - The build runs as the user the task runs as; the build tree is owned by that user (KF06).
  - A failed build (its command, its verification, a damaged archive, a full disk, a build stopped because its run
    was interrupted) is reduced to its log and a C(FAILED) note; scratch is removed; the message says what was kept,
    the free space left and that C(current) still points at the previous build.
  - A damaged source archive or build archive (truncated, not gzip) is named with the fix; nothing is installed
    from it.
"""

EXAMPLES = r"""
- name: Build DeepEP from a source archive
  moe_infra.deepep.source_build:
    name: deepep
    src: /var/cache/deepep/DeepEP-pr466.tar.gz
    prefix: /opt/deepep/deepep
    build_command: "{{ python }} setup.py build_ext --inplace"
    verify_command: cd / && PYTHONPATH=$SRC_DIR {{ python }} -c 'import deep_ep'
    environment:
      TORCH_CUDA_ARCH_LIST: "9.0"
      NVSHMEM_DIR: /opt/deepep/nvshmem/current
    inputs:
      torch: 2.11.0+cu130
      cuda: "13.0"
  build_timeout: 7200
  progress_interval: 10
  register: deepep_build
"""

RETURN = r"""
build_options:
  description:
    - The O(build) options as the task gave them (before the task's own options are merged in); empty when none
      were given. The build_fanout role's later tasks take them from the plan.
  returned: always
  type: dict
  sample: {name: deepep, prefix: /opt/deepep/deepep, build_user: deepep-build}
action:
  description:
    - What the run did, or in check mode would do. V(build), V(artifact) (install O(artifact_in)), V(switch) (point
      C(current) at an existing build), or V(none) (up to date). V(build) also when the source is not on the node
      yet.
  returned: always
  type: str
  sample: none
fingerprint:
  description: Fingerprint of all inputs.
  returned: always
  type: str
  sample: 3f9a0c1d2b4e5f60
reason:
  description: Why it built (or would build), or why it did not.
  returned: always
  type: str
  sample: "inputs changed: inputs.torch: 2.10.0 -> 2.11.0"
install_dir:
  description: The build directory of this fingerprint.
  returned: always
  type: str
src_dir:
  description: The unpacked (and built) source inside it.
  returned: always
  type: str
current:
  description: The C(current) link.
  returned: always
  type: str
previous_fingerprint:
  description: Fingerprint C(current) pointed at before this run; null when none.
  returned: always
  type: str
source_digest:
  description: Digest of the source (tree or archive sha256, or git commit).
  returned: always
  type: str
log:
  description: Build log path.
  returned: always
  type: str
build_seconds:
  description: Wall time of build and verify; null when nothing was built.
  returned: always
  type: float
build_cpu_seconds:
  description:
    - CPU time (user + system) of the build's processes, all of them (a git source's fetch, the patches, the build and
      verify commands); null when nothing was built.
    - With RV(build_seconds), how well the build used the node's CPUs (a build slower than another of the same inputs
      with the same CPU time waited on something else).
  returned: always
  type: float
artifact:
  description: O(artifact_out), or null.
  returned: always
  type: str
artifact_written:
  description: Whether O(artifact_out) was written in this run.
  returned: always
  type: bool
artifacts_removed:
  description:
    - With O(artifact_out), the exports of this component (C(<name>-<fingerprint>.tar.gz) in the same directory) that
      were removed because their build is no longer kept (O(keep)), so that the node does not collect one per build.
    - With O(state=rolled_back), the failed build's export (O(artifact_out)) when it was there.
  returned: when O(artifact_out) is set, outside check mode
  type: list
  elements: str
artifact_digest:
  description: The sha256 (C(sha256:<hex>)) of O(artifact_out) as written in this run.
  returned: when RV(artifact_written) is true
  type: str
source_installed:
  description: Whether the archive O(send_source) sent was installed at O(src) for this build.
  returned: always
  type: bool
uncached:
  description:
    - With O(state=rolled_back) and O(controller_cache), the controller cache's archive of the failed build that was
      removed (its C(.sha256) record with it); null when the cache did not hold it.
  returned: when O(state=rolled_back) and O(controller_cache) are set
  type: str
fetched:
  description:
    - With O(controller_cache) and O(artifact_out), the controller cache's path of the build this run exported and
      fetched; null when nothing was fetched.
  returned: when O(controller_cache) is set
  type: str
needs_source:
  description:
    - Whether a build needs the source at O(src) and the node does not have it there yet (missing or, with
      O(src_digest), other bytes). Outside check mode the module then fails before building anything.
  returned: always
  type: bool
build_user_exists:
  description: Whether O(build_user) is a user on this node (the roles create it only when not); null without one.
  returned: always
  type: bool
cached:
  description: With O(controller_cache), whether the controller cache holds this fingerprint's build.
  returned: when O(controller_cache) is set
  type: bool
lock_holder:
  description:
    - In check mode, the record of the run holding the prefix's lock now (node, pid, since, fingerprint, run_by);
      null when none. Outside check mode the module holds the lock itself, so it is null.
  returned: always
  type: dict
rolled_back_to:
  description: With O(state=rolled_back), the fingerprint C(current) points at again; null when it was removed.
  returned: when O(state=rolled_back)
  type: str
rolled_back_to_inputs:
  description:
    - With O(state=rolled_back), the O(inputs) the build C(current) points at again was made with (its stamp's), so
      that the caller can undo what it did for the failed build only (the deepep role puts torch's own NCCL back
      when the build now live is not V2); null when C(current) was removed.
  returned: when O(state=rolled_back)
  type: dict
  sample: {"deepep_version": "v1", "torch": "2.9.1"}
files:
  description:
    - O(read_files) that exist in this fingerprint's build directory, by path, with their text. Empty when the
      build is not there (check mode before a build).
  returned: always
  type: dict
  sample: {"include/gdrapi.h": "#define GDR_API_MAJOR_VERSION 2\n..."}
"""

import errno
import hashlib
import json
import os
import pwd
import re
import resource
import select
import shutil
import signal
import tarfile
import time
import zlib

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.inputs import (
    GIT_REF_ACCEPTED,
    GIT_URL_ACCEPTED,
    git_ref_problem,
    git_url_problem,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import PrefixLock, describe, end_group, kill_group, process_start
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_state import (
    STAMP,
    build_inputs,
    current_fingerprint,
    read_no_follow,
    read_stamp,
    user_exists,
)
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.elf_symbols import cxx_runtime_copies, cxx_runtime_message
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.safe_tar import UNSAFE_ERRORS, NoSafeExtraction, extract_all
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import (
    boot_ticks_now, chown_tree, end_processes_of, first_unsearchable)
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.fingerprint import (
    changed_inputs,
    file_digest,
    fingerprint,
    tree_digest,
)

# Where a build puts the patches the controller sent (patch_texts).
PATCH_DIR = ".moe_infra_patches"
LOCAL_RECORD_SUFFIX = ".node-record"
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")
# What a failed build keeps: its logs, and the note saying why it failed.
KEPT_AFTER_FAILURE = ("build.log", "install.log", "FAILED")
# Scratch beside a build directory; never outlives the module run that made it.
SCRATCH_SUFFIXES = (".unpack", ".artifact", ".home", ".tar")
# What a damaged archive raises (gzip's BadGzipFile and lzma's LZMAError are OSErrors).
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)
ABANDONED = -1000  # run_logged's status for a build stopped because its run stopped checking on it


class BuildFailed(Exception):
    """A build step failed: the message, and the result fields that go with it."""

    def __init__(self, msg, **extra):
        super(BuildFailed, self).__init__(msg)
        self.msg = msg
        self.extra = extra


class SourceBuild(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.prefix = self.params["prefix"]
        self.builds = os.path.join(self.prefix, "builds")
        self.current = os.path.join(self.prefix, "current")
        self.lock = PrefixLock(self.prefix)
        self.build_pgid = None  # the process group of the command running now
        self.heartbeat = self.params["heartbeat"]

    def beat(self):
        """The run looks after this build now (its status checks touch the same file)."""
        if self.heartbeat:
            with open(self.heartbeat, "a"):
                pass
            os.utime(self.heartbeat, None)

    def seconds_since_beat(self):
        try:
            return time.time() - os.stat(self.heartbeat).st_mtime
        except (OSError, TypeError):
            return 0.0

    def fail(self, msg, **extra):
        self.lock.release()
        self.module.fail_json(msg=msg, **extra)

    # Lock ---------------------------------------------------------------------------------------

    def take_lock(self, action, fp):
        """Hold the prefix's lock for the rest of the module run (planning to switch), or fail naming its holder."""
        timeout = self.params["lock_timeout"]
        holder = self.lock.acquire(timeout, dict(name=self.params["name"], action=action, fingerprint=fp,
                                                 run_by=self.params["run_by"]))
        if holder is not None:
            self.module.fail_json(
                msg="another run holds %s's lock on this node: %s. Nothing was changed. Wait for it to finish and "
                    "run again (a build whose run was interrupted stops by itself once nobody checks on it), or raise "
                    "lock_timeout (waited %d s)" % (self.params["name"], describe(holder), timeout),
                lock_holder=holder)
        # Heartbeats of earlier runs that were killed outright: no build of theirs runs (we hold the lock).
        for name in os.listdir(self.prefix):
            path = os.path.join(self.prefix, name)
            if name.startswith(".alive-") and path != self.heartbeat and os.path.isfile(path):
                os.unlink(path)
        if self.lock.ended:
            self.module.warn("ended build process group %d, left running by an interrupted run of %s"
                             % (self.lock.ended, self.params["name"]))

    # Source -------------------------------------------------------------------------------------

    def source_digest(self):
        src = self.params["src"]
        if src and self.params["src_digest"]:
            return self.params["src_digest"]
        if src:
            if os.path.isdir(src):
                return "tree:" + tree_digest(src)
            if os.path.isfile(src) and src.endswith(ARCHIVE_SUFFIXES):
                return "sha256:" + file_digest(src)
            self.fail("src: %s is neither a directory nor a tar archive (%s)" % (src, ", ".join(ARCHIVE_SUFFIXES)))
        return "git:" + self.resolve_git_commit()

    def git(self, *args, **kwargs):
        """git with the network steps (ls-remote, fetch) tried network_retries more times, network_retry_delay apart."""
        git = self.module.get_bin_path("git", required=True)
        tries = 1 + (self.params["network_retries"] if args[0] in ("ls-remote", "fetch") or "fetch" in args else 0)
        for attempt in range(1, tries + 1):
            rc, out, err = self.module.run_command([git] + list(args), environ_update={"LC_ALL": "C"}, **kwargs)
            if rc == 0:
                return out.strip()
            if attempt < tries:
                time.sleep(self.params["network_retry_delay"] * attempt)
        self.fail("git %s failed%s: %s" % (" ".join(args), " (%d tries)" % tries if tries > 1 else "",
                                           (err or out).strip()), rc=rc, stdout=out, stderr=err)

    def resolve_git_commit(self):
        ref = self.params["git_ref"]
        if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref.lower()):
            return ref.lower()
        out = self.git("ls-remote", "--", self.params["git_url"], ref)
        lines = [line.split() for line in out.splitlines() if line.strip()]
        exact = [sha for sha, name in lines if name in (ref, "refs/heads/" + ref, "refs/tags/" + ref + "^{}")]
        tagged = [sha for sha, name in lines if name == "refs/tags/" + ref]
        commits = exact or tagged
        if not commits:
            self.fail("git_ref %r not found in %s; pin a commit, tag, branch or full ref" % (ref, self.params["git_url"]))
        return commits[0]

    def unpack(self, digest, dest):
        src = self.params["src"]
        if src and os.path.isdir(src):
            shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        elif src:
            self.extract(src, dest)
        else:
            cache = os.path.join(self.prefix, "git-cache")
            if not os.path.isdir(cache):
                self.git("init", "--bare", "-q", cache)
            commit = digest.split(":", 1)[1]
            rc, dummy, dummy = self.module.run_command(["git", "-C", cache, "cat-file", "-e", commit + "^{commit}"])
            if rc != 0:
                self.git("-C", cache, "fetch", "-q", "--force", "--", self.params["git_url"], self.params["git_ref"])
            tar_path = dest + ".tar"
            self.git("-C", cache, "archive", "--format=tar", "-o", tar_path, commit)
            os.makedirs(dest)
            try:
                with tarfile.open(tar_path) as tar:
                    self._extract_all(tar, dest)
            finally:
                os.unlink(tar_path)

    def extract(self, archive, dest):
        scratch = dest + ".unpack"
        try:
            with tarfile.open(archive) as tar:
                members = tar.getmembers()
                tops = set(member.name.split("/", 1)[0] for member in members if member.name not in (".", "./"))
                strip = len(tops) == 1 and any("/" in m.name for m in members)
                self._extract_all(tar, scratch)
            root = os.path.join(scratch, tops.pop()) if strip else scratch
            os.rename(root, dest)
        except ARCHIVE_ERRORS as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise
            if isinstance(exc, PermissionError):
                account = self.build_account()
                raise BuildFailed("the source archive %s could not be unpacked into %s as %s (%s): a permission on "
                                  "this node, not the archive; nothing was built from it"
                                  % (archive, dest, account[2] if account else "this user",
                                     exc if exc.filename else exc.strerror))
            if isinstance(exc, UNSAFE_ERRORS):
                raise BuildFailed("the source archive %s holds a member that would not stay in the build directory "
                                  "(%s): nothing was extracted from it. Check where it came from" % (archive, exc),
                                  unsafe=archive)
            raise BuildFailed("the source archive %s is damaged (%s): nothing was built from it. Replace it with a "
                              "good copy and run again" % (archive, damage_text(exc)), damaged=archive)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _extract_all(self, tar, dest):
        # Never as the archive says: no path out of dest, no device, no setuid bit, no foreign owner; as the build
        # user where there is one (then an escape could reach only what that user can write).
        account = self.build_account()
        try:
            extract_all(tar, dest, account[:2] if account else None)
        except NoSafeExtraction as exc:
            self.fail("%s; nothing was extracted; %s" % (exc, self.kept()))

    # State --------------------------------------------------------------------------------------

    @staticmethod
    def read_stamp(build_dir):
        return read_stamp(build_dir)

    def current_fingerprint(self):
        return current_fingerprint(self.prefix)

    def switch_current(self, fp):
        tmp = self.current + ".new"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.join("builds", fp), tmp)
        os.rename(tmp, self.current)

    def prune(self, keep_fps):
        entries = []
        for name in os.listdir(self.builds):
            path = os.path.join(self.builds, name)
            if name in keep_fps or not os.path.isdir(path):
                continue
            entries.append((os.path.getmtime(path), path))
        entries.sort(reverse=True)
        for dummy, path in entries[max(self.params["keep"] - 1, 0):]:
            shutil.rmtree(path, ignore_errors=True)

    # Build --------------------------------------------------------------------------------------

    @staticmethod
    def user_exists(user):
        """Whether build_user is on this node (None when no build user is asked for)."""
        return user_exists(user)

    def build_account(self):
        """(uid, gid, name) of build_user, or None to run as the module's user."""
        user = self.params["build_user"]
        if not user:
            return None
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            self.fail("build_user: no user %r on this node; create it (the layer roles do) or set it to '' to build "
                      "as %s" % (user, pwd.getpwuid(os.getuid()).pw_name))
        return entry.pw_uid, entry.pw_gid, user

    def check_build_user_reaches(self, path):
        """Fail, before anything is made, where the build user could not reach path (its build directory's
        parent): a prefix under a directory only root may enter (/root, a 0700 home, a 0750 parent)."""
        account = self.build_account()
        try:
            blocked = first_unsearchable(path, account[0], account[1]) if account else None
        except OSError:
            blocked = None  # not known: the build goes on, and a step it stops names the directory
        if blocked is not None:
            self.fail("build_user: %s. Use a prefix every user can reach (the roles' default is under /opt), let "
                      "others search that directory (chmod o+x %s), or set build_user to '' to build as %s; nothing "
                      "was built" % (blocked.text(account[2], path), blocked.directory,
                                     pwd.getpwuid(os.getuid()).pw_name),
                      unreachable=blocked.directory)

    @staticmethod
    def chown_tree(path, uid, gid, sanitize=False):
        chown_tree(path, uid, gid, sanitize)

    def run_logged(self, command, env, cwd, log):
        """Run one step in a process group of its own, logged; its exit status, or ABANDONED when the run that
        started this background build stopped checking on it. Whatever the step leaves running is ended."""
        log.write("$ %s\n" % command)
        log.flush()
        account = self.build_account()
        uid = gid = None
        if account:
            uid, gid, user = account
            env = dict(env, USER=user, LOGNAME=user)
        # Marks every process of this step (escaped ones too) so that exactly these are ended afterwards.
        marker = "MOE_INFRA_BUILD_STEP=%d.%d" % (os.getpid(), time.time() * 1e6)
        env = dict(env, MOE_INFRA_BUILD_STEP=marker.split("=", 1)[1])

        began = boot_ticks_now()
        pid = spawn_in_own_group(["/bin/bash", "-e", "-o", "pipefail", "-c", command], cwd, env, log,
                                 (uid, gid) if account else None)
        self.build_pgid = pid
        self.lock.update(build_pgid=pid, build_start=process_start(pid))
        abandon_after = self.params["abandon_after"]
        status = None
        pause = 0.02  # a quick step answers at once; a long one is looked at every second
        exited = exit_handle(pid)
        try:
            while status is None:
                status = exit_status(pid, wait=False)
                if status is not None:
                    break
                if abandon_after > 0 and self.heartbeat and self.seconds_since_beat() > abandon_after:
                    kill_group(pid)
                    status = exit_status(pid, wait=True)
                    log.write("# stopped: nobody checked on this build for %d s (the run that started it was "
                              "interrupted or lost its connection)\n" % abandon_after)
                    log.flush()
                    return ABANDONED
                if exited is not None:
                    # Woken the moment the step exits (its end was noticed up to a second late).
                    select.select([exited], [], [], 1.0)
                else:
                    time.sleep(pause)
                    pause = min(pause * 2, 1.0)
        finally:
            if exited is not None:
                os.close(exited)
            # Leftovers of the step (daemons, background jobs), or the step itself on SIGTERM: ended, and gone
            # before the tree is read, handed back or pruned.
            end_group(pid)
            if status is None:
                exit_status(pid, wait=True)
            if account:
                # Escaped ones too (setsid): nothing of the build user may run on while its tree is handed back.
                end_processes_of(uid, began, marker)
            self.build_pgid = None
            self.lock.update(build_pgid=None, build_start=None)
        log.write("# exit %d\n" % status)
        log.flush()
        return status

    def kept(self):
        previous = self.current_fingerprint()
        return "current still points at the previous build %s" % previous if previous else "nothing is installed yet"

    def tail(self, path, lines=40):
        with open(path, "r", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])

    def reduce_to_log(self, build_dir, why):
        """A failed build keeps its logs and a note saying why, nothing else; its scratch goes too. Returns what that
        leaves: '<log> kept (N KiB); N GiB free on <prefix>'."""
        for suffix in SCRATCH_SUFFIXES:
            if os.path.lexists(build_dir + suffix):
                shutil.rmtree(build_dir + suffix, ignore_errors=True)
        if os.path.isdir(build_dir) and not os.path.islink(build_dir):
            for name in os.listdir(build_dir):
                if name in KEPT_AFTER_FAILURE:
                    continue
                path = os.path.join(build_dir, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            try:
                with open(os.path.join(build_dir, "FAILED"), "w") as handle:
                    handle.write(why.strip() + "\n")
            except (OSError, IOError):
                pass  # a full disk: the log says it
        kept = [n for n in KEPT_AFTER_FAILURE[:2] if os.path.isfile(os.path.join(build_dir, n))]
        size = sum(os.path.getsize(os.path.join(build_dir, n)) for n in kept)
        return "the failed build was reduced to its log%s (%s KiB); %s free on the prefix's filesystem" % (
            " " + os.path.join(build_dir, kept[0]) if kept else "", int(round(size / 1024.0)),
            free_text(self.prefix))

    def build_env(self, install_dir):
        env = dict(os.environ)
        env.update({k: str(v) for k, v in self.params["environment"].items()})
        env.update(SRC_DIR=os.path.join(install_dir, "src"), INSTALL_DIR=install_dir)
        return env

    def build(self, fp, digest, inputs):
        install_dir = os.path.join(self.builds, fp)
        src_dir = os.path.join(install_dir, "src")
        if os.path.lexists(install_dir):
            # A build of these inputs that never finished (no stamp), or one that failed: start over. Under the
            # lock, so never another run's build in progress.
            shutil.rmtree(install_dir)
        os.makedirs(install_dir)
        log_path = os.path.join(install_dir, "build.log")
        account = self.build_account()
        home = install_dir + ".home"
        started = time.time()
        # Every step's process is waited for, so its CPU time (and that of what it waited for) counts here.
        cpu_before = children_cpu_seconds()
        try:
            self.unpack(digest, src_dir)
            env = self.build_env(install_dir)
            if account:
                # The build user gets its build directory and a scratch HOME, nothing else under the prefix.
                shutil.rmtree(home, ignore_errors=True)
                os.makedirs(home)
                self.chown_tree(install_dir, account[0], account[1])
                os.lchown(home, account[0], account[1])
                env["HOME"] = home
            try:
                self._build_steps(fp, env, src_dir, log_path)
            finally:
                if account:
                    # Verified or not, the tree goes back to root: the build user can change nothing it installed,
                    # and no other user can write what DeepEP's users put on their PYTHONPATH.
                    self.chown_tree(install_dir, os.getuid(), os.getgid(), sanitize=True)
                shutil.rmtree(home, ignore_errors=True)
        except BuildFailed as exc:
            left = self.reduce_to_log(install_dir, exc.msg)
            self.fail("%s; %s; %s" % (exc.msg, self.kept(), left), fingerprint=fp, **exc.extra)
        except (OSError, IOError) as exc:
            left = self.reduce_to_log(install_dir, str(exc))
            why = ("no space left on the prefix's filesystem" if exc.errno == errno.ENOSPC else str(exc))
            self.fail("build of %s failed: %s; %s; %s" % (self.params["name"], why, self.kept(), left),
                      fingerprint=fp)
        seconds = round(time.time() - started, 1)
        cpu_seconds = round(children_cpu_seconds() - cpu_before, 1)
        stamp = dict(name=self.params["name"], fingerprint=fp, inputs=inputs, built_at=time.time(),
                     build_seconds=seconds, build_cpu_seconds=cpu_seconds)
        # Never through a link the build may have left where the stamp goes.
        tmp = os.path.join(install_dir, STAMP + ".tmp")
        for path in (tmp, os.path.join(install_dir, STAMP)):
            if os.path.lexists(path):
                os.unlink(path)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as handle:
            json.dump(stamp, handle, indent=2, sort_keys=True)
        os.rename(tmp, os.path.join(install_dir, STAMP))
        return seconds, cpu_seconds

    def _step_failed(self, status, what, log_path, fp):
        if status == ABANDONED:
            raise BuildFailed("%s of %s stopped: nobody checked on it for %d s (the run that started it was "
                              "interrupted or lost its connection); see %s"
                              % (what, self.params["name"], self.params["abandon_after"], log_path),
                              log=log_path, log_tail=self.tail(log_path))
        raise BuildFailed("%s of %s failed (exit %d); see %s" % (what, self.params["name"], status, log_path),
                          log=log_path, log_tail=self.tail(log_path))

    def _build_steps(self, fp, env, src_dir, log_path):
        with open(log_path, "w") as log:
            # The patches sent from the controller, beside the source (never through anything already there).
            sent = []
            if self.params["patch_texts"]:
                os.mkdir(os.path.join(os.path.dirname(src_dir), PATCH_DIR), 0o755)
            for patch in self.params["patch_texts"]:
                path = os.path.join(os.path.dirname(src_dir), PATCH_DIR, patch["name"])
                with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "wb") as out:
                    out.write(patch["content"].encode("utf-8"))
                sent.append(path)
            for patch in self.params["patches"] + sent:
                status = self.run_logged("patch -p1 --forward < %s" % _quote(patch), env, src_dir, log)
                if status == ABANDONED:
                    self._step_failed(status, "patching", log_path, fp)
                if status != 0:
                    raise BuildFailed("patch %s does not apply to %s; see %s" % (patch, self.params["name"], log_path),
                                      log=log_path, log_tail=self.tail(log_path))
            status = self.run_logged(self.params["build_command"], env, src_dir, log)
            if status != 0:
                self._step_failed(status, "build", log_path, fp)
            verify = self.params["verify_command"]
            if verify:
                status = self.run_logged(verify, env, src_dir, log)
                if status != 0:
                    self._step_failed(status, "verification (the build itself succeeded)", log_path, fp)
            problem = self.cxx_runtime_problem(src_dir)
            if problem:
                log.write("\n%s\n" % problem)
                raise BuildFailed(problem, log=log_path, log_tail=self.tail(log_path))

    def cxx_runtime_problem(self, src_dir):
        """cxx_runtime_check's message for this tree, or None."""
        if not self.params["cxx_runtime_check"]:
            return None
        copies = cxx_runtime_copies(src_dir)
        return cxx_runtime_message(self.params["name"], copies) if copies else None

    def install_artifact(self, fp, artifact):
        """A verified build of these inputs made on another node (build once, fan out): unpacked, its stamp's
        fingerprint checked against this node's, then verified here like a build of its own."""
        install_dir = os.path.join(self.builds, fp)
        scratch = install_dir + ".artifact"
        try:
            shutil.rmtree(scratch, ignore_errors=True)
            os.makedirs(scratch)
            try:
                with tarfile.open(artifact) as tar:
                    self._extract_all(tar, scratch)
            except ARCHIVE_ERRORS as exc:
                if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                    raise
                if isinstance(exc, UNSAFE_ERRORS):
                    self.fail("artifact_in: the build archive %s holds a member that would not stay in the build "
                              "directory (%s): nothing was installed from it; %s. Delete it and check the cache: a node "
                              "with the same inputs builds it anew" % (artifact, exc, self.kept()), unsafe=artifact,
                              fingerprint=fp)
                self.fail("artifact_in: the build archive %s is damaged (%s): nothing was installed from it; %s. "
                          "Delete it and run again: a node with the same inputs builds it anew"
                          % (artifact, damage_text(exc), self.kept()), damaged=artifact, fingerprint=fp)
            stamp = self.read_stamp(scratch)
            if stamp is None or stamp.get("fingerprint") != fp:
                self.fail("artifact_in: %s holds fingerprint %s, this node's inputs give %s; rebuild the cache entry "
                          "from a node with the same inputs" % (artifact, (stamp or {}).get("fingerprint"), fp))
            if os.path.lexists(install_dir):
                shutil.rmtree(install_dir)
            os.rename(scratch, install_dir)
        except (OSError, IOError) as exc:
            why = "no space left on the prefix's filesystem" if exc.errno == errno.ENOSPC else str(exc)
            self.fail("installing %s from %s failed: %s; %s; %s" % (self.params["name"], artifact, why, self.kept(),
                                                                    free_text(self.prefix)), fingerprint=fp)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        verify = self.params["verify_command"]
        if verify:
            env = self.build_env(install_dir)
            src_dir = os.path.join(install_dir, "src")
            log_path = os.path.join(install_dir, "install.log")
            account = self.build_account()
            with open(log_path, "w") as log:
                if account:  # the check may write into the tree, as the build's did; the tree is root's after
                    self.chown_tree(install_dir, account[0], account[1])
                try:
                    status = self.run_logged(verify, env, src_dir, log)
                finally:
                    if account:
                        self.chown_tree(install_dir, os.getuid(), os.getgid(), sanitize=True)
            if status != 0:
                msg = "%s from %s installed but its verification failed (exit %s); see %s" % (
                    self.params["name"], artifact, status, log_path)
                left = self.reduce_to_log(install_dir, msg)  # not a verified build here
                self.fail("%s; %s; %s" % (msg, self.kept(), left), log=log_path, log_tail=self.tail(log_path),
                          fingerprint=fp)
        # Another node's build is checked here too: the cache could hold one made before the check existed.
        problem = self.cxx_runtime_problem(os.path.join(install_dir, "src"))
        if problem:
            msg = "%s from %s installed but refused: %s" % (self.params["name"], artifact, problem)
            left = self.reduce_to_log(install_dir, msg)
            self.fail("%s; %s; %s" % (msg, self.kept(), left), fingerprint=fp)

    def write_artifact(self, fp, artifact):
        """The verified build as a tar.gz for other nodes with the same inputs; False when already there."""
        if os.path.isfile(artifact):
            try:
                with tarfile.open(artifact) as tar:
                    member = tar.extractfile("./" + STAMP)
                    if member is not None and json.load(member).get("fingerprint") == fp:
                        return False
            except (KeyError, tarfile.TarError, ValueError):
                pass
        os.makedirs(os.path.dirname(artifact) or ".", exist_ok=True)
        with tarfile.open(artifact + ".tmp", "w:gz") as tar:
            # What was checked on this node is this node's record, not part of the build another node installs.
            tar.add(os.path.join(self.builds, fp), arcname=".",
                    filter=lambda info: None if info.name.endswith(LOCAL_RECORD_SUFFIX) else info)
        os.rename(artifact + ".tmp", artifact)
        return True

    def prune_artifacts(self, directory, fp):
        """Remove this component's exported builds (<name>-<fingerprint>.tar.gz, and a .tmp an interrupted export
        left) whose build is no longer kept under builds/: an export is only there for the controller to fetch, and
        one of a pruned build can never be installed from this node again. Returns the paths removed."""
        pattern = re.compile(r"^%s-([0-9a-f]{16})\.tar\.gz(\.tmp)?$" % re.escape(self.params["name"]))
        kept = set(os.listdir(self.builds)) if os.path.isdir(self.builds) else set()
        kept.add(fp)
        removed = []
        for entry in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
            match = pattern.match(entry)
            path = os.path.join(directory, entry)
            if match and match.group(1) not in kept and os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
                removed.append(path)
        return removed

    def install_source(self, digest):
        """Put the archive the action plugin sent (src_in, in the task's temporary directory) at src, once its bytes
        are the controller's (src_digest): the directory is made 0755 and the file 0644, as a copy task would."""
        sent, src = self.params["src_in"], self.params["src"]
        if not os.path.isfile(sent):
            self.fail("src_in: %s is not on the node: nothing was built; run again" % sent)
        os.makedirs(os.path.dirname(src) or ".", mode=0o755, exist_ok=True)
        part = src + ".part"
        shutil.copyfile(sent, part)
        # The copy is what is checked and put in place, not the file it came from.
        if "sha256:" + file_digest(part) != digest:
            os.unlink(part)
            self.fail("src_in: %s is not the controller's archive (another sha256 than %s): nothing was built; run "
                      "again" % (sent, digest))
        os.chmod(part, 0o644)
        os.replace(part, src)

    def source_missing(self, digest):
        """Why the node's copy of the source cannot be built from (None when it can): only asked for a build."""
        src = self.params["src"]
        if not self.params["src_digest"]:
            return None
        if not os.path.isfile(src):
            return "%s is not on the node" % src
        if "sha256:" + file_digest(src) != digest:
            return "%s on the node is not the controller's archive (another sha256)" % src
        return None

    def read_files(self, build_dir):
        """read_files of the build, never through a link (a build could plant one to a root-only file): every
        component below the build directory is opened with O_NOFOLLOW."""
        files = {}
        for rel in self.params["read_files"]:
            text = read_no_follow(build_dir, rel)
            if text is not None:
                files[rel] = text
        return files

    def roll_back(self):
        """state=rolled_back: a build that went live failed a check that runs against the live path (DeepEP's
        tests): current goes back to rollback_to (or away, when nothing was installed before), and the failed build
        is reduced to its log, so a rerun builds it again rather than switching to it."""
        failed, previous = self.params["rollback_from"], self.params["rollback_to"] or None
        self.take_lock("rolling back", failed)
        now = self.current_fingerprint()
        result = dict(changed=False, action="none", fingerprint=now, previous_fingerprint=failed, current=self.current,
                      rolled_back_to=None, rolled_back_to_inputs=None,
                      install_dir=os.path.join(self.builds, now) if now else None)
        if now != failed:
            result["reason"] = "current is %s, not the failed build %s: nothing to roll back" % (now, failed)
            return result
        stamp = self.read_stamp(os.path.join(self.builds, previous)) if previous else None
        if previous and stamp is None:
            self.fail("rollback_to: the build %s is not under %s any more (pruned or unfinished); %s stays current: "
                      "fix what failed and run again" % (previous, self.builds, failed), **result)
        if not self.module.check_mode:
            if previous:
                self.switch_current(previous)
            else:
                os.unlink(self.current)
            why = self.params["failure"] or "its checks failed after it went live"
            left = self.reduce_to_log(os.path.join(self.builds, failed), why)
            export = self.params["artifact_out"]
            if export and os.path.basename(export) == "%s-%s.tar.gz" % (self.params["name"], failed):
                # Kept, it would stand for a rebuild of the same inputs (write_artifact: not rewritten).
                result["artifacts_removed"] = []
                for path in (export, export + ".tmp"):
                    if os.path.isfile(path):
                        os.unlink(path)
                        result["artifacts_removed"].append(path)
        else:
            left = "the failed build would be reduced to its log"
        result.update(changed=True, action="rollback", fingerprint=previous, rolled_back_to=previous,
                      rolled_back_to_inputs=(stamp.get("inputs") or {}).get("inputs") if stamp else None,
                      install_dir=os.path.join(self.builds, previous) if previous else None,
                      reason="%s: current %s; %s" % (
                          "rolled back from %s" % failed,
                          "points at the previous build %s again" % previous if previous
                          else "removed (nothing was installed before)", left))
        return result

    def run(self):
        params = self.params
        if params["state"] == "rolled_back":
            try:
                return self.roll_back()
            finally:
                self.lock.release()
        src = params["src"]
        if self.module.check_mode and src and not params["src_digest"] and not os.path.exists(src):
            # Check mode before the task that copies the source: nothing to hash yet.
            return dict(changed=True, action="build", fingerprint=None, reason="source %s is not on the node yet" % src,
                        install_dir=None, src_dir=None, current=self.current,
                        previous_fingerprint=self.current_fingerprint(), source_digest=None, log=None,
                        build_seconds=None, build_cpu_seconds=None, needs_source=True, files={}, lock_holder=self.lock.holder())
        if not self.module.check_mode:
            self.build_account()  # a missing build user fails before anything is written (the roles create it)
        digest = self.source_digest()
        patches = {os.path.basename(p): file_digest(p) for p in params["patches"] if os.path.isfile(p)}
        missing = [p for p in params["patches"] if not os.path.isfile(p)]
        if missing:
            self.fail("patches: %s not found" % ", ".join(missing))
        for patch in params["patch_texts"]:
            name = patch.get("name") or ""
            if "/" in name or name in ("", ".", "..") or name in patches or not isinstance(patch.get("content"), str):
                self.fail("patch_texts: each needs a file name (no /, not given twice) and its content; got %r"
                          % (name,))
            patches[name] = hashlib.sha256(patch["content"].encode("utf-8")).hexdigest()
        inputs = build_inputs(params, digest, patches)
        fp = fingerprint(inputs)
        if not self.module.check_mode:
            # From here to the switch: one run at a time on this prefix. What the plan reads below is read under
            # the lock, so a build another run finished meanwhile is found, not built again.
            self.take_lock("building", fp)
            self.beat()
        try:
            return self._run_locked(digest, inputs, fp)
        finally:
            self.lock.release()
            if self.heartbeat and os.path.lexists(self.heartbeat):
                os.unlink(self.heartbeat)

    def _run_locked(self, digest, inputs, fp):
        params = self.params
        install_dir = os.path.join(self.builds, fp)
        previous = self.current_fingerprint()
        previous_stamp = self.read_stamp(os.path.join(self.builds, previous)) if previous else None
        built = self.read_stamp(install_dir) is not None

        rebuild = params["force"] or (params["rebuild_current"] and previous == fp)
        if previous == fp and built and not rebuild:
            action, reason = None, "up to date (fingerprint %s)" % fp
        elif built and not rebuild:
            action, reason = "switch", "switch current to the existing build %s" % fp
        elif params["artifact_in"] and os.path.isfile(params["artifact_in"]) and not rebuild:
            action, reason = "artifact", "installed from %s (built once on another node)" % params["artifact_in"]
        else:
            action = "build"
            if params["force"]:
                reason = "forced"
            elif rebuild:
                reason = "current (%s) was found broken: built again (rebuild_current)" % fp
            elif previous_stamp is None:
                reason = "no previous build"
            else:
                reason = "inputs changed: " + "; ".join(changed_inputs(previous_stamp.get("inputs"), inputs))
            failed_note = os.path.join(install_dir, "FAILED")
            if os.path.isfile(failed_note):
                with open(failed_note, errors="replace") as handle:
                    reason += "; an earlier build of these inputs failed: %s" % handle.read().strip()[:300]

        result = dict(
            changed=action is not None, action=action or "none", fingerprint=fp, reason=reason, install_dir=install_dir,
            src_dir=os.path.join(install_dir, "src"), current=self.current, previous_fingerprint=previous,
            source_digest=digest, log=os.path.join(install_dir, "build.log"), build_seconds=None, build_cpu_seconds=None,
            artifact=params["artifact_out"], artifact_written=False, needs_source=False, source_installed=False, files={},
            build_user_exists=self.user_exists(params["build_user"]),
            lock_holder=self.lock.holder() if self.module.check_mode else None,
        )
        missing = self.source_missing(digest) if action == "build" else None
        if missing and params["src_in"] and not self.module.check_mode:
            self.install_source(digest)
            result["source_installed"] = True
            missing = None
        if missing:
            result["needs_source"] = True
            if not self.module.check_mode:
                self.fail("src: %s; copy it there first, or give controller_src with send_source (the action plugin "
                          "sends it)" % missing, **result)
        if self.module.check_mode:
            result["files"] = self.read_files(install_dir) if built else {}
            return result
        if action is not None:
            self.check_build_user_reaches(self.builds)
            os.makedirs(self.builds, exist_ok=True)
            if action == "build":
                result["build_seconds"], result["build_cpu_seconds"] = self.build(fp, digest, inputs)
            elif action == "artifact":
                self.install_artifact(fp, params["artifact_in"])
            self.switch_current(fp)
            self.prune({fp, previous})
        if params["artifact_out"]:
            result["artifact_written"] = self.write_artifact(fp, params["artifact_out"])
            if result["artifact_written"]:
                # What the node wrote: the action plugin checks the copy it fetches against it.
                result["artifact_digest"] = "sha256:" + file_digest(params["artifact_out"])
            result["changed"] = result["changed"] or result["artifact_written"]
            result["artifacts_removed"] = self.prune_artifacts(os.path.dirname(params["artifact_out"]), fp)
            result["changed"] = result["changed"] or bool(result["artifacts_removed"])
        result["files"] = self.read_files(install_dir)
        return result


def spawn_in_own_group(argv, cwd, env, log, demote_to=None):
    """Start argv with its output in log, in a process group of its own (the step and all it starts end together),
    as (uid, gid) when given; returns its pid. The module's own descriptors (the lock) are close-on-exec."""
    log.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.setpgid(0, 0)
            if demote_to:
                os.setgroups([])
                os.setgid(demote_to[1])
                os.setuid(demote_to[0])
            os.chdir(cwd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            os.execve(argv[0], argv, env)
        except BaseException as exc:  # pylint: disable=broad-except
            os.write(2, ("cannot start %s: %s\n" % (argv[0], exc)).encode())
        finally:
            os._exit(127)
    return pid


def children_cpu_seconds():
    """User + system CPU seconds of this process's children that were waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def exit_handle(pid):
    """A descriptor that becomes readable when the child pid exits (a pidfd: Linux 5.3, Python 3.9), or None where
    there is none; the child is still waited for with waitpid."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def exit_status(pid, wait):
    """The child's exit status like a shell's (128 + signal when killed), or None while it runs (wait=False)."""
    done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
    if done == 0:
        return None
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def damage_text(exc):
    """The library's words for a damaged archive, with what they mean."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, EOFError) or "end-of-stream" in text or "unexpected end" in text:
        return "truncated: %s" % text
    return text


def free_text(path):
    try:
        info = os.statvfs(path)
    except OSError:
        return "free space unknown"
    return "%.1f GiB" % (info.f_bavail * info.f_frsize / float(1 << 30))


def _quote(path):
    return "'%s'" % path.replace("'", "'\\''")


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def main():
    # A SIGTERM ends the module through its cleanup: the build's process group ended, the lock released.
    signal.signal(signal.SIGTERM, _terminated)
    # Whatever umask the login has (a hardened 027 or 077): the build user must reach its build directory, and
    # every user of the node read what is installed.
    os.umask(0o022)
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            src=dict(type="path"),
            git_url=dict(type="str"),
            git_ref=dict(type="str"),
            prefix=dict(type="path", required=True),
            build_command=dict(type="str"),
            verify_command=dict(type="str"),
            environment=dict(type="dict", default={}),
            inputs=dict(type="dict", default={}),
            patches=dict(type="list", elements="path", default=[]),
            controller_patches=dict(type="list", elements="path"),
            build=dict(type="dict"),
            patch_texts=dict(type="list", elements="dict", default=[]),
            keep=dict(type="int", default=2),
            force=dict(type="bool", default=False),
            rebuild_current=dict(type="bool", default=False),
            artifact_in=dict(type="path"),
            artifact_out=dict(type="path"),
            src_in=dict(type="path"),
            send_source=dict(type="bool", default=False),
            build_user=dict(type="str"),
            controller_src=dict(type="path"),
            controller_cache=dict(type="path"),
            known_builds=dict(type="dict"),
            controller_artifact=dict(type="path"),
            src_digest=dict(type="str"),
            read_files=dict(type="list", elements="str", default=[]),
            cxx_runtime_check=dict(type="bool", default=False),
            build_timeout=dict(type="int", default=0),
            progress_interval=dict(type="int", default=10),
            progress_log=dict(type="path"),
            lock_timeout=dict(type="int", default=300),
            abandon_after=dict(type="int", default=0),
            run_by=dict(type="str"),
            heartbeat=dict(type="path"),
            network_retries=dict(type="int", default=3),
            network_retry_delay=dict(type="int", default=5),
            state=dict(type="str", default="built", choices=["built", "rolled_back"]),
            rollback_from=dict(type="str"),
            rollback_to=dict(type="str"),
            failure=dict(type="str"),
        ),
        mutually_exclusive=[("src", "git_url")],
        required_together=[("git_url", "git_ref")],
        required_if=[("state", "built", ("build_command",)), ("state", "rolled_back", ("rollback_from",))],
        supports_check_mode=True,
    )
    if module.params["state"] == "built" and not (module.params["src"] or module.params["git_url"]):
        module.fail_json(msg="one of src or git_url is required: the source to build")
    for option in ("lock_timeout", "abandon_after", "network_retries", "network_retry_delay"):
        if module.params[option] < 0:
            module.fail_json(msg="%s: %s; accepted: 0 or more (seconds, or tries)" % (option, module.params[option]))
    if module.params["keep"] < 1:
        module.fail_json(msg="keep: %s; keep at least 1 build besides current" % module.params["keep"])
    digest = module.params["src_digest"]
    if digest is not None and not re.match(r"^sha256:[0-9a-f]{64}$", digest):
        module.fail_json(msg="src_digest: %r is not accepted; accepted: sha256:<64 lower-case hex digits> (the action "
                             "plugin sets it from controller_src)" % digest)
    if digest is not None and not module.params["src"]:
        module.fail_json(msg="src_digest is set without src: name the path the archive goes to on the node")
    for rel in module.params["read_files"]:
        if os.path.isabs(rel) or os.path.normpath(rel).split(os.sep)[0] == "..":
            module.fail_json(msg="read_files: %r is not accepted; accepted: a path inside the build directory, "
                                 "relative to it (e.g. include/gdrapi.h)" % rel)
    # Never an option to git (--upload-pack=...), never a transport that runs a command (ext::).
    for option, check, accepted in (("git_url", git_url_problem, GIT_URL_ACCEPTED),
                                    ("git_ref", git_ref_problem, GIT_REF_ACCEPTED)):
        value = module.params[option]
        why = check(value) if value is not None else None
        if why:
            module.fail_json(msg="%s: %r is not accepted (%s); accepted: %s" % (option, value, why, accepted))
    module.exit_json(**SourceBuild(module).run())


if __name__ == "__main__":
    main()
