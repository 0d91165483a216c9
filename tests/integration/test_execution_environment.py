# -*- coding: utf-8 -*-
"""execution-environment.yml renders a build context with ansible-builder v3 (`create`, offline), and the
collection, installed as the EE's galaxy stage installs it, hands ansible-builder its own Python and system
requirements (meta/execution-environment.yml) when introspected the way the EE's builder stage does. Building
the image itself needs a registry and is not run here."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def run(*argv, **kwargs):
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=300, check=False, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_ansible_builder_renders_the_context_and_finds_the_collections_requirements(tmp_path):
    # What `make ee-context` does, in a copy of the EE definition (it names the built collection by a relative path).
    project = tmp_path / "project"
    (project / ".build" / "ee-collection").mkdir(parents=True)
    for name in ("execution-environment.yml", "bindep.txt"):
        shutil.copy(os.path.join(REPO, name), str(project / name))
    run(os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), REPO)
    built = [p for p in tmp_path.iterdir() if p.name.endswith(".tar.gz")]
    assert len(built) == 1, built
    shutil.copy(str(built[0]), str(project / ".build" / "ee-collection" / "moe_infra-deepep.tar.gz"))
    context = tmp_path / "context"
    # As `make ee-context` names it: without podman on PATH ansible-builder would write a Dockerfile instead.
    run(os.path.join(BIN, "ansible-builder"), "create", "--output-filename", "Containerfile", "-f",
        "execution-environment.yml", "-c", str(context), cwd=str(project))

    containerfile = (context / "Containerfile").read_text()
    assert 'ANSIBLE_INSTALL_REFS="ansible-core==2.19.14 ansible-runner"' in containerfile
    assert "COPY _build/collection/moe_infra-deepep.tar.gz /build/moe_infra-deepep.tar.gz" in containerfile
    with open(str(context / "_build" / "requirements.yml")) as handle:
        galaxy = yaml.safe_load(handle)
    assert {"name": "/build/moe_infra-deepep.tar.gz", "type": "file"} in galaxy["collections"]
    assert (context / "_build" / "collection" / "moe_infra-deepep.tar.gz").is_file()

    # The galaxy stage: install the collection; the builder stage: introspect what it declares. Only the stage's
    # own path counts: a copy of the collection already in ~/.ansible (molecule's or a user's) would make
    # ansible-galaxy install nothing here ("already installed").
    collections = tmp_path / "collections"
    run(os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", str(collections),
        str(context / "_build" / "collection" / "moe_infra-deepep.tar.gz"),
        env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections)))
    pip, bindep = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    run(sys.executable, str(context / "_build" / "scripts" / "introspect.py"), "introspect", str(collections),
        "--user-pip", str(context / "_build" / "requirements.txt"), "--write-pip", str(pip), "--write-bindep",
        str(bindep))
    wanted_pip = pip.read_text()
    # (ansible-builder leaves out what ansible-core brings itself, such as pyyaml.)
    for line in ("jinja2>=3.1  # from collection moe_infra.deepep", "google-auth>=2.0  # from collection user"):
        assert line in wanted_pip, wanted_pip
    wanted_system = bindep.read_text()
    assert "openssh-client [platform:dpkg]  # from collection moe_infra.deepep" in wanted_system, wanted_system
    assert "git [platform:dpkg]  # from collection moe_infra.deepep" in wanted_system, wanted_system


# Base images with a published lifecycle: the last day each is maintained (Red Hat's RHEL 9 life cycle for UBI 9).
MAINTAINED_UNTIL = {"registry.access.redhat.com/ubi9/ubi": datetime.date(2032, 5, 31)}


def test_the_base_image_is_maintained():
    with open(os.path.join(REPO, "execution-environment.yml")) as handle:
        name = yaml.safe_load(handle)["images"]["base_image"]["name"]
    image = name.rsplit(":", 1)[0]
    assert image in MAINTAINED_UNTIL, "%s: no known lifecycle (fedora:41, the base before, is past its end)" % name
    assert MAINTAINED_UNTIL[image] > datetime.date.today()
    # What UBI's repositories do not carry is not asked of them.
    with open(os.path.join(REPO, "bindep.txt")) as handle:
        rpm = [line.split()[0] for line in handle if "platform:rpm" in line and not line.startswith("#")]
    assert "sshpass" not in rpm and sorted(rpm) == ["git-core", "openssh-clients"]
