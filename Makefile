# One way in, one way to test. Every target sets up its own virtual environment first.
# The test environment installs the exact versions of requirements/test-lock.txt: the vLLM engine stack's (torch
# 2.11.0, transformers 5.9.0), as `pip install '.[vllm]'` resolves them on Python 3.11 (docs/install.md).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
LOCK := requirements/test-lock.txt
WORLD ?= worlds/small

.PHONY: help venv install system-deps test demo clean-venv lock
.DEFAULT_GOAL := help

help:
	@echo "make demo         the whole Neos loop on CPU: world -> tasks -> rollouts -> judge -> turn credit -> report"
	@echo "                  in $(DEMO)/report (1-5 min once .venv exists)"
	@echo "make test         the CPU test suite, and verl's own CPU tests with our plugins (2 cores: see README); installs"
	@echo "                  missing Debian packages first, saying so (NEOS_TEST_REDIS_URL: use an existing Redis)"
	@echo "make venv         only create $(VENV) (first use of demo/test does it: ~7 GB, torch with CUDA libraries)"
	@echo "make install      reinstall this package into $(VENV) (seconds), as a user's pip install would"
	@echo "make system-deps  only the Debian packages the tests use (redis-server, libgl1, chromium; apt-get: root)"
	@echo "make lock         recompile $(LOCK) (uv; needs the package index)"
	@echo "make clean-venv   delete $(VENV)"
	@echo "Costs, system packages, installing from a wheel: docs/install.md"

# Debian packages the tests use: a real Redis server for the shared cache tier, libGL for OpenCV, Chromium for the
# evaluation report's trajectory viewer (rendered headless). Only missing ones are installed, after a message saying
# so (apt-get: root). NEOS_TEST_REDIS_URL=redis://HOST:PORT/DB points the Redis tests at an existing server (they
# write a few keys to that database) instead of starting redis-server.
system-deps:
	@need=""; \
	if [ -z "$$NEOS_TEST_REDIS_URL" ] && ! command -v redis-server >/dev/null; then need="redis-server"; fi; \
	if ! ldconfig -p | grep -q 'libGL.so.1'; then need="$$need libgl1"; fi; \
	if ! command -v chromium >/dev/null; then need="$$need chromium"; fi; \
	if [ -n "$$need" ]; then \
		echo "make test: installing the Debian packages the tests need:$$need (apt-get install; needs root)."; \
		echo "  To use an existing Redis instead of redis-server: NEOS_TEST_REDIS_URL=redis://HOST:PORT/DB make test"; \
		if [ "$$(id -u)" != 0 ]; then echo "  not root: run  sudo apt-get install -y$$need  and retry" >&2; exit 1; fi; \
		apt-get update -qq && apt-get install -y -qq $$need >/dev/null; \
	fi

$(STAMP): pyproject.toml Makefile $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c $(LOCK) ".[test,eval]"
	touch $(STAMP)

# The lock: this package with verl's vllm extra and our test and eval extras, resolved for Python 3.11 on Linux
# x86-64 (requirements/test-lock.in says why). uv from PATH, else from $(VENV).
UV := $(shell command -v uv 2>/dev/null || echo $(VENV)/bin/uv)
lock:
	UV_PYTHON_DOWNLOADS=never $(UV) pip compile -q --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		--no-emit-package neos-verl --custom-compile-command "make lock" requirements/test-lock.in -o $(LOCK)

venv: $(STAMP)

# Reinstall our own package (not editable, no deps: seconds) so tests and demo run what a user's pip install gives.
install: $(STAMP)
	$(PY) -m pip install -q --no-deps --force-reinstall --no-build-isolation .

# verl's own CPU tests for the extension points we plug into, run with our plugins installed: they must stay green.
# A separate pytest run: our session fixtures (one Ray per worker) must not leak into verl's tests, which start and
# stop Ray themselves. It runs beside ours, in one process: its tests mostly wait for the Ray each starts, so it takes
# little of the cores; its output follows ours.
VERL_CPU_TESTS := trainer/ppo/test_core_algos_on_cpu.py trainer/ppo/test_dynamic_policy_losses_on_cpu.py \
	trainer/ppo/test_loss_aggregation_on_cpu.py trainer/test_multi_trajectories_advantage_on_cpu.py \
	experimental/agent_loop/test_agent_loop_extra_fields_schema_on_cpu.py \
	experimental/agent_loop/test_call_tool_on_cpu.py single_controller/test_decorator_on_cpu.py

# Our suite on TEST_WORKERS pytest-xdist processes, one per core of the 2-core machine it is sized for, each test file
# whole on one of them (--dist loadfile: module fixtures built once; xdist's loadgroup does not group on pytest 9.2),
# handed out in collection order, the longest files first (tests/conftest.py); each worker has its own session
# fixtures (a Ray, the tiny model loaded), so more workers than cores only add memory. TEST_WORKERS=0: one process.
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: each worker collects every test file, and compiling
# and assertion-rewriting them anew took 22 s of CPU a worker instead of 14 (tests/__pycache__/ is git-ignored).
TEST_WORKERS ?= 2
test: export PYTHONDONTWRITEBYTECODE =
test: install system-deps
	site=$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); verl_log=$$(mktemp); \
	$(VENV)/bin/pytest -q $(addprefix $$site/tests/,$(VERL_CPU_TESTS)) >$$verl_log 2>&1 & verl=$$!; \
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 tests; ours=$$?; \
	wait $$verl; theirs=$$?; echo "verl's own CPU tests, with our plugins:"; cat $$verl_log; rm -f $$verl_log; \
	[ $$ours = 0 ] && [ $$theirs = 0 ]

# The whole Neos loop on CPU: world -> tasks -> rollouts (scripted behaviour policy scored by the tiny VL model)
# -> answer judge -> turn credit -> advantages -> report with plots in $(DEMO)/report. Reruns reuse what exists.
# The task run's statistics go to $(DEMO)/tasks/stats.json rather than the terminal.
DEMO ?= worlds/demo
demo: install
	$(PY) -m data_gen.world build --size small --out $(WORLD)
	$(PY) -m data_gen.world summary $(WORLD)
	$(PY) -m tool_server.tour --world $(WORLD)
	$(PY) -m data_gen neos --world $(WORLD) --out $(DEMO)/tasks --limit 4 >/dev/null
	$(PY) -m verl_ext.walkthrough --world $(WORLD) --tasks $(DEMO)/tasks --out $(DEMO)/report --groups 4 --group-size 4

clean-venv:
	rm -rf $(VENV)
