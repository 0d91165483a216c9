# -*- coding: utf-8 -*-
"""The gdrcopy role refuses the kernel module where it cannot be built, before anything is changed."""

from __future__ import annotations

import os
import subprocess
import sys

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
