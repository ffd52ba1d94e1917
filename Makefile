# One way in, one way to test. Every target sets up its own virtual environment first.
# The CPU test environment uses torch 2.14.1 + torchvision 0.29.1: PyPI's torchvision for the CPU torch 2.13 wheel
# fails to import, which breaks the Qwen-VL processors (see README, "Environment").
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
WORLD ?= worlds/small

.PHONY: venv install test demo clean-venv

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q ".[test]"
	touch $(STAMP)

venv: $(STAMP)

# Reinstall our own package (not editable, no deps: seconds) so tests and demo run what a user's pip install gives.
install: $(STAMP)
	$(PY) -m pip install -q --no-deps --force-reinstall --no-build-isolation .

test: install
	$(VENV)/bin/pytest -q tests

demo: install
	$(PY) -m data_gen.world build --size small --out $(WORLD)
	$(PY) -m data_gen.world summary $(WORLD)

clean-venv:
	rm -rf $(VENV)
