"""kgroup's request and response values, for :class:`~kgroup.testing.MockTransport` handlers.

Each Kafka request a member sends is one frozen dataclass here (``JoinGroupRequest``,
``HeartbeatRequest``, ...; with ``group_protocol="consumer"``, ``ConsumerGroupHeartbeatRequest``
and ``MetadataRequest`` by topic id) and each answer is its ``...Response``; error codes are
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
from .._core._messages_848 import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicIdPartitions,
)
from .._core._messages_configs import (
    ConfigQuery,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedConfig,
    DescribedConfigs,
)
from .._core._messages_metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)

__all__ = [
    "CommitPartition",
    "ConfigQuery",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribedConfig",
    "DescribedConfigs",
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
    "MetadataBroker",
    "MetadataPartition",
    "MetadataRequest",
    "MetadataResponse",
    "MetadataTopic",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TopicIdPartitions",
]
