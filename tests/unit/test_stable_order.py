# -*- coding: utf-8 -*-
"""Lists the roles and playbooks build keep their order from run to run. Jinja's difference filter returns a set's
order, which changes with each controller process: a task named after such a list ("Install nvidia-open-580
nvidia-utils-580") got another name in the --check run than in the converge run, and the molecule system scenario's
check-mode comparison failed now and then. difference is fine where only the count is used."""
from __future__ import annotations

import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def yaml_files():
    for pattern in ("roles/*/*/*.yml", "roles/*/templates/*.j2", "playbooks/*.yml"):
        yield from sorted(glob.glob(os.path.join(REPO, pattern)))


def test_difference_is_only_counted():
    uncounted = []
    for path in yaml_files():
        with open(path) as handle:
            text = handle.read()
        for match in re.finditer(r"\|\s*difference\(", text):
            # The argument's closing parenthesis, then what follows it.
            depth, index = 1, match.end()
            while depth and index < len(text):
                depth += {"(": 1, ")": -1}.get(text[index], 0)
                index += 1
            if not re.match(r"\s*\|\s*length\b", text[index:]):
                line = text.count("\n", 0, match.start()) + 1
                uncounted.append("%s:%d" % (os.path.relpath(path, REPO), line))
    assert uncounted == []
