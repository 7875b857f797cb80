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

The writers sort topics and partitions, so equal inputs give equal bytes. The readers never
raise: a peer's malformed user data only costs it its claim on its previous partitions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kgroup._core._consumer_protocol import (
    TopicPartition,
    _pack_int32,
    _Reader,
    _write_topic_partitions,
)
from kgroup._errors import RemoteProtocolError

__all__ = [
    "NO_GENERATION",
    "decode_cooperative_sticky_user_data",
    "decode_sticky_user_data",
    "encode_cooperative_sticky_user_data",
    "encode_sticky_user_data",
]

NO_GENERATION = -1
"""The generation of a member that has had no assignment yet, or whose data says nothing."""

_INT32 = struct.Struct(">i")


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """``sticky`` user data V1: the partitions grouped by topic, sorted, then the generation."""
    out = bytearray()
    _write_topic_partitions(out, partitions, "sticky user data partitions")
    out += _pack_int32(generation, "sticky user data generation")
    return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> tuple[tuple[TopicPartition, ...], int]:
    """(previous partitions, generation) from ``sticky`` user data: V1, else V0, else nothing.

    Never raises: null, empty or malformed data gives ``((), -1)``.
    """
    if not data:
        return (), NO_GENERATION
    try:
        r = _Reader(data, "sticky user data")
        partitions = r.topic_partitions("partitions")
    except (RemoteProtocolError, TypeError):
        return (), NO_GENERATION
    try:
        generation = r.int32("generation")
    except RemoteProtocolError:
        return partitions, NO_GENERATION  # V0: no generation
    return partitions, generation


def encode_cooperative_sticky_user_data(generation: int) -> bytes:
    """``cooperative-sticky`` user data: the bare ``int32`` generation."""
    return _pack_int32(generation, "cooperative-sticky user data generation")


def decode_cooperative_sticky_user_data(data: bytes | None) -> int:
    """The generation in ``cooperative-sticky`` user data; -1 if missing or too short."""
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) < _INT32.size:
        return NO_GENERATION
    (generation,) = _INT32.unpack_from(data, 0)
    return int(generation)
