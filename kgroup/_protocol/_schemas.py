"""The wire structs of the group APIs: one aiokafka request struct class, with its response
class, per version kgroup speaks, built from Kafka's JSON message schemas (the KIP-848 APIs
and Metadata with topic ids in ``_schemas_848``)."""

# aiokafka 0.14 stops at FindCoordinator v1, JoinGroup v5, SyncGroup v3, Heartbeat v1 and
# LeaveGroup v1, and has no flexible (KIP-482) version of any of them. kgroup therefore
# defines every version it speaks itself, from Kafka's JSON message schemas
# (``clients/src/main/resources/common/message/<Name>{Request,Response}.json``), as
# subclasses of aiokafka's ``RequestStruct`` and ``Response`` so that
# ``AIOKafkaConnection.send`` can frame, correlate and decode them like its own.
#
# One function per API and direction takes a version and returns the aiokafka ``Schema`` for
# it: the fields in wire order, each guarded by the version range the JSON file gives it
# (``since(v, 5, ...)`` is ``"versions": "5+"``, ``until(v, 3, ...)`` is ``"versions":
# "0-3"``, ``between(v, 1, 3, ...)`` is ``"versions": "1-3"``). Field names are the JSON
# names in snake_case. The primitive types are the strict ones of ``_primitives``.
#
# A request struct that cannot be encoded raises ``LocalProtocolError`` (kgroup passed a
# value the schema cannot carry). A response that cannot be decoded, or that leaves bytes
# over, raises ``RemoteProtocolError`` naming the API, the version and the field; the
# connection layer (``kgroup._runtime._framing``) then fails the request with it and
# closes the connection.

from __future__ import annotations

import struct
import types
from collections.abc import Callable
from io import BytesIO
from typing import Any, Final, NamedTuple, cast

from aiokafka.protocol.api import RequestStruct, Response

from kgroup._errors import LocalProtocolError, RemoteProtocolError
from kgroup._protocol._primitives import (
    Boolean,
    DecodeError,
    Format,
    Int8,
    Int16,
    Int32,
    Int64,
    Uuid,
    between,
    since,
    until,
)
from kgroup._protocol._schemas_848 import (
    consumer_group_describe_request,
    consumer_group_describe_response,
    consumer_group_heartbeat_request,
    consumer_group_heartbeat_response,
    metadata_request,
    metadata_response,
)
from kgroup._protocol._schemas_configs import describe_configs_request, describe_configs_response
from kgroup._protocol._versions import ALL_VERSIONS, API_NAMES, FLEXIBLE_FROM, api_label

__all__ = ["REQUEST_STRUCTS"]


# FindCoordinator (10). v1 adds key_type and, in the response, throttle time and an error
# message; v3 is flexible; v4 (KIP-699) replaces the single key with a batch of keys and
# the response fields with one ``coordinators`` entry per key; v5 and v6 keep the layout.


def _find_coordinator_request(v: int) -> Any:
    f = Format(flexible=v >= 3)
    return f.struct(
        *until(v, 3, ("key", f.string)),
        *since(v, 1, ("key_type", Int8)),
        *since(v, 4, ("coordinator_keys", f.array_of(f.string))),
    )


def _find_coordinator_response(v: int) -> Any:
    f = Format(flexible=v >= 3)
    return f.struct(
        *since(v, 1, ("throttle_time_ms", Int32)),
        *until(v, 3, ("error_code", Int16)),
        *between(v, 1, 3, ("error_message", f.string)),
        *until(v, 3, ("node_id", Int32), ("host", f.string), ("port", Int32)),
        *since(
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
    f = Format(flexible=v >= 6)
    return f.struct(
        ("group_id", f.string),
        ("session_timeout_ms", Int32),
        *since(v, 1, ("rebalance_timeout_ms", Int32)),
        ("member_id", f.string),
        *since(v, 5, ("group_instance_id", f.string)),
        ("protocol_type", f.string),
        ("protocols", f.array(("name", f.string), ("metadata", f.bytes))),
        *since(v, 8, ("reason", f.string)),
    )


def _join_group_response(v: int) -> Any:
    f = Format(flexible=v >= 6)
    return f.struct(
        *since(v, 2, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        ("generation_id", Int32),
        *since(v, 7, ("protocol_type", f.string)),
        ("protocol_name", f.string),
        ("leader", f.string),
        *since(v, 9, ("skip_assignment", Boolean)),
        ("member_id", f.string),
        (
            "members",
            f.array(
                ("member_id", f.string),
                *since(v, 5, ("group_instance_id", f.string)),
                ("metadata", f.bytes),
            ),
        ),
    )


# Heartbeat (12). v1 adds the response throttle time; v3 group_instance_id; v4 is flexible.


def _heartbeat_request(v: int) -> Any:
    f = Format(flexible=v >= 4)
    return f.struct(
        ("group_id", f.string),
        ("generation_id", Int32),
        ("member_id", f.string),
        *since(v, 3, ("group_instance_id", f.string)),
    )


def _heartbeat_response(v: int) -> Any:
    f = Format(flexible=v >= 4)
    return f.struct(*since(v, 1, ("throttle_time_ms", Int32)), ("error_code", Int16))


# LeaveGroup (13). v1 adds the response throttle time; v3 replaces member_id with a batch of
# {member_id, group_instance_id} and answers each with its own error (KIP-345); v4 is
# flexible; v5 adds members[].reason (KIP-800).


def _leave_group_request(v: int) -> Any:
    f = Format(flexible=v >= 4)
    return f.struct(
        ("group_id", f.string),
        *until(v, 2, ("member_id", f.string)),
        *since(
            v,
            3,
            (
                "members",
                f.array(
                    ("member_id", f.string),
                    ("group_instance_id", f.string),
                    *since(v, 5, ("reason", f.string)),
                ),
            ),
        ),
    )


def _leave_group_response(v: int) -> Any:
    f = Format(flexible=v >= 4)
    return f.struct(
        *since(v, 1, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        *since(
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
    f = Format(flexible=v >= 4)
    return f.struct(
        ("group_id", f.string),
        ("generation_id", Int32),
        ("member_id", f.string),
        *since(v, 3, ("group_instance_id", f.string)),
        *since(v, 5, ("protocol_type", f.string), ("protocol_name", f.string)),
        ("assignments", f.array(("member_id", f.string), ("assignment", f.bytes))),
    )


def _sync_group_response(v: int) -> Any:
    f = Format(flexible=v >= 4)
    return f.struct(
        *since(v, 1, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        *since(v, 5, ("protocol_type", f.string), ("protocol_name", f.string)),
        ("assignment", f.bytes),
    )


def _topic_key(v: int, f: Format) -> tuple[tuple[str, Any], ...]:
    """A topic's key in OffsetCommit and OffsetFetch: its name up to v9, its id from v10
    (JSON ``Name`` ``"0-9"``, ``TopicId`` ``"10+"``)."""
    return (("topic_id", Uuid),) if v >= 10 else (("name", f.string),)


# OffsetCommit (8). v1 adds the generation, member id and a per-partition commit timestamp
# (v1 only); v2-v4 carry retention_time_ms; v3 adds the response throttle time; v6 the
# committed leader epoch; v7 group_instance_id (KIP-345); v8 is flexible; v9 (KIP-848) has
# v8's layout, generation_id_or_member_epoch carrying a consumer-protocol member's epoch;
# v10 (Kafka 4.2) names each topic by its id instead of its name, in the request and the
# response alike.


def _offset_commit_request(v: int) -> Any:
    f = Format(flexible=v >= 8)
    return f.struct(
        ("group_id", f.string),
        ("generation_id_or_member_epoch", Int32),
        ("member_id", f.string),
        *since(v, 7, ("group_instance_id", f.string)),
        *between(v, 2, 4, ("retention_time_ms", Int64)),
        (
            "topics",
            f.array(
                *_topic_key(v, f),
                (
                    "partitions",
                    f.array(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        *since(v, 6, ("committed_leader_epoch", Int32)),
                        ("committed_metadata", f.string),
                    ),
                ),
            ),
        ),
    )


def _offset_commit_response(v: int) -> Any:
    f = Format(flexible=v >= 8)
    return f.struct(
        *since(v, 3, ("throttle_time_ms", Int32)),
        (
            "topics",
            f.array(
                *_topic_key(v, f),
                ("partitions", f.array(("partition_index", Int32), ("error_code", Int16))),
            ),
        ),
    )


# OffsetFetch (9). v2 allows null topics (all) and adds a group-level error code; v3 the
# throttle time; v5 the committed leader epoch; v6 is flexible; v7 adds require_stable
# (KIP-447); v8 batches groups (KIP-709); v9 adds groups[].member_id (nullable) and
# member_epoch (KIP-848), the response staying v8's; v10 (Kafka 4.2) names each topic by its
# id instead of its name, in the request and the response alike.


def _offset_fetch_request(v: int) -> Any:
    f = Format(flexible=v >= 6)
    topics = (
        "topics",
        f.array(*_topic_key(v, f), ("partition_indexes", f.array_of(Int32))),
    )
    if v >= 8:
        member = since(v, 9, ("member_id", f.string), ("member_epoch", Int32))
        return f.struct(
            ("groups", f.array(("group_id", f.string), *member, topics)),
            ("require_stable", Boolean),
        )
    return f.struct(("group_id", f.string), topics, *since(v, 7, ("require_stable", Boolean)))


def _offset_fetch_response(v: int) -> Any:
    f = Format(flexible=v >= 6)
    topics = (
        "topics",
        f.array(
            *_topic_key(v, f),
            (
                "partitions",
                f.array(
                    ("partition_index", Int32),
                    ("committed_offset", Int64),
                    *since(v, 5, ("committed_leader_epoch", Int32)),
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
        *since(v, 3, ("throttle_time_ms", Int32)),
        topics,
        *since(v, 2, ("error_code", Int16)),
    )


# DescribeGroups (15). v1 adds the throttle time; v3 authorized operations; v4 the members'
# group_instance_id (KIP-345); v5 is flexible. ListGroups (16). v1 adds the throttle time;
# v3 is flexible; v4 adds the states filter and each group's state (KIP-518). Both are for
# ``kgroup describe`` and ``kgroup groups``. ListGroups v5 (KIP-848) adds the types filter and
# each group's type (``classic``, ``consumer``, ``share``, ``streams``).


def _describe_groups_request(v: int) -> Any:
    f = Format(flexible=v >= 5)
    return f.struct(
        ("groups", f.array_of(f.string)),
        *since(v, 3, ("include_authorized_operations", Boolean)),
    )


def _describe_groups_response(v: int) -> Any:
    f = Format(flexible=v >= 5)
    return f.struct(
        *since(v, 1, ("throttle_time_ms", Int32)),
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
                        *since(v, 4, ("group_instance_id", f.string)),
                        ("client_id", f.string),
                        ("client_host", f.string),
                        ("member_metadata", f.bytes),
                        ("member_assignment", f.bytes),
                    ),
                ),
                *since(v, 3, ("authorized_operations", Int32)),
            ),
        ),
    )


def _list_groups_request(v: int) -> Any:
    f = Format(flexible=v >= 3)
    return f.struct(
        *since(v, 4, ("states_filter", f.array_of(f.string))),
        *since(v, 5, ("types_filter", f.array_of(f.string))),
    )


def _list_groups_response(v: int) -> Any:
    f = Format(flexible=v >= 3)
    return f.struct(
        *since(v, 1, ("throttle_time_ms", Int32)),
        ("error_code", Int16),
        (
            "groups",
            f.array(
                ("group_id", f.string),
                ("protocol_type", f.string),
                *since(v, 4, ("group_state", f.string)),
                *since(v, 5, ("group_type", f.string)),
            ),
        ),
    )


class _Schemas(NamedTuple):
    request: Callable[[int], Any]
    response: Callable[[int], Any]


_SCHEMAS: Final[dict[int, _Schemas]] = {
    3: _Schemas(metadata_request, metadata_response),
    8: _Schemas(_offset_commit_request, _offset_commit_response),
    9: _Schemas(_offset_fetch_request, _offset_fetch_response),
    10: _Schemas(_find_coordinator_request, _find_coordinator_response),
    11: _Schemas(_join_group_request, _join_group_response),
    12: _Schemas(_heartbeat_request, _heartbeat_response),
    13: _Schemas(_leave_group_request, _leave_group_response),
    14: _Schemas(_sync_group_request, _sync_group_response),
    15: _Schemas(_describe_groups_request, _describe_groups_response),
    16: _Schemas(_list_groups_request, _list_groups_response),
    32: _Schemas(describe_configs_request, describe_configs_response),
    68: _Schemas(consumer_group_heartbeat_request, consumer_group_heartbeat_response),
    69: _Schemas(consumer_group_describe_request, consumer_group_describe_response),
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


#: API key -> (first version, bytes): what a known broker appends after a response's last
#: field, accepted as harmless. librdkafka's mock cluster (2.16, the one bundled with
#: confluent-kafka) ends every flexible Metadata answer (v9+) with one more empty
#: tagged-field section, a zero byte that carries nothing (Apache Kafka 4.4.0 does not;
#: Java's and librdkafka's decoders never look past the last field). Only that exact byte,
#: after that API, is let through: any other left-over bytes are still an error.
_HARMLESS_TRAILING: Final = {3: (9, b"\x00")}


def _harmless_trailing(api_key: int, version: int) -> bytes | None:
    quirk = _HARMLESS_TRAILING.get(api_key)
    return quirk[1] if quirk is not None and version >= quirk[0] else None


class _DecodeGuard:
    """Response mixin: undecodable bytes, or bytes left over, are the broker's fault.

    aiokafka's ``Struct.decode`` ignores trailing bytes; here they mean the broker answered
    with another layout than the negotiated version's, so they are an error too (except the
    known harmless quirks of ``_HARMLESS_TRAILING``).
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
        except DecodeError as exc:
            raise RemoteProtocolError(f"{label} response cannot be decoded: {exc}") from None
        except _CODEC_ERRORS as exc:  # pragma: no cover - the strict types raise DecodeError
            raise RemoteProtocolError(f"{label} response cannot be decoded: {exc!r}") from exc
        decoded = cast(Any, cls)(*values)
        rest = buffer.read()
        left_over = 0 if rest == _harmless_trailing(cls.API_KEY, cls.API_VERSION) else len(rest)
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
    for api_key, (low, high) in ALL_VERSIONS.items()
}
