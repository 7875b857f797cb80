"""What the consumer-protocol core asks its two drivers to do, as frozen values.

The **heartbeat driver** (a task beside ``poll()``) asks ``heartbeat_action(now)`` and gets a
:data:`HeartbeatAction`; the **poll driver** (the application's ``poll()``, where every
callback runs, as KIP-62 wants) asks ``poll_action(now)`` and gets a :data:`PollAction`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .._errors import KGroupError
from ._consumer_protocol import TopicPartition
from ._kip848_state import IdPartition
from ._messages_848 import ConsumerGroupHeartbeatRequest

__all__ = [
    "HeartbeatAction",
    "HeartbeatFindCoordinator",
    "HeartbeatIdle",
    "HeartbeatWait",
    "PollAction",
    "PollIdle",
    "RaiseError",
    "Reconcile",
    "ReleaseLost",
    "ReleaseOnLeave",
    "ResolveTopics",
    "SendConsumerHeartbeat",
]

# ---------------------------------------------------------------------------------------------
# The heartbeat driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatIdle:
    """No heartbeat in this state (UNSUBSCRIBED, FENCED, STALE, FATAL, or waiting for the
    leave callbacks): park until woken, or until ``until`` (ms) when set (the lease of an
    assignment still held runs out then)."""

    until: float | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFindCoordinator:
    """The coordinator is unknown: look it up (one lookup at a time), no earlier than
    ``until``."""

    until: float


@dataclass(frozen=True, slots=True)
class HeartbeatWait:
    """Nothing due before ``until`` (ms); a wake-up may end the wait early."""

    until: float


@dataclass(frozen=True, slots=True)
class SendConsumerHeartbeat:
    """Send ``request`` now (the core counts it as sent). ``leave``: a leave heartbeat,
    whose answer is not awaited: the runtime may send it and drop the answer."""

    request: ConsumerGroupHeartbeatRequest
    sent_at: float
    timeout_ms: int
    leave: bool = False


HeartbeatAction = HeartbeatIdle | HeartbeatFindCoordinator | HeartbeatWait | SendConsumerHeartbeat

# ---------------------------------------------------------------------------------------------
# The poll driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PollIdle:
    """Nothing to do in ``poll()`` now; ask again when woken or at ``until`` (ms)."""

    until: float | None = None


@dataclass(frozen=True, slots=True)
class ResolveTopics:
    """Look up the names of these topic ids (Metadata), then report them with
    ``topics_resolved`` (or ``topics_unresolved`` if the lookup failed)."""

    topic_ids: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Move the member from what it owns to ``owned_after`` (spec §10.5): stop fetching
    ``revoked`` (committing first with auto-commit), call ``on_partitions_revoked(revoked)``
    if it is not empty, install the new set, call ``on_partitions_assigned(assigned)``
    (even when empty), then report ``reconciled(self, now)``, also when a callback raised.
    ``epoch`` is the member epoch a commit before the revoke must carry."""

    revoked: frozenset[TopicPartition]
    assigned: frozenset[TopicPartition]
    owned_after: frozenset[IdPartition]
    epoch: int
    token: int


@dataclass(frozen=True, slots=True)
class ReleaseLost:
    """The member lost its partitions (fenced, session or lease expired, or it stopped
    polling): call ``on_partitions_lost(partitions)`` (never a commit), then report
    ``lost_released(now)``."""

    partitions: frozenset[TopicPartition]
    reason: str


@dataclass(frozen=True, slots=True)
class ReleaseOnLeave:
    """close() leaves the group: release the partitions (revoked when the member still has
    an epoch, so a final commit can go out first; lost otherwise), then report
    ``leave_prepared(now)``."""

    partitions: frozenset[TopicPartition]
    lost: bool


@dataclass(frozen=True, slots=True)
class RaiseError:
    """Raise ``error`` from ``poll()``. ``fatal``: the member is finished (FATAL); otherwise
    it is a one-time report and the member stays in the group (TOPIC_AUTHORIZATION_FAILED)."""

    error: KGroupError
    fatal: bool


PollAction = PollIdle | ResolveTopics | Reconcile | ReleaseLost | ReleaseOnLeave | RaiseError
