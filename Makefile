# metalforge: `make run` starts the all-in-one service, `make test` runs every check.
# Both install what they need first (virtualenv, Python packages, apt packages).

VENV      ?= .venv
PYTHON    ?= python3
STAMP     := $(VENV)/.installed-stamp
BIN       := $(VENV)/bin
# The virtual lab runs the real ironic-python-agent from its own virtualenv:
# its OpenStack dependencies stay out of metalforge's.
IPA_VENV  ?= .ipa-venv
IPA_STAMP := $(IPA_VENV)/.installed-stamp
# The tests run a real Keystone (token validation) from its own virtualenv, for the same reason.
KEYSTONE_VENV  ?= .keystone-venv
KEYSTONE_STAMP := $(KEYSTONE_VENV)/.installed-stamp
# `make conformance` runs Ironic's API tests (tempest and its Ironic plugin) from a third one.
TEMPEST_VENV  ?= .tempest-venv
TEMPEST_STAMP := $(TEMPEST_VENV)/.installed-stamp

.PHONY: run test check lint unit coverage conformance bench screenshots clean system-packages bytecode \
	ramdisk test-ramdisk

# The suite starts a few hundred Python processes (test workers, services, clients):
# each would compile the project's modules again where the environment forbids
# writing bytecode, and pytest would rewrite every test module's asserts again in
# each worker and each pass. The suite writes bytecode, once.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	tools/ensure-system-packages.sh base
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

$(IPA_STAMP): tools/ipa-requirements.txt
	$(PYTHON) -m venv $(IPA_VENV)
	$(IPA_VENV)/bin/pip install --quiet --upgrade pip
	$(IPA_VENV)/bin/pip install --quiet -r tools/ipa-requirements.txt
	touch $(IPA_STAMP)

$(KEYSTONE_STAMP): tools/keystone-requirements.txt
	$(PYTHON) -m venv $(KEYSTONE_VENV)
	$(KEYSTONE_VENV)/bin/pip install --quiet --upgrade pip
	$(KEYSTONE_VENV)/bin/pip install --quiet -r tools/keystone-requirements.txt
	touch $(KEYSTONE_STAMP)

$(TEMPEST_STAMP): tools/tempest-requirements.txt
	$(PYTHON) -m venv $(TEMPEST_VENV)
	$(TEMPEST_VENV)/bin/pip install --quiet --upgrade pip
	$(TEMPEST_VENV)/bin/pip install --quiet -r tools/tempest-requirements.txt
	touch $(TEMPEST_STAMP)

# `make run VIRTUAL_NODES=3` (root) adds virtual nodes running the real agent, enrolled and
# ready to provide and deploy; only then are the agent's virtualenv and system tools installed.
# LAB_MACHINES=qemu makes them QEMU machines that network-boot the agent ramdisk instead.
LAB_MACHINES ?= namespaces
run: $(STAMP) $(if $(VIRTUAL_NODES),$(IPA_STAMP) system-packages)
	@install -d -m 0700 var
ifdef VIRTUAL_NODES
	$(BIN)/metalforge-lab demo --nodes $(VIRTUAL_NODES) --state-dir var/lab \
		--machines $(LAB_MACHINES)
else
	$(BIN)/metalforge $(if $(CONFIG),--config $(CONFIG)) all-in-one
endif

system-packages:
	tools/ensure-system-packages.sh test

# `make ramdisk` (root) builds the agent's kernel and initramfs from Debian 12 packages and
# ironic-python-agent from PyPI, into var/ramdisk: what nodes' deploy_kernel and
# deploy_ramdisk name (docs/agent.md). RAMDISK_KERNEL=cloud for virtual machines.
RAMDISK_DIR    ?= var/ramdisk
RAMDISK_KERNEL ?= generic
ramdisk: $(STAMP)
	tools/ensure-system-packages.sh ramdisk
	$(BIN)/metalforge-lab ramdisk --kernel $(RAMDISK_KERNEL) --out $(RAMDISK_DIR)

# The ramdisk the suite's virtual machines boot, built before the workers start (once per
# checkout: a build with the same recipe is reused). Root only, as are the tests that use it.
test-ramdisk: $(STAMP) system-packages
	@if [ "$$(id -u)" -eq 0 ]; then $(BIN)/metalforge-lab ramdisk --kernel cloud --out var/ramdisk-cloud; \
	else echo "not root: no agent ramdisk, and the tests that boot it skip"; fi

lint: $(STAMP)
	$(BIN)/ruff check src tests tools
	$(BIN)/ruff format --check src tests tools
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite runs in parallel (pytest-xdist, one test file per worker at a time, so a
# module's servers start once): it waits on servers and peers far more than it computes.
# Modules with a slow test are collected first (tests/conftest.py); xdist keeps that order.
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Compiled before the workers start, which would otherwise all compile the same modules.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 src tests tools > /dev/null

# One pass: every test, with coverage measured in the same run (pytest-cov; the lines of
# src/metalforge the tests not marked slow run: slow ones run untraced), failing below the
# floor in pyproject.toml ([tool.coverage.report]).
test: $(STAMP) $(IPA_STAMP) $(KEYSTONE_STAMP) system-packages test-ramdisk lint bytecode
	$(BIN)/pytest -p no:cacheprovider $(XDIST) --cov --cov-report=term $(PYTEST_ARGS)

# The inner loop: the linters, the type checker and the unit tests (no servers, no
# peers), in about two minutes.
check: lint bytecode
	$(BIN)/pytest -p no:cacheprovider $(XDIST) tests/unit $(PYTEST_ARGS)

unit: $(STAMP) bytecode
	$(BIN)/pytest -p no:cacheprovider $(XDIST) -m "not slow and not postgres" $(PYTEST_ARGS)

# Coverage of the tests that need no servers of their own (every test not marked slow).
coverage: $(STAMP) $(IPA_STAMP) $(KEYSTONE_STAMP) system-packages bytecode
	$(BIN)/pytest -p no:cacheprovider $(XDIST) -m "not slow" --cov --cov-report=term \
		$(PYTEST_ARGS)

# Ironic's API test suite (ironic-tempest-plugin) against the all-in-one service in keystone
# mode, with a Keystone of its own; see docs/conformance.md.
conformance: $(STAMP) $(KEYSTONE_STAMP) $(TEMPEST_STAMP) system-packages
	$(BIN)/python tools/conformance.py --keystone-venv $(KEYSTONE_VENV) \
		--tempest-venv $(TEMPEST_VENV) $(CONFORMANCE_ARGS)

bench: $(STAMP)
	$(BIN)/python tools/bench.py $(BENCH_ARGS)

# The dashboard's pictures in docs/images/, taken by headless Chromium from a throwaway stack.
screenshots: $(STAMP) system-packages
	$(BIN)/python -m tests.browser.screenshots $(SCREENSHOTS_ARGS)

clean:
	rm -rf $(VENV) $(IPA_VENV) $(KEYSTONE_VENV) $(TEMPEST_VENV) var .pytest_cache .mypy_cache .ruff_cache
