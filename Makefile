# One-command setup: `make demo` and `make test` create .venv/ with the project and all extras,
# and `make test` also installs Debian's chromium for the browser tests of the TensorBoard tab.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export JAX_PLATFORMS ?= cpu

.PHONY: install browser demo test lint fixtures bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[tpu,gpu,test]"
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium (Playwright drives it; it never downloads a browser of its own).
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium

browser: $(CHROMIUM)

demo: install
	$(PY) -m hlo_roofline.demo

lint: install
	$(PY) -m ruff check hlo_roofline plugin tests fixtures benchmarks

test: install browser lint
	HLO_ROOFLINE_REQUIRE_BROWSER=1 $(PY) -m pytest -q -n 2 --dist loadfile --durations=20

fixtures: install
	$(PY) fixtures/generate.py

bench: install
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache out test-artifacts
