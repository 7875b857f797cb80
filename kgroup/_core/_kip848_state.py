"""States, settings and transition table of a KIP-848 ``consumer``-protocol member (spec §10.4).

Every state change of :class:`~kgroup._core._kip848_member.ConsumerProtocolMember` goes
through its ``_set_state``, checked against :data:`TRANSITIONS`: a move the table does not
list is a bug in kgroup, raised as LocalProtocolError naming both ends (the table is the
documentation and the check, as for the classic member in :mod:`kgroup._core._state`).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "IN_GROUP",
    "TRANSITIONS",
    "ConsumerProtocolSettings",
    "ConsumerState",
    "IdPartition",
]


class ConsumerState(enum.Enum):
    """The member states of spec §10.4 (Java's ``MemberState``)."""

    #: Not in the group: before the first poll, or after a completed leave.
    UNSUBSCRIBED = "UNSUBSCRIBED"
    #: Joining with epoch 0: full heartbeats, sent at once.
    JOINING = "JOINING"
    #: The target assignment differs from what the member owns: the poll driver reconciles.
    RECONCILING = "RECONCILING"
    #: Reconciled: the next heartbeat, sent at once, reports the partitions now owned.
    ACKNOWLEDGING = "ACKNOWLEDGING"
    #: Owns its target assignment; heartbeats on the broker's interval.
    STABLE = "STABLE"
    #: The broker no longer knows this member at its epoch: the partitions are released as
    #: lost (poll driver), then the member rejoins with epoch 0 and the same member id.
    FENCED = "FENCED"
    #: Closing: the revoke (or lost) callbacks run before the leave heartbeat.
    PREPARE_LEAVING = "PREPARE_LEAVING"
    #: The leave heartbeat (epoch -1 or -2) goes out at once; its answer is not awaited.
    LEAVING = "LEAVING"
    #: Left because the application stopped polling: the partitions are released as lost,
    #: and the next poll rejoins.
    STALE = "STALE"
    #: An unrecoverable error: raised from ``poll()``; terminal.
    FATAL = "FATAL"


S = ConsumerState

#: Allowed transitions (from -> to). FATAL is reachable from everywhere.
TRANSITIONS: dict[ConsumerState, frozenset[ConsumerState]] = {
    S.UNSUBSCRIBED: frozenset({S.JOINING}),
    S.JOINING: frozenset(
        {S.RECONCILING, S.ACKNOWLEDGING, S.STABLE, S.FENCED, S.PREPARE_LEAVING, S.LEAVING}
    ),
    S.RECONCILING: frozenset({S.ACKNOWLEDGING, S.FENCED, S.PREPARE_LEAVING, S.LEAVING}),
    S.ACKNOWLEDGING: frozenset({S.STABLE, S.RECONCILING, S.FENCED, S.PREPARE_LEAVING, S.LEAVING}),
    S.STABLE: frozenset({S.RECONCILING, S.ACKNOWLEDGING, S.FENCED, S.PREPARE_LEAVING, S.LEAVING}),
    S.FENCED: frozenset({S.JOINING, S.PREPARE_LEAVING, S.UNSUBSCRIBED}),
    S.PREPARE_LEAVING: frozenset({S.LEAVING, S.UNSUBSCRIBED}),
    S.LEAVING: frozenset({S.UNSUBSCRIBED, S.STALE}),
    S.STALE: frozenset({S.JOINING, S.PREPARE_LEAVING, S.UNSUBSCRIBED}),
    S.FATAL: frozenset(),
}

#: The states in which the member is in the group and must keep its session alive.
IN_GROUP = frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE, S.PREPARE_LEAVING})


class IdPartition(NamedTuple):
    """One partition of a topic named by its id (how the broker speaks of assignments)."""

    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerProtocolSettings:
    """What the consumer-protocol core reads (times in milliseconds).

    - ``group_id``, ``member_id`` (client-generated, KIP-1082: the same for the member's
      lifetime, across fencing and rejoins), ``instance_id`` (static membership).
    - ``topics`` or ``topic_regex`` (broker-side RE2/J, must match whole names): the
      subscription; ``server_assignor`` (None: the broker's default), ``rack_id``.
    - ``rebalance_timeout_ms``: sent on join; the broker's revocation deadline. Kafka sends
      ``max.poll.interval.ms``, and so does kgroup; ``max_poll_interval_ms`` is the poll
      timer.
    - ``session_timeout_ms``: the **broker's** consumer session timeout (a broker or group
      config, not sent); the lease bounds every assignment by it.
    - ``retry_backoff_ms``, ``retry_backoff_max_ms``, ``request_timeout_ms``.
    - ``pickup_first_ms``: after an answer that brings a new assignment (or the join), the
      member heartbeats again at doubling gaps from this one until the gap reaches the
      broker's interval, so that partitions another member is still revoking reach it in
      the answer to one of these rather than a whole interval later (None: only at the
      interval, as Kafka's client; deviations.md row 18).
    - ``pickup_hold_ms``, ``pickup_hold_gap_ms``: for ``pickup_hold_ms`` after that answer
      the gaps stop growing at ``pickup_hold_gap_ms``, then double on to the interval (0:
      no hold). Only when that gap is at most a quarter of the broker's interval: with a
      shorter interval the grid's ticks come nearly as often. A pickup never passes the
      next grid tick, which a handoff on close relies on.
    - ``heartbeat_grid``: regular heartbeats fall on the group's grid (:mod:`._kip848_grid`,
      deviations.md row 22); False: one interval after the previous send, as Kafka's client.
    - ``handoff_lead_ms``: how long before a grid tick a close with a handoff starts
      releasing its partitions, so that its leave heartbeat reaches the broker before the
      others' heartbeats on that tick.
    - ``leave_epoch_on_close``: the epoch close() sends (-1 leave, -2 static member leaving
      for now) or None for no leave heartbeat (KIP-1092 "remain in group", dynamic member).
    """

    group_id: str
    member_id: str
    instance_id: str | None = None
    topics: tuple[str, ...] = ()
    topic_regex: str | None = None
    server_assignor: str | None = None
    rack_id: str | None = None
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 45_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    request_timeout_ms: int = 30_000
    leave_epoch_on_close: int | None = -1
    pickup_first_ms: int | None = 25
    pickup_hold_ms: int = 2_000
    pickup_hold_gap_ms: int = 200
    heartbeat_grid: bool = True
    handoff_lead_ms: int = 50

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    @property
    def rebalance_timeout_ms(self) -> int:
        return self.max_poll_interval_ms

    @property
    def poll_timeout_leave_epoch(self) -> int:
        """The epoch of the leave heartbeat sent when the poll timer expires (§10.6)."""
        return -2 if self.is_static else -1
