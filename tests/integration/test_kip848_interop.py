"""The KIP-848 ``consumer`` protocol on Apache Kafka 4.4.0: short sessions, crashes, a group
shared with Kafka's Java client and librdkafka, and the online migration classic ⇄ consumer.

The broker's consumer-group session is 45 s; each group here gets its own short session and
heartbeat interval first (:func:`kgroup.testing.set_consumer_group_timeouts`, Kafka 4.x
group configs), and kgroup's members are told the same session
(``consumer_session_timeout_ms``) for their lease. Epoch numbers are never asserted.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import structlog
from aiokafka.conn import create_conn

from kgroup import GroupConfig, GroupMember, TopicPartition
from kgroup._core._consumer_protocol import Assignment, Subscription
from kgroup._core._consumer_protocol import TopicPartition as WireTopicPartition
from kgroup._core._messages import FindCoordinatorRequest, JoinGroupRequest, SyncGroupRequest
from kgroup._errors import ErrorCode
from kgroup._protocol import from_wire, to_wire
from kgroup.testing import (
    JavaMember,
    KafkaBroker,
    MemberGroup,
    MemberRunner,
    OwnershipLog,
    covered,
    describe_group_configs,
    set_consumer_group_timeouts,
)
from tests.integration.test_consumer import Worker, produce, until
from tests.integration.test_subscription import add_partitions

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


async def test_a_revoke_of_partitions_never_installed_reaches_the_broker_without_a_poll(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Deviation 23: a joins and is given both partitions, but its application does not
    poll again, so it installs nothing. b joins, and Kafka takes one partition back from a.
    Kafka counts what it assigned as a's and waits for a heartbeat that reports a's
    partitions; a's heartbeats (its own task) now say it holds none, so b gets its
    partition within a few heartbeats, not at a's revocation deadline (its 60 s rebalance
    timeout), when Kafka would fence a (simulation consumer seed 11268)."""
    topic = make_topic(2)
    await short_session(kafka_broker, unique_group)
    cfg = consumer_config(kafka_broker, unique_group, topic, max_poll_interval_ms=60_000)
    a = GroupMember(cfg)
    await a.start()
    try:
        with structlog.testing.capture_logs() as entries:
            async with MemberGroup() as group:
                await a.poll(timeout=0)  # the first poll joins; the application stops here

                def given_both() -> bool:
                    return any(
                        e["event"] == "member.assignment_received" and e["partitions"] == 2
                        for e in entries
                    )

                await group.wait_until(given_both, timeout=30, what="a given both")
                b = await group.start(consumer_config(kafka_broker, unique_group, topic))
                # Well before a's 60 s deadline (without the report: about 60 s, then a
                # is fenced).
                await group.wait_until(
                    lambda: len(b.assignment) == 1, timeout=20, what="b gets a partition"
                )
                assert a.assignment == frozenset()  # a installed nothing: it never polled
                assert not any(
                    e["event"] in ("member.fenced", "member.lease_expired") for e in entries
                )
    finally:
        await a.close()


# -- 3. one group: kgroup, Kafka's Java client and librdkafka ----------------------------------


class ConfluentMember:
    """A confluent-kafka (librdkafka) consumer on the consumer protocol, polled in a thread of
    its own. Its rebalance callbacks (incremental under KIP-848) keep :attr:`assignment` and
    record holds on ``time.monotonic()``: assigned at the start of ``on_assign``, revoked at
    the end of ``on_revoke``, lost at the start of ``on_lost``."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.topic = topic
        self.conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        self.assignment: frozenset[TopicPartition] = frozenset()
        #: (monotonic time, "assigned" / "revoked" / "lost", partitions)
        self.holds: list[tuple[float, str, frozenset[TopicPartition]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"confluent-{name}", daemon=True)

    def start(self) -> ConfluentMember:
        self._thread.start()
        return self

    def _parts(self, parts: list[Any]) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(tp.topic, tp.partition) for tp in parts)

    def _on_assign(self, consumer: Any, parts: list[Any]) -> None:
        mine = self._parts(parts)
        self.holds.append((time.monotonic(), "assigned", mine))
        consumer.incremental_assign(parts)
        self.assignment = self.assignment | mine

    def _on_revoke(self, consumer: Any, parts: list[Any]) -> None:
        mine = self._parts(parts)
        consumer.incremental_unassign(parts)
        self.assignment = self.assignment - mine
        self.holds.append((time.monotonic(), "revoked", mine))

    def _on_lost(self, consumer: Any, parts: list[Any]) -> None:
        mine = self._parts(parts)
        self.holds.append((time.monotonic(), "lost", mine))
        consumer.incremental_unassign(parts)
        self.assignment = self.assignment - mine

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self.conf)
        consumer.subscribe(
            [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )  # fmt: skip
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is not None:
                    self.errors.append(str(message.error()))
        finally:
            consumer.close()  # revoke callback, then the leave heartbeat

    async def close(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 30)

    def record_into(self, ownership: OwnershipLog) -> None:
        for at, kind, parts in self.holds:
            if kind == "assigned":
                ownership.assigned(self.name, parts, 0, at)
            elif kind == "revoked":
                ownership.revoked(self.name, parts, at)
            else:
                ownership.lost(self.name, parts, at)


def java_into(java: JavaMember, ownership: OwnershipLog, name: str = "java") -> None:
    """The Java member's holds: its events carry ``t`` on the clock of time.monotonic()
    (assigned: the callback's start; revoked: its end; lost: its start)."""
    for event in java.events:
        kind = event.get("event")
        parts = frozenset(TopicPartition(str(t), int(p)) for t, p in event.get("partitions", ()))
        at = float(event.get("t", 0.0))
        if kind == "assigned":
            ownership.assigned(name, parts, int(event.get("generation", 0)), at)
        elif kind == "revoked":
            ownership.revoked(name, parts, at)
        elif kind == "lost":
            ownership.lost(name, parts, at)


def exactly_once(
    runners: list[MemberRunner], others: list[frozenset[TopicPartition]], topic: str, n: int
) -> bool:
    """Every kgroup member STABLE, every member (kgroup or not) holds something, and
    together they hold each partition of ``topic`` exactly once, by their own reports."""
    held = [r.assignment for r in runners] + others
    if not all(r.stable for r in runners) or not all(held):
        return False
    flat = [tp for part in held for tp in part]
    return len(flat) == len(set(flat)) == n and set(flat) == {
        TopicPartition(topic, p) for p in range(n)
    }


def java_parts(java: JavaMember) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in java.assignment)


async def test_mixed_group_of_kgroup_java_and_librdkafka_covers_exactly_once(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """kgroup, Kafka's Java KafkaConsumer and librdkafka (confluent-kafka), all on the
    consumer protocol in one group: start (3 members), scale-out (a second kgroup member),
    scale-in (librdkafka closes), a crash (the Java JVM is SIGKILLed; its partitions move
    after the group's 3 s session). At each stable point the six partitions are held exactly
    once; across the whole run no partition had two holders at once."""
    topic, n = make_topic(6), 6
    await short_session(kafka_broker, unique_group)
    cfg = consumer_config(kafka_broker, unique_group, topic)
    java = JavaMember(
        kafka_broker.bootstrap, unique_group, topic, protocol="consumer", client_id="java"
    )
    rdk = ConfluentMember(kafka_broker.bootstrap, unique_group, topic, "librdkafka")
    async with MemberGroup() as group:
        try:
            a = await group.start(cfg)
            await java.start()
            rdk.start()
            await group.wait_until(
                lambda: exactly_once([a], [java_parts(java), rdk.assignment], topic, n),
                timeout=60,
                what="kgroup + java + librdkafka",
            )
            b = await group.start(cfg)  # scale-out
            await group.wait_until(
                lambda: exactly_once([a, b], [java_parts(java), rdk.assignment], topic, n),
                timeout=60,
                what="scale-out to 4",
            )
            await rdk.close()  # scale-in
            rdk_gone = time.monotonic()
            assert rdk.assignment == frozenset() and rdk.errors == []
            await group.wait_until(
                lambda: exactly_once([a, b], [java_parts(java)], topic, n),
                timeout=60,
                what="scale-in to 3",
            )
            java.kill()  # a crash: no leave heartbeat
            killed = time.monotonic()
            await java.close()
            await group.wait_until(
                lambda: exactly_once([a, b], [], topic, n), timeout=60, what="after the crash"
            )
            assert time.monotonic() - killed < SESSION_MS / 1000 + 10
        finally:
            await java.close()
            await rdk.close()
        rdk.record_into(group.ownership)
        group.ownership.died(rdk.name, rdk_gone)
        java_into(java, group.ownership)
        group.ownership.died("java", killed)
        assert a.errors == [] and b.errors == []
        assert not lost_events(a) and not lost_events(b)


# -- 4. online migration: classic -> consumer -> classic (spec §10.9) ---------------------------


def classic_config(broker: KafkaBroker, group: str, topic: str) -> GroupConfig:
    return GroupConfig(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        topics=[topic],
        assignors=("range",),
        session_timeout_ms=6_000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=30_000,
        request_timeout_ms=10_000,
    )


def broker_log_lines(broker: KafkaBroker, group: str, since: int) -> list[str]:
    with broker.log_path.open("rb") as log:
        log.seek(since)
        text = log.read().decode("utf-8", "replace")
    return [line for line in text.splitlines() if group in line]


def converted_there_and_back(broker: KafkaBroker, group: str, since: int) -> bool:
    """The broker's log (from byte ``since``) shows it converted ``group`` to a consumer
    group and back to classic, once each, in that order."""
    conversions = [
        line.rsplit("] ", 1)[-1]
        for line in broker_log_lines(broker, group, since)
        if "Converted the" in line
    ]
    return conversions == [
        "Converted the classic group to a consumer group.",
        "Converted the consumer group to a classic group.",
    ]


async def test_online_migration_classic_to_consumer_and_back_exactly_once(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Three GroupConsumer workers of a classic group (range) are restarted one by one on the
    consumer protocol, then one by one back to classic, while they process records. Kafka
    converts the group when the first consumer-protocol member joins and back when the last
    one leaves (its log says so, once each way); in between, the classic members are
    followers whose JoinGroup names no leader (the broker assigns them). Every record is
    processed exactly once. Nothing was refused on the way."""
    partitions, per_partition = 6, 400
    total = partitions * per_partition
    topic = make_topic(partitions)
    await produce(kafka_broker.bootstrap, topic, per_partition, partitions)
    await short_session(kafka_broker, unique_group, 6_000, 500)
    classic = classic_config(kafka_broker, unique_group, topic)
    consumer = consumer_config(kafka_broker, unique_group, topic, session_ms=6_000)
    log_start = kafka_broker.log_path.stat().st_size
    processed: collections.Counter[tuple[int, int]] = collections.Counter()
    # Classic members' joins: (when, is_leader, leader); when the consumer-protocol members
    # were in the group: from the first one's join to the last one's leave.
    joins: list[tuple[float, bool, str]] = []
    mixed: list[float] = []

    async def worker(cfg: GroupConfig) -> Worker:
        new = Worker(cfg, processed)

        def hook(event: str, fields: Mapping[str, Any]) -> None:
            if event != "member.joined":
                return
            if cfg.group_protocol == "consumer":
                mixed.append(time.monotonic())
            else:
                joins.append((time.monotonic(), bool(fields["is_leader"]), str(fields["leader"])))

        new.consumer.member.add_event_hook(hook)
        return await new.start()

    workers = [await worker(classic) for _ in range(3)]
    try:
        for step, cfg in enumerate([consumer] * 3 + [classic] * 3):
            i = step % 3
            mark = len(processed)
            await until(
                lambda mark=mark: len(processed) >= mark + total // 16,  # type: ignore[misc]
                timeout=60,
                what=f"progress before step {step}",
            )
            await workers[i].close()
            if step == 5:  # the last consumer-protocol member has left
                mixed.append(time.monotonic())
            workers[i] = await worker(cfg)
        await until(lambda: len(processed) >= total, timeout=90, what="every record processed")
    finally:
        for w in workers:
            if not w.stop.is_set():
                await w.close()
    duplicates = {key: n for key, n in processed.items() if n != 1}
    assert duplicates == {}
    assert set(processed) == {(p, o) for p in range(partitions) for o in range(per_partition)}
    # The broker converted the group both ways, in that order.
    assert converted_there_and_back(kafka_broker, unique_group, log_start)
    # In the consumer group, every classic member was a follower with no leader named (§10.9);
    # in the classic group before and after, one of them led.
    inside = [(leads, leader) for at, leads, leader in joins if mixed[0] < at < mixed[-1]]
    outside = [leads for at, leads, _ in joins if not mixed[0] < at < mixed[-1]]
    assert inside and all(not leads and leader == "" for leads, leader in inside)
    assert any(outside)


@pytest.mark.parametrize("upgrader", ["kgroup", "java"])
async def test_an_online_upgrade_is_not_refused_while_a_cooperative_generation_awaits_its_follow_up(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, upgrader: str
) -> None:
    """A classic cooperative-sticky group of two kgroup members in a generation where one
    still revokes what moves to the other (a follow-up rebalance is certain, and kgroup's
    leader has marked every assignment): a consumer-protocol member joins then, a kgroup
    one or a Java one. Kafka converts the group at once, while the revocation is still in
    progress: the mark follows the Assignment's fields, where Kafka's conversion does not
    look (deviation 12). As user data, it made Kafka refuse with GROUP_ID_NOT_FOUND (chaos
    seed 98), which killed a Java member. The upgrader then gets partitions, and nobody's
    poll() fails."""
    from kgroup import GroupMember

    topic = make_topic(4)
    await short_session(kafka_broker, unique_group, 6_000, 500)
    log_start = kafka_broker.log_path.stat().st_size
    classic = dataclasses.replace(
        classic_config(kafka_broker, unique_group, topic), assignors=("cooperative-sticky",)
    )
    revoking, release = asyncio.Event(), asyncio.Event()

    class HoldsItsRevocation:
        async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
            if partitions:
                revoking.set()
                await release.wait()  # the application still finishing its work

        async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
            pass

        async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            pass

    first = GroupMember(classic, listener=HoldsItsRevocation())
    second = GroupMember(classic)
    upgrading = GroupMember(consumer_config(kafka_broker, unique_group, topic, session_ms=6_000))
    java = JavaMember(
        kafka_broker.bootstrap, unique_group, topic, protocol="consumer", client_id="upgrader"
    )
    errors: list[str] = []

    async def poll_loop(member: GroupMember) -> None:
        while True:
            try:
                await member.poll(timeout=0.2)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                await release.wait()  # stop on the first error, until the end

    def failures() -> list[str]:
        return errors + [str(e) for e in java.events if e.get("event") == "error"]

    def broker_says(text: str) -> bool:
        return any(text in line for line in broker_log_lines(kafka_broker, unique_group, log_start))

    def upgrader_assigned() -> bool:
        if upgrader == "kgroup":
            return bool(upgrading.assignment)
        return bool(java.assignment)

    tasks: list[asyncio.Task[None]] = []
    try:
        await first.start()
        tasks.append(asyncio.create_task(poll_loop(first)))
        await until(lambda: len(first.assignment) == 4, timeout=30, what="the first owns all")
        await second.start()
        tasks.append(asyncio.create_task(poll_loop(second)))
        async with asyncio.timeout(30):
            await revoking.wait()  # the generation's follow-up waits for the first to rejoin
        if upgrader == "kgroup":
            await upgrading.start()
            tasks.append(asyncio.create_task(poll_loop(upgrading)))
        else:
            await java.start()
        await until(
            lambda: (
                bool(failures())
                or broker_says("Cannot upgrade classic group")
                or broker_says("Converted the classic group to a consumer group")
            ),
            timeout=30,
            what="the upgrade converted or refused",
        )
        assert not broker_says("Cannot upgrade classic group"), "Kafka refused the upgrade"
        assert failures() == []
        assert not release.is_set() and broker_says("Converted the classic group")
        release.set()  # the revocation ends
        await until(
            lambda: bool(failures()) or upgrader_assigned(),
            timeout=30,
            what="the upgrader gets partitions",
        )
    finally:
        release.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await java.close()
        for member in (upgrading, second, first):
            await member.close()
    assert failures() == []


async def test_a_group_converted_back_by_a_static_replacement_takes_new_partitions(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A classic static member and a consumer-protocol static member share a group (Kafka
    converted it to a consumer group); the consumer-protocol one closes (it leaves with -2,
    its instance id kept) and a classic member with its instance id replaces it. Kafka
    converts the group back without a rebalance (``convertToClassicGroup`` prepares one only
    after a leave), and both classic members had joined a consumer group, whose JoinGroup
    answers name no leader. Partitions added then must still be taken: a member whose
    JoinGroup named no leader watches the partition counts itself. (Found by the chaos
    migration back, Kafka seed 67: without it the new partitions stayed unassigned.)"""
    topic = make_topic(2)
    await short_session(kafka_broker, unique_group, 6_000, 500)
    log_start = kafka_broker.log_path.stat().st_size
    classic = dataclasses.replace(
        classic_config(kafka_broker, unique_group, topic), metadata_max_age_ms=500
    )
    consumer = consumer_config(
        kafka_broker, unique_group, topic, session_ms=6_000, metadata_max_age_ms=500
    )
    async with MemberGroup() as group:
        a = await group.start(dataclasses.replace(classic, group_instance_id="a"))
        await group.wait_until(lambda: covered([a], topic, 2), timeout=60, what="a alone")
        b = await group.start(dataclasses.replace(consumer, group_instance_id="b"))
        await group.wait_until(
            lambda: covered([a, b], topic, 2) and bool(a.assignment and b.assignment),
            timeout=60,
            what="a classic and a consumer-protocol member",
        )
        await b.close()
        b2 = await group.start(dataclasses.replace(classic, group_instance_id="b"))
        await group.wait_until(
            lambda: covered([a, b2], topic, 2) and bool(a.assignment and b2.assignment),
            timeout=60,
            what="b replaced by a classic member",
        )
        assert converted_there_and_back(kafka_broker, unique_group, log_start)
        assert not (a.member.is_leader or b2.member.is_leader)  # nobody was told
        await add_partitions(kafka_broker, topic, 4)
        await group.wait_until(
            lambda: covered([a, b2], topic, 4), timeout=60, what="the new partitions taken"
        )
        assert not any(r.errors for r in (a, b2))


# -- 7. Kafka's conversion of a classic group reset mid-rebalance --------------------------------


class RawClassicMember:
    """A classic cooperative-sticky member spoken by hand on one connection (the test
    broker is its own coordinator), so that the test decides when it joins and syncs."""

    def __init__(self, conn: Any, group: str, topic: str) -> None:
        self.conn, self.group, self.topic = conn, group, topic
        self.member_id = ""

    async def send(self, request: Any) -> Any:
        return from_wire(await self.conn.send(to_wire(request)))

    async def find_coordinator(self) -> None:
        """Until the broker coordinates the group (its offsets topic may not exist yet)."""
        deadline = time.monotonic() + 30
        while (await self.send(FindCoordinatorRequest(group_id=self.group))).error_code:
            assert time.monotonic() < deadline, "no coordinator for the group"
            await asyncio.sleep(0.1)  # the broker creates __consumer_offsets meanwhile

    async def join(self, owned: tuple[int, ...] = (), generation: int = -1) -> Any:
        subscription = Subscription(
            topics=(self.topic,),
            owned_partitions=tuple(WireTopicPartition(self.topic, p) for p in owned),
            generation_id=generation,
        )
        while True:
            answer = await self.send(
                JoinGroupRequest(
                    group_id=self.group,
                    session_timeout_ms=30_000,
                    rebalance_timeout_ms=30_000,
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=(("cooperative-sticky", subscription.encode()),),
                )
            )
            if answer.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = answer.member_id
                continue
            assert answer.error_code == ErrorCode.NONE, answer
            return answer

    async def sync(self, generation: int, partitions: tuple[int, ...]) -> None:
        assignment = Assignment(
            partitions=tuple(WireTopicPartition(self.topic, p) for p in partitions)
        )
        answer = await self.send(
            SyncGroupRequest(
                group_id=self.group,
                generation_id=generation,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="cooperative-sticky",
                assignments=((self.member_id, assignment.encode()),),
            )
        )
        assert answer.error_code == ErrorCode.NONE, answer


@pytest.mark.parametrize("reset", [False, True], ids=["synced", "reset"])
async def test_kafka_converts_a_classic_group_reset_mid_rebalance_as_if_nobody_owned_anything(
    reset: bool, kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Kafka 4.4.0's conversion of a classic group to a consumer group takes each classic
    member's partitions from its last assignment, which Kafka empties when a JoinGroup
    comes in while the group completes a rebalance (``prepareRebalance`` from
    CompletingRebalance resets every member's assignment): a member whose SyncGroup timed
    out rejoins exactly so. If the first consumer-protocol member joins then, the group is
    converted as if nobody owned anything, and that member is given partitions that the
    classic members still own (cooperative members keep theirs across a failed sync, as
    KIP-429 says), until they rejoin and give them up. Found by chaos (Kafka seed 98, a
    migration back, 0.3 s of overlap); no client can see it coming (limitations.md).

    A classic member X owns all 4 partitions (generation 1) and rejoins (generation 2,
    CompletingRebalance, no SyncGroup yet). ``synced``: a kgroup consumer-protocol member C
    joins now; Kafka converts with X owning all 4, and C is given nothing while X has not
    given anything up (C heartbeats several times). ``reset``: X first joins again with
    changed metadata, which resets the assignments; then C is given its half at once,
    though X gave nothing up."""
    topic = make_topic(4)
    await short_session(kafka_broker, unique_group)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    conn = await create_conn(host, int(port), request_timeout_ms=30_000)
    x = RawClassicMember(conn, unique_group, topic)
    try:
        await x.find_coordinator()
        first = await x.join()
        await x.sync(first.generation_id, (0, 1, 2, 3))
        second = await x.join(owned=(0, 1, 2, 3), generation=first.generation_id)
        assert second.generation_id == first.generation_id + 1
        if reset:  # another JoinGroup with changed metadata while CompletingRebalance
            third = await x.join(owned=(0, 1, 2, 3), generation=second.generation_id + 100)
            assert third.generation_id == second.generation_id + 1
        log_start = kafka_broker.log_path.stat().st_size
        async with MemberGroup(check_ownership=False) as group:
            c = await group.start(consumer_config(kafka_broker, unique_group, topic))
            if reset:
                await group.wait_until(lambda: bool(c.assignment), timeout=30, what="C assigned")
                assert len(c.assignment) == 2  # X's, which X never gave up
            else:
                await group.wait_until(
                    lambda: c.member.stats().heartbeats_acknowledged >= 5,
                    timeout=30,
                    what="C heartbeating",
                )
                assert c.assignment == frozenset()  # X still owns them: nothing for C yet
            lines = broker_log_lines(kafka_broker, unique_group, log_start)
            assert any("Converted the classic group to a consumer group" in ln for ln in lines)
    finally:
        await conn.close()
