# -*- coding: utf-8 -*-
from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

import pytest

from ansible_collections.moe_infra.deepep.plugins.module_utils.deepep.envscript import (
    EnvError,
    build_env,
    parse_env_script,
    process_env,
    render_lines,
    sourced_env,
)
from ansible_collections.moe_infra.deepep.tests.fixtures import machines
from ansible_collections.moe_infra.deepep.tests.fixtures.nodes import discovered_node

SRC = "/opt/deepep/deepep/current/src"


def test_gcp_b200_exports_ibgda_with_discovered_gid_and_mapping(tmp_path):
    node = discovered_node("gcp_b200", tmp_path)
    env = build_env(node, SRC)["env"]
    assert env == {
        "NVSHMEM_REMOTE_TRANSPORT": "ibgda", "NVSHMEM_IB_ENABLE_IBGDA": "1", "NVSHMEM_IBGDA_NIC_HANDLER": "gpu",
        "NVSHMEM_DISABLE_CUDA_VMM": "1", "NVSHMEM_ENABLE_NIC_PE_MAPPING": "1", "NVSHMEM_HCA_PREFIX": "rocep",
        "NVSHMEM_IB_GID_INDEX": "3", "DEEP_EP_DEVICE_TO_HCA_MAPPING": machines.gcp_b200(tmp_path / "again"),
        # The mapping's GPU numbers are PCI bus order: CUDA must number them the same way.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_v2_gets_nccls_settings_and_nvshmems_only_with_the_legacy_kernels(tmp_path):
    node = discovered_node("gcp_b200", tmp_path)
    env = build_env(node, SRC, generation="v2")["env"]
    mapping = node["topology"]["mapping"]
    # The mapped ports in GPU order, exact names ("="), each once.
    assert env["NCCL_IB_HCA"] == "=" + ",".join("%s:%s" % (e["hca"], e["port"]) for e in mapping)
    assert len(mapping) == 8 and env["NCCL_IB_HCA"].startswith("=rocep")
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["EP_NIC_NAME"] == node["topology"]["mapping"][0]["hca"]
    assert not [name for name in env if name.startswith("NVSHMEM_")] and "DEEP_EP_DEVICE_TO_HCA_MAPPING" not in env
    legacy = build_env(node, SRC, generation="v2", legacy_kernels=True)
    assert legacy["ibgda"] and legacy["env"]["NVSHMEM_IB_GID_INDEX"] == "3" and legacy["env"]["NCCL_IB_GID_INDEX"] == "3"


def test_v2_turns_gin_off_only_where_no_rdma_port_is_mapped(tmp_path):
    # 2 x H100 without RDMA NICs: NCCL reports no Gin support and test_ep.py's ElasticBuffer stopped (NCCL GIN is
    # unavailable) until EP_DISABLE_GIN=1, DeepEP's documented fall-back within one node.
    no_nics = build_env(discovered_node("h200_no_nics", tmp_path), SRC, generation="v2")
    assert no_nics["env"] == {"EP_DISABLE_GIN": "1"}
    assert "no usable RDMA port" in no_nics["notes"][0]
    assert "EP_DISABLE_GIN" not in build_env(discovered_node("h200_no_nics", tmp_path / "v1"), SRC)["env"]
    rdma = discovered_node("gcp_b200", tmp_path / "rdma")
    assert "EP_DISABLE_GIN" not in build_env(rdma, SRC, generation="v2")["env"]
    assert build_env(rdma, SRC, generation="v2", gin="disabled")["env"]["EP_DISABLE_GIN"] == "1"
    kept = build_env(discovered_node("h200_no_nics", tmp_path / "on"), SRC, generation="v2", gin="enabled")
    assert "EP_DISABLE_GIN" not in kept["env"]
    # The user's own setting wins.
    extra = build_env(discovered_node("h200_no_nics", tmp_path / "x"), SRC, generation="v2",
                      extra={"EP_DISABLE_GIN": "0"})
    assert extra["env"]["EP_DISABLE_GIN"] == "0"
    with pytest.raises(EnvError, match="gin: 'off' is not one of auto, enabled, disabled"):
        build_env(rdma, SRC, generation="v2", gin="off")


def test_infiniband_has_no_gid_index(tmp_path):
    env = build_env(discovered_node("ib_with_frontend", tmp_path), SRC)["env"]
    assert "NVSHMEM_IB_GID_INDEX" not in env and env["NVSHMEM_HCA_PREFIX"] == "mlx5"


def test_no_nics_leaves_ibgda_out(tmp_path):
    result = build_env(discovered_node("h200_no_nics", tmp_path), SRC, extra={"NCCL_NVLS_ENABLE": "0"})
    assert result["env"] == {"NCCL_NVLS_ENABLE": "0"}
    assert result["ibgda"] is False and "KF36" in result["notes"][0]
    forced = build_env(discovered_node("h200_no_nics", tmp_path / "b"), SRC, force_ibgda=True)
    assert forced["env"]["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda"


def test_different_gid_indexes_cannot_be_one_variable(tmp_path):
    node = discovered_node("gcp_b200", tmp_path)
    node["rdma"]["hcas"][1]["ports"][0]["roce_v2_ipv4_gid_index"] = 5
    with pytest.raises(EnvError, match="different RoCE v2 GID indexes .*rocep6s0:1=5"):
        build_env(node, SRC)


@pytest.mark.parametrize("extra, message", [({"PYTHONPATH": "/x"}, "managed by the role"),
                                            ({"BAD-NAME": "1"}, "not a variable name")])
def test_extra_variables_are_checked(tmp_path, extra, message):
    with pytest.raises(EnvError, match=message):
        build_env(discovered_node("h200_no_nics", tmp_path), SRC, extra=extra)


def test_sourcing_twice_is_harmless(tmp_path):
    result = build_env(discovered_node("gcp_b200", tmp_path), SRC, ld_preload="/opt/nvshmem/lib/libnvshmem_host.so.3")
    script = tmp_path / "env.sh"
    script.write_text("\n".join(render_lines(result)) + "\n")
    out = subprocess.run(["bash", "-c", ". %s; . %s; echo \"$PYTHONPATH|$LD_PRELOAD|$NVSHMEM_IB_GID_INDEX\"" % (
        script, script)], env={"PYTHONPATH": "/site", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        check=True).stdout.strip()
    assert out == "%s:/site|/opt/nvshmem/lib/libnvshmem_host.so.3|3" % SRC
    assert process_env(result)["PYTHONPATH"] == SRC


def test_ld_library_path_is_prepended_once(tmp_path):
    node = discovered_node("h200_no_nics", tmp_path)
    result = build_env(node, SRC, ld_library_path="/opt/deepep/gdrcopy/builds/f00/lib")
    assert result["path_env"]["LD_LIBRARY_PATH"] == "/opt/deepep/gdrcopy/builds/f00/lib"
    script = tmp_path / "env.sh"
    script.write_text("\n".join(render_lines(result)) + "\n")
    out = subprocess.run(["bash", "-c", "LD_LIBRARY_PATH=/usr/lib/x; . %s; . %s; echo \"$LD_LIBRARY_PATH\"" % (
        script, script)], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "/opt/deepep/gdrcopy/builds/f00/lib:/usr/lib/x"


def test_ld_library_path_cannot_be_set_as_an_extra(tmp_path):
    with pytest.raises(EnvError, match="deepep_ld_library_path"):
        build_env(discovered_node("h200_no_nics", tmp_path), SRC, extra={"LD_LIBRARY_PATH": "/x"})


def test_hostile_values_stay_literal_when_sourced(tmp_path):
    """deepep_env_extra values with command substitutions, backticks, quotes and a newline: sourcing the script
    runs none of them and each variable holds the value byte for byte."""
    pwned = tmp_path / "pwned"
    values = {"A": "$(touch %s)" % pwned, "B": "`touch %s`" % pwned, "C": "x'; touch %s; '" % pwned,
              "D": "line\ntouch %s" % pwned, "E": '"; touch %s; "' % pwned}
    result = build_env(discovered_node("h200_no_nics", tmp_path), SRC, extra=values)
    script = tmp_path / "env.sh"
    script.write_text("\n".join(render_lines(result)) + "\n")
    out = subprocess.run(["bash", "-c", '. "$1"; for v in A B C D E; do printf "%s\\0" "${!v}"; done', "-",
                          str(script)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    assert out.stdout.split("\0")[:5] == [values[k] for k in "ABCDE"]
    assert not pwned.exists()


def test_jit_cache_is_named_only_to_users_who_can_write_it(tmp_path, request):
    """DeepEP V2 compiles into EP_JIT_CACHE_DIR on a miss: a user who cannot write the shared cache keeps DeepEP's
    default (~/.deep_ep) instead of failing there. Root can; nobody can once the cache is root's 0755."""
    shared = pathlib.Path(tempfile.mkdtemp())  # pytest's tmp_path is root's alone; nobody must reach this one
    request.addfinalizer(lambda: shutil.rmtree(str(shared)))
    shared.chmod(0o755)
    cache = shared / "jit'cache"
    for sub in ("cache", "tmp"):
        (cache / sub).mkdir(parents=True, mode=0o755)
    result_node = discovered_node("h200_no_nics", tmp_path)
    result = build_env(result_node, SRC, jit_cache_dir=str(cache))
    assert result["jit_env"] == {"EP_JIT_CACHE_DIR": str(cache)} and "EP_JIT_CACHE_DIR" not in result["env"]
    assert process_env(result)["EP_JIT_CACHE_DIR"] == str(cache)
    script = shared / "env.sh"
    script.write_text("\n".join(render_lines(result)) + "\n")
    script.chmod(0o644)
    show = ". %s; echo \"[${EP_JIT_CACHE_DIR:-unset}]\"" % script
    as_root = subprocess.run(["bash", "-c", show], capture_output=True, text=True, check=True).stdout.strip()
    assert as_root == "[%s]" % cache
    as_nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", show],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert as_nobody == "[unset]"
    (cache / "cache").chmod(0o777)
    (cache / "tmp").chmod(0o777)
    as_nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", show],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert as_nobody == "[%s]" % cache
    # A value the operator set in deepep_env_extra wins and is exported as given.
    chosen = build_env(result_node, SRC, extra={"EP_JIT_CACHE_DIR": "/scratch/jit"},
                       jit_cache_dir=str(cache))
    assert chosen["jit_env"] == {} and chosen["env"]["EP_JIT_CACHE_DIR"] == "/scratch/jit"


def test_sourced_env_is_what_a_shell_that_sources_the_script_exports(tmp_path):
    result = build_env(discovered_node("gcp_b200", tmp_path), SRC, ld_preload="/opt/nvshmem/lib/libnvshmem_host.so.3",
                       ld_library_path="/opt/deepep/gdrcopy/builds/f00/lib")
    script = tmp_path / "env.sh"
    script.write_text("\n".join(render_lines(result)) + "\n")
    names = sorted(process_env(result))
    # A login with a search path of its own (a GKE container's LD_LIBRARY_PATH) and one without (PYTHONPATH).
    login = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"}
    shown = subprocess.run(["bash", "-c", '. "$1"; shift; for v in "$@"; do printf "%s=%s\\0" "$v" "${!v}"; done', "-",
                            str(script)] + names, env=login, capture_output=True, text=True, check=True).stdout
    by_shell = dict(item.split("=", 1) for item in shown.split("\0") if item)
    assert sourced_env(parse_env_script(str(script))["vars"], login) == by_shell
    assert by_shell["LD_LIBRARY_PATH"] == "/opt/deepep/gdrcopy/builds/f00/lib:" + login["LD_LIBRARY_PATH"]
    assert by_shell["PYTHONPATH"] == SRC and by_shell["LD_PRELOAD"] == "/opt/nvshmem/lib/libnvshmem_host.so.3"
    # Nothing inherited: the script's values as they are (what DeepEP's tests get, process_env).
    assert sourced_env(process_env(result), {}) == process_env(result)
