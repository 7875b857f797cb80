"""Seeded chaos schedules: plain data, made by a pure function of the seed and parameters.

:func:`make_schedule` draws every choice from one ``random.Random(seed)``, so a schedule is
replayed from its seed and parameters alone. A :class:`Schedule` is frozen dataclasses all
the way down, prints as a readable timeline (``str(schedule)``) and round-trips through JSON
(:meth:`Schedule.to_json` / :meth:`Schedule.from_json`), so the same schedule can be fed to
the real-broker runner (``_runner.py``) or to a simulator.

A schedule has a *fault window*: every step starts and ends inside ``[0, fault_window]``
seconds after the window opens (the runner opens it once the group is first stable). Then
the faults stop, and the group must become stable again within a bound derived from the
timeouts (``_runner.stable_bound``).

Fault kinds (``Step.kind``: brokers; ``Step.args``):

- ``crash`` (all; ``member``): SIGKILL the member's process.
- ``pause`` (all; ``member``, ``duration``): SIGSTOP, then SIGCONT after ``duration``
  seconds, always longer than the session timeout.
- ``leave`` (all; ``member``): SIGTERM; the process calls ``close()``.
- ``rejoin`` (all; ``member``): a new process in a crashed or left member's slot (the same
  ``group.instance.id`` when static).
- ``black_hole`` (kafka; ``duration``, ``direction``, ``end``): the proxy drops the bytes;
  at the end it heals, after resetting every proxied connection when ``end`` is "cut".
- ``latency`` (kafka; ``duration``, ``seconds``, ``jitter``): the proxy delays every chunk.
- ``cut`` (kafka): the proxy resets every proxied connection.
- ``broker_restart`` (kafka; ``hard``: SIGKILL, not a controlled shutdown): groups and
  topics survive.
- ``tansu_restart`` (tansu): groups and topics are lost; the runner recreates the topic.
- ``coordinator_move`` (mock; ``broker_id``).
- ``broker_down`` (mock; ``broker_id``, ``duration``): down, then up again.
- ``inject_errors`` (mock; ``api`` name, ``api_key``, ``codes``): the next requests of that
  API fail with these codes, in order.
- ``roll`` (kafka, migration schedules; ``member``): SIGTERM the member (it closes), then
  start its next process, on the consumer protocol (a migration back: its second roll, or
  restart, starts it on classic again).
- ``add_partitions`` (kafka, schedules with ``topic_changes``; ``total``): CreatePartitions
  grows the group's topic to ``total`` partitions; the group must end up owning them all.
  Drawn apart from the other faults (:func:`_add_topic_changes`), never while the broker
  restarts.
- ``create_topic`` (kafka, schedules with ``topic_changes``: every one with ``pattern``
  and no Java or confluent member, half of those without ``pattern``; ``index``,
  ``partitions``): a second topic, named after the group's topic with ``-INDEX``
  appended, which the kgroup members' pattern then matches, or which every member (Java
  and confluent ones too) subscribed to by name from the start
  (:attr:`Schedule.named_topics`); the group must end up owning its partitions too. Drawn
  like ``add_partitions``, from a generator of its own.
- ``delete_topic`` (kafka, half the schedules with a ``create_topic`` step; ``index``):
  DeleteTopics removes that second topic again, at least 2 s after it was created; the
  group must end up owning the rest and nothing of it. Drawn from a generator of its own,
  never while the broker restarts.
- ``create_again`` (kafka, half the schedules with a ``delete_topic`` step; ``index``,
  ``partitions``): CreateTopics makes that topic again under its name, at least 2 s after
  its deletion, with as many partitions as it had or up to two more: a new topic id, so
  to Kafka its partitions are others than the old ones of the same names. The group must
  end up owning them all again. Drawn like ``delete_topic``, from a generator of its own.

Proxy faults never overlap (each ends with a heal), nor do broker restarts or downs.
Members named in steps are slots ``m1`` .. ``mN``; a ``rejoin`` starts a new process (a new
*incarnation*) in the slot. On Kafka some members bootstrap through the fault proxy
(``MemberSpec.via_proxy``) and the others directly, so a black hole cuts off only some.

Mixed groups (Kafka only; ``java_members``): some slots run Kafka's Java ``KafkaConsumer``
(``MemberSpec.java``, ``kgroup/testing/java/JavaMember.java``) beside kgroup members, with
the same assignor. The Java client does not fence itself (it keeps its partitions while cut
off from the coordinator, until it hears it was evicted), so Java slots only get the faults
after which it holds nothing the coordinator gave to someone else (:data:`JAVA_FAULTS`:
crash, leave, rejoin; the broker restarts hit every member alike): they connect directly,
never through the proxy, and are never paused. kgroup slots get every fault as usual.

Group protocols (Kafka only; ``Schedule.protocol``): ``classic`` (JoinGroup/SyncGroup, every
schedule so far), ``consumer`` (KIP-848: the broker assigns with ``remote_assignor``; some
slots may run Kafka's Java consumer or confluent-kafka (librdkafka, ``MemberSpec.confluent``,
``_confluent_proc.py``), both on the consumer protocol, with the Java slots' rules) and
``migration``: a classic group of kgroup members (``assignor``; some slots may run Kafka's
Java consumer or confluent-kafka, on classic until their roll) whose slots are rolled one
by one onto the consumer protocol (``roll`` steps) while the faults run; every process
started after a slot's first (a roll, a rejoin) runs the consumer protocol; and
``migration-back``: likewise, but a slot's second restart (a roll, a rejoin) takes it back
to classic, where it stays, so that Kafka converts the group back to a classic group once
no consumer-protocol member is left (:func:`~._protocols.final_protocols`).
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._protocols import (
    BACK_ROLL_GAP,
    MIGRATIONS,
    PROTOCOLS,
    REMOTE_ASSIGNORS,
    ROLL_BUSY,
    ROLL_WEIGHT,
    ROLLS,
    back_tail,
    check_protocol,
    protocol_for,
)

__all__ = [
    "ASSIGNORS",
    "BROKERS",
    "CREATE_AGAIN_PROBABILITY",
    "DELETE_TOPIC_PROBABILITY",
    "FAULT_KINDS",
    "JAVA_ASSIGNORS",
    "JAVA_FAULTS",
    "NAMED_TOPIC_PROBABILITY",
    "PROTOCOLS",
    "REMOTE_ASSIGNORS",
    "MemberSpec",
    "Schedule",
    "Step",
    "Timeouts",
    "handoff_for",
    "make_schedule",
    "protocol_for",
]

BrokerKind = Literal["kafka", "tansu", "mock"]
BROKERS: tuple[BrokerKind, ...] = ("kafka", "tansu", "mock")
ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky", "upgrade-1", "upgrade-2")
#: Assignors a mixed group may use (one name: JavaMember maps it to Kafka's class).
JAVA_ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
#: ``schedule_for``: how likely a Kafka cooperative-sticky schedule is a mixed group.
MIXED_PROBABILITY = 0.5
#: ``schedule_for``: how likely a Kafka schedule grows its topic under the faults
#: (``topic_changes``; not a classic group with Java members, whose leader reads metadata
#: only every five minutes).
TOPIC_CHANGE_PROBABILITY = 0.3
#: ``schedule_for``: how likely a Kafka schedule's kgroup members subscribe with a pattern
#: (``pattern``) instead of the topic's name.
PATTERN_PROBABILITY = 0.3

#: ``assignor="upgrade-1"`` / ``"upgrade-2"``: the group is in the middle of one of KIP-429's
#: two rolling bounces from eager to cooperative while the faults run. A group never mixes
#: the first list with the last (those members share no assignor): bounce 1 moves members
#: from ``range`` to ``cooperative-sticky,range`` (all still EAGER), bounce 2 from there to
#: ``cooperative-sticky`` alone (COOPERATIVE members beside EAGER ones). Slots start half on
#: the old list, half on the new; every restarted process takes the new one.
UPGRADE_BOUNCES = {
    "upgrade-1": ("range", "cooperative-sticky,range"),
    "upgrade-2": ("cooperative-sticky,range", "cooperative-sticky"),
}


def assignors_for(assignor: str, slot: str, incarnation: int) -> str:
    """The ``--assignor`` of ``slot``'s ``incarnation``-th process (1 = the first): the
    schedule's name (or names separated by commas), or for an upgrade the old list (odd
    slots' first process) or the new one (see :data:`UPGRADE_BOUNCES`)."""
    bounce = UPGRADE_BOUNCES.get(assignor)
    if bounce is None:
        return assignor
    old, new = bounce
    odd = int(slot.lstrip("m") or 0) % 2 == 1
    return old if incarnation == 1 and odd else new


def handoff_for(seed: int, name: str) -> bool:
    """Whether the kgroup process ``name`` (``m2``, ``m2.3``) closes with the handoff
    (``handoff_on_close``): half of them, from a hash of the seed and the name rather than
    the schedule's random stream, so that every other draw of a seed stays as it was."""
    return zlib.crc32(f"{seed}/{name}/handoff".encode()) % 2 == 0


MEMBER_FAULTS = ("crash", "pause", "leave", "rejoin")
PROXY_FAULTS = ("black_hole", "latency", "cut")
#: Member faults a Java slot may get: the Java client survives them without holding a
#: partition that the coordinator gave to another member (a SIGKILLed JVM holds nothing; a
#: closing one revokes or loses everything before it exits). Not ``pause``: a JVM stopped
#: for longer than the session keeps its partitions when it continues, until a heartbeat
#: or poll tells it it was evicted, while the new owner already works on them. Not the
#: proxy faults either (Java slots connect directly), for the same reason. A confluent slot
#: (consumer protocol) gets the same faults, for the same reasons.
JAVA_FAULTS = ("crash", "leave", "rejoin")
FAULT_KINDS = (
    *MEMBER_FAULTS,
    *PROXY_FAULTS,
    "broker_restart",
    "tansu_restart",
    "coordinator_move",
    "broker_down",
    "inject_errors",
    "roll",
    "add_partitions",
    "create_topic",
    "delete_topic",
    "create_again",
)

#: How likely each fault is, per broker (weights; a fault whose preconditions do not hold
#: at that moment is not drawn).
WEIGHTS: dict[str, dict[str, float]] = {
    "kafka": {
        "crash": 2.0,
        "pause": 2.0,
        "leave": 1.5,
        "rejoin": 2.5,
        "black_hole": 2.0,
        "latency": 1.5,
        "cut": 1.0,
        "broker_restart": 1.0,
    },
    "tansu": {"crash": 2.0, "pause": 2.0, "leave": 1.5, "rejoin": 2.5, "tansu_restart": 1.2},
    "mock": {
        "crash": 1.5,
        "pause": 1.5,
        "leave": 1.0,
        "rejoin": 2.0,
        "coordinator_move": 2.0,
        "broker_down": 2.0,
        "inject_errors": 2.5,
    },
}

# Group API keys and the codes injected into them on the mock cluster. Every code here is
# retriable for that API (spec §4), except GROUP_AUTHORIZATION_FAILED, drawn rarely, which
# is fatal and makes ``GroupAuthorizationFailed`` an expected exception of the schedule.
API_KEYS = {"FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13}
API_KEYS["SyncGroup"] = 14
TRANSPORT = -195  # RD_KAFKA_RESP_ERR__TRANSPORT: the mock drops the connection
RETRIABLE_CODES: dict[str, tuple[int, ...]] = {
    "FindCoordinator": (15, TRANSPORT),
    "JoinGroup": (14, 15, 16, 25, TRANSPORT),
    "SyncGroup": (14, 15, 16, 22, 25, 27, TRANSPORT),
    "Heartbeat": (15, 16, 22, 25, 27, TRANSPORT),
    "LeaveGroup": (15, 16, 25, TRANSPORT),
}
GROUP_AUTHORIZATION_FAILED = 30
#: exception class name that a fatal injected code makes legitimate
FATAL_CODES = {GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationFailed"}

#: Seconds a broker restart is assumed to take (no second one starts meanwhile; the runner
#: also serialises them): Kafka 2-3 s, 11-12 s after SIGKILL; tansu stops on SIGTERM within
#: a few seconds.
RESTART_BUSY = {"soft": 4.0, "hard": 14.0, "tansu": 6.0}


@dataclass(frozen=True)
class Timeouts:
    """The members' timeouts (ms), as in :class:`kgroup.GroupConfig`."""

    session_ms: int
    heartbeat_ms: int
    max_poll_ms: int
    request_timeout_ms: int
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    close_timeout_ms: int = 10_000

    @property
    def session(self) -> float:
        return self.session_ms / 1000.0

    @property
    def join_timeout(self) -> float:
        """kgroup's JoinGroup request timeout (GroupConfig.join_timeout_ms), seconds."""
        return max(self.request_timeout_ms, self.max_poll_ms + 5_000) / 1000.0


#: Short timeouts per broker, so that faults resolve in seconds. The mock waits
#: ``session - 1 s`` in every rebalance of a non-empty group, hence its shorter session.
#: tansu blocks a SyncGroup of a stale generation or member ~8 s (then 27) and adds ~3 s
#: pauses to static joins and syncs: with a request timeout below that, SyncGroups time out
#: one after the other and a static group never forms, hence its longer request timeout.
DEFAULT_TIMEOUTS: dict[str, Timeouts] = {
    "kafka": Timeouts(
        session_ms=6_000, heartbeat_ms=500, max_poll_ms=12_000, request_timeout_ms=5_000
    ),
    "tansu": Timeouts(
        session_ms=6_000, heartbeat_ms=500, max_poll_ms=15_000, request_timeout_ms=12_000
    ),
    "mock": Timeouts(
        session_ms=5_000, heartbeat_ms=500, max_poll_ms=12_000, request_timeout_ms=5_000
    ),
}


@dataclass(frozen=True)
class MemberSpec:
    """One member slot: its name, its static identity (None: dynamic), whether it reaches
    the broker through the fault proxy, and whether it runs Kafka's Java consumer or
    confluent-kafka (librdkafka, consumer protocol only) instead of kgroup."""

    slot: str
    instance_id: str | None = None
    via_proxy: bool = False
    java: bool = False
    confluent: bool = False

    @property
    def foreign(self) -> bool:
        """Another client than kgroup (Java or confluent): only :data:`JAVA_FAULTS`."""
        return self.java or self.confluent

    @property
    def client(self) -> str:
        return "java" if self.java else "confluent" if self.confluent else "kgroup"

    def to_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "instance_id": self.instance_id,
            "via_proxy": self.via_proxy,
            "java": self.java,
            "confluent": self.confluent,
        }


JSONValue = str | int | float | bool | None | tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One fault: ``at`` seconds after the fault window opens, a ``kind`` and its ``args``
    (sorted ``(name, value)`` pairs; values are JSON scalars or tuples of ints)."""

    at: float
    kind: str
    args: tuple[tuple[str, JSONValue], ...] = ()

    @staticmethod
    def make(at: float, kind: str, **args: JSONValue) -> Step:
        return Step(round(at, 3), kind, tuple(sorted(args.items())))

    @property
    def kwargs(self) -> dict[str, JSONValue]:
        return dict(self.args)

    def arg(self, name: str, default: Any = None) -> Any:
        return self.kwargs.get(name, default)

    @property
    def member(self) -> str | None:
        value = self.arg("member")
        return None if value is None else str(value)

    @property
    def duration(self) -> float:
        return float(self.arg("duration", 0.0))

    @property
    def end(self) -> float:
        return self.at + self.duration

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "kind": self.kind,
            "args": {k: list(v) if isinstance(v, tuple) else v for k, v in self.args},
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Step:
        args = {
            k: tuple(v) if isinstance(v, list) else v for k, v in dict(data.get("args", {})).items()
        }
        return Step(float(data["at"]), str(data["kind"]), tuple(sorted(args.items())))

    def __str__(self) -> str:
        text = " ".join(f"{k}={v}" for k, v in self.args)
        return f"+{self.at:6.2f}s  {self.kind:<16} {text}".rstrip()


@dataclass(frozen=True)
class Schedule:
    """A chaos schedule: who is in the group, how it is configured, and the faults."""

    seed: int
    broker: str
    static: bool
    assignor: str
    partitions: int
    members: tuple[MemberSpec, ...]
    timeouts: Timeouts
    fault_window: float
    steps: tuple[Step, ...]
    #: Seconds of simulated work in every on_partitions_revoked (the member holds its
    #: partitions until the callback returns).
    revoke_work: float = 0.0
    #: Exception class names that a step makes legitimate (e.g. an injected fatal code).
    expected_errors: tuple[str, ...] = ()
    version: int = 1
    #: :data:`PROTOCOLS`; ``remote_assignor``: the broker's assignor of the consumer-protocol
    #: members ("" under the classic protocol).
    protocol: str = "classic"
    remote_assignor: str = ""
    #: ``add_partitions`` steps grow the topic under the faults (classic kgroup members
    #: then re-read metadata every second, so that the leader notices).
    topic_changes: bool = False
    #: The kgroup members subscribe with ``topic_pattern`` (a regex matching only the
    #: group's topic: resolved by the member on the classic protocol, by the broker on the
    #: consumer protocol) instead of the topic's name; Java and confluent members keep the
    #: name.
    pattern: bool = False
    #: The kgroup members are GroupConsumers: they consume records the runner produces
    #: through the run and commit after every batch (invariant 5: at least once).
    records: bool = False

    # -- views ------------------------------------------------------------------------------

    @property
    def faults_end(self) -> float:
        """When the last fault ends (seconds after the window opens)."""
        return max((s.end for s in self.steps), default=0.0)

    def counts(self) -> Counter[str]:
        """Faults per kind."""
        return Counter(s.kind for s in self.steps)

    def kinds(self) -> set[str]:
        return {s.kind for s in self.steps}

    @property
    def named_topics(self) -> tuple[str, ...]:
        """The suffixes (``-2``) of the topics a ``create_topic`` step makes that every
        member subscribes to by name from the start, before they exist (without a pattern);
        empty otherwise."""
        if self.pattern:
            return ()
        return tuple(f"-{st.arg('index')}" for st in self.steps if st.kind == "create_topic")

    @property
    def java_slots(self) -> tuple[str, ...]:
        """The slots run by Kafka's Java consumer (empty: a kgroup-only group)."""
        return tuple(m.slot for m in self.members if m.java)

    @property
    def confluent_slots(self) -> tuple[str, ...]:
        """The slots run by confluent-kafka (consumer protocol only)."""
        return tuple(m.slot for m in self.members if m.confluent)

    @property
    def foreign_slots(self) -> tuple[str, ...]:
        """The slots run by another client than kgroup (Java or confluent)."""
        return tuple(m.slot for m in self.members if m.foreign)

    def member(self, slot: str) -> MemberSpec:
        for spec in self.members:
            if spec.slot == slot:
                return spec
        raise KeyError(slot)

    @property
    def label(self) -> str:
        """A short id: ``kafka-static-range-5m-seed17``, ``...-5m-2java-seed17`` when two of
        the five members are Java consumers; a consumer-protocol schedule says so after the
        broker (``kafka-consumer-static-uniform-4m-1java-1confluent-seed5``), a migration
        names both assignors (``kafka-migration-dynamic-range-to-uniform-3m-seed9``), and
        one whose topic grows says ``topics`` before the seed, one subscribed with a pattern
        ``regex``."""
        kind = "static" if self.static else "dynamic"
        java = f"{len(self.java_slots)}java-" if self.java_slots else ""
        java += f"{len(self.confluent_slots)}confluent-" if self.confluent_slots else ""
        protocol = "" if self.protocol == "classic" else f"{self.protocol}-"
        assignor = self.assignor
        if self.protocol in MIGRATIONS:
            assignor = f"{self.assignor}-to-{self.remote_assignor}"
        topics = "topics-" if self.topic_changes else ""
        topics += "regex-" if self.pattern else ""
        topics += "named-" if self.named_topics else ""
        topics += "records-" if self.records else ""
        return (
            f"{self.broker}-{protocol}{kind}-{assignor}-{len(self.members)}m-{java}{topics}"
            f"seed{self.seed}"
        )

    # -- JSON -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "seed": self.seed,
            "broker": self.broker,
            "static": self.static,
            "assignor": self.assignor,
            "partitions": self.partitions,
            "members": [m.to_json() for m in self.members],
            "timeouts": dict(vars(self.timeouts)),
            "fault_window": self.fault_window,
            "revoke_work": self.revoke_work,
            "expected_errors": list(self.expected_errors),
            "protocol": self.protocol,
            "remote_assignor": self.remote_assignor,
            "topic_changes": self.topic_changes,
            "pattern": self.pattern,
            "records": self.records,
            "steps": [s.to_json() for s in self.steps],
        }

    def dumps(self, indent: int | None = None) -> str:
        return json.dumps(self.to_json(), indent=indent, sort_keys=True)

    @staticmethod
    def from_json(data: Mapping[str, Any] | str) -> Schedule:
        if isinstance(data, str):
            data = json.loads(data)
        assert isinstance(data, Mapping)
        return Schedule(
            seed=int(data["seed"]),
            broker=str(data["broker"]),
            static=bool(data["static"]),
            assignor=str(data["assignor"]),
            partitions=int(data["partitions"]),
            members=tuple(MemberSpec(**m) for m in data["members"]),
            timeouts=Timeouts(**data["timeouts"]),
            fault_window=float(data["fault_window"]),
            steps=tuple(Step.from_json(s) for s in data["steps"]),
            revoke_work=float(data.get("revoke_work", 0.0)),
            expected_errors=tuple(data.get("expected_errors", ())),
            version=int(data.get("version", 1)),
            protocol=str(data.get("protocol", "classic")),
            remote_assignor=str(data.get("remote_assignor", "")),
            topic_changes=bool(data.get("topic_changes", False)),
            pattern=bool(data.get("pattern", False)),
            records=bool(data.get("records", False)),
        )

    def __str__(self) -> str:
        t = self.timeouts
        members = ", ".join(
            m.slot
            + (":java" if m.java else "")
            + (":confluent" if m.confluent else "")
            + ("@proxy" if m.via_proxy else "")
            + (f"[{m.instance_id}]" if m.instance_id else "")
            for m in self.members
        )
        protocol = {
            "classic": "",
            "consumer": f"; consumer protocol, broker assignor {self.remote_assignor}",
            "migration": f"; classic, rolled to the consumer protocol ({self.remote_assignor})",
            "migration-back": (
                f"; classic, rolled to the consumer protocol ({self.remote_assignor}) and back"
            ),
        }[self.protocol]
        if self.topic_changes:
            protocol += "; partitions added under the faults"
        if self.pattern:
            protocol += "; kgroup members subscribe with a pattern"
        if self.named_topics:
            protocol += "; members subscribe by name to a topic created later"
        if self.records:
            protocol += "; GroupConsumers consume and commit records produced through the run"
        lines = [
            f"schedule {self.label}: {self.partitions} partitions, members {members}{protocol}",
            f"  session {t.session_ms} ms, heartbeat {t.heartbeat_ms} ms, max poll "
            f"{t.max_poll_ms} ms, request timeout {t.request_timeout_ms} ms, revoke work "
            f"{self.revoke_work} s; fault window {self.fault_window:.1f} s"
            + (
                f"; expected errors {', '.join(self.expected_errors)}"
                if self.expected_errors
                else ""
            ),
        ]
        lines += [f"  {step}" for step in self.steps] or ["  (no faults)"]
        return "\n".join(lines)


# -- the generator ------------------------------------------------------------------------


@dataclass
class _Slot:
    """The generator's model of one member slot along the timeline."""

    spec: MemberSpec
    alive: bool = True  # a process runs in the slot (crashed/left: False)
    paused_until: float = 0.0
    down_since: float = 0.0
    rejoin_at: float = 0.0  # down: when a rejoin may start a new process in the slot
    restarts: int = 0  # processes started in the slot after its first (rolls, rejoins)

    def usable(self, t: float) -> bool:
        """Running and not paused at ``t``: may be crashed, paused or asked to leave."""
        return self.alive and self.paused_until <= t

    def allows(self, kind: str) -> bool:
        """Whether this slot may get a member fault of ``kind`` (:data:`JAVA_FAULTS`; a
        Java or confluent slot of a migration is rolled too: a close, then a new process)."""
        return not self.spec.foreign or kind in JAVA_FAULTS or kind == "roll"


@dataclass
class _Timeline:
    slots: list[_Slot]
    protocol: str = "classic"
    #: a roll may restart a slot until it has this many restarts (:data:`ROLLS`)
    rolls: int = 0
    proxy_free_at: float = 0.0
    broker_free_at: float = 0.0
    steps: list[Step] = field(default_factory=list)
    expected: set[str] = field(default_factory=set)

    def alive(self) -> int:
        return sum(1 for s in self.slots if s.alive)


def make_schedule(
    seed: int,
    *,
    broker: BrokerKind | str,
    members: int,
    static: bool,
    assignor: str = "range",
    fault_window: float = 20.0,
    gap: tuple[float, float] = (1.0, 4.0),
    timeouts: Timeouts | None = None,
    partitions: int | None = None,
    weights: Mapping[str, float] | None = None,
    hard_restart_probability: float = 0.15,
    fatal_error_probability: float = 0.1,
    java_members: int = 0,
    protocol: str = "classic",
    remote_assignor: str = "",
    confluent_members: int = 0,
    topic_changes: bool = False,
    pattern: bool = False,
) -> Schedule:
    """A random chaos schedule, a pure function of its arguments (``random.Random(seed)``).

    ``members`` (3..8) slots, ``static`` membership (``group.instance.id`` = the slot name) or
    dynamic, ``assignor`` (any name kgroup accepts, names separated by commas, or
    ``"upgrade-1"`` / ``"upgrade-2"``: see :data:`UPGRADE_BOUNCES`). Faults start ``gap``
    seconds apart (uniform) inside ``fault_window`` seconds; ``weights`` overrides
    :data:`WEIGHTS` for the broker. ``java_members`` (Kafka, 1..members-1, an assignor of
    :data:`JAVA_ASSIGNORS`) slots run Kafka's Java consumer: direct, and only the faults of
    :data:`JAVA_FAULTS`; at least one kgroup slot is proxied.

    ``protocol`` (:data:`PROTOCOLS`; not classic: Kafka only): ``"consumer"`` runs every slot
    on KIP-848's consumer protocol with the broker's ``remote_assignor`` (default: the
    ``assignor``, one of :data:`REMOTE_ASSIGNORS`), and ``confluent_members`` slots may run
    confluent-kafka (Java slots and confluent slots together fewer than ``members``);
    ``"migration"`` starts a kgroup-only classic group on ``assignor`` and adds ``roll``
    steps (:data:`ROLL_WEIGHT`) that move its slots, one at a time, onto the consumer
    protocol with ``remote_assignor``; ``"migration-back"`` rolls each slot twice, onto
    the consumer protocol and back to classic.

    ``topic_changes`` (Kafka; not a classic group with Java members) adds one or two
    ``add_partitions`` steps, drawn from a generator of their own
    (:func:`_add_topic_changes`), so the other faults are those of the same seed without.
    ``pattern``: the kgroup members subscribe with a regex (:attr:`Schedule.pattern`);
    it changes no draw.
    """
    if broker not in BROKERS:
        raise ValueError(f"broker must be one of {BROKERS}, not {broker!r}")
    if not 3 <= members <= 8:
        raise ValueError(f"members must be 3..8, not {members}")
    remote_assignor = check_protocol(
        broker, protocol, assignor, remote_assignor, java_members, confluent_members
    )
    if java_members or confluent_members:
        if broker != "kafka":
            raise ValueError(f"Java members run on Kafka only, not on {broker}")
        if not 1 <= java_members + confluent_members < members:
            raise ValueError(
                f"java_members + confluent_members must be 1..{members - 1}, not "
                f"{java_members + confluent_members}"
            )
        if protocol == "classic" and assignor not in JAVA_ASSIGNORS:
            raise ValueError(f"a mixed group's assignor is one of {JAVA_ASSIGNORS}")
    if topic_changes and (broker != "kafka" or (protocol == "classic" and java_members)):
        raise ValueError("topic_changes needs Kafka, and no Java member in a classic group")
    rng = random.Random(seed)
    t_out = timeouts or DEFAULT_TIMEOUTS[broker]
    session = t_out.session
    n_partitions = partitions if partitions is not None else rng.randint(members, 2 * members + 2)
    java: set[int] = set()
    confluent: set[int] = set()
    if java_members or confluent_members:
        # Java and confluent slots connect directly; between one and all of the kgroup slots
        # are proxied.
        foreign = rng.sample(range(members), java_members + confluent_members)
        java, confluent = set(foreign[:java_members]), set(foreign[java_members:])
        others = [i for i in range(members) if i not in java | confluent]
        proxied = set(rng.sample(others, rng.randint(1, len(others))))
    else:
        n_proxied = rng.randint(1, members - 1) if broker == "kafka" else 0
        proxied = set(rng.sample(range(members), n_proxied))
    specs = tuple(
        MemberSpec(
            slot=f"m{i + 1}",
            instance_id=f"m{i + 1}" if static else None,
            via_proxy=i in proxied,
            java=i in java,
            confluent=i in confluent,
        )
        for i in range(members)
    )
    revoke_work = rng.choice((0.0, 0.0, 0.05, 0.3))
    table = dict(weights if weights is not None else WEIGHTS[broker])
    if protocol in MIGRATIONS:
        table.setdefault("roll", ROLL_WEIGHT)
    line = _Timeline([_Slot(spec) for spec in specs], protocol, ROLLS.get(protocol, 0))
    # A migration back keeps the window's tail for rolling back whoever is still on the
    # consumer protocol (every other fault ends before it).
    main = fault_window - (back_tail(members) if protocol == "migration-back" else 0.0)
    t = round(rng.uniform(0.3, gap[0]), 3)
    while t < main - 0.5:
        kind = _draw(rng, table, line, t, main, session)
        if kind is not None:
            _add(
                rng,
                kind,
                line,
                t,
                main,
                session,
                broker,
                hard_restart_probability,
                fatal_error_probability,
            )
        t = round(t + rng.uniform(*gap), 3)
    if protocol == "migration-back":
        _roll_back(rng, line, max(t, main))
    if topic_changes:
        _add_topic_changes(random.Random(f"topics/{seed}"), line, main, n_partitions)
        kgroup_only = not (java_members or confluent_members)
        # A draw of its own: a schedule subscribed by name gets a topic created for it in
        # half the cases, every other draw of the seed staying what it was.
        named = random.Random(f"named-topic/{seed}").random() < NAMED_TOPIC_PROBABILITY
        if (pattern and kgroup_only) or (named and not pattern):
            _add_new_topic(random.Random(f"new-topic/{seed}"), line, main)
            _delete_new_topic(random.Random(f"delete-topic/{seed}"), line, main)
            _create_topic_again(random.Random(f"create-again/{seed}"), line, main)
    return Schedule(
        seed=seed,
        broker=broker,
        static=static,
        assignor=assignor,
        partitions=n_partitions,
        members=specs,
        timeouts=t_out,
        fault_window=fault_window,
        steps=tuple(line.steps),
        revoke_work=revoke_work,
        expected_errors=tuple(sorted(line.expected)),
        protocol=protocol,
        remote_assignor=remote_assignor,
        topic_changes=topic_changes,
        pattern=pattern,
    )


def _add_topic_changes(rng: random.Random, line: _Timeline, window: float, start: int) -> None:
    """One or two ``add_partitions`` steps inside ``window``, each growing the topic by 1
    to 3 partitions, at :func:`_free_time`. The steps are then put in time order with the
    others."""
    drawn = [_free_time(rng, line, window) for _ in range(rng.randint(1, 2))]
    times = [t for t in drawn if t is not None]
    total = start
    for t in sorted(times):
        total += rng.randint(1, 3)
        line.steps.append(Step.make(t, "add_partitions", total=total))
    line.steps.sort(key=lambda step: step.at)


def _add_new_topic(rng: random.Random, line: _Timeline, window: float) -> None:
    """One ``create_topic`` step (1 to 4 partitions) at :func:`_free_time`; then the steps
    in time order."""
    t = _free_time(rng, line, window)
    if t is not None:
        line.steps.append(Step.make(t, "create_topic", index=2, partitions=rng.randint(1, 4)))
    line.steps.sort(key=lambda step: step.at)


#: How likely a schedule that creates a second topic deletes it again (``delete_topic``).
DELETE_TOPIC_PROBABILITY = 0.5

#: How likely a schedule with ``topic_changes`` and no pattern has its members (of every
#: client) subscribe by name to a second topic that a ``create_topic`` step makes later.
NAMED_TOPIC_PROBABILITY = 0.5


def _delete_new_topic(rng: random.Random, line: _Timeline, window: float) -> None:
    """With :data:`DELETE_TOPIC_PROBABILITY`, a ``delete_topic`` step for the topic a
    ``create_topic`` step created, at :func:`_free_time` 2 s after it or later; then the
    steps in time order."""
    created = [st for st in line.steps if st.kind == "create_topic"]
    if not created or rng.random() >= DELETE_TOPIC_PROBABILITY:
        return
    earliest = created[0].at + 2.0
    if earliest >= window - 1.0:
        return
    t = _free_time(rng, line, window, earliest)
    if t is not None:
        line.steps.append(Step.make(t, "delete_topic", index=created[0].arg("index")))
    line.steps.sort(key=lambda step: step.at)


#: How likely a schedule that deletes its second topic creates it again under its name
#: (``create_again``).
CREATE_AGAIN_PROBABILITY = 0.5


def _create_topic_again(rng: random.Random, line: _Timeline, window: float) -> None:
    """With :data:`CREATE_AGAIN_PROBABILITY`, a ``create_again`` step for the topic a
    ``delete_topic`` step deleted, at :func:`_free_time` 2 s after it or later, with as
    many partitions as it was created with or up to two more; then the steps in time
    order."""
    gone = [st for st in line.steps if st.kind == "delete_topic"]
    if not gone or rng.random() >= CREATE_AGAIN_PROBABILITY:
        return
    earliest = gone[0].at + 2.0
    if earliest >= window - 1.0:
        return
    (made,) = [st for st in line.steps if st.kind == "create_topic"]
    partitions = int(made.arg("partitions")) + rng.randint(0, 2)
    t = _free_time(rng, line, window, earliest)
    if t is not None:
        index = gone[0].arg("index")
        line.steps.append(Step.make(t, "create_again", index=index, partitions=partitions))
    line.steps.sort(key=lambda step: step.at)


def _free_time(
    rng: random.Random, line: _Timeline, window: float, earliest: float = 0.5
) -> float | None:
    """A time in ``[earliest, window - 1)`` while no broker restarts (from a second before
    it to :data:`RESTART_BUSY` after), drawn again when it falls in one; None after 20
    draws (restarts back to back leave no such time)."""
    busy = [
        (s.at - 1.0, s.at + RESTART_BUSY["hard" if s.arg("hard") else "soft"])
        for s in line.steps
        if s.kind == "broker_restart"
    ]
    for _attempt in range(20):
        t = round(rng.uniform(earliest, window - 1.0), 3)
        if not any(begin <= t < end for begin, end in busy):
            return t
    return None


def _roll_back(rng: random.Random, line: _Timeline, t: float) -> None:
    """A migration back's tail: roll every running slot still on the consumer protocol
    (one restart so far) back to classic, :data:`BACK_ROLL_GAP` seconds apart, in a random
    order. Nothing else runs then (the other faults ended before ``t``), so each is usable;
    the slots left down are fenced by the broker within a session."""
    slots = [s for s in line.slots if s.alive and s.restarts == 1]
    for slot in rng.sample(slots, len(slots)):
        assert slot.usable(t), (slot, t)
        slot.restarts, slot.paused_until = 2, t + ROLL_BUSY
        line.steps.append(Step.make(t, "roll", member=slot.spec.slot))
        t += BACK_ROLL_GAP


def _duration(rng: random.Random, lo: float, hi: float) -> float:
    """A duration in ``[lo, hi]``, rounded down to 10 ms (so that it never ends late)."""
    return math.floor(rng.uniform(lo, hi) * 100) / 100


def _pause_range(session: float) -> tuple[float, float]:
    return session * 1.2, session * 1.2 + 5.0


def _possible(kind: str, line: _Timeline, t: float, window: float, session: float) -> bool:
    """Whether ``kind`` can start at ``t`` given what the timeline holds then."""
    usable = [s for s in line.slots if s.usable(t) and s.allows(kind)]
    if kind == "crash" or kind == "leave":
        return bool(usable) and line.alive() > 1  # someone must be left at the end
    if kind == "pause":
        return bool(usable) and t + _pause_range(session)[0] <= window
    if kind == "rejoin":
        return any(not s.alive and s.rejoin_at <= t for s in line.slots)
    if kind == "roll":
        return any(s.restarts < line.rolls for s in usable) and t + ROLL_BUSY <= window
    if kind in PROXY_FAULTS:
        if not any(s.spec.via_proxy for s in line.slots) or line.proxy_free_at > t:
            return False
        return kind == "cut" or t + 2.0 <= window
    if kind in ("broker_restart", "tansu_restart"):
        return line.broker_free_at <= t and t + 2.0 <= window
    if kind == "broker_down":
        return line.broker_free_at <= t and t + 1.0 <= window
    return True


def _rejoin_delay(kind: str, slot: _Slot, protocol: str, session: float) -> float:
    """How long after a crash or a leave the slot may rejoin: 0.5 s, or for a static Java or
    confluent slot whose crashed process ran the consumer protocol (the schedule's, or a
    migration's after a roll) a session timeout and 1 s. Its crashed member keeps the
    instance id until the broker expires it (it never left with epoch -2), and both
    clients take the broker's UNRELEASED_INSTANCE_ID as fatal (Kafka's Java consumer by
    design, the spec's §10.7); kgroup retries for a session (deviation 16), so kgroup
    slots rejoin at once."""
    spec = slot.spec
    crashed_on = protocol_for(protocol, slot.restarts + 1)
    if kind == "crash" and spec.foreign and spec.instance_id and crashed_on == "consumer":
        return session + 1.0
    return 0.5


def _draw(
    rng: random.Random,
    table: Mapping[str, float],
    line: _Timeline,
    t: float,
    window: float,
    session: float,
) -> str | None:
    kinds = [k for k in sorted(table) if table[k] > 0 and _possible(k, line, t, window, session)]
    if not kinds:
        return None
    return rng.choices(kinds, weights=[table[k] for k in kinds])[0]


def _add(
    rng: random.Random,
    kind: str,
    line: _Timeline,
    t: float,
    window: float,
    session: float,
    broker: str,
    hard_restart_probability: float,
    fatal_error_probability: float,
) -> None:
    steps = line.steps
    if kind in ("crash", "leave", "pause"):
        slot = rng.choice([s for s in line.slots if s.usable(t) and s.allows(kind)])
        if kind == "pause":
            lo, hi = _pause_range(session)
            duration = _duration(rng, lo, min(hi, window - t))
            slot.paused_until = t + duration
            steps.append(Step.make(t, kind, member=slot.spec.slot, duration=duration))
        else:
            slot.alive, slot.down_since = False, t
            slot.rejoin_at = t + _rejoin_delay(kind, slot, line.protocol, session)
            steps.append(Step.make(t, kind, member=slot.spec.slot))
    elif kind == "rejoin":
        slot = rng.choice([s for s in line.slots if not s.alive and s.rejoin_at <= t])
        slot.alive, slot.paused_until = True, 0.0
        slot.restarts += 1
        steps.append(Step.make(t, kind, member=slot.spec.slot))
    elif kind == "roll":
        slot = rng.choice([s for s in line.slots if s.usable(t) and s.restarts < line.rolls])
        slot.restarts, slot.paused_until = slot.restarts + 1, t + ROLL_BUSY
        steps.append(Step.make(t, kind, member=slot.spec.slot))
    elif kind == "black_hole":
        duration = _duration(rng, 2.0, min(session * 1.6, window - t))
        line.proxy_free_at = t + duration + 0.5
        steps.append(
            Step.make(
                t,
                kind,
                duration=duration,
                direction=rng.choice(("both", "both", "upstream", "downstream")),
                end=rng.choice(("heal", "cut")),
            )
        )
    elif kind == "latency":
        duration = _duration(rng, 2.0, min(8.0, window - t))
        line.proxy_free_at = t + duration + 0.5
        steps.append(
            Step.make(
                t,
                kind,
                duration=duration,
                seconds=round(rng.uniform(0.05, 1.5), 3),
                jitter=round(rng.uniform(0.0, 0.5), 3),
            )
        )
    elif kind == "cut":
        line.proxy_free_at = t + 0.5
        steps.append(Step.make(t, kind))
    elif kind == "broker_restart":
        hard = rng.random() < hard_restart_probability
        line.broker_free_at = t + RESTART_BUSY["hard" if hard else "soft"]
        steps.append(Step.make(t, kind, hard=hard))
    elif kind == "tansu_restart":
        line.broker_free_at = t + RESTART_BUSY["tansu"]
        steps.append(Step.make(t, kind))
    elif kind == "coordinator_move":
        steps.append(Step.make(t, kind, broker_id=rng.randint(1, 3)))
    elif kind == "broker_down":
        duration = _duration(rng, 1.0, min(6.0, window - t))
        line.broker_free_at = t + duration + 0.5
        steps.append(Step.make(t, kind, broker_id=rng.randint(1, 3), duration=duration))
    elif kind == "inject_errors":
        api = rng.choice(sorted(RETRIABLE_CODES))
        codes = [rng.choice(RETRIABLE_CODES[api]) for _ in range(rng.randint(1, 4))]
        if (
            api in ("JoinGroup", "SyncGroup", "Heartbeat")
            and rng.random() < fatal_error_probability
        ):
            codes[rng.randrange(len(codes))] = GROUP_AUTHORIZATION_FAILED
        for code in codes:
            if code in FATAL_CODES:
                line.expected.add(FATAL_CODES[code])
        steps.append(Step.make(t, kind, api=api, api_key=API_KEYS[api], codes=tuple(codes)))
    else:  # pragma: no cover - every kind in WEIGHTS is handled above
        raise ValueError(f"unknown fault kind {kind!r}")
