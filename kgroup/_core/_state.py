"""Member states, rebalance-chain phases, the Generation triple, and their transition tables.

Two checked machines live here:

- :class:`MemberState` (spec §2.1) with :data:`ALLOWED_TRANSITIONS`: every member state
  change goes through ``MemberCore._set_state``;
- :class:`ChainPhase` with :data:`ALLOWED`: where the Join->Sync->completion chain stands,
  every move going through ``MemberCore._enter``.

A transition that is not listed is a bug in kgroup, reported as LocalProtocolError naming
both ends (h11's rule: the table is the documentation and the check).

What is a phase and what is not
-------------------------------
The chain phase replaces a phase string and one boolean that only ever qualified it:

- "a lease proof was requested for this completion" is the phase
  :attr:`ChainPhase.AWAITING_PROOF` (it was only ever true between a successful SyncGroup and
  the completion, and was cleared whenever the chain left that span).

These stay independent facts beside the phase, because they outlive a chain or change
while one is in flight:

- ``rejoin_needed`` / ``rejoin_reason`` (spec §1.2): set by any trigger at any phase (a
  heartbeat answer while SyncGroup is in flight), cleared only by a successful SyncGroup.
- ``needs_join_prepare`` (spec §1.2): the pre-join hook is owed. It is set by a Generation
  reset, which may happen in any phase (the heartbeat driver resets the member while its
  SyncGroup is in flight), and it is cleared before JoinGroup is sent; a chain restarted by
  a retriable error runs no second hook, so "IDLE" alone cannot tell whether it is owed.
- ``heartbeat_enabled``: the heartbeat driver's own latch. JoinGroup's answer sets it; the
  heartbeat driver clears it lazily when it next runs and finds the member UNJOINED or
  PREPARING, so it is not a function of the member state at every instant (``poll()``
  wakes the heartbeat driver through it).
- the default ``holds_assignment`` (an assignment installed by CompleteJoin and not yet
  released by a PrepareJoin): it spans the IDLE phase between two rebalances.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "ALLOWED",
    "ALLOWED_TRANSITIONS",
    "CHAIN_IN_FLIGHT",
    "CHAIN_SYNCED",
    "NO_GENERATION",
    "ChainPhase",
    "Coordinator",
    "Generation",
    "MemberState",
]


class MemberState(enum.Enum):
    """The classic member states (spec §2.1)."""

    #: Not part of a generation: never joined, reset by an error, or left.
    UNJOINED = "UNJOINED"
    #: JoinGroup sent, no response processed yet. No heartbeats.
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    #: JoinGroup answered, SyncGroup outstanding. Heartbeats run.
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    #: SyncGroup succeeded: the member owns its assignment and heartbeats.
    STABLE = "STABLE"

    def __repr__(self) -> str:
        return f"MemberState.{self.name}"


_U, _P, _C, _S = (
    MemberState.UNJOINED,
    MemberState.PREPARING_REBALANCE,
    MemberState.COMPLETING_REBALANCE,
    MemberState.STABLE,
)

#: state -> the states it may move to (spec §2.2, T1-T13).
ALLOWED_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    # T1 JoinGroup sent.
    _U: frozenset({_P}),
    # T2 joined; T3 stays (MEMBER_ID_REQUIRED re-sends); T4/T12 reset; fatal join error.
    _P: frozenset({_C, _P, _U}),
    # T7 synced; T5/T6 restart from JoinGroup; T8/T10/T12 reset.
    _C: frozenset({_S, _P, _U}),
    # T1 rejoin; T10/T11/T12 reset.
    _S: frozenset({_P, _U}),
}


class ChainPhase(enum.Enum):
    """Where the rebalance chain (JoinGroup -> [assign] -> SyncGroup -> completion) stands."""

    #: No chain: nothing sent, or the last chain ended (completed, failed or abandoned).
    IDLE = "IDLE"
    #: JoinGroup sent, its answer not processed yet (never a second JoinGroup meanwhile).
    JOINING = "JOINING"
    #: This member leads: the runtime computes the assignment (``assignment_computed``).
    ASSIGNING = "ASSIGNING"
    #: SyncGroup sent, its answer not processed yet.
    SYNCING = "SYNCING"
    #: SyncGroup answered NONE: the assignment waits to be handed out as CompleteJoin.
    SYNCED = "SYNCED"
    #: SYNCED, but the lease the assignment would start with has lapsed: a heartbeat was
    #: made due at once and the completion waits for its proof.
    AWAITING_PROOF = "AWAITING_PROOF"
    #: CompleteJoin handed out; ``join_completed`` not called yet. A re-run (the completion's
    #: caller was cancelled) hands out the same assignment again.
    COMPLETING = "COMPLETING"

    def __repr__(self) -> str:
        return f"ChainPhase.{self.name}"


_IDLE, _JOIN, _ASSIGN, _SYNC, _SYNCED, _PROOF, _COMPLETE = (
    ChainPhase.IDLE,
    ChainPhase.JOINING,
    ChainPhase.ASSIGNING,
    ChainPhase.SYNCING,
    ChainPhase.SYNCED,
    ChainPhase.AWAITING_PROOF,
    ChainPhase.COMPLETING,
)

#: phase -> the phases it may move to. Every in-flight phase may fall back to IDLE: a
#: retriable or fatal answer, a transport failure, a reset by leaving, or the runtime
#: abandoning the chain (close).
ALLOWED: dict[ChainPhase, frozenset[ChainPhase]] = {
    # T1: JoinGroup sent (the only way into a chain).
    _IDLE: frozenset({_JOIN}),
    # T2 leader / T2 follower (SyncGroup sent at once); T3-T6, fatal: back to IDLE.
    _JOIN: frozenset({_ASSIGN, _SYNC, _IDLE}),
    # Assignment computed: SyncGroup sent; assignor failure, transport failure, close: IDLE.
    _ASSIGN: frozenset({_SYNC, _IDLE}),
    # T7 synced; T5/T6/T8, fatal, close: IDLE.
    _SYNC: frozenset({_SYNCED, _IDLE}),
    # Completion handed out; its lease lapsed (proof needed); sanity check failed (§2.2).
    _SYNCED: frozenset({_COMPLETE, _PROOF, _IDLE}),
    # The proof arrived: completion handed out; sanity check failed.
    _PROOF: frozenset({_COMPLETE, _IDLE}),
    # Re-run of an abandoned completion; join_completed or a failed sanity check: IDLE.
    _COMPLETE: frozenset({_COMPLETE, _IDLE}),
}

#: A request of the chain is in flight (or the leader is assigning): wait for it.
CHAIN_IN_FLIGHT = frozenset({_JOIN, _ASSIGN, _SYNC})
#: SyncGroup succeeded and the completion is not done yet.
CHAIN_SYNCED = frozenset({_SYNCED, _PROOF, _COMPLETE})


@dataclass(frozen=True, slots=True)
class Generation:
    """``(generation_id, member_id, protocol_name)``: equal only when all three are (§1.1)."""

    generation_id: int
    member_id: str
    protocol_name: str | None

    @property
    def is_reset(self) -> bool:
        """True after a reset (or before the first join): owned partitions are *lost*."""
        return self.generation_id == -1 or self.member_id == ""


NO_GENERATION = Generation(-1, "", None)


@dataclass(frozen=True, slots=True, eq=False)
class Coordinator:
    """One discovery of the group coordinator. Compared by identity: a rediscovery of the
    same broker is a new value, so a connection made for an older one is never reused."""

    node_id: int
    host: str
    port: int
