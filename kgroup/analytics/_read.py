"""Reading event logs: raw lines in, valid events and bad records out.

A *source* is a DataFrame of raw lines with four columns: ``value`` (the line's text),
``file`` (where it came from: the file's URI as Spark names it, or ``kafka:TOPIC/PARTITION``),
``blk`` (the start of the file split the line was read in; 0 for Kafka) and ``pos`` (an
order-preserving position: Spark's ``monotonically_increasing_id`` for files, the offset for
Kafka). :func:`read_files` and :mod:`._kafka` make sources.

:func:`parse` parses each line against :data:`EVENT_SCHEMA` (an explicit schema: nothing
is inferred) and :func:`._judge.judge` judges the valid ones by member; a bad line gets a
``reason``, in this order:

``malformed``
    Not a JSON object, a required field missing or of the wrong type, or ``ts`` not RFC 3339
    UTC with microseconds.
``truncated``
    A line that is not JSON and is the last line of its file (a writer died mid-line).
    Decided when line numbers are attached (:func:`bad_records`).
``corrupt_file``
    Where a ``.jsonl.gz`` file stops decompressing (and ``truncated`` where its gzip stream
    ends early): the file is read up to there (``ignoreCorruptFiles``), and
    :func:`damaged_files` locates the damage (local files only).
``unknown_version``
    ``v`` is an integer other than 1.
``duplicate``
    The same ``(member_uid, seq)`` as an earlier line; the copy kept is the first by
    ``(file, line)``.
``out_of_order``
    Its ``ts`` is earlier than the ``ts`` of a line of the same member with a lower ``seq``
    (a host clock stepped back): interval arithmetic needs each member's time to be
    monotonic along ``seq``.

Ordering by ``seq`` (not by file position) makes the result independent of how the lines are
spread over files and of the order Spark reads them in. Line numbers are attached only to the
bad records: the rows of one file split are contiguous in one partition, so a line's number
is its position minus the split's first position, plus the lines of the file's earlier
splits.
"""

from __future__ import annotations

import os
import re
import string
import unicodedata
import zlib
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ._fs import is_local, local_path
from ._names import SCHEMA_VERSION

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "HEARTBEATS",
    "PARTITIONS_TYPE",
    "REQUIRED_FIELDS",
    "LogFiles",
    "bad_lines",
    "bad_records",
    "damaged_files",
    "empty_source",
    "file_uri",
    "local_log_files",
    "parse",
    "read_files",
]

#: A partitions field (assigned, revoked, lost).
PARTITIONS_TYPE = T.ArrayType(
    T.StructType(
        [T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType())]
    )
)

_CORRUPT = "_corrupt"

#: The fields of a schema v1 line that the pipeline reads (unknown fields are ignored).
EVENT_SCHEMA = T.StructType(
    [
        T.StructField("v", T.LongType()),
        T.StructField("ts", T.StringType()),
        T.StructField("seq", T.LongType()),
        T.StructField("member_uid", T.StringType()),
        T.StructField("event", T.StringType()),
        T.StructField("group", T.StringType()),
        T.StructField("host", T.StringType()),
        T.StructField("pid", T.LongType()),
        T.StructField("client_id", T.StringType()),
        T.StructField("member_id", T.StringType()),
        T.StructField("instance_id", T.StringType()),
        T.StructField("generation", T.LongType()),
        T.StructField("state_before", T.StringType()),
        T.StructField("state_after", T.StringType()),
        T.StructField("assigned", PARTITIONS_TYPE),
        T.StructField("revoked", PARTITIONS_TYPE),
        T.StructField("lost", PARTITIONS_TYPE),
        T.StructField("reason", T.StringType()),
        T.StructField("leader", T.StringType()),
        T.StructField("error_code", T.LongType()),
        T.StructField("error", T.StringType()),
        T.StructField("hb_rtt_ms", T.DoubleType()),
        T.StructField("hb_late_ms", T.DoubleType()),
        T.StructField(_CORRUPT, T.StringType()),
    ]
)

#: The heartbeat events (``kind`` ``heartbeat``).
HEARTBEATS = ("member.heartbeat_ok", "member.heartbeat_failed")

#: The fields a line must have (not null) to be an event.
REQUIRED_FIELDS = ("v", "ts", "seq", "member_uid", "event", "group", "host", "pid", "client_id")

#: The columns of a valid event, as the metric modules see them (``ts`` a timestamp).
EVENT_COLUMNS = tuple(f.name for f in EVENT_SCHEMA.fields if f.name not in ("v", _CORRUPT))

_LINE_END = re.compile(rb"\r\n|\n|\r")

_TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSX"
_TS_LENGTH = len("2026-11-26T07:01:02.123456Z")

SOURCE_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType()),
        T.StructField("file", T.StringType()),
        T.StructField("blk", T.LongType()),
        T.StructField("pos", T.LongType()),
    ]
)


# What java.net.URI leaves as it is in a path (Spark names files by such URIs): letters,
# digits, "_-!.~'()*", ",;:$&+=@", "/", and every non-ASCII character that is neither a
# control nor a space character.
_URI_KEPT = frozenset(string.ascii_letters + string.digits + "-_.!~*'()" + ",;:$&+=@/")


def _uri_char(ch: str) -> str:
    if ch in _URI_KEPT or (
        ord(ch) > 127 and unicodedata.category(ch) not in ("Cc", "Zs", "Zl", "Zp")
    ):
        return ch
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogateescape"))


def file_uri(path: str) -> str:
    """A local file's URI as Spark's ``inputFiles`` names it (``file:///...``)."""
    return "file://" + "".join(_uri_char(ch) for ch in os.path.abspath(path))


def _skipped(name: str) -> bool:
    """Spark's rule for names it does not list (hidden, or a copy being written)."""
    return (
        (name.startswith("_") and "=" not in name)
        or name.startswith(".")
        or name.endswith("._COPYING_")
    )


def local_log_files(paths: list[str]) -> list[str]:
    """The files :func:`read_files` reads under the local ``paths``, as URIs, listed here
    (faster than Spark's listing): recursively, ``*.jsonl`` and ``*.jsonl.gz``, names Spark
    skips left out (a path's own name too, when it is a file)."""
    found: list[str] = []
    for path in paths:
        local = local_path(path)
        if os.path.isfile(local):
            names = [(os.path.dirname(local), os.path.basename(local))]
        else:
            names = []
            for root, dirs, files in os.walk(local, followlinks=True):
                dirs[:] = sorted(d for d in dirs if not _skipped(d))
                names += [(root, f) for f in sorted(files)]
        for root, name in names:
            if not _skipped(name) and name.endswith((".jsonl", ".jsonl.gz")):
                found.append(file_uri(os.path.join(root, name)))
    return sorted(set(found))


class LogFiles:
    """The log files under ``paths`` as a source: listed in Python when they are local,
    read as a DataFrame of lines (:func:`read_files`) only when that is asked for."""

    def __init__(self, spark: SparkSession, paths: list[str]) -> None:
        self.spark = spark
        self.paths = list(paths)
        self._frame: DataFrame | None = None

    @property
    def local(self) -> bool:
        return all(is_local(p) for p in self.paths)

    def files(self) -> list[str]:
        """The files' URIs."""
        if self.local:
            return local_log_files(self.paths)
        return self.frame().inputFiles()

    def frame(self) -> DataFrame:
        """The lines, as :func:`read_files` reads them."""
        if self._frame is None:
            self._frame = read_files(self.spark, self.paths)
        return self._frame


def read_files(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Every ``*.jsonl`` and ``*.jsonl.gz`` file under ``paths`` (recursively; local paths or
    any URI Spark's Hadoop file systems understand) as a source of raw lines."""
    raw = (
        # A damaged gzip file is read up to the damage (see damaged_files), not fatal.
        spark.read.option("recursiveFileLookup", "true")
        .option("ignoreCorruptFiles", "true")
        .option("pathGlobFilter", "*.{jsonl,jsonl.gz}")
        .text(paths)
    )
    return raw.select(
        F.col("value"),
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_block_start").alias("blk"),
        F.monotonically_increasing_id().alias("pos"),
    )


#: A damaged compressed file: its URI (as Spark names it), the number of the first line
#: lost (1-based), the reason (``truncated`` or ``corrupt_file``) and the text of the
#: incomplete line at the damage (``truncated`` only; None when there is none).
DamagedFile = tuple[str, int, str, str | None]

_CHUNK = 1 << 20
_TAIL_LIMIT = 1 << 20


def damaged_files(files: list[str]) -> list[DamagedFile]:
    """The gzip files among ``files`` (URIs, as ``DataFrame.inputFiles`` gives them) that
    end before their end-of-stream marker (``truncated``) or do not decompress
    (``corrupt_file``): Spark reads such a file up to the damage (``ignoreCorruptFiles``),
    and this says where that was. Only files on this machine's file system are checked
    (one streaming decompression each, on the driver)."""
    found = []
    for uri in files:
        if not uri.endswith(".gz") or urlparse(uri).scheme not in ("", "file"):
            continue
        damage = _gzip_damage(unquote(urlparse(uri).path))
        if damage is not None:
            lines, reason, tail = damage
            name = "file:" + uri[len("file://") :] if uri.startswith("file:///") else uri
            found.append((name, lines + 1, reason, tail))
    return found


def _gzip_damage(path: str) -> tuple[int, str, str | None] | None:
    """None for a whole gzip file; else the complete lines before the damage (a line ends
    with LF, CR LF or CR, as Spark's text reader splits them), the reason and the
    incomplete line's text."""
    lines = 0
    tail = b""
    pending_cr = False
    decoder = zlib.decompressobj(wbits=31)
    fed = False  # the current gzip member has started
    try:
        with open(path, "rb") as handle:
            while data := handle.read(_CHUNK):
                while data:
                    fed = True
                    out = decoder.decompress(data)
                    data = b""
                    if decoder.eof:  # another gzip member may follow
                        data = decoder.unused_data
                        decoder = zlib.decompressobj(wbits=31)
                        fed = False
                    if pending_cr and out.startswith(b"\n"):
                        out = out[1:]
                    if out:
                        pending_cr = out.endswith(b"\r")
                    parts = _LINE_END.split(out)
                    if len(parts) > 1:
                        lines += len(parts) - 1
                        tail = parts[-1][-_TAIL_LIMIT:]
                    else:
                        tail = (tail + out)[-_TAIL_LIMIT:]
    except (OSError, zlib.error):
        return lines, "corrupt_file", None
    if not fed:
        return None
    return lines, "truncated", tail.decode("utf-8", "replace") if tail else None


def empty_source(spark: SparkSession) -> DataFrame:
    """A source with no lines (an input with no log files)."""
    return spark.createDataFrame([], SOURCE_SCHEMA)


def _parse_reason(p: Column, ts: Column) -> Column:
    """The reason a parsed line is not an event (null when it is one, as far as one line
    can tell). ``ts``: the line's ``ts`` parsed (null if it does not parse)."""
    missing = F.lit(False)
    for name in REQUIRED_FIELDS:
        missing = missing | p[name].isNull()
    # The pattern's fields are fixed-width: with the length and the "Z", a ts that parses
    # is exactly RFC 3339 UTC with microseconds (no regular expression per line).
    bad_ts = ts.isNull() | (F.length(p["ts"]) != _TS_LENGTH) | ~p["ts"].endswith("Z")
    return (
        F.when(p[_CORRUPT].isNotNull() & p["v"].isNull(), F.lit("malformed"))
        .when(p["v"].isNotNull() & (p["v"] != SCHEMA_VERSION), F.lit("unknown_version"))
        .when(p[_CORRUPT].isNotNull() | missing | bad_ts, F.lit("malformed"))
        .otherwise(F.lit(None).cast("string"))
    )


def parse(source: DataFrame) -> DataFrame:
    """Parse every line of ``source`` (no shuffle: one line at a time).

    The result has the event columns (:data:`EVENT_COLUMNS`, ``ts`` a UTC timestamp), the
    line's ``file``, ``blk`` and ``pos``, ``line_reason`` (why the line is not an event:
    ``malformed`` or ``unknown_version``; null when it is one), ``json_ok`` (the line was
    JSON), ``text`` (the raw line, kept only when it is not an event) and ``kind``
    (``heartbeat`` for the heartbeat events, nine in ten of a log, ``other`` for the rest:
    the staged lines are partitioned by it, so that the metrics that need no heartbeat
    skip them unread)."""
    parsed = source.select(
        "file",
        "blk",
        "pos",
        "value",
        # A generator over a one-element array: the parsed struct is computed once per line
        # and never inlined into a later filter (a filter pushed below a projection would
        # parse the line again for every field it reads).
        F.explode(
            F.array(
                F.from_json(
                    "value",
                    EVENT_SCHEMA,
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT},
                )
            )
        ).alias("p"),
    )
    p = F.col("p")
    with_ts = parsed.select("*", F.try_to_timestamp(p["ts"], F.lit(_TS_FORMAT)).alias("ts_parsed"))
    ts = F.col("ts_parsed")
    reason = F.when(p.isNull(), F.lit("malformed")).otherwise(_parse_reason(p, ts))
    columns = [p[c].alias(c) for c in EVENT_COLUMNS if c != "ts"]
    first = with_ts.select(
        "file",
        "blk",
        "pos",
        reason.alias("line_reason"),
        (p.isNotNull() & p[_CORRUPT].isNull()).alias("json_ok"),
        F.col("value"),
        *columns,
        ts.alias("ts"),
    )
    return first.select(
        "file",
        "blk",
        "pos",
        "line_reason",
        "json_ok",
        F.when(F.col("line_reason").isNotNull(), F.col("value")).alias("text"),
        *[c for c in EVENT_COLUMNS if c != "ts"],
        "ts",
        F.when(F.col("event").isin(*HEARTBEATS), F.lit("heartbeat"))
        .otherwise(F.lit("other"))
        .alias("kind"),
    )


def bad_lines(lines: DataFrame, faults: DataFrame) -> DataFrame:
    """Every bad line, from both checks (:func:`._judge.judged_lines` and
    :func:`._judge.judged_faults`): file, blk, pos, reason, json_ok, member_uid and seq
    (for duplicates and out-of-order events), text (for the lines that are not events)."""
    not_events = lines.select(
        "file",
        "blk",
        "pos",
        "reason",
        "json_ok",
        F.lit(None).cast("string").alias("member_uid"),
        F.lit(None).cast("long").alias("seq"),
        "text",
    )
    events = faults.select(
        "file",
        "blk",
        "pos",
        "reason",
        F.lit(True).alias("json_ok"),
        "member_uid",
        "seq",
        F.lit(None).cast("string").alias("text"),
    )
    return not_events.unionByName(events)


def bad_records(bad: DataFrame, blocks: DataFrame | None) -> DataFrame:
    """The ``bad_records`` table (file, line, reason, member_uid, seq, text) from
    :func:`bad_lines`, with line numbers (1-based).

    ``blocks`` None: ``pos`` is already the line's number (Kafka: the offset); otherwise
    ``blocks`` has, per file split (``file``, ``blk``), its first position ``first_pos``
    and its number of lines ``n`` (:func:`._judge.blocks`), and lines are counted per split."""
    if blocks is None:
        return bad.select("file", F.col("pos").alias("line"), "reason", "member_uid", "seq", "text")
    wf = Window.partitionBy("file").orderBy("blk")
    numbered = blocks.select(
        "file",
        "blk",
        "first_pos",
        F.coalesce(F.sum("n").over(wf.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0)).alias(
            "before"
        ),
        F.sum("n").over(Window.partitionBy("file")).alias("file_lines"),
    )
    joined = bad.join(F.broadcast(numbered), ["file", "blk"], "left")
    line = F.col("pos") - F.col("first_pos") + F.col("before") + 1
    truncated = (F.col("reason") == "malformed") & ~F.col("json_ok") & (line == F.col("file_lines"))
    return joined.select(
        "file",
        line.alias("line"),
        F.when(truncated, F.lit("truncated")).otherwise(F.col("reason")).alias("reason"),
        "member_uid",
        "seq",
        "text",
    )
