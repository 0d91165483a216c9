# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The GDRCopy and DeepEP build and verify commands source_build runs with bash (NVSHMEM's: nvshmem.py). Every
value a site sets is quoted: it reaches make or the interpreter as one argument, byte for byte, and never runs.
$INSTALL_DIR and $SRC_DIR are source_build's. Pure."""

from __future__ import annotations

import shlex


class CommandError(ValueError):
    pass


def _jobs(jobs):
    if isinstance(jobs, bool) or not str(jobs).strip().isdigit():
        raise CommandError("jobs: %r is not a number of parallel jobs (0 for one per CPU)" % (jobs,))
    jobs = int(str(jobs).strip())
    return "$(nproc)" if jobs == 0 else str(jobs)


def gdrcopy_commands(jobs=0, kernel_module=False, nvidia_src=""):
    """{build, verify} for GDRCopy: the library only (`make lib lib_install`, never `all`: KF10, KF13, KF35);
    with kernel_module also gdrdrv (`driver`) against the NVIDIA driver source, its gdrdrv.ko kept in the build as
    kernel/gdrdrv.ko. Not `drv_install`: that writes the kernel's module tree and runs depmod, which the role does
    as root from the verified build (the build runs as the build user). nvidia_src is gdrcopy's NVIDIA_SRC_DIR: the
    directory holding nv-p2p.h (<driver source>/nvidia), which gdrdrv compiles with -I."""
    build = 'make -j%s prefix="$INSTALL_DIR" lib lib_install' % _jobs(jobs)
    verify = 'test -e "$INSTALL_DIR/lib/libgdrapi.so" && test -f "$INSTALL_DIR/include/gdrapi.h"'
    if kernel_module:
        if not nvidia_src:
            raise CommandError("kernel_module needs the NVIDIA driver source directory (nvidia_src: the one holding nv-p2p.h)")
        build += (' driver NVIDIA_SRC_DIR=%s && install -D -m 0644 src/gdrdrv/gdrdrv.ko "$INSTALL_DIR/kernel/gdrdrv.ko"'
                  % shlex.quote(nvidia_src))
        # A regular file, not reached through a link: root installs it into the kernel's module tree.
        verify += (' && test ! -L "$INSTALL_DIR/kernel" && test ! -L "$INSTALL_DIR/kernel/gdrdrv.ko"'
                   ' && test -f "$INSTALL_DIR/kernel/gdrdrv.ko"')
    return dict(build=build, verify=verify)


# What an import from / must find: V1's extension is the top-level deep_ep_cpp, V2's is deep_ep._C.
IMPORTS = {"v1": "import deep_ep, deep_ep_cpp", "v2": "import deep_ep, deep_ep._C"}


def deepep_commands(python, version="v1"):
    """{build, verify} for DeepEP with the given interpreter: bdist_wheel, as DeepEP's install.sh runs it, then
    what it built (build/lib.<platform>/: the extension, V2's envs.py) copied into the source tree, which is what
    `build_ext --inplace` would give the tests and the env script without a second setup.py run; verify imports
    the package and its extension from / and finds the wheel."""
    if not python or not python.startswith("/"):
        raise CommandError("python: %r is not an absolute interpreter path" % (python,))
    if version not in IMPORTS:
        raise CommandError("version: %r is neither v1 nor v2" % (version,))
    py = shlex.quote(python)
    build = "%s setup.py bdist_wheel --dist-dir dist && cp -R build/lib.*/. ." % py
    verify = ("cd / && PYTHONPATH=\"$SRC_DIR\" %s -c %s && ls \"$SRC_DIR\"/dist/*.whl"
              % (py, shlex.quote(IMPORTS[version])))
    return dict(build=build, verify=verify)
