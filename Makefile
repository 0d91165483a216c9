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
# Each test stage's wall time goes here (scripts/timed); make test prints the table at the end.
export STAGE_TIMES := $(CURDIR)/.build/stage-times
TIMED := ./scripts/timed
# The molecule scenarios on podman: all but the QEMU one.
PODMAN_SCENARIOS := $(filter-out lifecycle,$(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

.PHONY: provision facts install gcp-extras test node-images check units integration lint sanity molecule docs clean \
	ee-context compat

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

## gcp-extras: what the GCP dynamic inventory (inventories/gcp-mig) and the image bake need: google-auth, requests, google.cloud
gcp-extras: $(BIN)/.runtime
	$(PIP) -r requirements/gcp.txt
	ANSIBLE_COLLECTIONS_PATH=$(INSTALLED) $(BIN)/ansible-galaxy collection install -p $(INSTALLED) -r requirements/gcp-collections.yml

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
test: node-images $(BIN)/.test $(DEV)/ansible_collections/moe_infra/deepep
	@mkdir -p .build && rm -f $(STAGE_TIMES) .build/molecule-lifecycle.started
	@# The QEMU scenario takes longest: it starts first and runs beside every other stage.
	PATH=$(BIN):$$PATH ./scripts/run-molecule --start lifecycle
	@# The VM's emulated work cannot be spread over more cores when it falls behind: the other stages yield to it.
	@# The playbook tests come last: their shards keep both cores busy once the VM is done, where the podman
	@# scenarios, one after another, left a third of the machine idle.
	nice -n 10 $(MAKE) --no-print-directory units docs lint molecule SCENARIOS="$(PODMAN_SCENARIOS)" compat sanity \
	    integration
	@# Waits for the QEMU scenario, prints its output and fails with it.
	PATH=$(BIN):$$PATH ./scripts/run-molecule lifecycle
	@echo "make test: every stage passed"; cat $(STAGE_TIMES)

## check: the fast loop (about a minute): unit tests, ansible-doc, ansible-lint
check:
	@mkdir -p .build && rm -f $(STAGE_TIMES)
	$(MAKE) --no-print-directory units docs lint
	@echo "make check: every stage passed"; cat $(STAGE_TIMES)

# The images the molecule scenarios boot (debootstrap: minutes on a fresh machine, mostly waiting on the
# archive) build in the background while the virtual environment installs; the scenarios' own calls wait for
# them (a lock) and build again, with the error, if one failed. Output: .build/*-node-image.log.
node-images:
	@mkdir -p .build
	@command -v qemu-system-x86_64 >/dev/null && { ./scripts/qemu-node-image >.build/qemu-node-image.log 2>&1 & } || true
	@podman info >/dev/null 2>&1 && { ./scripts/podman-node-image >.build/podman-node-image.log 2>&1 & } || true

# Tests whose builds run as the build user keep their files in a directory of their own: pytest's shared
# /tmp/pytest-of-root is made 0700 again by every other pytest session (molecule's testinfra runs beside these
# stages), which would lock the build user out mid-run. scripts/run-integration does the same.
PRIVATE_TMP := tmp=$$(mktemp -d /tmp/moe-infra-tests.XXXXXX) && trap "rm -rf $$tmp" EXIT &&

## units: modules, filters and specs on fixture trees (seconds)
units: $(BIN)/.test
	$(TIMED) units sh -c '$(PRIVATE_TMP) $(BIN)/python -m pytest -q --basetemp "$$tmp/units" tests/unit'

## integration: ansible-playbook runs of the playbooks on fixture trees and stand-in builds (minutes)
integration: $(BIN)/.test
	$(TIMED) integration ./scripts/run-integration $(BIN)/python

docs: $(BIN)/.test $(DEV)/ansible_collections/moe_infra/deepep
	ANSIBLE_COLLECTIONS_PATH=$(DEV) $(TIMED) docs ./scripts/check-docs $(BIN)

# As a user or an editor runs it: ansible-lint installs this collection into .ansible/ itself.
lint: $(BIN)/.test
	PATH=$(BIN):$$PATH $(TIMED) lint $(BIN)/ansible-lint

COMPAT := $(CURDIR)/.build/compat/bin
$(COMPAT)/.test: requirements/compat.txt
	WHEELS=$(WHEELS) ./scripts/make-venv $(PYTHON) .build/compat
	$(COMPAT)/python -m pip install -q --disable-pip-version-check $(if $(WHEELS),--no-index --find-links $(WHEELS)) -r requirements/compat.txt
	touch $@

## compat: unit tests and the main playbook tests on the oldest ansible-core meta/runtime.yml accepts
compat: $(COMPAT)/.test $(DEV)/ansible_collections/moe_infra/deepep
	$(TIMED) compat sh -c '$(PRIVATE_TMP) $(COMPAT)/python -m pytest -q -p no:cacheprovider --basetemp "$$tmp/units" tests/unit && \
	  $(COMPAT)/python -m pytest -q -p no:cacheprovider --basetemp "$$tmp/integration" tests/integration/test_deepep_playbook.py \
	    -k "build_env_script or site_runs_every_layer or threshold_failure"'

sanity: $(BIN)/.test
	$(TIMED) sanity ./scripts/run-sanity $(BIN)

# SCENARIOS: those to run (default: all).
molecule: $(BIN)/.test $(DEV)/ansible_collections/moe_infra/deepep
	PATH=$(BIN):$$PATH $(TIMED) molecule ./scripts/run-molecule $(SCENARIOS)

clean:
	rm -rf .build $(VENV)

## ee-context: the execution environment's build context in .build/ee (then: podman build -t moe-infra-deepep-ee .build/ee)
ee-context: $(BIN)/.test
	rm -rf .build/ee-collection .build/ee && mkdir -p .build/ee-collection
	$(BIN)/ansible-galaxy collection build --output-path .build/ee-collection $(CURDIR) >/dev/null
	mv .build/ee-collection/moe_infra-deepep-*.tar.gz .build/ee-collection/moe_infra-deepep.tar.gz
	$(BIN)/ansible-builder create --output-filename Containerfile -f execution-environment.yml -c .build/ee
