"""The event log on real brokers (tansu and Apache Kafka): members through rebalances, a
graceful leave and a crash-like abort write valid lines, each member's ``seq`` contiguous,
its partition events equal to its listener's callbacks and no partition claimed twice; a
sink whose disk is full never disturbs the membership; and the Kafka topic sink carries the
same lines as the file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from structlog.testing import capture_logs

from kgroup import MemberState
from kgroup.testing import Broker, KafkaBroker
from kgroup.testing._members import MemberGroup, MemberRunner, covered
from tests.event_log_support import (
    FullDisk,
    callbacks_in_log,
    check_no_overlap,
    check_owned,
    check_stream,
    read_dir,
    streams,
    validate,
)
from tests.integration.conftest import SESSION_MS, group_config


def log_of(lines: list[dict[str, Any]], member_id: str) -> list[dict[str, Any]]:
    """The one stream in which ``member_id`` appears."""
    (stream,) = [s for s in streams(lines).values() if member_id in {x["member_id"] for x in s}]
    return stream


def callbacks_of(runner: MemberRunner) -> list[tuple[str, frozenset[Any]]]:
    return [(e.callback, frozenset(tuple(tp) for tp in e.partitions)) for e in runner.events]


def counting(counts: dict[str, int], name: str, group: MemberGroup) -> Any:
    """An event hook counting ``name``'s ``member.heartbeat_ok`` events."""

    def hook(event: str, fields: Any) -> None:
        if event == "member.heartbeat_ok":
            counts[name] = counts.get(name, 0) + 1
            group.notify()

    return hook


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_members_log_rebalances_a_leave_and_a_crash(
    broker: Broker, make_topic: Callable[..., str], unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(6)
    cfg = group_config(broker, unique_group, topic, event_log=tmp_path)
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(3)]
        await group.wait_stable(topic, 6)
        beats: dict[str, int] = {}
        for r in runners:
            r.member.add_event_hook(counting(beats, r.name, group))
        await group.wait_until(
            lambda: len(beats) == 3, timeout=30, what="member.heartbeat_ok for each"
        )
        ids = {r.name: r.member.member_id for r in runners}
        m1, m2, m3 = runners
        await m3.close()  # graceful: revoke, LeaveGroup
        await group.wait_stable(topic, 6, members=[m1, m2])
        await m2.crash()  # crash-like: no callbacks, no LeaveGroup
        await group.wait_stable(topic, 6, members=[m1], timeout=SESSION_MS / 1000 + 60)
        ids["m1"] = m1.member.member_id  # (unchanged on these brokers; read it again)
    assert all(r.member.stats().event_log_dropped == 0 for r in runners)

    lines = read_dir(tmp_path)
    validate(lines)
    assert len(streams(lines)) == 3
    for runner in runners:
        stream = log_of(lines, ids[runner.name])
        check_stream(stream)
        assert callbacks_in_log(stream) == callbacks_of(runner)
        check_owned(stream)
        assert {x["group"] for x in stream} == {unique_group}
        answered = [x for x in stream if x["event"] == "member.heartbeat_ok"]
        assert answered
        assert all(x["hb_sent"] <= x["ts"] and x["hb_rtt_ms"] >= 0 for x in answered)
    # A crash-like abort ends the stream without eventlog.stopped: a reader sees a crash.
    ends = {r.name: [x["event"] for x in log_of(lines, ids[r.name])[-2:]] for r in runners}
    assert ends["m1"] == ends["m3"] == ["member.closed", "eventlog.stopped"]
    assert ends["m2"][-1] == "member.aborted"
    m3_events = [x["event"] for x in log_of(lines, ids["m3"])]
    assert "member.left_group" in m3_events
    # m1 saw every generation the group went through: one per membership change.
    m1_log = log_of(lines, ids["m1"])
    generations = [x["generation"] for x in m1_log if x["event"] == "member.joined"]
    assert generations == sorted(generations) and len(generations) >= 3
    assert {x["leader"] for x in m1_log if x["event"] == "member.joined"} <= set(ids.values())
    assert check_no_overlap(lines) >= 6


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_a_full_disk_does_not_disturb_the_membership(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(4)
    disk = FullDisk()
    with capture_logs() as logs:
        async with MemberGroup() as group:
            a = await group.start(group_config(broker, unique_group, topic, event_log=disk))
            b = await group.start(group_config(broker, unique_group, topic))
            await group.wait_until(
                lambda: covered([a, b], topic, 4) and len(a.assignment) == 2,
                timeout=60,
                what="a and b share the partitions",
            )
            generation = a.member.generation.generation_id
            await b.close()
            await group.wait_stable(topic, 4, members=[a])
            assert a.member.generation.generation_id > generation
            assert a.member.state is MemberState.STABLE and not a.errors
    assert disk.attempts > 0 and a.member.stats().event_log_dropped >= disk.attempts
    failures = [e for e in logs if e["event"] == "eventlog.write_failed"]
    assert len(failures) == 1 and "No space left on device" in failures[0]["error"]


async def test_the_topic_sink_carries_the_same_lines_as_the_file(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(4)
    events_topic = make_topic(3)
    cfg = group_config(
        kafka_broker, unique_group, topic, event_log=tmp_path, event_log_topic=events_topic
    )
    async with MemberGroup() as group:
        a = await group.start(cfg)
        await group.wait_stable(topic, 4)
        b = await group.start(cfg)
        await group.wait_until(
            lambda: covered([a, b], topic, 4) and bool(b.assignment), timeout=60, what="a+b"
        )
        await b.close()
        await group.wait_stable(topic, 4, members=[a])
    file_lines = read_dir(tmp_path)
    validate(file_lines)
    uids = set(streams(file_lines))
    assert len(uids) == 2

    consumer = AIOKafkaConsumer(
        events_topic,
        bootstrap_servers=kafka_broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    topic_lines: list[dict[str, Any]] = []

    def stopped() -> set[str]:
        return {x["member_uid"] for x in topic_lines if x["event"] == "eventlog.stopped"}

    try:
        async with asyncio.timeout(60):
            while stopped() != uids:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    for record in records:
                        assert record.key is not None and record.value is not None
                        line = json.loads(record.value)
                        assert record.key.decode() == line["member_uid"]
                        topic_lines.append(line)
    finally:
        await consumer.stop()
    validate(topic_lines)
    by_file, by_topic = streams(file_lines), streams(topic_lines)
    for uid in uids:
        check_stream(by_topic[uid])  # one partition per member: in order, no gap
        assert by_topic[uid] == by_file[uid]  # the same records, stamped once


def test_the_demo_writes_an_event_log(
    tansu_broker: Broker, unique_group: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kgroup demo --event-log DIR``: three members' logs, one aborted, none overlapping."""
    from kgroup._cli import main

    code = main(
        [
            "demo",
            "--bootstrap",
            tansu_broker.bootstrap,
            "--topic",
            f"demo-{unique_group}"[:200],
            "--session-timeout-ms",
            "3000",
            "--heartbeat-interval-ms",
            "300",
            "--event-log",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"event log: {tmp_path}" in out
    lines = read_dir(tmp_path)
    validate(lines)
    by_uid = streams(lines)
    assert sorted(s[0]["client_id"] for s in by_uid.values()) == [
        "member-1",
        "member-2",
        "member-3",
    ]
    ends = {s[0]["client_id"]: s[-1]["event"] for s in by_uid.values()}
    assert ends == {
        "member-1": "eventlog.stopped",
        "member-2": "member.aborted",  # the demo's crash reads as one
        "member-3": "eventlog.stopped",
    }
    for stream in by_uid.values():
        check_stream(stream)
        check_owned(stream)
    assert check_no_overlap(lines) >= 6
