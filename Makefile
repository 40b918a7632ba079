# Two commands on a fresh machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every transitive pin, as CI tested it (`make lock` refreshes it; see README, Dependencies).
LOCK := requirements/lock.txt
# Prefect's temporary server needs ~16 s to create its database on a fresh machine (default limit 20 s).
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120

.PHONY: demo test check coverage browser jq lint lock bench soak screenshots server deploy alerts worker fan-out-worker clean

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e '.[dev]'
	touch $(STAMP)

# Re-resolve every pin to the newest releases pyproject.toml allows (uv: seconds, where pip
# backtracks for many minutes over boto3/aiobotocore), then reinstall and run `make test`.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
	  -c requirements/lock.in --upgrade --custom-compile-command "make lock" -o $(LOCK)

demo: $(STAMP)
	$(BIN)/evalsentry demo

# The tests start Python hundreds of times (the CLI, flow runs, evaluation children): each reads
# the checkout's modules compiled, not compiled again, where the environment sets
# PYTHONDONTWRITEBYTECODE (pip compiled site-packages at install; git ignores __pycache__).
test check coverage: export PYTHONDONTWRITEBYTECODE =

# The whole suite on every core, in a random order (pytest-randomly prints its seed first;
# `make test PYTEST_ARGS=--randomly-seed=N` repeats an order). See README, Development.
PYTEST_ARGS ?=
test: $(STAMP) browser jq
	$(BIN)/python -m pytest -n auto $(PYTEST_ARGS)

# Everyday: lint, types and the unit tests on every core, in a random order.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n auto tests/unit $(PYTEST_ARGS)

# Line coverage of src/, flows/ and tasks/ by the whole suite (the test processes themselves).
coverage: $(STAMP) browser jq
	$(BIN)/python -m pytest -n auto --cov=src/evalsentry --cov=flows --cov=tasks --cov-report=term:skip-covered

# The HTML report is looked at in headless Chromium by the tests: install Debian's package
# where it is missing and we may (root). Elsewhere that one test is skipped, saying why.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	echo "chromium could not be installed: the browser test will be skipped"

# The tests of the generated CI workflows apply gh's --jq filters with jq: Debian's, as above.
jq:
	@command -v jq >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null; } || \
	echo "jq could not be installed: the tests that post a comment will be skipped"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

soak: $(STAMP)
	$(BIN)/python -m bench.soak

# The README's pictures of the Prefect UI (docs/ui-*.png): the demo run against a server of its
# own, its failed week photographed in headless Chromium, 1280 pixels wide.
screenshots: $(STAMP) browser
	$(BIN)/python -m docs.screenshots

# A local Prefect server and a process worker on the `gpu` pool, to watch runs in the UI.
# `make server PREFECT_PORT=4310`: the UI must be told the API's port too (else it calls 4200);
# point the other commands at it with PREFECT_API_URL=http://127.0.0.1:4310/api.
PREFECT_PORT ?= 4200
server: $(STAMP)
	PREFECT_UI_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api PREFECT_SERVER_ANALYTICS_ENABLED=false \
	  $(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

deploy: $(STAMP)
	$(BIN)/prefect work-pool inspect gpu >/dev/null 2>&1 || $(BIN)/prefect work-pool create gpu --type process
	EVALSENTRY_PROJECT_DIR=$(CURDIR) $(BIN)/prefect --no-prompt deploy --all

# The weekly run's alerts: a webhook block from EVALSENTRY_ALERT_WEBHOOK_URL and the automations in
# flows/week-alerts.yaml (a Failed, a Crashed, an overdue run: EVALSENTRY_ALERT_GRACE, default 6h)
# posting one JSON summary per run to it. Re-run to update.
alerts: $(STAMP)
	$(BIN)/python -m evalsentry.flows.alerts

# The weekly flow's worker (once): it polls the `default` queue of the `gpu` pool.
worker: $(STAMP)
	$(BIN)/prefect worker start --pool gpu --work-queue default

# One per GPU host: runs the week's per-checkpoint `evaluate-one` runs from the `fan-out` queue,
# FAN_OUT_LIMIT at a time (one per GPU), polling every 5 s so a week does not wait on the queue.
FAN_OUT_LIMIT ?= 1
fan-out-worker: $(STAMP)
	PREFECT_WORKER_QUERY_SECONDS=5 $(BIN)/prefect worker start --pool gpu --work-queue fan-out \
	  --limit $(FAN_OUT_LIMIT)

clean:
	rm -rf $(VENV) .demo .evalsentry .pytest_cache .mypy_cache .ruff_cache
