"""GroupConsumer on real brokers: delivery, positions, commits across rebalances and crashes.

The basic delivery test runs on Apache Kafka and tansu; the rebalance, crash and eviction
tests on Apache Kafka (the reference for the group protocol).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiokafka import AIOKafkaProducer

from kgroup import (
    CommitFailed,
    GroupConfig,
    GroupConsumer,
    NoOffsetForPartition,
    OffsetAndMetadata,
    OffsetsError,
    RebalanceInProgress,
    TopicPartition,
    UsageError,
)
from kgroup.testing import (
    Broker,
    KafkaBroker,
    MemberGroup,
    ProxiedBroker,
    set_consumer_group_timeouts,
)
from tests.integration.conftest import SESSION_MS, group_config

PROC = Path(__file__).with_name("_consumer_proc.py")

# Members here must poll within 20 s (the shared default is 30 s).
config = functools.partial(group_config, max_poll_interval_ms=20_000)


async def until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
        await asyncio.sleep(0.02)


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    """``per_partition`` keyed records into each partition; value ``"<partition>:<i>"``."""
    async with AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        futures = [
            await producer.send(topic, key=f"k{i}".encode(), value=f"{p}:{i}".encode(), partition=p)
            for i in range(per_partition)
            for p in range(partitions)
        ]
        await asyncio.gather(*futures)


class Recorder:
    """A user listener that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition], float]] = []

    def on_partitions_assigned(self, tps: frozenset[TopicPartition]) -> None:
        self.calls.append(("assigned", tps, time.monotonic()))

    def on_partitions_revoked(self, tps: frozenset[TopicPartition]) -> None:
        self.calls.append(("revoked", tps, time.monotonic()))

    def on_partitions_lost(self, tps: frozenset[TopicPartition]) -> None:
        self.calls.append(("lost", tps, time.monotonic()))


# -- 1. delivery, getmany, pause/resume, seek, the poll timer (Kafka and tansu) ---------------


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_consume_pause_resume_seek_and_poll_timer(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(3)
    await produce(broker.bootstrap, topic, 10, 3)
    expected = {(p, i): f"{p}:{i}" for p in range(3) for i in range(10)}
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    cfg = config(broker.bootstrap, unique_group, topic, max_poll_interval_ms=4_000)
    consumer = GroupConsumer(
        cfg, auto_offset_reset="earliest", enable_auto_commit=False, value_deserializer=bytes.decode
    )
    async with consumer:
        seen: dict[tuple[int, int], str] = {}
        async with asyncio.timeout(60):
            async for record in consumer:
                seen[(record.partition, record.offset)] = record.value
                if len(seen) == len(expected):
                    break
        assert seen == expected
        assert consumer.assignment == {TopicPartition(topic, p) for p in range(3)}
        assert await consumer.position(tp0) == 10
        assert consumer.stats().records_delivered == 30

        # max_records caps a batch; seek moves the position back.
        consumer.seek(tp0, 2)
        batch = await consumer.getmany(tp0, timeout=10, max_records=3)
        assert [r.offset for r in batch[tp0]] == [2, 3, 4]
        assert await consumer.position(tp0) == 5

        # A paused partition delivers nothing until resumed.
        consumer.seek(tp0, 0)
        consumer.seek(tp1, 0)
        consumer.pause(tp1)
        assert consumer.paused() == {tp1}
        got: collections.Counter[int] = collections.Counter()
        async with asyncio.timeout(30):
            while got[0] < 10:
                for tp, records in (await consumer.getmany(timeout=1)).items():
                    got[tp.partition] += len(records)
        assert got[1] == 0
        consumer.resume(tp1)
        assert consumer.paused() == frozenset()
        async with asyncio.timeout(30):
            while got[1] < 10:
                for tp, records in (await consumer.getmany(tp1, timeout=1)).items():
                    got[tp.partition] += len(records)
        assert got[1] == 10

        # Commit and committed() agree.
        await consumer.commit({tp0: OffsetAndMetadata(7, metadata="done")})
        assert await consumer.committed(tp0) == 7
        assert consumer.stats().commits_ok == 1

        # The poll timer: a fetch call resets it ...
        def poll_deadline() -> float:
            return float(consumer.member._core_call(lambda core: core.timers.poll.deadline))

        before = poll_deadline()
        await consumer.getmany(timeout=0)
        assert poll_deadline() > before
        # ... and a fetch waiting for longer than max_poll_interval_ms (4 s) keeps the
        # member in its generation: the wait itself counts as polling.
        generation = consumer.member.generation.generation_id
        rebalances = consumer.stats().rebalances
        assert await consumer.getmany(tp0, timeout=6) == {}
        assert consumer.member.generation.generation_id == generation
        assert consumer.stats().rebalances == rebalances
        assert consumer.assignment == {TopicPartition(topic, p) for p in range(3)}


@pytest.mark.kafka
async def test_waiting_fetch_runs_a_rebalance_at_once_and_close_commits_first(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    await produce(kafka_broker.bootstrap, topic, 5, 2)
    cfg = config(kafka_broker.bootstrap, unique_group, topic, max_poll_interval_ms=60_000)
    first_listener = Recorder()
    first = GroupConsumer(
        cfg, listener=first_listener, auto_offset_reset="earliest", auto_commit_interval_ms=60_000
    )
    second = GroupConsumer(cfg, auto_offset_reset="earliest")
    async with first:
        got = 0
        async with asyncio.timeout(30):
            while got < 10:
                got += sum(len(r) for r in (await first.getmany(timeout=1)).values())
        # Nothing left to read: this call waits. Its poll slice is 30 s, so only the early
        # wake on a pending rebalance lets the second consumer in within 15 s.
        waiting = asyncio.create_task(first.getmany(timeout=40))
        started = time.monotonic()
        async with second:
            async with asyncio.timeout(15):
                while len(second.assignment) != 1:
                    await second.getmany(timeout=0.2)
            joined_after = time.monotonic() - started
            assert not waiting.done()  # the rebalance ran inside the waiting call
            # The second consumer can see its partition before the first one's waiting
            # call has run its own callback: wait for that callback, not for a moment.
            await until(
                lambda: first_listener.calls[-1][0] == "assigned",
                timeout=15,
                what="the first consumer's on_partitions_assigned",
            )
            assert not waiting.done()
            assert len(first.assignment) == 1
            kinds = [kind for kind, _, _ in first_listener.calls]
            assert kinds[-3:] == ["assigned", "revoked", "assigned"]
            # The revoke auto-committed what the first consumer had been handed.
            (moved,) = second.assignment
            assert await second.committed(moved) == 5
            assert await second.position(moved) == 5
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            assert joined_after < 15
            # G47: close commits, then revokes, then leaves.
            (kept,) = first.assignment
            first.seek(kept, 3)
            with structlog.testing.capture_logs() as logs:
                await first.close()
            events = [e["event"] for e in logs]
            order = [
                events.index("consumer.committed"),
                events.index("member.partitions_revoked"),
                events.index("member.left_group"),
            ]
            assert order == sorted(order), events
            assert await second.committed(kept) == 3


@pytest.mark.kafka
async def test_offset_reset_policies(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(1)
    tp = TopicPartition(topic, 0)
    await produce(kafka_broker.bootstrap, topic, 3, 1)
    # "none": the first fetch call names the partition; after seek() it is consumed.
    strict = GroupConsumer(
        config(kafka_broker.bootstrap, unique_group + "-none", topic), auto_offset_reset="none"
    )
    async with strict:
        with pytest.raises(NoOffsetForPartition) as info:
            async with asyncio.timeout(30):
                while True:
                    await strict.getmany(timeout=0.5)
        assert info.value.partitions == {tp}
        assert await strict.getmany(timeout=0.2) == {}  # raised once, then just not fetched
        strict.seek(tp, 1)
        batch = await strict.getmany(timeout=10)
        assert [r.offset for r in batch[tp]] == [1, 2]
    # "latest": only what is produced after the assignment.
    latest = GroupConsumer(config(kafka_broker.bootstrap, unique_group + "-latest", topic))
    async with latest:
        async with asyncio.timeout(30):
            while tp not in latest.assignment:
                assert await latest.getmany(timeout=0.2) == {}
        assert await latest.position(tp) == 3
        await produce(kafka_broker.bootstrap, topic, 2, 1)
        got: list[int] = []
        async with asyncio.timeout(30):
            while len(got) < 2:
                got += [r.offset for r in (await latest.getmany(timeout=1)).get(tp, [])]
        assert got == [3, 4]


@pytest.mark.kafka
async def test_seek_to_beginning_and_end_and_offset_lookups(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    # Kafka only: tansu answers ListOffsets(latest) with its last batch's base offset + 1
    # (docs/design/brokers.md), so its end offsets are not the log's end.
    broker = kafka_broker
    topic = make_topic(2)
    await produce(broker.bootstrap, topic, 5, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    cfg = config(broker.bootstrap, unique_group, topic)
    consumer = GroupConsumer(
        cfg, auto_offset_reset="earliest", enable_auto_commit=False, value_deserializer=bytes.decode
    )
    async with consumer:
        # Lookups need no assignment.
        assert await consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert await consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 5}
        async with asyncio.timeout(30):
            while consumer.assignment != {tp0, tp1}:
                await consumer.getmany(timeout=0.2, max_records=1)
        assert consumer.highwater(tp0) in (None, 5)

        # seek_to_end() with no partitions moves every owned one, at once.
        await consumer.seek_to_end()
        assert (await consumer.position(tp0), await consumer.position(tp1)) == (5, 5)
        produced_from = int(time.time() * 1000)
        await produce(broker.bootstrap, topic, 3, 2)  # offsets 5, 6, 7
        got: dict[int, list[int]] = {0: [], 1: []}
        async with asyncio.timeout(30):
            while len(got[0]) + len(got[1]) < 6:
                for tp, records in (await consumer.getmany(timeout=1)).items():
                    got[tp.partition] += [r.offset for r in records]
        assert got == {0: [5, 6, 7], 1: [5, 6, 7]}  # nothing from before the seek
        assert consumer.highwater(tp0) == 8

        # One partition back to its beginning; the other stays where it is.
        await consumer.seek_to_beginning(tp1)
        assert (await consumer.position(tp0), await consumer.position(tp1)) == (8, 0)
        batch = await consumer.getmany(tp1, timeout=10, max_records=2)
        assert [r.offset for r in batch[tp1]] == [0, 1]

        # commit() commits where seek_to_end() put the partition.
        await consumer.seek_to_end(tp1)
        await consumer.commit()
        assert await consumer.committed(tp1) == 8

        # A time: the first record at or after it; None past the last record.
        found = await consumer.offsets_for_times({tp0: produced_from, tp1: 2**62})
        assert found[tp1] is None
        hit = found[tp0]
        assert hit is not None
        assert hit.offset == 5
        assert hit.timestamp >= produced_from
        consumer.seek(tp0, hit.offset)
        batch = await consumer.getmany(tp0, timeout=10, max_records=1)
        assert [r.value for r in batch[tp0]] == ["0:0"]  # the second produce's first record

        # Bad input is named; nothing moves.
        other = TopicPartition(topic, 7)
        with pytest.raises(UsageError, match=r"seek_to_end: partition .*-7 is not assigned"):
            await consumer.seek_to_end(tp0, other)
        assert await consumer.position(tp0) == 6
        with pytest.raises(TypeError, match="end_offsets: expected an iterable"):
            await consumer.end_offsets(tp0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="offsets_for_times: the time for"):
            await consumer.offsets_for_times({tp0: -1})
        with pytest.raises(UsageError, match="highwater"):
            consumer.highwater(other)
    with pytest.raises(UsageError, match="closed"):
        await consumer.end_offsets([tp0])


@pytest.mark.kafka
async def test_offset_lookup_of_a_missing_topic_fails_with_offsets_error(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(1)
    cfg = config(kafka_broker.bootstrap, unique_group, topic, request_timeout_ms=2_000)
    async with GroupConsumer(cfg) as consumer:
        missing = TopicPartition(topic + "-missing", 0)
        started = time.monotonic()
        with pytest.raises(OffsetsError) as info:
            await consumer.end_offsets([missing, TopicPartition(topic, 0)])
        assert info.value.api == "ListOffsets"
        assert "-missing-0" in str(info.value)
        assert time.monotonic() - started < 30
        # The consumer goes on working.
        assert await consumer.end_offsets([TopicPartition(topic, 0)]) == {
            TopicPartition(topic, 0): 0
        }


# -- 2. exactly once across a rolling restart with graceful leaves (Kafka) ---------------------


class Worker:
    """One consumer that processes (counts) records and commits after every batch."""

    def __init__(self, cfg: GroupConfig, processed: collections.Counter[tuple[int, int]]) -> None:
        self.consumer = GroupConsumer(cfg, auto_offset_reset="earliest")
        self.processed = processed
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.commit_errors = 0

    async def start(self) -> Worker:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while not self.stop.is_set():
            batch = await self.consumer.getmany(timeout=0.2, max_records=5)
            for tp, records in batch.items():
                for record in records:
                    self.processed[(tp.partition, record.offset)] += 1
            if batch:
                await asyncio.sleep(0.05)  # the "processing"
                try:
                    await self.consumer.commit()
                except (CommitFailed, RebalanceInProgress):
                    self.commit_errors += 1

    async def close(self) -> None:
        self.stop.set()
        assert self.task is not None
        await self.task
        await self.consumer.close()


ASSIGNORS = pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])


@pytest.mark.kafka
@ASSIGNORS
async def test_rolling_restart_processes_every_record_exactly_once(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, assignor: str
) -> None:
    partitions, per_partition = 6, 500
    total = partitions * per_partition
    topic = make_topic(partitions)
    await produce(kafka_broker.bootstrap, topic, per_partition, partitions)
    cfg = config(kafka_broker.bootstrap, unique_group, topic, assignors=(assignor,))
    processed: collections.Counter[tuple[int, int]] = collections.Counter()
    workers = [await Worker(cfg, processed).start() for _ in range(3)]
    try:
        for i in range(3):
            mark = len(processed)
            await until(
                lambda mark=mark: len(processed) >= mark + total // 8,  # type: ignore[misc]
                timeout=40,
                what=f"progress before restart {i}",
            )
            await workers[i].close()  # commit, revoke, leave
            workers[i] = await Worker(cfg, processed).start()
        restarted_at = len(processed)
        await until(lambda: len(processed) >= total, timeout=60, what="every record processed")
    finally:
        for worker in workers:
            if not worker.stop.is_set():
                await worker.close()
    assert restarted_at < total  # the restarts happened while records were flowing
    duplicates = {key: n for key, n in processed.items() if n != 1}
    assert duplicates == {}
    assert set(processed) == {(p, o) for p in range(partitions) for o in range(per_partition)}


@pytest.mark.kafka
@ASSIGNORS
async def test_cooperative_consumer_keeps_delivering_through_a_rebalance(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, assignor: str
) -> None:
    """A rebalance is held open (a third member stops polling, so it rejoins late). Under
    cooperative-sticky the consumer goes on delivering the partitions it keeps meanwhile,
    without waiting for the rebalance: 20 batches come while it is open, each getmany
    returning buffered records at once though its timeout is 2 s (a getmany that waited
    for the rebalance would take 40 s for them); under range it delivers nothing while
    two getmany calls run out their 2 s."""
    partitions = 6
    topic = make_topic(partitions)
    await produce(kafka_broker.bootstrap, topic, 2_000, partitions)
    cfg = config(kafka_broker.bootstrap, unique_group, topic, assignors=(assignor,))
    consumer = GroupConsumer(cfg, auto_offset_reset="earliest")
    during: list[int] = []  # records handed out while a rebalance was pending
    calls_during = 0  # getmany calls that returned while it was pending
    stop = asyncio.Event()

    async def consume() -> None:
        nonlocal calls_during
        while not stop.is_set():
            batch = await consumer.getmany(timeout=2.0, max_records=5)
            if consumer.member.rebalance_pending:
                calls_during += 1
                if batch:
                    during.append(sum(len(r) for r in batch.values()))
            await asyncio.sleep(0.01)

    async with MemberGroup(check_ownership=False) as group, consumer:
        slow = await group.start(cfg, name="slow")
        task = asyncio.create_task(consume())
        try:
            await until(
                lambda: slow.stable and len(consumer.assignment) == 3,
                timeout=60,
                what="two members",
            )
            await slow.pause()  # heartbeats go on; its JoinGroup waits for its poll()
            newcomer = await group.start(cfg, name="newcomer")
            await until(lambda: consumer.member.rebalance_pending, timeout=30, what="rebalance")
            # The rebalance stays open while "slow" does not poll (its max poll is 20 s).
            start = calls_during
            if assignor == "cooperative-sticky":
                await until(lambda: len(during) >= 20, timeout=20, what="20 batches meanwhile")
            else:
                await until(lambda: calls_during >= start + 2, timeout=20, what="two getmany")
            assert consumer.member.rebalance_pending, "the rebalance closed under the test"
            slow.resume()
            await until(
                lambda: newcomer.stable and slow.stable and len(consumer.assignment) == 2,
                timeout=60,
                what="three members",
            )
        finally:
            stop.set()
            await task
    if assignor == "cooperative-sticky":
        assert len(during) >= 20, during
    else:
        assert sum(during) == 0, during


# -- 3. SIGKILL: at least once, duplicates only after the crashed member's last commit ---------


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[list[str]]:
        if not self.path.exists():
            return []
        return [line.split() for line in self.path.read_text().splitlines() if line]

    def processed(self) -> set[tuple[int, int]]:
        return {(int(f[2]), int(f[3])) for f in self.lines() if f[0] == "P"}

    def ready(self, name: str) -> bool:
        return ["READY", name] in self.lines()

    def progress_of(self, name: str) -> int:
        return sum(1 for f in self.lines() if f[0] == "P" and f[1] == name)


def spawn(
    bootstrap: str, group: str, topic: str, log: Log, name: str, assignor: str
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])
    with open(log.path.with_name(f"{name}.out"), "wb") as err:  # kgroup's log, for triage
        return subprocess.Popen(
            [sys.executable, str(PROC), bootstrap, group, topic, str(log.path), name, assignor],
            env=env,
            stdout=err,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.kafka
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky", "consumer"])
async def test_sigkill_crashes_lose_nothing_and_duplicate_only_uncommitted_records(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    unique_group: str,
    tmp_path: Path,
    assignor: str,
) -> None:
    """``assignor`` "consumer": the KIP-848 consumer protocol, with the group's session
    set to the classic members' 6 s (heartbeat 500 ms) on the broker."""
    partitions, per_partition = 6, 250
    total = partitions * per_partition
    topic = make_topic(partitions)
    if assignor == "consumer":
        await set_consumer_group_timeouts(
            kafka_broker.bootstrap, unique_group, session_timeout_ms=6000, heartbeat_interval_ms=500
        )
    await produce(kafka_broker.bootstrap, topic, per_partition, partitions)
    log = Log(tmp_path / "events.log")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    crashed: list[str] = []

    def start(name: str) -> None:
        procs[name] = spawn(kafka_broker.bootstrap, unique_group, topic, log, name, assignor)

    try:
        for name in ("m0", "m1", "m2"):
            start(name)
        for victim, replacement in (("m0", "m3"), ("m1", "m4")):
            await until(
                lambda v=victim: log.progress_of(v) >= 40,  # type: ignore[misc]
                timeout=60,
                what=f"{victim} processing",
            )
            procs[victim].send_signal(signal.SIGKILL)
            await asyncio.to_thread(procs[victim].wait, 10)
            crashed.append(victim)
            start(replacement)
        await until(lambda: len(log.processed()) >= total, timeout=90, what="all processed")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait, 10)

    lines = log.lines()
    assert {(p, o) for p in range(partitions) for o in range(per_partition)} <= log.processed()
    check_duplicates(lines, crashed)
    # The survivors closed gracefully, and the crashes were real.
    assert all(procs[n].returncode == -signal.SIGKILL for n in crashed)
    assert sum(1 for f in lines if f[0] == "CLOSED") == 3
    if assignor == "consumer":  # the members did run the consumer protocol
        assert "protocol=consumer" in log.path.with_name("m2.out").read_text()


def check_duplicates(lines: list[list[str]], crashed: list[str]) -> None:
    """Every record processed more than once was first processed in a hold that ended
    in a crash (SIGKILL), and the record lies at or after that hold's last commit. A hold
    that ended in a revoke (auto-commit), a graceful close or a loss may cause no duplicate:
    survivors must not lose their partitions while the group waits out a crashed member
    (they did, before the lease renewed itself after a long join).

    The log is one append-only file, so its order is the order of events."""
    hold: dict[tuple[str, int], int] = {}  # (member, partition) -> hold id
    holds: list[dict[str, Any]] = []
    seen: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
    for f in lines:
        kind, name = f[0], f[1]
        if kind in ("A", "R", "L") and len(f) > 2:
            for partition in map(int, f[2].split(",")):
                if kind == "A":
                    hold[(name, partition)] = len(holds)
                    holds.append({"member": name, "end": None, "commit": -1})
                elif (name, partition) in hold:
                    holds[hold.pop((name, partition))]["end"] = kind
        elif kind == "P":
            seen[(int(f[2]), int(f[3]))].append(hold[(name, int(f[2]))])
        elif kind == "C":
            holds[hold[(name, int(f[2]))]]["commit"] = int(f[3])
    for (name, _), hold_id in hold.items():
        if name in crashed:
            holds[hold_id]["end"] = "crash"
    for (partition, offset), hold_ids in seen.items():
        for hold_id in hold_ids[:-1]:
            first = holds[hold_id]
            assert first["end"] == "crash", (
                f"{partition}:{offset} processed again after a hold by {first['member']} "
                f"that ended with {first['end']!r}"
            )
            assert offset >= first["commit"], (
                f"{partition}:{offset} processed again though {first['member']} had "
                f"committed {first['commit']}"
            )
    # The crashes hit members that held partitions (so the check above had work to do).
    assert any(h["end"] == "crash" for h in holds), holds


# -- 4. an evicted member: CommitFailed, and no record of its old partitions -------------------


@pytest.mark.kafka
async def test_evicted_member_gets_commit_failed_and_delivers_nothing_after_its_lease(
    proxied_kafka: ProxiedBroker[KafkaBroker], make_topic: Callable[..., str], unique_group: str
) -> None:
    proxy = proxied_kafka.proxy
    topic = make_topic(2, broker=proxied_kafka.broker)
    await produce(proxied_kafka.direct_bootstrap, topic, 400, 2)
    behind_listener, direct_listener = Recorder(), Recorder()
    behind = GroupConsumer(
        config(proxied_kafka.bootstrap, unique_group, topic, close_timeout_ms=3_000),
        listener=behind_listener,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    direct = GroupConsumer(
        config(proxied_kafka.direct_bootstrap, unique_group, topic),
        listener=direct_listener,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    stop_direct = asyncio.Event()

    async def run_direct() -> None:
        while not stop_direct.is_set():
            await direct.getmany(timeout=0.2, max_records=1)  # keeps its group membership

    deliveries: list[tuple[float, TopicPartition, float | None]] = []
    async with behind, direct:
        direct_task = asyncio.create_task(run_direct())
        try:
            async with asyncio.timeout(60):
                while not (len(behind.assignment) == 1 and len(direct.assignment) == 1):
                    await behind.getmany(timeout=0.2, max_records=1)
            (old,) = behind.assignment
            # Consume slowly: aiokafka has the rest of the partition buffered.
            async with asyncio.timeout(30):
                while not (await behind.getmany(old, timeout=1, max_records=1)):
                    pass
            proxy.black_hole()
            cut_at = time.monotonic()
            loop = asyncio.get_running_loop()

            def lease_over() -> bool:
                valid_until = behind.member.valid_until
                return valid_until is None or loop.time() >= valid_until

            # Behind the cut it keeps delivering what it has buffered, while its lease holds.
            async with asyncio.timeout(SESSION_MS / 1000 + 20):
                while time.monotonic() < cut_at + 1.0:
                    batch = await behind.getmany(timeout=0.05, max_records=1)
                    for tp in batch:
                        deliveries.append((time.monotonic(), tp, behind.member.valid_until))
                    await asyncio.sleep(0.05)  # the "processing"
                await until(lease_over, timeout=SESSION_MS / 1000 + 10, what="lease expiry")
            expired_at = time.monotonic()
            assert not [c for c in behind_listener.calls if c[0] == "lost"]  # not polled yet
            # A commit under an expired lease fails, typed, before any request is sent.
            with pytest.raises(CommitFailed, match="lease"):
                await behind.commit({old: 1})
            # The next fetch call reports the partitions lost and delivers none of them,
            # though aiokafka still has them buffered.
            took_over_at: float | None = None
            async with asyncio.timeout(SESSION_MS / 1000 + 40):
                while took_over_at is None:
                    batch = await behind.getmany(timeout=0.05, max_records=1)
                    for tp in batch:
                        deliveries.append((time.monotonic(), tp, behind.member.valid_until))
                    await asyncio.sleep(0.05)
                    took_over_at = next(
                        (
                            at
                            for kind_, tps, at in direct_listener.calls
                            if kind_ == "assigned" and old in tps and at > cut_at
                        ),
                        None,
                    )
            lost = [c for c in behind_listener.calls if c[0] == "lost"]
            assert lost and old in lost[0][1] and lost[0][2] >= expired_at
            old_deliveries = [at for at, tp, _ in deliveries if tp == old]
            assert old_deliveries, "nothing delivered from the buffer behind the cut"
            assert max(old_deliveries) < expired_at < took_over_at
            # Its commit for the old partition fails, typed: it does not hold it any more.
            with pytest.raises(CommitFailed):
                await behind.commit({old: 1})
            # Still cut off: more fetch calls deliver nothing of the old partition.
            for _ in range(5):
                assert old not in await behind.getmany(timeout=0.1)
            assert behind.stats().commits_failed >= 2
        finally:
            proxy.heal()
            stop_direct.set()
            await direct_task
