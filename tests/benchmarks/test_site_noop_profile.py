# -*- coding: utf-8 -*-
"""Not a test of behaviour (CI does not collect tests/benchmarks): the task profile of a no-op site.yml on the
integration tests' fixture node (4 x H200 sysfs, no NICs, the stand-in interpreter and sources), with every
layer's tree where the facts read it, as on the GPU test machine. It counts the task starts and module calls a
no-op run makes, on a machine without a GPU:

    NOOP_PROFILE_DIR=/tmp/noop NOOP_NVSHMEM=source .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/benchmarks/test_site_noop_profile.py

writes first.log (the run that provisions), noop.log and noop.profile.json (the second run, changed=0)."""
from __future__ import annotations

import json
import os

from ansible_collections.moe_infra.deepep.tests.integration import test_deepep_playbook as playbook_tests

# The integration tests' fixtures: the fixture node and what it is made from.
shared_inputs = playbook_tests.shared_inputs
node = playbook_tests.node

OUT = os.environ.get("NOOP_PROFILE_DIR", "/tmp/noop-profile")


def test_site_noop_profile(node):  # noqa: F811  (the fixture above)
    os.makedirs(OUT, exist_ok=True)
    playbook_tests.write_nvidia_params(str(node["tmp"] / "proc"))
    playbook_tests.write_nvidia_module_version(str(node["sysfs"]))
    # rdma-core's headers as DOCA-OFED ships them, so that a source NVSHMEM is accepted.
    (node["rdma_include"] / "infiniband" / "mlx5_api.h").write_text("#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT 1\n")
    site = ["-e", "@%s" % os.path.join(playbook_tests.REPO, "playbooks", "vars", "report-only.yml"), "-e", json.dumps({
        "nvshmem_ibgda_method": os.environ.get("NOOP_NVSHMEM", "wheel"),
        "preflight_rdma_include_dirs": [str(node["rdma_include"])],
        "doca_ofed_sysfs_root": str(node["sysfs"]), "doca_ofed_include_dirs": [str(node["rdma_include"])],
        "nvidia_peermapping_sysfs_root": str(node["sysfs"]),
        "nvidia_peermapping_procfs_root": str(node["tmp"] / "proc"),
        "nvidia_peermapping_modprobe_dir": str(node["tmp"] / "modprobe.d"),
        "nvidia_driver_sysfs_root": str(node["sysfs"]), "nvidia_driver_procfs_root": str(node["tmp"] / "proc"),
        "cuda_home_link": node["cuda"], "cuda_version": "13.0", "deepep_site_report_dir": str(node["tmp"] / "site"),
        "memlock_root": str(node["tmp"]), "memlock_verify_user": ""})]
    rc, changed, out = playbook_tests.run(node, *site, playbook="site.yml")
    with open(os.path.join(OUT, "first.log"), "w") as handle:
        handle.write(out)
    assert rc == 0, out
    os.environ["ANSIBLE_CALLBACKS_ENABLED"] = "moe_infra.deepep.task_profile"
    os.environ["MOE_INFRA_TASK_PROFILE_JSON"] = os.path.join(OUT, "noop.profile.json")
    try:
        rc, changed, out = playbook_tests.run(node, *site, "--skip-tags", "deepep_verify", playbook="site.yml")
    finally:
        del os.environ["ANSIBLE_CALLBACKS_ENABLED"], os.environ["MOE_INFRA_TASK_PROFILE_JSON"]
    with open(os.path.join(OUT, "noop.log"), "w") as handle:
        handle.write(out)
    assert rc == 0 and changed == 0, out
