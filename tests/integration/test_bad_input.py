# -*- coding: utf-8 -*-
"""The mistakes and hostile values an inventory or an -e can carry, given to site.yml one at a time on a fixture
GCP B200 node (8 GPUs, 8 RoCE NICs): each is refused before any host is touched, with a message naming the
variable and the value, and nothing is written (no prefix directory, no file the value tried to create)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import write_nvidia_params

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

# (variables, the variable the message must name); {pwned} is a file the value would create if it reached a
# shell or git, {prefix} the fixture node's prefix.
CASES = [
    ({"deepep_git_url": "--upload-pack=touch {pwned};"}, "deepep_git_url"),
    ({"gdrcopy_git_url": "--upload-pack=touch {pwned};"}, "gdrcopy_git_url"),
    ({"nvshmem_ibgda_git_url": "--upload-pack=touch {pwned};", "nvshmem_ibgda_method": "source"},
     "nvshmem_ibgda_git_url"),
    ({"deepep_git_url": "ext::sh -c touch% {pwned}"}, "deepep_git_url"),
    ({"gdrcopy_git_url": "http://example.invalid/gdrcopy.git"}, "gdrcopy_git_url"),
    ({"gdrcopy_git_ref": "--upload-pack=touch {pwned}"}, "gdrcopy_git_ref"),
    ({"nvshmem_ibgda_git_ref": "v3.4.5-0;touch {pwned}"}, "nvshmem_ibgda_git_ref"),
    ({"deepep_git_ref": "main"}, "deepep_git_ref"),
    ({"deepep_python": "/opt/torch/bin/python$(touch {pwned})"}, "deepep_python"),
    ({"deepep_venv": "{prefix}/venv$(touch {pwned})"}, "deepep_venv"),
    ({"deepep_prefix": "{prefix}/$(touch {pwned})"}, "deepep_prefix"),
    ({"deepep_prefix": "/"}, "deepep_prefix"),
    ({"deepep_prefix": "relative/path"}, "deepep_prefix"),
    ({"deepep_prefix": "{prefix}; touch {pwned}"}, "deepep_prefix"),
    ({"nvshmem_ibgda_prefix": "/usr"}, "nvshmem_ibgda_prefix"),
    ({"gdrcopy_prefix": "/etc/gdrcopy"}, "gdrcopy_prefix"),
    ({"deepep_env_script": "{prefix}/env.sh\ntouch {pwned}"}, "deepep_env_script"),
    ({"deepep_venv_python": "python3; touch {pwned}"}, "deepep_venv_python"),
    ({"doca_ofed_version": "banana"}, "doca_ofed_version"),
    ({"deepep_verify_timeout": 0}, "deepep_verify_timeout"),
    ({"deepep_verify_num_processes": -1}, "deepep_verify_num_processes"),
    ({"deepep_build_jobs": "abc"}, "deepep_build_jobs"),
    ({"gdrcopy_build_jobs": "many"}, "gdrcopy_build_jobs"),
    ({"nvshmem_ibgda_build_jobs": "x"}, "nvshmem_ibgda_build_jobs"),
    ({"deepep_intranode_thresholds": {"dispatch_fp8": -5}}, "deepep_intranode_thresholds"),
    ({"deepep_low_latency_thresholds": {"dispatch_fp8": 240}}, "deepep_low_latency_thresholds"),
    ({"deepep_env_extra": {"NOT-A-NAME": "1"}}, "deepep_env_extra"),
    ({"deepep_env_extra": {"LD_PRELOAD": "/tmp/evil.so"}}, "deepep_env_extra"),
    ({"nvshmem_ibgda_cmake_options": {"-DCMAKE_C_COMPILER": "gcc"}}, "nvshmem_ibgda_cmake_options"),
    ({"deepep_version": "v3"}, "deepep_version"),
    ({"nvshmem_ibgda_method": "pip"}, "nvshmem_ibgda_method"),
    ({"doca_ofed_policy": "sometimes"}, "doca_ofed_policy"),
    ({"cuda_version": "12"}, "cuda_version"),
    ({"deepep_serial": 0}, "deepep_serial"),
    ({"deepep_arch_list": ["sm90"]}, "deepep_arch_list"),
    ({"deepep_src": "/nonexistent/DeepEP.tar.gz"}, "deepep_src"),
    # Types, from the roles' argument specs (the roles would refuse them only when they start, after the layers
    # before them changed the node).
    ({"cuda_profile_path": "perhaps"}, "cuda_profile_path"),
    ({"doca_ofed_packages": {"doca-ofed": 1}}, "doca_ofed_packages"),
    ({"nvidia_peermapping_initramfs": "later"}, "nvidia_peermapping_initramfs"),
    ({"deepep_install_prerequisites": "maybe"}, "deepep_install_prerequisites"),
    ({"nvidia_driver_install": "perhaps"}, "nvidia_driver_install"),
    ({"memlock_report_only": "sometimes"}, "memlock_report_only"),
    ({"nccl_method": "conda", "deepep_version": "v2"}, "nccl_method"),
    ({"nvidia_driver_branch": "580; touch {pwned}"}, "nvidia_driver_branch"),
]


def fill(value, pwned, prefix):
    if isinstance(value, dict):
        return {fill(k, pwned, prefix): fill(v, pwned, prefix) for k, v in value.items()}
    if isinstance(value, str):
        return value.replace("{pwned}", str(pwned)).replace("{prefix}", str(prefix))
    return value


@pytest.mark.parametrize("variables, var", CASES, ids=["%s-%d" % (var, n) for n, (dummy, var) in enumerate(CASES)])
def test_refused_before_any_host_is_touched(tmp_path, variables, var):
    assert len(CASES) >= 30
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    machines.gcp_b200(sysfs)
    write_nvidia_params(proc)
    pwned, prefix = tmp_path / "pwned", tmp_path / "opt"
    given = fill(variables, pwned, prefix)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build", "dev"), ANSIBLE_NOCOLOR="1")
    node = {"preflight_sysfs_root": str(sysfs), "preflight_procfs_root": str(proc),
            "preflight_modprobe_dir": str(tmp_path / "modprobe.d"), "deepep_prefix": str(prefix),
            "deepep_cluster_report_dir": str(tmp_path / "report"), "deepep_probe_cache_dir": str(tmp_path / "probes")}
    cmd = [PLAYBOOK_BIN, "-i", os.path.join(REPO, "inventories", "local"), os.path.join(REPO, "playbooks", "site.yml"),
           "-e", json.dumps(node), "-e", json.dumps(given)]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    value = given[var]
    named = ["%s: %r is not accepted" % (var, value)]
    if isinstance(value, (dict, list)):  # each bad entry is named on its own
        named = ["%s: %r is not accepted" % (var, entry) for entry in
                 ([{k: v} for k, v in value.items()] + list(value) if isinstance(value, dict) else value)]
    flat = re.sub(r"\s*\n\s*", " ", out)
    assert any(message in flat or message in out for message in named), (named, out)
    assert "Nothing was changed." in flat
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", out), out
    assert "Discover GPUs, RDMA HCAs" not in out  # stopped before preflight
    assert not pwned.exists() and not prefix.exists() and not (tmp_path / "modprobe.d").exists()
