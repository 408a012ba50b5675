# One-command setup. `make demo` creates .venv/ (the newest JAX CI tests, on Python 3.12) with the
# project and all extras; `make test` also creates .venv-oldest/ (the oldest supported JAX, on
# Python 3.11), installs Debian's chromium for the browser tests of the TensorBoard tab, lints, and
# runs the suite: all of it in the newest environment, the fast set (tests not marked slow: those
# compile real programs or sweep every fixture on every chip) in the oldest. Each environment's
# versions are held by a constraints file in .ci/; the project itself only asks for jax >= 0.10.2.
PYENV_ROOT ?= $(HOME)/.pyenv
# A working interpreter for each version: on PATH, else pyenv's (its shims fail for versions that
# are not selected, so they are tried by running them).
find_python = $(shell for c in python$(1) $(PYENV_ROOT)/versions/$(1).*/bin/python$(1) \
	/usr/bin/python$(1); do "$$c" -c '' 2>/dev/null && { echo "$$c"; exit 0; }; done)
PYTHON_NEWEST ?= $(call find_python,3.12)
PYTHON_OLDEST ?= $(call find_python,3.11)
VENV := .venv
VENV_OLDEST := .venv-oldest
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST := -m pytest -q -n 2 --dist loadfile --durations=10

.PHONY: install install-oldest browser demo test test-newest test-oldest lint fixtures bench fuzz clean

# $(1): the venv, $(2): its Python, $(3): the constraints file.
define make_venv
	@test -n "$(2)" || { echo "make: no Python $(4) found: install it (e.g. pyenv install $(4)) or pass $(5)=/path/to/python$(4)" >&2; exit 2; }
	$(2) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -e ".[tpu,gpu,test]" -c $(3)
	touch $(1)/.installed
endef

$(VENV)/.installed: pyproject.toml .ci/constraints-newest.txt
	$(call make_venv,$(VENV),$(PYTHON_NEWEST),.ci/constraints-newest.txt,3.12,PYTHON_NEWEST)

$(VENV_OLDEST)/.installed: pyproject.toml .ci/constraints-oldest.txt
	$(call make_venv,$(VENV_OLDEST),$(PYTHON_OLDEST),.ci/constraints-oldest.txt,3.11,PYTHON_OLDEST)

install: $(VENV)/.installed
install-oldest: $(VENV_OLDEST)/.installed

# Debian's chromium (Playwright drives it; it never downloads a browser of its own).
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium

browser: $(CHROMIUM)

demo: install
	$(VENV)/bin/python -m hlo_roofline.demo

# ESLint for the tab's ES modules (plugin/eslint.config.mjs), run by npx from the npm registry: no
# node_modules in the tree. Skipped, with a note, where no Node.js is installed.
ESLINT := eslint@9.39.5

lint: install
	$(VENV)/bin/python -m ruff check hlo_roofline plugin tests fixtures benchmarks
	@if command -v npx >/dev/null 2>&1; then \
		cd plugin && npx --yes $(ESLINT) --config eslint.config.mjs static; \
	else echo "lint: no npx (Node.js): the tab's JavaScript is not linted" >&2; fi

test-newest: install browser
	@echo "== tests: $$($(VENV)/bin/python -c 'import sys, jax, jaxlib; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}, jaxlib {jaxlib.__version__}")')"
	HLO_ROOFLINE_REQUIRE_BROWSER=1 $(VENV)/bin/python $(PYTEST) -m "not alone"
	$(VENV)/bin/python -m pytest -q -p no:xdist -m alone

test-oldest: install-oldest browser
	@echo "== tests: $$($(VENV_OLDEST)/bin/python -c 'import sys, jax, jaxlib; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}, jaxlib {jaxlib.__version__}")')"
	HLO_ROOFLINE_REQUIRE_BROWSER=1 $(VENV_OLDEST)/bin/python $(PYTEST) -m "not slow and not alone"

test: lint test-newest test-oldest

fixtures: install
	$(VENV)/bin/python fixtures/generate.py

bench: install
	$(VENV)/bin/python benchmarks/run.py

# 100,000 semantic mutants of the committed fixtures, each with a time limit; exit 1 on any escape
# (an exception other than HloParseError) or hang.
fuzz: install
	$(VENV)/bin/python benchmarks/fuzz.py --inputs 100000 --jobs 2 --seconds 10

clean:
	rm -rf $(VENV) $(VENV_OLDEST) .pytest_cache .ruff_cache out test-artifacts
