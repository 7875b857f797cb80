"""kgroup: an asyncio-native Kafka group membership client.

async with GroupMember(GroupConfig(bootstrap_servers="localhost:9092",
                                   group_id="g", topics=["t"])) as member:
    assignment = await member.poll()
"""

from ._config import GroupConfig
from ._core._assignors import (
    Assignor,
    BaseAssignor,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
)
from ._core._consumer_protocol import Assignment, Subscription, TopicPartition
from ._core._election import LEADER, LeaderElection
from ._core._group_protocol import GroupProtocol, ProtocolAssignment, ProtocolMember
from ._core._racks import TopicLayout
from ._core._sharding import WorkSharding
from ._core._state import Generation, MemberState
from ._core._sticky import CooperativeStickyAssignor, StickyAssignor
from ._errors import (
    AssignmentError,
    AuthenticationFailed,
    CommitFailed,
    ConfigError,
    CoordinatorError,
    ErrorCode,
    FencedInstanceId,
    GroupAuthorizationFailed,
    GroupError,
    GroupMaxSizeReached,
    InconsistentGroupProtocol,
    InternalError,
    InvalidGroupId,
    InvalidSessionTimeout,
    KGroupError,
    ListenerError,
    LocalProtocolError,
    OffsetsError,
    ProtocolViolation,
    RebalanceInProgress,
    RemoteProtocolError,
    TopicAuthorizationFailed,
    UnexpectedBrokerError,
    UnsupportedVersion,
    UsageError,
)
from ._listener import ItemListener, RebalanceListener
from ._runtime._consumer import GroupConsumer
from ._runtime._consumer_assignment import NoOffsetForPartition
from ._runtime._list_offsets import OffsetAndTimestamp
from ._runtime._member import EventHook, GroupMember
from ._runtime._offsets import OffsetAndMetadata
from ._stats import ConsumerStats, MemberStats, Percentiles

__all__ = [
    "LEADER",
    "Assignment",
    "AssignmentError",
    "Assignor",
    "AuthenticationFailed",
    "BaseAssignor",
    "CommitFailed",
    "ConfigError",
    "ConsumerStats",
    "CooperativeStickyAssignor",
    "CoordinatorError",
    "ErrorCode",
    "EventHook",
    "FencedInstanceId",
    "Generation",
    "GroupAuthorizationFailed",
    "GroupConfig",
    "GroupConsumer",
    "GroupError",
    "GroupMaxSizeReached",
    "GroupMember",
    "GroupProtocol",
    "InconsistentGroupProtocol",
    "InternalError",
    "InvalidGroupId",
    "InvalidSessionTimeout",
    "ItemListener",
    "KGroupError",
    "LeaderElection",
    "ListenerError",
    "LocalProtocolError",
    "MemberState",
    "MemberStats",
    "MemberSubscription",
    "NoOffsetForPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetsError",
    "Percentiles",
    "ProtocolAssignment",
    "ProtocolMember",
    "ProtocolViolation",
    "RangeAssignor",
    "RebalanceInProgress",
    "RebalanceListener",
    "RebalanceProtocol",
    "RemoteProtocolError",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicAuthorizationFailed",
    "TopicLayout",
    "TopicPartition",
    "UnexpectedBrokerError",
    "UnsupportedVersion",
    "UsageError",
    "WorkSharding",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__"):
        try:
            _obj.__module__ = "kgroup"
        except (AttributeError, TypeError):
            pass
del _name, _obj
