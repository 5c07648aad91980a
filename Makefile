# The two commands a newcomer needs: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Web + worker + beat (exactly one beat) on the embedded defaults; Ctrl-C stops all three.
run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	rm -rf var/prometheus && mkdir -p var/prometheus
	DEBUG=1 OUTBOUND_ALLOW=loopback PROMETHEUS_MULTIPROC_DIR=var/prometheus $(BIN)/honcho -f Procfile.dev start

test: install
	$(BIN)/ruff check .
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) var
