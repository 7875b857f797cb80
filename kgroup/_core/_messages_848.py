"""Version-free messages of the KIP-848 ``consumer`` group protocol.

The sans-I/O consumer-protocol member (``kgroup._core._kip848_member``) speaks only in these
values; the wire layer (``kgroup._protocol``) negotiates the version and encodes them
(spec §10.2, ``next-protocols.md`` §1). Topic ids are :class:`uuid.UUID`; an assignment is
keyed by topic id and resolved to names through Metadata by the runtime.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "LEAVE_STATIC_EPOCH",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "TopicIdPartitions",
]

#: MemberEpoch values with a meaning of their own (ConsumerGroupHeartbeatRequest.java).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicIdPartitions:
    """The partitions of one topic, named by its id."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat (key 68). ``None`` means "unchanged" for every optional field
    (and ``-1`` for ``rebalance_timeout_ms``); a *full* request (epoch 0, or all of
    ``rebalance_timeout_ms``, ``subscribed_topic_names`` and ``topic_partitions`` given)
    makes the broker answer with the whole assignment. ``subscribed_topic_regex`` needs v1."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: tuple[TopicIdPartitions, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatResponse:
    """The answer: ``assignment`` None means "no change"; otherwise it is the complete set
    of partitions the member may own now (not a delta)."""

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicIdPartitions, ...] | None = None
    throttle_time_ms: int = 0
