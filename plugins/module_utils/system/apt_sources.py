# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Read apt's source entries, one-line (``sources.list``, ``*.list``) and deb822 (``*.sources``), to find the
ones for one repository URL. apt refuses every command when two entries for the same URL name different
``Signed-By`` keyrings ("Conflicting values set for option Signed-By"), so a role that adds a repository
must first look for an entry another installer wrote (NVIDIA's cuda-keyring package writes
``cuda-<distro>-x86_64.list``) and reuse it."""

from __future__ import annotations

import glob
import os
import re

OPTIONS_RE = re.compile(r"^\[([^\]]*)\]\s*(.*)$")


def normalize_uri(uri):
    """One spelling per repository: no trailing slash, lower-case scheme and host, file:///x as file:/x."""
    uri = (uri or "").strip()
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):(//([^/]*))?(.*)$", uri)
    if not match:
        return uri.rstrip("/")
    scheme, dummy, host, rest = match.groups()
    scheme = scheme.lower()
    if scheme == "file":
        return "file:/" + rest.strip("/")
    if host is None:
        return uri.rstrip("/")
    return "%s://%s%s" % (scheme, host.lower(), rest.rstrip("/"))


def parse_one_line(text, path):
    """Entries of a sources.list-format file: [{path, line, types, uris, suites, signed_by, enabled}]."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, dummy, rest = line.partition(" ")
        if kind not in ("deb", "deb-src"):
            continue
        rest = rest.strip()
        options = {}
        match = OPTIONS_RE.match(rest)
        if match:
            for word in match.group(1).split():
                name, dummy, value = word.partition("=")
                options[name.lower()] = value
            rest = match.group(2)
        words = rest.split()
        if not words:
            continue
        entries.append(dict(path=path, line=number, types=[kind], uris=[words[0]], suites=words[1:2],
                            signed_by=options.get("signed-by"), enabled=True))
    return entries


def parse_deb822(text, path):
    """Entries of a deb822 .sources file, one per stanza."""
    entries = []
    stanza, first_line, field = {}, None, None
    lines = text.splitlines() + [""]
    for number, raw in enumerate(lines, 1):
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if stanza:
                signed_by = stanza.get("signed-by", "").strip()
                entries.append(dict(
                    path=path, line=first_line, types=stanza.get("types", "").split(),
                    uris=stanza.get("uris", "").split(), suites=stanza.get("suites", "").split(),
                    # An inline key (several lines) is reported as such, not as a path.
                    signed_by=("<inline key>" if "\n" in signed_by else signed_by) or None,
                    enabled=stanza.get("enabled", "yes").strip().lower() not in ("no", "false", "0")))
            stanza, first_line, field = {}, None, None
            continue
        if raw[0] in " \t" and field:
            stanza[field] += "\n" + raw.strip()
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        field = name.strip().lower()
        stanza[field] = value.strip()
        first_line = first_line or number
    return entries


def read_sources(apt_dir):
    """Every entry under <apt_dir>: sources.list, sources.list.d/*.list and *.sources, in apt's order."""
    paths = [os.path.join(apt_dir, "sources.list")]
    paths += sorted(glob.glob(os.path.join(apt_dir, "sources.list.d", "*.list")) +
                    glob.glob(os.path.join(apt_dir, "sources.list.d", "*.sources")))
    entries = []
    for path in paths:
        try:
            with open(path, errors="replace") as handle:
                text = handle.read()
        except (IOError, OSError):
            continue
        entries += parse_deb822(text, path) if path.endswith(".sources") else parse_one_line(text, path)
    return entries


def sources_for(entries, uri):
    """The enabled binary (deb) entries for the repository at uri."""
    wanted = normalize_uri(uri)
    return [entry for entry in entries if entry["enabled"] and "deb" in entry["types"]
            and any(normalize_uri(candidate) == wanted for candidate in entry["uris"])]
