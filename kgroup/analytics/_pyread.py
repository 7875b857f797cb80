"""The fast reader: local log files read, split and parsed in Python tasks.

Spark's JSON reader costs about 7 µs of CPU a line (decompression, Jackson, the conversion
to Spark's rows); reading the file in a Python task and parsing each line with ``orjson``
costs about 1.5. This module is the reading half of that path, line by line
(:mod:`._pybatch` certifies many lines at once and falls back on :func:`certify`;
:mod:`._pyjudge` is the judging half); it runs inside Spark's Python workers, one task per
slice of files.

It must never disagree with :func:`._read.parse`. So it *certifies* a line only when the
line is an event on every reading: strict JSON (RFC 8259), one object whose known fields all
have exactly their schema's JSON type (a string for a string field, an integer in range for
an integer field, a number for a double; null allowed where the schema allows it), every
required field present, ``v`` 1, ``ts`` RFC 3339 UTC with microseconds, no field name
repeated. Such a line parses to the same values in Jackson, which is more lenient, never
less. Every other line is *undecided* and handed, with its file and line number, to
:func:`._read.parse`, which decides it as it decides every line of the Spark path (and when
it finds an event among them, the whole input is read on the Spark path instead; see
:func:`._pyjudge.judge_local_files`).

Lines are split where Hadoop's line reader splits them (LF, CR LF or CR); a ``.gz`` file is
decompressed here (every gzip member), and where it stops decompressing the lines before the
damage are read and the damage is reported (the rules of :func:`._read.damaged_files`).
"""

from __future__ import annotations

import datetime as dt
import json
import operator
import re
import zlib
from array import array
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import types as T

from ._names import SCHEMA_VERSION
from ._read import EVENT_COLUMNS, EVENT_SCHEMA, PARTITIONS_TYPE, REQUIRED_FIELDS

try:  # the fast parser (a dependency of the analytics extra); the standard one otherwise
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is installed with kgroup[analytics]
    _orjson = None  # type: ignore[assignment]

_loads: Callable[[bytes], Any] = json.loads if _orjson is None else _orjson.loads


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON."""
    if _orjson is not None:
        return _orjson.dumps(value)
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


__all__ = [
    "CONTEXT_COLUMNS",
    "Certified",
    "Chunk",
    "Damage",
    "certify",
    "dumps",
    "file_name",
    "read_lines",
    "ts_micros",
]

#: Damage in a compressed file: (first line lost, 1-based; ``truncated`` or
#: ``corrupt_file``; the incomplete line's text or None).
Damage = tuple[int, str, "str | None"]

_STR = 0
_INT = 1
_DOUBLE = 2
_PARTITIONS = 3

_KIND_OF_TYPE = {
    T.StringType(): _STR,
    T.LongType(): _INT,
    T.DoubleType(): _DOUBLE,
    PARTITIONS_TYPE: _PARTITIONS,
}
#: The JSON type each event column must have, from the Spark path's schema.
_KINDS = {f.name: _KIND_OF_TYPE[f.dataType] for f in EVENT_SCHEMA.fields if f.name in EVENT_COLUMNS}


_LONG_MAX = (1 << 63) - 1
_INT_MIN = -(1 << 31)
_INT_MAX = (1 << 31) - 1

_MINUTE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:", re.ASCII)
_EPOCH = dt.date(1970, 1, 1)
_minutes: dict[str, int | None] = {}
_MINUTES_LIMIT = 100_000


def ts_micros(ts: str) -> int | None:
    """``ts`` (``YYYY-MM-DDTHH:MM:SS.ffffffZ``, a real date and time of day) as
    microseconds since the epoch; None for anything else."""
    if len(ts) != 27 or ts[19] != "." or ts[26] != "Z" or not ts.isascii():
        return None
    minute = _minutes.get(ts[:17], -1)
    if minute == -1:
        minute = _minute(ts[:17])
        if len(_minutes) >= _MINUTES_LIMIT:
            _minutes.clear()
        _minutes[ts[:17]] = minute
    second, fraction = ts[17:19], ts[20:26]
    if minute is None or not second.isdigit() or not fraction.isdigit() or second > "59":
        return None
    return minute + int(second) * 1_000_000 + int(fraction)


def _minute(prefix: str) -> int | None:
    """``YYYY-MM-DDTHH:MM:`` as microseconds since the epoch, or None."""
    if _MINUTE.fullmatch(prefix) is None:
        return None
    try:
        day = dt.date(int(prefix[0:4]), int(prefix[5:7]), int(prefix[8:10]))
    except ValueError:
        return None
    h, m = int(prefix[11:13]), int(prefix[14:16])
    if h > 23 or m > 59:
        return None
    return ((day - _EPOCH).days * 1440 + h * 60 + m) * 60_000_000


def _partitions(value: Any) -> tuple[tuple[str, int], ...] | bool | None:
    """A partitions field as tuples; False when it is not exactly a list of
    ``{"topic": string, "partition": int32}`` objects (no other keys)."""
    if value is None:
        return None
    if type(value) is not list:
        return False
    out = []
    for item in value:
        if type(item) is not dict or len(item) != 2:
            return False
        topic = item.get("topic")
        partition = item.get("partition")
        if type(topic) is not str or type(partition) is not int:
            return False
        if not _INT_MIN <= partition <= _INT_MAX:
            return False
        out.append((topic, partition))
    return tuple(out)


#: The columns of a certified event that repeat from line to line (a heartbeat's differ
#: from the one before only in ``ts``, ``seq`` and its two timings), partitions fields as
#: a tuple of topics and a tuple of partitions each.
CONTEXT_COLUMNS = (
    "member_uid", "event", "group", "host", "pid", "client_id", "member_id", "instance_id",
    "generation", "state_before", "state_after", "assigned_topics", "assigned_partitions",
    "revoked_topics", "revoked_partitions", "lost_topics", "lost_partitions", "reason",
    "leader", "error_code", "error",
)  # fmt: skip
_PARTITION_FIELDS = ("assigned", "revoked", "lost")


class _Shape:
    """What certifying needs to know of one key order and value types: where each value
    is, and which values need a closer look."""

    __slots__ = ("at", "context", "doubles", "ints", "nested", "partitions", "quotes", "v")

    def __init__(self, names: tuple[str, ...], types: tuple[type, ...]) -> None:
        at = {name: i for i, name in enumerate(names)}
        n = len(names)  # values[n] is None; values[n + 1 ...] the partitions' tuples
        slots = {}
        for k, field in enumerate(_PARTITION_FIELDS):
            slots[field + "_topics"] = n + 1 + 2 * k
            slots[field + "_partitions"] = n + 2 + 2 * k
        self.context = operator.itemgetter(
            *[slots[c] if c in slots else at.get(c, n) for c in CONTEXT_COLUMNS]
        )
        self.at = (at["seq"], at["ts"], at.get("hb_rtt_ms", n), at.get("hb_late_ms", n))
        # The integers of this shape (never null in it), at least seq, pid and v.
        ints = [at[c] for c, k in _KINDS.items() if k == _INT and c in at and types[at[c]] is int]
        self.ints = operator.itemgetter(*ints, at["v"])
        self.v = at["v"]
        # The doubles written as integers in this shape.
        self.doubles = [
            at[c] for c, k in _KINDS.items() if k == _DOUBLE and c in at and types[at[c]] is int
        ]
        self.partitions = [
            (at[f], n + 1 + 2 * k) for k, f in enumerate(_PARTITION_FIELDS) if f in at
        ]
        self.nested = [i for i, t in enumerate(types) if names[i] not in _KINDS and t in _NESTED]
        # Every string token (a key, or a string value) brings two quotes.
        self.quotes = 2 * (n + sum(1 for t in types if t is str))


_NESTED = (dict, list)
_NONE = type(None)
_ALLOWED = {
    _STR: (str, _NONE),
    _INT: (int, _NONE),
    _DOUBLE: (float, int, _NONE),
    _PARTITIONS: (list, _NONE),
}
_shapes: dict[tuple[tuple[str, ...], tuple[type, ...]], _Shape | None] = {}
_SHAPES_LIMIT = 4096
_PAD = (None,) * 7


def _shape(names: tuple[str, ...], types: tuple[type, ...]) -> _Shape | None:
    """The shape of an object with these keys and value types; None when no object of it
    can be an event (a required field missing or null, a value of the wrong JSON type)."""
    kinds = dict(zip(names, types, strict=True))
    if kinds.get("v") is not int:
        return None
    for name in REQUIRED_FIELDS:
        if kinds.get(name, _NONE) is _NONE:
            return None
    for name, kind in _KINDS.items():
        if name in kinds and kinds[name] not in _ALLOWED[kind]:
            return None
    return _Shape(names, types)


def _strings(value: Any) -> int:
    """The string tokens (keys and string values) in ``value`` and everything inside it."""
    if isinstance(value, dict):
        return len(value) + sum(_strings(v) for v in value.values())
    if isinstance(value, list):
        return sum(_strings(v) for v in value)
    return 1 if isinstance(value, str) else 0


#: A certified event: ``(seq, ts, hb_rtt_ms, hb_late_ms, context)``; ``ts`` in microseconds
#: since the epoch (UTC), a missing timing NaN (JSON has no NaN), ``context`` the values of
#: :data:`CONTEXT_COLUMNS`.
Certified = tuple[int, int, float, float, tuple[Any, ...]]

_NAN = float("nan")


def certify(line: bytes) -> Certified | None:
    """The event on ``line`` when the line is certainly one (see the module docstring);
    None when it is undecided."""
    try:
        obj = _loads(line)
    except ValueError:
        return None
    if type(obj) is not dict:
        return None
    values = list(obj.values())
    key = (tuple(obj), tuple(map(type, values)))
    shape = _shapes.get(key, _MISSING)
    if shape is _MISSING:
        shape = _shape(*key)
        if len(_shapes) < _SHAPES_LIMIT:
            _shapes[key] = shape
    if shape is None:
        return None
    assert isinstance(shape, _Shape)
    if values[shape.v] != SCHEMA_VERSION or max(shape.ints(values)) > _LONG_MAX:
        return None  # (orjson reads no integer below -2**63)
    for i in shape.doubles:
        values[i] = float(values[i])
    # A repeated field name, or an escaped quote, brings more quotes than the object's
    # strings account for: such a line is undecided.
    quotes = shape.quotes
    values.extend(_PAD)
    for i, slot in shape.partitions:
        parts = _partitions(values[i])
        if parts is False:
            return None
        if parts is not None:
            quotes += 6 * len(parts)  # type: ignore[arg-type]
            values[slot] = tuple(t for t, _ in parts)  # type: ignore[union-attr]
            values[slot + 1] = tuple(p for _, p in parts)  # type: ignore[union-attr]
    for i in shape.nested:
        quotes += 2 * _strings(values[i])
    if line.count(b'"') != quotes:
        return None
    i_seq, i_ts, i_rtt, i_late = shape.at
    micros = ts_micros(values[i_ts])
    if micros is None:
        return None
    rtt, late = values[i_rtt], values[i_late]
    # JSON has no infinity, but a number too big for a double reads as one: undecided.
    if (rtt is not None and rtt - rtt != 0) or (late is not None and late - late != 0):
        return None
    return (
        values[i_seq],
        micros,
        _NAN if rtt is None else rtt,
        _NAN if late is None else late,
        shape.context(values),
    )


_MISSING = object()


def file_name(uri: str) -> str:
    """A file's name as Spark's ``_metadata.file_path`` gives it (``file:/path``)."""
    if uri.startswith("file:///"):
        return "file:" + uri[len("file://") :]
    return uri


_CHUNK = 1 << 20
_TAIL_LIMIT = 1 << 20


def _inflate(path: str) -> tuple[bytes, str | None]:
    """A gzip file's text (every member) up to any damage, and the damage's reason
    (``truncated``: the stream ends early; ``corrupt_file``: it does not decompress)."""
    parts: list[bytes] = []
    decoder = zlib.decompressobj(wbits=31)
    fed = False
    try:
        with open(path, "rb") as handle:
            while data := handle.read(_CHUNK):
                while data:
                    fed = True
                    parts.append(decoder.decompress(data))
                    data = b""
                    if decoder.eof:  # another gzip member may follow
                        data = decoder.unused_data
                        decoder = zlib.decompressobj(wbits=31)
                        fed = False
    except (OSError, zlib.error):
        return b"".join(parts), "corrupt_file"
    return b"".join(parts), ("truncated" if fed else None)


def read_lines(uri: str) -> tuple[list[bytes], Damage | None]:
    """The lines of the file ``uri`` (``file:`` URIs; ``.gz`` decompressed) as Hadoop's
    line reader splits them, and its damage (None when whole)."""
    path = unquote(urlparse(uri).path)
    if not uri.endswith(".gz"):
        with open(path, "rb") as handle:
            return handle.read().splitlines(), None
    text, reason = _inflate(path)
    if reason is None:
        return text.splitlines(), None
    # Only the complete lines before the damage are read; the rest is the damage.
    end = max(text.rfind(b"\n"), text.rfind(b"\r"))
    lines = text[: end + 1].splitlines() if end >= 0 else []
    tail = text[end + 1 :][-_TAIL_LIMIT:]
    shown = None
    if reason == "truncated" and tail:
        shown = tail.decode("utf-8", "replace")
    return lines, (len(lines) + 1, reason, shown)


#: One member's certified events in one file, column by column: the file's name, then
#: arrays of the lines' numbers, ``seq``, ``ts`` (microseconds), round trips and lateness
#: (NaN when missing) and context indexes, and the list of distinct contexts.
Chunk = tuple[str, "array[int]", "array[int]", "array[int]", "array[float]", "array[float]",
              "array[int]", list[tuple[Any, ...]]]  # fmt: skip
