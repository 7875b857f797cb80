"""The KIP-848 ``consumer`` protocol on Apache Kafka 4.4.0: short sessions, crashes, a group
shared with Kafka's Java client and librdkafka, and the online migration classic ⇄ consumer.

The broker's consumer-group session is 45 s; each group here gets its own short session and
heartbeat interval first (:func:`kgroup.testing.set_consumer_group_timeouts`, Kafka 4.x
group configs), and kgroup's members are told the same session
(``consumer_session_timeout_ms``) for their lease. Epoch numbers are never asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kgroup import GroupConfig
from kgroup.testing import (
    KafkaBroker,
    MemberGroup,
    MemberRunner,
    covered,
    describe_group_configs,
    set_consumer_group_timeouts,
)

pytestmark = pytest.mark.kafka

SESSION_MS = 3_000
HEARTBEAT_MS = 300


def consumer_config(
    broker: KafkaBroker, group: str, topic: str, session_ms: int = SESSION_MS, **overrides: Any
) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": group,
        "topics": [topic],
        "group_protocol": "consumer",
        "consumer_session_timeout_ms": session_ms,
        "max_poll_interval_ms": 30_000,
        "request_timeout_ms": 10_000,
    }
    values.update(overrides)
    return GroupConfig(**values)


async def short_session(broker: KafkaBroker, group: str, session_ms: int = SESSION_MS,
                        heartbeat_ms: int = HEARTBEAT_MS) -> None:  # fmt: skip
    await set_consumer_group_timeouts(
        broker.bootstrap, group, session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms
    )


# -- 1. the toolkit's short session ------------------------------------------------------------


async def test_group_configs_set_the_heartbeat_interval_members_follow(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """After ``set_consumer_group_timeouts``, the broker describes the group's own session
    and interval, and a member heartbeats at that interval (300 ms instead of the broker's
    5000 ms): about ten heartbeats in three seconds."""
    topic = make_topic(2)
    await short_session(kafka_broker, unique_group)
    described = await describe_group_configs(
        kafka_broker.bootstrap,
        unique_group,
        ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"],
    )
    assert described == {
        "consumer.session.timeout.ms": str(SESSION_MS),
        "consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    }
    async with MemberGroup() as group:
        a = await group.start(consumer_config(kafka_broker, unique_group, topic))
        await group.wait_until(lambda: covered([a], topic, 2), timeout=30, what="a owns both")
        before, started = a.member.stats().heartbeats_sent, time.monotonic()
        await group.wait_until(lambda: time.monotonic() - started >= 3.0, timeout=10)
        sent = a.member.stats().heartbeats_sent - before
        assert 5 <= sent <= 16, f"{sent} heartbeats in 3 s at a {HEARTBEAT_MS} ms interval"
        assert a.errors == []


# -- 2. a crash: the survivor takes over after the short session ----------------------------


def lost_events(runner: MemberRunner) -> list[Any]:
    return [e for e in runner.events if e.callback == "on_partitions_lost"]


async def test_crashed_member_loses_its_partitions_after_the_session(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """b dies without a word (no leave heartbeat). The broker expires it after the group's
    3 s session, not the broker's 45 s, and a gets all four partitions. a never loses
    anything, and no partition is held by both (MemberGroup's check on exit)."""
    topic = make_topic(4)
    await short_session(kafka_broker, unique_group)
    cfg = consumer_config(kafka_broker, unique_group, topic)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        b = await group.start(cfg)
        await group.wait_until(
            lambda: covered([a, b], topic, 4) and len(a.assignment) == len(b.assignment) == 2,
            timeout=60,
            what="2/2",
        )
        taken = b.assignment
        await b.crash()
        crashed = time.monotonic()
        await group.wait_until(lambda: covered([a], topic, 4), timeout=30, what="a owns all")
        took = time.monotonic() - crashed
        # Expired between session - interval and session after the last heartbeat, then
        # a's next heartbeat brings the partitions: well under the broker's 45 s.
        assert SESSION_MS / 1000 - 2 * HEARTBEAT_MS / 1000 <= took <= SESSION_MS / 1000 + 5.0
        assert taken <= a.assignment
        assert lost_events(a) == [] and a.errors == []
