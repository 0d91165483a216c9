# -*- coding: utf-8 -*-
"""The GDRCopy and DeepEP commands run as source_build runs them (bash, $INSTALL_DIR and $SRC_DIR set) with
stand-in make and interpreter (fixtures that record their argv): hostile values arrive as one argument each and
nothing in them runs."""
from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.build_commands import (
    CommandError,
    deepep_commands,
    gdrcopy_commands,
)

RECORDER = "#!/usr/bin/env python3\nimport json, sys\nopen(%r, 'a').write(json.dumps(sys.argv) + '\\n')\n"


def hostile(tmp_path):
    pwned = tmp_path / "pwned"
    return pwned, "x$(touch %s)`touch %s`;touch %s'\" |touch %s" % (pwned, pwned, pwned, pwned)


def run(command, tmp_path, tools):
    """bash -c command with each tool a recorder; returns [argv, ...] in call order."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    paths = []
    for tool in tools:
        path = tool if tool.startswith("/") else str(bin_dir / tool)
        with open(path, "w") as handle:
            handle.write(RECORDER % str(calls))
        subprocess.run(["chmod", "755", path], check=True)
        paths.append(path)
    src = tmp_path / "src"
    (src / "dist").mkdir(parents=True, exist_ok=True)
    (src / "dist" / "deep_ep-1.2.1-py3-none-any.whl").write_text("")
    # What setup.py bdist_wheel leaves in its build directory besides the wheel.
    built = src / "build" / "lib.linux-x86_64-cpython-312"
    (built / "deep_ep").mkdir(parents=True, exist_ok=True)
    (built / "deep_ep" / "__init__.py").write_text("")
    (built / "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so").write_text("")
    env = {"PATH": "%s:/usr/bin:/bin" % bin_dir, "INSTALL_DIR": str(tmp_path / "install"), "SRC_DIR": str(src)}
    result = subprocess.run(["bash", "-c", command], cwd=str(src), env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_gdrcopy_library_only_by_default(tmp_path):
    commands = gdrcopy_commands(jobs=8)
    calls = run(commands["build"], tmp_path, ["make"])
    assert [c[1:] for c in calls] == [["-j8", "prefix=%s" % (tmp_path / "install"), "lib", "lib_install"]]
    assert "driver" not in commands["build"]
    assert gdrcopy_commands()["build"].startswith("make -j$(nproc) ")


def test_gdrcopy_driver_source_arrives_as_data(tmp_path):
    pwned, value = hostile(tmp_path)
    calls = run(gdrcopy_commands(jobs=2, kernel_module=True, nvidia_src="/usr/src/nvidia" + value + "/nvidia")["build"],
                tmp_path, ["make", "install"])
    assert calls[0][1:] == ["-j2", "prefix=%s" % (tmp_path / "install"), "lib", "lib_install", "driver",
                            "NVIDIA_SRC_DIR=/usr/src/nvidia" + value + "/nvidia"]
    # The build user keeps gdrdrv.ko in the build; writing the kernel's module tree (drv_install) is root's.
    assert calls[1][1:] == ["-D", "-m", "0644", "src/gdrdrv/gdrdrv.ko", str(tmp_path / "install" / "kernel" / "gdrdrv.ko")]
    assert "drv_install" not in gdrcopy_commands(kernel_module=True, nvidia_src="/usr/src/nvidia-1/nvidia")["build"]
    assert not pwned.exists()


@pytest.mark.parametrize("layout, passes", [("file", True), ("linked file", False), ("linked directory", False),
                                            ("missing", False)])
def test_gdrcopy_verify_wants_gdrdrv_ko_as_a_regular_file_in_the_build(tmp_path, layout, passes):
    # Root copies kernel/gdrdrv.ko into the kernel's module tree: a link the build planted would make it copy
    # (and load) whatever the link names.
    install = tmp_path / "install"
    (install / "lib").mkdir(parents=True)
    (install / "include").mkdir()
    (install / "lib" / "libgdrapi.so").write_text("")
    (install / "include" / "gdrapi.h").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gdrdrv.ko").write_text("")
    if layout == "file":
        (install / "kernel").mkdir()
        (install / "kernel" / "gdrdrv.ko").write_text("")
    elif layout == "linked file":
        (install / "kernel").mkdir()
        (install / "kernel" / "gdrdrv.ko").symlink_to(elsewhere / "gdrdrv.ko")
    elif layout == "linked directory":
        (install / "kernel").symlink_to(elsewhere)
    verify = gdrcopy_commands(kernel_module=True, nvidia_src="/usr/src/nvidia-1/nvidia")["verify"]
    result = subprocess.run(["bash", "-c", verify], env={"PATH": "/usr/bin:/bin", "INSTALL_DIR": str(install)},
                            check=False)
    assert (result.returncode == 0) == passes


def test_deepep_interpreter_path_arrives_as_data(tmp_path):
    # A file name (no slash), so the recorder can live there: it would create pwned in the build directory.
    python = str(tmp_path / "py$(touch pwned)`touch pwned`;touch pwned'\" |touch pwned")
    pwned = tmp_path / "src" / "pwned"
    commands = deepep_commands(python)
    calls = run(commands["build"], tmp_path, [python])
    assert calls == [[python, "setup.py", "bdist_wheel", "--dist-dir", "dist"]]
    # In place too, for the tests and the env script.
    assert (tmp_path / "src" / "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so").is_file()
    calls = run(commands["verify"], tmp_path, [python])
    assert calls[-1] == [python, "-c", "import deep_ep, deep_ep_cpp"]
    calls = run(deepep_commands(python, version="v2")["verify"], tmp_path, [python])
    assert calls[-1] == [python, "-c", "import deep_ep, deep_ep._C"]
    assert not pwned.exists()


@pytest.mark.parametrize("call, message", [
    (lambda: gdrcopy_commands(jobs="4; touch /tmp/x"), "jobs: '4; touch /tmp/x' is not a number"),
    (lambda: gdrcopy_commands(jobs=True), "jobs: True is not a number"),
    (lambda: gdrcopy_commands(kernel_module=True), "needs the NVIDIA driver source"),
    (lambda: deepep_commands("python3"), "python: 'python3' is not an absolute interpreter path"),
    (lambda: deepep_commands("/usr/bin/python3", version="v3"), "version: 'v3' is neither v1 nor v2"),
])
def test_bad_values_are_refused(call, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()
