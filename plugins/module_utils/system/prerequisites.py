# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""What the build layers need on a node before they build (pure): a compiler, make, cmake, git, the rdma-core
development headers, Python's venv and headers. A cloud image (GCP's Ubuntu accelerator images among them)
has none of them. Each need is named with the layer that has it, and resolved to the distribution's package."""

from __future__ import annotations

import os
import shutil

# Debian and Ubuntu package per need. cmake: NVSHMEM needs >= 3.19; Ubuntu 22.04 ships 3.22, 24.04 3.28,
# Debian 12 3.25. libibverbs-dev: apt keeps DOCA-OFED's build of it where DOCA is installed.
DEBIAN_PACKAGES = {
    "c compiler": "gcc",
    "c++ compiler": "g++",
    "make": "make",
    "cmake": "cmake",
    "git": "git",
    "rdma-core headers": "libibverbs-dev",
    "python venv": "python3-venv",
    "python headers": "python3-dev",
}
# A need met by a command is met wherever that command runs (cmake from pip, a compiler from a toolchain module);
# the others only by their package.
COMMANDS = {"c compiler": "gcc", "c++ compiler": "g++", "make": "make", "cmake": "cmake", "git": "git"}
SUPPORTED_FAMILIES = ("Debian",)


def build_needs(layers):
    """layers: {gdrcopy: {build, git}, nvshmem: {build, git}, deepep: {build, git, venv}} -> {need: [layer, ...]}."""
    wanted = {
        "gdrcopy": ["c compiler", "make"],
        "nvshmem": ["c compiler", "c++ compiler", "make", "cmake", "rdma-core headers"],
        "deepep": ["c++ compiler"],
    }
    needs = {}
    for layer in ("gdrcopy", "nvshmem", "deepep"):
        spec = layers.get(layer) or {}
        if not spec.get("build"):
            continue
        names = list(wanted[layer])
        if spec.get("git"):
            names.append("git")
        if spec.get("venv"):
            names += ["python venv", "python headers"]
        for name in names:
            needs.setdefault(name, []).append(layer)
    return needs


def prerequisite_packages(layers, os_family):
    """{needs: [{need, package, layers}], packages: [...], problem}: problem is set (and packages empty) where this
    collection cannot install them."""
    needs = build_needs(layers)
    rows = [{"need": name, "package": DEBIAN_PACKAGES[name], "command": COMMANDS.get(name, ""),
             "layers": needs[name]} for name in sorted(needs)]
    if rows and os_family not in SUPPORTED_FAMILIES:
        return {"needs": rows, "packages": [], "problem": (
            "the build layers need %s; they are installed on Debian and Ubuntu only, this node is %s: install them "
            "(and cmake >= 3.19) first, or set deepep_install_prerequisites=false once they are there" % (
                ", ".join("%s (%s)" % (row["need"], "/".join(row["layers"])) for row in rows), os_family or "unknown"))}
    return {"needs": rows, "packages": sorted(set(row["package"] for row in rows)), "problem": None,
            # package:command pairs for the presence check (the command may be empty).
            "checks": ["%s:%s" % (row["package"], row["command"]) for row in rows]}


def packages_present(module, build_path):
    """The packages of DEBIAN_PACKAGES that are there, as the build_prerequisites role's query finds them: a need met
    by a command found on build_path, then PATH (wherever it came from: cmake from pip), the others by dpkg's status,
    all of those in one dpkg-query (none without dpkg). The role takes this reading (deepep_facts' prerequisites)
    instead of running its query again."""
    search = os.pathsep.join(list(build_path) + [os.environ.get("PATH", "")])
    present, by_status = set(), []
    for need in sorted(DEBIAN_PACKAGES):
        package, command = DEBIAN_PACKAGES[need], COMMANDS.get(need, "")
        if command and shutil.which(command, path=search):
            present.add(package)
        else:
            by_status.append(package)
    dpkg_query = module.get_bin_path("dpkg-query") if by_status else None
    if dpkg_query:
        # rc 1 when one of them is unknown to dpkg: the others are still listed.
        dummy, out, dummy = module.run_command([dpkg_query, "--show", "--showformat=${Package} ${Status}\\n"]
                                               + by_status, environ_update={"LC_ALL": "C"})
        for line in out.splitlines():
            package, dummy, status = line.partition(" ")
            if package in by_status and status.endswith(" installed"):
                present.add(package)
    return sorted(present)
