# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Checks on values that reach a command line: a git URL or ref must never be read as an option, and only the
transports a source repository is really reached by are accepted (git's own ``ext::`` and ``fd::`` transports
run commands). Each check returns None when the value is accepted, else why not."""

from __future__ import annotations

import re

GIT_SCHEMES = ("https", "ssh", "file")
GIT_URL_ACCEPTED = "an https://, ssh://, file:// URL, user@host:path, or an absolute path; never starting with '-'"
GIT_REF_ACCEPTED = "a commit, tag, branch or full ref (letters, digits, . _ / - ^ { }), never starting with '-'"
# scp-like ssh: git@github.com:org/repo.git (no '//' after the colon, no scheme).
SCP_LIKE_RE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/][^\s]*$|^[A-Za-z0-9.-]+:[^/][^\s]*$")
SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://\S+$")
REF_RE = re.compile(r"^[A-Za-z0-9._/^{}-]+$")


def git_url_problem(url):
    url = str(url)
    if not url:
        return "empty"
    if url.startswith("-"):
        return "it would be read as an option"
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return "it contains whitespace or a control character"
    if "::" in url.split("/", 1)[0]:
        return "git's <transport>::<address> form runs a helper command"
    scheme = SCHEME_RE.match(url)
    if scheme:
        if scheme.group(1).lower() not in GIT_SCHEMES:
            return "scheme %s:// is not one of %s" % (scheme.group(1), ", ".join(GIT_SCHEMES))
        return None
    if url.startswith("/") or SCP_LIKE_RE.match(url):
        return None
    return "neither a URL with a scheme, user@host:path, nor an absolute path"


def git_ref_problem(ref):
    ref = str(ref)
    if not ref:
        return "empty"
    if ref.startswith("-"):
        return "it would be read as an option"
    if not REF_RE.match(ref) or ".." in ref:
        return "not a commit, tag, branch or ref name"
    return None


# Characters a path may hold: none that a shell or a search-path variable (':') would read differently.
SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9._/+@-]+$")
PATH_ACCEPTED = "an absolute, normalised path of letters, digits and . _ / + @ -"
# A prefix gets builds/, current, sources/ and artifacts/ inside it: never a system directory itself, never inside
# a tree the distribution or the kernel owns.
SYSTEM_DIRS = ("/", "/usr", "/usr/local", "/opt", "/var", "/var/lib", "/home", "/root", "/tmp", "/srv", "/mnt",
               "/media")
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys",
                "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/sbin",
                "/usr/share", "/usr/src", "/var/lib/dpkg", "/var/lib/apt")
PREFIX_ACCEPTED = PATH_ACCEPTED + ", a directory of its own (not / or a system directory such as /usr or /opt)"


def path_problem(path):
    """A node path that reaches commands (the interpreter, the venv, the env script, CUDA's home)."""
    path = str(path)
    if not path.startswith("/"):
        return "not an absolute path"
    if not SAFE_PATH_RE.match(path):
        return "it holds a character a shell would interpret (space, quote, $, `, ;, newline, ...)"
    if path != "/" and (path.endswith("/") or "//" in path or
                        any(part in (".", "..") for part in path.split("/"))):
        return "not normalised"
    return None


def prefix_problem(path):
    """A directory the role owns and writes builds into."""
    why = path_problem(path)
    if why:
        return why
    path = str(path)
    if path in SYSTEM_DIRS:
        return "a system directory, not one of its own"
    if any(path == tree or path.startswith(tree + "/") for tree in SYSTEM_TREES):
        return "inside a tree the distribution or the kernel owns"
    return None
