"""What Apache Kafka 4.4.0 checks of a consumer-protocol member's OffsetCommit (v9), the
premise of kgroup's rule for STALE_MEMBER_EPOCH (``kgroup._core._kip848_offsets``): under
the member's current epoch a commit is taken whatever the member owns, even a partition it
has just given up; only an older epoch is checked, partition by partition, against the
epoch each partition was assigned at (KIP-1251). So a commit retried under a newer epoch
is safe only while the member still owns what it commits, and kgroup retries only then
(``tests/unit/test_kip848_commits.py``). The simulation's model takes commits by the same
rules (``ConsumerGroupModel.commit``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from kgroup._runtime._connection import BrokerConnection
from kgroup.testing import KafkaBroker
from kgroup.testing.messages import (
    CommitPartition,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    FindCoordinatorRequest,
    MetadataRequest,
    OffsetCommitRequest,
    TopicIdPartitions,
)
from tests.simulation.test_model_vs_kafka_848 import _until_the_coordinator_sees

MEMBER_EPOCH_OFFSET_VERSION = 9
STALE_MEMBER_EPOCH = 113
UNKNOWN_MEMBER_ID = 25


async def open_at_coordinator(broker: KafkaBroker, group: str, client_id: str) -> BrokerConnection:
    """A connection to ``broker`` (a single broker: the coordinator of every group) once it
    answers FindCoordinator for ``group``: the first lookup creates the offsets topic,
    which may still load. Closed again if it never answers."""
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = await BrokerConnection.open(host, int(port), client_id=client_id, timeout_ms=10_000)
    for _ in range(100):
        found = await conn.request(FindCoordinatorRequest(group_id=group), 10_000)
        if found.error_code == 0:
            return conn
        await asyncio.sleep(0.2)
    await conn.aclose()
    raise AssertionError(f"no coordinator for {group}")


async def test_kafka_takes_a_commit_under_the_current_epoch_whatever_the_member_owns(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    conn = await open_at_coordinator(kafka_broker, unique_group, "commit-epochs")
    try:
        await _until_the_coordinator_sees(conn, f"{unique_group}-warm", topic)
        a, b = f"a-{uuid.uuid4()}", f"b-{uuid.uuid4()}"

        async def heartbeat(
            member: str, epoch: int, owned: tuple[int, ...] | None = None
        ) -> ConsumerGroupHeartbeatResponse:
            fields: dict[str, Any] = {}
            if epoch == 0:
                fields = {
                    "rebalance_timeout_ms": 30_000,
                    "subscribed_topic_names": (topic,),
                    "topic_partitions": (),
                }
            elif owned is not None:
                fields = {"topic_partitions": (TopicIdPartitions(topic_id=tid, partitions=owned),)}
            resp: ConsumerGroupHeartbeatResponse = await conn.request(
                ConsumerGroupHeartbeatRequest(
                    group_id=unique_group, member_id=member, member_epoch=epoch, **fields
                ),
                10_000,
            )
            assert resp.error_code == 0, resp
            return resp

        async def commit(member: str, epoch: int, partition: int) -> int:
            resp = await conn.request(
                OffsetCommitRequest(
                    group_id=unique_group,
                    generation_id=epoch,
                    member_id=member,
                    group_instance_id=None,
                    partitions=(CommitPartition(topic=topic, partition=partition, offset=7),),
                    max_version=MEMBER_EPOCH_OFFSET_VERSION,
                ),
                10_000,
            )
            return int(resp.results[0][2])

        md = await conn.request(MetadataRequest(topics=(topic,)), 10_000)
        tid = md.topics[0].topic_id
        joined = await heartbeat(a, 0)
        first = joined.member_epoch
        assert joined.assignment is not None
        assert sorted(p for t in joined.assignment for p in t.partitions) == [0, 1]
        await heartbeat(a, first, (0, 1))
        await heartbeat(b, 0)  # b joins: a must give one partition up
        asked = await heartbeat(a, first, (0, 1))
        assert asked.assignment is not None and asked.member_epoch == first
        (kept,) = [p for t in asked.assignment for p in t.partitions]
        given = 1 - kept
        moved = await heartbeat(a, first, (kept,))  # revoked: a moves on
        now = moved.member_epoch
        assert now > first
        # Under a's current epoch Kafka takes a commit of the partition it gave up.
        assert await commit(a, now, given) == 0
        # Under its older epoch only what a has owned since that epoch.
        assert await commit(a, first, given) == STALE_MEMBER_EPOCH
        assert await commit(a, first, kept) == 0
        # A newer epoch than the member's, and a member the group does not know.
        assert await commit(a, now + 1, kept) == STALE_MEMBER_EPOCH
        assert await commit(f"z-{uuid.uuid4()}", now, kept) == UNKNOWN_MEMBER_ID
    finally:
        await conn.aclose()
