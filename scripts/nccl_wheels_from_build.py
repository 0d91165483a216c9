"""The two nvidia-nccl-cuNN wheels the GPU check of nccl_method: wheel installs from a local directory (the GPU test
machine reaches no package index, and NVIDIA's wheel is too large to carry there):
- torch's own version, packed again from the files pip installed (its RECORD's list, its METADATA and WHEEL);
- the pinned version, the same distribution with NCCL's own build (make src.build: build/lib/libnccl.so.2 and
  build/include/) in place of the library and the headers.
  python scripts/nccl_wheels_from_build.py NCCL_BUILD_DIR OUTDIR [VERSION]
VERSION: the pinned version's number (default: read from NCCL_BUILD_DIR/include/nccl.h). Prints each wheel's
members with their sizes."""
import base64
import hashlib
import importlib.metadata
import os
import re
import sys
import zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (path, digest, len(data))


def write_wheel(directory, name, version, tag, members):
    dist_info = "%s-%s.dist-info" % (name, version)
    record = "".join(record_line(path, data) for path, data in sorted(members.items()))
    members = dict(members)
    members[dist_info + "/RECORD"] = (record + dist_info + "/RECORD,,\n").encode()
    path = os.path.join(directory, "%s-%s-%s.whl" % (name, version, tag))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in sorted(members.items()):
            wheel.writestr(member, data)
    print(path)
    for member, data in sorted(members.items()):
        print("  %10d %s" % (len(data), member))
    return path


def main(build, outdir, version=None):
    dist = next(d for d in importlib.metadata.distributions() if re.fullmatch(
        r"nvidia[-_]nccl[-_]cu\d+", d.metadata["Name"] or "", re.I))
    name = dist.metadata["Name"].replace("-", "_").lower()
    tag = re.search(r"^Tag: (\S+)$", dist.read_text("WHEEL"), re.M).group(1)
    installed = {}
    for file in dist.files:
        path = str(file)
        left_out = (".dist-info/RECORD", ".dist-info/INSTALLER", ".dist-info/REQUESTED", ".dist-info/direct_url.json")
        if "__pycache__" in path or path.endswith(left_out):
            continue
        with open(dist.locate_file(file), "rb") as handle:
            installed[path] = handle.read()
    os.makedirs(outdir, exist_ok=True)
    write_wheel(outdir, name, dist.version, tag, installed)
    if version is None:
        with open(os.path.join(build, "include", "nccl.h")) as handle:
            text = handle.read()
        version = ".".join(re.search(r"#define NCCL_%s\s+(\d+)" % part, text).group(1)
                           for part in ("MAJOR", "MINOR", "PATCH"))
    old_info, new_info = "%s-%s.dist-info/" % (name, dist.version), "%s-%s.dist-info/" % (name, version)
    pinned = {}
    for path, data in installed.items():
        if path.startswith(("nvidia/nccl/lib/", "nvidia/nccl/include/")):
            continue
        if path == old_info + "METADATA":
            data = re.sub(rb"^Version: .*$", b"Version: " + version.encode(), data, count=1, flags=re.M)
        pinned[path.replace(old_info, new_info)] = data
    with open(os.path.join(build, "lib", "libnccl.so.2"), "rb") as handle:  # the link to libnccl.so.X.Y.Z, followed
        pinned["nvidia/nccl/lib/libnccl.so.2"] = handle.read()
    include = os.path.join(build, "include")
    for root, _dirs, files in os.walk(include):
        for file in files:
            with open(os.path.join(root, file), "rb") as handle:
                pinned["nvidia/nccl/include/" + os.path.relpath(os.path.join(root, file), include)] = handle.read()
    write_wheel(outdir, name, version, tag, pinned)


if __name__ == "__main__":
    main(*sys.argv[1:])
