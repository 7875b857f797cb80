"""The consumer-protocol member's reactions to ConsumerGroupHeartbeat error codes (§10.7).

One table, :data:`HEARTBEAT_REACTIONS`; a code without a row is fatal (the Java client's
default branch). The rows follow Kafka 4.4.0's client (``next-protocols.md`` §1), which
adds two to the spec's table: TOPIC_AUTHORIZATION_FAILED is reported without leaving the
group, and GROUP_ID_NOT_FOUND is fatal except while the member leaves (and, below, for a
join).

Two deviations (docs/design/deviations.md):
- UNRELEASED_INSTANCE_ID is retried with backoff for up to two broker session timeouts
  (:data:`UNRELEASED_WINDOW_SESSIONS`) before it is fatal (row 16). The instance id may
  still be held by this very member's previous incarnation (a lost join answer, or a
  rejoin after fencing), which the broker releases when that session expires; the Java
  client dies at once. When the broker's message names this member's own id as the
  holder (:func:`instance_holder`), the member retries until the instance is released,
  with no limit: member ids are generated per member (KIP-1082), so no other live
  process can be that holder.
- GROUP_ID_NOT_FOUND answering a join (epoch 0) is retried the same way (row 19): Kafka
  answers it when it cannot convert a classic group yet: while its current assignments
  carry user data (a custom assignor's, or the follow-up mark of a cooperative-sticky
  generation from a kgroup leader before 2026-11-26, which wrote it there).
"""

from __future__ import annotations

import enum
import re

from .._errors import ErrorCode

__all__ = [
    "HEARTBEAT_REACTIONS",
    "UNRELEASED_WINDOW_SESSIONS",
    "HeartbeatReaction",
    "heartbeat_reaction",
    "instance_holder",
]

#: How many broker session timeouts a run of UNRELEASED_INSTANCE_ID answers (naming
#: another member as the holder) must span before the member gives up (deviation 16).
#: One would prove a live holder, were it not for coordinator loads: Kafka re-arms every
#: member's session when a coordinator loads the group, and a load between two of the
#: member's requests (the coordinator moved away and back) is invisible to it. Two
#: sessions cover one such load within the first; a live duplicate is reported a session
#: later than one would (simulation consumer seed 13693: a crashed predecessor's session
#: re-armed by a load 8.8 s into a 10 s run).
UNRELEASED_WINDOW_SESSIONS = 2


class HeartbeatReaction(enum.Enum):
    """What a ConsumerGroupHeartbeat answer means for the member."""

    #: Apply the answer (§10.5).
    OK = "ok"
    #: Forget the coordinator (close its connection), reset the backoff, look it up again;
    #: the next heartbeat is full.
    COORDINATOR_MOVED = "coordinator moved"
    #: Back off and retry with a full heartbeat.
    RETRY_BACKOFF = "retry after backoff"
    #: Fenced: release the partitions as lost, rejoin at epoch 0 with the same member id,
    #: without backoff (or complete the leave, if leaving).
    FENCED = "fenced"
    #: Another live member holds the instance id: retry until the session timeout has
    #: passed since the first such answer, then fatal (deviation, see module docstring).
    UNRELEASED_INSTANCE = "instance id not released"
    #: Reported once from ``poll()``; the member stays in the group and retries.
    REPORT_TOPIC_AUTHORIZATION = "topic authorization failed"
    #: Ignored while the member is not in the group (or leaving); fatal otherwise.
    GROUP_NOT_FOUND = "group id not found"
    #: The broker does not offer (or has not enabled) the consumer protocol: fatal, with a
    #: hint to use the classic protocol, or the opt-in fallback.
    UNSUPPORTED = "unsupported"
    #: Fatal, raised from ``poll()``.
    FATAL = "fatal"


E = ErrorCode
R = HeartbeatReaction

HEARTBEAT_REACTIONS: dict[int, HeartbeatReaction] = {
    E.NONE: R.OK,
    E.NOT_COORDINATOR: R.COORDINATOR_MOVED,
    E.COORDINATOR_NOT_AVAILABLE: R.COORDINATOR_MOVED,
    E.COORDINATOR_LOAD_IN_PROGRESS: R.RETRY_BACKOFF,
    E.FENCED_MEMBER_EPOCH: R.FENCED,
    E.UNKNOWN_MEMBER_ID: R.FENCED,
    E.UNRELEASED_INSTANCE_ID: R.UNRELEASED_INSTANCE,
    E.TOPIC_AUTHORIZATION_FAILED: R.REPORT_TOPIC_AUTHORIZATION,
    E.GROUP_ID_NOT_FOUND: R.GROUP_NOT_FOUND,
    E.UNSUPPORTED_VERSION: R.UNSUPPORTED,
    # Named by the spec as fatal; listed so the table reads like §10.7.
    E.FENCED_INSTANCE_ID: R.FATAL,
    E.GROUP_AUTHORIZATION_FAILED: R.FATAL,
    E.INVALID_REQUEST: R.FATAL,
    E.GROUP_MAX_SIZE_REACHED: R.FATAL,
    E.UNSUPPORTED_ASSIGNOR: R.FATAL,
    E.INVALID_REGULAR_EXPRESSION: R.FATAL,
}


def heartbeat_reaction(code: int) -> HeartbeatReaction:
    """The reaction to ``code``; fatal when the table has no row for it."""
    return HEARTBEAT_REACTIONS.get(code, R.FATAL)


#: Kafka's UNRELEASED_INSTANCE_ID message (4.0 to 4.4.0, GroupMetadataManager): "Static
#: member M with instance id I cannot join the group because the instance id is owned by
#: H member."
_HOLDER = re.compile(r"instance id is owned by (\S+) member")


def instance_holder(message: str | None) -> str | None:
    """The member id an UNRELEASED_INSTANCE_ID answer names as the instance's holder, or
    None when the message does not say (another broker, another wording)."""
    if not message:
        return None
    found = _HOLDER.search(message)
    return None if found is None else found.group(1)
