"""The Spark job against the pure-Python reference, on generated and hand-written logs.

The generated logs (tests/analytics/_logs.py) mix joins, graceful leaves, crashes,
evictions, lease expiries, fencings, cooperative partial revokes, leader-election groups,
late heartbeats, loop stalls, per-host clock skew and forced overlapping ownership, and are
then spoiled: malformed lines, unknown versions, empty lines, duplicates, out-of-order
events, truncated last lines, rotated and gzipped files. Every table must equal the
reference's (rows sorted; floats to 1e-9). The hand-written logs pin the definitions
themselves, so that the job and the reference cannot share a mistake unnoticed.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from kgroup.analytics import TABLES
from kgroup.analytics._judge import judge, judged_events
from kgroup.analytics._members import members
from kgroup.analytics._ownership import ownership
from kgroup.analytics._pipeline import PipelineResult, collect_rows, run_pipeline
from kgroup.analytics._read import empty_source, parse, read_files
from kgroup.analytics._safety import overlaps
from tests.analytics._compare import assert_tables_equal
from tests.analytics._logs import Options, fmt_ts, simulate, write_logs
from tests.analytics._reference import reference_tables, source_lines

# One worker runs every Spark test (one JVM; see the Makefile's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("spark")


T0 = 1_795_000_000_000_000


#: Both ways of reading files: each test that takes ``reader`` runs once with each, and both
#: must give the reference's tables.
READERS = ("python", "spark")


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(
    spark: SparkSession, paths: list[Path], out: Path, reader: str, skew: float = 0.1
) -> PipelineResult:
    return run_pipeline(
        spark,
        read_files(spark, [str(p) for p in paths]),
        out=str(out),
        clock_skew_s=skew,
        numbered_by_pos=False,
        progress=lambda _text: None,
        reader=reader,
    )


def ownership_of(spark: SparkSession, logs: Path) -> DataFrame:
    """The ownership intervals of the logs under ``logs`` (with ``from_seq``, as the
    overlap check reads them), without running the rest of the pipeline."""
    parsed = parse(read_files(spark, [str(logs)]))
    judged = judge(parsed)
    return ownership(judged_events(judged), members(judged))


def check_summary(got: dict[str, Any], want: dict[str, Any]) -> None:
    for k, v in want.items():
        assert got[k] == v, (k, got[k], v)


def test_generated_logs_match_the_reference(
    spark: SparkSession, tmp_path: Path, reader: str
) -> None:
    """Three seeds' worth of groups in one input (one Spark run), spoiled."""
    logs = tmp_path / "logs"
    for seed in (11, 12, 13):
        opts = Options(groups=4, overlaps=0.6, duration_s=90.0)
        write_logs(simulate(seed, opts), logs / f"seed-{seed}", seed, spoil=True)
    want = reference_tables(source_lines([str(logs)]))
    got = run(spark, [logs], tmp_path / "out", reader)
    check_summary(got.summary, want["summary"][0])
    assert_tables_equal(got.tables, want)
    # The generator's faults are all there, so the comparison covered them.
    assert want["overlaps"], "no overlap generated"
    reasons = {r["reason"] for r in want["bad_records"]}
    assert reasons == {"malformed", "truncated", "unknown_version", "duplicate", "out_of_order"}
    assert any(r["crashes"] for r in want["churn"])
    assert any(r["evictions"] for r in want["churn"])
    assert any(r["stalls"] for r in want["heartbeat_health"])
    assert any(r["rebalance_id"] is None for r in want["unavailability"]) or want["unavailability"]
    assert any(not r["complete"] for r in want["rebalances"])
    # And the Parquet tables hold the same rows as the ones handed to the report.
    for name in ("rebalances", "overlaps", "bad_records"):
        path = tmp_path / "out" / ("bad_records" if name == "bad_records" else f"tables/{name}")
        assert collect_rows(spark.read.parquet(str(path)), name) == got.tables[name]


def test_clean_logs_with_heavy_skew_match_the_reference(
    spark: SparkSession, tmp_path: Path, reader: str
) -> None:
    """No spoiling, big clock skew between hosts, many faults; several allowances."""
    logs = tmp_path / "logs"
    opts = Options(groups=5, skew_ms=400.0, faults=2.0, overlaps=0.5, cooperative=0.6)
    write_logs(simulate(21, opts), logs, 21, gzip_share=0.5)
    got = run(spark, [logs], tmp_path / "out", reader)
    want = reference_tables(source_lines([str(logs)]))
    check_summary(got.summary, want["summary"][0])
    assert got.summary["bad_records"] == 0
    assert_tables_equal(got.tables, want)
    own = ownership_of(spark, logs).cache()
    try:
        for skew in (0.0, 0.05, 0.5, 2.0):
            got_rows = collect_rows(overlaps(own, skew), "overlaps")
            want_rows = reference_tables(source_lines([str(logs)]), skew)["overlaps"]
            assert_tables_equal(
                {"overlaps": got_rows},
                {"overlaps": want_rows},
                skip=tuple(n for n in TABLES if n != "overlaps"),
            )
            assert all(r["seconds"] > skew for r in got_rows)
    finally:
        own.unpersist()


def test_empty_input_gives_empty_tables(spark: SparkSession, tmp_path: Path, reader: str) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "notes.txt").write_text("not a log\n")
    got = run_pipeline(
        spark,
        read_files(spark, [str(tmp_path / "logs")]),
        out=str(tmp_path / "out"),
        clock_skew_s=0.1,
        numbered_by_pos=False,
        progress=lambda _t: None,
        reader=reader,
    )
    assert got.summary["events"] == got.summary["bad_records"] == 0
    assert got.summary["groups"] == got.summary["members"] == 0
    assert got.summary["first_ts"] is None
    for name in TABLES:
        if name != "summary":
            assert got.tables[name] == [], name
            path = tmp_path / "out" / ("bad_records" if name == "bad_records" else "tables")
            df = spark.read.parquet(str(path if name == "bad_records" else path / name))
            assert df.columns == list(TABLES[name])
    assert empty_source(spark).count() == 0


def _line(member: str, seq: int, t_s: float, event: str, **fields: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "ts": fmt_ts(T0 + round(t_s * 1_000_000)),
        "seq": seq,
        "member_uid": member,
        "event": event,
        "group": fields.pop("group", "g"),
        "host": fields.pop("host", f"host-{member}"),
        "pid": 1,
        "client_id": f"c-{member}",
        **fields,
    }


def _write(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _tp(*parts: int, topic: str = "t") -> list[dict[str, Any]]:
    return [{"topic": topic, "partition": p} for p in parts]


def _state(member: str, seq: int, t: float, before: str, after: str, reason: str) -> dict[str, Any]:
    return _line(
        member,
        seq,
        t,
        "member.state_changed",
        state_before=before,
        state_after=after,
        reason=reason,
    )


def test_hand_written_scenario(spark: SparkSession, tmp_path: Path, reader: str) -> None:
    """Two members; B crashes holding partition 1, A takes it over 6 s later; A held
    partition 0 0.5 s into B's claim on it (an overlap); then A closes."""
    a = [
        _state("a", 0, 0.0, "UNJOINED", "PREPARING_REBALANCE", "start"),
        _line("a", 1, 0.5, "member.joined", generation=1, leader="A1", member_id="A1"),
        _line("a", 2, 1.0, "member.partitions_assigned", assigned=_tp(0, 1), generation=1),
        _state("a", 3, 1.0, "COMPLETING_REBALANCE", "STABLE", "synced"),
        _state("a", 4, 10.0, "STABLE", "PREPARING_REBALANCE", "member joined"),
        _line("a", 5, 11.5, "member.partitions_revoked", revoked=_tp(0, 1)),
        _state("a", 6, 12.0, "COMPLETING_REBALANCE", "STABLE", "synced"),
        _line("a", 7, 12.5, "member.heartbeat_ok", hb_rtt_ms=2.0, hb_late_ms=0.0),
        _line("a", 8, 13.5, "member.heartbeat_ok", hb_rtt_ms=4.0, hb_late_ms=1.0),
        _line("a", 9, 14.0, "heartbeat.late", hb_late_ms=700.0),
        _line(
            "a",
            10,
            14.5,
            "member.heartbeat_failed",
            hb_rtt_ms=9.0,
            hb_late_ms=700.0,
            error_code=27,
            error="REBALANCE_IN_PROGRESS",
        ),
        _state("a", 11, 20.0, "STABLE", "PREPARING_REBALANCE", "session expired"),
        _line("a", 12, 21.0, "member.partitions_assigned", assigned=_tp(1), generation=3),
        _state("a", 13, 21.0, "COMPLETING_REBALANCE", "STABLE", "synced"),
        _line("a", 14, 30.0, "member.closed"),
    ]
    b = [
        _state("b", 0, 10.0, "UNJOINED", "PREPARING_REBALANCE", "start"),
        _line("b", 1, 11.0, "member.partitions_assigned", assigned=_tp(0, 1), generation=2),
        _state("b", 2, 11.2, "COMPLETING_REBALANCE", "STABLE", "synced"),
        _line("b", 3, 15.0, "member.heartbeat_ok", hb_rtt_ms=1.0, hb_late_ms=0.0),
    ]  # b's log just stops: a crash at 15.0
    _write(tmp_path / "logs" / "a.jsonl", a)
    _write(tmp_path / "logs" / "b.jsonl", b)
    got = run(spark, [tmp_path / "logs"], tmp_path / "out", reader).tables
    own = {(r["member_uid"], r["partition"], r["from_ts"][17:26]): r for r in got["ownership"]}
    assert own[("b", 1, "51.000000")]["end"] == "crash"
    assert own[("b", 1, "51.000000")]["seconds"] == 4.0
    assert own[("a", 0, "41.000000")]["end"] == "revoked"
    assert own[("a", 1, "01.000000")]["end"] == "closed"
    assert own[("a", 1, "01.000000")]["seconds"] == 9.0
    rebs = got["rebalances"]
    assert [(r["rebalance_id"], r["duration_s"], r["reason"], r["complete"]) for r in rebs] == [
        (1, 1.0, "start", True),
        (2, 2.0, "member joined", True),
        (3, 1.0, "session expired", True),
    ]
    # Partition 1 had no owner from b's crash (15.0) to a's assignment (21.0); partition 0
    # from b's crash to the end of the group's log (30.0), never re-owned.
    una = {
        (r["partition"], r["seconds"], r["next_owner"], r["rebalance_id"])
        for r in got["unavailability"]
    }
    assert una == {(1, 6.0, "a", 3), (0, 15.0, None, 3)}
    ov = got["overlaps"]
    assert [(r["member_a"], r["member_b"], r["partition"], r["seconds"]) for r in ov] == [
        ("a", "b", 0, 0.5),
        ("a", "b", 1, 0.5),
    ]
    hh = {r["member_uid"]: r for r in got["heartbeat_health"]}
    assert hh["a"]["heartbeats"] == 3 and hh["a"]["failures"] == 1
    assert hh["a"]["rtt_p50_ms"] == 4.0 and hh["a"]["rtt_p99_ms"] == pytest.approx(8.9)
    assert hh["a"]["stalls"] == 1 and hh["a"]["max_stall_ms"] == 700.0
    churn = {r["member_uid"]: r for r in got["churn"]}
    assert churn["b"]["crashes"] == 1 and churn["a"]["crashes"] == 0
    assert churn["a"]["joins"] == 1 and churn["a"]["member_id"] == "A1"
    # With an allowance of 0.5 s, the 0.5 s overlaps are clock skew.
    intervals = ownership_of(spark, tmp_path / "logs")
    assert collect_rows(overlaps(intervals, 0.5), "overlaps") == []
    assert len(collect_rows(overlaps(intervals, 0.49), "overlaps")) == 2


def test_bad_records_have_file_line_and_reason(
    spark: SparkSession, tmp_path: Path, reader: str
) -> None:
    good = [_line("m", i, float(i), "member.heartbeat_ok", hb_rtt_ms=1.0) for i in range(6)]
    v2 = dict(_line("m", 9, 9.0, "member.heartbeat_ok"), v=2)
    rows: list[Any] = [
        good[0],
        "not json",
        good[1],
        good[1],  # duplicate
        v2,
        dict(_line("m", 3, 3.0, "x"), ts="2026-11-18 10:00:00"),  # malformed ts
        good[2],
        dict(good[3], ts=fmt_ts(T0)),  # seq 3 earlier than seq 2: out of order
        "",
        '{"v":1,"seq":"7"}',
        good[4],
        dict(_line("m", 8, 8.0, "x"), ts="2026-13-18T10:00:00.000000Z"),  # no 13th month
    ]
    _write(tmp_path / "logs" / "a.jsonl", rows)
    # A gzipped, rotated file whose last line was cut.
    cut = json.dumps(good[5])[:40]
    (tmp_path / "logs" / "a.1.jsonl.gz").write_bytes(
        gzip.compress((json.dumps(dict(good[5], seq=10)) + "\n" + cut).encode())
    )
    # A gzip file cut in the middle of its compressed stream, and one of garbage bytes: read
    # up to the damage, which is a bad record of its own (the first line lost).
    whole = gzip.compress(
        "".join(
            json.dumps(_line("z", i, float(i), "member.state_changed")) + "\n" for i in range(400)
        ).encode()
    )
    (tmp_path / "logs" / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    readable = zlib.decompressobj(wbits=31).decompress(whole[: len(whole) // 2])
    cut_line = readable.count(b"\n") + 1
    (tmp_path / "logs" / "garbage.jsonl.gz").write_bytes(b"\x1f\x8b\x08" + bytes(range(256)) * 4)
    # A file big enough to be read in several splits (with the small split size set here)
    # still gets exact line numbers: each split's lines are counted from its file's start.
    big: list[Any] = []
    for i in range(3000):
        big.append(_line("big", i, float(i), "member.heartbeat_ok", hb_rtt_ms=1.0))
        if i % 500 == 7:
            big.append(f"garbage {i}")
    _write(tmp_path / "logs" / "big.jsonl", big)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    try:
        source = read_files(spark, [str(tmp_path / "logs")])
        assert source.rdd.getNumPartitions() > 3
        got = run_pipeline(
            spark,
            source,
            out=str(tmp_path / "out"),
            clock_skew_s=0.1,
            numbered_by_pos=False,
            progress=lambda _t: None,
            reader=reader,
        )
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    big_lines = sorted(
        r["line"] for r in got.tables["bad_records"] if r["file"].endswith("big.jsonl")
    )
    assert big_lines == [i + 1 for i, r in enumerate(big) if isinstance(r, str)]
    bad = [
        (Path(r["file"]).name, r["line"], r["reason"])
        for r in got.tables["bad_records"]
        if not r["file"].endswith("big.jsonl")
    ]
    assert sorted(bad) == [
        ("a.1.jsonl.gz", 2, "truncated"),
        ("a.jsonl", 2, "malformed"),
        ("a.jsonl", 4, "duplicate"),
        ("a.jsonl", 5, "unknown_version"),
        ("a.jsonl", 6, "malformed"),
        ("a.jsonl", 8, "out_of_order"),
        ("a.jsonl", 9, "malformed"),
        ("a.jsonl", 10, "malformed"),
        ("a.jsonl", 12, "malformed"),
        ("cut.jsonl.gz", cut_line, "truncated"),
        ("garbage.jsonl.gz", 1, "corrupt_file"),
    ]
    assert got.summary["events"] == 5 + 3000 + cut_line - 1
    assert got.summary["bad_records"] == 9 + 6 + 2
    want = reference_tables(source_lines([str(tmp_path / "logs")]))
    assert sorted(got.tables["bad_records"], key=str) == sorted(want["bad_records"], key=str)
    assert got.summary["duplicates"] == 1 and got.summary["out_of_order"] == 1
