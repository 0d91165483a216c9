# -*- coding: utf-8 -*-
from __future__ import annotations

import os
import pwd
import re
import select
import shutil
import subprocess
import tarfile
import time

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import source_build as module
from ansible_collections.moe_infra.deepep.tests.fixtures import cxx_objects
from ansible_collections.moe_infra.deepep.tests.fixtures.build_user import BUILD_USER, open_to_others

BUILD = "cat input.txt > built.txt && echo \"$ARCH\" >> built.txt"
VERIFY = "grep -q hello built.txt"


@pytest.fixture
def src(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "input.txt").write_text("hello\n")
    return source


def args(src, prefix, **extra):
    base = dict(name="demo", src=str(src), prefix=str(prefix), build_command=BUILD, verify_command=VERIFY,
                environment={"ARCH": "9.0"}, inputs={"torch": "2.11.0"})
    base.update(extra)
    return base


def build(run_module, src, prefix, check_mode=False, expect_fail=False, **extra):
    result, failed = run_module(module, args(src, prefix, **extra), check_mode=check_mode)
    assert failed == expect_fail, result
    return result


def current_target(prefix):
    return os.readlink(str(prefix / "current"))


def test_first_build_then_nothing_to_do(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    first = build(run_module, src, prefix)
    assert first["changed"] is True and first["action"] == "build" and first["reason"] == "no previous build"
    assert current_target(prefix) == "builds/" + first["fingerprint"]
    assert (prefix / "current" / "src" / "built.txt").read_text() == "hello\n9.0\n"
    assert (prefix / "current" / ".moe_infra_stamp.json").exists()
    assert "$ grep -q hello built.txt" in open(first["log"]).read()
    assert first["build_seconds"] is not None
    second = build(run_module, src, prefix)
    assert second["changed"] is False and second["action"] == "none" and second["reason"].startswith("up to date")
    assert second["fingerprint"] == first["fingerprint"]
    assert second["build_seconds"] is None and second["build_cpu_seconds"] is None


def test_build_reports_the_cpu_time_of_its_processes(run_module, src, tmp_path):
    """A build that waits reports its wall time but little CPU; one whose grandchild computes reports that CPU too
    (each process is waited for by its parent, so its time adds up to the step's)."""
    waits = build(run_module, src, tmp_path / "waits", build_command=BUILD + " && sleep 1")
    assert waits["build_seconds"] >= 1.0 and waits["build_cpu_seconds"] < 0.5
    burn = "python3 -c 'import time; all(iter(lambda: time.process_time() < 1.2, False))'"
    computes = build(run_module, src, tmp_path / "computes", build_command=BUILD + ' && bash -c "%s"' % burn)
    assert computes["build_cpu_seconds"] >= 1.1
    stamp = (tmp_path / "computes" / "current" / ".moe_infra_stamp.json").read_text()
    assert '"build_cpu_seconds": %s' % computes["build_cpu_seconds"] in stamp


@pytest.mark.parametrize("change, expected_reason", [
    ({"environment": {"ARCH": "10.0"}}, "environment.ARCH: 9.0 -> 10.0"),
    ({"inputs": {"torch": "2.12.0"}}, "inputs.torch: 2.11.0 -> 2.12.0"),
    ({"inputs": {"torch": "2.11.0", "nvshmem": "3.4.5"}}, "inputs.nvshmem: null -> 3.4.5"),
    ({"build_command": BUILD + " && true"}, "build_command:"),
    ({"verify_command": "true"}, "verify_command: grep -q hello built.txt -> true"),
])
def test_every_input_changes_the_fingerprint(run_module, src, tmp_path, change, expected_reason):
    prefix = tmp_path / "opt"
    first = build(run_module, src, prefix)
    predicted = build(run_module, src, prefix, check_mode=True, **change)
    assert predicted["changed"] is True and predicted["fingerprint"] != first["fingerprint"]
    assert expected_reason in predicted["reason"]
    assert current_target(prefix) == "builds/" + first["fingerprint"]
    assert not os.path.exists(predicted["install_dir"])


def test_source_and_patch_changes_change_the_fingerprint(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    first = build(run_module, src, prefix)
    (src / "input.txt").write_text("hello world\n")
    second = build(run_module, src, prefix)
    assert second["fingerprint"] != first["fingerprint"] and "source: tree:" in second["reason"]
    patch = tmp_path / "fix.patch"
    patch.write_text("--- a/input.txt\n+++ b/input.txt\n@@ -1 +1 @@\n-hello world\n+hello patched\n")
    third = build(run_module, src, prefix, patches=[str(patch)])
    assert "patches.fix.patch: null ->" in third["reason"]
    assert (prefix / "current" / "src" / "built.txt").read_text().startswith("hello patched")
    assert (src / "input.txt").read_text() == "hello world\n"


def test_patches_sent_as_text_fingerprint_like_the_files_and_apply(run_module, src, tmp_path):
    """The controller's patches arrive as patch_texts (the action plugin reads them): the fingerprint is the one the
    same file on the node gives, so nothing rebuilds; a build writes and applies them beside its source."""
    text = "--- a/input.txt\n+++ b/input.txt\n@@ -1 +1 @@\n-hello\n+hello patched\n"
    patch = tmp_path / "fix.patch"
    patch.write_text(text)
    from_file = build(run_module, src, tmp_path / "files", patches=[str(patch)], check_mode=True)
    sent = build(run_module, src, tmp_path / "sent", patch_texts=[{"name": "fix.patch", "content": text}])
    assert sent["fingerprint"] == from_file["fingerprint"]
    assert (tmp_path / "sent" / "current" / "src" / "built.txt").read_text().startswith("hello patched")
    assert (tmp_path / "sent" / "current" / ".moe_infra_patches" / "fix.patch").read_text() == text
    again = build(run_module, src, tmp_path / "sent", patch_texts=[{"name": "fix.patch", "content": text}])
    assert again["changed"] is False
    changed = build(run_module, src, tmp_path / "sent", check_mode=True,
                    patch_texts=[{"name": "fix.patch", "content": text.replace("patched", "changed")}])
    assert changed["fingerprint"] != sent["fingerprint"] and "patches.fix.patch" in changed["reason"]


@pytest.mark.parametrize("name", ["../x.patch", "", "a/b.patch"])
def test_a_sent_patch_needs_a_plain_file_name(run_module, src, tmp_path, name):
    result = build(run_module, src, tmp_path / "opt", expect_fail=True,
                   patch_texts=[{"name": name, "content": "x"}])
    assert "patch_texts: each needs a file name" in result["msg"]
    assert not (tmp_path / "opt" / "builds").exists() or not os.listdir(str(tmp_path / "opt" / "builds"))


def test_check_mode_on_a_fresh_node_creates_nothing(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    result = build(run_module, src, prefix, check_mode=True)
    assert result["changed"] is True and result["reason"] == "no previous build"
    assert not prefix.exists()


@pytest.mark.parametrize("failing", [{"build_command": "exit 3"}, {"verify_command": "false"}])
def test_failed_build_or_verify_keeps_the_previous_current(run_module, src, tmp_path, failing):
    prefix = tmp_path / "opt"
    good = build(run_module, src, prefix)
    bad = build(run_module, src, prefix, expect_fail=True, **failing)
    assert "current still points at the previous build %s" % good["fingerprint"] in bad["msg"]
    assert current_target(prefix) == "builds/" + good["fingerprint"]
    assert (prefix / "current" / "src" / "built.txt").exists()
    assert "# exit" in bad["log_tail"]


def test_interrupted_build_is_redone(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    predicted = build(run_module, src, prefix, check_mode=True)
    # A build killed half-way: directory there, no stamp.
    os.makedirs(os.path.join(predicted["install_dir"], "src"))
    result = build(run_module, src, prefix)
    assert result["changed"] is True and result["build_seconds"] is not None
    assert (prefix / "current" / "src" / "built.txt").exists()


def test_switching_back_reuses_the_existing_build(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    first = build(run_module, src, prefix)
    build(run_module, src, prefix, inputs={"torch": "2.12.0"})
    back = build(run_module, src, prefix)
    assert back["changed"] is True and back["action"] == "switch" and back["reason"].startswith("switch current to the existing build")
    assert back["build_seconds"] is None
    assert current_target(prefix) == "builds/" + first["fingerprint"]


def test_old_builds_are_pruned(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    for version in ("1", "2", "3", "4"):
        last = build(run_module, src, prefix, inputs={"torch": version}, keep=1)
    builds = sorted(os.listdir(str(prefix / "builds")))
    assert len(builds) == 2 and last["fingerprint"] in builds and last["previous_fingerprint"] in builds


def test_archive_with_top_level_directory(run_module, src, tmp_path):
    archive = tmp_path / "DeepEP.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(src), arcname="DeepEP")
    result = build(run_module, archive, tmp_path / "opt")
    assert result["source_digest"].startswith("sha256:")
    assert (tmp_path / "opt" / "current" / "src" / "built.txt").exists()


def test_git_source(run_module, src, tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q", str(src)], check=True)
    subprocess.run(git + ["-C", str(src), "add", "."], check=True)
    subprocess.run(git + ["-C", str(src), "commit", "-qm", "one"], check=True)
    subprocess.run(git + ["-C", str(src), "update-ref", "refs/pull/466/head", "HEAD"], check=True)
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    options = args(src, tmp_path / "opt", git_url="file://%s" % src, git_ref="refs/pull/466/head")
    del options["src"]
    result, failed = run_module(module, options)
    assert not failed, result
    assert result["source_digest"] == "git:" + commit
    assert (tmp_path / "opt" / "current" / "src" / "built.txt").exists()
    options["git_ref"] = "refs/pull/999/head"
    result, failed = run_module(module, options)
    assert failed and "git_ref 'refs/pull/999/head' not found" in result["msg"]


@pytest.mark.parametrize("url, ref, message", [
    ("--upload-pack=touch {pwned};", "v1.2.1", "git_url: '--upload-pack=touch {pwned};' is not accepted (it would be "
                                               "read as an option)"),
    ("ext::sh -c touch% {pwned}", "v1.2.1", "is not accepted (it contains whitespace"),
    ("ext::sh%-c%touch%{pwned}", "v1.2.1", "git's <transport>::<address> form runs a helper command"),
    ("http://example.invalid/DeepEP.git", "v1.2.1", "scheme http:// is not one of https, ssh, file"),
    ("https://github.com/deepseek-ai/DeepEP.git", "--output={pwned}", "git_ref: '--output={pwned}' is not accepted"),
])
def test_git_url_and_ref_never_reach_git_as_options(run_module, src, tmp_path, url, ref, message):
    pwned = tmp_path / "pwned"
    options = args(src, tmp_path / "opt", git_url=url.format(pwned=pwned), git_ref=ref.format(pwned=pwned))
    del options["src"]
    result, failed = run_module(module, options)
    assert failed and message.format(pwned=pwned) in result["msg"], result
    assert "accepted: an https://, ssh://, file:// URL" in result["msg"] or "accepted: a commit, tag" in result["msg"]
    assert not pwned.exists() and not (tmp_path / "opt").exists()


def test_git_gets_the_url_after_the_end_of_options(run_module, src, tmp_path, monkeypatch):
    """The argv of ls-remote and fetch: '--' before the URL, whatever it is."""
    calls = []

    def fake_run_command(self, args, **kwargs):
        calls.append(list(args))
        if "ls-remote" in args:
            return 0, "%s\trefs/tags/v1.2.1\n" % ("a" * 40), ""
        if "cat-file" in args:
            return 1, "", ""
        if "init" in args:
            return 0, "", ""
        return 1, "", "stop here"
    monkeypatch.setattr(module.AnsibleModule, "run_command", fake_run_command)
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, required=False: "/usr/bin/" + name)
    # The failing fetch is tried again (network_retries), without the waits between tries.
    options = args(src, tmp_path / "opt", git_url="git@github.com:deepseek-ai/DeepEP.git", git_ref="v1.2.1",
                   network_retry_delay=0)
    del options["src"]
    result, failed = run_module(module, options)
    assert failed and "stop here" in result["msg"] and "fetch" in result["msg"], result
    assert sum("fetch" in call for call in calls) == 4, calls
    ls_remote = next(c for c in calls if "ls-remote" in c)
    fetch = next(c for c in calls if "fetch" in c)
    assert ls_remote[1:] == ["ls-remote", "--", "git@github.com:deepseek-ai/DeepEP.git", "v1.2.1"]
    assert fetch[-3:] == ["--", "git@github.com:deepseek-ai/DeepEP.git", "v1.2.1"]


@pytest.mark.parametrize("extra, message", [
    ({"source": "/nonexistent/file.zip"}, "neither a directory nor a tar archive"),
    ({"keep": 0}, "keep at least 1"),
    ({"patches": ["/nonexistent.patch"]}, "patches: /nonexistent.patch not found"),
    ({"src_digest": "md5:abc"}, "src_digest: 'md5:abc' is not accepted; accepted: sha256:<64"),
    ({"read_files": ["../../etc/shadow"]}, "read_files: '../../etc/shadow' is not accepted"),
    ({"read_files": ["/etc/shadow"]}, "read_files: '/etc/shadow' is not accepted"),
])
def test_bad_input(run_module, src, tmp_path, extra, message):
    source = extra.pop("source", src)
    result = build(run_module, source, tmp_path / "opt", expect_fail=True, **extra)
    assert message in result["msg"]
    assert not (tmp_path / "opt").exists()


def test_check_mode_before_the_source_is_copied(run_module, tmp_path):
    result = build(run_module, tmp_path / "sources" / "DeepEP.tar.gz", tmp_path / "opt", check_mode=True)
    assert result["changed"] is True and result["action"] == "build" and "is not on the node yet" in result["reason"]
    assert result["fingerprint"] is None and not (tmp_path / "opt").exists()


def _archive(src, path):
    with tarfile.open(str(path), "w:gz") as tar:
        tar.add(str(src), arcname="demo")
    return path


def _digest(path):
    import hashlib
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# controller_src (the action plugin): the archive's digest comes from the controller, the node's copy is
# needed only by a build.
def test_src_digest_confirms_a_build_without_the_archive_on_the_node(run_module, src, tmp_path):
    archive = _archive(src, tmp_path / "demo.tar.gz")
    node_copy = tmp_path / "sources" / "demo.tar.gz"
    prefix = tmp_path / "opt"
    # Nothing on the node yet: the prediction names the fingerprint and that the source is needed.
    plan = build(run_module, node_copy, prefix, check_mode=True, src_digest=_digest(archive))
    assert plan["action"] == "build" and plan["needs_source"] is True and plan["fingerprint"]
    assert not prefix.exists()
    # A build without the copy fails before anything is built, saying what to do.
    refused = build(run_module, node_copy, prefix, expect_fail=True, src_digest=_digest(archive))
    assert "is not on the node" in refused["msg"] and "copy it there first" in refused["msg"]
    assert not (prefix / "current").exists()
    # Another archive at that path is refused too.
    node_copy.parent.mkdir()
    node_copy.write_bytes(b"not the archive")
    assert "not the controller's archive" in build(run_module, node_copy, prefix, expect_fail=True,
                                                   src_digest=_digest(archive))["msg"]
    node_copy.write_bytes(archive.read_bytes())
    built = build(run_module, node_copy, prefix, src_digest=_digest(archive), read_files=["src/built.txt"])
    assert built["action"] == "build" and built["fingerprint"] == plan["fingerprint"]
    assert built["files"] == {"src/built.txt": "hello\n9.0\n"}
    # The same fingerprint as a build that hashed the node's copy itself: existing builds stay current.
    assert build(run_module, node_copy, prefix)["action"] == "none"
    # Up to date: the node's copy is not needed (nor read).
    node_copy.unlink()
    again = build(run_module, node_copy, prefix, check_mode=True, src_digest=_digest(archive),
                  read_files=["src/built.txt", "src/missing.txt"])
    assert again["action"] == "none" and again["needs_source"] is False and again["changed"] is False
    assert again["files"] == {"src/built.txt": "hello\n9.0\n"}


def test_a_sent_source_is_installed_only_where_a_build_needs_it(run_module, src, tmp_path):
    """src_in (send_source: the action plugin put the controller's archive in the task's temporary directory): a build
    that needs the source installs it at src first; a wrong copy is refused before anything is written."""
    archive = _archive(src, tmp_path / "demo.tar.gz")
    sent = tmp_path / "remote-tmp" / "demo.tar.gz"
    sent.parent.mkdir()
    sent.write_bytes(b"damaged in transit")
    node_copy = tmp_path / "sources" / "demo.tar.gz"
    prefix = tmp_path / "opt"
    refused = build(run_module, node_copy, prefix, expect_fail=True, src_digest=_digest(archive), src_in=str(sent))
    assert "src_in: %s is not the controller's archive" % sent in refused["msg"] and "nothing was built" in refused["msg"]
    assert not node_copy.exists() and not os.path.exists(str(node_copy) + ".part")
    assert not (prefix / "current").exists()
    sent.write_bytes(archive.read_bytes())
    built = build(run_module, node_copy, prefix, src_digest=_digest(archive), src_in=str(sent))
    assert built["action"] == "build" and built["source_installed"] is True and built["needs_source"] is False
    assert node_copy.read_bytes() == archive.read_bytes() and oct(node_copy.stat().st_mode & 0o777) == "0o644"
    assert not os.path.exists(str(node_copy) + ".part")
    assert (prefix / "current" / "src" / "built.txt").read_text() == "hello\n9.0\n"
    # Up to date: what was sent is not installed again.
    node_copy.unlink()
    again = build(run_module, node_copy, prefix, src_digest=_digest(archive), src_in=str(sent))
    assert again["action"] == "none" and again["source_installed"] is False and not node_copy.exists()


def test_build_once_install_from_the_artifact_elsewhere(run_module, src, tmp_path):
    builder, other = tmp_path / "builder", tmp_path / "other"
    artifact = tmp_path / "cache" / "demo.tar.gz"
    first = build(run_module, src, builder, artifact_out=str(artifact))
    assert first["build_seconds"] is not None and first["artifact_written"] is True and artifact.is_file()
    assert first["artifact_digest"] == _digest(artifact)  # what the controller checks its fetched copy against
    again = build(run_module, src, builder, artifact_out=str(artifact))
    assert again["changed"] is False and again["artifact_written"] is False  # already holds this fingerprint
    assert "artifact_digest" not in again
    # Another node with the same inputs: unpacked, verified there, nothing built.
    installed = build(run_module, src, other, artifact_in=str(artifact))
    assert installed["changed"] is True and installed["build_seconds"] is None
    assert installed["fingerprint"] == first["fingerprint"]
    assert installed["action"] == "artifact" and installed["reason"] == "installed from %s (built once on another node)" % artifact
    assert (other / "current" / "src" / "built.txt").read_text() == "hello\n9.0\n"
    assert "$ grep -q hello built.txt" in (other / "current" / "install.log").read_text()
    assert "$ cat input.txt" not in (other / "current" / "install.log").read_text()  # verified, not rebuilt
    assert build(run_module, src, other, artifact_in=str(artifact))["changed"] is False


def test_node_records_stay_out_of_the_artifact(run_module, src, tmp_path):
    # What a role checked on the builder (imports.node-record) must not vouch for another node.
    builder = tmp_path / "builder"
    first = build(run_module, src, builder)
    (builder / "current" / "imports.node-record").write_text("checked here\n")
    artifact = tmp_path / "cache" / "demo.tar.gz"
    exported = build(run_module, src, builder, artifact_out=str(artifact), read_files=["imports.node-record"])
    assert exported["artifact_written"] is True and exported["fingerprint"] == first["fingerprint"]
    assert exported["files"] == {"imports.node-record": "checked here\n"}
    with tarfile.open(str(artifact)) as tar:
        names = tar.getnames()
    assert "./src/built.txt" in names and not [name for name in names if name.endswith(".node-record")]


def test_artifact_of_other_inputs_is_refused(run_module, src, tmp_path):
    artifact = tmp_path / "demo.tar.gz"
    build(run_module, src, tmp_path / "builder", artifact_out=str(artifact))
    result = build(run_module, src, tmp_path / "other", expect_fail=True, artifact_in=str(artifact),
                   environment={"ARCH": "10.0"})
    assert result["msg"].startswith("artifact_in: %s holds fingerprint" % artifact)
    assert not (tmp_path / "other" / "current").exists()


def test_artifact_that_fails_verification_here_is_not_current(run_module, src, tmp_path, monkeypatch):
    artifact = tmp_path / "demo.tar.gz"
    check = 'test -z "$BROKEN_NODE"'  # the node's own state (not an input) decides
    build(run_module, src, tmp_path / "builder", artifact_out=str(artifact), verify_command=check)
    monkeypatch.setenv("BROKEN_NODE", "1")
    result = build(run_module, src, tmp_path / "other", expect_fail=True, artifact_in=str(artifact),
                   verify_command=check)
    assert "installed but its verification failed" in result["msg"]
    assert not (tmp_path / "other" / "current").exists()
    assert not list((tmp_path / "other" / "builds").glob("*/.moe_infra_stamp.json"))


def test_build_user_builds_its_tree_and_nothing_else(run_module, src, tmp_path):
    """The build runs as the unprivileged user; its tree is root's again once verified, and a build that tries to
    write outside its build directory fails."""
    open_to_others(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    build_command = BUILD + ' && id -un > "$INSTALL_DIR/who" && echo "$HOME" > "$INSTALL_DIR/home"'
    result = build(run_module, src, tmp_path / "opt", build_command=build_command, build_user=BUILD_USER)
    tree = tmp_path / "opt" / "current"
    assert (tree / "who").read_text().strip() == BUILD_USER
    assert (tree / "home").read_text().strip() == result["install_dir"] + ".home"
    assert not os.path.exists(result["install_dir"] + ".home")  # the scratch HOME is gone
    owners = {os.lstat(os.path.join(root, name)).st_uid for root, dirs, files in os.walk(str(tree) + "/")
              for name in dirs + files}
    assert owners == {os.getuid()}, owners

    hostile = build_command + ' && touch "%s/planted"' % outside
    result = build(run_module, src, tmp_path / "opt", build_command=hostile, build_user=BUILD_USER,
                   expect_fail=True)
    assert "build of demo failed" in result["msg"] and "Permission denied" in result["log_tail"]
    assert not (outside / "planted").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="builds as another user: needs root")
def test_a_prefix_the_build_user_cannot_reach_fails_before_the_build(run_module, src, tmp_path):
    open_to_others(tmp_path)
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)  # as /root is
    prefix = home / "deepep" / "nvshmem"
    result = build(run_module, src, prefix, build_user=BUILD_USER, expect_fail=True)
    assert result["msg"].startswith("build_user: %s cannot reach %s/builds: %s (mode 0700, owner root:root) does "
                                    "not let it search" % (BUILD_USER, prefix, home)), result["msg"]
    assert "chmod o+x %s" % home in result["msg"] and "set build_user to ''" in result["msg"]
    assert result["unreachable"] == str(home)
    assert not (prefix / "builds").exists() and not (prefix / "current").exists()
    home.chmod(0o711)  # the fix the message names
    assert build(run_module, src, prefix, build_user=BUILD_USER)["action"] == "build"


@pytest.mark.skipif(os.geteuid() != 0, reason="builds as another user: needs root")
def test_a_permission_on_unpacking_is_not_called_a_damaged_archive(run_module, src, tmp_path, monkeypatch):
    """Should the check before the build miss a directory (say, a security module's rule), unpacking says a
    permission stopped it, not that the archive is damaged."""
    monkeypatch.setattr(module, "first_unsearchable", lambda path, uid, gid: None)
    open_to_others(tmp_path)
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    archive = _archive(src, tmp_path / "demo.tar.gz")
    result = build(run_module, archive, home / "deepep", build_user=BUILD_USER, expect_fail=True)
    assert "could not be unpacked into" in result["msg"] and "as %s" % BUILD_USER in result["msg"], result["msg"]
    assert "a permission on this node, not the archive" in result["msg"] and "damaged" not in result["msg"]
    assert "([Errno 13] Permission denied: '%s" % home in result["msg"] and "] [Errno" not in result["msg"]


@pytest.mark.skipif(os.geteuid() != 0, reason="builds as another user: needs root")
def test_a_hardened_umask_neither_stops_the_build_user_nor_hides_the_install(run_module, src, tmp_path):
    """A login with umask 027 made the module's directories 0750: the build user could not reach its own build
    directory, and nobody but root could have read the install."""
    open_to_others(tmp_path)
    archive = _archive(src, tmp_path / "demo.tar.gz")
    before = os.umask(0o027)
    try:
        result = build(run_module, archive, tmp_path / "opt", build_user=BUILD_USER)
    finally:
        os.umask(before)
    modes = {os.path.relpath(os.path.join(root, name), result["install_dir"]):
             os.lstat(os.path.join(root, name)).st_mode & 0o777
             for root, dirs, files in os.walk(result["install_dir"]) for name in dirs + files}
    assert modes["src"] == 0o755 and modes["src/built.txt"] == 0o644, modes
    for path in (tmp_path / "opt", tmp_path / "opt" / "builds", result["install_dir"]):
        assert os.stat(str(path)).st_mode & 0o777 == 0o755, path


def test_build_user_that_does_not_exist(run_module, src, tmp_path):
    result = build(run_module, src, tmp_path / "opt", build_user="no-such-user-here", expect_fail=True)
    assert "build_user: no user 'no-such-user-here' on this node" in result["msg"]
    assert not (tmp_path / "opt").exists()
    # Check mode predicts the build, and says the user is missing: the layer roles create it before they build.
    result = build(run_module, src, tmp_path / "opt", build_user="no-such-user-here", check_mode=True)
    assert result["action"] == "build" and not (tmp_path / "opt").exists()
    assert result["build_user_exists"] is False
    # A user that is there is reported so (the roles then leave the account alone); none asked for: null.
    assert build(run_module, src, tmp_path / "opt", build_user=BUILD_USER, check_mode=True)["build_user_exists"] is True
    assert build(run_module, src, tmp_path / "opt", check_mode=True)["build_user_exists"] is None


def test_build_user_checks_an_installed_artifact_and_leaves_it_to_root(run_module, src, tmp_path):
    open_to_others(tmp_path)
    artifact = tmp_path / "cache" / "demo.tar.gz"
    verify = VERIFY + ' && id -un > "$INSTALL_DIR/checked-by"'
    build(run_module, src, tmp_path / "builder", verify_command=verify, build_user=BUILD_USER,
          artifact_out=str(artifact))
    result = build(run_module, src, tmp_path / "other", verify_command=verify, build_user=BUILD_USER,
                   artifact_in=str(artifact))
    assert result["action"] == "artifact"
    tree = tmp_path / "other" / "current"
    assert (tree / "checked-by").read_text().strip() == BUILD_USER
    assert {os.lstat(os.path.join(root, name)).st_uid for root, dirs, files in os.walk(str(tree) + "/")
            for name in dirs + files} == {os.getuid()}


# An operator's bad day: each case fails on a module without the lock, the archive checks, the reduction to the
# log, the heartbeat or the rollback, and leaves the previous build current.

def _two_builds(run_module, src, prefix):
    first = build(run_module, src, prefix)
    (src / "input.txt").write_text("hello again\n")
    return first


def test_a_second_run_refuses_while_another_holds_the_lock_naming_it(run_module, src, tmp_path):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import PrefixLock
    prefix = tmp_path / "opt"
    first = _two_builds(run_module, src, prefix)
    other = PrefixLock(str(prefix))
    assert other.acquire(0, dict(name="demo", action="building", fingerprint="f00dfeed00000000",
                                 run_by="ops@controller pid 4242")) is None
    try:
        refused = build(run_module, src, prefix, expect_fail=True, lock_timeout=1)
        assert "another run holds demo's lock on this node: pid %d on " % os.getpid() in refused["msg"]
        assert "building demo f00dfeed00000000 (run by ops@controller pid 4242)" in refused["msg"]
        assert "Nothing was changed" in refused["msg"] and refused["lock_holder"]["run_by"].startswith("ops@")
        # Nothing was touched: the previous build is current, no build directory of the new inputs.
        assert current_target(prefix) == "builds/" + first["fingerprint"]
        assert sorted(os.listdir(str(prefix / "builds"))) == [first["fingerprint"]]
        # Check mode takes no lock and names the holder.
        predicted = build(run_module, src, prefix, check_mode=True)
        assert predicted["lock_holder"]["pid"] == os.getpid()
    finally:
        other.release()
    second = build(run_module, src, prefix)
    assert second["action"] == "build" and current_target(prefix) == "builds/" + second["fingerprint"]
    assert not (prefix / ".lock.json").exists()


def test_an_unfinished_build_of_another_run_is_not_removed_while_it_holds_the_lock(run_module, src, tmp_path):
    from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_lock import PrefixLock
    prefix = tmp_path / "opt"
    plan = build(run_module, src, prefix, check_mode=True)
    in_progress = prefix / "builds" / plan["fingerprint"]
    (in_progress / "src").mkdir(parents=True)  # no stamp yet: the other run is building
    other = PrefixLock(str(prefix))
    other.acquire(0, dict(name="demo", action="building", fingerprint=plan["fingerprint"]))
    try:
        build(run_module, src, prefix, expect_fail=True, lock_timeout=0)
        assert (in_progress / "src").is_dir()
    finally:
        other.release()
    # Once the lock is free the same leftover is debris, and the build starts over.
    assert build(run_module, src, prefix)["action"] == "build"


@pytest.mark.parametrize("damage, words", [
    (lambda data: data[:len(data) // 2], "is damaged (truncated: "),
    (lambda data: b"<html>502 Bad Gateway</html>\n" * 40, "is damaged ("),
])
def test_a_damaged_source_archive_is_named_and_leaves_nothing(run_module, src, tmp_path, damage, words):
    prefix = tmp_path / "opt"
    first = build(run_module, src, prefix)
    good = tmp_path / "demo.tar.gz"
    with tarfile.open(str(good), "w:gz") as tar:
        tar.add(str(src), arcname="demo")
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(200000))  # incompressible: a cut lands inside the data
        tar.add(str(big), arcname="demo/big.bin")
    bad = tmp_path / "demo-damaged.tar.gz"
    bad.write_bytes(damage(good.read_bytes()))
    failed = build(run_module, bad, prefix, expect_fail=True)
    assert "the source archive %s %s" % (bad, words) in failed["msg"], failed["msg"]
    assert "nothing was built from it" in failed["msg"] and "Replace it with a good copy" in failed["msg"]
    assert "current still points at the previous build %s" % first["fingerprint"] in failed["msg"]
    assert current_target(prefix) == "builds/" + first["fingerprint"]
    left = prefix / "builds" / failed["fingerprint"]
    assert sorted(os.listdir(str(left))) == ["FAILED", "build.log"] or sorted(os.listdir(str(left))) == ["FAILED"]
    assert not [n for n in os.listdir(str(prefix / "builds")) if n.endswith((".unpack", ".home"))]
    assert build(run_module, good, prefix)["action"] == "build"


def test_a_failed_build_is_reduced_to_its_log_and_says_what_is_left(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    first = _two_builds(run_module, src, prefix)
    failing = BUILD + " && head -c 300000 /dev/zero > big.o && echo 'error: boom' && false"
    failed = build(run_module, src, prefix, expect_fail=True, build_command=failing)
    left = prefix / "builds" / failed["fingerprint"]
    assert "build of demo failed (exit 1); see %s/build.log" % left in failed["msg"]
    assert "current still points at the previous build %s" % first["fingerprint"] in failed["msg"]
    assert re.search(r"the failed build was reduced to its log %s/build.log \(\d+ KiB\); [0-9.]+ GiB free" % left,
                     failed["msg"]), failed["msg"]
    assert sorted(os.listdir(str(left))) == ["FAILED", "build.log"]
    assert "error: boom" in (left / "build.log").read_text() and "exit 1" in (left / "FAILED").read_text()
    # The next run says an earlier build of the same inputs failed, and builds it again.
    again = build(run_module, src, prefix, check_mode=True, build_command=failing)
    assert "an earlier build of these inputs failed: build of demo failed (exit 1)" in again["reason"]


def test_a_damaged_build_archive_is_named_and_leaves_no_scratch(run_module, src, tmp_path):
    prefix_a, prefix_b = tmp_path / "a", tmp_path / "b"
    artifact = tmp_path / "cache" / "demo.tar.gz"
    made = build(run_module, src, prefix_a, artifact_out=str(artifact))
    artifact.write_bytes(artifact.read_bytes()[:200])
    failed = build(run_module, src, prefix_b, expect_fail=True, artifact_in=str(artifact))
    assert "artifact_in: the build archive %s is damaged (truncated: " % artifact in failed["msg"], failed["msg"]
    assert "nothing was installed from it" in failed["msg"] and "Delete it and run again" in failed["msg"]
    assert failed["damaged"] == str(artifact) and failed["fingerprint"] == made["fingerprint"]
    assert not (prefix_b / "current").exists()
    assert os.listdir(str(prefix_b / "builds")) == []  # no .artifact scratch, no half-unpacked build


def test_a_build_nobody_checks_on_stops_and_frees_the_lock(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    first = _two_builds(run_module, src, prefix)
    heartbeat = tmp_path / "alive"
    started = time.time()
    # The run that started it is gone: nothing touches the heartbeat after the module's own first touch.
    # Both sleeps outlive the 2 s (the background one too); their arguments name them on this machine alone.
    failed = build(run_module, src, prefix, expect_fail=True, abandon_after=2, heartbeat=str(heartbeat),
                   build_command="sleep 59.{0} & sleep 60.{0}".format(os.getpid()))
    assert time.time() - started < 30
    assert "build of demo stopped: nobody checked on it for 2 s" in failed["msg"], failed["msg"]
    assert "interrupted or lost its connection" in failed["msg"]
    assert current_target(prefix) == "builds/" + first["fingerprint"]
    assert "# stopped: nobody checked on this build" in (prefix / "builds" / failed["fingerprint"] / "build.log").read_text()
    assert not heartbeat.exists() and not (prefix / ".lock.json").exists()
    # Every process of the build's group was ended (the background sleep too), and gone when the module returned.
    out = subprocess.run(["pgrep", "-f", r"sleep (59|60)\.%d" % os.getpid()], capture_output=True, text=True,
                         check=False).stdout
    assert out.strip() == ""


def test_a_leftover_background_process_of_a_step_is_ended(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    marker = "sleep 7%d" % (os.getpid() % 10)
    build(run_module, src, prefix, build_command=BUILD + " && (%s &)" % marker)
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False).stdout
    assert out.strip() == ""


def test_rollback_puts_the_previous_build_back_and_reduces_the_failed_one(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    first = build(run_module, src, prefix, inputs={"deepep_version": "v1"})
    second = build(run_module, src, prefix, inputs={"deepep_version": "v2"})
    assert current_target(prefix) == "builds/" + second["fingerprint"]
    # Its export for the other nodes, as the build run wrote it.
    export = tmp_path / "artifacts" / ("demo-%s.tar.gz" % second["fingerprint"])
    assert build(run_module, src, prefix, inputs={"deepep_version": "v2"}, artifact_out=str(export))["artifact_written"]
    undo = dict(name="demo", prefix=str(prefix), state="rolled_back", rollback_from=second["fingerprint"],
                rollback_to=first["fingerprint"], failure="DeepEP intranode test failed: dispatch_fp8 246 < 255 GB/s",
                artifact_out=str(export))
    predicted, failed = run_module(module, undo, check_mode=True)
    assert not failed and predicted["changed"] and current_target(prefix) == "builds/" + second["fingerprint"]
    done, failed = run_module(module, undo)
    assert not failed and done["changed"] and done["rolled_back_to"] == first["fingerprint"], done
    # What the build now live was made with: the caller undoes what it did for the failed one only.
    assert done["rolled_back_to_inputs"] == {"deepep_version": "v1"}, done
    # A rebuild of the same inputs is exported anew, not stood for by the failed build's export.
    assert done["artifacts_removed"] == [str(export)] and not export.exists()
    assert current_target(prefix) == "builds/" + first["fingerprint"]
    assert "rolled back from %s: current points at the previous build %s again" % (
        second["fingerprint"], first["fingerprint"]) in done["reason"]
    assert sorted(os.listdir(str(prefix / "builds" / second["fingerprint"]))) == ["FAILED", "build.log"]
    again, failed = run_module(module, undo)
    assert not failed and not again["changed"] and "nothing to roll back" in again["reason"]
    # The next run builds the failed inputs again (no stamp), rather than switching to them.
    assert build(run_module, src, prefix, check_mode=True)["action"] == "build"


def test_rebuild_current_rebuilds_only_the_build_current_points_at(run_module, src, tmp_path):
    # V1 asked for after V2: the probe's import of the live (V2) build failed on an undefined symbol. The kept V1
    # build is switched to, not built again (2 x H200, docs/results/v2-rollback-h200x2: 104.7 s spent rebuilding).
    prefix = tmp_path / "opt"
    v1 = build(run_module, src, prefix, inputs={"deepep_version": "v1"})
    v2 = build(run_module, src, prefix, inputs={"deepep_version": "v2"})
    back = build(run_module, src, prefix, inputs={"deepep_version": "v1"}, rebuild_current=True)
    assert back["action"] == "switch" and back["fingerprint"] == v1["fingerprint"], back
    # The live build itself found broken (torch moved under it, same inputs): built again.
    again = build(run_module, src, prefix, inputs={"deepep_version": "v1"}, rebuild_current=True)
    assert again["action"] == "build" and "built again (rebuild_current)" in again["reason"], again
    assert current_target(prefix) == "builds/" + v1["fingerprint"] != "builds/" + v2["fingerprint"]


def test_rollback_of_a_first_install_removes_current(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    only = build(run_module, src, prefix)
    done, failed = run_module(module, dict(name="demo", prefix=str(prefix), state="rolled_back",
                                           rollback_from=only["fingerprint"], rollback_to=""))
    assert not failed and done["rolled_back_to"] is None and "removed (nothing was installed before)" in done["reason"]
    assert done["rolled_back_to_inputs"] is None
    assert not os.path.lexists(str(prefix / "current"))


def test_git_network_steps_are_retried(run_module, tmp_path, fake_bin):
    calls = tmp_path / "calls"
    # A stand-in git whose ls-remote fails twice (a transient 5xx), then answers.
    fake_bin("git", rc=0)
    script = tmp_path / "bin" / "git"
    script.write_text("#!/bin/sh\necho x >> %s\n[ $(wc -l < %s) -ge 3 ] || { echo 'fatal: 502' >&2; exit 128; }\n"
                      "echo '%s\trefs/heads/main'\n" % (calls, calls, "a" * 40))
    base = dict(name="demo", prefix=str(tmp_path / "opt"), build_command=BUILD, git_url="https://example.invalid/x",
                git_ref="main", network_retry_delay=0)
    result, failed = run_module(module, base, check_mode=True)
    assert not failed and result["source_digest"] == "git:" + "a" * 40 and calls.read_text().count("x") == 3
    calls.write_text("")
    failed, did_fail = run_module(module, dict(base, network_retries=1), check_mode=True)
    assert did_fail and calls.read_text().count("x") == 2
    assert "git ls-remote -- https://example.invalid/x main failed (2 tries): fatal: 502" in failed["msg"]


# A hostile source tree, built as the unprivileged build user: what it leaves must not reach root or other users.

HOSTILE = ("cat input.txt > built.txt && mkdir -p open && chmod 0777 open && touch open/mod.py && chmod 0666 open/mod.py"
           " && cp /bin/true suid && chmod 4755 suid && mkfifo pipe && ln -s %s leak.txt"
           " && (setsid sleep 97 >/dev/null 2>&1 < /dev/null &)"
           # and one that drops the step's environment (the marker the module finds its processes by)
           " && (setsid env -i sleep 98 >/dev/null 2>&1 < /dev/null &)")


def test_a_hostile_build_leaves_no_writable_file_no_setuid_no_process_and_no_leak(run_module, src, tmp_path):
    secret = tmp_path / "root-only.txt"
    secret.write_text("root's secret\n")
    os.chmod(str(secret), 0o600)
    open_to_others(src)
    prefix = tmp_path / "opt"
    open_to_others(tmp_path)
    result = build(run_module, src, prefix, build_user=BUILD_USER, build_command=HOSTILE % secret,
                   read_files=["src/leak.txt", "src/built.txt"])
    tree = prefix / "current" / "src"
    for path in [tree] + list(tree.rglob("*")):
        info = os.lstat(str(path))
        if not os.path.islink(str(path)):
            assert info.st_uid == 0, path
            assert not info.st_mode & 0o7022, (path, oct(info.st_mode))  # no go-w, no setuid/setgid/sticky
    assert not (tree / "pipe").exists()
    assert result["files"] == {"src/built.txt": "hello\n"}  # the planted link is not followed
    out = subprocess.run(["pgrep", "-f", "sleep 9[78]"], capture_output=True, text=True, check=False).stdout
    assert out.strip() == ""  # the setsid-escaped processes of the build user were ended, marker or none


def test_the_hand_back_never_follows_a_directory_swapped_for_a_link(tmp_path):
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "passwd").write_text("root-owned\n")
    tree = tmp_path / "build"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "swapped").symlink_to(outside)  # what a leftover process could put there mid-walk
    nobody = pwd.getpwnam(BUILD_USER)
    module.SourceBuild.chown_tree(str(tree), nobody.pw_uid, nobody.pw_gid)
    assert os.stat(str(tree / "src")).st_uid == nobody.pw_uid
    assert os.lstat(str(tree / "src" / "swapped")).st_uid == nobody.pw_uid
    assert os.stat(str(outside)).st_uid == 0 and os.stat(str(outside / "passwd")).st_uid == 0
    # The walk opens each directory itself with O_NOFOLLOW: a tree that is a link by the time it is reached (the
    # swap) is refused, where a path walk (os.walk + lchown) went through it and gave /etc's files away.
    (tree / "src").rename(tree / "src.old")
    (tree / "src").symlink_to(outside)
    with pytest.raises(OSError):
        module.SourceBuild.chown_tree(str(tree / "src"), nobody.pw_uid, nobody.pw_gid)
    assert os.stat(str(outside / "passwd")).st_uid == 0


# A build whose extension carries its own libstdc++ (a compiler with only libstdc++.a linked it) never goes live.

needs_gxx = pytest.mark.skipif(not shutil.which("g++"), reason="needs g++ (CI installs it)")


@needs_gxx
def test_an_extension_with_its_own_cxx_runtime_is_refused(run_module, src, tmp_path):
    prefix = tmp_path / "opt"
    good = build(run_module, src, prefix, build_command=cxx_objects.build_command("ext.so", static_runtime=False),
                 verify_command="", cxx_runtime_check=True)
    assert good["changed"] is True and (prefix / "current" / "src" / "ext.so").is_file()
    bad = build(run_module, src, prefix, expect_fail=True, cxx_runtime_check=True, verify_command="",
                build_command=cxx_objects.build_command("ext.so", static_runtime=True))
    assert bad["msg"].startswith("demo was linked with its own copy of libstdc++ (ext.so defines std::ctype<char>::id, "
                                 "std::locale::classic(), std::locale::id::_M_id())")
    assert "CXX in the build's environment" in bad["msg"] and "current still points at the previous build %s" % good["fingerprint"] in bad["msg"]
    assert current_target(prefix) == "builds/" + good["fingerprint"]
    failed_dir = prefix / "builds" / bad["fingerprint"]
    assert sorted(os.listdir(str(failed_dir))) == ["FAILED", "build.log"]
    assert "own copy of libstdc++" in (failed_dir / "build.log").read_text()


@needs_gxx
def test_a_cached_artifact_with_its_own_cxx_runtime_is_refused(run_module, src, tmp_path):
    # Made before the check existed (or by a node that skipped it): refused where it is installed.
    artifact = tmp_path / "cache" / "demo.tar.gz"
    command = cxx_objects.build_command("ext.so", static_runtime=True)
    build(run_module, src, tmp_path / "builder", build_command=command, verify_command="", artifact_out=str(artifact))
    refused = build(run_module, src, tmp_path / "other", expect_fail=True, build_command=command, verify_command="",
                    artifact_in=str(artifact), cxx_runtime_check=True)
    assert "installed but refused: demo was linked with its own copy of libstdc++" in refused["msg"]
    assert not (tmp_path / "other" / "current").exists()


@pytest.mark.parametrize("filtered", [True, False])
def test_a_source_archive_with_a_link_out_of_the_tree_is_refused(run_module, src, tmp_path, monkeypatch, filtered):
    # filtered False: a Python without tarfile.data_filter (Debian 12's 3.11.2), where the archive is unpacked as the
    # build user and the collection checks each member itself (as root it would refuse to extract at all).
    extra = {}
    if not filtered:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        open_to_others(tmp_path)
        extra = dict(build_user=BUILD_USER)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no tarfile.data_filter")
    hostile = tmp_path / "demo.tar.gz"
    with tarfile.open(str(hostile), "w:gz") as tar:
        tar.add(str(src), arcname="demo")
        link = tarfile.TarInfo("demo/etc")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../../../../etc"
        tar.addfile(link)
    failed = build(run_module, hostile, tmp_path / "opt", expect_fail=True, **extra)
    assert failed["msg"].startswith("the source archive %s holds a member that would not stay in the build "
                                    "directory (" % hostile), failed["msg"]
    assert "nothing was extracted from it" in failed["msg"] and failed["unsafe"] == str(hostile)
    assert not (tmp_path / "opt" / "current").exists()


def test_without_the_data_filter_root_extracts_nothing_and_says_which_python(run_module, src, tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the refusal is root's")
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    archive = tmp_path / "demo.tar.gz"
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(src), arcname="demo")
    failed = build(run_module, archive, tmp_path / "opt", expect_fail=True)
    assert "has no tarfile data filter: as root it extracts no archive" in failed["msg"], failed["msg"]
    assert "keep a build user" in failed["msg"] and not (tmp_path / "opt" / "current").exists()
    # As the build user the same archive is unpacked (with the collection's own checks) and built.
    open_to_others(tmp_path)
    built = build(run_module, archive, tmp_path / "opt", build_user=BUILD_USER)
    assert built["changed"] and (tmp_path / "opt" / "current" / "src" / "built.txt").read_text() == "hello\n9.0\n"


def test_exports_of_builds_no_longer_kept_are_removed(run_module, src, tmp_path):
    # The building node exports each build for the controller cache: one export per build, never removed, filled its
    # disk. Exports follow the builds that are kept (keep=1: current and the previous one).
    prefix, cache = tmp_path / "opt", tmp_path / "artifacts"
    cache.mkdir()
    foreign = [cache / "other-0123456789abcdef.tar.gz", cache / "demo-notafingerprint.tar.gz", cache / "demo.tar.gz"]
    for path in foreign:
        path.write_text("not this component's export\n")
    fingerprints = []
    for version in ("2.9.0", "2.10.0", "2.11.0", "2.12.0"):
        plan = build(run_module, src, prefix, check_mode=True, inputs={"torch": version}, keep=1)
        made = build(run_module, src, prefix, inputs={"torch": version}, keep=1,
                     artifact_out=str(cache / ("demo-%s.tar.gz" % plan["fingerprint"])))
        assert made["artifact_written"] is True
        fingerprints.append(made["fingerprint"])
    # An export an interrupted run left half-written, of a build long gone.
    stale = cache / ("demo-%s.tar.gz.tmp" % fingerprints[0])
    stale.write_text("half\n")
    again = build(run_module, src, prefix, inputs={"torch": "2.12.0"}, keep=1,
                  artifact_out=str(cache / ("demo-%s.tar.gz" % fingerprints[-1])))
    kept = sorted(os.listdir(str(prefix / "builds")))
    assert kept == sorted(fingerprints[-2:])
    exports = sorted(path.name for path in cache.iterdir() if path.name.startswith("demo-") and path not in foreign)
    assert exports == sorted("demo-%s.tar.gz" % fp for fp in fingerprints[-2:])
    assert again["artifacts_removed"] == [str(stale)] and again["artifact_written"] is False
    assert again["changed"] is True  # a file removed is a change; nothing left to remove, none
    assert build(run_module, src, prefix, inputs={"torch": "2.12.0"}, keep=1,
                 artifact_out=str(cache / ("demo-%s.tar.gz" % fingerprints[-1])))["changed"] is False
    assert all(path.read_text() == "not this component's export\n" for path in foreign)
    # In check mode nothing is removed.
    (cache / ("demo-%s.tar.gz" % fingerprints[0])).write_text("old export\n")
    predicted = build(run_module, src, prefix, check_mode=True, inputs={"torch": "2.12.0"}, keep=1,
                      artifact_out=str(cache / ("demo-%s.tar.gz" % fingerprints[-1])))
    assert "artifacts_removed" not in predicted and (cache / ("demo-%s.tar.gz" % fingerprints[0])).is_file()


def test_a_step_that_exits_wakes_the_module_through_its_exit_handle():
    child = subprocess.Popen(["sleep", "0.2"])
    handle = module.exit_handle(child.pid)
    if handle is None:
        pytest.skip("no pidfd on this kernel or Python: the module looks every second instead")
    try:
        assert select.select([handle], [], [], 30)[0] == [handle]  # readable once it exited, not after 30 s
        assert module.exit_status(child.pid, wait=False) == 0
    finally:
        os.close(handle)


def test_without_an_exit_handle_a_build_still_ends_by_looking(run_module, src, tmp_path, monkeypatch):
    monkeypatch.setattr(module, "exit_handle", lambda pid: None)
    result = build(run_module, src, tmp_path / "opt", build_command=BUILD + " && sleep 0.1")
    assert result["action"] == "build" and (tmp_path / "opt" / "current" / "src" / "built.txt").is_file()
