# One task runner, the same targets locally and in CI (.ci/run calls `make test`).
SHELL := bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python
SOLARIS := $(VENV)/bin/solaris
PYTEST_ARGS ?=
# Test processes (pytest-xdist; see infra/test-run.sh): 3 cut the 3.11 run from 25 to ~11 min
# on 2 cores; 0 = one process.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile)

.PHONY: help setup lock demo test test-pythons test-unit lint format infra-up infra-down bench

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup:  ## create/reuse the cached virtualenv and install this clone into it
	@bash infra/venv.sh

lock: setup  ## re-resolve the hashed locks (venv + images) with uv: infra/lock.sh [--upgrade]
	@bash infra/lock.sh $(LOCK_ARGS)

# Under with-services (not `solaris demo`'s own start and stop) so that a demo beside a test
# run shares its broker and Redis and neither run stops them under the other.
demo: setup  ## the main job end to end (DATASET=synthetic|movielens|taobao, DATA_DIR=...)
	@bash infra/with-services.sh $(SOLARIS) demo $(if $(DATASET),--dataset $(DATASET)) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --json out/demo-$(or $(DATASET),synthetic).json

test: setup lint  ## lint, all tests on Python 3.11 (unit + integration on a real Kafka and Redis started for the run), then the unit suite on 3.12 and 3.13
	@SOLARIS_REQUIRE_SERVICES=1 \
		bash infra/with-services.sh bash infra/test-run.sh $(TEST_WORKERS) $(PY) $(PYTEST_ARGS)
	@bash infra/test-pythons.sh -- -q $(XDIST) $(PYTEST_ARGS)

test-pythons:  ## the unit suite on Python 3.12 and 3.13 (own venvs from the same lock; 3.13 built from source if absent)
	@bash infra/test-pythons.sh -- -q $(XDIST) $(PYTEST_ARGS)

test-unit: setup  ## unit tests only (no services)
	@$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

lint: setup  ## ruff lint + format check + mypy (pydantic plugin) + import layers (import-linter)
	@$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m mypy schemas store streams \
		&& $(PY) -c "from importlinter.cli import lint_imports_command; lint_imports_command()"

format: setup  ## apply ruff fixes and formatting
	@$(PY) -m ruff check --fix . && $(PY) -m ruff format .

# Reuses an existing venv as is (no editable reinstall under processes that may be running).
bench:  ## all benchmarks (~22 min; Kafka + Redis started if needed): bench/results/*.json + summary
	@test -x $(SOLARIS) || $(MAKE) setup
	@SOLARIS_LOG_LEVEL=$${SOLARIS_LOG_LEVEL:-WARNING} bash infra/with-services.sh $(SOLARIS) bench all --json bench/results

.PHONY: gpu-check
# On a GPU host with the `gpu` extra: fails loudly unless the FM really runs on CUDA.
gpu-check:  ## CUDA check + bench fm on CUDA: providers, pairs/s, live/bare -> bench/results/fm-cuda.json
	@test -x $(SOLARIS) || $(MAKE) setup
	@bash infra/gpu_check.sh $(if $(SMOKE),--smoke)

infra-up: setup  ## start the local Kafka broker and Redis
	@$(SOLARIS) infra up

infra-down:  ## stop the local Kafka broker and Redis
	@bash infra/kafka.sh stop; bash infra/redis.sh stop
