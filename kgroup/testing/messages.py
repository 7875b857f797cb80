"""kgroup's request and response values, for :class:`~kgroup.testing.MockTransport` handlers.

Each Kafka request a member sends is one frozen dataclass here (``JoinGroupRequest``,
``HeartbeatRequest``, ...) and each answer is its ``...Response``; error codes are
:class:`kgroup.ErrorCode` values.
"""

from __future__ import annotations

from .._core._messages import (
    CommitPartition,
    FetchedOffset,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

__all__ = [
    "CommitPartition",
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
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
]
