"""The fast reader (kgroup.analytics._pyread, _pybatch, _pyjudge) against Spark's own reading.

The fast path may only certify a line that Spark's JSON reader parses to the same event, so
the main check here is a fuzz: thousands of lines made from valid events by mutations that
JSON and Jackson treat differently (types, repeated names, spacing, escapes, big numbers,
odd timestamps, Jackson's leniencies). Every line the fast path certifies, one at a time or
in a batch, must be an event to :func:`kgroup.analytics._read.parse` with the same values.
And a log with a line only Spark reads as an event is read on the Spark path instead, with
the same tables as there.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kgroup.analytics._judge import judge
from kgroup.analytics._pipeline import run_pipeline
from kgroup.analytics._pybatch import BATCH, _certain, _context, certify_lines, read_slice
from kgroup.analytics._pyjudge import histogram, percentiles
from kgroup.analytics._pyread import CONTEXT_COLUMNS, certify, read_lines
from kgroup.analytics._read import (
    EVENT_COLUMNS,
    SOURCE_SCHEMA,
    damaged_files,
    empty_source,
    file_uri,
    local_log_files,
    parse,
    read_files,
)
from tests.analytics._compare import assert_tables_equal
from tests.analytics._logs import Options, simulate, write_logs

pytestmark = pytest.mark.xdist_group("spark")

BASE: dict[str, Any] = {
    "v": 1,
    "ts": "2026-11-18T11:06:43.364493Z",
    "seq": 9,
    "member_uid": "c9e9c616612e7696a6cecc1b78e51061",
    "event": "member.heartbeat_ok",
    "group": "group-0",
    "host": "host-1",
    "pid": 13859,
    "client_id": "group-0-c1",
    "member_id": "group-0-c1-ad45f23d",
    "generation": 1,
    "instance_id": "group-0-i1",
    "hb_sent": "2026-11-18T11:06:43.360996Z",
    "hb_rtt_ms": 3.496,
    "hb_late_ms": 1.93,
}
ASSIGNED = dict(
    BASE,
    event="member.assigned",
    assigned=[{"topic": "t", "partition": 0}, {"topic": "u", "partition": 7}],
    revoked=[],
    reason="rebalance",
)
del ASSIGNED["hb_rtt_ms"], ASSIGNED["hb_late_ms"]

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1.0, 1.5, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64 - 1, 1e308,
    "", "x", "1", "NaN", "Infinity", "2026-11-18T11:06:43.364493Z", [], {}, [1], {"a": 1},
    [{"topic": "t"}], [{"topic": "t", "partition": "1"}], [{"topic": 1, "partition": 1}],
    [{"topic": "t", "partition": 2**31}], [{"topic": "t", "partition": 1, "x": 2}], [None],
]  # fmt: skip
ODD_TS = [
    "2026-02-29T00:00:00.000000Z", "2028-02-29T23:59:59.999999Z", "2026-11-18T24:00:00.000000Z",
    "2026-11-18T23:60:00.000000Z", "2026-11-18T23:59:60.000000Z", "0001-01-01T00:00:00.000000Z",
    "0000-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.999999Z", "1582-10-10T12:00:00.000000Z",
    "2026-11-18T11:06:43.364493+00:00", "2026-11-18t11:06:43.364493Z", "2026-11-18T11:06:43Z",
    "2026-11-18T11:06:43.3644930Z", "2026-1-18T11:06:43.364493Z",
    "\uff12026-11-18T11:06:43.364493Z",  # a full-width digit
    "2026-11-18T11:06:43.36449 Z", "+026-11-18T11:06:43.364493Z", "1969-12-31T23:59:59.999999Z",
]  # fmt: skip


def _dump(obj: Any, spaced: bool = False) -> str:
    if spaced:
        return json.dumps(obj)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def fuzz_lines(seed: int, count: int) -> list[str]:
    """Lines made from valid events by one or two mutations each (and the valid ones)."""
    rng = random.Random(seed)
    out = [_dump(BASE), _dump(ASSIGNED), _dump(BASE, spaced=True)]
    for _ in range(count):
        obj = dict(rng.choice((BASE, ASSIGNED)))
        text = None
        for _ in range(rng.randint(1, 2)):
            kind = rng.randrange(12)
            key = rng.choice([*obj, "assigned", "lost", "error_code", "leader", "extra"])
            if kind == 0:
                obj[key] = rng.choice(ODD_VALUES)
            elif kind == 1:
                obj.pop(key, None)
            elif kind == 2:
                obj["ts"] = rng.choice(ODD_TS)
            elif kind == 3:  # a repeated name, first or last
                dup = f'"{key}":{json.dumps(rng.choice(ODD_VALUES))}'
                body = _dump(obj)[1:-1]
                text = "{" + (f"{dup},{body}" if rng.random() < 0.5 else f"{body},{dup}") + "}"
            elif kind == 4:  # a space before a colon, after a comma, around the object
                text = rng.choice(
                    [_dump(obj).replace('":', '" :', 1), " " + _dump(obj, True) + " "]
                )
            elif kind == 5:  # Jackson's leniencies
                text = rng.choice(
                    [
                        _dump(obj).replace('"', "'"),
                        _dump(obj)[:-1] + ',"hb_rtt_ms":NaN}',
                        _dump(obj) + " trailing",
                        "\ufeff" + _dump(obj),
                        _dump(obj)[:-1] + ",}",
                        _dump(obj)[:-1] + ',"extra":"\\ud800"}',  # a lone surrogate
                        "[" + _dump(obj) + "]",
                    ]
                )
            elif kind == 6:  # escapes and quotes inside strings
                obj[rng.choice(["group", "host", "reason", "extra"])] = rng.choice(
                    ['a"b', "a\\b", 'x":1', "\u00e9\u4e2d", "\U0001f600", "a\nb", "\u0000"]
                )
            elif kind == 7:
                obj["seq"] = rng.choice([0, 10**18, -5, 2**63 - 1, 2**63])
            elif kind == 8:  # case variants of names
                name = rng.choice(list(obj))
                obj[name.upper()] = obj[name]
            elif kind == 9:
                obj[rng.choice(["hb_rtt_ms", "hb_late_ms"])] = rng.choice(
                    [0, -0.0, 1e-320, 123456789012345678, 0.1 + 0.2, 5e-324, 1.7976931348623157e308]
                )
            elif kind == 10:
                obj["v"] = rng.choice([2, 1.0, "1", True, None, 0])
            else:
                obj["extra"] = rng.choice([{"seq": 1, "a": ["x", {"b": "c"}]}, [1, "two"], "s"])
        out.append(text if text is not None else _dump(obj))
    return out


def _spark_events(spark: SparkSession, lines: list[str]) -> dict[int, dict[str, Any] | None]:
    """Each line's event as Spark parses it (None when it is not one), by position."""
    rows = [(text, "file:/fuzz", 0, i) for i, text in enumerate(lines)]
    parsed = parse(spark.createDataFrame(rows, SOURCE_SCHEMA))
    got = parsed.select(
        "pos",
        "line_reason",
        F.unix_micros("ts").alias("ts_us"),
        *[c for c in EVENT_COLUMNS if c != "ts"],
    ).collect()
    out: dict[int, dict[str, Any] | None] = {}
    for r in got:
        d = r.asDict(recursive=True)
        out[d.pop("pos")] = None if d.pop("line_reason") else d
    return out


def _certified_as_event(certified: Any) -> dict[str, Any]:
    seq, ts, rtt, late, context = certified
    ctx = dict(zip(CONTEXT_COLUMNS, context, strict=True))
    event: dict[str, Any] = {"ts_us": ts, "seq": seq}
    for c in EVENT_COLUMNS[2:]:
        if c in ("assigned", "revoked", "lost"):
            topics, parts = ctx[c + "_topics"], ctx[c + "_partitions"]
            event[c] = (
                None
                if topics is None
                else [{"topic": t, "partition": p} for t, p in zip(topics, parts, strict=True)]
            )
        elif c == "hb_rtt_ms":
            event[c] = None if rtt != rtt else rtt
        elif c == "hb_late_ms":
            event[c] = None if late != late else late
        else:
            event[c] = ctx[c]
    return event


def test_every_certified_line_is_the_same_event_to_spark(spark: SparkSession) -> None:
    lines = fuzz_lines(5, 4000)
    spark_events = _spark_events(spark, lines)
    certified = 0
    undecided_events = 0
    for i, text in enumerate(lines):
        mine = certify(text.encode())
        theirs = spark_events[i]
        if mine is None:
            undecided_events += theirs is not None
            continue
        certified += 1
        assert theirs is not None, f"certified, but not an event to Spark: {text!r}"
        assert _certified_as_event(mine) == theirs, text
    # The fuzz reached both sides: many lines certified, and lines Spark reads as events
    # that the fast path leaves undecided (which send a log to the Spark path).
    assert certified > 400, certified
    assert undecided_events > 50, undecided_events
    assert certify(json.dumps(BASE, separators=(",", ":")).encode()) is not None


def _same(a: Any, b: Any) -> bool:
    """Certified events equal (NaN equal to NaN)."""
    if a is None or b is None:
        return a is b
    return (
        a[:2] == b[:2]
        and a[4] == b[4]
        and all(x == y or (x != x and y != y) for x, y in zip(a[2:4], b[2:4], strict=True))
    )


def test_every_line_the_batch_path_certifies_is_the_same_event_to_spark(
    spark: SparkSession,
) -> None:
    """The batch path alone (each line a batch of its own): every line it certifies is the
    event Spark reads and the one :func:`certify` gives; it certifies no line that
    :func:`certify` leaves undecided."""
    lines = fuzz_lines(11, 4000)
    spark_events = _spark_events(spark, lines)
    certified = 0
    for i, text in enumerate(lines):
        columns = _certain([text.encode()])
        if columns is None:
            continue
        certified += 1
        seqs, ts, rtts, lates, raws = columns
        mine = (seqs[0], ts[0], rtts[0], lates[0], _context(raws[0]))
        assert _same(mine, certify(text.encode())), text
        assert spark_events[i] is not None, f"certified, but not an event to Spark: {text!r}"
        assert _certified_as_event(mine) == spark_events[i], text
    assert certified > 400, certified
    # In batches: the same answers as line by line, whatever the mix.
    mixed = [text.encode() for text in lines] * 2
    batched = certify_lines(mixed)
    assert all(_same(a, certify(b)) for a, b in zip(batched, mixed, strict=True))
    assert sum(c is not None for c in batched) > 800


def test_generated_logs_take_the_batch_path(tmp_path: Path) -> None:
    """The benchmark's logs are certified in whole batches (kgroup's own writer's lines
    are checked on real members in test_end_to_end), and a file read batch by batch gives
    the chunks it gives line by line."""
    members = simulate(3, Options(groups=2, members=(3, 4), duration_s=300.0))
    files = write_logs(members, tmp_path, seed=3, gzip_share=0.0)
    assert files
    lines_read = 0
    for path in files:
        lines = path.read_bytes().splitlines()
        lines_read += len(lines)
        for start in range(0, len(lines), BATCH):
            assert _certain(lines[start : start + BATCH]) is not None, path
    assert lines_read > BATCH
    got = list(read_slice([p.as_uri() for p in files]))
    assert got and all(key[0] == "m" for key, _ in got)
    by_line: dict[str, list[Any]] = {}
    for path in files:
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            event = certify(line)
            assert event is not None
            by_line.setdefault(event[4][0], []).append((path.as_uri(), number, event))
    for key, chunk in got:
        name, numbers, seqs, ts, rtt, late, ctx, contexts = chunk
        mine = [
            (n, (s_, t_, r_, l_, contexts[c]))
            for n, s_, t_, r_, l_, c in zip(numbers, seqs, ts, rtt, late, ctx, strict=True)
        ]
        theirs = [
            (n, e) for uri, n, e in by_line[key[1:]] if name == "file:" + uri[len("file://") :]
        ]
        assert len(mine) == len(theirs)
        assert all(a[0] == b[0] and _same(a[1], b[1]) for a, b in zip(mine, theirs, strict=True))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_and_histogram_are_sparks(spark: SparkSession, seed: int) -> None:
    rng = random.Random(seed)
    groups = {
        g: [rng.choice([rng.random() * 10 ** rng.randint(-2, 4), 1.0, 2.5]) for _ in range(n)]
        for g, n in enumerate([1, 2, 3, 7, 100, 1000])
    }
    df = spark.createDataFrame(
        [(g, v) for g, values in groups.items() for v in values], "g int, v double"
    )
    got = {
        r["g"]: r["q"]
        for r in df.groupBy("g")
        .agg(F.percentile("v", F.array(F.lit(0.5), F.lit(0.99))).alias("q"))
        .collect()
    }
    for g, values in groups.items():
        assert percentiles(sorted(values)) == got[g], g
        counts = histogram(sorted(values))
        assert sum(counts) == len(values)
    assert percentiles([]) is None


def test_histogram_buckets_by_lower_edge() -> None:
    from kgroup.analytics._names import HISTOGRAM_EDGES_MS as EDGES

    values = sorted([EDGES[0] - 1, EDGES[1], EDGES[1] - 1e-9, EDGES[-1], EDGES[-1] * 10])
    counts = histogram(values)
    assert counts[0] == 2 and counts[1] == 1 and counts[-1] == 2


def test_line_splitting_and_damage_match_the_spark_reader(tmp_path: Path) -> None:
    (tmp_path / "mixed.jsonl").write_bytes(b"a\r\nb\rc\n\nd\r\r\ne")
    lines, damage = read_lines((tmp_path / "mixed.jsonl").as_uri())
    assert lines == [b"a", b"b", b"c", b"", b"d", b"", b"e"] and damage is None
    whole = gzip.compress(b"".join(b"line %d\n" % i for i in range(3000)))
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "two.jsonl.gz").write_bytes(gzip.compress(b"x\n") + gzip.compress(b"y\n"))
    (tmp_path / "garbage.jsonl.gz").write_bytes(b"\x1f\x8b\x08" + bytes(range(256)))
    uris = [(tmp_path / n).as_uri() for n in ("cut.jsonl.gz", "two.jsonl.gz", "garbage.jsonl.gz")]
    want = {name: (line, reason, text) for name, line, reason, text in damaged_files(uris)}
    for uri in uris:
        lines, damage = read_lines(uri)
        name = "file:" + uri[len("file://") :]
        assert damage == want.get(name), uri
        if damage is not None:
            assert len(lines) == damage[0] - 1
    readable = zlib.decompressobj(wbits=31).decompress(whole[: len(whole) // 2])
    assert read_lines(uris[0])[0] == readable[: readable.rfind(b"\n") + 1].splitlines()
    assert read_lines(uris[1]) == ([b"x", b"y"], None)


def test_a_line_only_spark_reads_as_an_event_sends_the_log_to_the_spark_path(
    spark: SparkSession, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    rows = [dict(BASE, seq=i, ts=f"2026-11-18T11:06:{10 + i:02d}.000000Z") for i in range(5)]
    text = [json.dumps(r, separators=(",", ":")) for r in rows]
    text[2] = text[2].replace('"host-1"', "7")  # a number where a string belongs: Spark's "7"
    (logs / "a.jsonl").write_text("\n".join(text) + "\nnot json\n")
    said: list[str] = []
    results = {}
    for reader in ("auto", "spark"):
        results[reader] = run_pipeline(
            spark,
            read_files(spark, [str(logs)]),
            out=str(tmp_path / f"out-{reader}"),
            clock_skew_s=0.1,
            numbered_by_pos=False,
            progress=said.append,
            reader=reader,
        )
    assert any("lenient JSON reader" in s for s in said)
    assert results["auto"].summary["events"] == 5
    assert_tables_equal(results["auto"].tables, results["spark"].tables)


def test_the_fast_path_gives_the_spark_path_judged_columns(spark: SparkSession) -> None:
    from kgroup.analytics._pyjudge import _JUDGED_COLUMNS, JUDGED_SCHEMA

    schema = judge(parse(empty_source(spark))).schema
    assert tuple(schema.names) == _JUDGED_COLUMNS
    assert schema.simpleString() == JUDGED_SCHEMA.simpleString()


@pytest.mark.parametrize(
    ("reader", "numbered", "error"),
    [("fast", False, "reader must be one of"), ("python", True, "reads local files only")],
)
def test_a_reader_that_cannot_read_the_source_is_refused(
    spark: SparkSession, tmp_path: Path, reader: str, numbered: bool, error: str
) -> None:
    """An unknown reader, and the python reader on a source of lines that are not local
    files (a Kafka topic's)."""
    with pytest.raises(ValueError, match=error):
        run_pipeline(
            spark,
            empty_source(spark),
            out=str(tmp_path / "out"),
            clock_skew_s=0.1,
            numbered_by_pos=numbered,
            progress=lambda _t: None,
            reader=reader,
        )


def test_local_listing_names_the_files_spark_reads(spark: SparkSession, tmp_path: Path) -> None:
    """Hidden names, partition-like names, a glob that does not match, a symlinked
    directory, and characters java.net.URI escapes or keeps."""
    root = tmp_path / "logs"
    for d in ("sub dir/_hidden", ".dot", "p=1", "_a=1", "real"):
        (root / d).mkdir(parents=True)
    (root / "linked").symlink_to(root / "real", target_is_directory=True)
    names = [
        "a b.jsonl", "x%y.jsonl", "\u00e9\u4e2d.jsonl", "[x].jsonl", "#h.jsonl", "q?.jsonl",
        "c,;:$&+=@!~'()*.jsonl", "t\tab.jsonl", "_u.jsonl", ".d.jsonl", "n.jsonl.gz", "o.json",
        "z{}^`|\\.jsonl", 'dq".jsonl', "lt<>.jsonl", "sub dir/in.jsonl", "sub dir/_hidden/h.jsonl",
        ".dot/d.jsonl", "p=1/_v.jsonl", "p=1/w.jsonl", "_a=1/y.jsonl", "x.jsonl._COPYING_",
        "nb\u00a0sp.jsonl", "zw\u200bsp.jsonl", "real/r.jsonl", "_f=1.jsonl",
    ]  # fmt: skip
    for name in names:
        (root / name).write_text("{}\n")
    want = sorted(read_files(spark, [str(root)]).inputFiles())
    assert local_log_files([str(root)]) == want
    assert len(want) > 15
    one = [str(root / "a b.jsonl"), str(root / "_u.jsonl"), str(root / "o.json")]
    assert local_log_files(one) == sorted(read_files(spark, one).inputFiles())


def test_kept_events_keep_their_own_group_host_pid_and_client(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The python reader sends a kept event's member_uid, group, host, pid and client_id
    once per member when they are the member row's; an event with other values in them
    keeps its own, as on the Spark path (one member's events spread over two processes'
    files, and a member whose events all agree)."""
    from kgroup.analytics._judge import judged_events
    from kgroup.analytics._pyjudge import judge_local_files

    logs = tmp_path / "logs"
    logs.mkdir()
    other = dict(BASE, member_uid="0" * 32, client_id="other-c")
    changes: list[dict[str, Any]] = [
        {},
        {"host": "host-2"},
        {"group": "group-9", "generation": 4},
        {"pid": 7},
        {"client_id": "moved-c", "host": "host-3"},
        {},
    ]
    for name, base in (("a.jsonl", BASE), ("b.jsonl", other)):
        rows = []
        for i, change in enumerate(changes):
            event = "member.state_changed" if i % 2 else "member.joined"
            row = dict(base, seq=i, event=event, ts=f"2026-11-18T11:06:{10 + i:02d}.000000Z")
            if name == "a.jsonl":
                row.update(change)
            rows.append(_dump(row))
        (logs / name).write_text("\n".join(rows) + "\n")
    files = [file_uri(str(logs / n)) for n in ("a.jsonl", "b.jsonl")]
    judged = judge_local_files(spark, files, lambda df, _name: df)
    assert judged is not None
    want = judged_events(judge(parse(read_files(spark, [str(logs)]))))
    columns = want.columns
    got = judged.events.select(*columns)
    mine = sorted(tuple(r) for r in got.collect())
    theirs = sorted(tuple(r) for r in want.collect())
    assert mine == theirs
    hosts = {(r["member_uid"], r["seq"]): r["host"] for r in got.collect()}
    assert hosts[(BASE["member_uid"], 1)] == "host-2"
    assert hosts[(BASE["member_uid"], 4)] == "host-3"
    assert {hosts[("0" * 32, i)] for i in range(6)} == {"host-1"}
