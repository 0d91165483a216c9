# -*- coding: utf-8 -*-
"""scripts/check_doc_pointers.py (run by `make docs`) finds each kind of broken pointer in a fixture tree laid out
like this repository, and passes this repository itself."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_loader = importlib.machinery.SourceFileLoader("check_doc_pointers", os.path.join(REPO, "scripts", "check_doc_pointers.py"))
_spec = importlib.util.spec_from_loader("check_doc_pointers", _loader)
checker = importlib.util.module_from_spec(_spec)
_loader.exec_module(checker)


def tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


GOOD = {
    "README.md": "# project\n\n## Quick start: your cluster\n\nSee [usage](docs/usage.md#gcp-managed-instance-groups).\n",
    "docs/usage.md": "# Running\n\n## GCP managed instance groups\n\nBack to the [README](../README.md).\n",
    "requirements/gcp-collections.yml": "collections: []\n",
    "requirements/gcp.txt": "# besides requirements/gcp-collections.yml\ngoogle-auth==2.62.2\n",
    "playbooks/validate.yml": ("- name: x\n  msg: >-\n    set credentials (docs/usage.md, \"GCP managed\n"
                               "    instance groups\"); DeepEP's tests/elastic/test_ep.py is not ours\n"),
    "docs/results/old/README.md": "Ran playbooks/gone.yml that day.\n",
}


def test_a_tree_whose_pointers_resolve_passes(tmp_path):
    assert checker.problems(tree(tmp_path, GOOD)) == []


def test_each_kind_of_broken_pointer_is_named(tmp_path):
    bad = dict(GOOD)
    bad["README.md"] = GOOD["README.md"] + "[gone](docs/gone.md) [anchor](docs/usage.md#no-such)\n"
    bad["docs/compatibility.md"] = 'The ids are the doctor\'s (README, "Doctor: the known failure modes").\n'
    bad["requirements/gcp.txt"] = "# besides inventories/gcp-mig/requirements.yml\n"
    found = checker.problems(tree(tmp_path, bad))
    assert found == [
        "README.md:6: link docs/gone.md: no such file",
        "README.md:6: link docs/usage.md#no-such: no such heading",
        'docs/compatibility.md: README.md section "Doctor: the known failure modes" does not exist',
        "requirements/gcp.txt:1: inventories/gcp-mig/requirements.yml does not exist",
    ], found


def test_this_repository_has_no_broken_pointer():
    assert checker.problems(REPO) == []


def test_links_to_this_repository_are_checked_here_and_left_to_the_web_in_the_artifact(tmp_path):
    files = dict(GOOD)
    files["galaxy.yml"] = "repository: https://example.org/moe/deepep\n"
    files["docs/results/run-1/README.md"] = "# run 1\n"
    files["README.md"] = GOOD["README.md"] + (
        "[run 1](https://example.org/moe/deepep/blob/main/docs/results/run-1/README.md) "
        "[run 2](https://example.org/moe/deepep/tree/main/docs/results/run-2/)\n")
    root = tree(tmp_path, files)
    assert checker.problems(root) == [
        "README.md:6: link https://example.org/moe/deepep/tree/main/docs/results/run-2/: no such file"]
    assert checker.problems(root, repository_links_local=False) == []
