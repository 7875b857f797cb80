"""The chaos suite on real brokers: seeded schedules of faults, members in their own
processes, and four invariants checked on every run, five with records (see ``_runner.py``).

Default run (``python -m pytest tests/chaos``): the fixed cases of
:func:`~._seeds.default_cases` (Kafka static with a broker restart and a black hole,
Kafka dynamic with latency, a mixed Java/kgroup cooperative-sticky group on Kafka, a
consumer-protocol group of kgroup, Java and confluent members on Kafka, a classic group
rolled onto the consumer protocol under faults (kgroup only, and with Java members),
groups whose topic grows and whose kgroup members subscribe with a pattern, tansu with a
restart, the mock cluster with coordinator moves, broker downs and injected errors).
``--chaos-seed N`` replays one seed, ``--chaos-count K`` runs random ones
(``--chaos-java``: mixed groups only; ``--chaos-protocol consumer|migration|migration-back``:
KIP-848 groups only, the last rolls onto the consumer protocol and back, not a default
case; ``--chaos-topics``, ``--chaos-regex``: growing topics, patterns), ``--run-slow`` adds
the soak. A failure prints the seed, the schedule, a one-line replay command and where the
member logs are.

Brokers: a private Kafka (``kafka_broker_factory``, its proxied listener behind a
:class:`~kgroup.testing.FaultProxy`) and a private tansu (``tansu_broker_factory``) per
schedule, since schedules restart them; a fresh mock cluster per schedule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgroup.testing import FaultProxy

from ._cases import ChaosCase, Totals
from ._runner import ChaosRunner, Target
from ._schedule import Schedule
from ._seeds import schedule_for

#: The soak: long fault windows, many more faults per schedule.
SOAK_WINDOW = 150.0


def make_target(broker: str, request: pytest.FixtureRequest) -> Target:
    """A fresh broker of ``broker``'s kind for one schedule (closed after the test)."""
    if broker == "kafka":
        factory = request.getfixturevalue("kafka_broker_factory")
        proxy = FaultProxy(name="chaos-kafka-proxy")
        try:
            kafka = factory(proxy=proxy)
        except BaseException:
            proxy.close()
            raise
        request.addfinalizer(proxy.close)  # runs before the factory stops the broker
        return Target("kafka", kafka, proxy)
    if broker == "tansu":
        return Target("tansu", request.getfixturevalue("tansu_broker_factory")())
    if broker == "mock":
        return Target("mock", request.getfixturevalue("mock_cluster"))
    raise ValueError(f"unknown broker {broker!r}")


async def run_case(
    schedule: Schedule,
    case: ChaosCase,
    request: pytest.FixtureRequest,
    logdir: Path,
    totals: Totals,
) -> None:
    workdir = logdir / f"{'soak-' if case.soak else ''}{schedule.label}"
    workdir.mkdir(parents=True, exist_ok=True)
    target = make_target(case.broker, request)
    verbose = request.config.getoption("verbose") > 1
    runner = ChaosRunner(
        schedule, target, workdir, replay=case.replay(), log=print if verbose else None
    )
    print(f"\n{schedule}")
    result = await runner.run()
    totals.record(result)
    print(result.summary())
    for note in result.notes:
        print(f"note: {note}")
    if not result.ok:
        pytest.fail(result.report(), pytrace=False)
    if result.inconclusive:
        pytest.skip(f"inconclusive, {result.schedule.label}: {result.inconclusive}")


async def test_chaos(
    chaos_case: ChaosCase, request: pytest.FixtureRequest, chaos_logdir: Path, chaos_totals: Totals
) -> None:
    schedule = schedule_for(chaos_case.broker, chaos_case.seed, records=chaos_case.records)
    await run_case(schedule, chaos_case, request, chaos_logdir, chaos_totals)


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_soak(
    chaos_case: ChaosCase, request: pytest.FixtureRequest, chaos_logdir: Path, chaos_totals: Totals
) -> None:
    schedule = schedule_for(
        chaos_case.broker, chaos_case.seed, fault_window=SOAK_WINDOW, records=chaos_case.records
    )
    await run_case(schedule, chaos_case, request, chaos_logdir, chaos_totals)
