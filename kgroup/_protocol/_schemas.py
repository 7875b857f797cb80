"""Wire structs for the five classic group APIs: one aiokafka struct class per version.

aiokafka 0.14 stops at FindCoordinator v1, JoinGroup v5, SyncGroup v3, Heartbeat v1 and
LeaveGroup v1, and has no flexible (KIP-482) version of any of them. kgroup therefore defines
every version it speaks itself, from Kafka's JSON message schemas
(``clients/src/main/resources/common/message/<Name>{Request,Response}.json``), as subclasses
of aiokafka's ``RequestStruct`` and ``Response`` so that ``AIOKafkaConnection.send`` can
frame, correlate and decode them like its own.

How the schemas are written
    One function per API and direction takes a version and returns the aiokafka ``Schema``
    for it: the fields in wire order, each guarded by the version range the JSON file gives
    it (``_since(v, 5, ...)`` is ``"versions": "5+"``, ``_until(v, 3, ...)`` is
    ``"versions": "0-3"``, ``_between(v, 1, 3, ...)`` is ``"versions": "1-3"``). Field names
    are the JSON names in snake_case.

Flexible versions (KIP-482)
    Strings, bytes and arrays become compact (an unsigned varint holding length + 1, where 0
    means null), and every struct, each array element included, ends with a tagged-field
    section. kgroup always sends an empty one: aiokafka's ``TaggedFields.encode`` omits the
    size varint, so anything but ``{}`` would corrupt the request. Received tagged fields are
    decoded correctly and ignored (none is defined for these APIs).

Decoding peer bytes
    Responses are decoded by kgroup's own strict primitive types (subclasses of aiokafka's),
    not aiokafka's lenient ones, because aiokafka reads any negative length as null (an
    array length of -2 became an empty array, a bytes length of -2 an empty assignment),
    never checks that a tagged field holds the bytes its size announces, and reports a short
    buffer as a bare ``struct.error``. Here a length below -1 is an error, a length or count
    is checked against the bytes left before anything is read or allocated, a varint is at
    most 5 bytes and 32 bits, and every error names the field path it happened in (for
    example ``members[1].metadata: truncated: a 12-byte bytes value needs 12 byte(s), 3
    left``). Encoding is aiokafka's, unchanged.

Failures
    A request struct that cannot be encoded raises ``LocalProtocolError`` (kgroup passed a
    value the schema cannot carry). A response that cannot be decoded, or that leaves bytes
    over, raises ``RemoteProtocolError`` naming the API, the version and the field; the
    connection layer (``kgroup._runtime._connection``) then fails the request with it and
    closes the connection.
"""

from __future__ import annotations

import io
import struct
import types
from collections.abc import Callable
from io import BytesIO
from typing import Any, Final, NamedTuple, cast

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import (
    Array,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Schema,
    String,
    TaggedFields,
)
from aiokafka.protocol.types import Boolean as _AiokafkaBoolean
from aiokafka.protocol.types import Int8 as _AiokafkaInt8
from aiokafka.protocol.types import Int16 as _AiokafkaInt16
from aiokafka.protocol.types import Int32 as _AiokafkaInt32
from aiokafka.protocol.types import Int64 as _AiokafkaInt64

from kgroup._errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "API_NAMES",
    "FLEXIBLE_FROM",
    "REQUEST_STRUCTS",
    "SUPPORTED_VERSIONS",
    "api_label",
    "parse_response_header",
]

#: The group APIs kgroup speaks, by API key.
API_NAMES: Final[dict[int, str]] = {
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
}

#: The versions kgroup implements, per API key, inclusive (spec section 4.8).
#: FindCoordinator v0 (no key type) and JoinGroup v0-v1 (no rebalance timeout, no throttle
#: time) are left out: Kafka 4.0 removed them (KIP-896) and every broker since 2.0 has more.
#: FindCoordinator v5 and v6 have the v4 layout: they only add error codes and key types that
#: a group lookup never meets, so the newest broker gets the newest version.
#: OffsetCommit starts at v2 and OffsetFetch at v1 (spec §4.8); both stop before the KIP-848
#: versions (OffsetCommit v9, OffsetFetch v9), which carry a member epoch kgroup has no use
#: for under the classic protocol.
SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    8: (2, 8),
    9: (1, 8),
    10: (1, 6),
    11: (2, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 5),
    16: (0, 4),
}

#: The first flexible (KIP-482) version of each API.
FLEXIBLE_FROM: Final[dict[int, int]] = {
    8: 8,
    9: 6,
    10: 3,
    11: 6,
    12: 4,
    13: 4,
    14: 4,
    15: 5,
    16: 3,
}

_Field = tuple[str, Any]


def api_label(api_key: int, version: int) -> str:
    """``"JoinGroup v9"``: how errors name a request or response."""
    return f"{API_NAMES.get(api_key, f'API {api_key}')} v{version}"


# --- Strict decoding of peer bytes -------------------------------------------------------


class _DecodeError(ValueError):
    """A response field that cannot be decoded. ``path`` is where, outermost first."""

    def __init__(self, problem: str, path: tuple[str, ...] = ()) -> None:
        self.problem = problem
        self.path = path
        super().__init__(self._text())

    def within(self, part: str) -> _DecodeError:
        """The same error seen from the enclosing field (``part``: a name or ``[i]``)."""
        return _DecodeError(self.problem, (part, *self.path))

    def _text(self) -> str:
        where = ""
        for part in self.path:
            where += part if part.startswith("[") or not where else f".{part}"
        return f"{where}: {self.problem}" if where else self.problem


def _remaining(data: BytesIO) -> int:
    position = data.tell()
    end = data.seek(0, io.SEEK_END)
    data.seek(position)
    return end - position


def _read_exactly(data: BytesIO, size: int, what: str) -> bytes:
    """``size`` bytes, or a _DecodeError: ``BytesIO.read`` never reads (nor allocates) more
    than what is left, so a huge ``size`` costs nothing."""
    raw = data.read(size)
    if len(raw) != size:
        raise _DecodeError(f"truncated: {what} needs {size} byte(s), {len(raw)} left")
    return raw


def _unsigned_varint(data: BytesIO) -> int:
    """An unsigned varint of at most 5 bytes holding at most 32 bits (KIP-482)."""
    value = 0
    for shift in range(0, 35, 7):
        raw = data.read(1)
        if not raw:
            raise _DecodeError("truncated: the buffer ends inside a varint")
        value |= (raw[0] & 0x7F) << shift
        if not raw[0] & 0x80:
            if value > 0xFFFFFFFF:
                raise _DecodeError(f"varint {value} does not fit in 32 bits")
            return value
    raise _DecodeError("varint longer than 5 bytes")


def _fixed(base: type[Any], size: int, what: str) -> type[Any]:
    """``base`` (an aiokafka fixed-width type) whose decode checks the bytes left first."""
    unpack = base._unpack

    def decode(cls: type[Any], data: BytesIO) -> Any:
        (value,) = unpack(_read_exactly(data, size, what))
        return value

    return type(f"Strict{base.__name__}", (base,), {"decode": classmethod(decode)})


# The fixed-width field types of every schema below.
Int8: Final = _fixed(_AiokafkaInt8, 1, "an int8")
Int16: Final = _fixed(_AiokafkaInt16, 2, "an int16")
Int32: Final = _fixed(_AiokafkaInt32, 4, "an int32")
Int64: Final = _fixed(_AiokafkaInt64, 8, "an int64")
Boolean: Final = _fixed(_AiokafkaBoolean, 1, "a boolean")


def _classic_length(data: BytesIO, width: type[Any], kind: str) -> int | None:
    """A classic length prefix: -1 is null, any other negative value an error."""
    length = int(width.decode(data))
    if length == -1:
        return None
    if length < 0:
        raise _DecodeError(f"invalid {kind} length {length}")
    return length


def _compact_length(data: BytesIO) -> int | None:
    """A compact length prefix: varint ``length + 1``, 0 being null."""
    encoded = _unsigned_varint(data)
    return None if encoded == 0 else encoded - 1


def _text(data: BytesIO, length: int | None, encoding: str) -> str | None:
    if length is None:
        return None
    raw = _read_exactly(data, length, f"a {length}-byte string")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise _DecodeError(f"invalid {encoding} in a string ({exc.reason})") from None


def _blob(data: BytesIO, length: int | None) -> bytes | None:
    return None if length is None else _read_exactly(data, length, f"a {length}-byte bytes value")


class _StrictString(String):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> str | None:
        return _text(data, _classic_length(data, Int16, "string"), self.encoding)


class _StrictCompactString(CompactString):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> str | None:
        return _text(data, _compact_length(data), self.encoding)


class _StrictBytes(Bytes):  # type: ignore[misc]  # aiokafka is untyped
    @classmethod
    def decode(cls, data: BytesIO) -> bytes | None:
        return _blob(data, _classic_length(data, Int32, "bytes"))


class _StrictCompactBytes(CompactBytes):  # type: ignore[misc]  # aiokafka is untyped
    @classmethod
    def decode(cls, data: BytesIO) -> bytes | None:
        return _blob(data, _compact_length(data))


def _elements(array_of: Any, data: BytesIO, length: int | None) -> list[Any] | None:
    if length is None:
        return None
    left = _remaining(data)
    if length > left:  # every element of every kgroup array takes at least one byte
        raise _DecodeError(f"array length {length} is more than the {left} byte(s) left")
    items: list[Any] = []
    for index in range(length):
        try:
            items.append(array_of.decode(data))
        except _DecodeError as exc:
            raise exc.within(f"[{index}]") from None
    return items


class _StrictArray(Array):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> list[Any] | None:
        return _elements(self.array_of, data, _classic_length(data, Int32, "array"))


class _StrictCompactArray(CompactArray):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> list[Any] | None:
        return _elements(self.array_of, data, _compact_length(data))


class _StrictTaggedFields(TaggedFields):  # type: ignore[misc]  # aiokafka is untyped
    """Decoding checks that tags ascend and that each field holds the bytes it announces;
    encoding stays aiokafka's (kgroup only ever sends ``{}``)."""

    @classmethod
    def decode(cls, data: BytesIO) -> dict[int, bytes]:
        count = _unsigned_varint(data)
        left = _remaining(data)
        if count > left:  # a tagged field takes at least two bytes
            raise _DecodeError(f"{count} tagged fields announced, {left} byte(s) left")
        fields: dict[int, bytes] = {}
        previous = -1
        for _ in range(count):
            tag = _unsigned_varint(data)
            if tag <= previous:
                raise _DecodeError(f"tagged field {tag} out of order (after tag {previous})")
            size = _unsigned_varint(data)
            fields[tag] = _read_exactly(data, size, f"tagged field {tag}")
            previous = tag
        return fields


class _StrictSchema(Schema):  # type: ignore[misc]  # aiokafka is untyped
    """A struct whose decode names the field an error happened in."""

    def decode(self, data: BytesIO) -> tuple[Any, ...]:
        values: list[Any] = []
        for name, kind in zip(self.names, self.fields, strict=True):
            try:
                values.append(kind.decode(data))
            except _DecodeError as exc:
                raise exc.within(name) from None
        return tuple(values)


def parse_response_header(data: BytesIO, *, flexible: bool) -> int:
    """The correlation id of a response frame (header v0, or v1 with tagged fields when
    ``flexible``). Raises ``RemoteProtocolError`` naming the problem."""
    try:
        correlation_id = int(Int32.decode(data))
        if flexible:
            _StrictTaggedFields.decode(data)
    except _DecodeError as exc:
        raise RemoteProtocolError(f"undecodable response header: {exc}") from None
    return correlation_id


class _Format:
    """The primitive types of one API version: classic or flexible."""

    def __init__(self, *, flexible: bool) -> None:
        self.flexible = flexible
        self.string: Any = _StrictCompactString("utf-8") if flexible else _StrictString("utf-8")
        self.bytes: Any = _StrictCompactBytes if flexible else _StrictBytes

    def struct(self, *fields: _Field) -> Any:
        """A struct schema; a flexible one ends with its tagged-field section."""
        if self.flexible:
            fields = (*fields, ("tags", _StrictTaggedFields))
        return _StrictSchema(*fields)

    def array(self, *fields: _Field) -> Any:
        """An array of structs (each element a tuple in ``fields`` order, plus tags)."""
        element = self.struct(*fields)
        return _StrictCompactArray(element) if self.flexible else _StrictArray(element)

    def array_of(self, item: Any) -> Any:
        """An array of a primitive type."""
        return _StrictCompactArray(item) if self.flexible else _StrictArray(item)


def _between(version: int, first: int, last: int, *fields: _Field) -> tuple[_Field, ...]:
    """``fields`` if they exist in ``version`` (JSON ``"versions": "<first>-<last>"``)."""
    return fields if first <= version <= last else ()


def _since(version: int, first: int, *fields: _Field) -> tuple[_Field, ...]:
    """``fields`` if they exist in ``version`` (JSON ``"versions": "<first>+"``)."""
    return fields if version >= first else ()


def _until(version: int, last: int, *fields: _Field) -> tuple[_Field, ...]:
    """``fields`` if they exist in ``version`` (JSON ``"versions": "0-<last>"``)."""
    return fields if version <= last else ()


# FindCoordinator (10). v1 adds key_type and, in the response, throttle time and an error
# message; v3 is flexible; v4 (KIP-699) replaces the single key with a batch of keys and
# the response fields with one ``coordinators`` entry per key; v5 and v6 keep the layout.


def _find_coordinator_request(v: int) -> Any:
    f = _Format(flexible=v >= 3)
    return f.struct(
        *_until(v, 3, ("key", f.string)),
        *_since(v, 1, ("key_type", Int8)),
        *_since(v, 4, ("coordinator_keys", f.array_of(f.string))),
    )


def _find_coordinator_response(v: int) -> Any:
    f = _Format(flexible=v >= 3)
    return f.struct(
        *_since(v, 1, ("throttle_time_ms", Int32)),
        *_until(v, 3, ("error_code", Int16)),
        *_between(v, 1, 3, ("error_message", f.string)),
        *_until(v, 3, ("node_id", Int32), ("host", f.string), ("port", Int32)),
        *_since(
            v,
            4,
            (
                "coordinators",
                f.array(
                    ("key", f.string),
                    ("node_id", Int32),
                    ("host", f.string),
                    ("port", Int32),
                    ("error_code", Int16),
                    ("error_message", f.string),
                ),
            ),
        ),
    )


# JoinGroup (11). v1 adds rebalance_timeout_ms; v2 the response throttle time; v4 answers
# an unknown member with MEMBER_ID_REQUIRED (KIP-394); v5 adds group_instance_id (KIP-345);
# v6 is flexible; v7 adds the response protocol_type and makes protocol_name nullable
# (KIP-559); v8 adds the request reason (KIP-800); v9 the response skip_assignment (KIP-814).


def _join_group_request(v: int) -> Any:
    f = _Format(flexible=v >= 6)
    return f.struct(
        ("group_id", f.string),
        ("session_timeout_ms", Int32),
        *_since(v, 1, ("rebalance_timeout_ms", Int32)),
        ("member_id", f.string),
        *_since(v, 5, ("group_instance_id", f.string)),
        ("protocol_type", f.string),
        ("protocols", f.array(("name", f.string), ("metadata", f.bytes))),
        *_since(v, 8, ("reason", f.string)),
    )


def _join_group_response(v: int) -> Any:
    f = _Format(flexible=v >= 6)
    return f.struct(
        *_since(v, 2, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        ("generation_id", Int32),
        *_since(v, 7, ("protocol_type", f.string)),
        ("protocol_name", f.string),
        ("leader", f.string),
        *_since(v, 9, ("skip_assignment", Boolean)),
        ("member_id", f.string),
        (
            "members",
            f.array(
                ("member_id", f.string),
                *_since(v, 5, ("group_instance_id", f.string)),
                ("metadata", f.bytes),
            ),
        ),
    )


# Heartbeat (12). v1 adds the response throttle time; v3 group_instance_id; v4 is flexible.


def _heartbeat_request(v: int) -> Any:
    f = _Format(flexible=v >= 4)
    return f.struct(
        ("group_id", f.string),
        ("generation_id", Int32),
        ("member_id", f.string),
        *_since(v, 3, ("group_instance_id", f.string)),
    )


def _heartbeat_response(v: int) -> Any:
    f = _Format(flexible=v >= 4)
    return f.struct(*_since(v, 1, ("throttle_time_ms", Int32)), ("error_code", Int16))


# LeaveGroup (13). v1 adds the response throttle time; v3 replaces member_id with a batch of
# {member_id, group_instance_id} and answers each with its own error (KIP-345); v4 is
# flexible; v5 adds members[].reason (KIP-800).


def _leave_group_request(v: int) -> Any:
    f = _Format(flexible=v >= 4)
    return f.struct(
        ("group_id", f.string),
        *_until(v, 2, ("member_id", f.string)),
        *_since(
            v,
            3,
            (
                "members",
                f.array(
                    ("member_id", f.string),
                    ("group_instance_id", f.string),
                    *_since(v, 5, ("reason", f.string)),
                ),
            ),
        ),
    )


def _leave_group_response(v: int) -> Any:
    f = _Format(flexible=v >= 4)
    return f.struct(
        *_since(v, 1, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        *_since(
            v,
            3,
            (
                "members",
                f.array(
                    ("member_id", f.string),
                    ("group_instance_id", f.string),
                    ("error_code", Int16),
                ),
            ),
        ),
    )


# SyncGroup (14). v1 adds the response throttle time; v3 group_instance_id; v4 is flexible;
# v5 adds protocol_type and protocol_name to request and response (KIP-559).


def _sync_group_request(v: int) -> Any:
    f = _Format(flexible=v >= 4)
    return f.struct(
        ("group_id", f.string),
        ("generation_id", Int32),
        ("member_id", f.string),
        *_since(v, 3, ("group_instance_id", f.string)),
        *_since(v, 5, ("protocol_type", f.string), ("protocol_name", f.string)),
        ("assignments", f.array(("member_id", f.string), ("assignment", f.bytes))),
    )


def _sync_group_response(v: int) -> Any:
    f = _Format(flexible=v >= 4)
    return f.struct(
        *_since(v, 1, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        *_since(v, 5, ("protocol_type", f.string), ("protocol_name", f.string)),
        ("assignment", f.bytes),
    )


# OffsetCommit (8). v1 adds the generation, member id and a per-partition commit timestamp
# (v1 only); v2-v4 carry retention_time_ms; v3 adds the response throttle time; v6 the
# committed leader epoch; v7 group_instance_id (KIP-345); v8 is flexible.


def _offset_commit_request(v: int) -> Any:
    f = _Format(flexible=v >= 8)
    return f.struct(
        ("group_id", f.string),
        ("generation_id_or_member_epoch", Int32),
        ("member_id", f.string),
        *_since(v, 7, ("group_instance_id", f.string)),
        *_between(v, 2, 4, ("retention_time_ms", Int64)),
        (
            "topics",
            f.array(
                ("name", f.string),
                (
                    "partitions",
                    f.array(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        *_since(v, 6, ("committed_leader_epoch", Int32)),
                        ("committed_metadata", f.string),
                    ),
                ),
            ),
        ),
    )


def _offset_commit_response(v: int) -> Any:
    f = _Format(flexible=v >= 8)
    return f.struct(
        *_since(v, 3, ("throttle_time_ms", Int32)),
        (
            "topics",
            f.array(
                ("name", f.string),
                ("partitions", f.array(("partition_index", Int32), ("error_code", Int16))),
            ),
        ),
    )


# OffsetFetch (9). v2 allows null topics (all) and adds a group-level error code; v3 the
# throttle time; v5 the committed leader epoch; v6 is flexible; v7 adds require_stable
# (KIP-447); v8 batches groups (KIP-709).


def _offset_fetch_request(v: int) -> Any:
    f = _Format(flexible=v >= 6)
    topics = ("topics", f.array(("name", f.string), ("partition_indexes", f.array_of(Int32))))
    if v >= 8:
        return f.struct(
            ("groups", f.array(("group_id", f.string), topics)),
            ("require_stable", Boolean),
        )
    return f.struct(("group_id", f.string), topics, *_since(v, 7, ("require_stable", Boolean)))


def _offset_fetch_response(v: int) -> Any:
    f = _Format(flexible=v >= 6)
    topics = (
        "topics",
        f.array(
            ("name", f.string),
            (
                "partitions",
                f.array(
                    ("partition_index", Int32),
                    ("committed_offset", Int64),
                    *_since(v, 5, ("committed_leader_epoch", Int32)),
                    ("metadata", f.string),
                    ("error_code", Int16),
                ),
            ),
        ),
    )
    if v >= 8:
        return f.struct(
            ("throttle_time_ms", Int32),
            ("groups", f.array(("group_id", f.string), topics, ("error_code", Int16))),
        )
    return f.struct(
        *_since(v, 3, ("throttle_time_ms", Int32)),
        topics,
        *_since(v, 2, ("error_code", Int16)),
    )


# DescribeGroups (15). v1 adds the throttle time; v3 authorized operations; v4 the members'
# group_instance_id (KIP-345); v5 is flexible. ListGroups (16). v1 adds the throttle time;
# v3 is flexible; v4 adds the states filter and each group's state (KIP-518). Both are for
# ``kgroup describe`` and ``kgroup groups``.


def _describe_groups_request(v: int) -> Any:
    f = _Format(flexible=v >= 5)
    return f.struct(
        ("groups", f.array_of(f.string)),
        *_since(v, 3, ("include_authorized_operations", Boolean)),
    )


def _describe_groups_response(v: int) -> Any:
    f = _Format(flexible=v >= 5)
    return f.struct(
        *_since(v, 1, ("throttle_time_ms", Int32)),
        (
            "groups",
            f.array(
                ("error_code", Int16),
                ("group_id", f.string),
                ("group_state", f.string),
                ("protocol_type", f.string),
                ("protocol_data", f.string),
                (
                    "members",
                    f.array(
                        ("member_id", f.string),
                        *_since(v, 4, ("group_instance_id", f.string)),
                        ("client_id", f.string),
                        ("client_host", f.string),
                        ("member_metadata", f.bytes),
                        ("member_assignment", f.bytes),
                    ),
                ),
                *_since(v, 3, ("authorized_operations", Int32)),
            ),
        ),
    )


def _list_groups_request(v: int) -> Any:
    f = _Format(flexible=v >= 3)
    return f.struct(*_since(v, 4, ("states_filter", f.array_of(f.string))))


def _list_groups_response(v: int) -> Any:
    f = _Format(flexible=v >= 3)
    return f.struct(
        *_since(v, 1, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        (
            "groups",
            f.array(
                ("group_id", f.string),
                ("protocol_type", f.string),
                *_since(v, 4, ("group_state", f.string)),
            ),
        ),
    )


class _Schemas(NamedTuple):
    request: Callable[[int], Any]
    response: Callable[[int], Any]


_SCHEMAS: Final[dict[int, _Schemas]] = {
    8: _Schemas(_offset_commit_request, _offset_commit_response),
    9: _Schemas(_offset_fetch_request, _offset_fetch_response),
    10: _Schemas(_find_coordinator_request, _find_coordinator_response),
    11: _Schemas(_join_group_request, _join_group_response),
    12: _Schemas(_heartbeat_request, _heartbeat_response),
    13: _Schemas(_leave_group_request, _leave_group_response),
    14: _Schemas(_sync_group_request, _sync_group_response),
    15: _Schemas(_describe_groups_request, _describe_groups_response),
    16: _Schemas(_list_groups_request, _list_groups_response),
}

# Everything struct-level that encoding or decoding can raise on a bad value or bad bytes:
# aiokafka wraps most ``struct.error``s in ValueError, but not the one from reading a varint
# past the end of the buffer.
_CODEC_ERRORS: Final = (ValueError, TypeError, IndexError, OverflowError, struct.error)


class _EncodeGuard:
    """Request-struct mixin: a value the schema cannot carry is kgroup's own fault."""

    API_KEY: int
    API_VERSION: int

    def encode(self) -> bytes:
        try:
            return cast(bytes, cast(Any, super()).encode())
        except _CODEC_ERRORS as exc:
            label = api_label(self.API_KEY, self.API_VERSION)
            raise LocalProtocolError(f"{label} request cannot be encoded: {exc}") from exc


class _DecodeGuard:
    """Response mixin: undecodable bytes, or bytes left over, are the broker's fault.

    aiokafka's ``Struct.decode`` ignores trailing bytes; here they mean the broker answered
    with another layout than the negotiated version's, so they are an error too.
    """

    API_KEY: int
    API_VERSION: int

    SCHEMA: Any

    @classmethod
    def decode(cls, data: BytesIO | bytes) -> Any:
        buffer = BytesIO(data) if isinstance(data, bytes | bytearray | memoryview) else data
        label = api_label(cls.API_KEY, cls.API_VERSION)
        try:
            values = cls.SCHEMA.decode(buffer)
        except _DecodeError as exc:
            raise RemoteProtocolError(f"{label} response cannot be decoded: {exc}") from None
        except _CODEC_ERRORS as exc:  # pragma: no cover - the strict types raise _DecodeError
            raise RemoteProtocolError(f"{label} response cannot be decoded: {exc!r}") from exc
        decoded = cast(Any, cls)(*values)
        left_over = len(buffer.read())
        if left_over:
            raise RemoteProtocolError(
                f"{label} response has {left_over} unexpected bytes after its last field"
            )
        return decoded


def _define(api_key: int, version: int) -> type[Any]:
    """Create the request struct class (and its response class) for one API version."""
    name = API_NAMES[api_key]
    schemas = _SCHEMAS[api_key]
    response_attrs = {
        "__module__": __name__,
        "__doc__": f"{name} response v{version}.",
        "API_KEY": api_key,
        "API_VERSION": version,
        "SCHEMA": schemas.response(version),
    }
    response = types.new_class(
        f"{name}Response_v{version}",
        (_DecodeGuard, Response),
        exec_body=lambda ns: ns.update(response_attrs),
    )
    request_attrs = {
        "__module__": __name__,
        "__doc__": f"{name} request v{version}.",
        "API_KEY": api_key,
        "API_VERSION": version,
        "FLEXIBLE_VERSION": version >= FLEXIBLE_FROM[api_key],
        "RESPONSE_TYPE": response,
        "SCHEMA": schemas.request(version),
    }
    return types.new_class(
        f"{name}Request_v{version}",
        (_EncodeGuard, RequestStruct),
        exec_body=lambda ns: ns.update(request_attrs),
    )


#: ``REQUEST_STRUCTS[api_key][version]`` is the request struct class; its ``RESPONSE_TYPE``
#: is the matching response class.
REQUEST_STRUCTS: Final[dict[int, dict[int, type[Any]]]] = {
    api_key: {version: _define(api_key, version) for version in range(low, high + 1)}
    for api_key, (low, high) in SUPPORTED_VERSIONS.items()
}
