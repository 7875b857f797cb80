"""The event log of real GroupMembers, driven by kgroup.testing's in-memory coordinator (no
broker): what each member writes through a rebalance, a graceful leave and an abort; that
a sink whose disk is full never disturbs the membership; isolated mode; a group that is not
a consumer group; loop stalls; and that close() leaves no thread behind.

Tests wait on membership events (event hooks), never on sleeps."""

from __future__ import annotations

import asyncio
import errno
import io
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from kgroup import GroupConfig, GroupMember, LeaderElection, MemberState, TopicPartition
from kgroup.testing import InMemoryCoordinator
from tests.event_log_support import (
    FullDisk,
    callbacks_in_log,
    check_owned,
    check_stream,
    log_files,
    parse,
    read_dir,
    streams,
    validate,
)

TOPIC = "t"


def config(**overrides: Any) -> GroupConfig:
    settings: dict[str, Any] = {
        "bootstrap_servers": "in-memory:9092",
        "group_id": "g",
        "topics": [TOPIC],
        "session_timeout_ms": 6_000,
        "heartbeat_interval_ms": 100,
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 50,
        "request_timeout_ms": 2_000,
    }
    settings.update(overrides)
    return GroupConfig(**settings)


class Recording:
    """A listener that keeps (callback, partitions) in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[Any]]] = []

    def on_partitions_assigned(self, partitions: frozenset[Any]) -> None:
        self.calls.append(("on_partitions_assigned", partitions))

    def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
        self.calls.append(("on_partitions_revoked", partitions))

    def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
        self.calls.append(("on_partitions_lost", partitions))


class Group:
    """Members polling in tasks; :meth:`wait` re-checks at every membership event."""

    def __init__(self) -> None:
        self.coordinator = InMemoryCoordinator({TOPIC: 4})
        self.members: list[GroupMember] = []
        self.listeners: dict[int, Recording] = {}
        self.polls: dict[int, asyncio.Task[None]] = {}
        self.changed = asyncio.Event()
        self.seen: list[str] = []

    async def start(self, **overrides: Any) -> GroupMember:
        listener = Recording()
        member = GroupMember(
            config(**overrides), transport=self.coordinator.transport(), listener=listener
        )
        self.listeners[id(member)] = listener
        member.add_event_hook(self._hook)
        await member.start()
        self.members.append(member)

        async def loop() -> None:
            while not member.closed:
                await member.poll(timeout=0.05)

        self.polls[id(member)] = asyncio.create_task(loop())
        return member

    def _hook(self, name: str, fields: Any) -> None:
        self.seen.append(name)
        self.changed.set()

    async def wait(self, condition: Callable[[], bool], timeout: float = 20) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                self.changed.clear()
                await self.changed.wait()

    async def stop_polling(self, member: GroupMember) -> None:
        task = self.polls.pop(id(member))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def covered(self, *members: GroupMember) -> bool:
        owned = [m.assignment for m in members]
        union = frozenset().union(*owned)
        return (
            all(m.state is MemberState.STABLE for m in members)
            and sum(len(o) for o in owned) == len(union)
            and union == {TopicPartition(TOPIC, p) for p in range(4)}
        )

    async def aclose(self) -> None:
        for member in list(self.members):
            if id(member) in self.polls:
                await self.stop_polling(member)
            await member.close()


@pytest.fixture
async def group() -> AsyncIterator[Group]:
    g = Group()
    try:
        yield g
    finally:
        await g.aclose()


def eventlog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kgroup-eventlog")]


def as_pairs(calls: list[tuple[str, frozenset[Any]]]) -> list[tuple[str, frozenset[Any]]]:
    return [(name, frozenset(tuple(p) for p in parts)) for name, parts in calls]


async def test_members_log_a_rebalance_a_leave_and_an_abort(group: Group, tmp_path: Path) -> None:
    a = await group.start(event_log=tmp_path)
    await group.wait(lambda: group.covered(a))
    b = await group.start(event_log=tmp_path)
    await group.wait(lambda: group.covered(a, b) and bool(b.assignment))
    # One more heartbeat answered for each, in the shared generation.
    beats = group.seen.count("member.heartbeat_ok")
    await group.wait(lambda: group.seen.count("member.heartbeat_ok") >= beats + 2)
    b_id = b.member_id
    await group.stop_polling(b)
    await b.close()  # graceful: revoke, LeaveGroup
    await group.wait(lambda: group.covered(a) and a.generation.generation_id == 3)
    a_id = a.member_id
    await group.stop_polling(a)
    await a.abort()  # crash-like: no callbacks, no LeaveGroup
    assert not eventlog_threads()
    assert a.stats().event_log_dropped == b.stats().event_log_dropped == 0

    lines = read_dir(tmp_path)
    validate(lines)
    by_uid = streams(lines)
    assert len(by_uid) == 2 and len(log_files(tmp_path)) == 2

    def log_of(member_id: str) -> list[dict[str, Any]]:
        (stream,) = [s for s in by_uid.values() if member_id in {x["member_id"] for x in s}]
        return stream

    for member, member_id in ((a, a_id), (b, b_id)):
        stream = log_of(member_id)
        check_stream(stream)
        # The log's partition events are the listener's callbacks, in order.
        assert callbacks_in_log(stream) == as_pairs(group.listeners[id(member)].calls)
        check_owned(stream)
        assert {x["group"] for x in stream} == {"g"}
        assert {x["protocol_type"] for x in stream} == {"consumer"}
        beats_logged = [x for x in stream if x["event"] == "member.heartbeat_ok"]
        assert beats_logged and all(
            x["hb_sent"] <= x["ts"] and x["hb_rtt_ms"] >= 0 and x["lease_deadline"] > x["ts"]
            for x in beats_logged
        )
        assert any(x.get("hb_late_ms") is not None for x in beats_logged)
        states = [(x["state_before"], x["state_after"]) for x in stream if "state_after" in x]
        assert ("COMPLETING_REBALANCE", "STABLE") in states
    a_log, b_log = log_of(a_id), log_of(b_id)
    b_events = [x["event"] for x in b_log]
    assert b_events[-2:] == ["member.closed", "eventlog.stopped"]
    last_revoke = len(b_events) - 1 - b_events[::-1].index("member.partitions_revoked")
    assert last_revoke < b_events.index("member.leaving") < b_events.index("member.left_group")
    assert check_owned(b_log) == frozenset()
    assert a_log[-1]["event"] == "member.aborted"  # no eventlog.stopped: reads as a crash
    # a's last partition event leaves it all four: an abort releases nothing.
    assert check_owned(a_log) == {(TOPIC, p) for p in range(4)}
    joined = [x for x in a_log if x["event"] == "member.joined"]
    assert [x["generation"] for x in joined] == [1, 2, 3]
    assert all(x["leader"] == a_id for x in joined)


async def test_a_full_disk_never_disturbs_the_membership(group: Group) -> None:
    disk = FullDisk()
    with capture_logs() as logs:
        a = await group.start(event_log=disk)
        b = await group.start()
        await group.wait(lambda: group.covered(a, b) and bool(a.assignment))
        beats = group.seen.count("member.heartbeat_ok")
        await group.wait(lambda: group.seen.count("member.heartbeat_ok") >= beats + 4)
        assert a.state is MemberState.STABLE and not any(p.done() for p in group.polls.values())
        generation = a.generation.generation_id
        await group.stop_polling(a)
        await a.close()
        await group.wait(lambda: group.covered(b))
    assert b.generation.generation_id == generation + 1
    assert disk.attempts > 0
    assert a.stats().event_log_dropped >= disk.attempts
    failures = [e for e in logs if e["event"] == "eventlog.write_failed"]
    assert len(failures) == 1 and "No space left on device" in failures[0]["error"]
    assert [e for e in logs if e["event"] == "member.closed"]
    assert not eventlog_threads()


async def test_isolated_members_log_from_both_threads(group: Group) -> None:
    stream = io.StringIO()
    a = await group.start(event_log=stream, isolate_heartbeat=True)
    await group.wait(lambda: group.covered(a))
    beats = group.seen.count("member.heartbeat_ok")
    await group.wait(lambda: group.seen.count("member.heartbeat_ok") >= beats + 3)
    await group.stop_polling(a)
    await a.close()
    lines = parse(stream.getvalue())
    validate(lines)
    (only,) = streams(lines).values()
    check_stream(only)
    assert callbacks_in_log(only) == as_pairs(group.listeners[id(a)].calls)
    assert sum(x["event"] == "member.heartbeat_ok" for x in only) >= 3
    assert not eventlog_threads()


async def test_a_leader_election_logs_its_item(tmp_path: Path) -> None:
    coordinator = InMemoryCoordinator()
    stream = io.StringIO()
    changed = asyncio.Event()
    member = GroupMember(
        config(topics=(), group_id="e", event_log=stream),
        transport=coordinator.transport(),
        protocol=LeaderElection(),
    )
    member.add_event_hook(lambda name, fields: changed.set())
    async with member:
        async with asyncio.timeout(20):
            while "leader" not in member.assignment:
                changed.clear()
                await member.poll(timeout=0.05)
    lines = parse(stream.getvalue())
    validate(lines)
    (only,) = streams(lines).values()
    check_stream(only)
    assert {x["protocol_type"] for x in only} == {"kgroup-leader"}
    assigned = [x for x in only if x["event"] == "member.partitions_assigned"]
    assert assigned[0]["assigned"] == [{"topic": "leader", "partition": -1}]
    assert assigned[0]["owned"] == [{"topic": "leader", "partition": -1}]
    released = [x for x in only if x["event"] in ("member.partitions_revoked",)]
    assert released and released[-1]["owned"] == []


async def test_a_stalled_loop_is_logged_as_heartbeat_late(group: Group) -> None:
    stream = io.StringIO()
    a = await group.start(event_log=stream, loop_stall_warn_ms=50)
    await group.wait(lambda: group.covered(a))
    beats = group.seen.count("member.heartbeat_ok")
    await group.wait(lambda: group.seen.count("member.heartbeat_ok") > beats)
    time.sleep(0.4)  # noqa: ASYNC251 - the stall under test: the loop is blocked
    beats = group.seen.count("member.heartbeat_ok")
    await group.wait(lambda: group.seen.count("member.heartbeat_ok") > beats)
    await group.stop_polling(a)
    await a.close()
    lines = parse(stream.getvalue())
    validate(lines)
    late = [x for x in lines if x["event"] == "heartbeat.late"]
    assert late and late[0]["hb_late_ms"] >= 200
    assert late[0]["member_id"] and late[0]["generation"] >= 1
    after = [x for x in lines if x["event"] == "member.heartbeat_ok" and x["seq"] > late[0]["seq"]]
    assert after[0]["hb_late_ms"] >= 200  # the heartbeat that went out late says so too


async def test_a_poll_timeout_is_logged(group: Group) -> None:
    stream = io.StringIO()
    a = await group.start(event_log=stream, max_poll_interval_ms=300)
    await group.wait(lambda: group.covered(a))
    await group.stop_polling(a)  # the application stops polling
    await group.wait(lambda: "member.poll_timeout" in group.seen)
    await a.close()
    lines = parse(stream.getvalue())
    validate(lines)
    events = [x["event"] for x in lines]
    assert events.index("member.poll_timeout") < events.index("member.poll_timeout_left")
    left = lines[events.index("member.poll_timeout_left")]
    assert left["extra"] == {"sent_leave_group": True}


async def test_without_an_event_log_there_is_no_recorder(group: Group) -> None:
    a = await group.start()
    await group.wait(lambda: group.covered(a))
    assert a._shared.recorder is None
    assert not eventlog_threads()
    assert a.stats().event_log_dropped == 0


async def test_an_unreachable_event_topic_never_disturbs_the_membership(group: Group) -> None:
    """The topic sink's producer cannot connect (nothing listens on the port): the member
    joins and heartbeats as usual, the failure is reported once, close() is prompt and
    every record is counted as dropped."""
    with capture_logs() as logs:
        a = await group.start(bootstrap_servers="127.0.0.1:1", event_log_topic="events")
        await group.wait(lambda: group.covered(a))
        beats = group.seen.count("member.heartbeat_ok")
        await group.wait(lambda: group.seen.count("member.heartbeat_ok") >= beats + 3)
        await group.wait(lambda: any(e["event"] == "eventlog.write_failed" for e in logs))
        await group.stop_polling(a)
        started = time.monotonic()
        await a.close()
        assert time.monotonic() - started < 3
    assert a.closed
    failures = [e for e in logs if e["event"] == "eventlog.write_failed"]
    assert len(failures) == 1 and failures[0]["sink"] == "topic events"
    # Every record was dropped: eventlog.started, each member event, eventlog.stopped.
    recorded = 2 + sum(1 for e in logs if e["event"].startswith(("member.", "heartbeat.")))
    assert a.stats().event_log_dropped == recorded
    assert not eventlog_threads()


class FillingDisk(io.TextIOBase):
    """A stream whose disk is full until ``free()``; then it keeps what it is given."""

    def __init__(self) -> None:
        self.full = True
        self.kept: list[str] = []

    def writable(self) -> bool:
        return True

    def free(self) -> None:
        self.full = False

    def write(self, s: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.kept.append(s)
        return len(s)


async def test_a_disk_that_fills_and_recovers_tells_the_loss_in_the_log(group: Group) -> None:
    disk = FillingDisk()
    with capture_logs() as logs:
        a = await group.start(event_log=disk)
        await group.wait(lambda: group.covered(a))
        await group.wait(lambda: any(e["event"] == "eventlog.write_failed" for e in logs))
        disk.free()
        await group.wait(lambda: any(e["event"] == "eventlog.recovered" for e in logs))
        beats = group.seen.count("member.heartbeat_ok")
        await group.wait(lambda: group.seen.count("member.heartbeat_ok") >= beats + 2)
        await group.stop_polling(a)
        await a.close()
    lines = parse("".join(disk.kept))
    validate(lines)
    check_stream(lines, drops=True)  # seq from 0 without a gap, ts in order, stopped last
    (told,) = [x for x in lines if x["event"] == "eventlog.dropped"]
    lost = a.stats().event_log_dropped
    assert told["dropped"] == lost > 0
    assert [e["dropped"] for e in logs if e["event"] == "eventlog.recovered"] == [lost]
    assert len([e for e in logs if e["event"] == "eventlog.write_failed"]) == 1
    # What was lost is the start: the first line written comes after the join.
    assert lines[0]["event"] != "eventlog.started"
