"""What the core asks its drivers to do: the actions, as frozen values.

The join driver (the application's ``poll()``) gets a :data:`JoinAction` from
``MemberCore.next_join_action`` and, inside the Join->Sync chain, a :data:`ChainAction`; the
heartbeat driver gets a :data:`HeartbeatAction` from ``MemberCore.heartbeat_action``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import KGroupError
from ._messages import (
    HeartbeatRequest,
    JoinGroupMember,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from ._state import Generation

__all__ = [
    "AwaitJoin",
    "AwaitLeaseProof",
    "ChainAction",
    "CompleteJoin",
    "ComputeAssignment",
    "FindCoordinator",
    "HeartbeatAction",
    "HeartbeatDisabled",
    "HeartbeatFindCoordinator",
    "HeartbeatWait",
    "Idle",
    "JoinAction",
    "PollTimeoutLeave",
    "PrepareJoin",
    "RaiseFatal",
    "SendHeartbeat",
    "SendJoinGroup",
    "SendSyncGroup",
    "Sleep",
]

# ---------------------------------------------------------------------------------------------
# Actions for the join driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do: the member is STABLE and no rejoin is needed."""


@dataclass(frozen=True, slots=True)
class FindCoordinator:
    """The coordinator is unknown: run (or join) the FindCoordinator lookup."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Back off until ``until`` (ms) before asking again."""

    until: float


@dataclass(frozen=True, slots=True)
class AwaitLeaseProof(Sleep):
    """SyncGroup succeeded, but the lease the new assignment would start with has already
    lapsed (no proof of a recent session refresh): a heartbeat is due now. Wake the
    heartbeat driver, then ask again once ``member.lease_renewed`` is emitted (or at
    ``until``, a retry-backoff from now). A subclass of :class:`Sleep`, so a driver that
    only knows Sleep still works (it polls every retry backoff)."""


@dataclass(frozen=True, slots=True)
class PrepareJoin:
    """Run the pre-join hook once for this rebalance: release owned partitions as *lost* if
    the Generation was reset, else as *revoked* (spec §6.2), then ask again."""

    lost: bool
    generation: Generation
    #: The release is due to the member's lease running out (the hold ended at the deadline).
    lease_expired: bool = False


@dataclass(frozen=True, slots=True)
class SendJoinGroup:
    request: JoinGroupRequest
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class AwaitJoin:
    """A Join/Sync chain is in flight: wait for it (never send a second JoinGroup)."""


@dataclass(frozen=True, slots=True)
class CompleteJoin:
    """SyncGroup succeeded: install ``assignment`` and run the completion callbacks, then call
    :meth:`MemberCore.join_completed` (spec §6.4)."""

    generation: Generation
    assignment: bytes
    is_leader: bool


@dataclass(frozen=True, slots=True)
class RaiseFatal:
    error: KGroupError


JoinAction = (
    Idle
    | FindCoordinator
    | Sleep
    | AwaitLeaseProof
    | PrepareJoin
    | SendJoinGroup
    | AwaitJoin
    | CompleteJoin
    | RaiseFatal
)

# Actions inside the Join->Sync chain (returned by on_join_response / assignment_computed).


@dataclass(frozen=True, slots=True)
class ComputeAssignment:
    """This member leads: compute an assignment for every member, then report it with
    :meth:`MemberCore.assignment_computed`."""

    generation: Generation
    protocol_name: str
    members: tuple[JoinGroupMember, ...]


@dataclass(frozen=True, slots=True)
class SendSyncGroup:
    request: SyncGroupRequest
    timeout_ms: int


ChainAction = ComputeAssignment | SendSyncGroup | None

# ---------------------------------------------------------------------------------------------
# Actions for the heartbeat driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatDisabled:
    """Not in a generation that heartbeats: park until enabled, or until ``until`` (ms) when
    it is set: the member still holds an assignment whose lease runs out then, and the core
    must be asked again at that time so that it notices (:meth:`MemberCore.check_lease`)."""

    until: float | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFindCoordinator:
    """Coordinator unknown: start a lookup if none is running, then wait until ``until``."""

    until: float


@dataclass(frozen=True, slots=True)
class HeartbeatWait:
    """Nothing due before ``until`` (ms); a wake-up may end the wait early."""

    until: float


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    request: HeartbeatRequest
    generation: Generation
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class PollTimeoutLeave:
    """The poll timer expired: the member left its generation. Send ``leave`` if not None
    (dynamic members), best effort."""

    leave: LeaveGroupRequest | None


HeartbeatAction = (
    HeartbeatDisabled | HeartbeatFindCoordinator | HeartbeatWait | SendHeartbeat | PollTimeoutLeave
)
