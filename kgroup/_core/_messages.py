"""Version-free group protocol messages: what the core asks to send, what it is told back.

The sans-I/O core speaks only in these values. The wire layer (``kgroup._protocol``) picks
the API version from the broker's ApiVersions ranges, encodes a request value into aiokafka
protocol structs, and decodes a response struct back into a response value here. Fields that
a negotiated version cannot carry come back with their documented defaults (for example
``protocol_type=None`` below JoinGroup v7, ``skip_assignment=False`` below v9).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = [
    "CLASSIC_COMMIT_MAX_VERSION",
    "MEMBER_EPOCH_OFFSET_VERSION",
    "TOPIC_ID_OFFSET_VERSION",
    "CommitPartition",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "FetchedOffset",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupMemberResult",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TopicIds",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorRequest:
    """FindCoordinator (key 10) for a group (key_type 0)."""

    group_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorResponse:
    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str | None = None
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupRequest:
    """JoinGroup (key 11). ``protocols`` are (name, metadata) in preference order."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResponse:
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupRequest:
    """SyncGroup (key 14). ``assignments`` are (member_id, bytes); empty for followers."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupResponse:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest:
    """Heartbeat (key 12)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse:
    error_code: int
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupRequest:
    """LeaveGroup (key 13) for one member (v3+ sends it as a one-entry batch)."""

    group_id: str
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupMemberResult:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupResponse:
    error_code: int
    members: tuple[LeaveGroupMemberResult, ...] = field(default_factory=tuple)
    throttle_time_ms: int = 0

    @property
    def effective_error(self) -> int:
        """The top-level error if set, else the first member error (spec §4.5)."""
        if self.error_code:
            return self.error_code
        for member in self.members:
            if member.error_code:
                return member.error_code
        return 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitPartition:
    """One partition's offset in an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


#: The newest OffsetCommit version a classic member sends. v9 has v8's layout, but a broker
#: answers a v9 commit for a group it no longer has with GROUP_ID_NOT_FOUND instead of v8's
#: ILLEGAL_GENERATION (Kafka 4.4.0 ``OffsetMetadataManager.validateOffsetCommit``), and the
#: classic reaction table (§4.6) is written for the latter.
CLASSIC_COMMIT_MAX_VERSION = 8
#: The first OffsetCommit and OffsetFetch version that carries a member epoch (KIP-848).
MEMBER_EPOCH_OFFSET_VERSION = 9
#: The first OffsetCommit and OffsetFetch version that names topics by id, not by name
#: (Kafka 4.2); a request reaches it only when it gives every topic's id (``topic_ids``).
TOPIC_ID_OFFSET_VERSION = 10

#: The topic id of each partition, ``(topic, partition, topic id)``, for OffsetCommit and
#: OffsetFetch from v10: the request names every topic by its id (two partitions of one
#: name may have two ids, a topic's before and after it was deleted and created again), and
#: the answer comes back by id, named again from this.
TopicIds = tuple[tuple[str, int, uuid.UUID], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequest:
    """OffsetCommit (key 8) under a group generation (spec §4.6), or, from a KIP-848
    ``consumer`` member (§10.8), under its member epoch: ``generation_id`` then holds the
    epoch and ``max_version`` is :data:`MEMBER_EPOCH_OFFSET_VERSION`, which the commit then
    also needs (UnsupportedVersion below it). ``max_version`` caps the version sent.

    ``topic_ids`` gives the topic id of every partition of ``partitions`` (or is empty): the
    commit then goes by topic id (v10) when the broker has it and ``max_version`` allows,
    and by name otherwise. By id, a commit for a topic deleted since fails with UNKNOWN_TOPIC_ID
    instead of being stored for a new topic of the same name."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    partitions: tuple[CommitPartition, ...]
    max_version: int = CLASSIC_COMMIT_MAX_VERSION
    topic_ids: TopicIds = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponse:
    """Per-partition results: ``(topic, partition, error_code)``."""

    results: tuple[tuple[str, int, int], ...] = ()
    throttle_time_ms: int = 0

    @property
    def error_code(self) -> int:
        """The first non-zero partition error (0 when every partition succeeded)."""
        return next((code for _, _, code in self.results if code), 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequest:
    """OffsetFetch (key 9) for some partitions of one group (spec §4.7); ``None``: every
    partition the group has committed offsets for (v2+). A KIP-848 ``consumer`` member sends
    its ``member_id`` and ``member_epoch`` (§10.8), which need v9; the defaults (no member,
    epoch -1) are what a classic member or an admin sends, at any version. ``topic_ids``
    as for :class:`OffsetCommitRequest`: with the topic id of every partition asked for,
    the fetch goes by topic id (v10) when the broker has it."""

    group_id: str
    partitions: tuple[tuple[str, int], ...] | None
    require_stable: bool = True
    member_id: str | None = None
    member_epoch: int = -1
    topic_ids: TopicIds = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    error_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponse:
    """``error_code`` is the group-level error (v2+); partitions carry their own."""

    error_code: int = 0
    partitions: tuple[FetchedOffset, ...] = ()
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsRequest:
    """DescribeGroups (key 15), sent to the groups' coordinator."""

    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup:
    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...] = ()
    throttle_time_ms: int = 0

    @property
    def error_code(self) -> int:
        return next((g.error_code for g in self.groups if g.error_code), 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsRequest:
    """ListGroups (key 16), sent to every broker (each lists the groups it coordinates)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str | None = None  # v4+
    group_type: str | None = None  # v5+: classic, consumer, share, streams


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsResponse:
    error_code: int = 0
    groups: tuple[ListedGroup, ...] = ()
    throttle_time_ms: int = 0
