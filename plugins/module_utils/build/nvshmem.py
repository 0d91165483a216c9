# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""How to build NVSHMEM with IBGDA from source: the version of a source, the version-keyed patches it
needs, the cmake options and the build and verify commands for moe_infra.deepep.source_build."""

from __future__ import annotations

import os
import re
import tarfile

from ansible_collections.moe_infra.deepep.plugins.module_utils.node.cuda_arch import ArchError, cmake_cuda_architectures

VERSION_RE = re.compile(r"(?<![\d.])(\d+)\.(\d+)\.(\d+)(?:-(\d+))?(?!\d|\.\d)")
OPTION_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# (patch file under roles/nvshmem_ibgda/files/patches, first version, last version, known failure, why)
PATCHES = (
    ("ibgda-roce-ah-attr-memset.patch", (3, 3, 20), (3, 4, 5), "KF15",
     "uninitialised ibv_ah_attr makes ibv_create_ah fail on RoCE"),
)

# The seed's recipe (docs/compatibility.md): IBGDA on; MPI, SHMEM, UCX, PMIX, NCCL, tests, examples and
# the Python bindings off. A site can override any of these with nvshmem_ibgda_cmake_options.
BASE_OPTIONS = (
    ("CMAKE_BUILD_TYPE", "release"),
    ("NVSHMEM_IBGDA_SUPPORT", "ON"),
    ("NVSHMEM_MPI_SUPPORT", "OFF"),
    ("NVSHMEM_SHMEM_SUPPORT", "OFF"),
    ("NVSHMEM_UCX_SUPPORT", "OFF"),
    ("NVSHMEM_PMIX_SUPPORT", "OFF"),
    ("NVSHMEM_USE_NCCL", "OFF"),
    ("NVSHMEM_BUILD_TESTS", "OFF"),
    ("NVSHMEM_BUILD_EXAMPLES", "OFF"),
    ("NVSHMEM_BUILD_PYTHON_LIB", "OFF"),
)


class PlanError(ValueError):
    """Inputs that cannot give a build."""


def source_version(text):
    """'v3.4.5-0', 'nvshmem_src_3.4.5-0.txz', 'nvshmem-3.5.19-1.tar.gz' -> '3.4.5'; None when absent."""
    match = VERSION_RE.search(str(text or ""))
    return "%s.%s.%s" % match.group(1, 2, 3) if match else None


def _tuple(version):
    return tuple(int(part) for part in version.split("."))


def patches_for(version):
    """The patches a source of this version needs: [{name, id, why}]."""
    key = _tuple(version)
    return [{"name": name, "id": kf, "why": why} for name, first, last, kf, why in PATCHES if first <= key <= last]


def _quote(value):
    return "'%s'" % str(value).replace("'", "'\\''")


def cmake_options(compute_caps, gdrcopy_root="", overrides=None):
    """Ordered [(name, value)] of -D options."""
    try:
        architectures = cmake_cuda_architectures(compute_caps)
    except ArchError as exc:
        raise PlanError("nvshmem_ibgda_arch_list: %s" % exc)
    if not architectures:
        raise PlanError("no CUDA arch to build NVSHMEM for: run the preflight role on a GPU node or set "
                        "nvshmem_ibgda_arch_list (e.g. ['9.0'])")
    options = dict(BASE_OPTIONS)
    options["CMAKE_CUDA_ARCHITECTURES"] = architectures
    if gdrcopy_root:
        options.update(NVSHMEM_USE_GDRCOPY="ON", GDRCOPY_HOME=gdrcopy_root)
    else:
        options["NVSHMEM_USE_GDRCOPY"] = "OFF"
    for name, value in (overrides or {}).items():
        if not OPTION_NAME_RE.match(str(name)):
            raise PlanError("nvshmem_ibgda_cmake_options: %r is not a cmake variable name" % (name,))
        if name in ("CMAKE_INSTALL_PREFIX", "CMAKE_CUDA_COMPILER"):
            raise PlanError("nvshmem_ibgda_cmake_options: %s is set by the role (the versioned build directory, "
                            "nvshmem_ibgda_cuda_home)" % name)
        if name == "NVSHMEM_IBGDA_SUPPORT" and str(value).upper() not in ("ON", "1", "TRUE"):
            raise PlanError("nvshmem_ibgda_cmake_options: NVSHMEM_IBGDA_SUPPORT=%s; DeepEP needs IBGDA, so it must "
                            "stay ON (use nvshmem_ibgda_method: wheel for another NVSHMEM)" % value)
        options[name] = str(value)
    order = [name for name, dummy in BASE_OPTIONS] + ["CMAKE_CUDA_ARCHITECTURES", "NVSHMEM_USE_GDRCOPY", "GDRCOPY_HOME"]
    ordered = [(name, options[name]) for name in order if name in options]
    ordered += sorted((name, value) for name, value in options.items() if name not in order)
    return ordered


def build_plan(source, compute_caps, version=None, gdrcopy_root="", overrides=None, jobs=0):
    """Everything the role passes to source_build.

    source: the git ref or archive name the version is read from unless `version` is given.
    Returns {version, patches, cmake_options, build_command, verify_command}.
    """
    version = source_version(version) if version else source_version(source)
    if version is None:
        raise PlanError("cannot tell the NVSHMEM version from %r: set nvshmem_ibgda_source_version "
                        "(e.g. '3.4.5'); the version picks the patches" % (source,))
    options = cmake_options(compute_caps, gdrcopy_root, overrides)
    defines = " ".join("-D%s=%s" % (name, _quote(value)) for name, value in options)
    # Ninja's own default (CPUs + 2) unless jobs is set, as a hand `cmake --build` with Ninja runs; make alone
    # would run one job at a time, so it gets one per CPU.
    jobs_for_make = str(int(jobs)) if int(jobs or 0) > 0 else '"$(nproc)"'
    jobs_for_ninja = str(int(jobs)) if int(jobs or 0) > 0 else ''
    build_command = "\n".join([
        # The version decides the patches: refuse a source that is not the version they were picked for.
        "found=$(sed -n 's/^ *VERSION \\([0-9][0-9.]*\\).*/\\1/p' CMakeLists.txt | head -n 1)",
        'case "$found" in %s|%s.*) ;; *) echo "this source is NVSHMEM $found, not %s:'
        ' set nvshmem_ibgda_source_version" >&2; exit 1 ;; esac' % (version, version, version),
        'if command -v ninja >/dev/null; then generator=Ninja; parallel=%s; else generator="Unix Makefiles";'
        ' parallel=%s; fi' % (jobs_for_ninja or "''", jobs_for_make),
        'cmake -S . -B build -G "$generator" -DCMAKE_INSTALL_PREFIX="$INSTALL_DIR" '
        '-DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" ' + defines,
        'cmake --build build ${parallel:+--parallel "$parallel"} --target install',
        # The object tree is several GB and never used again.
        "rm -rf build",
    ])
    verify_command = " && ".join([
        'ls "$INSTALL_DIR"/lib/*nvshmem_transport_ibgda.so* >/dev/null',
        'test -e "$INSTALL_DIR/lib/libnvshmem_host.so"',
        'LD_LIBRARY_PATH="$INSTALL_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$INSTALL_DIR/bin/nvshmem-info" -a'
        ' | tee "$INSTALL_DIR/nvshmem-info.txt" | grep -Eq "NVSHMEM_IBGDA_SUPPORT=(ON|1|TRUE)"',
    ])
    return {
        "version": version,
        "patches": patches_for(version),
        "cmake_options": dict(options),
        "build_command": build_command,
        "verify_command": verify_command,
    }


# rdma-core's infiniband/mlx5_api.h gained MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT after Ubuntu 24.04's rdma-core 50.
# Some NVSHMEM sources define it themselves when the header lacks it (v3.4.5-0 does, in this file); 3.5.19 does not
# and then needs DOCA-OFED's headers (KF19). Read from the source being built where it is at hand.
IB_COMMON_HEADER = "src/modules/transport/common/transport_ib_common.h"
DATA_DIRECT_DEFINE_RE = re.compile(r"^\s*#\s*define\s+MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT\b", re.M)
# Without the source at hand: the last release whose source was seen to define it.
DATA_DIRECT_SELF_DEFINED_UP_TO = (3, 4, 5)


def defines_data_direct(src="", ref="", version=""):
    """(defines, how): whether this NVSHMEM source defines MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT itself, and how
    that was found. src: an archive or tree on this machine (read); else the version from version or ref."""
    src = str(src or "")
    if src and os.path.isdir(src):
        for top in ("", "nvshmem"):
            path = os.path.join(src, top, IB_COMMON_HEADER)
            if os.path.isfile(path):
                with open(path, errors="replace") as handle:
                    found = bool(DATA_DIRECT_DEFINE_RE.search(handle.read()))
                return found, "read %s" % path
    elif src and os.path.isfile(src):
        try:
            with tarfile.open(src) as tar:
                for member in tar:
                    if member.isfile() and member.name.endswith(IB_COMMON_HEADER):
                        text = tar.extractfile(member).read().decode("utf-8", "replace")
                        return bool(DATA_DIRECT_DEFINE_RE.search(text)), "read %s in %s" % (member.name, src)
        except (tarfile.TarError, OSError):
            pass
    number = source_version(version) or source_version(ref) or source_version(os.path.basename(src))
    if number is None:
        return False, "version unknown"
    return _tuple(number) <= DATA_DIRECT_SELF_DEFINED_UP_TO, "NVSHMEM %s" % number
