# -*- coding: utf-8 -*-
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter.system import FilterModule

FILTERS = FilterModule().filters()


def test_bad_policies_name_the_variable():
    with pytest.raises(AnsibleFilterError, match="doca_ofed_policy: 'maybe' is not one of auto, always, never"):
        FILTERS["doca_ofed_decision"]({"hcas": []}, "maybe")
    with pytest.raises(AnsibleFilterError, match="deepep_reboot: 'always' is not one of auto, never"):
        FILTERS["deepep_reboot_plan"]({"x": "y"}, "always")


def test_wrong_input_types_are_refused():
    with pytest.raises(AnsibleFilterError, match="rdma_hca_info's result"):
        FILTERS["doca_ofed_state"]("mlx5_0")
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_params' result"):
        FILTERS["nvidia_peermapping_decision"](None, 8)


def test_filters_pass_through_the_decisions():
    plan = FILTERS["deepep_reboot_plan"]({"doca_ofed": "rocep names"}, "never")
    assert plan["action"] == "pending" and plan["layers"] == ["doca_ofed"]
    assert FILTERS["dkms_missing"]("", "6.8.0", ["mlnx-ofed-kernel"]) == [
        "mlnx-ofed-kernel is not built for the running kernel 6.8.0 (dkms status)"]
    decision = FILTERS["nvidia_peermapping_decision"](
        {"driver_loaded": True, "live": False, "configured": True, "reboot_required": True,
         "registry_dwords_live": ""}, "2")
    assert decision["reboot_required"] is True and decision["state"] == "configured_not_live"
