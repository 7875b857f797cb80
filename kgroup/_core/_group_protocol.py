"""Groups that are not consumers: a membership protocol of the application's own.

Kafka's group protocol is a general membership service: JoinGroup carries a
``protocol_type`` and opaque metadata, SyncGroup hands out opaque assignments, and only the
members read either (Kafka Connect and Schema Registry run their own types on it). A
:class:`GroupProtocol` is such a type: what a member offers (its metadata) and how the
leader shares things out (its :meth:`~GroupProtocol.assign`). The things shared out are
**items**, named by strings: work shards, resources, a leadership token.

kgroup gives a GroupProtocol the same member, heartbeat, lease and listener machinery as
a consumer: :class:`ProtocolEmbedding` plays the part :class:`ConsumerEmbedding` plays for
partitions. The listener's ``on_partitions_assigned`` / ``_revoked`` / ``_lost`` receive
item names, with the consumer's semantics:

- **EAGER** (the default): every member gives up all its items before it rejoins;
- **COOPERATIVE**: members keep their items through a rebalance and give up only those
  that move. The leader runs the protocol's ``assign`` for a *target* and kgroup then
  withholds every item that would move from a live owner to another member, exactly as the
  cooperative-sticky assignor does for partitions: the owner revokes it and rejoins at
  once, and the follow-up rebalance hands it over. An item is never held by two members in
  the same generation, whatever ``assign`` returns.

Wire format (kgroup's, versioned; all classic Kafka encoding, big-endian)::

    metadata    int16 version (0) | bytes user_metadata | [string] owned | int32 generation
    assignment  int16 version (0) | [string] items | bytes data | int8 flags

Assignment flags: bit 0, a follow-up rebalance is certain (someone gives up an item it
claimed; see ``FOLLOW_UP_MARKER`` in ``_embedding``). Other bits are
reserved (written 0, ignored).

Readers accept higher versions by reading the v0 fields and ignoring what follows. Every
defect in peer bytes is a RemoteProtocolError naming the field and the offset.
"""

from __future__ import annotations

import abc
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .._errors import AssignmentError, ConfigError, RemoteProtocolError
from ._assignors import RebalanceProtocol
from ._consumer_protocol import Reader, pack_int32, write_bytes, write_string
from ._embedding import (
    Completion,
    ListenerCall,
    cooperative_revocation,
    follow_up_needed,
    release_calls,
)
from ._messages import JoinGroupMember
from ._state import Generation

__all__ = [
    "GroupProtocol",
    "ProtocolAssignment",
    "ProtocolEmbedding",
    "ProtocolMember",
]

_INT16 = struct.Struct(">h")
_VERSION = 0


@dataclass(frozen=True, slots=True)
class ProtocolMember:
    """One member as the leader sees it in :meth:`GroupProtocol.assign`.

    ``metadata`` is what that member's :meth:`GroupProtocol.metadata` returned; ``owned``
    the items it holds now (COOPERATIVE members; empty under EAGER, which gives up
    everything before joining) and ``generation`` the generation it holds them from."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes
    owned: frozenset[str] = frozenset()
    generation: int = -1


@dataclass(frozen=True, slots=True)
class ProtocolAssignment:
    """What the leader gives one member: ``items`` and ``data`` (bytes every protocol may
    use as it likes, e.g. to tell every member who the leader is)."""

    items: frozenset[str] = frozenset()
    data: bytes = b""


class GroupProtocol(abc.ABC):
    """A membership protocol of your own (see the module docstring).

    Set ``protocol_type`` (the JoinGroup protocol type: not ``"consumer"``; every member of
    a group must use the same) and implement :meth:`assign`. Optionally set ``name`` (the
    protocol name the broker selects; default ``"default"``) and ``rebalance_protocol``
    (EAGER or COOPERATIVE), and override :meth:`metadata` and :meth:`on_assignment`.

    ``assign`` runs on the leader only. It must return an assignment for every member it
    is given (missing members get nothing), be deterministic and not raise; under
    COOPERATIVE it returns the *target* and kgroup withholds what must wait (the module
    docstring). One instance serves one member.
    """

    protocol_type: str
    name: str = "default"
    rebalance_protocol: RebalanceProtocol = RebalanceProtocol.EAGER

    def metadata(self) -> bytes:
        """This member's metadata, sent in every JoinGroup (default: none)."""
        return b""

    @abc.abstractmethod
    def assign(self, members: Sequence[ProtocolMember]) -> Mapping[str, ProtocolAssignment]:
        """The leader's share-out: member id -> its assignment."""

    def on_assignment(self, assignment: ProtocolAssignment, generation: int) -> None:
        """Called on every member when its assignment for ``generation`` arrives."""
        return None

    def rebalance_needed(self, member_id: str) -> str | None:
        """Called after :meth:`on_assignment` with this member's id: a reason to rebalance
        again at once (say, the assignment's shared data is out of date), or None."""
        return None


def encode_metadata(user: bytes, owned: Iterable[str], generation: int) -> bytes:
    out = bytearray(_INT16.pack(_VERSION))
    write_bytes(out, user, "GroupProtocol metadata")
    _write_items(out, owned, "owned items")
    out += pack_int32(generation, "generation")
    return bytes(out)


def decode_metadata(data: bytes) -> tuple[bytes, frozenset[str], int]:
    r = Reader(data, "GroupProtocol metadata")
    r.version()
    user = r.nullable_bytes("metadata") or b""
    owned = frozenset(r.string_array("owned"))
    generation = r.int32("generation")
    return user, owned, generation


_FOLLOW_UP = 0x01


def encode_assignment(assignment: ProtocolAssignment, *, follow_up: bool = False) -> bytes:
    out = bytearray(_INT16.pack(_VERSION))
    _write_items(out, assignment.items, "assigned items")
    write_bytes(out, assignment.data, "assignment data")
    out.append(_FOLLOW_UP if follow_up else 0)
    return bytes(out)


def decode_assignment(data: bytes) -> ProtocolAssignment:
    return decode_assignment_flags(data)[0]


def decode_assignment_flags(data: bytes) -> tuple[ProtocolAssignment, bool]:
    """The assignment and whether it carries the follow-up flag."""
    r = Reader(data, "GroupProtocol assignment")
    r.version()
    items = frozenset(r.string_array("items"))
    assignment = ProtocolAssignment(items, r.nullable_bytes("data") or b"")
    return assignment, bool(r.int8("flags") & _FOLLOW_UP)


def _write_items(out: bytearray, items: Iterable[str], what: str) -> None:
    ordered = sorted(items)
    out += pack_int32(len(ordered), f"{what} count")
    for i, item in enumerate(ordered):
        write_string(out, item, f"{what}[{i}]", nullable=False)


@dataclass
class ProtocolEmbedding:
    """The embedding of a :class:`GroupProtocol`: metadata, the leader's share-out and the
    listener decisions, with the consumer embedding's interface (the runtime drives both
    the same way). ``owned`` is the member's current items; only this object changes it."""

    protocol: GroupProtocol
    owned: frozenset[str] = field(default_factory=frozenset)
    generation_owned: int = -1
    #: COOPERATIVE: the items the last JoinGroup claimed as owned (see complete()).
    claimed: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        p = self.protocol
        if not isinstance(p, GroupProtocol):
            raise ConfigError("protocol", f"{p!r} is not a kgroup.GroupProtocol")
        ptype = getattr(p, "protocol_type", None)
        if not isinstance(ptype, str) or not ptype or ptype == "consumer":
            raise ConfigError(
                "protocol",
                f"{type(p).__name__}.protocol_type must be a non-empty string other than "
                f"'consumer', got {ptype!r}",
            )
        if not isinstance(p.name, str) or not p.name:
            raise ConfigError("protocol", f"{type(p).__name__}.name must be a non-empty string")
        if p.rebalance_protocol not in tuple(RebalanceProtocol):
            raise ConfigError("protocol", f"unknown rebalance protocol {p.rebalance_protocol!r}")

    @property
    def protocol_type(self) -> str:
        return self.protocol.protocol_type

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        return RebalanceProtocol(self.protocol.rebalance_protocol)

    @property
    def cooperative(self) -> bool:
        return self.rebalance_protocol is RebalanceProtocol.COOPERATIVE

    # -- JoinGroup and the leader ----------------------------------------------------------------

    def metadata(self, generation: Generation) -> list[tuple[str, bytes]]:
        owned = self.owned if self.cooperative else frozenset()
        self.claimed = owned
        user = self.protocol.metadata()
        gen = generation.generation_id if owned else -1
        return [(self.protocol.name, encode_metadata(user, owned, gen))]

    def metadata_topics(self, members: Sequence[JoinGroupMember]) -> list[str]:
        return []  # the leader needs no topic metadata

    def assign(
        self,
        protocol_name: str,
        members: Sequence[JoinGroupMember],
        partitions_per_topic: Mapping[str, int],
    ) -> dict[str, bytes]:
        if protocol_name != self.protocol.name:
            raise AssignmentError(
                f"the coordinator selected protocol {protocol_name!r}; this member speaks "
                f"{self.protocol.name!r}"
            )
        decoded = []
        for m in members:
            try:
                user, owned, gen = decode_metadata(m.metadata)
            except RemoteProtocolError as exc:
                raise AssignmentError(
                    f"member {m.member_id!r} sent malformed metadata: {exc}"
                ) from exc
            decoded.append(ProtocolMember(m.member_id, m.group_instance_id, user, owned, gen))
        result = dict(self.protocol.assign(decoded))
        unknown = set(result) - {m.member_id for m in decoded}
        if unknown:
            raise AssignmentError(
                f"{type(self.protocol).__name__}.assign gave items to unknown members "
                f"{sorted(unknown)}"
            )
        for member_id, assignment in result.items():
            if not isinstance(assignment, ProtocolAssignment):
                raise AssignmentError(
                    f"{type(self.protocol).__name__}.assign returned {assignment!r} for "
                    f"{member_id!r}, not a ProtocolAssignment"
                )
        assignments = {m.member_id: result.get(m.member_id, ProtocolAssignment()) for m in decoded}
        if self.cooperative:
            assignments = withhold_moves(decoded, assignments)
        else:
            _check_disjoint(assignments)
        follow_up = follow_up_needed(
            {m.member_id: m.owned for m in decoded},
            {mid: a.items for mid, a in assignments.items()},
        )
        return {mid: encode_assignment(a, follow_up=follow_up) for mid, a in assignments.items()}

    # -- listener decisions ------------------------------------------------------------------------

    def prepare(self, *, lost: bool) -> tuple[ListenerCall, ...]:
        owned = self.owned
        if lost or not self.cooperative:
            self.owned = frozenset()
            if lost:
                return (ListenerCall("on_partitions_lost", owned),) if owned else ()
            return (ListenerCall("on_partitions_revoked", owned),)  # even when empty (§6.2)
        return ()

    def complete(self, generation: Generation, data: bytes) -> Completion:
        if len(data) < 2:
            raise AssignmentError(
                f"SyncGroup returned a {len(data)}-byte assignment: the leader left this "
                "member out of the assignment"
            )
        try:
            assignment, follow_up = decode_assignment_flags(data)
        except RemoteProtocolError as exc:
            raise AssignmentError(f"malformed assignment from the leader: {exc}") from exc
        assigned = assignment.items
        calls, rejoin = cooperative_revocation(
            self.rebalance_protocol, self.owned, self.claimed, assigned, "items"
        )
        added = assigned - self.owned
        self.protocol.on_assignment(assignment, generation.generation_id)
        rejoin = rejoin or self.protocol.rebalance_needed(generation.member_id)
        self.owned = assigned
        calls.append(ListenerCall("on_partitions_assigned", added))
        return Completion(tuple(calls), rejoin, assigned, follow_up)

    def release(self, *, lost: bool) -> tuple[ListenerCall, ...]:
        owned, self.owned = self.owned, frozenset()
        return release_calls(owned, lost=lost)


def withhold_moves(
    members: Sequence[ProtocolMember], target: Mapping[str, ProtocolAssignment]
) -> dict[str, ProtocolAssignment]:
    """The KIP-429 rule for items: an item that the target gives to a member other than
    its current owner goes to nobody this generation (its owner revokes it, rejoins, and
    the next rebalance hands it over). Claims are resolved by generation (higher wins; a
    tie is no claim), as for partitions. Items given to two members are an error."""
    _check_disjoint(target)
    owners = owners_by_claim(members)
    out: dict[str, ProtocolAssignment] = {}
    for member_id, assignment in target.items():
        kept = frozenset(
            item
            for item in assignment.items
            if (owner := owners.get(item)) is None or owner == member_id
        )
        out[member_id] = ProtocolAssignment(kept, assignment.data)
    return out


def owners_by_claim(members: Sequence[ProtocolMember]) -> dict[str, str]:
    """Who owns each item, from the members' claims: the claim from the higher generation
    wins; two claims from the same generation cancel (nobody owns the item), as the sticky
    assignors resolve partition claims."""
    claims: dict[str, tuple[int, str | None]] = {}
    for m in sorted(members, key=lambda m: m.member_id):
        for item in m.owned:
            prior = claims.get(item)
            if prior is None or m.generation > prior[0]:
                claims[item] = (m.generation, m.member_id)
            elif m.generation == prior[0]:
                claims[item] = (prior[0], None)
    return {item: owner for item, (_, owner) in claims.items() if owner is not None}


def member_order(members: Sequence[ProtocolMember]) -> list[ProtocolMember]:
    """Static members by instance id, then dynamic ones by member id (as the assignors)."""
    return sorted(
        members,
        key=lambda m: (
            (0, m.group_instance_id, m.member_id)
            if m.group_instance_id is not None
            else (1, m.member_id, "")
        ),
    )


def balanced_sticky(
    items: Iterable[str], members: Sequence[ProtocolMember]
) -> dict[str, frozenset[str]]:
    """Share ``items`` out among ``members``: balanced (counts differ by at most one),
    sticky (a member keeps what it owns up to its share) and deterministic. The larger
    shares go to the members that already hold the most, so the fewest items move."""
    ordered = member_order(members)
    if not ordered:
        return {}
    universe = sorted(set(items))
    owners = owners_by_claim(ordered)
    current = {m.member_id: [i for i in universe if owners.get(i) == m.member_id] for m in ordered}
    rank = sorted(range(len(ordered)), key=lambda k: (-len(current[ordered[k].member_id]), k))
    quota_base, extra = divmod(len(universe), len(ordered))
    quota = {ordered[k].member_id: quota_base + (1 if n < extra else 0) for n, k in enumerate(rank)}
    result = {mid: list(held[: quota[mid]]) for mid, held in current.items()}
    taken = {i for held in result.values() for i in held}
    free = iter(i for i in universe if i not in taken)
    for k in rank:
        mid = ordered[k].member_id
        while len(result[mid]) < quota[mid]:
            result[mid].append(next(free))
    return {mid: frozenset(held) for mid, held in result.items()}


def _check_disjoint(assignments: Mapping[str, ProtocolAssignment]) -> None:
    seen: dict[str, str] = {}
    for member_id in sorted(assignments):
        for item in assignments[member_id].items:
            if not isinstance(item, str):
                raise AssignmentError(f"item {item!r} for {member_id!r} is not a string")
            if item in seen:
                raise AssignmentError(
                    f"item {item!r} assigned to both {seen[item]!r} and {member_id!r}"
                )
            seen[item] = member_id
