# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of moe_infra.deepep.source_build: what only the controller can answer.

build: the component's options in one dict (a role describes its build once; each task passes it whole).

controller_src: the archive's sha256 is computed here (once per file and run), so the node confirms an up-to-date
build without the archive being copied or hashed there; the module says `needs_source` when a build needs it.
controller_patches: patch files read here and sent as the module's patch_texts (small text files: no copy tasks,
and an up-to-date build needs nothing on the node).
send_source: with controller_src, the archive is put in the task's temporary directory on the node (src_in) and the
module installs it at src when a build needs it there: no directory and copy tasks.
controller_cache: whether the controller's build cache holds this fingerprint (the artifact and its digest
record), without a task of its own; with artifact_out, a build the node just exported is fetched into it and its
digest recorded, in the same task (no fetch, stat and record tasks); with state rolled_back, the failed build leaves
it.
controller_artifact: a build of the controller cache is put on the node (its remote temporary directory) and
installed from there, in the module's own task: no directory and copy tasks, no copy left on the node. It goes only
when its bytes match the digest the controller recorded when it fetched it from the one node that exported it
(<artifact>.sha256, sha256sum's format), and only from a cache directory no other user can write.
build_timeout: the module runs in the background (a long build outlives an SSH session) and is checked every
progress_interval seconds; each check prints the build's phase and elapsed time (not a bare async poll line) and
touches the build's heartbeat. A Ctrl-C ends this worker at once (Ansible's workers do not finish their task), so
the build looks after itself: with nobody checking on it for abandon_after seconds it stops and frees the lock.
run_by: who runs this (user@controller pid), for the lock record a second run names.
known_builds: the node's build prefixes as deepep_facts read them with the node (ansible_facts.deepep.builds). The
plan (check mode) of a build from a controller archive whose fingerprint, taken here as the module takes it, is the
one `current` points at (a verified build) is answered here, as the module answers it, without a module run on the
node. Anything else (another fingerprint, a git source, a prefix or a file that was not read) goes to the module."""

from __future__ import annotations

import base64
import getpass
import hashlib
import posixpath
import os
import socket
import tempfile
import time
import uuid

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_progress import elapsed_text
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_state import build_inputs, up_to_date_plan
from ansible_collections.moe_infra.deepep.plugins.module_utils.build.fingerprint import fingerprint

display = Display()

# A background build stops this long after the last check of its run, at the least.
ABANDON_MIN_SECONDS = 30
ABANDON_MISSED_CHECKS = 6

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")
# What the build option may hold: the component's own options, as a role describes a build once for every task.
BUILD_KEYS = ("name", "src", "git_url", "git_ref", "prefix", "build_command", "verify_command", "environment", "inputs",
              "patches", "controller_patches", "keep", "force", "rebuild_current", "build_user", "controller_src",
              "read_files", "cxx_runtime_check")
# (path, size, mtime_ns) -> digest: every host of a run shares one archive, hashed once.
_DIGESTS = {}


def _replaced(value, old, new):
    """value with old replaced by new in every string it holds (a failure's text appears in msg and in the error
    summary Ansible displays)."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return type(value)((k, _replaced(v, old, new)) for k, v in value.items())
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    return value


def cache_dir_problem(path):
    """Why the controller cache at path cannot be trusted (group or others can write it), else None."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return None
    if mode & 0o022:
        return ("the controller cache %s can be written by users other than its owner (mode %04o): what is in it "
                "installs on every node; chmod go-w %s (the roles create it 0700)" % (path, mode, path))
    return None


def recorded_digest(artifact):
    """The digest recorded beside a cache artifact (<artifact>.sha256), or None."""
    try:
        with open(artifact + ".sha256") as handle:
            words = handle.read().split()
    except OSError:
        return None
    return ("sha256:" + words[0].lower()) if words and len(words[0]) == 64 else None


def uncache(cache, name, fp):
    """A build that failed its checks leaves the controller cache (its archive and record): no node installs it and
    the next run builds it anew. Returns the archive's path when it was there."""
    archive = os.path.join(cache, "%s-%s.tar.gz" % (name, fp))
    held = os.path.isfile(archive)
    for path in (archive, archive + ".sha256"):
        if os.path.isfile(path):
            os.unlink(path)
    return archive if held else None


def archive_digest(path):
    info = os.stat(path)
    key = (path, info.st_size, info.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _DIGESTS[key] = "sha256:" + digest.hexdigest()
    return _DIGESTS[key]


def plan_from_reading(args, known):
    """The module's plan of an up-to-date build, from the node's reading (known: ansible_facts.deepep.builds), or
    None when the module must answer: only a build of a controller archive (src_digest) with no patch files on the
    node, in a prefix the reading holds, whose read_files and build user were read with it, and whose fingerprint
    is the one `current` points at, stamped. A fingerprint taken otherwise than the module takes it cannot match a
    stamped one: the module then answers, as without a reading."""
    if not isinstance(known, dict) or not isinstance(known.get("prefixes"), dict):
        return None
    if (args.get("state") or "built") != "built" or args.get("git_url") or args.get("patches") or args.get("artifact_in"):
        return None
    if any(str(args.get(key, False)).lower() not in ("false", "no", "0", "off", "n", "f")
           for key in ("force", "rebuild_current")):
        return None
    prefix, digest = args.get("prefix"), args.get("src_digest")
    if not prefix or not args.get("src") or not digest or not posixpath.isabs(prefix):
        return None
    # The prefix as given, not normalized: the plan's paths (and the layers' fingerprints that name them) are the
    # module's, and the reading names each prefix as the module would.
    reading = known["prefixes"].get(prefix)
    read_files = list(args.get("read_files") or [])
    build_user = args.get("build_user") or ""
    if not isinstance(reading, dict) or set(read_files) - set(known.get("read_files") or []):
        return None
    if build_user and build_user != known.get("build_user"):
        return None
    environment, inputs = args.get("environment") or {}, args.get("inputs") or {}
    if not isinstance(environment, dict) or not isinstance(inputs, dict):
        return None
    patches = {}
    for patch in args.get("patch_texts") or []:
        patches[patch["name"]] = hashlib.sha256(patch["content"].encode("utf-8")).hexdigest()
    params = dict(name=args.get("name"), prefix=prefix, build_command=args.get("build_command"),
                  verify_command=args.get("verify_command"), environment=environment, inputs=inputs,
                  artifact_out=args.get("artifact_out"))
    fp = fingerprint(build_inputs(params, digest, patches))
    if reading.get("current") != fp or not reading.get("stamped"):
        return None
    files = dict((rel, text) for rel, text in (reading.get("files") or {}).items() if rel in read_files)
    return up_to_date_plan(params, dict(files=files, lock_holder=reading.get("lock_holder"),
                                        build_user_exists=known.get("build_user_exists") if build_user else None),
                           fp, digest)


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        build = args.pop("build", None) or {}
        if not isinstance(build, dict) or set(build) - set(BUILD_KEYS):
            return dict(result, failed=True, msg="build: a dict of %s; not accepted: %s" % (
                ", ".join(BUILD_KEYS), ", ".join(sorted(set(build) - set(BUILD_KEYS))) if isinstance(build, dict)
                else type(build).__name__))
        if build.get("controller_src"):
            # A controller archive is the source: it goes to <prefix>/sources/ on the node unless the description
            # names where, and a git source the description also names is not used.
            build = dict((key, value) for key, value in build.items() if key not in ("git_url", "git_ref"))
            if not build.get("src") and build.get("prefix"):
                build["src"] = "%s/sources/%s" % (build["prefix"], os.path.basename(build["controller_src"]))
        for key, value in build.items():
            # An option given on the task wins; an empty string or none is left out, as `| default('') or omit`.
            if key not in args and value not in ("", None):
                args[key] = value
        controller_src = args.pop("controller_src", None)
        controller_cache = args.pop("controller_cache", None)
        send_source = boolean(args.pop("send_source", False), strict=False)
        args.pop("src_in", None)  # this plugin's to set
        known_builds = args.pop("known_builds", None)
        texts = []
        for patch in args.pop("controller_patches", None) or []:
            try:
                with open(self._find_needle("files", patch), "rb") as handle:
                    texts.append(dict(name=os.path.basename(patch), content=handle.read().decode("utf-8")))
            except (AnsibleError, OSError, UnicodeDecodeError) as exc:
                return dict(result, failed=True, msg="controller_patches: cannot read %s on the controller (%s)"
                                                     % (patch, exc))
        if texts:
            args["patch_texts"] = texts
        if controller_src:
            if not args.get("src"):
                return dict(result, failed=True, msg="controller_src is set without src: name the path on the node "
                                                     "the archive goes to (e.g. <prefix>/sources/<archive>)")
            try:
                local = self._find_needle("files", controller_src)
            except AnsibleError as exc:
                return dict(result, failed=True, msg="controller_src: %s is not on the controller (%s)"
                                                     % (controller_src, exc))
            if not local.endswith(ARCHIVE_SUFFIXES):
                return dict(result, failed=True, msg="controller_src: %s is not accepted; accepted: a tar archive "
                                                     "(%s)" % (controller_src, ", ".join(ARCHIVE_SUFFIXES)))
            args["src_digest"] = archive_digest(local)
            if send_source and not self._play_context.check_mode:
                # In the task's temporary directory (a background build's is removed when the job ends): the module
                # installs it at src only when the build needs it there.
                args["src_in"] = self._put_artifact(local)

        try:
            build_timeout = int(args.pop("build_timeout", 0) or 0)
            interval = max(int(args.pop("progress_interval", 10) or 10), 1)
        except (TypeError, ValueError) as exc:
            return dict(result, failed=True, msg="build_timeout and progress_interval are whole numbers of seconds "
                                                 "(%s)" % exc)
        progress_log = args.pop("progress_log", None)
        controller_artifact = args.pop("controller_artifact", None)
        args.setdefault("run_by", "%s@%s pid %d" % (getpass.getuser(), socket.gethostname(), os.getppid()))
        if controller_artifact:
            local = self._loader.path_dwim(controller_artifact)
            if not os.path.isfile(local):
                return dict(result, failed=True, msg="controller_artifact: %s is not on the controller (the cache "
                                                     "entry of another node's build)" % controller_artifact)
            problem = cache_dir_problem(os.path.dirname(local))
            if problem:
                return dict(result, failed=True, msg=problem)
            recorded = recorded_digest(local)
            if recorded is None:
                return dict(result, failed=True, forged=local, msg=(
                    "the controller cache's %s has no digest record (%s.sha256): it was not fetched by this "
                    "collection from the node that built it; delete it and run again to build it, or carry its "
                    "record in with it (sha256sum NAME > NAME.sha256)" % (local, local)))
            if archive_digest(local) != recorded:
                return dict(result, failed=True, forged=local, msg=(
                    "the controller cache's %s does not match the digest recorded when it was fetched (%s, now %s): "
                    "nothing was installed; delete it and its .sha256 and run again to build it"
                    % (local, recorded, archive_digest(local))))
            if not self._play_context.check_mode:
                args["artifact_in"] = self._put_artifact(local)
            build_timeout = 0  # an install answers at once
        sent = args.get("artifact_in") if controller_artifact and not self._play_context.check_mode else None
        known = (plan_from_reading(args, known_builds)
                 if self._play_context.check_mode and not controller_artifact else None)
        if known is not None:
            module = known
        elif build_timeout > 0 and not self._task.async_val and not self._play_context.check_mode:
            module = self._build_in_background(args, task_vars, build_timeout, interval, progress_log)
        else:
            wrap_async = self._task.async_val and not self._connection.has_native_async
            module = self._execute_module(module_name="moe_infra.deepep.source_build", module_args=args,
                                          task_vars=task_vars, wrap_async=wrap_async)
        if sent:
            # Its copy on the node was temporary: name the cache entry on the controller, which is what to delete.
            entry = "the controller cache's %s" % os.path.basename(sent)
            if module.get("failed") and sent in str(module.get("msg", "")):
                module.pop("exception", None)  # its summary holds the old text; Ansible makes it anew from msg
            module = _replaced(module, sent, entry)
            if isinstance(module.get("msg"), str) and entry in module["msg"]:
                module["msg"] = module["msg"].replace(entry, "%s (%s on the controller)" % (entry, local), 1)
            if module.get("damaged") == entry:
                module["damaged"] = local
        if controller_cache and args.get("state") == "rolled_back":
            module["uncached"] = None
            if module.get("action") == "rollback" and not self._play_context.check_mode:
                module["uncached"] = uncache(self._loader.path_dwim(controller_cache), args.get("name"),
                                             args.get("rollback_from"))
        elif controller_cache and module.get("fingerprint") and not module.get("failed"):
            name = "%s-%s.tar.gz" % (args.get("name"), module["fingerprint"])
            # As fetch and copy read it: a relative directory is the playbook's. An artifact without its digest
            # record is not counted (a node builds and exports it again, and the record is made).
            cache = self._loader.path_dwim(controller_cache)
            module["fetched"] = None
            if module.get("artifact_written") and not self._play_context.check_mode:
                fetched, problem = self._fetch_export(module, cache, task_vars)
                if problem:
                    return merge_hash(result, dict(module, failed=True, msg=problem))
                module["fetched"] = fetched
            problem = cache_dir_problem(cache)
            if problem:
                return merge_hash(result, dict(module, failed=True, msg=problem))
            module["cached"] = os.path.isfile(os.path.join(cache, name)) and os.path.isfile(
                os.path.join(cache, name + ".sha256"))
        result = merge_hash(result, module)
        # The options as given, once: the fan-out's later tasks take them from the plan instead of rendering the
        # component's options again.
        result["build_options"] = build
        # The module's echo of its arguments (the options again, the patches' text) would make every later task that
        # reads this result (the layer's fact, its report) template them again on each host.
        result.pop("invocation", None)
        if not self._task.async_val and known is None:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _fetch_export(self, module, cache, task_vars):
        """Bring the build the node just exported (module's artifact) into the controller cache with its digest record
        (sha256sum's format): the cache is created 0700, only the controller's user can write what every node
        installs. The copy goes in under its name only whole and with the bytes the node wrote (artifact_digest).
        Read through become as the fetch action reads it (slurp), else copied over the connection. Returns (path
        in the cache, None) or (None, why not)."""
        remote = module["artifact"]
        name = posixpath.basename(remote)
        final = os.path.join(cache, name)
        try:
            os.makedirs(cache, mode=0o700, exist_ok=True)
        except OSError as exc:
            return None, "controller_cache: cannot create %s on the controller (%s)" % (cache, exc)
        problem = cache_dir_problem(cache)
        if problem:
            return None, problem
        handle, part = tempfile.mkstemp(dir=cache, prefix=".%s." % name, suffix=".part")
        os.close(handle)
        record = final + ".sha256.part"
        try:
            if self._connection.become:
                slurped = self._execute_module(module_name="ansible.legacy.slurp", module_args=dict(src=remote),
                                               task_vars=task_vars)
                if slurped.get("failed") or "content" not in slurped:
                    return None, "fetching the build %s from the node failed: %s; nothing was put in the " \
                                 "controller cache; run again" % (remote, slurped.get("msg", "no content"))
                with open(part, "wb") as out:
                    out.write(base64.b64decode(slurped["content"]))
            else:
                self._connection.fetch_file(remote, part)
            digest = archive_digest(part)
            expected = module.get("artifact_digest")
            if expected and digest != expected:
                return None, ("the copy of the build %s fetched from the node has another sha256 (%s) than the node "
                              "wrote (%s): nothing was put in the controller cache; run again" % (remote, digest,
                                                                                                  expected))
            os.replace(part, final)
            with open(record, "w") as out:
                out.write("%s  %s\n" % (digest.split(":", 1)[1], name))
            os.chmod(record, 0o600)
            os.replace(record, final + ".sha256")
        except (AnsibleError, OSError) as exc:
            return None, "fetching the build %s into the controller cache %s failed (%s); run again" % (
                remote, cache, exc)
        finally:
            # Nothing half-written stays in the cache (an artifact without its record is not counted as cached).
            for leftover in (part, record):
                if os.path.exists(leftover):
                    os.unlink(leftover)
        return final, None

    def _put_artifact(self, local):
        """Put the archive into this task's remote temporary directory (removed with it), readable by the user the
        module runs as; returns its path on the node."""
        tmpdir = self._connection._shell.tmpdir or self._make_tmp_path()
        remote = self._connection._shell.join_path(tmpdir, os.path.basename(local))
        self._transfer_file(local, remote)
        self._fixup_perms2((tmpdir, remote), execute=False)
        return remote

    def _build_in_background(self, args, task_vars, timeout, interval, log):
        """Start the module as a background job, check it every interval seconds (printing the phase), and return
        its result once it ended."""
        self._task.async_val = timeout  # the job's time limit (this worker's copy of the task)
        args = dict(args)
        args.setdefault("abandon_after", max(ABANDON_MIN_SECONDS, ABANDON_MISSED_CHECKS * interval))
        # One file per run: a run waiting for the lock must not keep another run's abandoned build alive.
        heartbeat = self._connection._shell.join_path(args["prefix"], ".alive-%s" % uuid.uuid4().hex[:12])
        args.setdefault("heartbeat", heartbeat)
        try:
            started = self._execute_module(module_name="moe_infra.deepep.source_build", module_args=args,
                                           task_vars=task_vars, wrap_async=True)
        finally:
            self._task.async_val = 0
        if started.get("failed") or not started.get("results_file"):
            return started
        label = "%s on %s" % (args.get("name"), task_vars.get("inventory_hostname", "?"))
        begun = time.time()
        wait = 1  # a switch or an install answers within a second or two
        while True:
            # The status module waits on the node until the job ends or `wait` passes: the end is seen at once, not
            # at the next check.
            status = self._execute_module(module_name="moe_infra.deepep.source_build_status",
                                          module_args=dict(results_file=started["results_file"], log=log,
                                                           heartbeat=heartbeat, wait=wait),
                                          task_vars=task_vars)
            wait = interval
            self._remove_tmp_path(self._connection._shell.tmpdir)
            if status.get("failed"):
                return status
            if status.get("finished"):
                final = dict(status.get("result") or {})
                final.pop("invocation", None)
                for warning in final.pop("warnings", None) or []:
                    text = warning.get("msg", warning) if isinstance(warning, dict) else warning
                    display.warning("%s: %s" % (label, text))
                final.pop("deprecations", None)
                return final
            elapsed = time.time() - begun
            if elapsed > timeout:
                return dict(failed=True, msg="%s: still building after %s (build_timeout %s s); the job goes on in "
                                             "the background (%s): raise the layer's timeout and run again"
                                             % (label, elapsed_text(elapsed), timeout, started["results_file"]))
            display.display("  %s: %s, %s" % (label, elapsed_text(elapsed), status.get("phase", "")))
