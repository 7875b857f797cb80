"""Encode kgroup's version-free requests: ``to_wire`` wraps a request value in a
``WireRequest``, which negotiates the version with the broker and builds that version's struct."""

# The sans-I/O core decides *what* to send as frozen values (``kgroup._core._messages``).
# This module decides *how*: ``AIOKafkaConnection.send`` calls the ``WireRequest``'s
# ``prepare(conn._versions)``, which picks the highest version both kgroup and the broker
# support (spec section 4.0) and builds that version's struct (``kgroup._protocol._schemas``).
#
# Errors, and who is to blame:
#
# * ``UnsupportedVersion``, from ``prepare``: no version in common, the broker does not offer
#   the API, or the request needs a newer version than the broker has (a
#   ``group_instance_id`` needs JoinGroup v5, SyncGroup v3, Heartbeat v3 or LeaveGroup v3;
#   a consumer-protocol commit or fetch OffsetCommit/OffsetFetch v9; a Metadata lookup by
#   topic id Metadata v12; a ConsumerGroupHeartbeat v1, and its error says to use the
#   classic protocol). Never aiokafka's ``NotImplementedError`` or
#   ``IncompatibleBrokerVersion``.
# * ``LocalProtocolError``, from encoding: kgroup passed a value the schema cannot carry (an
#   int32 out of range, a string longer than 32767 bytes).
#
# Fields dropped silently when the version cannot carry them, as the Java client does:
# JoinGroup ``reason`` below v8, SyncGroup ``protocol_type``/``protocol_name`` below v5,
# LeaveGroup ``reason`` below v5. Reasons longer than 255 characters are truncated (KIP-800,
# ``JoinGroupRequest.maybeTruncateReason``).

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

from aiokafka.protocol.api import Request, RequestStruct

from kgroup._core._messages import (
    MEMBER_EPOCH_OFFSET_VERSION,
    TOPIC_ID_OFFSET_VERSION,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TopicIds,
)
from kgroup._core._messages_848 import ConsumerGroupHeartbeatRequest
from kgroup._core._messages_configs import DescribeConfigsRequest
from kgroup._core._messages_describe import ConsumerGroupDescribeRequest
from kgroup._core._messages_metadata import NO_TOPIC_ID, MetadataRequest
from kgroup._errors import LocalProtocolError, UnsupportedVersion
from kgroup._protocol._schemas import REQUEST_STRUCTS
from kgroup._protocol._versions import ALL_VERSIONS, API_NAMES, api_label

__all__ = [
    "CLASSIC_PROTOCOL_HINT",
    "MAX_REASON_LENGTH",
    "STATIC_MEMBERSHIP_VERSIONS",
    "GroupRequest",
    "WireRequest",
    "choose_version",
    "to_wire",
    "topic_names",
]

GroupRequest: TypeAlias = (
    FindCoordinatorRequest
    | JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | DescribeGroupsRequest
    | ListGroupsRequest
    | ConsumerGroupHeartbeatRequest
    | ConsumerGroupDescribeRequest
    | MetadataRequest
    | DescribeConfigsRequest
)

#: The first version of each API that carries ``group_instance_id`` (KIP-345).
STATIC_MEMBERSHIP_VERSIONS: Final[dict[int, int]] = {8: 7, 11: 5, 12: 3, 13: 3, 14: 3}

#: Brokers keep at most this many characters of a JoinGroup or LeaveGroup reason (KIP-800).
MAX_REASON_LENGTH: Final = 255

_GROUP_KEY_TYPE: Final = 0  # FindCoordinator key_type: 0 = group, 1 = transaction, 2 = share

#: What a ConsumerGroupHeartbeat that the broker cannot take says to do about it.
CLASSIC_PROTOCOL_HINT: Final = (
    'the broker cannot serve the consumer group protocol (KIP-848); use group_protocol="classic"'
)
#: The first ConsumerGroupHeartbeat version with client-generated member ids (KIP-1082);
#: kgroup's member always generates its own, so v0 is never sent.
_CLIENT_MEMBER_ID_VERSION: Final = 1
#: The first Metadata version that looks topics up by id.
_METADATA_BY_ID_VERSION: Final = 12


def choose_version(api_key: int, broker_range: tuple[int, int]) -> int:
    """The highest version of ``api_key`` that both kgroup and the broker support.

    ``broker_range`` is the broker's inclusive ``(min, max)`` from ApiVersions. Raises
    ``UnsupportedVersion`` when the ranges do not overlap, and ``LocalProtocolError`` for an
    API key kgroup does not speak (a bug in the caller).
    """
    version = _highest_common(api_key, broker_range)
    if version is None:
        name = API_NAMES[api_key]
        raise UnsupportedVersion(f"{name}: {_no_common(api_key, broker_range)}", api=name)
    return version


def _highest_common(
    api_key: int, broker_range: tuple[int, int], cap: int | None = None
) -> int | None:
    ours = ALL_VERSIONS.get(api_key)
    if ours is None:
        raise LocalProtocolError(f"kgroup does not implement API key {api_key}")
    high = min(ours[1], broker_range[1], ours[1] if cap is None else cap)
    return high if high >= max(ours[0], broker_range[0]) else None


def _no_common(api_key: int, broker_range: tuple[int, int]) -> str:
    low, high = ALL_VERSIONS[api_key]
    return (
        f"no version in common: the broker supports v{broker_range[0]}-v{broker_range[1]}, "
        f"kgroup v{low}-v{high}"
    )


class WireRequest(Request[RequestStruct]):  # type: ignore[misc]  # aiokafka is untyped
    """An aiokafka ``Request`` builder for one kgroup request value.

    ``API_KEY`` is set per instance (one builder class serves every API).
    ``prepare(versions)`` negotiates against the connection's ApiVersions ranges and returns
    the struct to send; ``build(cls)`` fills a given struct class. ``fields`` holds every
    field any version may need, by wire name; each version takes the ones its schema lists.
    ``max_version`` caps the version; ``hint`` ends every UnsupportedVersion message.
    """

    API_KEY = -1  # replaced per instance; aiokafka requires the class attribute to exist

    def __init__(
        self,
        api_key: int,
        fields: Mapping[str, Any],
        *,
        group_id: str,
        member_id: str = "",
        min_version: int = 0,
        needs: str = "",
        max_version: int | None = None,
        hint: str = "",
    ) -> None:
        self.API_KEY = api_key
        self.api_name = API_NAMES[api_key]
        self.fields = fields
        self.group_id = group_id
        self.member_id = member_id
        self.min_version = min_version
        self.needs = needs
        self.max_version = max_version
        self.hint = hint

    def __repr__(self) -> str:
        return f"<WireRequest {self.api_name} group={self.group_id!r}>"

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> Any:
        """Build the struct of the highest version both sides support.

        Raises ``UnsupportedVersion`` if the broker lacks the API, shares no version with
        kgroup, or cannot carry what this request needs (``min_version``).
        """
        broker = versions.get(self.API_KEY)
        if broker is None:
            low, high = ALL_VERSIONS[self.API_KEY]
            raise self._unsupported(
                f"the broker does not offer this API (API key {self.API_KEY}); "
                f"kgroup needs v{max(low, self.min_version)}-v{high}"
            )
        version = _highest_common(self.API_KEY, broker, self.max_version)
        if version is None:
            raise self._unsupported(_no_common(self.API_KEY, broker))
        if version < self.min_version:
            raise self._unsupported(
                f"{self.needs} needs v{self.min_version} or later, "
                f"but the broker supports v{broker[0]}-v{broker[1]}"
            )
        return self.build(REQUEST_STRUCTS[self.API_KEY][version])

    def build(self, request_struct_class: type[Any]) -> Any:
        """Fill ``request_struct_class`` with the fields its schema lists."""
        label = api_label(self.API_KEY, request_struct_class.API_VERSION)
        return request_struct_class(*_fill(request_struct_class.SCHEMA, self.fields, label))

    def _unsupported(self, problem: str) -> UnsupportedVersion:
        hint = f"; {self.hint}" if self.hint else ""
        return UnsupportedVersion(
            f"{self.api_name}: {problem}{hint}",
            group_id=self.group_id,
            member_id=self.member_id,
            api=self.api_name,
        )


def _fill(schema: Any, fields: Mapping[str, Any], label: str) -> list[Any]:
    """The values of ``schema``'s fields, in order; array elements become tuples.

    Every ``tags`` slot gets ``{}``: aiokafka's ``TaggedFields.encode`` cannot encode more.
    """
    row: list[Any] = []
    for name, kind in zip(schema.names, schema.fields, strict=True):
        if name == "tags":
            row.append({})
            continue
        if name not in fields:
            raise LocalProtocolError(f"{label} request: no value for field {name!r}")
        value = fields[name]
        element = getattr(kind, "array_of", None)
        if element is not None and hasattr(element, "names") and value is not None:
            value = [tuple(_fill(element, item, label)) for item in value]
        row.append(value)
    return row


def _topics(
    partitions: Sequence[tuple[str, int]], topic_ids: TopicIds
) -> tuple[list[tuple[str, uuid.UUID | None, list[int]]], bool]:
    """``partitions`` grouped into the topics of an OffsetCommit or OffsetFetch request:
    ``(name, topic id, partitions)`` each, and whether they go by id. They do when
    ``topic_ids`` has every partition's id (two of one name may have two); otherwise by
    name (ids None), as Java's ``forTopicNames`` builders send them."""
    ids = {(topic, partition): topic_id for topic, partition, topic_id in topic_ids}
    by_id = bool(partitions) and all(key in ids for key in partitions)
    grouped: dict[tuple[str, uuid.UUID | None], list[int]] = {}
    for topic, partition in partitions:
        key = (topic, ids[(topic, partition)] if by_id else None)
        grouped.setdefault(key, []).append(partition)
    return [(topic, topic_id, parts) for (topic, topic_id), parts in grouped.items()], by_id


def _by_name_cap(cap: int | None, by_id: bool) -> int | None:
    """``cap``, lowered below the first by-id version for a request that goes by name."""
    if by_id:
        return cap
    by_name = TOPIC_ID_OFFSET_VERSION - 1
    return by_name if cap is None else min(cap, by_name)


def topic_names(request: object) -> dict[uuid.UUID, str] | None:
    """Topic names by id for reading the answer to ``request`` when it may go by topic id
    (OffsetCommit and OffsetFetch v10), else None."""
    match request:
        case OffsetCommitRequest() if request.topic_ids:
            return {topic_id: name for name, _, topic_id in request.topic_ids}
        case OffsetFetchRequest() if request.topic_ids and request.partitions is not None:
            return {topic_id: name for name, _, topic_id in request.topic_ids}
    return None


def _truncate_reason(reason: str | None) -> str | None:
    return None if reason is None else reason[:MAX_REASON_LENGTH]


def to_wire(request: GroupRequest) -> WireRequest:
    """An aiokafka request builder for ``request``; the version is chosen at ``prepare``."""
    match request:
        case FindCoordinatorRequest():
            return WireRequest(
                10,
                {
                    "key": request.group_id,
                    "key_type": _GROUP_KEY_TYPE,
                    "coordinator_keys": [request.group_id],
                },
                group_id=request.group_id,
            )
        case JoinGroupRequest():
            return _with_instance_id(
                11,
                request.group_instance_id,
                {
                    "group_id": request.group_id,
                    "session_timeout_ms": request.session_timeout_ms,
                    "rebalance_timeout_ms": request.rebalance_timeout_ms,
                    "member_id": request.member_id,
                    "group_instance_id": request.group_instance_id,
                    "protocol_type": request.protocol_type,
                    "protocols": [
                        {"name": name, "metadata": metadata} for name, metadata in request.protocols
                    ],
                    "reason": _truncate_reason(request.reason),
                },
                group_id=request.group_id,
                member_id=request.member_id,
            )
        case SyncGroupRequest():
            return _with_instance_id(
                14,
                request.group_instance_id,
                {
                    "group_id": request.group_id,
                    "generation_id": request.generation_id,
                    "member_id": request.member_id,
                    "group_instance_id": request.group_instance_id,
                    "protocol_type": request.protocol_type,
                    "protocol_name": request.protocol_name,
                    "assignments": [
                        {"member_id": member_id, "assignment": assignment}
                        for member_id, assignment in request.assignments
                    ],
                },
                group_id=request.group_id,
                member_id=request.member_id,
            )
        case HeartbeatRequest():
            return _with_instance_id(
                12,
                request.group_instance_id,
                {
                    "group_id": request.group_id,
                    "generation_id": request.generation_id,
                    "member_id": request.member_id,
                    "group_instance_id": request.group_instance_id,
                },
                group_id=request.group_id,
                member_id=request.member_id,
            )
        case LeaveGroupRequest():
            return _with_instance_id(
                13,
                request.group_instance_id,
                {
                    "group_id": request.group_id,
                    "member_id": request.member_id,
                    "members": [
                        {
                            "member_id": request.member_id,
                            "group_instance_id": request.group_instance_id,
                            "reason": _truncate_reason(request.reason),
                        }
                    ],
                },
                group_id=request.group_id,
                member_id=request.member_id,
            )
        case OffsetCommitRequest():
            epoch_commit = request.max_version >= MEMBER_EPOCH_OFFSET_VERSION
            committed = {(p.topic, p.partition): p for p in request.partitions}
            commit_topics, commit_by_id = _topics(list(committed), request.topic_ids)
            return _with_instance_id(
                8,
                request.group_instance_id,
                {
                    "group_id": request.group_id,
                    "generation_id_or_member_epoch": request.generation_id,
                    "member_id": request.member_id,
                    "group_instance_id": request.group_instance_id,
                    "retention_time_ms": -1,  # the broker's default retention
                    "topics": [
                        {
                            "name": topic,
                            "topic_id": topic_id,
                            "partitions": [
                                {
                                    "partition_index": p.partition,
                                    "committed_offset": p.offset,
                                    "committed_leader_epoch": p.leader_epoch,
                                    "committed_metadata": p.metadata,
                                }
                                for p in (committed[(topic, i)] for i in parts)
                            ],
                        }
                        for topic, topic_id, parts in commit_topics
                    ],
                },
                group_id=request.group_id,
                member_id=request.member_id,
                # v10 names topics only by id: without every topic's id, v9 is the newest.
                max_version=_by_name_cap(request.max_version, commit_by_id),
                # A member epoch only means one from v9; below, the broker would read it as
                # a generation and reject a consumer-protocol member with UNSUPPORTED_VERSION.
                min_version=MEMBER_EPOCH_OFFSET_VERSION if epoch_commit else 0,
                needs="a commit under a member epoch (consumer protocol)",
            )
        case OffsetFetchRequest():
            wanted = request.partitions
            fetch_topics, fetch_by_id = _topics(wanted or [], request.topic_ids)
            topics = (
                None
                if wanted is None
                else [
                    {"name": topic, "topic_id": topic_id, "partition_indexes": parts}
                    for topic, topic_id, parts in fetch_topics
                ]
            )
            as_member = request.member_id is not None or request.member_epoch != -1
            return WireRequest(
                9,
                {
                    "group_id": request.group_id,
                    "topics": topics,
                    "groups": [
                        {
                            "group_id": request.group_id,
                            "member_id": request.member_id,
                            "member_epoch": request.member_epoch,
                            "topics": topics,
                        }
                    ],
                    "require_stable": request.require_stable,
                },
                group_id=request.group_id,
                member_id=request.member_id or "",
                # v10 names topics only by id (and answers "all partitions" by id too, which
                # kgroup could not name): without every topic's id, v9 is the newest.
                max_version=_by_name_cap(None, fetch_by_id),
                # a member id and epoch need v9; "all partitions" (null topics) needs v2
                min_version=(
                    MEMBER_EPOCH_OFFSET_VERSION if as_member else 2 if wanted is None else 0
                ),
                needs=(
                    "a fetch as a consumer-protocol member (member id and epoch)"
                    if as_member
                    else "fetching every committed offset of a group"
                ),
            )
        case DescribeGroupsRequest():
            return WireRequest(
                15,
                {"groups": list(request.group_ids), "include_authorized_operations": False},
                group_id=",".join(request.group_ids),
            )
        case ListGroupsRequest():
            return WireRequest(16, {"states_filter": [], "types_filter": []}, group_id="")
        case ConsumerGroupHeartbeatRequest():
            return _consumer_group_heartbeat(request)
        case ConsumerGroupDescribeRequest():
            return WireRequest(
                69,
                {
                    "group_ids": list(request.group_ids),
                    "include_authorized_operations": request.include_authorized_operations,
                },
                group_id=",".join(request.group_ids),
            )
        case MetadataRequest():
            return _metadata(request)
        case DescribeConfigsRequest():
            return WireRequest(
                32,
                {
                    "resources": [
                        {
                            "resource_type": r.resource_type,
                            "resource_name": r.resource_name,
                            "configuration_keys": None if r.keys is None else list(r.keys),
                        }
                        for r in request.resources
                    ],
                    "include_synonyms": request.include_synonyms,
                    "include_documentation": request.include_documentation,
                },
                group_id=",".join(r.resource_name for r in request.resources),
            )
        case _:
            raise TypeError(f"not a kgroup group request: {type(request).__name__}")


def _with_instance_id(
    api_key: int,
    group_instance_id: str | None,
    fields: Mapping[str, Any],
    *,
    group_id: str,
    member_id: str,
    max_version: int | None = None,
    min_version: int = 0,
    needs: str = "",
) -> WireRequest:
    """A builder that refuses versions too old for a set ``group_instance_id`` (or for what
    ``min_version`` says the request ``needs``, when that is the newer of the two)."""
    static = STATIC_MEMBERSHIP_VERSIONS[api_key] if group_instance_id is not None else 0
    if static > min_version:
        min_version, needs = static, "group_instance_id (static membership)"
    return WireRequest(
        api_key,
        fields,
        group_id=group_id,
        member_id=member_id,
        min_version=min_version,
        needs=needs,
        max_version=max_version,
    )


def _consumer_group_heartbeat(request: ConsumerGroupHeartbeatRequest) -> WireRequest:
    """v1 at least: kgroup's member generates its own member id (KIP-1082), which v0
    brokers replace with theirs. A broker without v1 gets the classic-protocol hint."""
    names = request.subscribed_topic_names
    owned = request.topic_partitions
    return WireRequest(
        68,
        {
            "group_id": request.group_id,
            "member_id": request.member_id,
            "member_epoch": request.member_epoch,
            "instance_id": request.instance_id,
            "rack_id": request.rack_id,
            "rebalance_timeout_ms": request.rebalance_timeout_ms,
            "subscribed_topic_names": None if names is None else list(names),
            "subscribed_topic_regex": request.subscribed_topic_regex,
            "server_assignor": request.server_assignor,
            "topic_partitions": (
                None
                if owned is None
                else [{"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in owned]
            ),
        },
        group_id=request.group_id,
        member_id=request.member_id,
        min_version=_CLIENT_MEMBER_ID_VERSION,
        needs="a client-generated member id (KIP-1082)",
        hint=CLASSIC_PROTOCOL_HINT,
    )


def _metadata(request: MetadataRequest) -> WireRequest:
    """Topics by name carry the zero id, topics by id a null name (v12+); both None asks
    for every topic (a null array)."""
    topics: list[dict[str, Any]] | None = None
    if request.topics is not None or request.topic_ids is not None:
        topics = [{"topic_id": NO_TOPIC_ID, "name": name} for name in request.topics or ()]
        topics += [{"topic_id": topic_id, "name": None} for topic_id in request.topic_ids or ()]
    return WireRequest(
        3,
        {
            "topics": topics,
            "allow_auto_topic_creation": request.allow_auto_topic_creation,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        group_id="",
        min_version=_METADATA_BY_ID_VERSION if request.topic_ids else 0,
        needs="looking topics up by id",
    )
