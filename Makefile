# `make demo` and `make test` are the README's two set-up commands: each installs what it
# needs on a fresh machine. `make check` is the fast loop (no broker).
PYTHON ?= python3
CHECKED = $(wildcard kgroup tests benchmarks examples docs/hooks)
# mkdocstrings reads this checkout's kgroup (mkdocs.yml sets the path as well).
DOCS_ENV = PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} NO_MKDOCS_2_WARNING=1

.PHONY: demo test lint typecheck unit docs check

# Run the demo on an embedded tansu broker (no Java needed).
demo:
	$(PYTHON) -m pip install -q -e ".[demo]"
	$(PYTHON) -m kgroup demo

# Lint (ruff check, ruff format --check).
lint:
	$(PYTHON) -m ruff check $(CHECKED)
	$(PYTHON) -m ruff format --check $(CHECKED)

# Type-check kgroup and tests/ (mypy, strict; tests relaxed; configured in pyproject.toml).
typecheck:
	$(PYTHON) -m mypy

# The unit tests: the sans-I/O core, codecs, assignors, config; no broker.
unit:
	$(PYTHON) -m pytest tests/unit -q

# Build the documentation site into site/ (strict: a warning fails the build).
docs:
	$(DOCS_ENV) $(PYTHON) -m mkdocs build --strict --site-dir site

# Everything fast: lint, types, unit tests, docs. Assumes `pip install -e ".[test]"`.
check: lint typecheck unit docs

# Lint, type-check, build the docs and run every test, on real brokers (installs Java and
# Maven if missing). Two phases, on pytest-xdist workers (--dist loadgroup). The first, on
# four workers: the analytics tests (Spark) all on one (xdist_group "spark": one JVM), the
# first half of the simulation's schedules on another, and the integration tests, which
# mostly wait on brokers, on the other two and on those once free (each worker has its own
# session brokers). The second, on three: the chaos schedules (private brokers and member
# processes, mostly waiting) one after another in two groups, one worker each, beside the
# unit tests and the other half of the simulation. The simulation's processes are niced
# (test_schedules in tests/simulation/test_simulation.py): they take the CPU the others
# leave idle.
# --durations lists the slowest tests of each phase, to keep `make test` under 20 minutes.
SIM_PART1 = tests/simulation/test_simulation.py::test_schedules[part1]
test:
	bash .ci/install-system-deps.sh
	$(PYTHON) -m pip install -q -e ".[test]"
	$(MAKE) --no-print-directory lint typecheck docs PYTHON="$(PYTHON)"
	$(PYTHON) -m pytest -ra --durations=25 -n 4 --dist loadgroup "$(SIM_PART1)" tests/integration tests/analytics
	$(PYTHON) -m pytest -ra --durations=15 -n 3 --dist loadgroup --deselect "$(SIM_PART1)" --ignore=tests/integration --ignore=tests/analytics
