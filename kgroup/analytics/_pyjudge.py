"""The fast path's judging: local log files to the judged rows, in Python tasks.

:func:`judge_local_files` gives what :func:`._judge.judge` gives on the Spark path (one row
per member, one per line that is not an event, the kept events, the duplicates and
out-of-order events), by the same rules, from files read by :mod:`._pyread`:

1. One task per slice of files reads, splits and parses them, and keys each file's certified
   events by member, column by column (:data:`._pyread.Chunk`); its undecided lines and any
   damage are keyed by file.
2. One shuffle brings each member's chunks together; :func:`judge_member` sorts them by
   ``(seq, file, line)``, marks duplicates and out-of-order events and folds the member's
   figures, as :func:`._judge.judge`'s window and aggregation do, into one row with the
   member's kept events and faults as JSON text (one value for Spark to take over per
   member, not one per event; Jackson reads them back in the JVM).
3. The rows are staged as Parquet once, and the kept events once more, out of their JSON.
   The undecided lines are parsed by :func:`._read.parse`: the ones that are not events
   become bad-line rows (``truncated`` when not JSON and the last line of their file). If
   any undecided line is an event after all (valid JSON that kgroup's writer never writes:
   a number where a string belongs, a repeated field name, single quotes),
   :func:`judge_local_files` returns None and the caller reads the input on the Spark path
   instead, so the answer is always the Spark path's.

``pos`` is the line's number in its file (1-based) and ``blk`` 0, so bad records need no
counting of lines per split. Every file is read whole by one task: a file of N MiB takes
about 3N MiB in its Python worker while it is read.
"""

from __future__ import annotations

import bisect
import math
import operator
import os
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import compress, islice
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ._names import EVENTS_READ, FENCED_INSTANCE_ID, HISTOGRAM_EDGES_MS, UNKNOWN_MEMBER_ID
from ._pybatch import read_slice
from ._pyread import CONTEXT_COLUMNS, Chunk
from ._pyread import dumps as _dumps
from ._read import EVENT_COLUMNS, EVENT_SCHEMA, HEARTBEATS, DamagedFile, parse

__all__ = ["Judged", "histogram", "judge_local_files", "judge_member", "percentiles", "slices"]

_HEARTBEATS = frozenset(HEARTBEATS)
_FAILED = "member.heartbeat_failed"
_FENCING_EVENTS = frozenset((_FAILED, "member.fatal_error"))
_COUNTED = {
    "member.joined": "joins",
    "member.leaving": "leaves",
    "member.poll_timeout": "polls",
    "member.lease_expired": "leases",
    "heartbeat.late": "stalls",
}
_C = {name: i for i, name in enumerate(CONTEXT_COLUMNS)}
_EVENT, _GROUP, _HOST, _PID, _CLIENT = (
    _C[n] for n in ("event", "group", "host", "pid", "client_id")
)
_MEMBER_ID, _INSTANCE, _GENERATION = _C["member_id"], _C["instance_id"], _C["generation"]
_ERROR_CODE, _ERROR = _C["error_code"], _C["error"]
_EDGES = list(HISTOGRAM_EDGES_MS)
_QUANTILES = (0.5, 0.99)

_S, _L, _D, _B = T.StringType(), T.LongType(), T.DoubleType(), T.BooleanType()
_MEMBER_COLUMNS = [
    ("member_uid", _S), ("group", _S), ("host", _S), ("pid", _L), ("client_id", _S),
    ("member_id", _S), ("instance_id", _S), ("first_ts", _L), ("last_ts", _L),
    ("last_seq", _L), ("last_event", _S), ("events", _L), ("joins", _L), ("leaves", _L),
    ("session_expiries", _L), ("poll_timeouts", _L), ("fencings", _L),
    ("lease_expiries", _L), ("heartbeats", _L), ("rtt_q", T.ArrayType(_D)),
    ("late_q", T.ArrayType(_D)), ("failures", _L), ("stalls", _L), ("max_stall_ms", _D),
    ("failure_labels", T.ArrayType(_S)), ("rtt_hist", T.ArrayType(_L)),
    ("late_hist", T.ArrayType(_L)),
]  # fmt: skip
#: A kept event's columns: :data:`._read.EVENT_COLUMNS`, ``ts`` in microseconds.
_KEPT = T.StructType(
    [
        T.StructField(f.name, _L if f.name == "ts" else f.dataType)
        for f in EVENT_SCHEMA.fields
        if f.name in EVENT_COLUMNS
    ]
)
#: The rows the Python tasks hand to Spark, of types that need no conversion in Python
#: (no timestamps), one ``kind`` a row: ``m`` a member (its kept events column by column,
#: ``k_<column>`` an array each: a few values for Spark to take over per event, not a row,
#: nor text to parse; its faults as JSON text), ``u`` an undecided line, ``d`` a damaged
#: file.
WIRE_SCHEMA = T.StructType(
    [
        T.StructField("kind", _S),
        *[T.StructField(c, t) for c, t in _MEMBER_COLUMNS],
        *[T.StructField("k_" + f.name, T.ArrayType(f.dataType)) for f in _KEPT.fields],
        T.StructField("faults_json", _S),
        T.StructField("file", _S),
        T.StructField("pos", _L),
        T.StructField("line_reason", _S),
        T.StructField("text", _S),
        T.StructField("last", _B),
    ]
)
_FAULTS = T.ArrayType(
    T.StructType(
        [
            T.StructField("file", _S),
            T.StructField("pos", _L),
            T.StructField("reason", _S),
            T.StructField("seq", _L),
        ]
    )
)


def _struct(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t) for n, t in fields])


#: The judged rows' columns, as :func:`._judge.judge` makes them (a test checks they agree;
#: analysing that plan in the JVM takes longer than this whole module's import).
JUDGED_SCHEMA = _struct(
    ("member_uid", _S),
    (
        "bad",
        _struct(
            ("file", _S), ("blk", _L), ("pos", _L), ("reason", _S), ("json_ok", _B),
            ("text", _S),
        ),
    ),
    *[
        (c, T.TimestampType() if c in ("first_ts", "last_ts") else t)
        for c, t in _MEMBER_COLUMNS[1:]
    ],
    ("events_kept", T.ArrayType(_struct(
        *[(f.name, T.TimestampType() if f.name == "ts" else f.dataType) for f in _KEPT.fields]
    ))),
    ("faults", T.ArrayType(_struct(
        ("file", _S), ("blk", _L), ("pos", _L), ("reason", _S), ("seq", _L)
    ))),
    ("spans", T.ArrayType(_struct(("file", _S), ("blk", _L), ("pos", _L)))),
)  # fmt: skip
_NONE_LINE = (None,) * 5
_NONE_MEMBER = (None,) * (len(_MEMBER_COLUMNS) + len(_KEPT.fields) + 1)
#: Where each event column is in a context (None: not in it).
_FROM_CONTEXT = [(c, _C.get(c)) for c in EVENT_COLUMNS[2:-2]]
#: The kept events' columns that the member row has too: a member's kept events almost
#: always have its row's value in them, so they are sent once, in the row (about a
#: quarter less for Spark to take over and write, per kept event).
_SHARED = ("member_uid", "group", "host", "pid", "client_id")
_SHARED_AT = [[c for c, _ in _FROM_CONTEXT].index(c) for c in _SHARED]


def _middle(context: tuple[Any, ...]) -> tuple[Any, ...]:
    """A kept event's columns from its context: :data:`._read.EVENT_COLUMNS` but ``ts``,
    ``seq`` and the two timings."""
    out: list[Any] = []
    for column, at in _FROM_CONTEXT:
        if at is None:  # a partitions field, from its two tuples
            topics = context[_C[column + "_topics"]]
            if topics is None:
                out.append(None)
            else:
                parts = context[_C[column + "_partitions"]]
                out.append(list(zip(topics, parts, strict=True)))
        else:
            out.append(context[at])
    return tuple(out)


def percentiles(values: list[float]) -> list[float] | None:
    """The 0.5 and 0.99 percentiles of ``values`` (sorted) as Spark's exact ``percentile``
    computes them, to the last bit: ``low + (position - lower) * (high - low)`` at
    ``position = (n - 1) * p`` (exactly ``low`` when the two are equal); None for no values."""
    if not values:
        return None
    top = len(values) - 1
    out = []
    for p in _QUANTILES:
        position = top * p
        lower, higher = math.floor(position), math.ceil(position)
        low = values[lower]
        if higher == lower or values[higher] == low:
            out.append(low)
        else:
            out.append(low + (position - lower) * (values[higher] - low))
    return out


def histogram(values: list[float]) -> list[int]:
    """Counts of ``values`` (sorted) per bucket of :data:`._names.HISTOGRAM_EDGES_MS`
    (bucket 0 also holds what is below the first edge)."""
    below = [bisect.bisect_left(values, edge) for edge in _EDGES[1:]]
    return [b - a for a, b in zip([0, *below], [*below, len(values)], strict=True)]


def _merge(chunks: list[Chunk]) -> tuple[list[str] | None, Chunk]:
    """One member's chunks as one, sorted by ``(seq, file, line)``, and each line's file
    (None when they are all of one file)."""
    files: list[str] | None = None
    if len(chunks) == 1:
        name, lines, seqs, ts, rtt, late, ctx, contexts = chunks[0]
    else:
        name = chunks[0][0]
        lines, seqs, ts, ctx = array("q"), array("q"), array("q"), array("q")
        rtt, late = array("d"), array("d")
        contexts = []
        files = []
        for file, l_, s_, t_, r_, a_, c_, x_ in chunks:
            lines += l_
            seqs += s_
            ts += t_
            rtt += r_
            late += a_
            offset = len(contexts)
            ctx += array("q", [c + offset for c in c_])
            contexts += x_
            files += [file] * len(l_)
    if not all(map(operator.lt, seqs, islice(seqs, 1, None))):
        if files is None:
            order = sorted(range(len(seqs)), key=lambda i: (seqs[i], lines[i]))
        else:
            f = files
            order = sorted(range(len(seqs)), key=lambda i: (seqs[i], f[i], lines[i]))
            files = [f[i] for i in order]
        lines, seqs, ts, ctx = (array("q", [a[i] for i in order]) for a in (lines, seqs, ts, ctx))
        rtt, late = (array("d", [a[i] for i in order]) for a in (rtt, late))
    return files, (name, lines, seqs, ts, rtt, late, ctx, contexts)


def judge_member(uid: str, chunks: list[Chunk]) -> tuple[Any, ...]:
    """One member's wire row (:data:`WIRE_SCHEMA`) from its chunks."""
    files, (name, lines, seqs, ts, rtt, late, ctx, contexts) = _merge(chunks)
    n = len(seqs)
    fault_rows: list[dict[str, Any]] = []
    # Duplicates (the seq of the line before) and out-of-order events (earlier than a line
    # before): none when seq rises and ts never falls.
    fault: dict[int, str] = {}
    if not all(map(operator.le, ts, islice(ts, 1, None))) or not all(
        map(operator.lt, seqs, islice(seqs, 1, None))
    ):
        top = ts[0]
        for i in range(1, n):
            if seqs[i] == seqs[i - 1]:
                fault[i] = "duplicate"
            elif ts[i] < top:
                fault[i] = "out_of_order"
            if ts[i] > top:
                top = ts[i]
        for i, reason in fault.items():
            file = name if files is None else files[i]
            fault_rows.append({"file": file, "pos": lines[i], "reason": reason, "seq": seqs[i]})
    keep = [i for i in range(n) if i not in fault] if fault else range(n)
    kept_ctx = [ctx[i] for i in keep] if fault else ctx
    heartbeat = [c[_EVENT] in _HEARTBEATS for c in contexts]
    counts = dict.fromkeys(
        (
            "events",
            "joins",
            "leaves",
            "expiries",
            "polls",
            "fencings",
            "leases",
            "hbs",
            "failures",
            "stalls",
        ),
        0,
    )
    labels: list[str] = []
    for c, k in Counter(kept_ctx).items():
        context = contexts[c]
        ev, code = context[_EVENT], context[_ERROR_CODE]
        counts["events"] += k
        if heartbeat[c]:
            counts["hbs"] += k
            if ev == _FAILED:
                counts["failures"] += k
                if code == UNKNOWN_MEMBER_ID:
                    counts["expiries"] += k
                error = context[_ERROR]
                labels += [
                    error if error is not None else "unknown" if code is None else f"code {code}"
                ] * k
        elif ev in _COUNTED:
            counts[_COUNTED[ev]] += k
        if ev in _FENCING_EVENTS and code == FENCED_INSTANCE_ID:
            counts["fencings"] += k
    # Per line: a kept heartbeat (its timings count), a kept event the tables read by name
    # (always in the kept events); the faults are neither.
    hb_line = list(map(heartbeat.__getitem__, ctx))
    read = [c[_EVENT] in EVENTS_READ for c in contexts]
    read_line = list(map(read.__getitem__, ctx))
    for i in fault:
        hb_line[i] = read_line[i] = False
    rtts = sorted([v for v in compress(rtt, hb_line) if v == v])
    lates = sorted([v for v in compress(late, hb_line) if v == v])
    stalls = [c for c, context in enumerate(contexts) if context[_EVENT] == "heartbeat.late"]
    stall_lates = (
        [late[i] for i in keep if ctx[i] in stalls and late[i] == late[i]] if stalls else []
    )
    last = keep[-1]
    member_id = instance_id = None
    for i in reversed(keep):
        if member_id is None and contexts[ctx[i]][_MEMBER_ID] not in (None, ""):
            member_id = contexts[ctx[i]][_MEMBER_ID]
        if instance_id is None and contexts[ctx[i]][_INSTANCE] is not None:
            instance_id = contexts[ctx[i]][_INSTANCE]
        if member_id is not None and instance_id is not None:
            break
    lc = contexts[ctx[last]]
    # The kept events: the ones read by name, and the ends of every run of one (group,
    # generation) (a line whose neighbour along seq is not a kept event of its run).
    runs: dict[tuple[Any, Any], int] = {}
    run_of = [runs.setdefault((c[_GROUP], c[_GENERATION]), len(runs)) for c in contexts]
    key = list(map(run_of.__getitem__, ctx))
    for i in fault:
        key[i] = -1 - i  # a fault ends the runs beside it
    starts = [0, *compress(range(1, n), map(operator.ne, key, islice(key, 1, None)))]
    ends = {*starts, *(s - 1 for s in starts[1:]), n - 1}
    chosen = sorted({*compress(range(n), read_line), *(i for i in ends if i not in fault)})
    # The kept events column by column (:data:`_KEPT`); a column of :data:`_SHARED` is
    # None when every kept event has the member row's value in it (Spark puts it back).
    middles = {c: _middle(contexts[c]) for c in {ctx[i] for i in chosen}}
    own = (uid, lc[_GROUP], lc[_HOST], lc[_PID], lc[_CLIENT])
    shared = {
        at
        for at, value in zip(_SHARED_AT, own, strict=True)
        if all(m[at] == value for m in middles.values())
    }
    columns = (
        zip(*[middles[ctx[i]] for i in chosen], strict=True)
        if chosen
        else ([] for _ in _FROM_CONTEXT)
    )
    kept: list[list[Any] | None] = [
        [ts[i] for i in chosen],
        [seqs[i] for i in chosen],
        *(None if at in shared else list(c) for at, c in enumerate(columns)),
        [None if rtt[i] != rtt[i] else rtt[i] for i in chosen],
        [None if late[i] != late[i] else late[i] for i in chosen],
    ]
    return (
        "m", uid, lc[_GROUP], lc[_HOST], lc[_PID], lc[_CLIENT], member_id, instance_id,
            ts[keep[0]], ts[last], seqs[last], lc[_EVENT],
            counts["events"], counts["joins"], counts["leaves"], counts["expiries"],
            counts["polls"], counts["fencings"], counts["leases"], counts["hbs"],
            percentiles(rtts), percentiles(lates), counts["failures"], counts["stalls"],
            max(stall_lates) if stall_lates else None, labels, histogram(rtts),
            histogram(lates), *kept, _dumps(fault_rows).decode() if fault_rows else None,
            *_NONE_LINE,
    )  # fmt: skip


def _judge_key(item: tuple[str, Any]) -> Iterator[tuple[Any, ...]]:
    key, values = item
    kind, name = key[0], key[1:]
    if kind == "m":
        yield judge_member(name, list(values))
    elif kind == "u":
        for chunk in values:
            for line, text, last in chunk:
                yield ("u", *_NONE_MEMBER, name, line, None, text, last)
    else:
        for line, reason, text in values:
            yield ("d", *_NONE_MEMBER, name, line, reason, text, None)


def slices(files: list[str], parallelism: int) -> tuple[list[list[str]], int]:
    """``files`` (local URIs) in slices of about 64 MiB of text each (a compressed file
    weighs six times its size), at least ``2 * parallelism`` of them when there are as many
    files; biggest files first, each to the lightest slice. And how many reduce tasks to
    judge them in: one per 64 MiB of text. A reduce task holds its members' lines, and
    each one costs a Python worker's round trip and a Parquet file: at 9.9M events the
    judging stage took 12.9 s with one per 64 MiB against 15.0 to 15.7 s with one per
    32 MiB, the driver within the same memory (one per 16 MiB was 15% slower again; with the kept
    events as JSON text, one per 64 MiB took the JVM over 1 GiB at 1M events)."""
    weights = []
    for uri in files:
        try:
            size = os.path.getsize(unquote(urlparse(uri).path))
        except OSError:
            size = 0
        weights.append((size * (6 if uri.endswith(".gz") else 1) + 4096, uri))
    total = sum(w for w, _ in weights)
    count = max(min(len(files), 2 * parallelism), math.ceil(total / (64 << 20)))
    count = max(1, min(count, len(files)))
    loads = [(0, i) for i in range(count)]
    out: list[list[str]] = [[] for _ in range(count)]
    for weight, uri in sorted(weights, reverse=True):
        load, i = min(loads)
        loads[i] = (load + weight, i)
        out[i].append(uri)
    reducers = max(2 * parallelism, count, math.ceil(total / (64 << 20)))
    return [s for s in out if s], reducers


@dataclass
class Judged:
    """The judged input, as the metrics read it: ``members`` (one row per member and one
    per line that is not an event: :func:`._judge.judge`'s rows), ``events`` (the kept
    events, :data:`._read.EVENT_COLUMNS` and ``kind``), ``faults`` (file, blk, pos,
    reason, member_uid, seq), the damaged files, and ``numbered``: ``pos`` is the line's
    number (else it is counted per split, :func:`._judge.blocks`)."""

    members: DataFrame
    events: DataFrame
    faults: DataFrame
    damaged: list[DamagedFile]
    numbered: bool


Stage = Callable[[DataFrame, str], DataFrame]

_JUDGED_COLUMNS = (
    "member_uid", "bad", "group", "host", "pid", "client_id", "member_id", "instance_id",
    "first_ts", "last_ts", "last_seq", "last_event", "events", "joins", "leaves",
    "session_expiries", "poll_timeouts", "fencings", "lease_expiries", "heartbeats", "rtt_q",
    "late_q", "failures", "stalls", "max_stall_ms", "failure_labels", "rtt_hist", "late_hist",
    "events_kept", "faults", "spans",
)  # fmt: skip
_UNUSED = {"events_kept", "faults", "spans"}  # read from Judged.events and .faults instead


def judge_local_files(spark: SparkSession, files: list[str], stage: Stage) -> Judged | None:
    """The judged rows of the local ``files`` (URIs), staged with ``stage(df, name)``; None
    when an undecided line turns out to be an event (the caller then reads the files on the
    Spark path)."""
    sc = spark.sparkContext
    parallelism = max(2, sc.defaultParallelism)
    parts, reducers = slices(files, parallelism)
    parts = parts or [[]]
    mapped = sc.parallelize(parts, len(parts)).mapPartitions(
        lambda it: read_slice(uri for part in it for uri in part)
    )
    reduced = mapped.partitionBy(reducers).mapPartitions(_judge_partition)
    wire = stage(spark.createDataFrame(reduced, WIRE_SCHEMA, verifySchema=False), "pyjudged")
    kind = F.col("kind")
    raw = wire.where(kind == "u").select(
        F.col("text").alias("value"),
        "file",
        # "Last in its file" rides in blk through the parse (set back to 0 below).
        F.col("last").cast("long").alias("blk"),
        "pos",
    )
    parsed = parse(raw)
    if parsed.where(F.col("line_reason").isNull()).limit(1).count():
        return None
    types = {f.name: f.dataType for f in JUDGED_SCHEMA.fields}
    members = wire.where(kind == "m").select(
        *[
            F.timestamp_micros(c).alias(c)
            if c in ("first_ts", "last_ts")
            else F.lit(None).cast(types[c]).alias(c)
            if c == "bad" or c in _UNUSED
            else F.col(c)
            for c in _JUDGED_COLUMNS
        ]
    )
    bad = stage(_bad_line_rows(parsed, JUDGED_SCHEMA), "pyjudged_bad")
    # The kept events, out of their columns once and staged.
    zipped = [f.name for f in _KEPT.fields if f.name not in _SHARED]
    kept = wire.where(kind == "m").select(
        F.posexplode(F.arrays_zip(*["k_" + c for c in zipped])).alias("at", "e"),
        *_SHARED,
        *["k_" + c for c in _SHARED],
    )
    events = stage(
        kept.select(
            *[
                F.timestamp_micros(F.col("e.k_ts")).alias("ts")
                if c == "ts"
                # Never null in an event: null in the array means "the member's".
                else F.coalesce(F.get("k_" + c, "at"), F.col(c)).alias(c)
                if c in _SHARED
                else F.col("e.k_" + c).alias(c)
                for c in EVENT_COLUMNS
            ],
            F.when(F.col("e.k_event").isin(*_HEARTBEATS), F.lit("heartbeat"))
            .otherwise(F.lit("other"))
            .alias("kind"),
        ),
        "pyjudged_events",
    )
    faults = wire.where(F.col("faults_json").isNotNull()).select(
        "member_uid", F.explode(F.from_json("faults_json", _FAULTS)).alias("f")
    )
    faults = faults.select(
        F.col("f.file").alias("file"),
        F.lit(0).cast("long").alias("blk"),
        F.col("f.pos").alias("pos"),
        F.col("f.reason").alias("reason"),
        "member_uid",
        F.col("f.seq").alias("seq"),
    )
    damaged = [
        (r["file"], r["pos"], r["line_reason"], r["text"])
        for r in wire.where(kind == "d").select("file", "pos", "line_reason", "text").collect()
    ]
    return Judged(members.unionByName(bad), events, faults, sorted(damaged), numbered=True)


def _judge_partition(items: Iterable[tuple[str, Any]]) -> Iterable[tuple[Any, ...]]:
    """One reduce task: its keys' records brought together, each key judged."""
    by_key: dict[str, list[Any]] = {}
    for key, value in items:
        by_key.setdefault(key, []).append(value)
    for item in by_key.items():
        yield from _judge_key(item)


def _bad_line_rows(parsed: DataFrame, schema: T.StructType) -> DataFrame:
    """Judged rows for the parsed lines that are not events."""
    malformed = F.col("line_reason") == "malformed"
    reason = F.when(malformed & ~F.col("json_ok") & (F.col("blk") == 1), F.lit("truncated"))
    bad = F.struct(
        "file",
        F.lit(0).cast("long").alias("blk"),
        "pos",
        reason.otherwise(F.col("line_reason")).alias("reason"),
        "json_ok",
        "text",
    )
    columns = [
        bad.alias("bad") if f.name == "bad" else F.lit(None).cast(f.dataType).alias(f.name)
        for f in schema.fields
    ]
    return parsed.where(F.col("line_reason").isNotNull()).select(*columns)
