"""The test brokers of ``kgroup.testing`` really work: each fixture, live.

* Kafka and tansu (the ``broker`` fixture, both): a created topic shows its partitions in
  metadata.
* Kafka: a restart keeps a group's committed offset (persistent log dir).
* tansu: a restart loses topics (memory storage), as documented.
* A member whose assignors include the group's common one but not its current protocol:
  Kafka takes it in, tansu refuses it (INCONSISTENT_GROUP_PROTOCOL), as documented.
* librdkafka mock cluster: an aiokafka group member joins, follows a coordinator move,
  sees a pushed error, and request tracking lists JoinGroup/SyncGroup/Heartbeat.
* JavaMember: Kafka's Java consumer joins a group on Kafka, owns all 6 partitions, and
  leaves the group when closed.

Every wait is event-driven (polling with short sleeps up to a generous deadline).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupAuthorizationFailedError

from kgroup.testing import (
    Broker,
    JavaMember,
    KafkaBroker,
    MockCluster,
    TansuBroker,
)

JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT, FIND_COORDINATOR = 11, 14, 12, 8, 10
GROUP_AUTHORIZATION_FAILED = 30


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], within: float = 30.0, what: str = ""
) -> None:
    """Poll ``check`` every 50 ms until it is true; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within:.0f}s waiting for {what or check}")
        await asyncio.sleep(0.05)


async def describe_topic(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([topic])
        result: dict[str, Any] = description
        return result
    finally:
        await admin.close()


async def describe_group(bootstrap: str, group: str) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
        (description,) = response.to_object()["groups"]
        result: dict[str, Any] = description
        return result
    finally:
        await admin.close()


# --- Kafka and tansu -----------------------------------------------------------------------


async def test_topic_metadata_shows_partitions(
    broker: Broker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(5)
    description = await describe_topic(broker.bootstrap, topic)
    assert description["error_code"] == 0
    partitions = description["partitions"]
    assert sorted(p["partition"] for p in partitions) == [0, 1, 2, 3, 4]
    assert all(p["leader"] >= 0 for p in partitions)


async def test_topic_created_async(broker: Broker, unique_group: str) -> None:
    topic = f"async-{unique_group}"
    await broker.create_topic_async(topic, 2)
    description = await describe_topic(broker.bootstrap, topic)
    assert len(description["partitions"]) == 2


async def test_kafka_restart_keeps_committed_offsets(
    kafka_broker_factory: Callable[..., KafkaBroker],
    make_topic: Callable[..., str],
    unique_group: str,
) -> None:
    kafka = kafka_broker_factory()
    topic = make_topic(3, broker=kafka)
    tp = TopicPartition(topic, 1)

    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=unique_group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: 42})
        assert await consumer.committed(tp) == 42
    finally:
        await consumer.stop()

    port = kafka.port
    kafka.restart()
    assert kafka.port == port

    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=unique_group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        # Right after a restart the coordinator may still be loading the offsets topic
        # (aiokafka then answers None): ask again until it answers, within a deadline.
        committed = None
        async with asyncio.timeout(60):
            while committed is None:
                committed = await consumer.committed(tp)
                if committed is None:
                    await asyncio.sleep(0.2)
        assert committed == 42
    finally:
        await consumer.stop()


async def test_tansu_restart_loses_topics(
    tansu_broker_factory: Callable[..., TansuBroker], unique_group: str
) -> None:
    tansu = tansu_broker_factory()
    topic = f"t-{unique_group}"
    tansu.create_topic(topic, 3)
    with pytest.raises(RuntimeError, match="error 36"):  # TOPIC_ALREADY_EXISTS
        tansu.create_topic(topic, 3)
    tansu.restart()
    tansu.create_topic(topic, 2)  # memory storage: the old topic is gone
    assert len((await describe_topic(tansu.bootstrap, topic))["partitions"]) == 2


def test_tansu_cli_topic_create(tansu_broker: TansuBroker, unique_group: str) -> None:
    topic = f"cli-{unique_group}"
    tansu_broker.create_topic_cli(topic, 4)
    description = asyncio.run(describe_topic(tansu_broker.bootstrap, topic))
    assert len(description["partitions"]) == 4


# --- librdkafka mock cluster ---------------------------------------------------------------


async def test_mock_cluster_group_coordinator_move_errors_and_tracking(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(6)
    mock_cluster.set_coordinator(unique_group, 1)
    mock_cluster.start_request_tracking()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=mock_cluster.bootstrap,
        group_id=unique_group,
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
    )
    await consumer.start()
    try:
        await eventually(lambda: len(consumer.assignment()) == 6, what="assignment of 6")
        await eventually(
            lambda: any(r.api_key == HEARTBEAT for r in mock_cluster.requests()),
            what="a heartbeat",
        )
        seen = {(r.api_key, r.broker_id) for r in mock_cluster.requests()}
        assert {(JOIN_GROUP, 1), (SYNC_GROUP, 1), (HEARTBEAT, 1)} <= seen
        assert all(r.timestamp_us > 0 for r in mock_cluster.requests())

        # Coordinator move: heartbeats follow the group to broker 2.
        mock_cluster.clear_requests()
        mock_cluster.set_coordinator(unique_group, 2)
        await eventually(
            lambda: any(
                r.api_key == HEARTBEAT and r.broker_id == 2 for r in mock_cluster.requests()
            ),
            what="a heartbeat to broker 2",
        )

        # A pushed error is what the client gets back.
        mock_cluster.push_request_errors(OFFSET_COMMIT, GROUP_AUTHORIZATION_FAILED)
        with pytest.raises(GroupAuthorizationFailedError):
            await consumer.commit({TopicPartition(topic, 0): 1})
        await consumer.commit({TopicPartition(topic, 0): 1})  # the stack is used up

        # Per-broker error with delay, counted until used.
        mock_cluster.broker_push_request_error_rtts(2, HEARTBEAT, [(0, 100)])
        await eventually(
            lambda: mock_cluster.broker_error_stack_count(2, HEARTBEAT) == 0,
            what="the pushed heartbeat delay to be used",
        )

        mock_cluster.stop_request_tracking()
        mock_cluster.clear_requests()
        assert mock_cluster.requests() == []
    finally:
        await consumer.stop()


def test_mock_cluster_controls(mock_cluster: MockCluster) -> None:
    assert len(mock_cluster.bootstrap.split(",")) == 3
    assert mock_cluster.broker_ids == [1, 2, 3]
    mock_cluster.set_rtt(3, 20)
    mock_cluster.set_rtt(3, 0)
    mock_cluster.broker_down(3)
    mock_cluster.broker_up(3)
    mock_cluster.set_apiversion(HEARTBEAT, 0, 4)
    mock_cluster.set_group_initial_rebalance_delay_ms(0)
    mock_cluster.create_topic("controls", 2, 1)
    mock_cluster.set_partition_leader("controls", 0, 2)


def test_mock_cluster_close_is_idempotent() -> None:
    cluster = MockCluster(1)
    assert cluster.bootstrap.startswith("127.0.0.1:")
    cluster.close()
    cluster.close()
    assert cluster.closed
    with pytest.raises(RuntimeError, match="closed"):
        cluster.create_topic("late", 1)


# --- Java client -------------------------------------------------------------------------


async def test_java_member_joins_and_leaves(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(6)
    everything = {(topic, p) for p in range(6)}
    member = JavaMember(kafka_broker.bootstrap, unique_group, topic, session_timeout_ms=10_000)
    await member.start()
    try:
        await member.wait_for_assignment(everything, timeout=60)
        assigned = await member.wait_for(lambda e: e["event"] == "assigned")
        assert {(t, p) for t, p in assigned["partitions"]} == everything
        assert assigned["generation"] >= 1
        group = await describe_group(kafka_broker.bootstrap, unique_group)
        assert group["state"] == "Stable"
        assert len(group["members"]) == 1
    finally:
        code = await member.close()
    assert code == 0
    assert member.events[-1]["event"] == "closed"
    assert member.assignment == frozenset()
    revoked = [e for e in member.events if e["event"] == "revoked"]
    assert revoked and {(t, p) for t, p in revoked[-1]["partitions"]} == everything
    # A graceful close sends LeaveGroup: the group is empty at once, no session expiry.
    group = await describe_group(kafka_broker.bootstrap, unique_group)
    assert group["members"] == []


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_a_member_without_the_current_protocol_but_with_a_common_one(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A group runs ``cooperative-sticky`` (its one member also offers ``range``); a member
    offering only ``range`` joins. Kafka takes it in (every member supports ``range``, which
    the next rebalance selects); tansu 0.6.0 answers INCONSISTENT_GROUP_PROTOCOL, since it
    checks the newcomer against the protocol the group runs (docs/design/brokers.md)."""
    from kgroup.testing._members import MemberGroup
    from tests.integration.conftest import group_config

    topic = make_topic(4)
    async with MemberGroup(check_ownership=False) as group:
        both = group_config(broker, unique_group, topic, assignors=["cooperative-sticky", "range"])
        first = await group.start(both)
        await group.wait_until(
            lambda: first.stable and len(first.assignment) == 4, timeout=60, what="the first"
        )
        second = await group.start(group_config(broker, unique_group, topic, assignors=["range"]))

        def joined() -> bool:
            runs_range = first.member.generation.protocol_name == "range"
            return second.stable and bool(second.assignment) and first.stable and runs_range

        await group.wait_until(
            lambda: bool(second.errors) or joined(),
            timeout=60,
            what="the second member joined (the group on range) or refused",
        )
        refused = [type(e).__name__ for e in second.errors]
        if isinstance(broker, KafkaBroker):
            assert refused == [] and joined()
        else:
            assert refused[:1] == ["InconsistentGroupProtocol"]
