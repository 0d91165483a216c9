# -*- coding: utf-8 -*-
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter.system import FilterModule

FILTERS = FilterModule().filters()


def test_bad_policies_name_the_variable():
    with pytest.raises(AnsibleFilterError, match="doca_ofed_policy: 'maybe' is not one of auto, always, never"):
        FILTERS["_doca_ofed_decision"]({"hcas": []}, "maybe")
    with pytest.raises(AnsibleFilterError, match="deepep_reboot: 'always' is not one of auto, never"):
        FILTERS["_deepep_reboot_plan"]({"x": "y"}, "always")


def test_wrong_input_types_are_refused():
    with pytest.raises(AnsibleFilterError, match=r"the RDMA reading \(rdma of deepep_facts\)"):
        FILTERS["_doca_ofed_state"]("mlx5_0")
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_params' result"):
        FILTERS["_nvidia_peermapping_decision"](None, 8)


def test_filters_pass_through_the_decisions():
    plan = FILTERS["_deepep_reboot_plan"]({"doca_ofed": "rocep names"}, "never")
    assert plan["action"] == "pending" and plan["layers"] == ["doca_ofed"]
    assert FILTERS["_dkms_missing"]("", "6.8.0", ["mlnx-ofed-kernel"]) == [
        "mlnx-ofed-kernel is not built for the running kernel 6.8.0 (dkms status)"]
    decision = FILTERS["_nvidia_peermapping_decision"](
        {"driver_loaded": True, "live": False, "configured": True, "reboot_required": True,
         "registry_dwords_live": ""}, "2")
    assert decision["reboot_required"] is True and decision["state"] == "configured_not_live"


# The build layers' packages: a GCP accelerator image has none of them.
def test_prerequisites_for_a_source_build_from_git_in_the_roles_venv():
    layers = {"gdrcopy": {"build": True, "git": True}, "nvshmem": {"build": True, "git": False},
              "deepep": {"build": True, "git": True, "venv": True}}
    result = FILTERS["_deepep_build_prerequisites"](layers, "Debian")
    assert result["problem"] is None
    assert result["packages"] == ["cmake", "g++", "gcc", "git", "libibverbs-dev", "make", "python3-dev",
                                  "python3-venv"]
    by_need = {row["need"]: row["layers"] for row in result["needs"]}
    assert by_need["git"] == ["gdrcopy", "deepep"] and by_need["c++ compiler"] == ["nvshmem", "deepep"]


def test_prerequisites_for_archives_the_nvshmem_wheel_and_a_given_interpreter():
    # Role defaults may arrive as strings.
    layers = {"gdrcopy": {"build": "True", "git": "False"}, "nvshmem": {"build": "False", "git": "True"},
              "deepep": {"build": True, "git": False, "venv": "False"}}
    assert FILTERS["_deepep_build_prerequisites"](layers, "Debian")["packages"] == ["g++", "gcc", "make"]


def test_prerequisites_elsewhere_name_what_to_install():
    result = FILTERS["_deepep_build_prerequisites"]({"gdrcopy": {"build": True, "git": False}}, "RedHat")
    assert result["packages"] == [] and "checks" not in result
    assert result["problem"].startswith("the build layers need c compiler (gdrcopy), make (gdrcopy); they are "
                                        "installed on Debian and Ubuntu only, this node is RedHat")


def test_prerequisites_refuse_an_unknown_layer():
    with pytest.raises(AnsibleFilterError, match="unknown layer"):
        FILTERS["_deepep_build_prerequisites"]({"deepepp": {"build": True}}, "Debian")


def test_prerequisites_checks_pair_each_package_with_its_command():
    result = FILTERS["_deepep_build_prerequisites"]({"nvshmem": {"build": True, "git": False}}, "Debian")
    assert result["checks"] == ["gcc:gcc", "g++:g++", "cmake:cmake", "make:make", "libibverbs-dev:"]
