# -*- coding: utf-8 -*-
# Copyright: moe_infra.deepep contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a shared object defines in its dynamic symbol table, read from the ELF file itself (no binutils needed).

Used to refuse a Python extension that carries its own copy of the C++ runtime: a compiler that has only
libstdc++.a (no libstdc++.so) links libstdc++'s locale machinery into the extension, and two copies of it in one
process hand out clashing facet ids. DeepEP V2's JIT then crashes building its first std::regex (the
docs/results/deepep-v2-probe-h100 runs 5 and 6 found and fixed exactly this).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import struct

SHT_DYNSYM = 11
SHN_UNDEF = 0

# Out-of-line parts of libstdc++ that header-only code never defines: an object that defines one holds the runtime.
CXX_RUNTIME_MARKERS = {
    "_ZNSt6locale7classicEv": "std::locale::classic()",
    "_ZNSt5ctypeIcE2idE": "std::ctype<char>::id",
    "_ZNKSt6locale2id5_M_idEv": "std::locale::id::_M_id()",
}


class ElfError(Exception):
    pass


def _read(handle, offset, size):
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise ElfError("truncated ELF file")
    return data


def defined_dynamic_symbols(path):
    """The names a 64-bit little-endian ELF file defines in .dynsym (a set); ElfError for anything else."""
    with open(path, "rb") as handle:
        ident = handle.read(16)
        if ident[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        if ident[4] != 2 or ident[5] != 1:
            raise ElfError("not a 64-bit little-endian ELF file")
        header = _read(handle, 0, 64)
        shoff, = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
        if shoff == 0 or shnum == 0 or shentsize < 64:
            return set()
        sections = [struct.unpack_from("<IIQQQQIIQQ", _read(handle, shoff + i * shentsize, 64))
                    for i in range(shnum)]
        names = set()
        for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
            if kind != SHT_DYNSYM or entsize < 24 or link >= shnum:
                continue
            strtab_offset, strtab_size = sections[link][4], sections[link][5]
            strtab = _read(handle, strtab_offset, strtab_size)
            table = _read(handle, offset, size)
            for start in range(0, size - size % entsize, entsize):
                st_name, _st_info, _st_other, st_shndx = struct.unpack_from("<IBBH", table, start)
                if st_shndx == SHN_UNDEF or st_name == 0 or st_name >= strtab_size:
                    continue
                end = strtab.find(b"\0", st_name)
                names.add(strtab[st_name:end if end >= 0 else strtab_size].decode("ascii", "replace"))
        return names


def cxx_runtime_copies(root):
    """[{path (relative to root), defines: [...]}] for every shared object under root that defines parts of
    libstdc++ itself. Links are not followed; files that are not 64-bit ELF are skipped."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if not (name.endswith(".so") or ".so." in name):
                continue
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                defined = defined_dynamic_symbols(path)
            except (ElfError, OSError, struct.error):
                continue
            markers = sorted(CXX_RUNTIME_MARKERS[symbol] for symbol in defined if symbol in CXX_RUNTIME_MARKERS)
            if markers:
                found.append(dict(path=os.path.relpath(path, root), defines=markers))
    return found


def cxx_runtime_message(name, copies):
    """The failure message for cxx_runtime_copies' result."""
    listed = "; ".join("%s defines %s" % (item["path"], ", ".join(item["defines"])) for item in copies)
    return ("%s was linked with its own copy of libstdc++ (%s): the compiler that linked it has only a static "
            "libstdc++ (libstdc++.a), and two C++ runtimes in one process crash (DeepEP V2's JIT dies in std::regex). "
            "Build with a compiler whose libstdc++ is shared: CXX in the build's environment (the deepep role's "
            "deepep_cxx), for example /usr/bin/g++ from the build prerequisites" % (name, listed))
