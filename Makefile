# The README's two commands, `make demo` and `make test`, each do their own set-up on a fresh
# machine: a virtualenv with groupkit and its extras, and Apache Kafka's jars via Maven.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo lint typecheck pytest bench soak soak-cluster kafka-jars clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev,spark]'
	touch $(STAMP)

kafka-jars: $(STAMP)
	$(BIN)/groupkit broker fetch

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict groupkit

# Three workers: the pure suites and a slow test on its own broker beside the others
# (tests/conftest.py, "workers").
pytest: $(STAMP) kafka-jars
	$(BIN)/pytest -n 3

test: lint typecheck pytest

demo: $(STAMP) kafka-jars
	$(BIN)/groupkit demo

# Ten minutes of random faults against a group of five members (see tests/chaos.py), on one
# broker; soak-cluster: on a three-broker cluster with its own faults (one node's clock ahead).
# PROTOCOL=1: the members speak protocol version 1 (default: groupkit's, version 2).
PROTOCOL ?=
VERSION_ARG := $(if $(PROTOCOL),--protocol-version $(PROTOCOL))
soak: $(STAMP) kafka-jars
	$(BIN)/python -m tests.chaos --duration 600 $(VERSION_ARG)

soak-cluster: $(STAMP) kafka-jars
	$(BIN)/python -m tests.chaos --duration 600 --brokers 3 $(VERSION_ARG)

# Full runs (tens of minutes; results to bench/results/). Each bench also has --quick.
bench: $(STAMP) kafka-jars
	$(BIN)/python bench/rebalance.py
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/failover.py
	$(BIN)/python bench/join_age.py
	$(BIN)/python bench/aio_loop_lag.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
