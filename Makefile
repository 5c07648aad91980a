# The two commands a newcomer needs: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run serve test lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Web + worker + beat (exactly one beat) on the embedded defaults; Ctrl-C stops all of them.
# Without DATABASE_URL, devservices starts the embedded PostgreSQL under var/postgres around it.
run: install
	$(BIN)/python -m tokvera_site.devservices run -- $(MAKE) --no-print-directory serve

# What `run` runs once the database is up (also usable with your own DATABASE_URL).
# One setting moves the whole thing: `make run PORT=8100` serves on 8100, SITE_URL (links, the
# printed login) follows it, and the demo target listens on PORT+90.
PORT ?= 8000
SITE_URL ?= http://127.0.0.1:$(PORT)
DEMO_TARGET_PORT ?= $(shell expr $(PORT) + 90)
serve: export PORT := $(PORT)
serve: export SITE_URL := $(SITE_URL)
serve: export DEMO_TARGET_PORT := $(DEMO_TARGET_PORT)
serve:
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py createcachetable
	$(BIN)/python manage.py seed_demo >/dev/null
	rm -rf var/prometheus && mkdir -p var/prometheus
	DEBUG=1 EMAIL_SHOW_SECRETS=1 OUTBOUND_ALLOW=loopback PROMETHEUS_MULTIPROC_DIR=var/prometheus $(BIN)/honcho -f Procfile.dev start --port $(PORT)

# The whole suite (the 15 slowest tests are listed at the end, to keep its time in check).
# Without DATABASE_URL, a throwaway embedded PostgreSQL and Redis are started
# for it (and removed afterwards), so it runs exactly what CI runs.
test: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
# mypy's Django plugin imports the settings, which parse DATABASE_URL (and never connect to it).
	DATABASE_URL=$${DATABASE_URL:-postgres://typecheck@127.0.0.1/typecheck} $(BIN)/mypy
	$(BIN)/python -m tokvera_site.devservices run --throwaway -- $(BIN)/pytest --durations=15

lint: install
	$(BIN)/ruff check .

clean:
	-$(BIN)/python -m tokvera_site.devservices stop
	rm -rf $(VENV) var
