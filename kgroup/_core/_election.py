"""Leader election on the group protocol: the built-in :class:`LeaderElection`.

One item, ``"leader"``, is shared out: exactly one member holds it per generation. The
current holder keeps it for as long as it stays in the group (sticky); otherwise it goes
to the first member in the usual order (static members by instance id, then dynamic ones
by member id). Every member's assignment carries the leader's member id, instance id and
the ``info`` bytes the leader advertised (an address, say), so the others know who it is.

A static leader that restarts within its session gets its stored assignment back
without a rebalance (KIP-345), under a new member id; it then asks for one rebalance so
that every member learns the new id.

COOPERATIVE by default: a leader that stays keeps leading through rebalances, and a
hand-over is two-phase (the old leader revokes, rejoins; then the new one is assigned),
so no two members hold the token in one generation. Under EAGER every member gives the
token up before it rejoins. Either way a member acts as leader only while it holds the
token *and* its lease (``member.valid_until``) has not run out: the lease ends before the
coordinator can hand the token to another member (docs: "The lease as self-fencing").
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from .._errors import RemoteProtocolError
from ._assignors import RebalanceProtocol
from ._consumer_protocol import Reader, write_bytes, write_string
from ._group_protocol import (
    GroupProtocol,
    ProtocolAssignment,
    ProtocolMember,
    member_order,
    owners_by_claim,
)

__all__ = ["LEADER", "LeaderElection"]

_EPOCH = struct.Struct(">i")

#: The item the leader holds.
LEADER = "leader"


class LeaderElection(GroupProtocol):
    """Elect one leader among the members of a group (see the module docstring).

    ``info``: bytes this member advertises; the leader's reach every member
    (:attr:`leader_info`). ``cooperative`` (default True): keep leading through rebalances.

    After each rebalance :attr:`leader` is the leader's member id (``None`` before the
    first), :attr:`leader_instance` its ``group_instance_id`` and :attr:`leader_info` its
    info. Whether *this* member leads: ``LEADER in member.assignment``.
    """

    protocol_type = "kgroup-leader"
    name = "sticky-leader"

    def __init__(self, *, info: bytes = b"", cooperative: bool = True) -> None:
        if not isinstance(info, bytes):
            raise TypeError(f"info must be bytes, got {type(info).__name__}")
        self.info = info
        self.rebalance_protocol = (
            RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER
        )
        self.leader: str | None = None
        self.leader_instance: str | None = None
        self.leader_info: bytes = b""
        self.generation = -1
        self._holds = False
        self._epoch = 0

    def metadata(self) -> bytes:
        # int32 epoch, then the info: a new epoch changes this member's metadata, which is
        # what makes the coordinator rebalance a stable group when a follower rejoins.
        return _EPOCH.pack(self._epoch) + self.info

    def assign(self, members: Sequence[ProtocolMember]) -> Mapping[str, ProtocolAssignment]:
        ordered = member_order(members)
        if not ordered:
            return {}
        holder = owners_by_claim(ordered).get(LEADER)
        chosen = next((m for m in ordered if m.member_id == holder), ordered[0])
        data = bytearray()
        write_string(data, chosen.member_id, "leader", nullable=False)
        write_string(data, chosen.group_instance_id, "leader instance", nullable=True)
        write_bytes(data, chosen.metadata[_EPOCH.size :], "leader info")
        return {
            m.member_id: ProtocolAssignment(
                frozenset({LEADER}) if m is chosen else frozenset(), bytes(data)
            )
            for m in ordered
        }

    def on_assignment(self, assignment: ProtocolAssignment, generation: int) -> None:
        self.generation = generation
        self._holds = LEADER in assignment.items
        try:
            r = Reader(assignment.data, "LeaderElection assignment data")
            leader = r.string("leader", nullable=False)
            instance = r.string("leader instance", nullable=True)
            info = r.nullable_bytes("leader info") or b""
        except RemoteProtocolError:
            leader, instance, info = None, None, b""  # a leader we cannot read: unknown
        self.leader, self.leader_instance, self.leader_info = leader, instance, info

    def rebalance_needed(self, member_id: str) -> str | None:
        """A static leader restarted within its session gets its stored assignment back with
        a new member id and no rebalance (KIP-345): the data still names its old id, on
        every member. It then asks for a rebalance, so that the leader writes its new id."""
        if self._holds and self.leader is not None and self.leader != member_id:
            self._epoch += 1  # unchanged metadata would just get the stored assignment again
            return "the leader's member id changed (a static member restarted): rebalance"
        return None

    def __repr__(self) -> str:
        return f"LeaderElection(leader={self.leader!r}, generation={self.generation})"
