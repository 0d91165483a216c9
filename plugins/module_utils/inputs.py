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
