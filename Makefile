# posenc: the two set-up commands are `make run` (start the service) and `make test` (run the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the llama-cpp-python sdist whose vendored llama.cpp converter the tests run (see the install rule)
LLAMA_CPP_PYTHON := 0.3.36
LLAMA_CPP_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

.DEFAULT_GOAL := help
.PHONY: help install run test lint fmt bench docs clean

help:
	@echo "make run      start gateway + worker + embedded Redis on 127.0.0.1:8000"
	@echo "make test     install everything and run the whole test suite"
	@echo "make lint     ruff, mypy and import-linter"
	@echo "make bench    benchmark scripts (ratios against same-run baselines)"
	@echo "make docs     serve the documentation site (MkDocs) on 127.0.0.1:8001"

# The last steps fetch a test-only tool: llama.cpp's own converter (convert_hf_to_gguf.py, its conversion/ package
# and its gguf-py), from the llama.cpp tree that the llama-cpp-python sdist vendors, pinned by hash;
# tests/unit/test_llama_cpp_converter.py runs it in a subprocess. Nothing is built and the product never imports it.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]" -e "./clients/python[all,codegen]"
	rm -rf $(VENV)/llama.cpp $(VENV)/downloads && mkdir -p $(VENV)/llama.cpp $(VENV)/downloads
	$(BIN)/pip download -q --no-deps --no-binary :all: --dest $(VENV)/downloads llama-cpp-python==$(LLAMA_CPP_PYTHON)
	echo "$(LLAMA_CPP_SHA256)  $(VENV)/downloads/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz" | sha256sum -c --quiet -
	tar -xzf $(VENV)/downloads/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C $(VENV)/llama.cpp --strip-components=3 \
		$(addprefix llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp/,convert_hf_to_gguf.py conversion gguf-py)
	rm -rf $(VENV)/downloads
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/posenc serve

# The suite's files run in parallel (pytest-xdist, one file per process at a time): most integration tests wait on
# worker processes and HTTP, so two processes on 2 cores take about a third of the serial time. (Three processes
# were slower on 2 cores and broke the timing bounds of tests/integration/test_request_bounds.py.)
# Tests marked `alone` time what they run against an estimate; they run after the rest, with nothing beside them.
TEST_PROCESSES ?= auto
test: $(STAMP)
	$(BIN)/pytest -n $(TEST_PROCESSES) --maxprocesses=4 --dist loadfile --durations=25 -m "not alone"
	$(BIN)/pytest -m alone --durations=5

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

# the documentation site (mkdocs.yml, pages under docs/); 8001, since the gateway of `make run` has 8000
docs: $(STAMP)
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
