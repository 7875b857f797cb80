"""Offsets by topic id (OffsetCommit and OffsetFetch v10) on Apache Kafka 4.4.0.

The premise, on the wire: when a topic is deleted and created again under its name, a
consumer-protocol member's commit **by name** (v9) is stored for the new topic's
partition, while the same commit **by its old topic id** (v10) is refused with
UNKNOWN_TOPIC_ID and stores nothing. Then the member: a kgroup member commits and fetches
by topic id, and a member that still holds a partition of the deleted topic (it has not
polled since) fails its commit, naming the deletion, and leaves the new topic's offsets
alone. Unit tests: ``tests/unit/test_offsets_by_topic_id.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import structlog
from aiokafka.admin import AIOKafkaAdminClient

from kgroup import CommitFailed, GroupMember, OffsetAndMetadata, TopicPartition
from kgroup._runtime._connection import BrokerConnection
from kgroup.testing import KafkaBroker
from kgroup.testing.messages import (
    CommitPartition,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from tests.integration.test_kip848 import consumer_config
from tests.integration.test_kip848_commit_epochs import open_at_coordinator
from tests.simulation.test_model_vs_kafka_848 import _until_the_coordinator_sees

UNKNOWN_TOPIC_ID = 100


async def _topic_id(
    conn: BrokerConnection, topic: str, not_this: uuid.UUID | None = None
) -> uuid.UUID:
    """The topic's id once Metadata names one (other than ``not_this``)."""
    for _ in range(200):
        md: MetadataResponse = await conn.request(MetadataRequest(topics=(topic,)), 10_000)
        found = md.topics[0]
        if found.error_code == 0 and found.topic_id not in (not_this, uuid.UUID(int=0)):
            return found.topic_id
        await asyncio.sleep(0.1)
    raise AssertionError(f"no new topic id for {topic}")


async def _delete_and_create_again(broker: KafkaBroker, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
    for _ in range(200):  # until the deletion has gone through, CreateTopics is refused
        try:
            await broker.create_topic_async(topic, partitions, exist_ok=False, timeout=10)
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{topic} was not created again")


async def _committed(conn: BrokerConnection, group: str, topic: str, partition: int) -> int:
    """The group's committed offset, asked by name as an admin (v9), -1 for none."""
    fetched = await conn.request(
        OffsetFetchRequest(group_id=group, partitions=((topic, partition),), require_stable=False),
        10_000,
    )
    assert fetched.error_code == 0, fetched
    (part,) = fetched.partitions
    return int(part.offset)


async def test_kafka_stores_a_commit_by_name_on_the_new_topic_and_refuses_the_old_id(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(1)
    conn = await open_at_coordinator(kafka_broker, unique_group, "by-topic-id")
    try:
        await _until_the_coordinator_sees(conn, f"{unique_group}-warm", topic)
        member = f"a-{uuid.uuid4()}"
        old_id = await _topic_id(conn, topic)
        joined: ConsumerGroupHeartbeatResponse = await conn.request(
            ConsumerGroupHeartbeatRequest(
                group_id=unique_group,
                member_id=member,
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=(topic,),
                topic_partitions=(),
            ),
            10_000,
        )
        assert joined.error_code == 0, joined
        epoch = joined.member_epoch

        def commit(offset: int, ids: tuple[tuple[str, int, uuid.UUID], ...]) -> Any:
            return conn.request(
                OffsetCommitRequest(
                    group_id=unique_group,
                    generation_id=epoch,
                    member_id=member,
                    group_instance_id=None,
                    partitions=(CommitPartition(topic=topic, partition=0, offset=offset),),
                    max_version=10,
                    topic_ids=ids,
                ),
                10_000,
            )

        by_id = await commit(5, ((topic, 0, old_id),))
        assert by_id.results == ((topic, 0, 0),)  # v10, named again from the request
        assert await _committed(conn, unique_group, topic, 0) == 5
        await _delete_and_create_again(kafka_broker, topic, 1)
        new_id = await _topic_id(conn, topic, not_this=old_id)
        # By the old id: refused, nothing stored for the new topic.
        refused = await commit(7, ((topic, 0, old_id),))
        assert refused.results == ((topic, 0, UNKNOWN_TOPIC_ID),)
        assert await _committed(conn, unique_group, topic, 0) == -1
        # By name (v9), the same commit under the same epoch is stored for the new topic.
        by_name = await commit(7, ())
        assert by_name.results == ((topic, 0, 0),)
        assert await _committed(conn, unique_group, topic, 0) == 7
        assert new_id != old_id
    finally:
        await conn.aclose()


async def test_a_member_commits_by_topic_id_and_refuses_a_deleted_topic(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    conn = await open_at_coordinator(kafka_broker, unique_group, "by-topic-id")
    try:
        async with GroupMember(consumer_config(kafka_broker, unique_group, topic)) as member:
            for _ in range(120):
                await member.poll(timeout=0.5)
                if member.assignment == {p0, p1}:
                    break
            assert member.assignment == {p0, p1}
            with structlog.testing.capture_logs() as logs:
                await member.commit_offsets({p0: 10, p1: 20})
            (committed,) = [e for e in logs if e["event"] == "offsets.committed"]
            assert committed["by_topic_id"] is True
            assert await member.fetch_committed([p0, p1]) == {
                p0: OffsetAndMetadata(10),
                p1: OffsetAndMetadata(20),
            }
            assert await _committed(conn, unique_group, topic, 1) == 20  # and by name
            # The topic is deleted and created again; the member does not poll, so it
            # still holds the old topic's partitions when it commits them.
            old_id = await _topic_id(conn, topic)
            await _delete_and_create_again(kafka_broker, topic, 2)
            await _topic_id(conn, topic, not_this=old_id)
            with pytest.raises(CommitFailed, match=r"UNKNOWN_TOPIC_ID for .*was deleted"):
                await member.commit_offsets({p0: 11, p1: 21})
            assert await _committed(conn, unique_group, topic, 0) == -1
            assert await _committed(conn, unique_group, topic, 1) == -1
    finally:
        await conn.aclose()
