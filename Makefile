# LangBot Host developer entry points. `make run` starts the whole stack, `make test` runs the suite.
# Every target works from a fresh clone: the ones that need Python depend on `venv` first.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Records the requirements installed into the venv; it is older than a requirements file only when
# that file changed since the last install.
STAMP := $(VENV)/.requirements-installed
REQUIREMENTS := requirements.txt requirements-dev.txt
# The runner SDK (pyproject.toml's `langbot-sdk`) installed editable, so `import langbot_sdk` and
# `python -m langbot_sdk` work from any directory, e.g. a plugin being written outside the checkout.
SDK_STAMP := $(VENV)/.sdk-installed
# LangBot's plugin runtime (`lbp rt`) in a virtualenv of its own, kept out of the host's (its dependencies
# conflict with ours): the tests of runtimes.langbot start it; README, "LangBot's plugin runtime".
LBP_VENV := var/langbot-plugin-venv
LBP_STAMP := $(LBP_VENV)/.requirements-installed

PORT ?= 8000
PYTEST_ARGS ?=
# `make fuzz`: how many times each fuzz test's CI example count to draw, at random (tests/fuzzing.py).
FUZZ_FACTOR ?= 10
FUZZ_TESTS := tests/host/test_api_fuzz.py tests/streaming/test_chat_socket_fuzz.py tests/handlers/test_proxy_fuzz.py
CELERY_LOGLEVEL ?= INFO

.PHONY: help venv lbp-venv run test fuzz chaos peers bench-peers lint docs bench web worker migrate static messages clean

help:
	@echo "make run      start Redis (if needed), migrate, seed the demo, runtime + web + worker + beat"
	@echo "make test     run the test suite (extra pytest options: PYTEST_ARGS='-k name -x')"
	@echo "make fuzz     the fuzz tests randomized and FUZZ_FACTOR (default 10) times longer, before a release"
	@echo "make chaos    fault tests against real processes (runtime/worker killed, ...), printing a table"
	@echo "make peers    install real n8n and Langflow under var/peers and run the runners' tests against them (not CI)"
	@echo "make bench-peers  install LangBot 4.11.2 and the LangGraph dev server under var/peers and print this host's figures beside theirs (not CI)"
	@echo "make lint     ruff, mypy, import-linter, the plugin import check and the docs build"
	@echo "make docs     build the runner author's guide (docs/) into var/site, warnings as errors"
	@echo "make bench    run every benchmark under bench/ and print their tables"
	@echo "make web      daphne (HTTP + WebSocket) on 0.0.0.0:\$$PORT (default 8000)"
	@echo "make worker   a Celery worker with its beat schedule and its own plugin runtime, and the connector process"
	@echo "make migrate  apply database migrations"
	@echo "make messages gather the translatable strings into locale/*.po and compile them (needs GNU gettext)"
	@echo "make venv     create .venv and install requirements-dev.txt when it changed"
	@echo "make lbp-venv LangBot's plugin runtime (lbp rt) into var/langbot-plugin-venv (requirements-langbot-plugin.txt)"
	@echo "make clean    remove caches and collected static files (keeps var/db.sqlite3 and .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(REQUIREMENTS) | $(PY)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

$(SDK_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(SDK_STAMP)

venv: $(STAMP) $(SDK_STAMP)

$(LBP_STAMP): requirements-langbot-plugin.txt
	$(PYTHON) -m venv $(LBP_VENV)
	$(LBP_VENV)/bin/python -m pip install --quiet -r requirements-langbot-plugin.txt
	touch $(LBP_STAMP)

lbp-venv: $(LBP_STAMP)

run: venv
	$(PY) scripts/run_stack.py

# `make test` runs the suite in TEST_WORKERS pytest-xdist processes (0: in this one process); each keeps its own
# test database, Redis database and real processes (docs/testing.md, "Running the suite").
TEST_WORKERS ?= 2
test: venv lbp-venv
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The schemathesis, chat socket and proxy fuzz tests with fresh random draws (CI keeps derandomized ones).
fuzz: venv
	LANGBOT_FUZZ=$(FUZZ_FACTOR) $(VENV)/bin/pytest -p no:randomly $(FUZZ_TESTS) $(PYTEST_ARGS)

# Faults injected into real processes (tests/chaos/), collected only with LANGBOT_CHAOS set; the table of
# faults and outcomes is printed at the end. CHAOS_LOOPS: how many times the looping faults repeat.
CHAOS_LOOPS ?= 3
chaos: venv
	LANGBOT_CHAOS=1 CHAOS_LOOPS=$(CHAOS_LOOPS) $(VENV)/bin/pytest -p no:randomly tests/chaos $(PYTEST_ARGS)

# The n8n and Langflow runners against the real systems (tests/peers/, collected only with LANGBOT_PEERS set;
# never part of `make test` or CI). n8n from npm into var/peers/n8n (pinned to the newest release that runs on
# Node 20; its spreadsheet library's tarball is on a CDN outside the registry, so the registry's release is used),
# Langflow from PyPI through uv into var/peers/langflow-venv; the tests start both on loopback ports and set
# them up through their own APIs. Installing takes minutes and a few GB the first time.
PEERS := var/peers
N8N_VERSION ?= 2.8.4
LANGFLOW_VERSION ?= 1.13.0
UV_VERSION ?= 0.13.8
N8N_STAMP := $(PEERS)/n8n/.installed-$(N8N_VERSION)
LANGFLOW_STAMP := $(PEERS)/langflow-venv/.installed-$(LANGFLOW_VERSION)

$(N8N_STAMP):
	@mkdir -p $(PEERS)/n8n
	echo '{"name": "langbot-peers-n8n", "private": true, "dependencies": {"n8n": "$(N8N_VERSION)"}, "overrides": {"xlsx": "npm:xlsx@0.18.5"}}' > $(PEERS)/n8n/package.json
	npm install --prefix $(PEERS)/n8n --no-audit --no-fund --loglevel=error
	touch $@

$(LANGFLOW_STAMP):
	$(PYTHON) -m venv $(PEERS)/uv-venv
	$(PEERS)/uv-venv/bin/python -m pip install --quiet uv==$(UV_VERSION)
	UV_PYTHON_DOWNLOADS=never $(PEERS)/uv-venv/bin/uv venv --allow-existing --python $(PYTHON) $(PEERS)/langflow-venv
	$(PEERS)/uv-venv/bin/uv pip install --python $(PEERS)/langflow-venv/bin/python langflow==$(LANGFLOW_VERSION)
	touch $@

peers: venv $(N8N_STAMP) $(LANGFLOW_STAMP)
	LANGBOT_PEERS=1 $(VENV)/bin/pytest -p no:randomly tests/peers $(PYTEST_ARGS)

# This host beside LangBot's released host and the LangGraph dev server, the same client and load against each
# (bench/peers; not CI). Each peer in a virtualenv of its own under var/peers, pinned so that figures compare.
LANGBOT_PEER_VERSION ?= 4.11.2
LANGGRAPH_CLI_VERSION ?= 0.4.40
LANGGRAPH_API_VERSION ?= 0.16.7
LANGBOT_PEER_STAMP := $(PEERS)/langbot-venv/.installed-$(LANGBOT_PEER_VERSION)
LANGGRAPH_STAMP := $(PEERS)/langgraph-venv/.installed-$(LANGGRAPH_CLI_VERSION)

$(LANGBOT_PEER_STAMP):
	$(PYTHON) -m venv $(PEERS)/langbot-venv
	$(PEERS)/langbot-venv/bin/python -m pip install --quiet langbot==$(LANGBOT_PEER_VERSION)
	touch $@

$(LANGGRAPH_STAMP):
	$(PYTHON) -m venv $(PEERS)/langgraph-venv
	$(PEERS)/langgraph-venv/bin/python -m pip install --quiet "langgraph-cli[inmem]==$(LANGGRAPH_CLI_VERSION)" \
		langgraph-api==$(LANGGRAPH_API_VERSION)
	touch $@

bench-peers: venv $(LANGBOT_PEER_STAMP) $(LANGGRAPH_STAMP)
	$(PY) -m bench.peers $(BENCH_PEERS_ARGS)

# Runs every check even when an earlier one fails, so one CI run shows all findings.
LINT_CHECKS := "$(VENV)/bin/ruff check ." "$(VENV)/bin/mypy ." "$(VENV)/bin/lint-imports" \
	"$(PY) scripts/check_plugin_imports.py" "$(VENV)/bin/mkdocs build --strict --quiet"

lint: venv
	@failed=""; for check in $(LINT_CHECKS); do \
		echo "+ $$check"; $$check || failed="$$failed\n  $$check"; \
	done; \
	if [ -n "$$failed" ]; then echo -e "lint failed:$$failed"; exit 1; fi

docs: venv
	$(VENV)/bin/mkdocs build --strict

bench: venv
	$(PY) -m bench

migrate: venv
	$(PY) manage.py migrate --noinput

static: venv
	$(PY) manage.py collectstatic --noinput --verbosity 0

# The catalogues (locale/<language>/LC_MESSAGES/django.po, djangojs.po) and their compiled .mo, both committed:
# a checkout serves Chinese without gettext; tests/host/test_i18n.py fails while they are out of step.
messages: venv
	$(PY) scripts/messages.py

web: venv static
	$(PY) -m langbot_host.web -b 0.0.0.0 -p $(PORT) langbot_host.asgi:application

# The connector process (Discord's gateway, manage.py run_connectors) runs beside the worker and stops with it.
worker: venv
	@mkdir -p var
	$(PY) manage.py run_connectors & connectors=$$!; \
	trap 'kill $$connectors 2>/dev/null; wait $$connectors' EXIT; \
	$(VENV)/bin/celery -A langbot_host worker --pool threads --concurrency 8 -B --scheduler django_celery_beat.schedulers:DatabaseScheduler --loglevel $(CELERY_LOGLEVEL)

clean:
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf
	rm -rf .mypy_cache .ruff_cache .pytest_cache .hypothesis var/static var/celerybeat-schedule*
