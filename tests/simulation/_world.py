"""The simulated world: virtual time, a seeded scheduler, a network, brokers and members.

One schedule (:func:`run_schedule`) is a pure function of its seed: every random choice is
drawn from one ``random.Random(seed)`` in event order (the members' retry jitter from the
module ``random``, seeded with the same seed), events with the same time run in the order
they were scheduled, and nothing reads a real clock or iterates a hash-ordered set in a way
that changes behaviour. ``run_schedule(seed, trace=True)`` returns the full event trace;
two runs of one seed give the same trace byte for byte.

Pieces (FoundationDB-style simulation testing, kgroup-sized):

- :mod:`._sched`: a heap of (time, sequence) events on a virtual millisecond clock, and the
  futures of simulated I/O.
- :class:`Network` / :class:`Conn`: member-to-broker connections with latency, FIFO order per
  direction (TCP), per-request timeouts that close the connection (as kgroup's
  ``BrokerConnection`` does), drops, duplicates, long delays, cuts, and black holes. The
  broker reads one request per connection at a time (Kafka mutes a channel until its
  response is sent), so a parked JoinGroup or SyncGroup holds back the requests behind it.
- :class:`Cluster`: brokers, the coordinator's placement and loading, the persisted group
  record, FindCoordinator answers, injected error codes, and the group model
  (``_model.ClassicGroupModel``).
- :class:`~._process.Process`: one member process: the real ``GroupMember`` on its own
  virtual-time asyncio loop, reaching the brokers through kgroup's transport seam. Processes
  can be paused, crashed and restarted (same instance id when static), or closed.
- :class:`Ownership`: the holds of invariant 1 (see :func:`run_schedule`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from kgroup import MemberState, TopicPartition
from kgroup._core._kip848_state import IdPartition
from kgroup._errors import ErrorCode
from kgroup.testing.messages import (
    ConsumerGroupHeartbeatRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from ._groups import (
    Formed,
    GroupKind,
    cooperative_rebalances,
    draw_kind,
    kind_unstable,
    universe,
)
from ._model import BrokerConfig, ClassicGroupModel, GroupState, ModelError
from ._network import Cluster, Network
from ._process import Process
from ._sched import Scheduler
from ._world848 import (
    INJECTED_848,
    deterministic_member_ids,
    plan_offsets_version,
    plan_topic_creation,
    plan_topic_deletion,
    plan_topic_growth,
    plan_topic_recreation,
    spin_guard,
    stable_bound_848_ms,
    stable_state_848,
)

__all__ = ["Params", "Result", "SimulationFailure", "draw_params", "run_schedule"]

E = ErrorCode
INF = math.inf


class SimulationFailure(AssertionError):
    """An invariant broke. ``kind`` is one of: ownership, stability, exception, model,
    cooperative, livelock, simulator."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind


# ---------------------------------------------------------------------------------------------
# Parameters of one schedule
# ---------------------------------------------------------------------------------------------

FAULT_KINDS = (
    "drop",
    "duplicate",
    "delay",
    "error",
    "cut",
    "blackhole",
    "pause",
    "slow_poll",
    "crash",
    "leave",
    "coordinator_move",
    "broker_restart",
    "grow_topic",
    "delete_topic",
    "create_topic",
    "recreate_topic",
)

INJECTED_ERRORS: dict[type, tuple[int, ...]] = {
    # Error codes of spec §4 a broker can answer without changing the group: retriable
    # coordinator errors, and the rejoin triggers. Never NONE or REBALANCE_IN_PROGRESS on a
    # Heartbeat (those prove a session refresh to the lease) and never the fatal ones.
    OffsetCommitRequest: (
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
    ),
    FindCoordinatorRequest: (
        E.COORDINATOR_NOT_AVAILABLE,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.NOT_COORDINATOR,
    ),
    JoinGroupRequest: (
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.REBALANCE_IN_PROGRESS,
        E.UNKNOWN_MEMBER_ID,
    ),
    SyncGroupRequest: (
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.REBALANCE_IN_PROGRESS,
        E.ILLEGAL_GENERATION,
        E.UNKNOWN_MEMBER_ID,
    ),
    HeartbeatRequest: (
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.ILLEGAL_GENERATION,
        E.UNKNOWN_MEMBER_ID,
    ),
    LeaveGroupRequest: (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR),
    ConsumerGroupHeartbeatRequest: INJECTED_848,
    OffsetFetchRequest: (
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
    ),
}


@dataclass(frozen=True)
class Params:
    """Everything a schedule is made of, drawn from the seed (:func:`draw_params`)."""

    seed: int
    kind: GroupKind
    members: int
    static: tuple[bool, ...]
    topics: tuple[tuple[str, int], ...]
    nodes: int
    session_ms: int
    heartbeat_ms: int
    max_poll_ms: int
    request_timeout_ms: int
    initial_delay_ms: int
    fault_window_ms: float
    fault_events: float  # expected number of discrete faults in the window
    p_drop: float
    p_duplicate: float
    p_delay: float
    p_error: float
    latency_ms: float
    #: the server assignor of a consumer-protocol group (``uniform`` or ``range``)
    remote_assignor: str = "uniform"
    #: a topic the members of a consumer-protocol group subscribe to by name before it
    #: exists, and its partition count when it is created in the fault window
    later_topic: tuple[str, int] | None = None
    #: a consumer-protocol group whose members subscribe with this broker-side regex
    #: (SubscribedTopicRegex) instead of topic names
    topic_pattern: str | None = None

    @property
    def join_timeout_ms(self) -> int:
        return max(self.request_timeout_ms, self.max_poll_ms + 5_000)

    @property
    def stable_bound_ms(self) -> float:
        """How long after the faults stop the group must be stable (invariant 2).

        Every request sent before the faults stopped has resolved after the JoinGroup
        timeout J (the longest one). Then: a zombie member id (a crashed or replaced
        incarnation) is dropped within one session timeout S, by expiry or by the rebalance
        it causes; a rebalance takes at most the join barrier (rebalance timeout R) plus
        the sync barrier (R) when some member is late, and a member removed by the sync
        barrier causes one more rebalance (R + R) before the group settles; the initial
        rebalance of an EMPTY group adds its delay (at most R); every member runs its poll
        path within a heartbeat interval H of being woken. Hence
        ``J + S + 5 R + 4 H + 1 s`` (the second covers latency and backoff). A
        consumer-protocol group has its own bound (``_world848.stable_bound_848_ms``).
        """
        if self.kind.consumer_protocol:
            return stable_bound_848_ms(self)
        return (
            self.join_timeout_ms
            + self.session_ms
            + 5 * self.max_poll_ms
            + 4 * self.heartbeat_ms
            + 1_000
        )

    def describe(self) -> str:
        statics = sum(self.static)
        topics = ",".join(f"{t}:{n}" for t, n in self.topics)
        return (
            f"seed={self.seed} {self.kind.describe()} members={self.members} "
            f"(static {statics}) topics={topics} session={self.session_ms} "
            f"heartbeat={self.heartbeat_ms} max_poll={self.max_poll_ms} "
            f"request_timeout={self.request_timeout_ms} initial_delay={self.initial_delay_ms} "
            f"fault_window={self.fault_window_ms:.0f} fault_events~{self.fault_events} "
            f"p_drop={self.p_drop} p_dup={self.p_duplicate} p_delay={self.p_delay} "
            f"p_error={self.p_error}"
            + (f" remote_assignor={self.remote_assignor}" if self.kind.consumer_protocol else "")
            + (f" later_topic={self.later_topic}" if self.later_topic else "")
            + (f" topic_pattern={self.topic_pattern!r}" if self.topic_pattern else "")
        )


def draw_params(seed: int, rng: random.Random, flavor: str | None = None) -> Params:
    """The schedule's parameters; its group kind from a stream of its own (``flavor``
    forces the flavor: the other parameters do not change with it)."""
    members = rng.randint(3, 8)
    static_share = rng.choice((0.0, 0.0, 0.5, 1.0))
    static = tuple(rng.random() < static_share for _ in range(members))
    topics: list[tuple[str, int]] = [("t0", rng.randint(1, 12))]
    if rng.random() < 0.4:
        topics.append(("t1", rng.randint(1, 6)))
    session = rng.choice((3_000, 6_000, 10_000))
    heartbeat = session // rng.choice((3, 4))
    max_poll = session * rng.choice((1, 2, 3))
    request_timeout = int(session * rng.choice((0.5, 0.8, 1.0, 1.5)))
    calm = rng.random() < 0.05
    kind = draw_kind(seed, members, flavor)
    return Params(
        seed=seed,
        kind=kind,
        members=members,
        static=static,
        topics=tuple(topics),
        nodes=3,
        session_ms=session,
        heartbeat_ms=heartbeat,
        max_poll_ms=max_poll,
        request_timeout_ms=request_timeout,
        initial_delay_ms=rng.choice((0, 500, 3_000)),
        fault_window_ms=session * rng.uniform(2.0, 6.0),
        fault_events=0.0 if calm else rng.choice((1.0, 3.0, 6.0)),
        p_drop=0.0 if calm else rng.choice((0.0, 0.003, 0.02)),
        p_duplicate=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
        p_delay=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
        p_error=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
        latency_ms=rng.choice((0.5, 2.0, 10.0)),
        remote_assignor=draw_remote_assignor(seed) if kind.consumer_protocol else "uniform",
        later_topic=draw_later_topic(seed) if kind.consumer_protocol else None,
        topic_pattern=draw_topic_pattern(seed) if kind.consumer_protocol else None,
    )


#: How likely a consumer-protocol schedule's group uses the ``range`` server assignor.
RANGE_PROBABILITY = 0.5


#: How likely a consumer-protocol schedule subscribes to a topic created in the window.
LATER_TOPIC_PROBABILITY = 0.3


def draw_later_topic(seed: int) -> tuple[str, int] | None:
    """With :data:`LATER_TOPIC_PROBABILITY`, topic ``t2`` and its partition count (1 to 6):
    the members subscribe to it from the start, and it is created during the faults
    (``_world848.plan_topic_creation``). A stream of its own, like the assignor."""
    rng = random.Random(f"kgroup-sim-later-topic-{seed}")
    if rng.random() < LATER_TOPIC_PROBABILITY:
        return ("t2", rng.randint(1, 6))
    return None


#: How likely a consumer-protocol schedule's members subscribe with a regex.
PATTERN_PROBABILITY = 0.3
#: The regex: every topic of a schedule (``t0``, ``t1``, the later ``t2``), whole names.
TOPIC_PATTERN = "t[0-9]+"


def draw_topic_pattern(seed: int) -> str | None:
    """With :data:`PATTERN_PROBABILITY`, :data:`TOPIC_PATTERN`: the members subscribe with it
    (the broker resolves it) instead of by name. A stream of its own, like the assignor."""
    rng = random.Random(f"kgroup-sim-pattern-{seed}")
    return TOPIC_PATTERN if rng.random() < PATTERN_PROBABILITY else None


def draw_remote_assignor(seed: int) -> str:
    """A consumer-protocol group's server assignor, from a stream of its own: the
    schedule's other draws are the same whichever it is."""
    rng = random.Random(f"kgroup-sim-assignor-{seed}")
    return "range" if rng.random() < RANGE_PROBABILITY else "uniform"


# ---------------------------------------------------------------------------------------------
# Ownership (invariant 1)
# ---------------------------------------------------------------------------------------------


#: What a member holds: a partition (consumer groups) or an item name (GroupProtocols).
Item = TopicPartition | str


@dataclass
class Hold:
    holder: str
    partition: Item
    generation: int
    start: float
    end: float = INF
    how: str = ""
    #: The id of the partition's topic (consumer-protocol groups): a topic deleted and
    #: created again under its name has a new one, and its partitions are other partitions.
    topic_id: uuid.UUID | None = None

    def __str__(self) -> str:
        end = "open" if self.end == INF else f"{self.end:.1f} ({self.how})"
        return f"{self.holder} gen {self.generation} held {self.partition} {self.start:.1f}..{end}"


class Ownership:
    """A holder's hold of a partition runs from the START of its on_partitions_assigned to
    the first of: the END of its on_partitions_revoked, the START of its
    on_partitions_lost, its lease deadline (``member.lease_expired``), its death (a crash
    ends holds at the earlier of the crash and the lease it had then).

    A GroupProtocol's items (``LEADER``, resource names) are held by the same rules: its
    listener receives item names where a consumer's receives partitions, and nothing here
    looks inside what is held."""

    def __init__(self) -> None:
        self.holds: list[Hold] = []
        self._open: dict[tuple[str, Item], Hold] = {}
        self._by_holder: dict[str, list[Hold]] = {}
        #: A holder given a partition under a name it still holds for a topic of another
        #: id (one deleted and created again): the application cannot tell the two apart.
        self.name_clashes: list[str] = []

    def assigned(
        self,
        holder: str,
        parts: Iterable[Item],
        gen: int,
        at: float,
        topic_ids: Mapping[Item, uuid.UUID] | None = None,
    ) -> None:
        for tp in parts:
            tid = None if topic_ids is None else topic_ids.get(tp)
            held = self._open.get((holder, tp))
            if held is not None and held.topic_id != tid:
                self.name_clashes.append(f"{held} and given {tp} of another topic id at {at:.1f}")
            if held is None:
                hold = Hold(holder, tp, gen, at, topic_id=tid)
                self._open[(holder, tp)] = hold
                self.holds.append(hold)
                self._by_holder.setdefault(holder, []).append(hold)

    def holds_of(self, holder: str, item: Item) -> list[Hold]:
        """``holder``'s holds of ``item``, open or ended."""
        return [h for h in self._by_holder.get(holder, ()) if h.partition == item]

    def last_hold(self, holder: str, item: Item) -> Hold | None:
        """``holder``'s latest hold of ``item``, open or ended."""
        holds = self.holds_of(holder, item)
        return max(holds, key=lambda h: h.start) if holds else None

    def lease_expired(self, holder: str, deadline: float) -> None:
        """The holder's lease ran out at ``deadline``: every hold it had then ends there,
        also one already recorded as ending later (a revoke callback that ran past the
        deadline, the event reported late because the process was paused)."""
        for hold in self._by_holder.get(holder, ()):
            if hold.start <= deadline < hold.end:
                self._open.pop((holder, hold.partition), None)
                hold.end = deadline
                hold.how = "lease_expired"

    def end(self, holder: str, parts: Iterable[Item], at: float, how: str) -> None:
        for tp in parts:
            hold = self._open.pop((holder, tp), None)
            if hold is not None:
                hold.end = max(at, hold.start)
                hold.how = how

    def end_all(self, holder: str, at: float, how: str) -> None:
        for key in [k for k in self._open if k[0] == holder]:
            hold = self._open[key]
            if hold.start <= at:
                self.end(holder, [key[1]], at, how)

    def overlaps(self) -> list[tuple[Hold, Hold]]:
        by_tp: dict[Item, list[Hold]] = {}
        for hold in self.holds:
            if hold.end > hold.start:
                by_tp.setdefault(hold.partition, []).append(hold)
        found = []
        for tp in sorted(by_tp, key=str):
            holds = sorted(by_tp[tp], key=lambda h: (h.start, h.holder))
            for i, a in enumerate(holds):
                for b in holds[i + 1 :]:
                    if b.start >= a.end or a.topic_id != b.topic_id:
                        continue
                    if a.holder != b.holder:
                        found.append((a, b))
        return found


# ---------------------------------------------------------------------------------------------
# A member process
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# The world
# ---------------------------------------------------------------------------------------------


@dataclass
class Result:
    seed: int
    params: Params
    #: Invariant 5: generations formed since the group's membership last changed after the
    #: faults stopped (None: not every member of those generations was COOPERATIVE).
    cooperative_rebalances: int | None
    trace: list[str]
    faults: Counter[str]
    events: Counter[str]
    rebalances: int
    time_to_stable: float | None
    virtual_ms: float
    sim_events: int
    failure: SimulationFailure | None = None
    holds: int = 0
    notes: list[str] = field(default_factory=list)


class World:
    def __init__(
        self, params: Params, rng: random.Random, *, tracing: bool, ghosts: bool = False
    ) -> None:
        self.params = params
        self.rng = rng
        self.tracing = tracing
        self.ghosts = ghosts
        self.trace: list[str] = []
        self.sched = Scheduler()
        self.faulty = False
        #: The fault-free period starts no earlier than this (see ``echo``).
        self.quiet_at = 0.0
        #: Messages and answers a fault touched so far (see ``Network._touched_since``).
        self.touches = 0
        self.faults: Counter[str] = Counter()
        self.event_counts: Counter[str] = Counter()
        self.failure: SimulationFailure | None = None
        self.ownership = Ownership()
        self.broker_config = BrokerConfig(initial_rebalance_delay_ms=params.initial_delay_ms)
        #: The topics' partition counts now (a consumer-protocol schedule may grow one).
        self.topics: dict[str, int] = dict(params.topics)
        #: How many times each topic was deleted and created again under its name (a new
        #: topic id each time: ``_model_848.topic_id``).
        self.topic_recreations: Counter[str] = Counter()
        #: OffsetCommits the consumer-protocol coordinator took: (holder, partition, topic
        #: id, when); checked against the holds at the end (:meth:`commits_of_others`).
        self.commits: list[tuple[str, TopicPartition, uuid.UUID | None, float]] = []
        #: ... of which by name onto a topic created again (see :meth:`commit_taken`).
        self.commits_by_name = 0
        #: The offsets the coordinator stored, by topic id and partition (they survive a
        #: coordinator move, as ``__consumer_offsets`` does); read by OffsetFetch.
        self.stored_offsets: dict[IdPartition, int] = {}
        #: OffsetFetches by topic id that named a partition by an id its member never held
        #: it under (:meth:`fetch_asked`).
        self.fetches_by_wrong_id: list[str] = []
        #: The broker lacks OffsetCommit v10 (Kafka 4.0 and 4.1): commits go by name
        #: (``offsets_by_name``), drawn for a consumer-protocol schedule.
        self.offsets_by_name = False
        self.net = Network(self)
        self.cluster = Cluster(self, params.nodes)
        self.slots: dict[str, Process | None] = {}
        self.incarnations: Counter[str] = Counter()
        self.statics: dict[str, str | None] = {}
        #: Consumer kinds: the assignor list each slot's next incarnation runs.
        self.slot_assignors: dict[str, tuple[str, ...]] = {}
        #: Slots reconfigured to the bridge list after INCONSISTENT_GROUP_PROTOCOL.
        self.rolled_back: set[str] = set()
        #: Every generation a join phase formed, in order (invariant 5).
        self.generations: list[Formed] = []

    @property
    def now(self) -> float:
        return self.sched.now

    def log(self, who: str, text: str) -> None:
        if self.tracing:
            self.trace.append(f"{self.sched.now:12.3f} {who:>9} {text}")

    def count(self, kind: str) -> None:
        self.faults[kind] += 1

    def echo(self, until: float) -> None:
        """A fault's direct effect lasts until ``until``: a network operation it could
        touch resolves, a coordinator loads, a broker comes back, a slow poll ends."""
        self.quiet_at = max(self.quiet_at, until)

    def commit_taken(
        self,
        proc: Process,
        msg: OffsetCommitRequest,
        taken: Mapping[TopicPartition, uuid.UUID | None],
    ) -> None:
        """The coordinator took ``taken`` of ``msg`` from ``proc``: each partition with the
        topic id it was stored under (by id at v10; by name, the topic's current id).

        A member that holds (or last held) a partition of a topic deleted and created
        again since, and commits it by name (OffsetCommit v9, on a broker without v10, or
        when a partition of the commit was never held) before it has heard of the new
        topic, has it stored for the new topic's partition of that name, which another
        member may hold: no client on v9 can tell. Such commits are counted
        (``commit_by_name_onto_a_new_topic``, limitations.md), not checked against the
        holds; by id (v10) there must be none (:meth:`commits_by_name_unexpected`), and
        one stored for another id than the member held the partition under counts too."""
        offsets = {(p.topic, p.partition): p.offset for p in msg.partitions}
        for tp, tid in taken.items():
            if tid is not None:
                self.stored_offsets[IdPartition(tid, tp.partition)] = offsets[tp]
            mine = self.ownership.last_hold(proc.holder, tp)
            if mine is not None and mine.topic_id is not None and mine.topic_id != tid:
                self.commits_by_name += 1
                self.count_event("commit_by_name_onto_a_new_topic")
                continue
            self.commits.append((proc.holder, tp, tid, self.now))
        self.count_event("commit_taken")

    def fetch_asked(self, proc: Process, msg: OffsetFetchRequest) -> None:
        """An OffsetFetch by topic id reached the coordinator: each partition must be named
        by an id its member held it under (kgroup names it by the id it holds, or last
        held, it under; a hold may have ended since the request left)."""
        for topic, partition, tid in msg.topic_ids:
            tp = TopicPartition(topic, partition)
            held = {h.topic_id for h in self.ownership.holds_of(proc.holder, tp)}
            if held and tid not in held:
                self.fetches_by_wrong_id.append(
                    f"{proc.holder} fetched {tp} by topic id {tid} at {self.now:.1f}, "
                    f"having held it under {sorted(map(str, held))}"
                )

    def commits_by_name_unexpected(self) -> str | None:
        """By id (the broker has OffsetCommit v10), no commit of a partition held under
        a topic's old id may be stored for the new topic: kgroup names every partition by
        the id it was held under."""
        if self.offsets_by_name or not self.commits_by_name:
            return None
        return f"{self.commits_by_name} commit(s) by name onto a new topic on a v10 broker"

    def commits_of_others(self) -> list[str]:
        """Commits the coordinator took for a partition while another member held it (the
        offsets of its new owner overwritten): invariant 1 for offsets."""
        found = []
        holds: dict[TopicPartition, list[Hold]] = {}
        for hold in self.ownership.holds:
            if isinstance(hold.partition, TopicPartition) and hold.end > hold.start:
                holds.setdefault(hold.partition, []).append(hold)
        for holder, tp, tid, at in self.commits:
            for hold in holds.get(tp, ()):
                if hold.holder != holder and hold.topic_id == tid and hold.start <= at < hold.end:
                    found.append(f"{holder} committed {tp} at {at:.1f} while {hold}")
        return found

    def count_event(self, kind: str) -> None:
        self.event_counts[kind] += 1

    def generation_formed(
        self, generation: int, protocol: str, members: dict[str, tuple[str, ...]]
    ) -> None:
        self.generations.append(Formed(generation, self.now, protocol, members))

    def fail(self, failure: SimulationFailure) -> None:
        if self.failure is None:
            self.failure = failure
            self.log("world", f"FAILURE {failure}")

    def escaped(self, proc: Process, task: str, exc: BaseException) -> None:
        self.fail(
            SimulationFailure(
                "exception", f"{type(exc).__name__} escaped {proc.holder}'s {task} task: {exc}"
            )
        )

    def guard_model(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except ModelError as exc:
            self.fail(SimulationFailure("model", str(exc)))
            raise

    def maybe_error(self, kind: type) -> int | None:
        if self.faulty and self.rng.random() < self.params.p_error:
            self.count("error")
            self.touches += 1
            error = self.rng.choice(INJECTED_ERRORS[kind])
            self.log("broker", f"inject {ErrorCode(error).name} into {kind.__name__}")
            return error
        return None

    def callback_duration(self) -> float:
        roll = self.rng.random()
        if roll < 0.6:
            return 0.0
        if roll < 0.97:
            return self.rng.uniform(0, 50)
        return self.rng.uniform(0, self.params.heartbeat_ms)

    # -- members ---------------------------------------------------------------------------------

    def start(self, slot: str) -> None:
        if self.slots.get(slot) is not None:
            return
        kind = self.params.kind
        if (
            kind.upgrade is not None
            and self.incarnations[slot] > 0
            and self.slot_assignors[slot] != kind.upgrade_to
            and slot not in self.rolled_back
            and self.rng.random() < kind.upgrade_p
        ):
            # A rolling upgrade: the restarted process runs the new configuration.
            self.slot_assignors[slot] = kind.upgrade_to
            self.log("world", f"{slot} upgraded to {list(kind.upgrade_to)}")
        self.incarnations[slot] += 1
        self.slots[slot] = Process(self, slot, self.incarnations[slot], self.statics[slot])

    def restart_process(self, proc: Process, assignors: tuple[str, ...] | None = None) -> None:
        """The application restarts ``proc`` after a documented fatal error (with
        ``assignors``: reconfigured)."""
        if not proc.alive or self.slots.get(proc.slot) is not proc:
            return
        proc.crash()
        self.slots[proc.slot] = None
        if assignors is not None:
            self.slot_assignors[proc.slot] = assignors
            self.rolled_back.add(proc.slot)
            self.log("world", f"{proc.slot} reconfigured to {list(assignors)}")
        delay = self.rng.uniform(0, self.params.session_ms) if self.faulty else 0.0
        self.sched.at(self.now + delay, _restart, self, proc.slot)

    def live(self) -> list[Process]:
        return [p for p in self.slots.values() if p is not None and p.alive]


def _fault(world: World, kind: str) -> None:
    """One discrete fault, chosen by the plan."""
    rng = world.rng
    params = world.params
    live = [p for p in world.live() if not p.closing]
    S = params.session_ms
    if kind in ("cut", "blackhole", "pause", "slow_poll", "crash", "leave") and not live:
        return
    world.count(kind)
    if kind == "cut":
        proc = rng.choice(live)
        world.log("fault", f"cut {proc.holder}'s coordinator connection")
        conn = proc.coordinator_conn()
        if conn is not None:
            world.net.close(conn, "connection reset by peer")
    elif kind == "blackhole":
        proc = rng.choice(live)
        duration = rng.uniform(0.2, 2.5) * S
        proc.blackholed_until = max(proc.blackholed_until, world.now + duration)
        world.log("fault", f"black-hole {proc.holder} for {duration:.0f} ms")
    elif kind == "pause":
        proc = rng.choice(live)
        duration = rng.uniform(0.2, 2.5) * S
        proc.paused_until = max(proc.paused_until, world.now + duration)
        world.log("fault", f"pause {proc.holder} for {duration:.0f} ms")
    elif kind == "slow_poll":
        proc = rng.choice(live)
        proc.slow_polls += 1
        world.log("fault", f"{proc.holder}'s next poll comes after max_poll_interval")
    elif kind == "crash":
        proc = rng.choice(live)
        slot = proc.slot
        proc.crash()
        world.slots[slot] = None
        world.sched.at(world.now + rng.uniform(0, 2 * S), _restart, world, slot)
    elif kind == "leave":
        proc = rng.choice(live)
        slot = proc.slot
        world.log("fault", f"{proc.holder} closes")

        def gone(_: Any, slot: str = slot, proc: Process = proc) -> None:
            if world.slots.get(slot) is proc:
                world.slots[slot] = None
                delay = rng.uniform(0, 2 * S) if world.faulty else 0.0
                world.sched.at(world.now + delay, _restart, world, slot)

        proc.close().on_done(gone)
    elif kind == "coordinator_move":
        world.cluster.move_coordinator(rng.uniform(0, S), crash_old=False, down_ms=0.0)
    elif kind == "broker_restart":
        cluster = world.cluster
        if rng.random() < 0.6:
            cluster.move_coordinator(rng.uniform(0, S), crash_old=True, down_ms=rng.uniform(0, S))
        else:
            node = rng.choice([n for n in range(params.nodes) if n != cluster.coordinator])
            if cluster.up[node]:
                cluster.node_down(node, rng.uniform(0, S))


def _restart(world: World, slot: str) -> None:
    if world.slots.get(slot) is None:
        world.start(slot)


def _heal(world: World) -> None:
    """The fault window ends: no more faults; paused and black-holed members recover and
    every member slot is live again."""
    world.faulty = False
    world.log("world", "faults stop")
    for proc in world.live():
        proc.unpause()
        proc.blackholed_until = min(proc.blackholed_until, world.now)
        proc.slow_polls = 0
    for slot in world.slots:
        if world.slots[slot] is None:
            world.start(slot)


def stable_state(world: World) -> str | None:
    """None when the group is stable: every member slot live, joined to the coordinator's
    STABLE generation, done with its rebalance, holding exactly what the broker assigned it,
    every partition (item) held by exactly one member, and the kind's own conditions
    (``_groups.kind_unstable``). Otherwise what is missing."""
    if world.params.kind.consumer_protocol:
        return stable_state_848(world)
    cluster = world.cluster
    group = cluster.active_group()
    if group is None or not cluster.up[cluster.coordinator]:
        return "coordinator not loaded"
    assert isinstance(group, ClassicGroupModel)
    if group.state is not GroupState.STABLE:
        return f"group {group.state.name}"
    if group.pending_sync:
        return "pending sync"
    procs = world.live()
    if len(procs) != len(world.slots) or any(p.closing for p in procs):
        return "members not all live"
    if not all(p.started for p in procs):
        return "members not all started"
    ids = {p.core.generation.member_id: p for p in procs}
    if set(ids) != set(group.members):
        return f"members {sorted(group.members)} != {sorted(ids)}"
    union: set[Item] = set()
    count = 0
    for member_id, proc in ids.items():
        core = proc.core
        if core.state is not MemberState.STABLE or core.rejoin_needed:
            return f"{proc.holder} {core.state.name} rejoin={core.rejoin_needed}"
        if core.generation.generation_id != group.generation:
            return f"{proc.holder} in generation {core.generation.generation_id}"
        if proc.completed_generation != group.generation:
            return f"{proc.holder} has not completed generation {group.generation}"
        valid = core.valid_until
        if valid is not None and valid <= world.now:
            return f"{proc.holder} lease lapsed"
        owned = proc.owned
        if owned != group.assignment_of(member_id):
            return f"{proc.holder} owns {sorted(owned)} != broker's"
        union |= owned
        count += len(owned)
    everything = universe(world.params.kind, tuple(world.topics.items()))
    if union != everything or count != len(everything):
        return "partitions not each held exactly once"
    return kind_unstable(world.params.kind, ids)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Drop kgroup's structlog output while a simulation runs (the trace has what matters;
    event hooks still see every event), and restore the configuration after."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        yield
    finally:
        structlog.configure(**saved)


def run_schedule(
    seed: int,
    *,
    trace: bool = False,
    flavor: str | None = None,
    ghosts: bool | None = None,
) -> Result:
    """Run one schedule; never raises for an invariant (see ``Result.failure``).
    ``flavor`` forces the group kind's flavor (default: drawn from the seed, see
    ``_groups``); the schedule's other parameters are the same whatever the flavor.
    ``ghosts`` (default: ``KGROUP_SIM_GHOSTS``) makes connection closes graceful.
    """
    with quiet_logs():
        # The members' retry jitter comes from the module's random (kgroup's default).
        random.seed(seed)
        with deterministic_member_ids(seed):  # KIP-848 member ids (KIP-1082)
            return _run_schedule(seed, trace=trace, flavor=flavor, ghosts=ghosts)


def _run_schedule(seed: int, *, trace: bool, flavor: str | None, ghosts: bool | None) -> Result:
    if ghosts is None:
        ghosts = os.environ.get("KGROUP_SIM_GHOSTS", "") not in ("", "0")
    rng = random.Random(seed)
    params = draw_params(seed, rng, flavor)
    world = World(params, rng, tracing=trace, ghosts=ghosts)
    if not params.kind.consumer_protocol:
        return _run_world(world, seed)
    with spin_guard(world):
        return _run_world(world, seed)


def _run_world(world: World, seed: int) -> Result:
    rng = world.rng
    params = world.params
    world.log("world", params.describe())
    if params.kind.consumer_protocol and params.remote_assignor == "range":
        world.count_event("range_assignor")
    for i in range(params.members):
        slot = f"m{i}"
        world.statics[slot] = f"i{i}" if params.static[i] else None
        if params.kind.assignors:
            world.slot_assignors[slot] = params.kind.assignors[i]
        world.slots[slot] = None
        world.sched.at(rng.uniform(0, params.session_ms / 2), world.start, slot)
    # The fault plan: message faults on for the window, discrete faults at random times.
    fault_start = rng.uniform(0, params.session_ms)
    fault_end = fault_start + params.fault_window_ms

    def faults_on() -> None:
        world.faulty = True
        world.log("world", "faults start")

    world.sched.at(fault_start, faults_on)
    n_faults = _poisson(rng, params.fault_events)
    weights = {
        "cut": 3,
        "blackhole": 3,
        "pause": 3,
        "slow_poll": 2,
        "crash": 2,
        "leave": 2,
        "coordinator_move": 2,
        "broker_restart": 1,
    }
    kinds = list(weights)
    for _ in range(n_faults):
        kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
        world.sched.at(rng.uniform(fault_start, fault_end), _fault, world, kind)
    world.sched.at(fault_end, _heal, world)
    if params.kind.consumer_protocol:
        plan_topic_growth(world, seed, fault_start, fault_end)
        plan_topic_deletion(world, seed, fault_start, fault_end)
        plan_topic_creation(world, seed, fault_start, fault_end)
        plan_topic_recreation(world, seed, fault_start, fault_end)
        plan_offsets_version(world, seed)

    bound = params.stable_bound_ms
    settle = 2 * params.session_ms + params.max_poll_ms
    check_every = params.heartbeat_ms / 2
    stable_at: float | None = None  # start of the current stable window
    window_generation = -1
    t = fault_end
    try:
        while world.failure is None:
            world.sched.run_until(t)
            if world.failure is not None:
                break
            group = world.cluster.active_group()
            if stable_state(world) is None and group is not None:
                if stable_at is None or group.generation != window_generation:
                    stable_at, window_generation = world.now, group.generation
                elif world.now - stable_at >= settle:
                    break  # stable, and it stayed so: quiescent
            else:
                stable_at = None
            if stable_at is None and world.now >= fault_end + bound:
                world.fail(
                    SimulationFailure(
                        "stability",
                        f"not stable {bound:.0f} ms after the faults stopped "
                        f"({stable_state(world)}); bound = "
                        + (
                            "T + 2S + 1.5R + 6H + 2s"
                            if params.kind.consumer_protocol
                            else "J + S + 5R + 4H + 1s"
                        ),
                    )
                )
            t += check_every
    except ModelError as exc:  # recorded by guard_model, unless raised outside it
        if world.failure is None:
            world.fail(SimulationFailure("model", str(exc)))
    except Exception as exc:  # a bug in the simulator itself: still a failure with its seed
        import traceback

        world.fail(SimulationFailure("simulator", "".join(traceback.format_exception(exc)).strip()))
    if world.failure is None and (others := world.commits_of_others()):
        world.fail(SimulationFailure("ownership", f"{len(others)} commit(s): {others[0]}"))
    if world.failure is None and (by_name := world.commits_by_name_unexpected()):
        world.fail(SimulationFailure("ownership", by_name))
    if world.failure is None and world.fetches_by_wrong_id:
        wrong = world.fetches_by_wrong_id
        world.fail(SimulationFailure("ownership", f"{len(wrong)} fetch(es): {wrong[0]}"))
    if world.failure is None and world.ownership.name_clashes:
        clashes = world.ownership.name_clashes
        world.fail(SimulationFailure("ownership", f"{len(clashes)} name clash(es): {clashes[0]}"))
    if world.failure is None:
        overlaps = world.ownership.overlaps()
        if overlaps:
            lines = "; ".join(f"{a} / {b}" for a, b in overlaps[:5])
            world.fail(
                SimulationFailure(
                    "ownership", f"{len(overlaps)} partition(s) held twice at once: {lines}"
                )
            )
    counted: int | None = None
    if world.failure is None:
        quiet = max(fault_end, world.quiet_at)
        world.log("world", f"the fault-free period started at {quiet:.3f}")
        counted, problem = cooperative_rebalances(params.kind, world.generations, quiet)
        if problem is not None:
            world.fail(SimulationFailure("cooperative", problem))
    world.log("world", f"end: {world.sched.events} events")
    for proc in world.live():
        proc.retire()  # the schedule is over: what its loops still hold is not a failure
    return Result(
        seed=seed,
        params=params,
        cooperative_rebalances=counted,
        trace=world.trace,
        faults=world.faults,
        events=world.event_counts,
        rebalances=world.cluster.rebalances,
        time_to_stable=None if stable_at is None else stable_at - fault_end,
        virtual_ms=world.now,
        sim_events=world.sched.events,
        failure=world.failure,
        holds=len(world.ownership.holds),
    )


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    limit = math.exp(-mean)
    k, p = 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k
