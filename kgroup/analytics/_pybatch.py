"""The fast reader's batches: lines certified many at a time, and files read into chunks.

:func:`._pyread.certify` decides one line at a time and costs about 5 µs of CPU a line,
mostly in Python's handling of each parsed object. This module certifies a batch of lines
at once with ``msgspec``, which parses each line straight into a typed record (its C code
checks every JSON type, integer range and required field the schema asks for) and lets
every later step run over whole columns: about 3 µs a line in all.

A batch is certified only when every line in it is certain; otherwise each of its lines
goes to :func:`._pyread.certify`, so the two ways can never disagree on what they certify
(a test runs both on every line of generated logs and of the fuzz). A line is certain here
when:

- ``msgspec`` reads it as :class:`_Line`: strict JSON (RFC 8259, UTF-8), every required
  field present and not null, every field of its exact JSON type (a string, an integer in
  range, a number; a partitions list of ``{"topic", "partition"}`` objects), ``v`` 1;
- it has no backslash (so every ``"`` in it delimits a string token), and the batch has as
  many ``"`` as the records ``msgspec`` read have string tokens (keys and string values).
  A line can only have more (each field read was written at least once), so equal counts
  mean that no line repeats a field name or has a field the schema does not know;
- ``ts`` is ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, a real date and time of day.

Such a line is read by Jackson as the same event: the same fields, each written once, of
types Jackson reads exactly as ``msgspec`` does.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Annotated, Any, Literal

from ._pyread import CONTEXT_COLUMNS, Certified, certify, file_name, read_lines, ts_micros

try:  # the batch certifier (a dependency of the analytics extra); line by line otherwise
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - msgspec is installed with kgroup[analytics]
    _msgspec = None  # type: ignore[assignment]

__all__ = ["BATCH", "certify_lines", "read_slice"]

#: Lines certified together (a few hundred keep the records in the CPU's caches).
BATCH = 256

_NAN = float("nan")
_QUOTE = b'"'
_BACKSLASH = b"\\"

#: The partitions fields in a context (each as a tuple of topics and one of partitions).
_PARTITION_FIELDS = ("assigned", "revoked", "lost")
#: The context's columns as :class:`_Line` holds them (each partitions field as one).
_RAW_COLUMNS = tuple(c for c in CONTEXT_COLUMNS if not c.endswith(("_topics", "_partitions")))
_RAW_COLUMNS += _PARTITION_FIELDS

if _msgspec is not None:
    from msgspec import UNSET, Meta, Struct, UnsetType

    _Long = Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]

    class _Partition(Struct, frozen=True, gc=False):
        topic: str
        partition: Annotated[int, Meta(ge=-(1 << 31), le=(1 << 31) - 1)]

    _Str = str | UnsetType | None
    _OptLong = _Long | UnsetType | None
    _Double = float | UnsetType | None
    _Partitions = tuple[_Partition, ...] | UnsetType | None

    class _Line(Struct, gc=False):
        """An event line as the Spark path's schema reads it, and the fields kgroup's
        writer adds that the tables do not read (``protocol_type``, ``owned``,
        ``hb_sent``, ``lease_deadline``, ``dropped``, ``extra``): a line with any other
        field is decided by :func:`._pyread.certify`. Absent fields are ``UNSET``."""

        v: Literal[1]
        ts: str
        seq: _Long
        member_uid: str
        event: str
        group: str
        host: str
        pid: _Long
        client_id: str
        member_id: _Str = UNSET
        instance_id: _Str = UNSET
        protocol_type: _Str = UNSET
        generation: _OptLong = UNSET
        state_before: _Str = UNSET
        state_after: _Str = UNSET
        assigned: _Partitions = UNSET
        revoked: _Partitions = UNSET
        lost: _Partitions = UNSET
        owned: _Partitions = UNSET
        reason: _Str = UNSET
        leader: _Str = UNSET
        error_code: _OptLong = UNSET
        error: _Str = UNSET
        hb_sent: _Str = UNSET
        hb_rtt_ms: _Double = UNSET
        hb_late_ms: _Double = UNSET
        lease_deadline: _Str = UNSET
        dropped: _OptLong = UNSET
        extra: dict[str, Any] | UnsetType | None = UNSET

    _decode = _msgspec.json.Decoder(_Line).decode
    _encode = _msgspec.json.Encoder().encode
    _NOT_CERTAIN: tuple[type[Exception], ...] = (_msgspec.DecodeError, UnicodeDecodeError)
    _UNSET: Any = UNSET
else:  # pragma: no cover
    _UNSET = object()

_HEAD = attrgetter("seq", "ts", "hb_rtt_ms", "hb_late_ms")
#: A record's raw context: :data:`_RAW_COLUMNS`, ``UNSET`` where absent.
_RAW = attrgetter(*_RAW_COLUMNS)
_SECOND = itemgetter(slice(0, 20))
_FRACTION = itemgetter(slice(20, 26))
_ZONE = itemgetter(26)
_UID = itemgetter(0)
_seconds: dict[str, int] = {}
_SECONDS_LIMIT = 20_000
_contexts: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_CONTEXTS_LIMIT = 10_000

#: Certified columns of a batch: ``seq``, ``ts`` (microseconds), round trips and lateness
#: (NaN when missing), and contexts (:data:`._pyread.CONTEXT_COLUMNS`).
Columns = tuple[Sequence[int], Sequence[int], Sequence[float], Sequence[float],
                list[tuple[Any, ...]]]  # fmt: skip


#: Where each context column is in :func:`_make_context`'s values: the plain columns
#: first, then each partitions field's topics and partitions.
_PLAIN = len(_RAW_COLUMNS) - len(_PARTITION_FIELDS)
_ARRANGE = itemgetter(
    *[
        _RAW_COLUMNS.index(c)
        if c in _RAW_COLUMNS[:_PLAIN]
        else _PLAIN + 2 * _PARTITION_FIELDS.index(c.rpartition("_")[0]) + c.endswith("_partitions")
        for c in CONTEXT_COLUMNS
    ]
)


def _make_context(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    values = [None if value is _UNSET else value for value in raw[:_PLAIN]]
    for items in raw[_PLAIN:]:
        if items is None or items is _UNSET:
            values += (None, None)
        else:
            values += (tuple(p.topic for p in items), tuple(p.partition for p in items))
    return _ARRANGE(values)  # type: ignore[no-any-return]


def _timestamps(ts: Sequence[str]) -> list[int] | None:
    """``ts`` as microseconds since the epoch, or None when any is not a timestamp
    :func:`._pyread.ts_micros` reads."""
    if set(map(len, ts)) != {27} or set(map(_ZONE, ts)) != {"Z"}:
        return None
    seconds = list(map(_SECOND, ts))
    micros = list(map(_seconds.get, seconds))
    if None in micros:
        if len(_seconds) >= _SECONDS_LIMIT:
            _seconds.clear()
        for second in dict.fromkeys(seconds):
            if second not in _seconds:
                at = ts_micros(second + "000000Z")
                if at is None:
                    return None
                _seconds[second] = at
        micros = list(map(_seconds.__getitem__, seconds))
    fractions = list(map(_FRACTION, ts))
    digits = "".join(fractions)
    if not digits.isascii() or not digits.isdigit():
        return None
    return list(map(operator.add, micros, map(int, fractions)))


def _timings(values: tuple[Any, ...]) -> Sequence[float]:
    if _UNSET in values or None in values:
        return [_NAN if v is None or v is _UNSET else v for v in values]
    return values


def _certain(lines: list[bytes]) -> Columns | None:
    """The batch's columns when every line in it is certain (see the module docstring),
    with raw contexts (:data:`_RAW_COLUMNS`; :func:`_context` makes them contexts); None
    otherwise."""
    if _msgspec is None:  # pragma: no cover
        return None
    try:
        records = list(map(_decode, lines))
    except _NOT_CERTAIN:
        return None
    text = b"".join(lines)
    if _BACKSLASH in text or text.count(_QUOTE) != _encode(records).count(_QUOTE):
        return None
    seqs, ts, rtts, lates = zip(*map(_HEAD, records), strict=True)
    micros = _timestamps(ts)
    if micros is None:
        return None
    return seqs, micros, _timings(rtts), _timings(lates), list(map(_RAW, records))


def _context(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    """A raw context (:data:`_RAW_COLUMNS`, ``UNSET`` where absent) as a context."""
    context = _contexts.get(raw)
    if context is None:
        if len(_contexts) >= _CONTEXTS_LIMIT:
            _contexts.clear()
        context = _contexts[raw] = _make_context(raw)
    return context


def certify_lines(lines: list[bytes]) -> list[Certified | None]:
    """Each line's event when it is certainly one, else None: what
    :func:`._pyread.certify` gives for each, batch by batch."""
    out: list[Certified | None] = []
    for start in range(0, len(lines), BATCH):
        batch = lines[start : start + BATCH]
        columns = _certain(batch)
        if columns is None:
            out += map(certify, batch)
        else:
            seqs, ts, rtts, lates, raws = columns
            out += zip(seqs, ts, rtts, lates, map(_context, raws), strict=True)
    return out


class _Member:
    """One member's certified events in one file, column by column (a
    :data:`._pyread.Chunk` in the making)."""

    __slots__ = ("at", "contexts", "ctx", "index", "late", "lines", "rtt", "seqs", "ts")

    def __init__(self) -> None:
        self.lines = array("q")
        self.seqs = array("q")
        self.ts = array("q")
        self.rtt = array("d")
        self.late = array("d")
        self.ctx = array("q")
        self.contexts: list[tuple[Any, ...]] = []
        self.at: dict[tuple[Any, ...], int] = {}  # context -> its index
        # Raw contexts and contexts -> the context's index (a raw context is never equal
        # to a context: they differ in length).
        self.index: dict[tuple[Any, ...], int] = {}

    def add(self, numbers: Iterable[int], columns: Columns) -> None:
        """Append certified columns (contexts raw or not)."""
        seqs, ts, rtts, lates, keys = columns
        index = self.index
        ids = list(map(index.get, keys))
        if None in ids:
            for i in [i for i, at in enumerate(ids) if at is None]:
                key = keys[i]
                at = index.get(key)
                if at is None:
                    context = _context(key) if len(key) == len(_RAW_COLUMNS) else key
                    at = self.at.get(context)
                    if at is None:
                        at = self.at[context] = len(self.contexts)
                        self.contexts.append(context)
                    index[key] = at
                ids[i] = at
        self.lines.extend(numbers)
        self.seqs.extend(seqs)
        self.ts.extend(ts)
        self.rtt.extend(rtts)
        self.late.extend(lates)
        self.ctx.extend(ids)  # type: ignore[arg-type]


def _select(columns: Columns, chosen: list[bool]) -> Columns:
    seqs, ts, rtts, lates, contexts = columns
    return (
        list(compress(seqs, chosen)),
        list(compress(ts, chosen)),
        list(compress(rtts, chosen)),
        list(compress(lates, chosen)),
        list(compress(contexts, chosen)),
    )


def _add(members: dict[str, _Member], numbers: Sequence[int], columns: Columns) -> None:
    """Append certified columns (lines ``numbers``) to their members' columns."""
    uids = list(map(_UID, columns[4]))
    for uid in dict.fromkeys(uids):
        member = members.get(uid)
        if member is None:
            member = members[uid] = _Member()
        if len(uids) == uids.count(uid):
            member.add(numbers, columns)
        else:
            chosen = list(map(operator.eq, uids, repeat(uid)))
            member.add(compress(numbers, chosen), _select(columns, chosen))


def read_slice(uris: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """Read the files ``uris`` (one task's slice), yielding keyed records for the judge:

    - ``("m" + member_uid, chunk)``: a member's certified events in one file
      (:data:`._pyread.Chunk`);
    - ``("u" + file, [(line, text, last), ...])``: the file's undecided lines;
    - ``("d" + file, (line, reason, text))``: the file's damage.
    """
    for uri in uris:
        name = file_name(uri)
        lines, damage = read_lines(uri)
        members: dict[str, _Member] = {}
        undecided: list[tuple[int, str, bool]] = []
        last = len(lines)
        for start in range(0, last, BATCH):
            batch = lines[start : start + BATCH]
            numbers = range(start + 1, start + 1 + len(batch))
            columns = _certain(batch)
            if columns is not None:
                _add(members, numbers, columns)
                continue
            events = list(map(certify, batch))
            for number, line, event in zip(numbers, batch, events, strict=True):
                if event is None:
                    undecided.append((number, line.decode("utf-8", "replace"), number == last))
            certain = [e is not None for e in events]
            if any(certain):
                kept = list(compress(events, certain))
                _add(
                    members,
                    list(compress(numbers, certain)),
                    tuple(map(list, zip(*kept, strict=True))),  # type: ignore[arg-type]
                )
        for uid, m in members.items():
            yield "m" + uid, (name, m.lines, m.seqs, m.ts, m.rtt, m.late, m.ctx, m.contexts)
        if undecided:
            yield "u" + name, undecided
        if damage is not None:
            yield "d" + name, damage
