"""A model of Apache Kafka's classic group coordinator, for the deterministic simulation.

What is modelled, and from where: the classic-group parts of ``GroupMetadataManager`` and
``ClassicGroup`` / ``ClassicGroupMember`` in Apache Kafka's ``group-coordinator`` module
(the 4.0-era sources; facts only, the code is this file's own):

- JoinGroup for any ``protocol_type`` (``"consumer"``, or a GroupProtocol's own such as
  ``"kgroup-leader"``): the first member of an EMPTY group sets the group's type and any
  non-empty protocol list is accepted; after that a member whose type differs, or who
  lists no protocol name that every member lists, is refused INCONSISTENT_GROUP_PROTOCOL
  (``supportsProtocols``), before any member id is handed out. New dynamic members get
  MEMBER_ID_REQUIRED
  (JoinGroup v4+) and a pending member id that expires after their session timeout; static
  members (KIP-345) get an id at once, and a known instance id replaces the old member id
  (the old id's parked JoinGroup / SyncGroup is answered FENCED_INSTANCE_ID). A known static
  member rejoining a STABLE group with an unchanged selected protocol causes no rebalance
  (JoinGroup v9: a returning leader gets ``skip_assignment``); in COMPLETING_REBALANCE it
  forces one.
- The join barrier: PREPARING_REBALANCE parks JoinGroups until every member has rejoined or
  the group's rebalance timeout (the maximum over its members) passes; dynamic members that
  did not rejoin are removed, static ones stay. An EMPTY group's first rebalance waits
  ``initial_rebalance_delay_ms``, extended while new members keep arriving. The leader is
  re-elected among the joined members if it did not rejoin; the protocol is selected by
  vote (``selectProtocol``): the candidates are the names every member lists, each member
  votes for the first candidate in its own list, and the most votes win.
- The sync barrier: COMPLETING_REBALANCE parks SyncGroups until the leader's arrives; the
  leader's assignment is persisted and propagated (members missing from it get an empty
  assignment); members that do not sync within the rebalance timeout are removed and the
  group rebalances. A new rebalance answers parked SyncGroups REBALANCE_IN_PROGRESS.
- Heartbeat: UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID (member validation), ILLEGAL_GENERATION,
  then REBALANCE_IN_PROGRESS in PREPARING_REBALANCE, NONE in COMPLETING_REBALANCE and
  STABLE. Session expiry removes a member unless it is awaiting a JoinGroup or SyncGroup
  answer (a *new* member awaiting its first JoinGroup is timed out after
  ``new_member_join_timeout_ms`` instead).
- LeaveGroup (v3+ batch of one): removes the member (or a pending member) and rebalances.
- Coordinator moves: :meth:`ClassicGroupModel.unload` answers parked requests NOT_COORDINATOR
  and makes the group DEAD; :meth:`ClassicGroupModel.load` rebuilds it from the last
  persisted record (the group-metadata record written when the leader's assignment is
  stored, when the group becomes EMPTY, when a static member is replaced in STABLE, and
  when the group is created), as STABLE (EMPTY without members) with every member's session
  restarted at load time and only the selected protocol remembered per member.

Simplifications (the model's side of "where the model and Kafka might disagree"):

- Record appends succeed at once; Kafka appends asynchronously and a failed append (e.g.
  NOT_LEADER_OR_FOLLOWER during a move) is answered with an error.
- Ties in protocol votes go to the smallest name (Kafka: HashMap order); a departing leader is
  replaced by the first remaining member in insertion order (Kafka: HashMap order).
- One group, no offsets, no max group size, no KIP-848 conversion, no DEAD-group deletion;
  session timeouts are not range-checked (INVALID_SESSION_TIMEOUT never happens).
- JoinGroup is modelled at v9, SyncGroup at v5, Heartbeat at v4, LeaveGroup at v5.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from kgroup._core._consumer_protocol import Assignment
from kgroup._core._group_protocol import decode_assignment
from kgroup._core._messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroup._errors import ErrorCode

__all__ = [
    "BrokerConfig",
    "ClassicGroupModel",
    "GenerationHook",
    "GroupRecord",
    "GroupState",
    "ModelError",
    "Timers",
]

E = ErrorCode
JoinResponder = Callable[[JoinGroupResponse], None]
#: Called when a join phase forms a generation with members: (generation, protocol name,
#: member id -> the protocol names it listed in its JoinGroup).
GenerationHook = Callable[[int, str, dict[str, tuple[str, ...]]], None]
SyncResponder = Callable[[SyncGroupResponse], None]


@functools.lru_cache(maxsize=4096)
def _items(protocol_type: str | None, assignment: bytes) -> frozenset[object]:
    """What an encoded assignment hands out (decoded once per distinct value): partitions
    for ``"consumer"``, item names for kgroup's GroupProtocols. Kafka never reads an
    assignment; this serves the model's own checks and the world's."""
    if protocol_type == "consumer":
        return frozenset(Assignment.decode(assignment).partitions)
    return frozenset(decode_assignment(assignment).items)


class ModelError(AssertionError):
    """The model's own consistency check failed (invariant 4), or a request reached a branch
    that Kafka treats as an IllegalStateException."""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True)
class BrokerConfig:
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    new_member_join_timeout_ms: int = 300_000  # classicGroupNewMemberJoinTimeoutMs


class Timers:
    """Keyed one-shot timers (Kafka's coordinator timer): scheduling a key replaces it."""

    def schedule(self, key: str, delay_ms: float, fn: Callable[[], None]) -> None:
        raise NotImplementedError

    def cancel(self, key: str) -> None:
        raise NotImplementedError

    def now_ms(self) -> float:
        """The coordinator's clock (ms)."""
        raise NotImplementedError


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: JoinResponder | None = None
    awaiting_sync: SyncResponder | None = None
    is_new: bool = False

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ModelError(f"member {self.member_id} does not support protocol {protocol}")

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ModelError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


@dataclass(frozen=True)
class RecordMember:
    member_id: str
    instance_id: str | None
    client_id: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """The persisted group-metadata record (``GroupMetadataValue``)."""

    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: tuple[RecordMember, ...] = field(default_factory=tuple)


EMPTY_ASSIGNMENT = b""


class ClassicGroupModel:
    """One classic group on its coordinator. See the module docstring.

    Requests come in through :meth:`join`, :meth:`sync` (answered through a responder, maybe
    later), :meth:`heartbeat` and :meth:`leave` (answered at once). ``persist`` is called
    with every record the coordinator appends; ``new_id`` makes member ids (Kafka:
    ``<client id or instance id>-<uuid>``); ``log`` receives a line per state change.
    """

    def __init__(
        self,
        group_id: str,
        *,
        config: BrokerConfig,
        timers: Timers,
        persist: Callable[[GroupRecord], None],
        new_id: Callable[[str], str],
        log: Callable[[str], None] | None = None,
        on_generation: GenerationHook | None = None,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self._timers = timers
        self._persist = persist
        self._new_id = new_id
        self._log = log
        self._on_generation = on_generation
        self.exists = False
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.DEAD
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, _Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_join: dict[str, None] = {}  # ordered set
        self.pending_sync: dict[str, None] = {}
        self.new_member_added = False
        self.rebalances = 0  # completed join phases with members
        self._max_generation = 0

    # -- construction from a record (coordinator load) ------------------------------------------

    @classmethod
    def load(
        cls,
        group_id: str,
        record: GroupRecord | None,
        *,
        config: BrokerConfig,
        timers: Timers,
        persist: Callable[[GroupRecord], None],
        new_id: Callable[[str], str],
        log: Callable[[str], None] | None = None,
        on_generation: GenerationHook | None = None,
    ) -> ClassicGroupModel:
        """``replay(GroupMetadataKey, GroupMetadataValue)`` then ``onLoaded()``."""
        group = cls(
            group_id,
            config=config,
            timers=timers,
            persist=persist,
            new_id=new_id,
            log=log,
            on_generation=on_generation,
        )
        if record is None:
            return group
        group.exists = True
        group.generation = record.generation
        group._max_generation = record.generation
        group.protocol_type = record.protocol_type
        group.protocol_name = record.protocol_name
        group.leader = record.leader
        group.state = GroupState.STABLE if record.members else GroupState.EMPTY
        group.previous_state = GroupState.DEAD
        for m in record.members:
            member = _Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                client_id=m.client_id,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                protocol_type=record.protocol_type or "",
                protocols=((record.protocol_name or "", m.subscription),),
                assignment=m.assignment,
            )
            group._add(member, None)
        group.leader = record.leader  # _add elects the first member when none is set
        for member in group.members.values():
            group._reschedule_heartbeat(member)
        group._trace(f"loaded generation {group.generation} with {len(group.members)} members")
        group.check()
        return group

    def unload(self) -> None:
        """``onUnloaded()``: the group goes DEAD; parked requests get NOT_COORDINATOR."""
        previous = self.state
        self._transition(GroupState.DEAD)
        if previous is GroupState.PREPARING_REBALANCE:
            for member in list(self.members.values()):
                self._complete_join(
                    member,
                    JoinGroupResponse(error_code=E.NOT_COORDINATOR, member_id=member.member_id),
                )
        elif previous in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            for member in list(self.members.values()):
                self._complete_sync(member, SyncGroupResponse(error_code=E.NOT_COORDINATOR))
        self._timers.cancel(self._join_key())
        self._timers.cancel(self._sync_key())
        for member_id in [*self.members, *self.pending_join]:
            self._timers.cancel(self._hb_key(member_id))

    # -- helpers ----------------------------------------------------------------------------------

    def _trace(self, line: str) -> None:
        if self._log is not None:
            self._log(line)

    def _join_key(self) -> str:
        return f"join:{self.group_id}"

    def _sync_key(self) -> str:
        return f"sync:{self.group_id}"

    def _hb_key(self, member_id: str) -> str:
        return f"hb:{self.group_id}:{member_id}"

    def _transition(self, new: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[new]:
            raise ModelError(f"illegal group transition {self.state.name} -> {new.name}")
        self.previous_state, self.state = self.state, new
        self._trace(f"group {self.previous_state.name} -> {new.name} gen {self.generation}")

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_join

    def _can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def _supported_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name, _ in member.protocols:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def _supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        counts = self._supported_counts()
        return self.protocol_type == protocol_type and any(
            counts.get(name, 0) == len(self.members) for name in names
        )

    def select_protocol(self) -> str:
        if not self.members:
            raise ModelError("cannot select a protocol for an empty group")
        counts = self._supported_counts()
        candidates = {name for name, n in counts.items() if n == len(self.members)}
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        return min(name for name, n in votes.items() if n == best)

    def _add(self, member: _Member, future: JoinResponder | None) -> None:
        if member.instance_id is not None:
            if member.instance_id in self.static_members:
                raise ModelError(f"static member {member.instance_id} is already a member")
            self.static_members[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ModelError("the group and member's protocol type must be the same")
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = future
        self.pending_join.pop(member.member_id, None)

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            self.static_members.pop(member.instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_join.pop(member_id, None)
        self.pending_sync.pop(member_id, None)

    def _validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return E.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    def _complete_join(self, member: _Member, response: JoinGroupResponse) -> bool:
        future, member.awaiting_join = member.awaiting_join, None
        if future is None:
            return False
        future(response)
        return True

    def _complete_sync(self, member: _Member, response: SyncGroupResponse) -> bool:
        future, member.awaiting_sync = member.awaiting_sync, None
        if future is None:
            return False
        future(response)
        return True

    def _current_members(self) -> tuple[JoinGroupMember, ...]:
        protocol = self.protocol_name or ""
        return tuple(
            JoinGroupMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                metadata=m.metadata(protocol),
            )
            for m in self.members.values()
        )

    def _join_info(
        self, member_id: str, *, members: tuple[JoinGroupMember, ...] = (), skip: bool = False
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=E.NONE,
            generation_id=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader or "",
            skip_assignment=skip,
            member_id=member_id,
            members=members,
        )

    def _record(self, assignment: dict[str, bytes]) -> GroupRecord:
        protocol = self.protocol_name
        members = []
        for m in self.members.values():
            if protocol is None:
                raise ModelError("non-empty group metadata with no protocol")
            members.append(
                RecordMember(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    client_id=m.client_id,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(protocol),
                    assignment=assignment[m.member_id],
                )
            )
        return GroupRecord(
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=protocol,
            leader=self.leader,
            members=tuple(members),
        )

    def _store(self, assignment: dict[str, bytes]) -> None:
        self._persist(self._record(assignment))

    # -- heartbeats (session expiry) ------------------------------------------------------------

    def _reschedule_heartbeat(self, member: _Member, timeout_ms: float | None = None) -> None:
        member_id = member.member_id
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._timers.schedule(
            self._hb_key(member_id), delay, lambda: self._expire_heartbeat(member_id)
        )

    def _expire_heartbeat(self, member_id: str) -> None:
        if self.state is GroupState.DEAD:
            return
        if member_id in self.pending_join:
            self._trace(f"pending member {member_id} expired")
            self._remove(member_id)
            if self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined():
                self._complete_join_phase()
        elif member_id in self.members:
            member = self.members[member_id]
            if not member.has_satisfied_heartbeat():
                self._trace(f"member {member_id} session expired")
                self._remove_member_and_update(member)
        self.check()

    def _remove_member_and_update(self, member: _Member) -> None:
        self._complete_join(member, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=""))
        self._remove(member.member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join("member removed")
        elif self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined():
            self._complete_join_phase()

    # -- rebalance machinery --------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, reason: str) -> None:
        if self._can_rebalance():
            self._prepare_rebalance(reason)
        else:
            self._maybe_complete_join_phase()

    def _maybe_complete_join_phase(self) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self.previous_state is GroupState.EMPTY:
            return  # the initial rebalance is completed by its delay timer only
        if not self.has_all_members_joined():
            return
        self._complete_join_phase()

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_with_error(E.REBALANCE_IN_PROGRESS)
        self.pending_sync.clear()
        self._timers.cancel(self._sync_key())
        initial = self.state is GroupState.EMPTY
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(self.rebalance_timeout_ms() - delay, 0)
            self._timers.schedule(
                self._join_key(),
                delay,
                lambda: self._try_complete_initial_rebalance(delay, remaining),
            )
        self._transition(GroupState.PREPARING_REBALANCE)
        self._trace(f"preparing rebalance ({reason})")
        if not initial:
            if self.has_all_members_joined():
                self._complete_join_phase()
            else:
                self._timers.schedule(
                    self._join_key(), self.rebalance_timeout_ms(), self._complete_join_timer
                )

    def _complete_join_timer(self) -> None:
        if self.state is GroupState.DEAD:
            return
        self._complete_join_phase()
        self.check()

    def _try_complete_initial_rebalance(self, delay: int, remaining: int) -> None:
        if self.state is GroupState.DEAD:
            return
        if self.new_member_added and remaining != 0:
            self.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self._timers.schedule(
                self._join_key(),
                new_delay,
                lambda: self._try_complete_initial_rebalance(new_delay, new_remaining),
            )
        else:
            self._complete_join_phase()
        self.check()

    def _complete_join_phase(self) -> None:
        self._timers.cancel(self._join_key())
        for member in [
            m for m in self.members.values() if m.awaiting_join is None and m.instance_id is None
        ]:
            self._remove(member.member_id)
            self._timers.cancel(self._hb_key(member.member_id))
            self._trace(f"removed {member.member_id}: did not rejoin in time")
        if self.state is GroupState.DEAD:
            return
        if not self._maybe_elect_new_joined_leader() and self.members:
            # Nobody rejoined (only static members left): try again after the timeout.
            self._timers.schedule(
                self._join_key(), self.rebalance_timeout_ms(), self._complete_join_timer
            )
            return
        self._init_next_generation()
        if self.state is GroupState.EMPTY:
            self._trace(f"generation {self.generation} is empty")
            self._persist(
                GroupRecord(
                    generation=self.generation,
                    protocol_type=self.protocol_type,
                    protocol_name=None,
                    leader=self.leader,
                )
            )
            return
        self.rebalances += 1
        if self._on_generation is not None:
            self._on_generation(
                self.generation,
                self.protocol_name or "",
                {m.member_id: tuple(n for n, _ in m.protocols) for m in self.members.values()},
            )
        self._trace(
            f"generation {self.generation} joined: protocol {self.protocol_name}, leader "
            f"{self.leader}, members {list(self.members)}"
        )
        for member in list(self.members.values()):
            members = self._current_members() if member.member_id == self.leader else ()
            self._complete_join(member, self._join_info(member.member_id, members=members))
            self._reschedule_heartbeat(member)
            member.is_new = False
            self.pending_sync[member.member_id] = None
        generation = self.generation
        self._timers.schedule(
            self._sync_key(),
            self.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(generation),
        )

    def _maybe_elect_new_joined_leader(self) -> bool:
        if self.leader is None:
            return False
        leader = self.members.get(self.leader)
        if leader is None:
            raise ModelError(f"leader {self.leader} is not a member")
        if leader.awaiting_join is None:
            for member in self.members.values():
                if member.awaiting_join is not None:
                    self.leader = member.member_id
                    return True
            return False
        return True

    def _init_next_generation(self) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self._transition(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self._transition(GroupState.EMPTY)
        self.pending_sync.clear()

    def _expire_pending_sync(self, generation: int) -> None:
        if self.state is GroupState.DEAD or generation != self.generation:
            return
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and self.pending_sync:
            pending = list(self.pending_sync)
            for member_id in pending:
                self._remove(member_id)
                self._timers.cancel(self._hb_key(member_id))
            self._trace(f"removed {pending}: no SyncGroup in time")
            self._prepare_rebalance("pending sync expired")
        self.check()

    def _reset_and_propagate_assignment_with_error(self, error: int) -> None:
        if self.state is not GroupState.COMPLETING_REBALANCE:
            raise ModelError("must be in COMPLETING_REBALANCE to reset the assignment")
        for member in self.members.values():
            member.assignment = EMPTY_ASSIGNMENT
        self._propagate(error)

    def _propagate(self, error: int) -> None:
        for member in list(self.members.values()):
            ok = error == E.NONE
            response = SyncGroupResponse(
                error_code=error,
                protocol_type=self.protocol_type if ok else None,
                protocol_name=self.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if self._complete_sync(member, response):
                self._reschedule_heartbeat(member)

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(self, req: JoinGroupRequest, client_id: str, respond: JoinResponder) -> None:
        member_id = req.member_id
        unknown = member_id == ""
        if not self.exists:
            if not unknown:
                respond(JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=member_id))
                return
            self.exists = True
            self._persist(
                GroupRecord(generation=0, protocol_type=None, protocol_name=None, leader=None)
            )
        if unknown:
            self._join_new_member(req, client_id, respond)
        else:
            self._join_existing_member(req, respond)
        self.check()

    def _join_new_member(
        self, req: JoinGroupRequest, client_id: str, respond: JoinResponder
    ) -> None:
        names = [name for name, _ in req.protocols]
        if self.state is GroupState.DEAD:
            respond(JoinGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
        if not self._supports_protocols(req.protocol_type, names):
            respond(JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL))
            return
        instance = req.group_instance_id
        new_id = self._new_id(instance if instance is not None else client_id)
        if instance is not None:
            existing = self.static_members.get(instance)
            if existing is not None:
                self._update_static_member(req, existing, new_id, respond)
            else:
                self._add_member_then_rebalance(req, client_id, new_id, respond)
            return
        # Dynamic, JoinGroup v4+: the member must come back with the id handed out here.
        self.pending_join[new_id] = None
        self._timers.schedule(
            self._hb_key(new_id), req.session_timeout_ms, lambda: self._expire_heartbeat(new_id)
        )
        self._trace(f"pending member {new_id} (MEMBER_ID_REQUIRED)")
        respond(JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id=new_id))

    def _join_existing_member(self, req: JoinGroupRequest, respond: JoinResponder) -> None:
        member_id = req.member_id
        names = [name for name, _ in req.protocols]
        if self.state is GroupState.DEAD:
            respond(JoinGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return
        if not self._supports_protocols(req.protocol_type, names):
            respond(
                JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            )
            return
        if member_id in self.pending_join:
            if req.group_instance_id is not None:
                raise ModelError(f"JoinGroup with an instance id for pending member {member_id}")
            self._add_member_then_rebalance(req, "", member_id, respond)
            return
        error = self._validate_member(member_id, req.group_instance_id)
        if error != E.NONE:
            respond(JoinGroupResponse(error_code=error, member_id=member_id))
            return
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member_then_rebalance(req, member, respond, "joining during rebalance")
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == req.protocols:
                # The same metadata (it missed the JoinGroup answer): the current generation.
                members = self._current_members() if member_id == self.leader else ()
                respond(self._join_info(member_id, members=members))
            else:
                self._update_member_then_rebalance(req, member, respond, "metadata changed")
        elif self.state is GroupState.STABLE:
            if member_id == self.leader:
                self._update_member_then_rebalance(req, member, respond, "leader rejoined")
            elif member.protocols != req.protocols:
                self._update_member_then_rebalance(req, member, respond, "metadata changed")
            else:
                respond(self._join_info(member_id))
        else:
            respond(JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _update_member(
        self, member: _Member, req: JoinGroupRequest, future: JoinResponder | None
    ) -> None:
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = future

    def _update_member_then_rebalance(
        self, req: JoinGroupRequest, member: _Member, respond: JoinResponder, reason: str
    ) -> None:
        self._update_member(member, req, respond)
        self._maybe_prepare_rebalance_or_complete_join(f"{member.member_id}: {reason}")

    def _add_member_then_rebalance(
        self, req: JoinGroupRequest, client_id: str, member_id: str, respond: JoinResponder
    ) -> None:
        member = _Member(
            member_id=member_id,
            instance_id=req.group_instance_id,
            client_id=client_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            is_new=True,
        )
        if self.state is GroupState.PREPARING_REBALANCE and self.previous_state is GroupState.EMPTY:
            self.new_member_added = True
        self._add(member, respond)
        self._reschedule_heartbeat(member, self.config.new_member_join_timeout_ms)
        self._trace(f"added member {member_id} (instance {req.group_instance_id})")
        self._maybe_prepare_rebalance_or_complete_join(f"adding {member_id}")

    def _update_static_member(
        self, req: JoinGroupRequest, old_id: str, new_id: str, respond: JoinResponder
    ) -> None:
        instance = req.group_instance_id
        assert instance is not None
        old = self.members.pop(old_id, None)
        if old is None:
            raise ModelError(f"cannot replace non-existing member {old_id}")
        self._complete_join(
            old, JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, member_id=old_id)
        )
        self._complete_sync(old, SyncGroupResponse(error_code=E.FENCED_INSTANCE_ID))
        member = _Member(
            member_id=new_id,
            instance_id=old.instance_id,
            client_id=old.client_id,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_id] = member
        if self.leader == old_id:
            self.leader = new_id
        self.static_members[instance] = new_id
        self._timers.cancel(self._hb_key(old_id))
        self._reschedule_heartbeat(member)
        self._trace(f"static member {instance}: {old_id} replaced by {new_id} in {self.state.name}")
        self._update_member(member, req, respond)
        if self.state is GroupState.STABLE:
            if self.protocol_name == self.select_protocol():
                # No rebalance: persist the new member id, answer with the current generation.
                self._store({m.member_id: m.assignment for m in self.members.values()})
                is_leader = self.leader == new_id
                self._complete_join(
                    member,
                    self._join_info(
                        new_id,
                        members=self._current_members() if is_leader else (),
                        skip=is_leader,
                    ),
                )
            else:
                self._maybe_prepare_rebalance_or_complete_join(f"static {instance} protocol")
        elif self.state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(f"static member {instance} rejoined while completing")
        elif self.state in (GroupState.EMPTY, GroupState.DEAD):
            raise ModelError(f"static member {instance} rejoined a group in {self.state.name}")
        else:
            self._maybe_complete_join_phase()

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync(self, req: SyncGroupRequest, respond: SyncResponder) -> None:
        if not self.exists or self.state is GroupState.EMPTY:
            respond(SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync(req)
        if error != E.NONE:
            respond(SyncGroupResponse(error_code=error))
        elif self.state is GroupState.PREPARING_REBALANCE:
            respond(SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS))
        elif self.state is GroupState.COMPLETING_REBALANCE:
            member = self.members[req.member_id]
            member.awaiting_sync = respond
            self._remove_pending_sync(req.member_id)
            if req.member_id == self.leader:
                assignment = dict(req.assignments)
                for member_id in self.members:
                    assignment.setdefault(member_id, EMPTY_ASSIGNMENT)
                assignment = {m: assignment[m] for m in self.members}
                self._store(assignment)
                # The append succeeds at once (the model's simplification).
                for m in self.members.values():
                    m.assignment = assignment[m.member_id]
                self._propagate(E.NONE)
                self._transition(GroupState.STABLE)
                self._trace(f"generation {self.generation} stable")
        elif self.state is GroupState.STABLE:
            self._remove_pending_sync(req.member_id)
            member = self.members[req.member_id]
            respond(
                SyncGroupResponse(
                    error_code=E.NONE,
                    protocol_type=self.protocol_type,
                    protocol_name=self.protocol_name,
                    assignment=member.assignment,
                )
            )
        else:
            raise ModelError(f"SyncGroup reached a group in {self.state.name}")
        self.check()

    def _validate_sync(self, req: SyncGroupRequest) -> int:
        if self.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(req.member_id, req.group_instance_id)
        if error != E.NONE:
            return error
        if req.generation_id != self.generation:
            return E.ILLEGAL_GENERATION
        if (req.protocol_type is not None and req.protocol_type != self.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != self.protocol_name
        ):
            return E.INCONSISTENT_GROUP_PROTOCOL
        return E.NONE

    def _remove_pending_sync(self, member_id: str) -> None:
        self.pending_sync.pop(member_id, None)
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            if not self.pending_sync:
                self._timers.cancel(self._sync_key())
        else:
            self._timers.cancel(self._sync_key())

    # -- Heartbeat ------------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        response = self._heartbeat(req)
        self.check()
        return response

    def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        if not self.exists:
            return HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID)
        if self.state is GroupState.DEAD:
            return HeartbeatResponse(error_code=E.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(req.member_id, req.group_instance_id)
        if error != E.NONE:
            return HeartbeatResponse(error_code=error)
        if req.generation_id != self.generation:
            return HeartbeatResponse(error_code=E.ILLEGAL_GENERATION)
        if self.state is GroupState.EMPTY:
            return HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID)
        self._reschedule_heartbeat(self.members[req.member_id])
        if self.state is GroupState.PREPARING_REBALANCE:
            return HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(error_code=E.NONE)

    # -- LeaveGroup -----------------------------------------------------------------------------

    def leave(self, req: LeaveGroupRequest) -> LeaveGroupResponse:
        if not self.exists:
            return LeaveGroupResponse(error_code=E.UNKNOWN_MEMBER_ID)
        if self.state is GroupState.DEAD:
            return LeaveGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE)
        member_id, instance = req.member_id, req.group_instance_id
        error: int = E.NONE
        if member_id == "":
            if instance is not None and instance in self.static_members:
                self._remove_current_member(self.static_members[instance])
            else:
                error = E.UNKNOWN_MEMBER_ID
        elif member_id in self.pending_join:
            self._remove(member_id)
            self._timers.cancel(self._hb_key(member_id))
        else:
            error = self._validate_member(member_id, instance)
            if error == E.NONE:
                self._remove_current_member(member_id)
        if error == E.NONE:
            self._trace(f"{member_id or instance} left")
            if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(f"{member_id} left")
            elif self.state is GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase()
        self.check()
        return LeaveGroupResponse(
            error_code=E.NONE,
            members=(
                LeaveGroupMemberResult(
                    member_id=member_id, group_instance_id=instance, error_code=error
                ),
            ),
        )

    def _remove_current_member(self, member_id: str) -> None:
        member = self.members[member_id]
        self._timers.cancel(self._hb_key(member_id))
        self._complete_join(member, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=""))
        self._remove(member_id)

    # -- consistency (invariant 4) ----------------------------------------------------------------

    def check(self) -> None:
        """The model's own invariants; raises :class:`ModelError`."""
        state = self.state
        if self.generation < self._max_generation:
            raise ModelError(f"generation went back to {self.generation}")
        self._max_generation = self.generation
        if state is GroupState.DEAD:
            return
        if (self.leader is None) != (not self.members):
            raise ModelError(f"leader {self.leader!r} with {len(self.members)} members")
        if self.leader is not None and self.leader not in self.members:
            raise ModelError(f"leader {self.leader} is not a member")
        for instance, member_id in self.static_members.items():
            member = self.members.get(member_id)
            if member is None or member.instance_id != instance:
                raise ModelError(f"static mapping {instance} -> {member_id} is stale")
        for member in self.members.values():
            if member.instance_id is not None and (
                self.static_members.get(member.instance_id) != member.member_id
            ):
                raise ModelError(f"static member {member.member_id} is not mapped")
        if self.members:
            common = set.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
            if not common:
                raise ModelError("the members list no protocol name in common")
            if state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and (
                self.protocol_name not in common
            ):
                raise ModelError(f"selected protocol {self.protocol_name} is not every member's")
            types = {m.protocol_type for m in self.members.values()}
            if types != {self.protocol_type}:
                raise ModelError(f"protocol types {sorted(types)} in a {self.protocol_type} group")
        overlap = set(self.pending_join) & set(self.members)
        if overlap:
            raise ModelError(f"pending and joined at once: {sorted(overlap)}")
        if state is GroupState.EMPTY and self.members:
            raise ModelError("EMPTY group with members")
        if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            waiting = [m.member_id for m in self.members.values() if m.awaiting_join]
            if waiting:
                raise ModelError(f"JoinGroups parked in {state.name}: {waiting}")
        if state in (GroupState.PREPARING_REBALANCE, GroupState.STABLE, GroupState.EMPTY):
            waiting = [m.member_id for m in self.members.values() if m.awaiting_sync]
            if waiting:
                raise ModelError(f"SyncGroups parked in {state.name}: {waiting}")
        if state is GroupState.STABLE:
            seen: dict[object, str] = {}
            for member in self.members.values():
                if not member.assignment:
                    continue
                for tp in _items(self.protocol_type, member.assignment):
                    other = seen.setdefault(tp, member.member_id)
                    if other != member.member_id:
                        raise ModelError(
                            f"{tp} assigned to {other} and {member.member_id} in generation "
                            f"{self.generation}"
                        )

    def assignment_of(self, member_id: str) -> frozenset[object]:
        member = self.members.get(member_id)
        if member is None or not member.assignment:
            return frozenset()
        return _items(self.protocol_type, member.assignment)
