# -*- coding: utf-8 -*-
"""`ansible-galaxy collection build` ships what users run and read, and none of the project's own tests,
scripts, CI, measured results or GPU test inventory."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GALAXY = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
TOP_LEVEL = {"CHANGELOG.md", "FILES.json", "LICENSE", "MANIFEST.json", "README.md", "docs", "inventories", "meta",
             "playbooks", "plugins", "requirements", "roles",
             # What ansible-builder reads for an execution environment (meta/execution-environment.yml names them).
             "bindep.txt", "requirements.txt", "requirements.yml"}
NEVER = ("tests/", "molecule/", "scripts/", ".ci/", "docs/results/", "inventories/gpu-test/", ".venv/", ".build/")


def test_the_built_collection_holds_what_users_need_only(tmp_path):
    result = subprocess.run([GALAXY, "collection", "build", "--output-path", str(tmp_path), REPO], cwd=REPO,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    version = yaml.safe_load(open(os.path.join(REPO, "galaxy.yml")))["version"]
    with tarfile.open(str(tmp_path / ("moe_infra-deepep-%s.tar.gz" % version))) as tar:
        names = [member.name for member in tar.getmembers()]
        license_text = tar.extractfile("LICENSE").read().decode()
    assert {name.split("/")[0] for name in names} == TOP_LEVEL, sorted(names)
    assert [name for name in names if name.startswith(NEVER) or name + "/" in NEVER] == []
    assert [name for name in names if name.endswith((".pyc", ".tar.gz", ".log"))] == []
    # Every role, module, playbook and example inventory is there.
    for path in ("roles/deepep/tasks/main.yml", "plugins/modules/source_build.py", "playbooks/site.yml",
                 "inventories/b200-cluster/hosts.yml", "inventories/gcp-mig/gcp_compute.yml",
                 "requirements/gcp-collections.yml", "meta/runtime.yml", "meta/execution-environment.yml"):
        assert path in names, path
    for role in os.listdir(os.path.join(REPO, "roles")):
        assert "roles/%s/meta/argument_specs.yml" % role in names, role
    assert "Apache License" in license_text and "Version 2.0" in license_text


def fresh_checkout(tmp_path):
    """The tracked files as they are now, in tmp_path/checkout (a fresh clone of the working tree)."""
    checkout = tmp_path / "checkout"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if name and os.path.lexists(os.path.join(REPO, name)):
            target = checkout / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(REPO, name), str(target), follow_symlinks=False)
    return checkout


def test_a_users_own_inventory_is_neither_committed_nor_shipped(tmp_path):
    # The README's step 2: the sample copied to inventories/site-<name>, with the user's addresses.
    checkout = fresh_checkout(tmp_path)
    mine = checkout / "inventories" / "site-prod"
    shutil.copytree(str(checkout / "inventories" / "b200-cluster"), str(mine))
    (mine / "hosts.yml").write_text("all:\n  hosts:\n    node-0: {ansible_host: 10.128.0.10}\n")
    ignored = subprocess.run(["git", "-C", REPO, "check-ignore", "--no-index", "inventories/site-prod/hosts.yml"],
                             capture_output=True, text=True, check=False)
    assert ignored.returncode == 0 and ignored.stdout.strip() == "inventories/site-prod/hosts.yml", ignored
    result = subprocess.run([GALAXY, "collection", "build", "--output-path", str(tmp_path), str(checkout)],
                            cwd=str(checkout), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    version = yaml.safe_load(open(os.path.join(REPO, "galaxy.yml")))["version"]
    with tarfile.open(str(tmp_path / ("moe_infra-deepep-%s.tar.gz" % version))) as tar:
        names = tar.getnames()
    assert "inventories/b200-cluster/hosts.yml" in names
    assert [n for n in names if n.startswith("inventories/site-")] == []


def test_the_readme_command_works_from_a_fresh_checkout_after_make_install(tmp_path):
    # What a new user types (docs/usage.md): `make install`, then from the repository root
    # `ansible-playbook site.yml -i inventories/b200-cluster`, with no ANSIBLE_COLLECTIONS_PATH of their own.
    # The checkout is the tracked files as they are now; `make install`'s step is the galaxy install below.
    checkout = fresh_checkout(tmp_path)
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env["HOME"] = str(tmp_path / "home")  # no collection of the user's own under ~/.ansible
    bin_dir = os.path.dirname(sys.executable)
    install = subprocess.run([GALAXY, "collection", "install", "--force", "--offline", "-p", ".build/installed", "."],
                             cwd=str(checkout), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    for playbook in ("site.yml", "playbooks/site.yml"):
        result = subprocess.run([os.path.join(bin_dir, "ansible-playbook"), playbook, "-i", "inventories/b200-cluster",
                                 "--syntax-check"], cwd=str(checkout), env=env, capture_output=True, text=True,
                                timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "was not found" not in result.stdout + result.stderr


def test_the_collection_recipe_works_from_a_fresh_collections_path(tmp_path):
    # docs/usage.md "Use it as a collection": the artifact installed from a requirements file into ./collections,
    # a playbook of the user's own importing moe_infra.deepep.site, an inventory copied from the installed sample.
    result = subprocess.run([GALAXY, "collection", "build", "--output-path", str(tmp_path), REPO], cwd=REPO,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    version = yaml.safe_load(open(os.path.join(REPO, "galaxy.yml")))["version"]
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.yml").write_text(yaml.safe_dump({"collections": [
        {"name": str(tmp_path / ("moe_infra-deepep-%s.tar.gz" % version)), "type": "file"}]}))
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env["HOME"] = str(tmp_path / "home")
    install = subprocess.run([GALAXY, "collection", "install", "-r", "requirements.yml", "-p", "./collections"],
                             cwd=str(project), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    installed = project / "collections" / "ansible_collections" / "moe_infra" / "deepep"
    shutil.copytree(str(installed / "inventories" / "b200-cluster"), str(project / "inventory"))
    (project / "site.yml").write_text("- name: DeepEP stack\n  ansible.builtin.import_playbook: moe_infra.deepep.site\n")
    env["ANSIBLE_COLLECTIONS_PATH"] = str(project / "collections")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    for target in ("site.yml", "moe_infra.deepep.site"):
        run = subprocess.run([playbook, target, "-i", "inventory", "--syntax-check"], cwd=str(project), env=env,
                             capture_output=True, text=True, timeout=300, check=False)
        assert run.returncode == 0 and "was not found" not in run.stdout + run.stderr, run.stdout + run.stderr
    # A real run on the sample inventory (no node listed) stops before touching anything, saying why.
    run = subprocess.run([playbook, "site.yml", "-i", "inventory"], cwd=str(project), env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode != 0 and "The inventory gave no host to run on" in run.stdout, run.stdout + run.stderr


def test_the_links_of_the_shipped_docs_resolve_inside_the_artifact(tmp_path):
    # The artifact leaves out the measured results: the shipped docs link to them on the repository's site
    # (galaxy.yml's repository), which scripts/check_doc_pointers.py checks against the tree in the repository.
    result = subprocess.run([GALAXY, "collection", "build", "--output-path", str(tmp_path), str(fresh_checkout(tmp_path))],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    version = yaml.safe_load(open(os.path.join(REPO, "galaxy.yml")))["version"]
    unpacked = tmp_path / "unpacked"
    with tarfile.open(str(tmp_path / ("moe_infra-deepep-%s.tar.gz" % version))) as tar:
        tar.extractall(str(unpacked), **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    loader = importlib.machinery.SourceFileLoader("check_doc_pointers",
                                                  os.path.join(REPO, "scripts", "check_doc_pointers.py"))
    checker = importlib.util.module_from_spec(importlib.util.spec_from_loader("check_doc_pointers", loader))
    loader.exec_module(checker)
    dead = [p for p in checker.problems(str(unpacked), repository_links_local=False) if ": link " in p]
    assert dead == []
