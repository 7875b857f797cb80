"""The event log's parts on their own: the record mapping, the sinks (rotation, undoing a
partial write), the writer (queue full, a raising stream, close), the structlog processor
and the shipped schema. Every produced line is validated against ``schema.json``.

Nothing sleeps: a blocking sink tells the test when the writer's thread is inside it, and
the test releases it; everything else waits for the thread to end (``join``)."""

from __future__ import annotations

import errno
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import structlog
from structlog.testing import capture_logs

from kgroup import TopicPartition
from kgroup._config import GroupConfig
from kgroup._errors import ConfigError
from kgroup.events import EventLogProcessor, load_schema
from kgroup.events._record import MemberContext, Record, error_code_of, format_ts, to_line
from kgroup.events._sinks import DirectorySink, StreamSink, log_file_name
from kgroup.events._writer import EventLogWriter
from tests.event_log_support import check_stream, log_files, parse, read_dir, streams, validate

CTX = MemberContext(
    member_uid="0123456789abcdef0123456789abcdef",
    group="g",
    host="h",
    pid=42,
    client_id="c",
    instance_id=None,
    protocol_type="consumer",
)
T0 = 1_790_000_000_123_456_789  # ns


def rec(event: str, i: int = 0, **fields: Any) -> Record:
    return Record(T0 + i * 1_000, CTX, event, {"member_id": "m", "generation": 3, **fields})


def started(i: int = 0) -> Record:
    return Record(T0 + i, CTX, "eventlog.started", {"member_id": "", "generation": -1})


def stopped(i: int = 10**6) -> Record:
    return Record(T0 + i, CTX, "eventlog.stopped", {"member_id": "m", "generation": 3})


# -- the schema and the mapping ----------------------------------------------------------------


def test_the_shipped_schema_is_valid_draft_2020_12() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["required"]) == {
        "v", "ts", "seq", "member_uid", "event", "group", "host", "pid", "client_id",
    }  # fmt: skip


def test_the_schema_rejects_what_the_contract_forbids() -> None:
    good = to_line(rec("member.heartbeat_ok"), 0)
    validate([good])
    validator = jsonschema.Draft202012Validator(load_schema())
    for bad in (
        {**good, "v": 2},
        {**good, "ts": "2026-11-26T07:01:02Z"},  # no microseconds
        {**good, "seq": -1},
        {**good, "member_uid": "not-hex"},
        {**good, "assigned": [{"topic": "t"}]},
        {**good, "hb_late_ms": -1.0},
        {k: v for k, v in good.items() if k != "client_id"},
    ):
        assert not validator.is_valid(bad), bad


def test_timestamps_are_rfc3339_utc_with_microseconds() -> None:
    assert format_ts(0) == "1970-01-01T00:00:00.000000Z"
    assert format_ts(T0) == "2026-09-21T14:13:20.123456Z"


def test_state_changes_map_to_state_before_and_after() -> None:
    line = to_line(rec("member.state_changed", old="STABLE", new="UNJOINED", reason="r"), 7)
    validate([line])
    assert (line["state_before"], line["state_after"], line["reason"]) == (
        "STABLE",
        "UNJOINED",
        "r",
    )
    assert (line["seq"], line["member_id"], line["generation"]) == (7, "m", 3)
    assert "extra" not in line


def test_partition_events_map_partitions_and_items() -> None:
    tps = frozenset({TopicPartition("b", 1), TopicPartition("a", 10), TopicPartition("a", 2)})
    line = to_line(
        Record(T0, CTX, "member.partitions_revoked", {"partitions": tps}, {"owned": frozenset()}),
        0,
    )
    validate([line])
    assert line["revoked"] == [
        {"topic": "a", "partition": 2},
        {"topic": "a", "partition": 10},
        {"topic": "b", "partition": 1},
    ]
    assert line["owned"] == []
    # A group that is not a consumer group: its items are names.
    items = to_line(rec("member.partitions_assigned", partitions=frozenset({"leader"})), 0)
    validate([items])
    assert items["assigned"] == [{"topic": "leader", "partition": -1}]


def test_errors_give_their_kafka_code() -> None:
    assert error_code_of("NOT_COORDINATOR (16)") == 16
    assert error_code_of("UNKNOWN_MEMBER_ID") == 25
    assert error_code_of("error code 999") == 999
    assert error_code_of("connection to b0:9092 closed (30000)") is None
    line = to_line(rec("member.heartbeat_failed", error="REBALANCE_IN_PROGRESS"), 0)
    assert line["error_code"] == 27
    left = to_line(rec("member.left_group", error_code=0), 0)
    assert left["error_code"] == 0


def test_heartbeat_fields_lease_and_extra() -> None:
    derived = {"hb_sent": T0 - 2_000_000, "hb_rtt_ms": 2.0, "hb_late_ms": 0.5, "lease_deadline": T0}
    line = to_line(Record(T0, CTX, "member.heartbeat_ok", {"generation": 3}, derived), 0)
    validate([line])
    assert line["hb_sent"] == "2026-09-21T14:13:20.121456Z"
    assert (line["hb_rtt_ms"], line["hb_late_ms"]) == (2.0, 0.5)
    late = to_line(rec("heartbeat.late", lag_ms=812.5, due=1.0, isolated=False), 0)
    validate([late])
    assert late["hb_late_ms"] == 812.5
    assert late["extra"] == {"due": 1.0, "isolated": False}
    odd = to_line(
        rec("member.joined", leader="L", members=frozenset({"x", "y"}), n=float("nan")), 0
    )
    validate([odd])
    assert odd["leader"] == "L"
    assert odd["extra"] == {"members": ["x", "y"], "n": None}


# -- sinks -------------------------------------------------------------------------------------


def test_file_names_follow_the_contract() -> None:
    assert (
        log_file_name("my host!", 7, T0) == "kgroup-events-my_host_-7-20260921T141320123456Z.jsonl"
    )
    assert log_file_name("h", 7, T0, 2).endswith("Z.2.jsonl")


def test_two_members_starting_at_once_get_two_files(tmp_path: Path) -> None:
    a = DirectorySink(tmp_path, host="h", pid=1, started_ns=T0)
    b = DirectorySink(tmp_path, host="h", pid=1, started_ns=T0)
    a.write("a\n")
    b.write("b\n")
    a.close()
    b.close()
    assert len({*a.paths, *b.paths}) == 2
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["a\n", "b\n"]


def test_rotation_by_size_keeps_lines_whole_and_in_order(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path / "new" / "dir", host="h", pid=1, started_ns=T0, max_bytes=2048)
    writer = EventLogWriter(sink, capacity=1000)
    writer.put(started())
    for i in range(1, 60):
        writer.put(rec("member.heartbeat_ok", i))
    writer.put(stopped(), force=True)
    writer.start()
    writer.close()
    assert writer.join(10)
    files = log_files(tmp_path)
    assert len(files) > 3
    assert files == sink.paths
    assert [f.name.rsplit(".", 2)[-2] for f in files[1:3]] == ["1", "2"]
    for f in files:
        assert 0 < f.stat().st_size <= 2048
        parse(f.read_text())  # whole lines only
    lines = read_dir(tmp_path)
    validate(lines)
    check_stream(lines, closed=False)
    assert len(lines) == 61 and lines[-1]["event"] == "eventlog.stopped"
    assert writer.written == 61 and writer.dropped == 0


def test_a_failed_write_leaves_no_half_line_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = DirectorySink(tmp_path, host="h", pid=1, started_ns=T0)
    sink.write("first\n")
    real_write = os.write
    fd = sink._fd
    calls = []

    def half_then_full(target: int, data: Any) -> int:
        if target != fd:
            return real_write(target, data)
        calls.append(len(data))
        if len(calls) == 1:  # the disk takes a few bytes, then is full
            return real_write(target, bytes(data[:3]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError):
        sink.write("second line\n")
    monkeypatch.setattr(os, "write", real_write)
    assert calls == [12, 9]
    sink.write("third\n")
    sink.close()
    assert sink.paths[0].read_text() == "first\nthird\n"


def test_a_stream_sink_writes_and_flushes_but_never_closes() -> None:
    stream = io.StringIO()
    sink = StreamSink(stream)
    sink.write("x\n")
    sink.close()
    assert stream.getvalue() == "x\n" and not stream.closed
    assert sink.name == "StringIO"


# -- the writer: drops, failures, close --------------------------------------------------------


class BlockingSink:
    """A slow disk: the first write blocks until released; the test knows when."""

    name = "blocking"
    chunk_bytes = 1 << 20

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.data: list[str] = []
        self.closed = False

    def write(self, data: str) -> None:
        if not self.inside.is_set():
            self.inside.set()
            assert self.release.wait(10)
        self.data.append(data)

    def close(self) -> None:
        self.closed = True


def test_a_full_queue_drops_counts_reports_once_and_tells_in_the_log() -> None:
    sink = BlockingSink()
    writer = EventLogWriter(sink, capacity=5)
    writer.start()
    with capture_logs() as logs:
        assert writer.put(started())
        assert sink.inside.wait(10)  # the thread holds the first record, stuck in the sink
        accepted = [writer.put(rec("member.heartbeat_ok", i)) for i in range(1, 13)]
        assert accepted == [True] * 5 + [False] * 7
        assert writer.dropped == 7
        sink.release.set()
        writer.put(stopped(), force=True)  # close never loses the last record
        writer.close()
        assert writer.join(10)
    lines = parse("".join(sink.data))
    validate(lines)
    assert [line["seq"] for line in lines] == list(range(8))
    # The 5 queued were recorded before the 7 were dropped: the count follows them, and
    # eventlog.stopped stays last.
    assert [line["event"] for line in lines] == [
        "eventlog.started",
        *["member.heartbeat_ok"] * 5,
        "eventlog.dropped",
        "eventlog.stopped",
    ]
    assert lines[6]["dropped"] == 7
    overflow = [e for e in logs if e["event"] == "eventlog.overflow"]
    assert len(overflow) == 1 and overflow[0]["capacity"] == 5
    assert [e["dropped"] for e in logs if e["event"] == "eventlog.recovered"] == [7]
    assert sink.closed


class FlakyStream(io.StringIO):
    """A text stream whose disk is full until ``healthy``; counts the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.healthy = False
        self.calls = 0
        self.called = threading.Condition()

    def write(self, s: str) -> int:
        with self.called:  # decided with the count: the test flips ``healthy`` after it
            self.calls += 1
            failing = not self.healthy
            self.called.notify_all()
        if failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(s)

    def wait_calls(self, n: int) -> None:
        with self.called:
            assert self.called.wait_for(lambda: self.calls >= n, 10)


def test_a_raising_stream_costs_events_not_the_writer() -> None:
    stream = FlakyStream()
    writer = EventLogWriter(StreamSink(stream), capacity=100)
    writer.start()
    with capture_logs() as logs:
        writer.put(started())
        stream.wait_calls(1)
        writer.put(rec("member.heartbeat_ok", 1))
        stream.wait_calls(2)
        writer.put(rec("member.heartbeat_ok", 2))
        stream.wait_calls(3)
        assert writer.alive
        stream.healthy = True
        writer.put(rec("member.stable", 3))
        writer.put(stopped(), force=True)
        writer.close()
        assert writer.join(10)
    lines = parse(stream.getvalue())
    validate(lines)
    # The numbers of the lost lines were given out again: no gap in the file.
    assert [(line["seq"], line["event"]) for line in lines] == [
        (0, "member.stable"),
        (1, "eventlog.dropped"),
        (2, "eventlog.stopped"),
    ]
    assert lines[1]["dropped"] == 3 and writer.dropped == 3
    failures = [e for e in logs if e["event"] == "eventlog.write_failed"]
    assert len(failures) == 1 and "No space left on device" in failures[0]["error"]
    assert [e["dropped"] for e in logs if e["event"] == "eventlog.recovered"] == [3]


def test_close_writes_everything_queued_then_ends_the_thread(tmp_path: Path) -> None:
    writer = EventLogWriter(DirectorySink(tmp_path, host="h", pid=1, started_ns=T0))
    writer.start()
    writer.put(started())
    for i in range(1, 500):
        writer.put(rec("member.heartbeat_ok", i))
    writer.put(stopped(), force=True)
    writer.close()
    assert writer.join(10)
    assert not writer.alive
    assert not writer.put(rec("member.heartbeat_ok", 501))  # closed: dropped, counted
    lines = read_dir(tmp_path)
    validate(lines)
    check_stream(lines, closed=False)
    assert len(lines) == 501 and lines[-1]["event"] == "eventlog.stopped"


def test_a_record_no_json_can_hold_is_dropped_and_told() -> None:
    stream = io.StringIO()
    writer = EventLogWriter(StreamSink(stream))

    class Weird:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    writer.put(started())
    writer.put(rec("member.joined", 1, leader=Weird()))
    writer.put(rec("member.stable", 2))
    writer.put(stopped(), force=True)
    writer.start()
    writer.close()
    assert writer.join(10)
    lines = parse(stream.getvalue())
    validate(lines)
    events = [line["event"] for line in lines]
    assert events == ["eventlog.started", "eventlog.dropped", "member.stable", "eventlog.stopped"]
    assert lines[1]["dropped"] == 1 and writer.dropped == 1
    assert [line["seq"] for line in lines] == [0, 1, 2, 3]


# -- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_log", 42),
        ("event_log", ""),
        ("event_log_max_bytes", 100),
        ("event_log_max_bytes", True),
        ("event_log_topic", "no spaces allowed"),
    ],
)
def test_config_rejects_bad_event_log_settings(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        GroupConfig(bootstrap_servers="b:9092", group_id="g", **{field: value})
    assert info.value.field == field


def test_config_takes_a_path_a_stream_or_a_topic(tmp_path: Path) -> None:
    for target in (str(tmp_path), tmp_path, io.StringIO()):
        assert GroupConfig(bootstrap_servers="b:9092", group_id="g", event_log=target)
    config = GroupConfig(bootstrap_servers="b:9092", group_id="g", event_log_topic="events")
    assert config.event_log is None and config.event_log_topic == "events"


# -- the structlog processor -------------------------------------------------------------------


def test_the_processor_writes_kgroup_events_and_passes_everything_on() -> None:
    stream = io.StringIO()
    processor = EventLogProcessor(stream, client_id="app")
    seen: list[dict[str, Any]] = []

    def keep(_logger: Any, _name: str, event_dict: Any) -> Any:
        seen.append(dict(event_dict))
        raise structlog.DropEvent

    structlog.configure(processors=[processor, keep])
    try:
        log = structlog.get_logger("kgroup")
        log.info("member.joined", group="g", member_id="m1", generation=1, leader="m1")
        log.info(
            "member.partitions_assigned",
            group="g",
            member_id="m1",
            generation=1,
            partitions=["my-topic-0", "my-topic-11"],
        )
        log.info("member.partitions_assigned", group="e", partitions=["leader"])
        log.info("member.partitions_revoked", group="g", partitions=["my-topic-0"])
        log.info("something.else", group="g")  # not kgroup's
        log.info("member.closed", group="g")
    finally:
        structlog.reset_defaults()
    assert processor.close()
    assert len(seen) == 6  # passed on, unchanged
    lines = parse(stream.getvalue())
    validate(lines)
    by_uid = streams(lines)
    assert len(by_uid) == 2  # one stream per group
    g = next(s for s in by_uid.values() if s[0]["group"] == "g")
    check_stream(g)
    assert [line["event"] for line in g] == [
        "eventlog.started",
        "member.joined",
        "member.partitions_assigned",
        "member.partitions_revoked",
        "member.closed",
        "eventlog.stopped",
    ]
    assert g[2]["assigned"] == [
        {"topic": "my-topic", "partition": 0},
        {"topic": "my-topic", "partition": 11},
    ]
    assert g[3]["owned"] == [{"topic": "my-topic", "partition": 11}]
    assert {line["client_id"] for line in lines} == {"app"}
    e = next(s for s in by_uid.values() if s[0]["group"] == "e")
    assert e[1]["assigned"] == [{"topic": "leader", "partition": -1}]
    assert processor.close()  # idempotent


def test_the_processor_to_a_directory(tmp_path: Path) -> None:
    with EventLogProcessor(tmp_path) as processor:
        processor(None, "info", {"event": "member.stable", "group": "g", "assignment": []})
    lines = read_dir(tmp_path)
    validate(lines)
    assert [line["event"] for line in lines] == [
        "eventlog.started",
        "member.stable",
        "eventlog.stopped",
    ]
    assert json.loads(json.dumps(lines[1]))["extra"] == {"assignment": []}
