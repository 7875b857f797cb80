"""kgroup and Apache Kafka's own Java KafkaConsumer (kafka-clients 4.4.0, classic protocol,
range assignor) as members of one group on Apache Kafka."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pytest

from kgroup import TopicPartition
from kgroup._config import DEFAULT_MAX_POLL_INTERVAL_MS, DEFAULT_REQUEST_TIMEOUT_MS
from kgroup.testing import JavaMember, KafkaBroker
from kgroup.testing._members import MemberGroup, covered
from tests.integration.conftest import HEARTBEAT_MS, SESSION_MS, group_config

# The range assignor (the Java consumer's), and GroupConfig's own max poll interval and
# request timeout, not the integration defaults.
kgroup_config = functools.partial(
    group_config,
    assignors=("range",),
    max_poll_interval_ms=DEFAULT_MAX_POLL_INTERVAL_MS,
    request_timeout_ms=DEFAULT_REQUEST_TIMEOUT_MS,
)


def java_member(broker: KafkaBroker, group: str, topic: str) -> JavaMember:
    return JavaMember(
        broker.bootstrap,
        group,
        topic,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )


def disjoint_complete(
    a: frozenset[TopicPartition], b: frozenset[tuple[str, int]], topic: str, n: int
) -> bool:
    return (
        not (a & b)
        and (a | b) == {TopicPartition(topic, p) for p in range(n)}
        and bool(a)
        and bool(b)
    )


@pytest.mark.parametrize("leaver", ["java", "kgroup"])
async def test_kgroup_and_java_consumer_share_a_group(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, leaver: str
) -> None:
    topic = make_topic(6)
    async with MemberGroup() as group:
        java = await java_member(kafka_broker, unique_group, topic).start()
        try:
            ours = await group.start(kgroup_config(kafka_broker, unique_group, topic))
            await group.wait_until(
                lambda: (
                    ours.stable and disjoint_complete(ours.assignment, java.assignment, topic, 6)
                ),
                timeout=60,
                what="kgroup + Java share the topic",
            )
            assert len(ours.assignment) == len(java.assignment) == 3
            started = time.monotonic()
            if leaver == "java":
                assert await java.close() == 0  # KafkaConsumer.close(): LeaveGroup
                await group.wait_until(
                    lambda: covered([ours], topic, 6), timeout=30, what="kgroup takes over"
                )
            else:
                await ours.close()  # kgroup's close(): revoke + LeaveGroup
                await java.wait_for_assignment(
                    {TopicPartition(topic, p) for p in range(6)}, timeout=30
                )
            # The survivor took over through LeaveGroup, not after session expiry.
            assert time.monotonic() - started < SESSION_MS / 1000
        finally:
            await java.close()
