# The README's two commands: `make test` and `make run`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= examples/hatchway.yaml

.PHONY: test run demo bench lint venv clean image image-test image-lock a2a-tck

$(BIN)/hatchway: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(BIN)/hatchway

venv: $(BIN)/hatchway

# Three workers on two cores: most tests wait on processes they start (servers, the CLI, the
# clients of tests/interop), so a third worker fills the waits (10 min instead of 13.5 on two).
# Each worker has its own PostgreSQL database and Redis prefixes; PYTEST_WORKERS=0 runs in-process.
PYTEST_WORKERS ?= 3

test: venv
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

run: venv
	$(BIN)/hatchway serve --config $(CONFIG) --host 127.0.0.1 --port 8080

demo: venv
	$(BIN)/python -m hatchway.demo $(DEMO_ARGS)

# Hatchway vs direct vs LiteLLM (bench/README.md; LiteLLM gets its own venv under bench/ on first run).
bench: venv
	@$(BIN)/python -c "import matplotlib, aiohttp" 2>/dev/null || $(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.run $(BENCH_ARGS)

lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# The container image (Dockerfile, docs/deploy.md). The version comes from src/hatchway/__init__.py;
# pip's CA bundle, when pip names one (a TLS-inspecting proxy), goes to the build stage only. The
# source label is the git remote without its user and password (a CI clone's URL often carries a token).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' src/hatchway/__init__.py)
IMAGE ?= hatchway:$(VERSION)
BASE_IMAGE ?= python:3.11-slim-bookworm
DOCKER_BUILD_FLAGS ?= --network host

image:
	@cert=$${PIP_CERT:-$$($(PYTHON) -m pip config get global.cert 2>/dev/null || true)}; \
	  if [ -n "$$cert" ] && [ -f "$$cert" ]; then cp "$$cert" deploy/docker/ca/build.pem; fi
	docker build $(DOCKER_BUILD_FLAGS) --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg VERSION=$(VERSION) \
	  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	  --build-arg SOURCE=$$(git remote get-url origin 2>/dev/null | sed -E 's|^([A-Za-z+.-]+://)[^/@]*@|\1|' | grep . || echo unknown) \
	  -t $(IMAGE) .

# Build the image on a debootstrap base and run tests/image against it (what CI does).
image-test: venv
	.ci/image-test

# The A2A TCK (third_party/a2a-tck) against a published agent (what CI does; docs/a2a.md). Its own
# virtualenv, .ci/tck-venv, is made here when .ci/run has not made it.
a2a-tck: venv
	@[ -x .ci/tck-venv/bin/python ] || { $(PYTHON) -m venv .ci/tck-venv && \
	  .ci/tck-venv/bin/pip install --quiet --disable-pip-version-check -r .ci/tck-requirements.txt; }
	.ci/a2a-tck

# Re-pin deploy/docker/requirements.txt from pyproject.toml's dependencies (a clean venv, pip freeze).
image-lock:
	rm -rf .image-lock && $(PYTHON) -m venv .image-lock && .image-lock/bin/pip install --quiet .
	{ sed -n '1,3p' deploy/docker/requirements.txt; { .image-lock/bin/pip freeze --exclude hatchway; \
	  grep ' ; ' deploy/docker/requirements.txt; } | sort -f; } > deploy/docker/requirements.new
	mv deploy/docker/requirements.new deploy/docker/requirements.txt && rm -rf .image-lock

clean:
	rm -rf $(VENV) .pytest_cache .hatchway
