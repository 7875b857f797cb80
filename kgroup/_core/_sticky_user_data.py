"""The Subscription user data of the ``sticky`` and ``cooperative-sticky`` assignors (spec §7.2).

Both are written in the classic encoding of the consumer protocol (big-endian; strings an
``int16`` length then UTF-8; arrays an ``int32`` count) and carry no version prefix::

    sticky              V1: [{topic string, partitions [int32]}], generation int32
                        V0: [{topic string, partitions [int32]}]
    cooperative-sticky      generation int32

``sticky`` puts the member's previous assignment and its generation in the user data because
under EAGER the Subscription's ``owned_partitions`` is empty at join time. A reader tries V1,
then V0 (generation -1), then treats the bytes as no previous assignment (generation -1).
Java's ``StickyAssignor`` sends null before the member's first assignment.

``cooperative-sticky`` only carries the generation (-1 before the first assignment); its owned
partitions travel in the Subscription itself. A reader prefers the Subscription's
``generation_id`` and uses -1 for missing or unparseable user data (kafka-python sends empty
user data).

A kgroup member that hands its partitions off before it leaves (``close(handoff=True)``,
deviations.md row 14) appends :data:`LEAVING_MARK` after the generation. Every reader takes
only the first four bytes: Java reads the user data only for a Subscription older than v2,
with a one-field schema that ignores trailing bytes; librdkafka and kafka-python never read
it. A kgroup leader reads the mark with :func:`cooperative_sticky_leaving`.

The writers sort topics and partitions, so equal inputs give equal bytes. The readers never
raise: a peer's malformed user data only costs it its claim on its previous partitions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kgroup._core._consumer_protocol import TopicPartition
from kgroup._errors import LocalProtocolError

__all__ = [
    "LEAVING_MARK",
    "NO_GENERATION",
    "cooperative_sticky_leaving",
    "decode_cooperative_sticky_user_data",
    "decode_sticky_user_data",
    "encode_cooperative_sticky_user_data",
    "encode_sticky_user_data",
]

NO_GENERATION = -1
"""The generation of a member that has had no assignment yet, or whose data says nothing."""

LEAVING_MARK = b"kgroup/leaving/1"
"""After the generation in ``cooperative-sticky`` user data: the member is leaving and asks a
kgroup leader to hand its partitions to the others (deviations.md row 14)."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _int32(value: int, what: str) -> bytes:
    try:
        return _INT32.pack(value)
    except struct.error:
        raise LocalProtocolError(f"{what} = {value!r} does not fit in an int32") from None


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """``sticky`` user data V1: the partitions grouped by topic, sorted, then the generation."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_int32(len(by_topic), "sticky user data topic count"))
    for topic in sorted(by_topic):
        name = topic.encode("utf-8")
        if len(name) > 0x7FFF:
            raise LocalProtocolError(f"sticky user data: topic name of {len(name)} bytes")
        out += _INT16.pack(len(name)) + name
        numbers = sorted(set(by_topic[topic]))
        out += _int32(len(numbers), "sticky user data partition count")
        for partition in numbers:
            out += _int32(partition, f"sticky user data partition of {topic!r}")
    out += _int32(generation, "sticky user data generation")
    return bytes(out)


class _Truncated(Exception):
    """The bytes end, or a count or length is impossible, before the layout does."""


def _read_partitions(data: bytes) -> tuple[tuple[TopicPartition, ...], int]:
    """The V0 part: (partitions, offset after them). Raises _Truncated or UnicodeDecodeError."""
    pos = 0

    def int32() -> int:
        nonlocal pos
        if pos + 4 > len(data):
            raise _Truncated
        (value,) = _INT32.unpack_from(data, pos)
        pos += 4
        return int(value)

    def count(item_size: int) -> int:
        n = int32()
        if n < 0 or n * item_size > len(data) - pos:  # checked before anything is allocated
            raise _Truncated
        return n

    partitions: list[TopicPartition] = []
    for _ in range(count(6)):  # int16 name length + int32 partition count
        if pos + 2 > len(data):
            raise _Truncated
        (length,) = _INT16.unpack_from(data, pos)
        pos += 2
        if length < 0 or pos + length > len(data):
            raise _Truncated
        topic = data[pos : pos + length].decode("utf-8")
        pos += length
        n = count(4)
        numbers = struct.unpack_from(f">{n}i", data, pos)
        pos += 4 * n
        partitions.extend(TopicPartition(topic, p) for p in numbers)
    return tuple(partitions), pos


def decode_sticky_user_data(data: bytes | None) -> tuple[tuple[TopicPartition, ...], int]:
    """(previous partitions, generation) from ``sticky`` user data: V1, else V0, else nothing.

    Never raises: null, empty or malformed data gives ``((), -1)``. Bytes after the last
    field are ignored.
    """
    if not isinstance(data, bytes | bytearray | memoryview) or not data:
        return (), NO_GENERATION
    raw = bytes(data)
    try:
        partitions, end = _read_partitions(raw)
    except (_Truncated, UnicodeDecodeError):
        return (), NO_GENERATION
    if end + 4 > len(raw):
        return partitions, NO_GENERATION  # V0: no generation
    (generation,) = _INT32.unpack_from(raw, end)
    return partitions, int(generation)


def encode_cooperative_sticky_user_data(generation: int, *, leaving: bool = False) -> bytes:
    """``cooperative-sticky`` user data: the bare ``int32`` generation, then
    :data:`LEAVING_MARK` when ``leaving``."""
    data = _int32(generation, "cooperative-sticky user data generation")
    return data + LEAVING_MARK if leaving else data


def decode_cooperative_sticky_user_data(data: bytes | None) -> int:
    """The generation in ``cooperative-sticky`` user data; -1 if missing or too short.
    Bytes after it (such as :data:`LEAVING_MARK`) are ignored."""
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) < _INT32.size:
        return NO_GENERATION
    (generation,) = _INT32.unpack_from(data, 0)
    return int(generation)


def cooperative_sticky_leaving(data: bytes | None) -> bool:
    """Whether ``cooperative-sticky`` user data carries :data:`LEAVING_MARK`: exactly the
    generation followed by the mark, nothing else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        return False
    raw = bytes(data)
    return len(raw) == _INT32.size + len(LEAVING_MARK) and raw[_INT32.size :] == LEAVING_MARK
