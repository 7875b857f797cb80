"""Topics that change under a running group, on Apache Kafka 4.4.0, on both protocols:
partitions added, a subscribed topic created only after the members joined, a topic that
starts matching a pattern, and a subscribed topic deleted while its partitions are owned.

On the ``classic`` protocol the leader's metadata watch notices the change and starts a
rebalance (spec §7.7); on the ``consumer`` protocol (KIP-848) the broker notices it and
sends new targets, which the members resolve by topic id through Metadata (§10.5). Either
way the group must end up owning exactly the partitions that exist, each once, with no
error surfacing from ``poll()``. Every MemberGroup checks on exit that no partition was
held by two members at once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from kgroup import GroupConfig, TopicPartition
from kgroup.testing import KafkaBroker
from kgroup.testing._members import MemberGroup, MemberRunner
from tests.integration.conftest import group_config
from tests.integration.test_kip848 import consumer_config
from tests.integration.test_subscription import every, holds

T = TopicPartition

PROTOCOLS = ["classic", "consumer"]


def config(
    broker: KafkaBroker, group: str, topics: list[str], protocol: str, **overrides: Any
) -> GroupConfig:
    """A member of ``group`` on ``protocol``; the classic leader re-reads metadata every
    500 ms (the consumer protocol's broker watches its own metadata)."""
    if protocol == "classic":
        overrides.setdefault("metadata_max_age_ms", 500)
        return group_config(broker, group, "", topics=topics, **overrides)
    return consumer_config(broker, group, "", topics=topics, **overrides)


async def admin_of(broker: KafkaBroker) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    return admin


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_partitions_added_are_shared_out(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, protocol: str
) -> None:
    topic = make_topic(2)
    cfg = config(kafka_broker, unique_group, [topic], protocol)
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(2)]
        await group.wait_until(lambda: holds(runners, every(topic, 2)), timeout=60, what="2")
        admin = await admin_of(kafka_broker)
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=6)})
        finally:
            await admin.close()
        await group.wait_until(
            lambda: (
                holds(runners, every(topic, 6))
                and sorted(len(r.assignment) for r in runners) == [3, 3]
            ),
            timeout=60,
            what="6 shared 3/3",
        )
        assert not any(r.errors for r in runners)


@pytest.mark.parametrize("subscription", ["names", "pattern"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_topic_created_after_the_members_joined_is_taken(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    unique_group: str,
    protocol: str,
    subscription: str,
) -> None:
    """Two members own a present topic's partitions; then a second topic is created that
    they subscribe to, by name (subscribed before it existed) or by a pattern that now
    matches it. Its partitions are shared out too.

    On the consumer protocol the broker resolves a pattern (RE2/J, whole names) and
    re-resolves it when its metadata changes, at most every 10 s (Kafka 4.4.0's
    ``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``): the new topic is taken well within a minute,
    not at the ten-minute ``group.consumer.regex.refresh.interval.ms``."""
    prefix = f"later-{uuid.uuid4().hex[:8]}"
    present, later = make_topic(2, name=f"{prefix}-a"), f"{prefix}-b"
    if subscription == "names":
        cfg = config(kafka_broker, unique_group, [present, later], protocol)
    else:
        cfg = config(kafka_broker, unique_group, [], protocol, topic_pattern=rf"{prefix}-.*")
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(2)]
        await group.wait_until(
            lambda: holds(runners, every(present, 2)), timeout=60, what="the present topic"
        )
        await kafka_broker.create_topic_async(later, 3)
        await group.wait_until(
            lambda: holds(runners, every(present, 2) | every(later, 3)),
            timeout=60,
            what="the later topic too",
        )
        assert not any(r.errors for r in runners)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_deleted_topic_is_given_up_and_the_rest_kept(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, protocol: str
) -> None:
    """Two members own two topics' partitions; one topic is deleted. They give its
    partitions up (revoked or lost: the partitions no longer exist) and keep sharing the
    other's, with no error from ``poll()``; a member that joins afterwards is given only
    partitions that exist."""
    kept, doomed = make_topic(4), make_topic(2)
    cfg = config(kafka_broker, unique_group, [kept, doomed], protocol)
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(2)]
        await group.wait_until(
            lambda: holds(runners, every(kept, 4) | every(doomed, 2)), timeout=60, what="both"
        )
        admin = await admin_of(kafka_broker)
        try:
            await admin.delete_topics([doomed])
        finally:
            await admin.close()
        await group.wait_until(
            lambda: holds(runners, every(kept, 4)), timeout=60, what="only the kept topic"
        )
        gave_up = {
            tp
            for r in runners
            for e in r.events
            if e.callback in ("on_partitions_revoked", "on_partitions_lost")
            for tp in e.partitions
        }
        assert every(doomed, 2) <= gave_up
        runners.append(await group.start(cfg))
        await group.wait_until(
            lambda: holds(runners, every(kept, 4)) and all(r.assignment for r in runners),
            timeout=60,
            what="a third member shares the kept topic",
        )
        assert not any(r.errors for r in runners)


@pytest.mark.parametrize("partitions", [2, 3], ids=["same-count", "more-partitions"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_topic_deleted_and_created_again_under_its_name_is_taken_anew(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    unique_group: str,
    protocol: str,
    partitions: int,
) -> None:
    """Two members own a topic's 2 partitions; an operator deletes it and creates it again
    under the same name (a new topic id), with as many partitions or more. The group ends
    up owning the new topic's partitions, each once, with no error from ``poll()``.

    On the consumer protocol the broker's targets name topics by id: every member that
    held any partition gives up the old topic's (revoked or lost) after the deletion and
    takes the new one's, and never has a partition assigned while it still holds that
    name. Another member may be given the new topic's partition while the old one's owner
    is still revoking it: they are different partitions to Kafka (different topic ids),
    so an overlap of a hold of the old topic with one of the new topic under the same
    name is allowed there, and only that one (limitations.md). On the classic protocol a
    recreation with as many partitions may pass unseen, as in the Java client (the leader
    compares partition counts; limitations.md); with more partitions the leader sees the
    count change and the group takes them all; no overlap is allowed."""
    topic = make_topic(2)
    cfg = config(kafka_broker, unique_group, [topic], protocol)
    async with MemberGroup(check_ownership=protocol == "classic") as group:
        runners = [await group.start(cfg) for _ in range(2)]
        await group.wait_until(lambda: holds(runners, every(topic, 2)), timeout=60, what="2")
        holders = [r for r in runners if r.assignment]
        admin = await admin_of(kafka_broker)
        deleted_at = time.monotonic()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
        await kafka_broker.create_topic_async(topic, partitions)
        await group.wait_until(
            lambda: (
                holds(runners, every(topic, partitions))
                and (protocol == "classic" or all(gave_up_since(r, deleted_at) for r in holders))
            ),
            timeout=60,
            what=f"the recreated topic's {partitions}",
        )
        for r in runners:
            held: set[TopicPartition] = set()
            for e in r.events:
                if e.callback in ("on_partitions_revoked", "on_partitions_lost"):
                    held -= e.partitions
                else:
                    assert not held & e.partitions, (r.name, e)
                    held |= e.partitions
        assert not any(r.errors for r in runners)
    if protocol == "consumer":
        for a, b in group.ownership.overlaps():
            earlier, later = sorted((a, b), key=lambda h: h.start)
            assert earlier.start < deleted_at <= later.start, f"{earlier} overlaps {later}"


def gave_up_since(runner: MemberRunner, since: float) -> bool:
    """Whether ``runner`` revoked or lost partitions after ``since``."""
    return any(
        e.at >= since and e.partitions and e.callback != "on_partitions_assigned"
        for e in runner.events
    )
