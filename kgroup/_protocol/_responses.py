"""Decode the broker's responses: ``from_wire`` turns a decoded response struct into a
version-free response value, filling the fields its version cannot carry with their defaults."""

# ``RemoteProtocolError``, from ``from_wire``: the broker's answer does not fit the schema (a
# null where none is allowed, a FindCoordinator v4+ answer without exactly one coordinator),
# or a successful FindCoordinator answer names no usable address (an empty host, a port
# outside 1-65535). Bytes that cannot be decoded, or are left over, fail earlier, in the
# response structs themselves (``kgroup._protocol._schemas``).

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Final, TypeAlias

from aiokafka.protocol.api import Response

from kgroup._core._messages import (
    TOPIC_ID_OFFSET_VERSION,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsResponse,
    FetchedOffset,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kgroup._core._messages_848 import ConsumerGroupHeartbeatResponse
from kgroup._core._messages_configs import DescribeConfigsResponse
from kgroup._core._messages_describe import ConsumerGroupDescribeResponse
from kgroup._core._messages_metadata import MetadataResponse
from kgroup._errors import RemoteProtocolError
from kgroup._protocol._fields import Fields
from kgroup._protocol._responses_848 import (
    consumer_group_describe,
    consumer_group_heartbeat,
    metadata,
)
from kgroup._protocol._schemas_configs import describe_configs
from kgroup._protocol._versions import api_label

__all__ = ["GroupResponse", "from_wire"]

GroupResponse: TypeAlias = (
    FindCoordinatorResponse
    | JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | DescribeGroupsResponse
    | ListGroupsResponse
    | ConsumerGroupHeartbeatResponse
    | ConsumerGroupDescribeResponse
    | MetadataResponse
    | DescribeConfigsResponse
)

_MAX_PORT: Final = 65535

#: Topic names by topic id, from the request, for answers that name topics by id.
Names = Mapping[uuid.UUID, str]


def from_wire(response: Response, topic_names: Names | None = None) -> GroupResponse:
    """The response value for a decoded response struct of one of kgroup's APIs.

    ``topic_names`` names the topic ids of an answer that names topics by id (OffsetCommit
    and OffsetFetch v10): the request's (``kgroup._protocol.topic_names``). Raises
    ``RemoteProtocolError`` naming the API and the problem when the struct is not one of
    them, does not follow its version's schema, or names a topic id the request did not.
    """
    api_key = getattr(response, "API_KEY", None)
    version = getattr(response, "API_VERSION", None)
    known = api_key in _DECODERS or api_key in _BY_TOPIC_ID
    if not isinstance(api_key, int) or not isinstance(version, int) or not known:
        raise RemoteProtocolError(
            f"unexpected response struct {type(response).__name__} "
            f"(API key {api_key!r}, version {version!r}): not a kgroup group API"
        )
    label = api_label(api_key, version)
    names = topic_names or {}
    try:
        return _decode(api_key, version, Fields.of_struct(label, response), names)
    except RemoteProtocolError as strict_error:
        # Some brokers (librdkafka's mock cluster, seen here) fill the other fields of an
        # error answer with nulls the schema forbids. The error code is what matters then:
        # losing it (say GROUP_AUTHORIZATION_FAILED) to a decode error would retry forever.
        # A success answer must still be well formed.
        try:
            lenient = _decode(
                api_key, version, Fields.of_struct(label, response, lenient=True), names
            )
        except RemoteProtocolError:
            raise strict_error from None
        if _error_code(lenient) == 0:
            raise
        return lenient


def _decode(api_key: int, version: int, fields: Fields, names: Names) -> GroupResponse:
    try:
        by_id = _BY_TOPIC_ID.get(api_key)
        if by_id is not None:
            return by_id(fields, version, names)
        return _DECODERS[api_key](fields, version)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
        # A struct whose SCHEMA itself is broken; the getters catch everything else.
        raise RemoteProtocolError(f"{fields.label} response is malformed: {exc!r}") from exc


def _error_code(response: GroupResponse) -> int:
    if isinstance(response, LeaveGroupResponse):
        return response.effective_error
    return response.error_code


def _throttle(fields: Fields, version: int, first: int) -> int:
    return fields.get_int("throttle_time_ms") if version >= first else 0


def _find_coordinator(fields: Fields, version: int) -> FindCoordinatorResponse:
    """v1-v3 answer at top level; v4+ in a ``coordinators`` batch, which must hold exactly
    the one key kgroup asked for [AC:920-924]."""
    throttle_time_ms = _throttle(fields, version, 1)
    if version >= 4:
        coordinators = fields.get_array("coordinators")
        if len(coordinators) != 1:
            raise fields.error(f"expected exactly one coordinator, got {len(coordinators)}")
        entry = coordinators[0]
        error_message = entry.get_nullable_str("error_message")
    else:
        entry = fields
        error_message = entry.get_nullable_str("error_message") if version >= 1 else None
    response = FindCoordinatorResponse(
        error_code=entry.get_int("error_code"),
        node_id=entry.get_int("node_id"),
        host=entry.get_str("host"),
        port=entry.get_int("port"),
        error_message=error_message,
        throttle_time_ms=throttle_time_ms,
    )
    if response.error_code == 0:
        # A coordinator kgroup cannot connect to is no answer: say so here, not as an
        # OverflowError from the socket layer later.
        if not response.host:
            raise fields.error("the coordinator's host is empty")
        if not 0 < response.port <= _MAX_PORT:
            raise fields.error(f"the coordinator's port {response.port} is not a TCP port")
    return response


def _join_group(fields: Fields, version: int) -> JoinGroupResponse:
    """v7+ may send a null protocol_type/protocol_name (on errors); below v7 protocol_type
    does not exist (None) and protocol_name is never null. skip_assignment is v9+."""
    members = tuple(
        JoinGroupMember(
            member_id=member.get_str("member_id"),
            group_instance_id=(
                member.get_nullable_str("group_instance_id") if version >= 5 else None
            ),
            metadata=member.get_bytes("metadata"),
        )
        for member in fields.get_array("members")
    )
    return JoinGroupResponse(
        error_code=fields.get_int("error_code"),
        generation_id=fields.get_int("generation_id"),
        protocol_type=fields.get_nullable_str("protocol_type") if version >= 7 else None,
        protocol_name=(
            fields.get_nullable_str("protocol_name")
            if version >= 7
            else fields.get_str("protocol_name")
        ),
        leader=fields.get_str("leader"),
        skip_assignment=fields.get_bool("skip_assignment") if version >= 9 else False,
        member_id=fields.get_str("member_id"),
        members=members,
        throttle_time_ms=_throttle(fields, version, 2),
    )


def _sync_group(fields: Fields, version: int) -> SyncGroupResponse:
    """protocol_type/protocol_name exist from v5; a null assignment reads as empty."""
    return SyncGroupResponse(
        error_code=fields.get_int("error_code"),
        protocol_type=fields.get_nullable_str("protocol_type") if version >= 5 else None,
        protocol_name=fields.get_nullable_str("protocol_name") if version >= 5 else None,
        assignment=fields.get_bytes("assignment", null_as_empty=True),
        throttle_time_ms=_throttle(fields, version, 1),
    )


def _heartbeat(fields: Fields, version: int) -> HeartbeatResponse:
    return HeartbeatResponse(
        error_code=fields.get_int("error_code"),
        throttle_time_ms=_throttle(fields, version, 1),
    )


def _leave_group(fields: Fields, version: int) -> LeaveGroupResponse:
    """Per-member results exist from v3; below that ``members`` is empty."""
    members: tuple[LeaveGroupMemberResult, ...] = ()
    if version >= 3:
        members = tuple(
            LeaveGroupMemberResult(
                member_id=member.get_str("member_id"),
                group_instance_id=member.get_nullable_str("group_instance_id"),
                error_code=member.get_int("error_code"),
            )
            for member in fields.get_array("members")
        )
    return LeaveGroupResponse(
        error_code=fields.get_int("error_code"),
        members=members,
        throttle_time_ms=_throttle(fields, version, 1),
    )


def _topic_name(topic: Fields, version: int, names: Names) -> str:
    """A topic's name in an OffsetCommit or OffsetFetch answer: as sent up to v9; from v10,
    the name of the id it carries, which the request must have named."""
    if version < TOPIC_ID_OFFSET_VERSION:
        return topic.get_str("name")
    topic_id = topic.get_uuid("topic_id")
    name = names.get(topic_id)
    if name is None:
        raise topic.error(f"topic id {topic_id} was not in the request")
    return name


def _offset_commit(fields: Fields, version: int, names: Names) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        results=tuple(
            (
                _topic_name(topic, version, names),
                part.get_int("partition_index"),
                part.get_int("error_code"),
            )
            for topic in fields.get_array("topics")
            for part in topic.get_array("partitions")
        ),
        throttle_time_ms=_throttle(fields, version, 3),
    )


def _fetched_topics(topics: list[Fields], version: int, names: Names) -> tuple[FetchedOffset, ...]:
    return tuple(
        FetchedOffset(
            topic=_topic_name(topic, version, names),
            partition=part.get_int("partition_index"),
            offset=part.get_int("committed_offset"),
            leader_epoch=part.get_int("committed_leader_epoch") if version >= 5 else -1,
            metadata=part.get_nullable_str("metadata"),
            error_code=part.get_int("error_code"),
        )
        for topic in topics
        for part in topic.get_array("partitions")
    )


def _offset_fetch(fields: Fields, version: int, names: Names) -> OffsetFetchResponse:
    """v8 answers per group: kgroup asks for one group, so exactly one entry must come back."""
    if version >= 8:
        groups = fields.get_array("groups")
        if len(groups) != 1:
            raise fields.error(f"expected exactly one entry in 'groups', got {len(groups)}")
        group = groups[0]
        return OffsetFetchResponse(
            error_code=group.get_int("error_code"),
            partitions=_fetched_topics(group.get_array("topics"), version, names),
            throttle_time_ms=fields.get_int("throttle_time_ms"),
        )
    return OffsetFetchResponse(
        error_code=fields.get_int("error_code") if version >= 2 else 0,
        partitions=_fetched_topics(fields.get_array("topics"), version, names),
        throttle_time_ms=_throttle(fields, version, 3),
    )


def _describe_groups(fields: Fields, version: int) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(
        groups=tuple(
            DescribedGroup(
                error_code=group.get_int("error_code"),
                group_id=group.get_str("group_id"),
                state=group.get_str("group_state"),
                protocol_type=group.get_str("protocol_type"),
                protocol=group.get_str("protocol_data"),
                members=tuple(
                    DescribedMember(
                        member_id=m.get_str("member_id"),
                        group_instance_id=(
                            m.get_nullable_str("group_instance_id") if version >= 4 else None
                        ),
                        client_id=m.get_str("client_id"),
                        client_host=m.get_str("client_host"),
                        metadata=m.get_bytes("member_metadata", null_as_empty=True),
                        assignment=m.get_bytes("member_assignment", null_as_empty=True),
                    )
                    for m in group.get_array("members")
                ),
            )
            for group in fields.get_array("groups")
        ),
        throttle_time_ms=_throttle(fields, version, 1),
    )


def _list_groups(fields: Fields, version: int) -> ListGroupsResponse:
    return ListGroupsResponse(
        error_code=fields.get_int("error_code"),
        groups=tuple(
            ListedGroup(
                group_id=g.get_str("group_id"),
                protocol_type=g.get_str("protocol_type"),
                state=g.get_str("group_state") if version >= 4 else None,
                group_type=g.get_str("group_type") if version >= 5 else None,
            )
            for g in fields.get_array("groups")
        ),
        throttle_time_ms=_throttle(fields, version, 1),
    )


#: The answers that may name topics by id (v10), read with the request's names.
_BY_TOPIC_ID: Final[dict[int, Callable[[Fields, int, Names], GroupResponse]]] = {
    8: _offset_commit,
    9: _offset_fetch,
}

_DECODERS: Final[dict[int, Callable[[Fields, int], GroupResponse]]] = {
    3: metadata,
    10: _find_coordinator,
    11: _join_group,
    12: _heartbeat,
    13: _leave_group,
    14: _sync_group,
    15: _describe_groups,
    16: _list_groups,
    32: describe_configs,
    68: consumer_group_heartbeat,
    69: consumer_group_describe,
}
