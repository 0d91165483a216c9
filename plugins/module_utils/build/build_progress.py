# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Where a running build is, from the tail of source_build's log: the step (each command is logged as `$ <command>`)
and the build tool's last progress line (cmake's `[ 45%] ...`, ninja's `[120/311] ...`). Pure."""

from __future__ import annotations

import re

PROGRESS = re.compile(r"^\s*\[\s*(\d+%|\d+/\d+)\]\s*(.*)$")


def _short(text, limit):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def build_phase(log_tail):
    """'<step command>: [<progress>] <what>', or the step alone, or '... <last line>' when the step's start has left
    the tail (a make without progress lines, NCCL's), or 'starting' before the first step."""
    step, progress, last = None, None, None
    for line in (log_tail or "").splitlines():
        if line.strip():
            last = line
        if line.startswith("$ "):
            step, progress = line[2:], None
            continue
        match = PROGRESS.match(line)
        if match:
            progress = "[%s] %s" % (match.group(1), match.group(2))
    parts = [_short(step, 60)] if step else []
    if progress:
        parts.append(_short(progress, 90))
    if not parts and last:
        return "... " + _short(last, 90)
    return ": ".join(parts) or "starting"


def elapsed_text(seconds):
    """'1 min 05 s' / '42 s'."""
    seconds = int(round(seconds))
    return "%d min %02d s" % divmod(seconds, 60) if seconds >= 60 else "%d s" % seconds
