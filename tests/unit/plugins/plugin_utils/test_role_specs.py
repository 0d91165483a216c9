# -*- coding: utf-8 -*-
"""The roles' documented variables, read once per process: every entry point's options, main's last."""

from __future__ import annotations

from ansible_collections.moe_infra.deepep.plugins.plugin_utils import role_specs


def write_spec(root, role, text):
    meta = root / role / "meta"
    meta.mkdir(parents=True)
    (meta / "argument_specs.yml").write_text(text)


def test_every_entry_point_main_last_read_once(tmp_path):
    write_spec(tmp_path, "a", "argument_specs:\n  main:\n    options:\n      a_x: {type: int}\n"
                              "  other:\n    options:\n      a_x: {type: str}\n      a_y: {type: bool}\n")
    write_spec(tmp_path, "b", "argument_specs:\n  settle:\n    options:\n      b_z: {type: list}\n")
    (tmp_path / "c").mkdir()  # a role without a spec
    options = role_specs.role_options(str(tmp_path))
    assert options == {"a_x": {"type": "int"}, "a_y": {"type": "bool"}, "b_z": {"type": "list"}}
    # Read once: a spec written afterwards is not seen in this process, and callers get their own dict.
    write_spec(tmp_path, "d", "argument_specs:\n  main:\n    options:\n      d_w: {type: str}\n")
    options["extra"] = {}
    assert role_specs.role_options(str(tmp_path)) == {"a_x": {"type": "int"}, "a_y": {"type": "bool"},
                                                      "b_z": {"type": "list"}}


def test_the_collection_roles_options_include_an_entry_point_other_than_main():
    options = role_specs.role_options()
    assert options["deepep_reboot"]["choices"] == ["auto", "never"]  # node_reboot's settle and reboot
    assert "deepep_version" in options and "nvshmem_ibgda_method" in options
