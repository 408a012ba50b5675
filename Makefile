# One-command setup: every target creates .venv/ (if needed) with the project and all extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export JAX_PLATFORMS ?= cpu

.PHONY: install demo test lint fixtures clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[tpu,gpu,test]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(PY) -m hlo_roofline.demo

lint: install
	$(PY) -m ruff check hlo_roofline tests fixtures

test: install lint
	$(PY) -m pytest -q -n 2 --durations=15

fixtures: install
	$(PY) fixtures/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
