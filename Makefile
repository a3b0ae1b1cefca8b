# The README's two commands: `make test` and `make run`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= examples/hatchway.yaml

.PHONY: test run demo bench lint venv clean

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

clean:
	rm -rf $(VENV) .pytest_cache .hatchway
