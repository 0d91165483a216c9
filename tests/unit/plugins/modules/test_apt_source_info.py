# -*- coding: utf-8 -*-
"""apt_source_info on fixture apt trees laid out as a node has them: the cuda-keyring package's one-line entry,
a deb822 entry, this role's own file, a disabled stanza."""
from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.module_utils.system.apt_sources import normalize_uri, parse_deb822
from ansible_collections.moe_infra.deepep.plugins.modules import apt_source_info as module

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
# What cuda-keyring 1.1-1 writes (its conffile, verbatim).
KEYRING_LIST = ("deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
                "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /\n")


def apt_tree(tmp_path, files):
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    (root / "sources.list").write_text("deb http://archive.ubuntu.com/ubuntu noble main\n")
    for name, text in files.items():
        (root / "sources.list.d" / name).write_text(text)
    return root


def test_finds_the_cuda_keyring_entry(run_module, tmp_path):
    root = apt_tree(tmp_path, {"cuda-ubuntu2404-x86_64.list": KEYRING_LIST})
    result, failed = run_module(module, {"uri": CUDA.rstrip("/"), "apt_dir": str(root)})
    assert not failed and result["changed"] is False and result["found"] is True
    assert result["others"] == [{"path": str(root / "sources.list.d" / "cuda-ubuntu2404-x86_64.list"), "line": 1,
                                 "signed_by": "/usr/share/keyrings/cuda-archive-keyring.gpg", "suites": ["/"]}]


def test_the_roles_own_file_is_listed_but_not_found(run_module, tmp_path):
    own = "deb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] %s /\n" % CUDA
    root = apt_tree(tmp_path, {"cuda.list": own})
    result, failed = run_module(module, {"uri": CUDA, "apt_dir": str(root),
                                         "exclude": [str(root / "sources.list.d" / "cuda.list")]})
    assert result["found"] is False and result["others"] == []
    assert [s["path"] for s in result["sources"]] == [str(root / "sources.list.d" / "cuda.list")]


def test_both_files_present_is_the_conflict_apt_refuses(run_module, tmp_path):
    own = "deb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] %s /\n" % CUDA
    root = apt_tree(tmp_path, {"cuda.list": own, "cuda-ubuntu2404-x86_64.list": KEYRING_LIST})
    result, failed = run_module(module, {"uri": CUDA, "apt_dir": str(root),
                                         "exclude": [str(root / "sources.list.d" / "cuda.list")]})
    assert result["found"] is True
    assert sorted(s["signed_by"] for s in result["sources"]) == [
        "/etc/apt/keyrings/cuda-archive-keyring.asc", "/usr/share/keyrings/cuda-archive-keyring.gpg"]


def test_deb822_entries_and_disabled_stanzas(run_module, tmp_path):
    sources = ("# written by hand\nTypes: deb\nURIs: %s\nSuites: /\nSigned-By: /usr/share/keyrings/nv.gpg\n\n"
               "Types: deb\nURIs: https://example.com/other\nSuites: /\n\n"
               "Types: deb\nURIs: %s\nSuites: /\nEnabled: no\n") % (CUDA, CUDA)
    root = apt_tree(tmp_path, {"nvidia.sources": sources})
    result, failed = run_module(module, {"uri": CUDA, "apt_dir": str(root)})
    assert [(s["line"], s["signed_by"]) for s in result["sources"]] == [(2, "/usr/share/keyrings/nv.gpg")]


def test_comments_source_entries_and_other_repositories_are_not_matches(run_module, tmp_path):
    root = apt_tree(tmp_path, {"a.list": "# " + KEYRING_LIST + "deb-src %s /\n" % CUDA,
                               "b.list": KEYRING_LIST.replace("ubuntu2404", "ubuntu2204")})
    result, failed = run_module(module, {"uri": CUDA, "apt_dir": str(root)})
    assert result["found"] is False and result["sources"] == []


def test_an_empty_uri_is_refused(run_module, tmp_path):
    result, failed = run_module(module, {"uri": " ", "apt_dir": str(tmp_path)})
    assert failed and "uri: empty" in result["msg"]


def test_uri_spellings_of_one_repository():
    assert normalize_uri("file:///opt/repos/cuda/") == normalize_uri("file:/opt/repos/cuda") == "file:/opt/repos/cuda"
    assert normalize_uri("HTTPS://Developer.Download.NVIDIA.com/a/") == "https://developer.download.nvidia.com/a"
    assert normalize_uri("https://x.org/a") != normalize_uri("https://x.org/b")


def test_inline_key_is_reported_as_such():
    text = "Types: deb\nURIs: %s\nSuites: /\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n" % CUDA
    assert parse_deb822(text, "x.sources")[0]["signed_by"] == "<inline key>"
