"""kgroup and aiokafka's group consumer in one classic group, on Apache Kafka 4.4.0: the
move from aiokafka to kgroup one member at a time (docs/guide/from-aiokafka.md).

A kgroup ``GroupConsumer`` and an ``AIOKafkaConsumer`` with the same assignor (aiokafka's
default, round robin) share a topic's partitions and consume the records produced then, with
auto-commit, which both clients also run before they give partitions up. Then the aiokafka
member stops (it commits and leaves the group), the kgroup member takes every partition
over from the committed offsets, and more records are produced: every record is
processed, and each once, since each handover follows a commit of what was handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from kgroup import GroupConfig, GroupConsumer, TopicPartition
from kgroup.testing import KafkaBroker
from tests.integration.test_consumer import produce, until

PARTITIONS = 4
PER_PARTITION = 50


async def test_kgroup_and_aiokafka_share_a_group_and_kgroup_takes_over(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(PARTITIONS)
    bootstrap = kafka_broker.bootstrap
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    processed: dict[str, list[tuple[int, int]]] = {"kgroup": [], "aiokafka": []}

    kg = GroupConsumer(
        GroupConfig(
            bootstrap_servers=bootstrap,
            group_id=unique_group,
            topics=[topic],
            assignors=("roundrobin",),
            session_timeout_ms=10_000,
        ),
        auto_offset_reset="earliest",
    )
    ak = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=unique_group,
        auto_offset_reset="earliest",
    )

    async def run_kgroup() -> None:
        while True:
            batch = await kg.getmany(timeout=0.2, max_records=10)
            for tp, records in batch.items():
                processed["kgroup"].extend((tp.partition, r.offset) for r in records)
            if batch:
                await asyncio.sleep(0.05)  # slow enough that both members get work

    async def run_aiokafka() -> None:
        while True:
            batch = await ak.getmany(timeout_ms=200, max_records=10)
            for tp, records in batch.items():
                processed["aiokafka"].extend((tp.partition, r.offset) for r in records)
            if batch:
                await asyncio.sleep(0.05)

    def shared() -> bool:
        mine, theirs = set(kg.assignment), set(ak.assignment())
        return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == everything

    hooked: list[str] = []  # the runtime's events reach event hooks (member guide)
    kg.member.add_event_hook(lambda event, fields: hooked.append(event))
    await kg.start()
    await ak.start()
    kg_task = asyncio.create_task(run_kgroup())
    ak_task = asyncio.create_task(run_aiokafka())
    try:
        await until(shared, timeout=60, what="the partitions shared by both clients")
        await produce(bootstrap, topic, PER_PARTITION, PARTITIONS)
        await until(
            lambda: (
                len(set(processed["kgroup"]) | set(processed["aiokafka"]))
                == PARTITIONS * PER_PARTITION
            ),
            timeout=60,
            what="the first records processed",
        )
        ak_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ak_task
        await ak.stop()  # commits what it handed out, and leaves the group
        await until(lambda: set(kg.assignment) == everything, timeout=60, what="kgroup owning all")
        await produce(bootstrap, topic, PER_PARTITION, PARTITIONS)
        await until(
            lambda: (
                len(set(processed["kgroup"]) | set(processed["aiokafka"]))
                == 2 * PARTITIONS * PER_PARTITION
            ),
            timeout=60,
            what="every record processed",
        )
    finally:
        for task in (kg_task, ak_task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await kg.close()
        await ak.stop()

    assert {"member.partitions_assigned", "member.partitions_revoked"} <= set(hooked)
    assert "member.left_group" in hooked, hooked
    first = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    # Each client processed the records of its own partitions while the group was shared.
    assert set(processed["aiokafka"]) & first and set(processed["kgroup"]) & first
    assert set(processed["aiokafka"]) <= first, "aiokafka processed after it left"
    both = processed["kgroup"] + processed["aiokafka"]
    assert len(both) == len(set(both)), "a record was processed twice"
    assert set(both) == {(p, o) for p in range(PARTITIONS) for o in range(2 * PER_PARTITION)}
