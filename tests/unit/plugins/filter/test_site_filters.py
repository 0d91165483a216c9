# -*- coding: utf-8 -*-
"""The site filters: registered under their documented names, refuse input of the wrong shape with a message
naming the filter, and pass the module_utils results through."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.moe_infra.deepep.plugins.filter.site import FilterModule

FILTERS = FilterModule().filters()
NO_NICS = {"hcas": [], "mlx5_api_header": None, "dmabuf_data_direct": False, "mellanox_pci_devices": [],
           "ofed_version": None}


def test_every_site_filter_is_registered():
    assert sorted(FILTERS) == ["_deepep_fanout_report", "_deepep_fanout_roles", "_deepep_interpreter_problems", "_deepep_proxy_env",
                               "_deepep_run_layers", "_deepep_site_problems", "_deepep_source_nvshmem_problems"]


# The arguments after the input, for the filters that take some.
EXTRA_ARGS = {"_deepep_source_nvshmem_problems": ("source",), "_deepep_interpreter_problems": ("v2", "/usr/bin/python3"),
              "_deepep_fanout_report": ({}, "DeepEP")}


@pytest.mark.parametrize("name, value", [
    ("_deepep_site_problems", ["deepep_version"]),
    ("_deepep_source_nvshmem_problems", "rocep4s0"),
    ("_deepep_fanout_roles", {"host": "n1"}),
    ("_deepep_interpreter_problems", "/usr/bin/python3"),
    ("_deepep_fanout_report", ["n1"]),
])
def test_wrong_shapes_are_refused_naming_the_filter(name, value):
    with pytest.raises(AnsibleFilterError, match="^%s: expected" % name):
        FILTERS[name](value, *EXTRA_ARGS.get(name, ()))


def test_source_nvshmem_on_a_node_without_nics():
    (problem,) = FILTERS["_deepep_source_nvshmem_problems"](NO_NICS, "source", "auto", ["/usr/include"])
    assert "no infiniband/mlx5_api.h under /usr/include" in problem["msg"]
    assert FILTERS["_deepep_source_nvshmem_problems"](NO_NICS, "wheel") == []


def test_fanout_roles_offline_miss_is_a_filter_error():
    plans = [{"host": "n1", "fingerprint": "abc", "needs": True, "cached": False}]
    assert FILTERS["_deepep_fanout_roles"](plans) == {"n1": "build"}
    with pytest.raises(AnsibleFilterError, match="offline: the cache lacks the build n1"):
        FILTERS["_deepep_fanout_roles"](plans, True)


def test_fanout_report_takes_each_hosts_fingerprint_from_its_plan():
    roles = {"n1": "build", "n2": "wait", "n3": "none"}
    plans = {"n1": {"fingerprint": "f1", "action": "build"}, "n2": {"fingerprint": "f1", "action": "build"},
             "n3": {"fingerprint": "f0", "action": "none"}}
    assert FILTERS["_deepep_fanout_report"](roles, plans, "DeepEP") == [
        "DeepEP f1: build n1; wait n2", "DeepEP f0: none n3"]


ALL_LAYERS = ["doca_ofed", "cuda", "nvidia_driver", "nvidia_peermapping", "memlock", "gdrcopy", "nvshmem_ibgda", "nccl",
              "deepep"]


@pytest.mark.parametrize("run_tags, skip_tags, layers", [
    (["all"], [], ALL_LAYERS),
    # V2's NCCL comes with DeepEP (a torch upgrade puts torch's own NCCL back); a step tag selects DeepEP alone.
    (["deepep"], [], ["nccl", "deepep"]),
    (["nccl"], [], ["nccl"]),
    (["deepep_build"], [], ["deepep"]),
    (["all"], ["deepep_verify"], ALL_LAYERS),
    (["all"], ["system"], ["nvshmem_ibgda", "nccl", "deepep"]),
    (["system"], ["cuda"], ["doca_ofed", "nvidia_driver", "nvidia_peermapping", "memlock", "gdrcopy"]),
    # Each system layer has a tag of its own (--tags memlock was refused as naming no layer before).
    (["memlock"], [], ["memlock"]),
    (["nvidia_driver"], [], ["nvidia_driver"]),
    (["gdrcopy", "nvshmem_ibgda"], [], ["gdrcopy", "nvshmem_ibgda"]),
    (["preflight"], [], []),
    (["tagged"], ["deepep"], ALL_LAYERS[:-2]),
    ([], None, ALL_LAYERS),
])
def test_run_layers_follow_ansible_tag_rules(run_tags, skip_tags, layers):
    assert FILTERS["_deepep_run_layers"](run_tags, skip_tags) == layers


@pytest.mark.parametrize("run_tags, skip_tags", [("deepep", []), (["deepep"], "deepep_verify"), ({"a": 1}, [])])
def test_run_layers_refuse_tags_that_are_not_lists(run_tags, skip_tags):
    with pytest.raises(AnsibleFilterError, match="^_deepep_run_layers: expected ansible_(run|skip)_tags as a list"):
        FILTERS["_deepep_run_layers"](run_tags, skip_tags)


def test_fanout_roles_from_the_registered_plans():
    plans = {"n1": {"fingerprint": "a", "action": "none", "cached": True},
             "n2": {"fingerprint": "b", "action": "build", "cached": False},
             "n3": {"fingerprint": "b", "action": "build"},
             "n4": {"fingerprint": "a", "action": "build", "cached": True},
             "n5": {"skipped": True, "changed": False}}  # the layer is off there: no part in the fan-out
    assert FILTERS["_deepep_fanout_roles"](plans) == {"n1": "none", "n2": "build", "n3": "wait", "n4": "cache"}
    with pytest.raises(AnsibleFilterError, match="expected {host: source_build's plan"):
        FILTERS["_deepep_fanout_roles"]({"n1": {"fingerprint": "a"}})


def test_deepep_proxy_env_sets_both_spellings_of_what_is_set():
    proxy_env = FilterModule().filters()["_deepep_proxy_env"]
    assert proxy_env("", "", "") == {}
    assert proxy_env("http://p:3128", "", "localhost,.internal") == {
        "http_proxy": "http://p:3128", "HTTP_PROXY": "http://p:3128",
        "no_proxy": "localhost,.internal", "NO_PROXY": "localhost,.internal"}


def test_interpreter_problems_take_the_nccl_layers_settings_of_the_run():
    refuse = FILTERS["_deepep_interpreter_problems"]
    no_pip = {"torch": {"version": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9"}, "pip": None,
              "nccl_wheel": {"package": "nvidia-nccl-cu13", "version": "2.28.9", "dir": "/x"}}
    # The role's defaults (wheel, 2.30.7) for the variables the site leaves out.
    (problem,) = refuse(no_pip, "v2", "/p", nccl={})
    assert "it has no pip, which nccl_method wheel runs (python -m pip) to install NCCL 2.30.7" in problem["msg"]
    assert refuse(no_pip, "v2", "/p", nccl={"nccl_method": "source", "nccl_git_ref": "v2.30.7-1"}) == []
    # Without the layer in the run: V2 is judged on the NCCL torch loads now.
    (old,) = refuse(no_pip, "v2", "/p", nccl=None)
    assert "its NCCL is 2.28.9" in old["msg"]
    with pytest.raises(AnsibleFilterError, match="nccl: expected the nccl_. variables"):
        refuse(no_pip, "v2", "/p", nccl="wheel")
