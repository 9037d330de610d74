# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The long load runs are marked `slow`; CI runs their reduced-size twins. `make test-all` runs both.
# The suite runs in TEST_WORKERS processes (pytest-xdist), each test file in one of them;
# TEST_WORKERS=0 runs it in one process, as before. Three on two cores: the suite mostly
# waits (on servers, outages, hold-offs); with two it used 55% of the CPU and took 13:48,
# with three 91% and 9:02 (session 40, docs/performance.md).
TEST_WORKERS ?= 3
PYTEST_ARGS ?= -m "not slow"
XDIST := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

# `make serve SERVE_ARGS="--port 8080 --workers 4"`: seckill serve's own options
SERVE_ARGS ?=

.PHONY: help demo test test-all serve venv sysdeps lint bench showdown clean
.DEFAULT_GOAL := help

help:
	@echo "make demo       .venv, embedded Redis + SQLite, gunicorn, the 1000-buyer showdown;"
	@echo "                report in reports/demo/index.html"
	@echo "make test       .venv, system packages, the test suite (what .ci/run calls)"
	@echo "make test-all   also the full-size (slow) load runs"
	@echo "make serve      the storefront alone (SERVE_ARGS=\"--port 8080\" to pass options)"
	@echo "make showdown   every strategy, report in reports/showdown (seckill showdown --help)"
	@echo "make bench      the lock micro-benchmark against the peer libraries"
	@echo "make lint       ruff and mypy"
	@echo "make venv       .venv with every dependency;  make sysdeps: ZooKeeper, Chromium, nginx"
	@echo "make clean      remove .venv, reports, instance"
	@echo "the labs: .venv/bin/seckill scenario --list"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,zookeeper,loadtest,bench,dev]'
	touch $(STAMP)

venv: $(STAMP)

# System packages the tests need (ZooKeeper, Chromium). Installed when we are root
# with apt-get and they are missing; otherwise the tests that need them skip loudly
# (and fail under CI=true).
sysdeps:
	@bash scripts/sysdeps.sh

test: venv sysdeps
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-all: venv sysdeps
	$(PY) -m pytest $(XDIST)

demo: venv
	$(VENV)/bin/seckill showdown --report reports/demo

serve: venv
	$(VENV)/bin/seckill serve $(SERVE_ARGS)

showdown: venv
	$(VENV)/bin/seckill showdown --report reports/showdown

bench: venv
	$(VENV)/bin/seckill bench

lint: venv
	$(VENV)/bin/ruff check lockcore webapp loadtest tests
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) reports instance .pytest_cache
