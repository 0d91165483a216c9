# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""NCCL for DeepEP V2 (pure): the version of a source, the build and verify commands for
moe_infra.deepep.source_build, and NCCL's version code. What a build on the H100 test machine needed is in
docs/results/deepep-v2-probe-h100: `make src.build` with NVCC_GENCODE for the GPUs' archs only (about 4.5 minutes
for sm_90 on 16 cores), then the library and the whole include/ tree (nccl_device.h needs nccl_device/impl/)."""

from __future__ import annotations

import re

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.compat import V2_MIN_NCCL
from ansible_collections.moe_infra.deepep.plugins.module_utils.node.cuda_arch import ArchError, cmake_cuda_architectures

VERSION_RE = re.compile(r"(?<![\d.])(\d+)\.(\d+)\.(\d+)(?:-(\d+))?(?!\d|\.\d)")


# The nccl role's defaults (roles/nccl/defaults/main.yml; a unit test keeps the two equal): the other roles' checks
# read a site's nccl_* variables through planned_version, where the role's defaults are not visible.
DEFAULTS = {
    "nccl_method": "wheel",
    "nccl_version": "2.30.7",
    "nccl_git_ref": "v2.30.7-1",
    "nccl_src": "",
    "nccl_source_version": "",
}
METHODS = ("wheel", "source", "none")


class PlanError(ValueError):
    """Inputs that cannot give a build."""


def source_version(text):
    """'v2.30.7-1', 'nccl-2.30.7-1.tar.gz' -> '2.30.7'; None when absent."""
    match = VERSION_RE.search(str(text or ""))
    return "%s.%s.%s" % match.group(1, 2, 3) if match else None


def with_defaults(settings):
    """The nccl_* variables the layer reads, from a site's (others left out, missing or null ones the role's
    defaults)."""
    values = dict(DEFAULTS)
    values.update({key: value for key, value in (settings or {}).items() if key in DEFAULTS and value is not None})
    return values


def planned_version(settings):
    """The NCCL version the nccl layer provides with these nccl_* variables (missing ones take the role's
    defaults): nccl_version for the wheel, the source's version for a build; None for nccl_method none (the
    interpreter's NCCL as it is) or a source whose version cannot be told (the layer itself refuses it)."""
    values = with_defaults(settings)
    method = values["nccl_method"]
    if method == "wheel":
        return source_version(values["nccl_version"])
    if method == "source":
        if values["nccl_source_version"]:
            return source_version(values["nccl_source_version"])
        src = str(values["nccl_src"] or "")
        return source_version(src.rsplit("/", 1)[-1] if src else values["nccl_git_ref"])
    return None


def version_tuple(version):
    return tuple(int(part) for part in str(version).split("."))


def version_code(version):
    """'2.30.7' -> 23007: what ncclGetVersion answers (NCCL_VERSION_CODE since 2.9)."""
    major, minor, patch = version_tuple(version)
    return major * 10000 + minor * 100 + patch


def gencode(compute_caps):
    """NVCC_GENCODE for the GPUs' archs: one SASS per arch, as NCCL's makefiles take it."""
    try:
        archs = cmake_cuda_architectures(compute_caps)
    except ArchError as exc:
        raise PlanError("nccl_arch_list: %s" % exc)
    if not archs:
        raise PlanError("no CUDA arch to build NCCL for: run the preflight role on a GPU node or set nccl_arch_list "
                        "(e.g. ['9.0'])")
    return " ".join("-gencode=arch=compute_%s,code=sm_%s" % (arch, arch) for arch in archs.split(";"))


def build_plan(source, compute_caps, python, version=None, jobs=0):
    """Everything the nccl role passes to source_build.

    source: the git ref or archive name the version is read from unless `version` is given. python: the
    interpreter the verify command asks the built library's version with. Returns {version, version_code,
    gencode, build_command, verify_command}.
    """
    version = source_version(version) if version else source_version(source)
    if version is None:
        raise PlanError("cannot tell the NCCL version from %r: set nccl_source_version (e.g. '2.30.7')" % (source,))
    if version_tuple(version) < V2_MIN_NCCL:
        raise PlanError("NCCL %s is older than DeepEP V2 needs (>= %s): pin a newer tag (nccl_git_ref, e.g. "
                        "v2.30.7-1) or source" % (version, ".".join(str(part) for part in V2_MIN_NCCL)))
    if not python or not str(python).startswith("/"):
        raise PlanError("python: %r is not an absolute interpreter path" % (python,))
    codes = gencode(compute_caps)
    parallel = str(int(jobs)) if int(jobs or 0) > 0 else '"$(nproc)"'
    build_command = "\n".join([
        # The version decides what the layer promises: refuse a source that is another version.
        "found=$(sed -n 's/^NCCL_\\(MAJOR\\|MINOR\\|PATCH\\) *:= *\\([0-9]*\\).*/\\2/p' makefiles/version.mk"
        " | paste -sd.)",
        '[ "$found" = %s ] || { echo "this source is NCCL $found, not %s: set nccl_source_version" >&2; exit 1; }'
        % (version, version),
        'make -j %s src.build CUDA_HOME="$CUDA_HOME" NVCC_GENCODE=%s' % (parallel, _quote(codes)),
        # What torch and DeepEP use: the library and the whole include tree. The object tree is not kept.
        'mkdir -p "$INSTALL_DIR/lib" "$INSTALL_DIR/include"',
        'cp -a build/lib/libnccl.so* "$INSTALL_DIR/lib/"',
        'cp -a build/include/. "$INSTALL_DIR/include/"',
        "rm -rf build",
    ])
    # The library's own answer, not a header: what a process that loads it will get.
    verify_command = " && ".join([
        'test -f "$INSTALL_DIR/include/nccl.h"',
        '%s -c %s "$INSTALL_DIR/lib/libnccl.so.2" %d' % (_quote(python), _quote(VERSION_CHECK), version_code(version)),
    ])
    return {
        "version": version,
        "version_code": version_code(version),
        "gencode": codes,
        "build_command": build_command,
        "verify_command": verify_command,
    }


VERSION_CHECK = (
    "import ctypes, sys\n"
    "code = ctypes.c_int()\n"
    "ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(code))\n"
    "print('ncclGetVersion of %s: %d' % (sys.argv[1], code.value))\n"
    "sys.exit(0 if code.value == int(sys.argv[2]) else 1)\n"
)


def _quote(value):
    return "'%s'" % str(value).replace("'", "'\\''")
