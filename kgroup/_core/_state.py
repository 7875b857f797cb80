"""Member states, the Generation triple, and the table of allowed state transitions.

All of a member's state changes go through :meth:`MemberCore._set_state`, which checks this
table: a transition that is not listed is a bug in kgroup, reported as LocalProtocolError
naming both states (h11's rule: the table is the documentation and the check).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["ALLOWED_TRANSITIONS", "NO_GENERATION", "Coordinator", "Generation", "MemberState"]


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
