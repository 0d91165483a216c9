# Two commands: `make provision` (the main job) and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
INVENTORY ?= inventories/local
PLAYBOOK ?= playbooks/site.yml
# Offline machines: a folder of wheels to install from instead of the index.
WHEELS ?=
# Extra ansible-playbook arguments, e.g. ARGS="--check --diff" or ARGS="--tags deepep".
ARGS ?=

BIN := $(CURDIR)/$(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check $(if $(WHEELS),--no-index --find-links $(WHEELS))
INSTALLED := $(CURDIR)/.build/installed
DEV := $(CURDIR)/.build/dev
SANITY := $(or $(TMPDIR),/tmp)/moe_infra_deepep_sanity/ansible_collections/moe_infra/deepep
TEST_PYTHON_VERSION = $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')

.PHONY: provision facts install test check units integration lint sanity molecule docs clean

$(BIN)/.runtime: requirements/runtime.txt
	WHEELS=$(WHEELS) ./scripts/make-venv $(PYTHON) $(VENV)
	$(PIP) -r requirements/runtime.txt
	touch $@

$(BIN)/.test: $(BIN)/.runtime requirements/test.txt
	$(PIP) -r requirements/test.txt
	touch $@

## install: build and install this collection for the playbooks (no Galaxy access needed)
install: $(BIN)/.runtime
	ANSIBLE_COLLECTIONS_PATH=$(INSTALLED) $(BIN)/ansible-galaxy collection install --force --offline -p $(INSTALLED) $(CURDIR) >/dev/null

## provision: run playbooks/site.yml against INVENTORY (default: this host)
provision: install
	ANSIBLE_COLLECTIONS_PATH=$(INSTALLED) $(BIN)/ansible-playbook -i $(INVENTORY) $(PLAYBOOK) $(ARGS)

## facts: read-only report per node (playbooks/facts.yml)
facts: install
	ANSIBLE_COLLECTIONS_PATH=$(INSTALLED) $(BIN)/ansible-playbook -i $(INVENTORY) playbooks/facts.yml $(ARGS)

$(DEV)/ansible_collections/moe_infra/deepep:
	mkdir -p $(DEV)/ansible_collections/moe_infra
	ln -sfn $(CURDIR) $@

## test: everything CI runs: check, playbook tests, ansible-test sanity, molecule (where podman runs)
test: check integration sanity molecule

## check: the fast loop (about a minute): unit tests, ansible-doc, ansible-lint
check: units docs lint

## units: modules, filters and specs on fixture trees (seconds)
units: $(BIN)/.test
	$(BIN)/python -m pytest -q tests/unit

## integration: ansible-playbook runs of the playbooks on fixture trees and stand-in builds (minutes)
integration: $(BIN)/.test
	$(BIN)/python -m pytest -q tests/integration

docs: $(BIN)/.test $(DEV)/ansible_collections/moe_infra/deepep
	ANSIBLE_COLLECTIONS_PATH=$(DEV) ./scripts/check-docs $(BIN)

# As a user or an editor runs it: ansible-lint installs this collection into .ansible/ itself.
lint: $(BIN)/.test
	PATH=$(BIN):$$PATH $(BIN)/ansible-lint

# ansible-test only warns when shellcheck is missing and skips it: here that is a failure.
sanity: $(BIN)/.test
	@command -v shellcheck >/dev/null || { echo "sanity: shellcheck is missing (apt-get install shellcheck)"; exit 1; }
	./scripts/prepare-ansible-test $(BIN)/python
	rm -rf $(SANITY) && mkdir -p $(SANITY)
	git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C $(SANITY)
	cd $(SANITY) && PATH=$(BIN):$$PATH $(BIN)/ansible-test sanity --local --python $(TEST_PYTHON_VERSION) --color no

molecule: $(BIN)/.test $(DEV)/ansible_collections/moe_infra/deepep
	PATH=$(BIN):$$PATH ./scripts/run-molecule

clean:
	rm -rf .build $(VENV)
