# -*- coding: utf-8 -*-
from __future__ import annotations

import os
import subprocess
import tarfile

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import source_build as module
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
    options = args(src, tmp_path / "opt", git_url="git@github.com:deepseek-ai/DeepEP.git", git_ref="v1.2.1")
    del options["src"]
    result, failed = run_module(module, options)
    assert failed and "stop here" in result["msg"] and "fetch" in result["msg"], result
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


def test_build_once_install_from_the_artifact_elsewhere(run_module, src, tmp_path):
    builder, other = tmp_path / "builder", tmp_path / "other"
    artifact = tmp_path / "cache" / "demo.tar.gz"
    first = build(run_module, src, builder, artifact_out=str(artifact))
    assert first["build_seconds"] is not None and first["artifact_written"] is True and artifact.is_file()
    again = build(run_module, src, builder, artifact_out=str(artifact))
    assert again["changed"] is False and again["artifact_written"] is False  # already holds this fingerprint
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
