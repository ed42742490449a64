# Quick start: `make demo` (the bundled example with every trigger live) and `make test` (the whole suite).
# The fast loop: `make check` (every test that needs no Dagster daemon/webserver, browser, dbt run or Celery).
VENV   ?= .venv
PY     := $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 3000
KAFKA_PORT   ?= 9092
WEBHOOK_PORT ?= 8787
EMAIL_PORT   ?= 2525
EXTRAS ?= postgres,s3,dbt,kafka,sqs,mqtt,nats,email,celery,demo,dev

export LINEAGE_PIPELINES_DIR ?= $(CURDIR)/examples/pipelines
export LINEAGE_STATE_DIR     ?= $(CURDIR)/.lineage
export DAGSTER_HOME          ?= $(CURDIR)/dagster_home
# Dagster stores a range run's per-partition events as one batch (see dagster_home/dagster.yaml)
export DAGSTER_EVENT_BATCH_SIZE ?= 1000

.PHONY: install browser servers demo demo-stop test check bench typecheck clean

# Also the editable package's bytecode: uv compiles site-packages only, and where
# PYTHONDONTWRITEBYTECODE=1 (common in containers) Python would compile lineage_defs
# from source in every code server and run process (up to date: a no-op).
install: $(VENV)/.installed
	@$(PY) -m compileall -q lineage_defs

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip uv
	$(VENV)/bin/uv pip install -q --compile-bytecode -p $(PY) -e '.[$(EXTRAS)]'
	touch $@

# The UI with its daemon (`dagster dev -w workspace.yaml`), a Kafka broker with the example's
# topic and the webhook and e-mail receivers, started and stopped together: Ctrl-C, or `make demo-stop`.
# the example's hand-written assets, merged into its code location (examples/python_assets.py)
demo: export LINEAGE_DEFINITIONS ?= $(CURDIR)/examples/python_assets.py
demo: install
	$(VENV)/bin/lineage-defs demo up --host $(HOST) --port $(PORT) --kafka-port $(KAFKA_PORT) --webhook-port $(WEBHOOK_PORT) --email-port $(EMAIL_PORT)

demo-stop:
	$(VENV)/bin/lineage-defs demo stop

# The UI tests drive Debian's Chromium through its chromedriver (no browser download).
browser: /usr/bin/chromium /usr/bin/chromedriver

/usr/bin/chromium /usr/bin/chromedriver:
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get install -y -q chromium chromium-driver || (apt-get update -q && apt-get install -y -q chromium chromium-driver)'

# The event-source tests start Debian's brokers themselves (mosquitto, NATS with JetStream, Redis):
# installed here, never started as system services.
SERVERS := /usr/sbin/mosquitto /usr/sbin/nats-server /usr/bin/redis-server
servers: $(SERVERS)

$(SERVERS):
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get install -y -q mosquitto nats-server redis-server || (apt-get update -q && apt-get install -y -q mosquitto nats-server redis-server)'

# Test processes (pytest-xdist; tests/conftest.py schedules whole modules, longest first)
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --no-loadscope-reorder

test: install browser servers
	$(PYTEST) --durations=30

# The tiers are the markers of pyproject.toml (tests/test_tiers.py checks every test carries what it needs).
check: install servers
	$(PYTEST) -m "not daemon and not browser and not dbt and not scale"

typecheck: install
	$(VENV)/bin/mypy lineage_defs

bench: install
	$(PY) bench/load.py
	$(PY) bench/backfill.py
	$(PY) bench/events.py
	$(PY) bench/dbt.py
	$(PY) bench/lineage_docs.py
	$(PY) bench/demo.py
	$(PY) bench/openlineage_emit.py

clean:
	rm -rf .lineage dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs dagster_home/.logs_queue dagster_home/.nux
