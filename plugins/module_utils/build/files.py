# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Files the modules write on a node."""

from __future__ import annotations

import os
import tempfile


def write_atomic(module, path, content, mode=0o644):
    """content (text or bytes) into path through a temporary file in the same directory and AnsibleModule.atomic_move:
    a reader sees the old file or the new one, never half of it. mode is the new file's; atomic_move keeps an
    existing file's own."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as handle:
            handle.write(content)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
