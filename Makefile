# posenc: the two set-up commands are `make run` (start the service) and `make test` (run the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install run test lint fmt bench clean

help:
	@echo "make run      start gateway + worker + embedded Redis on 127.0.0.1:8000"
	@echo "make test     install everything and run the whole test suite"
	@echo "make lint     ruff, mypy and import-linter"
	@echo "make bench    benchmark scripts (ratios against same-run baselines)"

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]" -e "./clients/python[all,codegen]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/posenc serve

# The suite's files run in parallel (pytest-xdist, one file per process at a time): most integration tests wait on
# worker processes and HTTP, so two processes on 2 cores take about a third of the serial time. (Three processes
# were slower on 2 cores and broke the timing bounds of tests/integration/test_request_bounds.py.)
TEST_PROCESSES ?= auto
test: $(STAMP)
	$(BIN)/pytest -n $(TEST_PROCESSES) --maxprocesses=4 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/compute_bench.py
	$(BIN)/python bench/hardware_floor.py
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/json_body_memory.py
	$(BIN)/python bench/job_overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
