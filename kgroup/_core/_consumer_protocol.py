"""Codecs for the embedded "consumer" protocol: the Subscription and Assignment bytes.

A classic consumer group carries two opaque byte strings that only the members read: the
Subscription each member puts in its JoinGroup ``protocols[].metadata``, and the Assignment
the leader hands out through SyncGroup. This module turns those bytes into frozen values and
back, following spec §7.1 (wire layouts) of ``group-protocol-spec.md``. It is sans-I/O: no
sockets, no clock, no asyncio.

Layout (classic, non-flexible encoding; every structure starts with an ``int16`` version)::

    Subscription  v0: topics [string], user_data bytes?
                  v1: + owned_partitions [{topic string, partitions [int32]}]    (KIP-429)
                  v2: + generation_id int32                                       (KIP-792)
                  v3: + rack_id string?                                           (KIP-881)
    Assignment    v0..v3: assigned_partitions [{topic string, partitions [int32]}],
                          user_data bytes?

Strings are an ``int16`` length then UTF-8 (``-1`` = null), bytes an ``int32`` length
(``-1`` = null), arrays an ``int32`` count. There are no tagged fields.

Decoding rules (§7.1 "Versioning rules"):

* a version higher than :data:`MAX_VERSION` is parsed with the v3 layout and the bytes after
  the last known field are ignored (new versions only append fields);
* a negative version is an error;
* bytes after the last field of a known version are ignored too, as the Java reference does;
* ``rack_id == ""`` decodes as ``None``.

Every defect in peer bytes (truncation, a length running past the end, a negative count,
invalid UTF-8, a null where the layout forbids one) raises :class:`RemoteProtocolError`
naming what was being decoded and at which offset. No other exception escapes ``decode``, and
a length field is checked against the remaining bytes before anything is allocated, so
hostile input cannot make decoding slow or memory hungry.

Encoding sorts for determinism, as Java does: topics ascending; partitions grouped one entry
per topic, sorted by topic then partition. Fields that the requested version cannot carry are
dropped (they are "ignorable" in the Java schema). A value that cannot be encoded (a string
longer than 32767 UTF-8 bytes, a partition outside int32, ...) raises
:class:`LocalProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from kgroup._errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "MAX_VERSION",
    "PROTOCOL_TYPE",
    "Assignment",
    "Subscription",
    "TopicPartition",
]

PROTOCOL_TYPE = "consumer"
"""The JoinGroup ``protocol_type`` of consumer groups (§7)."""

MAX_VERSION = 3
"""The highest Subscription/Assignment version this module reads and writes (§7.1)."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT16_MAX = 0x7FFF
_INT32_MIN = -0x80000000
_INT32_MAX = 0x7FFFFFFF


class TopicPartition(NamedTuple):
    """One partition of one topic. ``str()`` gives Kafka's usual ``topic-partition`` form."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """What a member sends in JoinGroup: its topics, and what it owns (§7.1).

    ``topics`` are written sorted; ``owned_partitions`` are written grouped by topic and
    sorted, so a decoded value comes back in that order. ``generation_id`` is the generation
    in which ``owned_partitions`` were owned (-1 = none). ``rack_id`` is ``client.rack``.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None

    def encode(self, version: int = MAX_VERSION) -> bytes:
        """The Subscription in layout ``version`` (0..3); fields it cannot carry are dropped."""
        _check_encode_version(version, "Subscription")
        out = bytearray(_INT16.pack(version))
        topics = sorted(self.topics)
        out += pack_int32(len(topics), "Subscription.topics count")
        for i, topic in enumerate(topics):
            write_string(out, topic, f"Subscription.topics[{i}]", nullable=False)
        write_bytes(out, self.user_data, "Subscription.user_data")
        if version >= 1:
            _write_topic_partitions(out, self.owned_partitions, "Subscription.owned_partitions")
        if version >= 2:
            out += pack_int32(self.generation_id, "Subscription.generation_id")
        if version >= 3:
            write_string(out, self.rack_id, "Subscription.rack_id", nullable=True)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Subscription:
        """Parse Subscription bytes from a peer. Raises only :class:`RemoteProtocolError`."""
        r = Reader(data, "consumer protocol Subscription")
        version = r.version()
        topics = tuple(r.string_array("topics"))
        user_data = r.nullable_bytes("user_data")
        owned: tuple[TopicPartition, ...] = ()
        generation_id = -1
        rack_id: str | None = None
        if version >= 1:
            owned = r.topic_partitions("owned_partitions")
        if version >= 2:
            generation_id = r.int32("generation_id")
        if version >= 3:
            rack_id = r.string("rack_id", nullable=True) or None
        return cls(
            topics=topics,
            user_data=user_data,
            owned_partitions=owned,
            generation_id=generation_id,
            rack_id=rack_id,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """What the leader hands a member through SyncGroup (§7.1).

    ``partitions`` are written grouped by topic and sorted, so a decoded value comes back in
    that order. ``user_data`` is assignor-specific (null for the built-in assignors).
    """

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None

    def encode(self, version: int = MAX_VERSION) -> bytes:
        """The Assignment in layout ``version`` (0..3; all four share one layout)."""
        _check_encode_version(version, "Assignment")
        out = bytearray(_INT16.pack(version))
        _write_topic_partitions(out, self.partitions, "Assignment.partitions")
        write_bytes(out, self.user_data, "Assignment.user_data")
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Assignment:
        """Parse Assignment bytes from the leader. Raises only :class:`RemoteProtocolError`.

        Bytes shorter than the 2-byte version header are an error, never an empty
        assignment: the leader left this member out (spec §6.4 step 2, scenario B17).
        """
        assignment, _tail = cls.decode_with_tail(data)
        return assignment

    @classmethod
    def decode_with_tail(cls, data: bytes | bytearray | memoryview) -> tuple[Assignment, bytes]:
        """:meth:`decode`, and the bytes after the last field of the layout. Every reader
        of the consumer protocol (Java's, librdkafka's, Kafka's own when it converts a
        classic group) ignores such bytes, as it must to read newer versions."""
        r = Reader(data, "consumer protocol Assignment")
        if r.size < 2:
            raise RemoteProtocolError(
                f"malformed consumer protocol Assignment: {r.size} byte(s), shorter than the"
                " 2-byte version header (the leader sent this member no assignment)"
            )
        r.version()
        partitions = r.topic_partitions("assigned_partitions")
        user_data = r.nullable_bytes("user_data")
        return cls(partitions=partitions, user_data=user_data), r.rest()


# --- encoding helpers ----------------------------------------------------------------------


def _check_encode_version(version: int, what: str) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
        raise LocalProtocolError(
            f"cannot encode {what} version {version!r}: supported versions are 0..{MAX_VERSION}"
        )


def pack_int32(value: int, what: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LocalProtocolError(f"{what} must be an int, got {type(value).__name__}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise LocalProtocolError(f"{what} = {value} does not fit in an int32")
    return _INT32.pack(value)


def write_string(out: bytearray, value: str | None, what: str, *, nullable: bool) -> None:
    if value is None:
        if not nullable:
            raise LocalProtocolError(f"{what} must not be None")
        out += _INT16.pack(-1)
        return
    if not isinstance(value, str):
        raise LocalProtocolError(f"{what} must be a str, got {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"{what} is not encodable as UTF-8: {exc}") from exc
    if len(raw) > _INT16_MAX:
        raise LocalProtocolError(
            f"{what} is {len(raw)} UTF-8 bytes long; a protocol string holds at most {_INT16_MAX}"
        )
    out += _INT16.pack(len(raw))
    out += raw


def write_bytes(out: bytearray, value: bytes | None, what: str) -> None:
    if value is None:
        out += _INT32.pack(-1)
        return
    if not isinstance(value, bytes | bytearray | memoryview):
        raise LocalProtocolError(f"{what} must be bytes or None, got {type(value).__name__}")
    raw = bytes(value)
    out += pack_int32(len(raw), f"{what} length")
    out += raw


def _write_topic_partitions(out: bytearray, items: Iterable[TopicPartition], what: str) -> None:
    """``[{topic string, partitions [int32]}]``: one entry per topic, sorted (Java order)."""
    by_topic: dict[str, list[int]] = {}
    for item in items:
        try:
            topic, partition = item
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"{what}: {item!r} is not a (topic, partition) pair") from exc
        by_topic.setdefault(topic, []).append(partition)
    try:
        topics = sorted(by_topic)
    except TypeError as exc:
        raise LocalProtocolError(f"{what}: topics must all be str") from exc
    out += pack_int32(len(topics), f"{what} count")
    for topic in topics:
        write_string(out, topic, f"{what} topic", nullable=False)
        partitions = by_topic[topic]
        for p in partitions:
            pack_int32(p, f"{what} partition of {topic!r}")  # validates type and range
        partitions.sort()
        out += pack_int32(len(partitions), f"{what} partition count of {topic!r}")
        out += struct.pack(f">{len(partitions)}i", *partitions)


# --- decoding ------------------------------------------------------------------------------


class Reader:
    """A cursor over peer bytes. Every failure is a RemoteProtocolError naming field + offset."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"decoding {what} needs bytes, got {type(data).__name__}")
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    @property
    def size(self) -> int:
        return len(self._data)

    def rest(self) -> bytes:
        """The bytes not read yet."""
        return self._data[self._pos :]

    def _fail(self, field: str, problem: str, offset: int | None = None) -> RemoteProtocolError:
        at = self._pos if offset is None else offset
        return RemoteProtocolError(
            f"malformed {self._what}: {problem} while decoding {field}"
            f" at offset {at} (of {len(self._data)} bytes)"
        )

    def _need(self, n: int, field: str) -> None:
        remaining = len(self._data) - self._pos
        if n > remaining:
            raise self._fail(field, f"truncated: need {n} byte(s), {remaining} remaining")

    def version(self) -> int:
        self._need(2, "version")
        (version,) = _INT16.unpack_from(self._data, self._pos)
        if version < 0:
            raise self._fail("version", f"unsupported negative version {version}")
        self._pos += 2
        return int(version)

    def int8(self, field: str) -> int:
        self._need(1, field)
        value = self._data[self._pos]
        self._pos += 1
        return value - 256 if value > 127 else value

    def int32(self, field: str) -> int:
        self._need(4, field)
        (value,) = _INT32.unpack_from(self._data, self._pos)
        self._pos += 4
        return int(value)

    def _count(self, field: str, min_item_size: int) -> int:
        start = self._pos
        count = self.int32(f"{field} count")
        if count < 0:
            # Arrays in this protocol are not nullable: -1 is as wrong as any negative count.
            raise self._fail(field, f"invalid array count {count}", start)
        remaining = len(self._data) - self._pos
        if count * min_item_size > remaining:
            raise self._fail(
                field,
                f"array count {count} needs at least {count * min_item_size} byte(s),"
                f" {remaining} remaining",
                start,
            )
        return count

    def string(self, field: str, *, nullable: bool) -> str | None:
        start = self._pos
        self._need(2, f"{field} length")
        (length,) = _INT16.unpack_from(self._data, self._pos)
        self._pos += 2
        if length < 0:
            if length == -1 and nullable:
                return None
            raise self._fail(field, f"invalid string length {length}", start)
        self._need(length, field)
        raw = self._data[self._pos : self._pos + length]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(field, f"invalid UTF-8 ({exc.reason})", start) from None
        self._pos += length
        return text

    def _required_string(self, field: str) -> str:
        text = self.string(field, nullable=False)
        assert text is not None  # nullable=False never returns None
        return text

    def nullable_bytes(self, field: str) -> bytes | None:
        start = self._pos
        length = self.int32(f"{field} length")
        if length == -1:
            return None
        if length < 0:
            raise self._fail(field, f"invalid bytes length {length}", start)
        self._need(length, field)
        value = self._data[self._pos : self._pos + length]
        self._pos += length
        return value

    def string_array(self, field: str) -> list[str]:
        count = self._count(field, 2)
        return [self._required_string(f"{field}[{i}]") for i in range(count)]

    def topic_partitions(self, field: str) -> tuple[TopicPartition, ...]:
        result: list[TopicPartition] = []
        count = self._count(field, 6)  # int16 topic length + int32 partition count
        for i in range(count):
            topic = self._required_string(f"{field}[{i}].topic")
            n = self._count(f"{field}[{i}].partitions", 4)
            partitions = struct.unpack_from(f">{n}i", self._data, self._pos)
            self._pos += 4 * n
            result.extend(TopicPartition(topic, p) for p in partitions)
        return tuple(result)
