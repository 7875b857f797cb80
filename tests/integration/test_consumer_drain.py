"""GroupConsumer's drain on Apache Kafka 4.4.0: close() with the handoff, called from
another task than the one consuming, lets that task go on processing the partitions the
member still owns until they are revoked, and counts a batch as processed only once the
task is back for the next one (``kgroup/_runtime/_consumer_drain.py``).

Both handoffs: the consumer protocol's wait for the group's next heartbeat tick (interval
3 s here), and cooperative-sticky's marked rejoin. The records are processed exactly once
across the close, with auto-commit and a commit after every record (which goes on while
close() runs).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from kgroup import CommitFailed, GroupConfig, GroupConsumer, RebalanceInProgress
from kgroup.testing import KafkaBroker, set_consumer_group_timeouts
from tests.integration.conftest import group_config
from tests.integration.test_consumer import produce, until
from tests.integration.test_kip848 import consumer_config

pytestmark = pytest.mark.kafka

PARTITIONS = 4
PER_PARTITION = 600
INTERVAL_MS = 3_000

Processed = collections.Counter[tuple[int, int]]


class Worker:
    """A task that consumes with ``async for`` until the consumer is closed, taking
    ``pause`` seconds per record before it counts it (the processing), and ``stall``
    seconds for the next record once that is set."""

    def __init__(self, cfg: GroupConfig, processed: Processed, pause: float = 0.005) -> None:
        self.consumer = GroupConsumer(cfg, auto_offset_reset="earliest")
        self.processed = processed
        self.pause = pause
        self.stall = 0.0
        self.stalled: tuple[int, int] | None = None
        self.times: list[float] = []  # when each record was counted
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Worker:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for record in self.consumer:
            if self.stall and self.stalled is None:
                self.stalled = (record.partition, record.offset)
                await asyncio.sleep(self.stall)
            await asyncio.sleep(self.pause)
            self.processed[(record.partition, record.offset)] += 1
            self.times.append(time.monotonic())
            # A commit after every record, as many applications do: while close() runs and
            # after it, it must neither fail the loop nor commit what was not processed.
            with contextlib.suppress(CommitFailed, RebalanceInProgress):
                await self.consumer.commit()

    async def stop(self) -> None:
        """Close from this (the test's) task, then wait for the consuming task to end."""
        await self.consumer.close()
        assert self.task is not None
        await asyncio.wait_for(self.task, timeout=30)
        assert self.consumer.closed


async def config_for(
    protocol: str, kafka_broker: KafkaBroker, group: str, topic: str, **overrides: Any
) -> GroupConfig:
    if protocol == "consumer":
        await set_consumer_group_timeouts(
            kafka_broker.bootstrap,
            group,
            session_timeout_ms=30_000,
            heartbeat_interval_ms=INTERVAL_MS,
        )
        return consumer_config(
            kafka_broker,
            group,
            topic,
            consumer_session_timeout_ms=30_000,
            request_timeout_ms=20_000,
            **overrides,
        )
    return group_config(
        kafka_broker,
        group,
        topic,
        assignors=("cooperative-sticky",),
        heartbeat_interval_ms=INTERVAL_MS,
        session_timeout_ms=20_000,
        request_timeout_ms=20_000,
        **overrides,
    )


async def sharing(stays: Worker, leaves: Worker) -> None:
    """Until the two workers hold two partitions each and the leaver has made progress."""
    await until(
        lambda: len(stays.consumer.assignment) == 2 and len(leaves.consumer.assignment) == 2,
        timeout=60,
        what="two partitions each",
    )
    await until(lambda: len(leaves.times) >= 20, timeout=30, what="progress")


async def all_processed(processed: Processed) -> None:
    await until(
        lambda: len(processed) >= PARTITIONS * PER_PARTITION,
        timeout=120,
        what="every record processed",
    )


def duplicated(processed: Processed) -> dict[tuple[int, int], int]:
    """Records processed more than once (after checking that none is missing)."""
    expected = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert set(processed) == expected
    return {key: n for key, n in processed.items() if n != 1}


PROTOCOLS = pytest.mark.parametrize("protocol", ["consumer", "cooperative-sticky"])


@pytest.mark.parametrize("protocol", ["consumer", "cooperative-sticky", "consumer-isolated"])
async def test_a_consumer_closed_from_another_task_goes_on_delivering_until_its_handoff(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, protocol: str
) -> None:
    """Two workers share 4 partitions; one is closed with the handoff from the test's task.
    Its consuming task keeps processing records after close() started, until its revoke;
    the other worker then takes its partitions over where the revoke's commit left them,
    and every record is processed exactly once. ``consumer-isolated``: the consumer
    protocol with the heartbeat on its own thread (``isolate_heartbeat``)."""
    topic = make_topic(PARTITIONS)
    await produce(kafka_broker.bootstrap, topic, PER_PARTITION, PARTITIONS)
    isolated = protocol == "consumer-isolated"
    cfg = await config_for(
        protocol.removesuffix("-isolated"),
        kafka_broker,
        unique_group,
        topic,
        handoff_on_close=True,
        isolate_heartbeat=isolated,
    )
    processed: Processed = collections.Counter()
    stays = await Worker(cfg, processed).start()
    leaves = await Worker(cfg, processed).start()
    try:
        await sharing(stays, leaves)
        with structlog.testing.capture_logs() as logs:
            started = time.monotonic()
            await leaves.stop()
        revoked = [e for e in logs if e.get("event") == "member.partitions_revoked"]
        assert revoked, "the leaver revoked nothing"
        during = [t for t in leaves.times if t > started]
        assert len(during) >= 5, f"only {len(during)} records processed while close() ran"
        assert not [e for e in logs if e.get("event") == "consumer.batch_unfinished"]
        await all_processed(processed)
    finally:
        for worker in (stays, leaves):
            await worker.stop()
    assert duplicated(processed) == {}


@PROTOCOLS
async def test_a_batch_still_in_hand_when_the_drain_ends_is_delivered_again(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, protocol: str
) -> None:
    """The leaver's processing stalls on a record for longer than the revoke waits for it
    (a quarter of close()'s budget: 2 s here). The revoke commits that partition from the
    stalled record, so the other worker processes it again: at least once, with exactly that
    record duplicated, and nothing lost."""
    topic = make_topic(PARTITIONS)
    await produce(kafka_broker.bootstrap, topic, PER_PARTITION, PARTITIONS)
    cfg = await config_for(protocol, kafka_broker, unique_group, topic, handoff_on_close=True)
    leaving = dataclasses.replace(cfg, close_timeout_ms=8_000)
    processed: Processed = collections.Counter()
    stays = await Worker(cfg, processed).start()
    leaves = await Worker(leaving, processed).start()
    try:
        await sharing(stays, leaves)
        with structlog.testing.capture_logs() as logs:
            leaves.stall = 12.0  # the next record takes 12 s
            await leaves.stop()
        unfinished = [e for e in logs if e.get("event") == "consumer.batch_unfinished"]
        assert len(unfinished) == 1, [e.get("event") for e in logs]
        await all_processed(processed)
    finally:
        for worker in (stays, leaves):
            await worker.stop()
    duplicates = duplicated(processed)
    assert set(duplicates) <= {leaves.stalled} and set(duplicates.values()) <= {2}, duplicates


async def test_the_fastapi_lifespan_drains_at_shutdown(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """KGroupLifespan with ``handoff_on_close`` (consumer protocol): at shutdown its task
    goes on processing batches until the handoff revokes its partitions, then ends on its
    own; the worker beside it takes over, every record processed exactly once."""
    from kgroup.fastapi import KGroupLifespan

    topic = make_topic(PARTITIONS)
    await produce(kafka_broker.bootstrap, topic, PER_PARTITION, PARTITIONS)
    cfg = await config_for("consumer", kafka_broker, unique_group, topic, handoff_on_close=True)
    processed: Processed = collections.Counter()
    times: list[float] = []

    async def process(records: list[Any]) -> None:
        await asyncio.sleep(0.02)
        for record in records:
            processed[(record.partition, record.offset)] += 1
        times.append(time.monotonic())

    kg = KGroupLifespan(
        cfg,
        process=process,
        poll_timeout=0.2,
        max_records=5,
        consumer_options={"auto_offset_reset": "earliest"},
    )
    stays = await Worker(cfg, processed).start()
    try:
        async with kg.lifespan(object()):
            await until(
                lambda: len(stays.consumer.assignment) == 2 and len(kg.consumer.assignment) == 2,
                timeout=60,
                what="two partitions each",
            )
            await until(lambda: len(times) >= 10, timeout=30, what="progress")
            started = time.monotonic()
        during = [t for t in times if t > started]
        assert len(during) >= 3, f"only {len(during)} batches processed during the shutdown"
        await all_processed(processed)
    finally:
        await stays.stop()
    assert duplicated(processed) == {}
