"""Options, cases and totals of the chaos suite.

Options:

``--chaos-seed N``
    Replay seed ``N`` (on every broker; select one with ``-k kafka``). With
    ``--chaos-count K``: seeds ``N`` .. ``N+K-1``.
``--chaos-count K``
    Run ``K`` random seeds per broker instead of the default cases (each printed, so any of
    them replays with ``--chaos-seed``).
``--chaos-java``
    Only seeds whose schedule is a mixed Java/kgroup group (Kafka only): with
    ``--chaos-count K``, ``K`` such random seeds (with ``--chaos-seed N`` too: the first
    ``K`` from ``N`` on). The seeds replay without the option.
``--chaos-protocol consumer|migration|migration-back``
    Likewise, only Kafka seeds whose schedule runs the consumer protocol (kgroup, Java and
    confluent members), rolls a classic group onto it (``migration``), or onto it and back
    to classic (``migration-back``, a 30 s window; not among the default cases).
``--chaos-topics``
    Likewise, only Kafka seeds whose schedule grows the topic under the faults
    (``add_partitions`` steps; combines with the options above).
``--chaos-regex``
    Likewise, only Kafka seeds whose kgroup members subscribe with a pattern.

Without either, ``test_chaos`` runs :func:`~._seeds.default_cases` (fixed seeds that
cover every fault kind) and ``test_soak`` (``slow``: only with ``--run-slow``) one random
long schedule per broker.

After the run, the terminal summary lists every schedule (seed, faults per kind,
rebalances, time to stable) and the totals; ``chaos-totals.json`` in pytest's base temp
directory holds the same.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._cases import KNOWN_BUGS, TOTALS, ChaosCase, Totals, write_summary
from ._schedule import BROKERS, Schedule
from ._seeds import RECORDS_BROKERS, default_cases, records_cases, records_fit, schedule_for

_MARKS = {"kafka": pytest.mark.kafka, "tansu": pytest.mark.tansu, "mock": pytest.mark.mock_cluster}


def _random() -> random.Random:
    """Where random seeds come from: the system's, except under pytest-xdist (``make test``
    runs the chaos suite on a worker of its own), whose workers must all collect the same
    tests: there a generator seeded with the run's id, the same in every worker."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return random.Random(run) if run else random.SystemRandom()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kgroup-chaos", "kgroup chaos suite")
    group.addoption("--chaos-seed", type=int, default=None, help="replay this chaos seed")
    group.addoption(
        "--chaos-count", type=int, default=None, help="run this many random seeds per broker"
    )
    group.addoption(
        "--chaos-java",
        action="store_true",
        default=False,
        help="only seeds of mixed Java/kgroup groups (Kafka)",
    )
    group.addoption(
        "--chaos-protocol",
        choices=("consumer", "migration", "migration-back"),
        default=None,
        help="only seeds of consumer-protocol groups, of migrations, or of migrations back "
        "to classic (Kafka)",
    )
    group.addoption(
        "--chaos-topics",
        action="store_true",
        default=False,
        help="only seeds whose topic grows under the faults (Kafka)",
    )
    group.addoption(
        "--chaos-regex",
        action="store_true",
        default=False,
        help="only seeds whose kgroup members subscribe with a pattern (Kafka)",
    )
    group.addoption(
        "--chaos-records",
        action="store_true",
        default=False,
        help="only Kafka seeds of kgroup-only groups on one fixed topic, run with "
        "GroupConsumers that consume and commit records (invariant 5)",
    )
    group.addoption(
        "--chaos-logs",
        default=None,
        help="where member logs go (default $KGROUP_CHAOS_LOGS or TMPDIR/kgroup-chaos; "
        f"the newest {KEEP_SESSIONS} sessions are kept)",
    )


#: Session directories of member logs kept under the log root.
KEEP_SESSIONS = 10


@pytest.fixture(scope="session")
def chaos_logdir(request: pytest.FixtureRequest) -> Path:
    """This session's directory of member logs, outside pytest's rotating temp dirs (which
    other sessions on a shared machine prune): ``ROOT/run-DATE-TIME-PID``."""
    option = request.config.getoption("--chaos-logs", default=None)
    root = Path(
        option
        or os.environ.get("KGROUP_CHAOS_LOGS")
        or Path(tempfile.gettempdir()) / "kgroup-chaos"
    )
    root.mkdir(parents=True, exist_ok=True)
    session = root / time.strftime(f"run-%Y%m%d-%H%M%S-{os.getpid()}")
    session.mkdir()
    old = sorted((p for p in root.glob("run-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for stale in old[:-KEEP_SESSIONS]:
        shutil.rmtree(stale, ignore_errors=True)
    return session


def _wanted(config: pytest.Config) -> tuple[tuple[str, ...], Callable[[Schedule], bool]] | None:
    """The brokers and the schedules that ``--chaos-java`` / ``--chaos-protocol`` /
    ``--chaos-topics`` / ``--chaos-regex`` (Kafka only) and ``--chaos-records`` (Kafka and
    the mock cluster: :func:`records_fit`) ask for; None without any of them."""
    protocol = config.getoption("--chaos-protocol", default=None)
    java = config.getoption("--chaos-java", default=False)
    topics = config.getoption("--chaos-topics", default=False)
    regex = config.getoption("--chaos-regex", default=False)
    records = config.getoption("--chaos-records", default=False)
    kafka_only = protocol is not None or java or topics or regex
    if not kafka_only and not records:
        return None
    brokers = ("kafka",) if kafka_only else RECORDS_BROKERS
    return (
        brokers,
        lambda s: (
            (protocol is None or s.protocol == protocol)
            and (not java or bool(s.java_slots))
            and (not topics or "add_partitions" in s.kinds())
            and (not regex or s.pattern)
            and (not records or records_fit(s))
        ),
    )


def _seeds(config: pytest.Config) -> list[int] | None:
    seed = config.getoption("--chaos-seed", default=None)
    count = config.getoption("--chaos-count", default=None)
    if seed is None and count is None:
        return None
    if seed is None:
        system = _random()
        return [system.randint(1, 999_999) for _ in range(count)]
    return list(range(seed, seed + (count or 1)))


def _fitting_seeds(
    broker: str, start: int | None, count: int, wanted: Callable[[Schedule], bool]
) -> list[int]:
    """``count`` seeds whose schedule on ``broker`` is ``wanted`` (Java members, a
    protocol, records): random ones, or the first ones from ``start`` on."""
    system = _random()
    seeds: list[int] = []
    candidate = start if start is not None else system.randint(1, 999_999)
    while len(seeds) < count:
        if candidate not in seeds and wanted(schedule_for(broker, candidate)):
            seeds.append(candidate)
        candidate = candidate + 1 if start is not None else system.randint(1, 999_999)
    return seeds


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    soak = metafunc.function.__name__ == "test_soak"
    wanted = _wanted(config)
    records = bool(config.getoption("--chaos-records", default=False))
    if wanted is not None:
        brokers, predicate = wanted
        start = config.getoption("--chaos-seed", default=None)
        count = config.getoption("--chaos-count", default=None) or 1
        cases = [
            ChaosCase(b, s, soak, records)
            for b in brokers
            for s in _fitting_seeds(b, start, count, predicate)
        ]
    elif (seeds := _seeds(config)) is not None:
        cases = [ChaosCase(b, s, soak) for b in BROKERS for s in seeds]
    elif soak:
        system = _random()
        cases = [ChaosCase(b, system.randint(1, 999_999), True) for b in BROKERS]
    else:
        cases = [ChaosCase(b, s) for b, s in default_cases()]
        cases += [ChaosCase(b, s, records=True) for b, s in records_cases()]
    params = []
    for case in cases:
        marks: list[Any] = [_MARKS[case.broker]]
        reason = KNOWN_BUGS.get((case.test, case.broker, case.seed))
        if reason:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        label = (
            schedule_for(case.broker, case.seed, records=case.records).label
            if not soak
            else f"{case.broker}-seed{case.seed}"
        )
        params.append(pytest.param(case, marks=marks, id=label))
    metafunc.parametrize("chaos_case", params)


@pytest.fixture(scope="session")
def chaos_totals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Totals]:
    yield TOTALS
    path = tmp_path_factory.getbasetemp() / "chaos-totals.json"
    path.write_text(json.dumps(TOTALS.to_json(), indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    # Without pytest-xdist; under it the workers' totals are printed by tests/conftest.py.
    write_summary(terminalreporter, TOTALS)
