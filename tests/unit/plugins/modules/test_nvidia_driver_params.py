# -*- coding: utf-8 -*-
from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.moe_infra.deepep.plugins.modules import nvidia_driver_params as module
from ansible_collections.moe_infra.deepep.tests.fixtures.sysfs_tree import write_nvidia_params

PEER = {"PeerMappingOverride": 1}
STREAM = {"EnableStreamMemOPs": 1}
OUR_LINE = 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;" NVreg_EnableStreamMemOPs=1\n'


@pytest.fixture
def node(tmp_path):
    proc = tmp_path / "proc"
    modprobe = tmp_path / "modprobe.d"
    modprobe.mkdir()
    return proc, modprobe


def params(run_module, node, check_mode=False, diff=False, **args):
    proc, modprobe = node
    args.setdefault("registry_dwords", PEER)
    args.update(procfs_root=str(proc), modprobe_dir=str(modprobe))
    return run_module(module, args, check_mode=check_mode, diff=diff)


def ok(run_module, node, **kwargs):
    result, failed = params(run_module, node, **kwargs)
    assert not failed, result
    return result


def test_regkey_absent_not_configured_not_live(run_module, node):
    write_nvidia_params(node[0], registry_dwords="")
    result = ok(run_module, node)
    assert result["changed"] is False
    assert result["live"] is False and result["configured"] is False
    assert result["mismatched"] == ["PeerMappingOverride"]
    assert result["reboot_required"] is False
    assert result["registry_dwords_live"] == ""
    assert result["settings"] == [{"name": "PeerMappingOverride", "kind": "registry_dword", "desired": 1,
                                   "live": None, "configured": None, "configured_in": None}]
    assert "not configured and not live" in result["msg"]


def test_configured_not_live_requires_reboot(run_module, node):
    write_nvidia_params(node[0], registry_dwords="")
    (node[1] / "nvidia-deepep.conf").write_text(OUR_LINE)
    result = ok(run_module, node, module_params=STREAM)
    assert result["configured"] is True and result["live"] is False
    assert result["reboot_required"] is True
    assert result["mismatched"] == ["PeerMappingOverride", "EnableStreamMemOPs"]
    assert "reboot" in result["msg"]


@pytest.mark.parametrize("registry, old_form", [
    ("PeerMappingOverride=1;", None),
    ("PeerMappingOverride=0x1;RMSomethingElse=0x10;", None),
    ("", 1),
])
def test_live_in_every_params_form(run_module, node, registry, old_form):
    write_nvidia_params(node[0], registry_dwords=registry, stream_memops=1, old_form=old_form)
    (node[1] / "other.conf").write_text(
        'options nvidia NVreg_RegistryDwords="PeerMappingOverride=0x01;" NVreg_EnableStreamMemOPs=1\n')
    result = ok(run_module, node, module_params=STREAM)
    assert result["live"] is True and result["configured"] is True
    assert result["reboot_required"] is False and result["mismatched"] == []
    assert result["settings"][0]["configured_in"].endswith("other.conf")


def test_driver_not_loaded(run_module, node):
    result = ok(run_module, node, state="present")
    assert result["driver_loaded"] is False and result["live"] is None
    assert result["reboot_required"] is False and result["changed"] is True
    assert "not loaded" in result["msg"]


def test_present_writes_once_then_is_idempotent(run_module, node):
    write_nvidia_params(node[0])
    first = ok(run_module, node, module_params=STREAM, state="present")
    conf = node[1] / "nvidia-deepep.conf"
    assert first["changed"] is True and first["reboot_required"] is True
    assert conf.read_text().splitlines()[1:] == [OUR_LINE.strip()]
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    second = ok(run_module, node, module_params=STREAM, state="present")
    assert second["changed"] is False and second["reboot_required"] is True
    assert conf.read_text().count("options nvidia") == 1
    assert [p for p in os.listdir(node[1]) if p.startswith(".")] == []


def test_check_mode_predicts_and_writes_nothing(run_module, node):
    write_nvidia_params(node[0])
    result = ok(run_module, node, module_params=STREAM, state="present", check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["configured"] is True and result["reboot_required"] is True
    assert result["diff"]["before"] == "" and OUR_LINE in result["diff"]["after"]
    assert os.listdir(node[1]) == []


def test_changed_value_rewrites_and_diffs(run_module, node):
    write_nvidia_params(node[0])
    conf = node[1] / "nvidia-deepep.conf"
    conf.write_text("options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=0;\"\n")
    result = ok(run_module, node, state="present", diff=True)
    assert result["changed"] is True
    assert "PeerMappingOverride=0;" in result["diff"]["before"]
    assert 'NVreg_RegistryDwords="PeerMappingOverride=1;"' in conf.read_text()


def test_other_registry_keys_are_carried_over(run_module, node):
    write_nvidia_params(node[0])
    (node[1] / "local.conf").write_text('options nvidia NVreg_RegistryDwords="RMFoo=16;"\n')
    result = ok(run_module, node, state="present")
    assert 'NVreg_RegistryDwords="RMFoo=16;PeerMappingOverride=1;"' in (node[1] / "nvidia-deepep.conf").read_text()
    assert "local.conf" in result["notes"][0]
    assert result["configured"] is True


def test_later_file_overriding_fails_and_writes_nothing(run_module, node):
    write_nvidia_params(node[0])
    (node[1] / "zz-site.conf").write_text("options nvidia NVreg_EnableStreamMemOPs=0\n")
    result, failed = params(run_module, node, module_params=STREAM, state="present")
    assert failed
    assert "zz-site.conf" in result["msg"] and "EnableStreamMemOPs" in result["msg"]
    assert not (node[1] / "nvidia-deepep.conf").exists()


def test_absent_removes_the_file(run_module, node):
    write_nvidia_params(node[0])
    (node[1] / "nvidia-deepep.conf").write_text(OUR_LINE)
    result = ok(run_module, node, state="absent")
    assert result["changed"] is True and result["configured"] is False
    assert not (node[1] / "nvidia-deepep.conf").exists()
    assert ok(run_module, node, state="absent")["changed"] is False


def test_files_not_ending_in_conf_and_comments_are_ignored(run_module, node):
    write_nvidia_params(node[0])
    (node[1] / "nvidia.conf.bak").write_text(OUR_LINE)
    (node[1] / "commented.conf").write_text("# " + OUR_LINE + "options nvidia-drm modeset=1\n")
    result = ok(run_module, node)
    assert result["configured"] is False


@pytest.mark.parametrize("args, message", [
    ({"state": "present", "registry_dwords": {}}, "needs registry_dwords or module_params"),
    ({"registry_dwords": {"PeerMappingOverride": "yes"}}, "PeerMappingOverride='yes'"),
    ({"registry_dwords": {"Bad Key": 1}}, "Bad Key"),
    ({"module_params": {"RegistryDwords": 1}}, "through registry_dwords"),
    ({"conf_name": "../evil.conf"}, "conf_name"),
    ({"conf_name": "nvidia.txt"}, "ending in .conf"),
])
def test_bad_input_is_rejected_with_a_message(run_module, node, args, message):
    write_nvidia_params(node[0])
    result, failed = params(run_module, node, **args)
    assert failed and message in result["msg"]
    assert os.listdir(node[1]) == []


@pytest.fixture
def initramfs_tool(tmp_path, monkeypatch):
    """A stand-in update-initramfs first on PATH that records each call (the real one rebuilds /boot)."""
    bin_dir = tmp_path / "sbin"
    bin_dir.mkdir()
    calls = tmp_path / "initramfs-calls"
    tool = bin_dir / "update-initramfs"
    tool.write_text('#!/bin/sh\necho "$@" >> %s\n' % calls)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(module, "SBIN_DIRS", [])
    return calls


def test_initramfs_refreshed_once_per_conf_content(run_module, node, tmp_path, initramfs_tool):
    write_nvidia_params(node[0])
    stamp = tmp_path / "state" / "nvidia-peermapping.initramfs"
    args = dict(state="present", initramfs="auto", initramfs_stamp=str(stamp))
    predicted = ok(run_module, node, check_mode=True, **args)
    assert predicted["changed"] is True and predicted["initramfs"]["refreshed"] is True
    assert not initramfs_tool.exists() and not stamp.exists()
    first = ok(run_module, node, **args)
    assert first["initramfs"] == {"tool": "update-initramfs", "refreshed": True, "stamp": str(stamp)}
    assert initramfs_tool.read_text() == "-u -k all\n"
    conf = (node[1] / "nvidia-deepep.conf").read_bytes()
    assert stamp.read_text().strip() == hashlib.sha256(conf).hexdigest()
    again = ok(run_module, node, **args)
    assert again["changed"] is False and again["initramfs"]["refreshed"] is False
    assert initramfs_tool.read_text() == "-u -k all\n"  # not run a second time


def test_initramfs_refreshed_when_cut_off_after_the_write(run_module, node, tmp_path, initramfs_tool):
    # A run killed between the conf write and the refresh: the conf is there, the stamp is not.
    write_nvidia_params(node[0])
    ok(run_module, node, state="present")
    stamp = tmp_path / "nvidia-peermapping.initramfs"
    result = ok(run_module, node, state="present", initramfs="auto", initramfs_stamp=str(stamp))
    assert result["changed"] is True and result["initramfs"]["refreshed"] is True
    assert initramfs_tool.read_text() == "-u -k all\n" and stamp.is_file()


def test_initramfs_without_a_tool(run_module, node, tmp_path, initramfs_tool, monkeypatch):
    write_nvidia_params(node[0])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    stamp = tmp_path / "stamp"
    # A tool that is not there, asked for by name: refused before the conf file is written.
    result, failed = params(run_module, node, state="present", initramfs="dracut", initramfs_stamp=str(stamp))
    assert failed and "initramfs: dracut is not on this node" in result["msg"]
    assert os.listdir(node[1]) == [] and not stamp.exists()
    result = ok(run_module, node, state="present", initramfs="auto", initramfs_stamp=str(stamp))
    assert result["initramfs"]["tool"] == "none" and not stamp.exists()


@pytest.mark.parametrize("state", ["absent", "configured_not_live", "live", "driver_not_loaded", "other_value"])
def test_a_subset_of_a_query_is_the_query_of_that_subset(run_module, node, state):
    """The regkey layer reuses preflight's query of more settings (nvidia_driver_params_subset): what it derives
    must be exactly what its own query of fewer settings returns, in every state of the node."""
    from ansible_collections.moe_infra.deepep.plugins.filter.system import nvidia_driver_params_subset
    if state != "driver_not_loaded":
        write_nvidia_params(node[0], registry_dwords="PeerMappingOverride=1;" if state == "live" else "",
                            stream_memops=1)
    if state in ("configured_not_live", "live"):
        (node[1] / "nvidia-deepep.conf").write_text(OUR_LINE)
    if state == "other_value":
        (node[1] / "nvidia-deepep.conf").write_text('options nvidia NVreg_RegistryDwords="PeerMappingOverride=0;"\n')
    both = ok(run_module, node, registry_dwords=PEER, module_params=STREAM)
    alone = ok(run_module, node, registry_dwords=PEER)
    derived = nvidia_driver_params_subset(both, PEER, {})
    left_out = ("changed", "invocation", "notes", "initramfs")
    assert {k: v for k, v in derived.items() if k not in left_out} == \
        {k: v for k, v in alone.items() if k not in left_out}
    # The layer's decision is made from the derived reading: it must say the same.
    assert derived["live"] == alone["live"] and derived["reboot_required"] == alone["reboot_required"]
    # A setting the reading lacks, or another desired value: no answer, the layer reads itself.
    assert nvidia_driver_params_subset(alone, PEER, STREAM) is None
    assert nvidia_driver_params_subset(both, {"PeerMappingOverride": 0}, {}) is None
    assert nvidia_driver_params_subset(both, {"PeerMappingOverride": "0x1"}, {}) is not None
