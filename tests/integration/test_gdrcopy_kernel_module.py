# -*- coding: utf-8 -*-
"""The gdrcopy role refuses the kernel module where it cannot be built, before anything is changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_kernel_module_refused_without_nvidia_source(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: moe_infra.deepep.gdrcopy\n")
    prefix = tmp_path / "gdrcopy"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(play), "-e", "gdrcopy_kernel_module=true", "-e", "gdrcopy_nvidia_src_dir=%s" % (tmp_path / "nvsrc"),
         "-e", "gdrcopy_prefix=%s" % prefix, "-e", "ansible_python_interpreter=%s" % sys.executable],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stdout
    assert "gdrcopy_kernel_module=true but:" in result.stdout
    assert "no NVIDIA kernel source with nv-p2p.h under /usr/src (KF10)" in result.stdout
    assert not prefix.exists()  # refused before anything was written


@pytest.mark.parametrize("given", ["nvidia-535.261.03", "nvidia-535.261.03/nvidia"])
def test_gdrdrv_is_given_the_directory_that_holds_nv_p2p_h(tmp_path, given):
    # The NVIDIA driver's kernel source as its installers leave it (/usr/src/nvidia-<version>, nv-p2p.h in nvidia/;
    # the layout of Debian's nvidia-kernel-source 535.261.03), named by its top directory or, as gdrcopy's README
    # does, by nvidia/. gdrdrv compiles with -I NVIDIA_SRC_DIR: given the top directory, its build failed with
    # "nv-p2p.h: No such file or directory". Either way the header is found (no KF10) and the build is given nvidia/.
    source = tmp_path / "src" / "nvidia-535.261.03"
    (source / "nvidia").mkdir(parents=True)
    (source / "nvidia" / "nv-p2p.h").write_text("/* fixture: the NVIDIA driver's nv-p2p.h */\n")
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - block:\n"
        "        - ansible.builtin.include_role:\n            name: moe_infra.deepep.gdrcopy\n"
        "            tasks_from: driver_preflight\n            public: true\n"
        "      rescue:\n        - ansible.builtin.debug:\n"
        "            msg: \"refused: {{ ansible_failed_result.msg }}; NVIDIA_SRC_DIR={{ __gdrcopy_p2p_dir }}\"\n"
        "        - ansible.builtin.debug:\n"
        "            msg: \"gdrdrv build: {{ ('gdrcopy' | moe_infra.deepep._deepep_build_commands(kernel_module=true,"
        " nvidia_src=__gdrcopy_p2p_dir)).build }}\"\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "dev"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # one line per message
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(play), "-e", "gdrcopy_kernel_module=true", "-e", "gdrcopy_nvidia_src_dir=%s" % (tmp_path / "src" / given),
         "-e", "ansible_python_interpreter=%s" % sys.executable],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout
    # This test machine has no headers for its running kernel (and may be a container): refused, but not for KF10.
    refused = re.search(r'"msg": "refused: (.*); NVIDIA_SRC_DIR=(.*)"', out)
    assert result.returncode == 0 and refused and refused.group(1).startswith("gdrcopy_kernel_module=true but:"), out
    assert "KF10" not in refused.group(1) and refused.group(2) == str(source / "nvidia"), out
    assert "lib_install driver NVIDIA_SRC_DIR=%s && install" % (source / "nvidia") in out, out
