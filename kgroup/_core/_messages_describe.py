"""Version-free values of ConsumerGroupDescribe (API key 69), the KIP-848 ``consumer``
group's description: its state and epochs, and each member with its subscription, its
current assignment and its target assignment, both by topic id and name.

The wire layer (``kgroup._protocol``) negotiates the version and encodes them; fields a
version cannot carry come back with their defaults (``member_type=-1`` below v1).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MEMBER_TYPE_CLASSIC",
    "MEMBER_TYPE_CONSUMER",
    "MEMBER_TYPE_UNKNOWN",
    "NO_AUTHORIZED_OPERATIONS",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
    "DescribedTopicPartitions",
]

#: ``DescribedConsumerMember.member_type`` (KIP-1099, v1+): what the member speaks.
MEMBER_TYPE_UNKNOWN: Final = -1
MEMBER_TYPE_CLASSIC: Final = 0
MEMBER_TYPE_CONSUMER: Final = 1

#: ``authorized_operations`` when they were not asked for (Kafka's INT32 minimum).
NO_AUTHORIZED_OPERATIONS: Final = -(2**31)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeRequest:
    """ConsumerGroupDescribe (key 69), sent to the groups' coordinator."""

    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTopicPartitions:
    """The partitions of one topic in a described assignment, named by id and by name."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    #: What the member owns now, and what the coordinator wants it to own.
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]
    member_type: int = MEMBER_TYPE_UNKNOWN  # v1+


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerGroup:
    """One group. ``state`` is the coordinator's (``Empty``, ``Assigning``,
    ``Reconciling``, ``Stable``, ``Dead``, or ``""``); an unknown group answers
    GROUP_ID_NOT_FOUND (69) in ``error_code``."""

    error_code: int
    group_id: str
    error_message: str | None = None
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    authorized_operations: int = NO_AUTHORIZED_OPERATIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[DescribedConsumerGroup, ...] = ()
    throttle_time_ms: int = 0

    @property
    def error_code(self) -> int:
        """The first group's non-zero error code (0 when every group was described)."""
        return next((g.error_code for g in self.groups if g.error_code), 0)
