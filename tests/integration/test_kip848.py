"""GroupMember on the KIP-848 ``consumer`` group protocol, on Apache Kafka 4.4.0.

Members join, share a topic's partitions (the broker's ``uniform`` and ``range``
assignors), hand them over on close (revoke, then a leave heartbeat), and a static member
leaves with epoch -2 and comes back. Every MemberGroup checks on exit that no partition was
held by two members at once. Epoch numbers are never asserted (Kafka 4.3+ starts groups at
epoch 1 with an empty assignment and may batch target assignments).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kgroup import (
    GroupConfig,
    GroupMember,
    MemberState,
    OffsetAndMetadata,
    TopicPartition,
    UnsupportedVersion,
    UsageError,
)
from kgroup.testing import KafkaBroker, TansuBroker
from kgroup.testing._members import MemberGroup, covered
from tests.integration.test_consumer import Worker, produce, until


def consumer_config(broker: Any, group: str, topic: str, **overrides: Any) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": group,
        "topics": [topic],
        "group_protocol": "consumer",
        "max_poll_interval_ms": 30_000,
        "request_timeout_ms": 10_000,
    }
    values.update(overrides)
    return GroupConfig(**values)


def events_of(member: GroupMember, wanted: str) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []

    def hook(event: str, fields: Mapping[str, Any]) -> None:
        if event == wanted:
            found.append(dict(fields))

    member.add_event_hook(hook)
    return found


@pytest.mark.parametrize("assignor", [None, "range"], ids=["uniform", "range"])
async def test_two_members_share_then_one_hands_over_on_close(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str,
    assignor: str | None,
) -> None:  # fmt: skip
    """Two members split 4 partitions 2/2 without overlap; the one that closes revokes its
    two, sends a leave heartbeat, and the other then owns all four."""
    topic = make_topic(4)
    cfg = consumer_config(kafka_broker, unique_group, topic, group_remote_assignor=assignor)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_until(lambda: covered([a], topic, 4), timeout=60, what="a owns all")
        left = events_of(a.member, "member.leave_sent")
        b = await group.start(cfg)
        await group.wait_until(
            lambda: covered([a, b], topic, 4) and len(a.assignment) == len(b.assignment) == 2,
            timeout=60,
            what="2/2",
        )
        assert a.member.generation.generation_id > 0
        assert a.member.member_id and a.member.member_id != b.member.member_id
        revoked_before = [e for e in a.events if e.callback == "on_partitions_revoked"]
        assert revoked_before  # a gave two partitions up to b, by a revoke
        await a.close()
        assert left and left[0]["epoch"] == -1
        assert a.member.assignment == frozenset()
        await group.wait_until(lambda: covered([b], topic, 4), timeout=60, what="b owns all")
        assert b.member.state.name == "STABLE"
        assert b.member.valid_until is not None


async def test_static_member_leaves_for_now_and_comes_back(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A static member's close sends epoch -2 (KIP-1092's default for static members): the
    broker keeps its assignment, and the same instance id coming back gets it again without
    the other member taking it over."""
    topic = make_topic(4)
    cfg = consumer_config(kafka_broker, unique_group, topic)
    static = consumer_config(kafka_broker, unique_group, topic, group_instance_id="static-1")
    async with MemberGroup() as group:
        a = await group.start(cfg)
        s = await group.start(static)
        await group.wait_until(
            lambda: covered([a, s], topic, 4) and len(s.assignment) == 2, timeout=60, what="2/2"
        )
        owned = s.assignment
        left = events_of(s.member, "member.leave_sent")
        await s.close()
        assert left and left[0]["epoch"] == -2
        back = await group.start(static)
        await group.wait_until(lambda: back.assignment == owned, timeout=60, what="back")
        assert not (a.assignment & owned)


async def test_regex_subscription_is_resolved_by_the_broker(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """``topic_pattern`` goes to the broker as SubscribedTopicRegex (RE2/J, whole names)."""
    topic = make_topic(2)
    cfg = consumer_config(kafka_broker, unique_group, topic, topics=[], topic_pattern=topic + ".*")
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_until(lambda: covered([a], topic, 2), timeout=60, what="matched")
        assert {tp.topic for tp in a.assignment} == {topic}


async def test_tansu_without_the_consumer_protocol_says_use_classic(
    tansu_broker: TansuBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """H53 on a real broker without ConsumerGroupHeartbeat: poll() raises a fatal
    UnsupportedVersion that names the classic protocol."""
    topic = make_topic(1, broker=tansu_broker)
    async with GroupMember(consumer_config(tansu_broker, unique_group, topic)) as member:
        with pytest.raises(UnsupportedVersion, match='group_protocol="classic"'):
            for _ in range(100):
                await member.poll(timeout=0.5)


async def test_offsets_commit_under_the_member_epoch_and_fetch_back(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """OffsetCommit v9 carries the member epoch, also from inside a revoke callback (the
    member is RECONCILING then); OffsetFetch v9 reads the offsets back."""
    topic = make_topic(2)
    cfg = consumer_config(kafka_broker, unique_group, topic)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_until(lambda: covered([a], topic, 2), timeout=60, what="a owns both")
        await a.member.commit_offsets({p0: 10, p1: 20})
        assert await a.member.fetch_committed([p0, p1]) == {
            p0: OffsetAndMetadata(10),
            p1: OffsetAndMetadata(20),
        }
        committed_in_revoke: list[TopicPartition] = []

        async def commit_on_revoke(partitions: frozenset[TopicPartition]) -> None:
            await a.member.commit_offsets({tp: 30 + tp.partition for tp in partitions})
            committed_in_revoke.extend(partitions)

        a.hooks["on_partitions_revoked"] = commit_on_revoke
        b = await group.start(cfg)
        await group.wait_until(
            lambda: covered([a, b], topic, 2) and len(b.assignment) == 1, timeout=60, what="1/1"
        )
        assert len(committed_in_revoke) == 1
        moved = committed_in_revoke[0]
        assert await b.member.fetch_committed([moved]) == {
            moved: OffsetAndMetadata(30 + moved.partition)
        }


async def test_group_consumer_rolling_restart_processes_every_record_exactly_once(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """GroupConsumer on the consumer protocol: three workers restarted one by one while
    records flow; every record is processed exactly once (commits after every batch, and in
    the revoke callback on close)."""
    partitions, per_partition = 6, 300
    total = partitions * per_partition
    topic = make_topic(partitions)
    await produce(kafka_broker.bootstrap, topic, per_partition, partitions)
    cfg = consumer_config(kafka_broker, unique_group, topic)
    processed: collections.Counter[tuple[int, int]] = collections.Counter()
    workers = [await Worker(cfg, processed).start() for _ in range(3)]
    try:
        for i in range(3):
            mark = len(processed)
            await until(
                lambda mark=mark: len(processed) >= mark + total // 8,  # type: ignore[misc]
                timeout=60,
                what=f"progress before restart {i}",
            )
            await workers[i].close()
            workers[i] = await Worker(cfg, processed).start()
        await until(lambda: len(processed) >= total, timeout=90, what="every record processed")
    finally:
        for worker in workers:
            if not worker.stop.is_set():
                await worker.close()
    duplicates = {key: n for key, n in processed.items() if n != 1}
    assert duplicates == {}
    assert set(processed) == {(p, o) for p in range(partitions) for o in range(per_partition)}


async def test_poll_timeout_leaves_at_once_and_rejoins_on_the_next_poll(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """H52 on the broker: a member that stops polling sends a leave heartbeat (epoch -1) at
    its poll deadline, its lease ends there (no overlap with the member that takes its
    partitions over), and when it polls again it reports them lost and rejoins."""
    topic = make_topic(4)
    cfg = consumer_config(kafka_broker, unique_group, topic)
    slow = consumer_config(kafka_broker, unique_group, topic, max_poll_interval_ms=3_000)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        s = await group.start(slow)
        await group.wait_until(
            lambda: covered([a, s], topic, 4) and len(s.assignment) == 2, timeout=60, what="2/2"
        )
        left = events_of(s.member, "member.leave_sent")
        await s.pause()
        await group.wait_until(lambda: len(a.assignment) == 4, timeout=60, what="a takes over")
        assert left and left[0]["epoch"] == -1
        assert s.member.valid_until is not None and s.member.valid_until < 0  # -inf
        s.resume()
        await group.wait_until(
            lambda: covered([a, s], topic, 4) and len(s.assignment) == 2, timeout=60, what="back"
        )
        assert [e.callback for e in s.events].count("on_partitions_lost") == 1


async def test_isolated_heartbeat_mode_joins_and_leaves(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """``isolate_heartbeat=True``: the heartbeat task and the coordinator connection run on
    their own loop in a thread; the member still joins, reconciles in poll() and leaves."""
    topic = make_topic(2)
    cfg = consumer_config(kafka_broker, unique_group, topic, isolate_heartbeat=True)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_until(lambda: covered([a], topic, 2), timeout=60, what="a owns both")
        left = events_of(a.member, "member.leave_sent")
        await a.close()
        assert left and left[0]["epoch"] == -1
        assert a.member.closed


async def test_fastapi_member_mode_on_the_consumer_protocol(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """kgroup.fastapi's lifespan runs a consumer-protocol member: ready once it owns the
    topic, closed with the app."""
    import asyncio

    import httpx
    from fastapi import FastAPI

    from kgroup.fastapi import KGroupLifespan

    topic = make_topic(3)
    everything = frozenset(TopicPartition(topic, p) for p in range(3))
    owned = asyncio.Event()

    async def on_assignment(partitions: frozenset[TopicPartition]) -> None:
        if partitions == everything:
            owned.set()

    kg = KGroupLifespan(
        consumer_config(kafka_broker, unique_group, topic),
        on_assignment=on_assignment,
        poll_timeout=0.2,
    )
    app = FastAPI(lifespan=kg.lifespan)
    app.include_router(kg.health_router(prefix="/hc"))
    transport = httpx.ASGITransport(app=app)
    async with kg.lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        await asyncio.wait_for(owned.wait(), 60)
        response = await c.get("/hc/ready")
        assert response.status_code == 200, response.text
        assert response.json()["assignment"] == sorted(f"{topic}-{p}" for p in range(3))
        member = kg.member
    assert member.closed


async def test_tansu_with_the_fallback_becomes_a_classic_member(
    tansu_broker: TansuBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """``group_protocol_fallback=True``: on a broker without the consumer protocol the
    member logs ``member.protocol_fallback`` and joins as a classic member instead."""
    topic = make_topic(2, broker=tansu_broker)
    cfg = consumer_config(
        tansu_broker,
        unique_group,
        topic,
        group_protocol_fallback=True,
        group_remote_assignor="range",
        session_timeout_ms=6_000,  # used only once it falls back to classic
        heartbeat_interval_ms=500,
    )
    async with MemberGroup() as group:
        a = await group.start(cfg)
        fell_back = events_of(a.member, "member.protocol_fallback")
        await group.wait_until(lambda: covered([a], topic, 2), timeout=60, what="a owns both")
        assert a.member.config.group_protocol == "classic"
        assert len(fell_back) == 1 and 'group_protocol="classic"' in fell_back[0]["reason"]
        assert not a.errors


async def test_event_log_records_consumer_protocol_heartbeats(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, tmp_path: Any
) -> None:
    """The event log of a consumer-protocol member has its state changes, its partitions
    and its heartbeats with round trips, as the report pipeline reads them."""
    import json

    topic = make_topic(1)
    cfg = consumer_config(kafka_broker, unique_group, topic, event_log=str(tmp_path))
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_until(lambda: covered([a], topic, 1), timeout=60, what="owned")
        await a.close()
    lines = [
        json.loads(line)
        for f in sorted(tmp_path.glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    events = {line["event"] for line in lines}
    assert {"member.state_changed", "member.partitions_assigned", "member.heartbeat_ok"} <= events
    beats = [line for line in lines if line["event"] == "member.heartbeat_ok"]
    assert all(b["hb_rtt_ms"] >= 0 for b in beats)
    assert {line["member_uid"] for line in lines} == {lines[0]["member_uid"]}


async def test_subscribe_moves_the_member_to_other_topics(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """subscribe() with the consumer protocol: names to names, then to a broker-side
    pattern, then back to names; each time the member ends up owning exactly the
    partitions of what it subscribes to now. enforce_rebalance() is refused."""
    first, second = make_topic(2), make_topic(3)
    cfg = consumer_config(kafka_broker, unique_group, first)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_until(lambda: covered([a], first, 2), timeout=60, what="first")
        await a.member.subscribe([second])
        assert a.member.subscription == (second,)
        await group.wait_until(
            lambda: {tp.topic for tp in a.assignment} == {second} and covered([a], second, 3),
            timeout=60,
            what="second",
        )
        await a.member.subscribe(pattern=first + "|" + second)
        await group.wait_until(lambda: len(a.assignment) == 5, timeout=60, what="both")
        await a.member.subscribe([first])
        await group.wait_until(
            lambda: {tp.topic for tp in a.assignment} == {first}, timeout=60, what="first again"
        )
        # No client-side rebalance exists in this protocol: refused, and nothing changes.
        held = a.member.assignment
        with pytest.raises(UsageError, match="the broker starts every rebalance"):
            a.member.enforce_rebalance("the application asked")
        assert a.member.assignment == held and a.member.state is MemberState.STABLE
