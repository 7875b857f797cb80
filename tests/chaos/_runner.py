"""The chaos orchestrator: member processes, a schedule of faults, and the invariants.

:class:`ChaosRunner` runs one :class:`~._schedule.Schedule` against a real broker (Apache
Kafka, tansu, or librdkafka's mock cluster, wrapped in a :class:`Target`):

1. creates the topic and starts one process per member slot (``_member_proc.py``), on
   Kafka some through the fault proxy and the others directly;
2. waits until the group is first stable, then opens the fault window and applies the
   steps at their offsets (a step with a ``duration`` is undone when it ends; slow steps,
   broker restarts and new processes, run beside the timeline);
3. stops the faults (heals the proxy, brings mock brokers up, drops pending injected
   errors, continues paused members) and waits for the group to become stable again;
4. closes every live member with SIGTERM and checks what each process reported.

Every member's JSON lines are read as they arrive (one reader task per process) and feed
an :class:`~kgroup.testing.OwnershipLog`: ``assigned`` opens a hold, ``revoked`` (at the end
of the callback) and ``lost`` close it, ``lease_expired`` closes it at the member's
deadline, and a process killed with SIGKILL dies when it has been reaped.

The invariants (any breach is a failure of the run):

1. no partition is held by two members at the same time (``OwnershipLog.check()``);
2. once the faults stop, the group becomes stable within :func:`stable_bound`: every live
   member STABLE in one generation, and every partition held by exactly one of them (its
   status and its listener's holds agree);
3. no exception escapes ``poll()`` except the schedule's expected fatal errors;
4. after ``close()`` no task, socket, transport, warning or loop error is left in any
   member process, nothing is still held, and the process exits 0.

Java members (a mixed group's slots with ``MemberSpec.java``) run
``kgroup/testing/java/JavaMember.java``; their lines carry the same monotonic stamps and
feed the same log, and the invariants apply to them as they stand (see
:meth:`ChaosRunner._on_java_event`): the schedule only gives them the faults after which the
Java client holds nothing the coordinator gave away (``_schedule.JAVA_FAULTS``), so any
overlap fails the run, whoever's hold came first.

Consumer-protocol schedules (KIP-848, Kafka only; see ``_kip848.py``): the group gets the
schedule's session and heartbeat interval as group configs before its members join; kgroup
members run ``--protocol consumer``; confluent-kafka members (``_confluent_proc.py``) write
JavaMember's lines and are read like Java members; a migration's ``roll`` closes a member
and starts its slot's next process on the consumer protocol; and once a consumer-protocol
member runs, invariant 2 is :func:`._kip848.why_not_stable_consumer` (member epochs differ).

Waits are event-driven: the reader tasks set an ``asyncio.Event`` on every line and the
waits re-check their condition then, with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgroup import TopicPartition
from kgroup.testing import FaultProxy, KafkaBroker, MockCluster, OwnershipLog, TansuBroker
from kgroup.testing._invariants import Hold
from kgroup.testing._java import java_member_command
from kgroup.testing._ports import kill_with_parent_prefix, register_child, unregister_child

from ._kip848 import (
    confluent_argv,
    conversions,
    group_setup,
    java_protocol_args,
    timing_flags,
    unowned_conversions,
    why_not_classic_group,
    why_not_stable_consumer,
)
from ._schedule import API_KEYS, MemberSpec, Schedule, Step, assignors_for, protocol_for

__all__ = ["ChaosRunner", "RunResult", "Target", "stable_bound"]

REPO_ROOT = Path(__file__).resolve().parents[2]
MEMBER_SCRIPT = Path(__file__).with_name("_member_proc.py")

#: The member's poll(timeout=...) (its status lags at most this much).
POLL_TIMEOUT = 0.5
#: ``metadata_max_age_ms`` of classic kgroup members when the schedule grows the topic.
TOPIC_CHANGE_METADATA_MS = 1000
#: Kafka 4.4.0 re-resolves a consumer group's regex at most this often after its metadata
#: changed (``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``), seconds.
REGEX_REFRESH_S = 10.0
#: Seconds for the first stable group (every member starting and joining, one by one).
INITIAL_STABLE_BOUND = {"kafka": 60.0, "tansu": 90.0, "mock": 90.0}
#: Errors a broker's quirk makes ``poll()`` raise, tolerated (counted, not failures):
#: ``broker -> ((exception type, message prefix, why), ...)``.
BROKER_QUIRK_ERRORS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "mock": (
        (
            "UnexpectedBrokerError",
            "SyncGroup failed with INVALID_REQUEST (42)",
            "librdkafka's mock completes a sync as soon as the leader's SyncGroup carries "
            "every assignment and goes UP; a follower's SyncGroup arriving after that gets "
            "INVALID_REQUEST (Kafka answers it with the member's assignment). kgroup raises "
            "it from poll() as the Java client does (an unexpected SyncGroup error), then "
            "rejoins.",
        ),
    ),
}

#: Slack for processes on a loaded 2-core machine: a new member's interpreter start, a
#: SIGCONT'd process catching up, the 0.5 s status lag.
PROCESS_SLACK = 4.0


def stable_bound(schedule: Schedule) -> tuple[float, list[tuple[str, float]]]:
    """How long after the faults stop the group may take to become stable, and its terms.

    Worst case, counted from the moment every fault is undone:

    - the session timeout: the broker drops a member that crashed, left without LeaveGroup
      (static) or was cut off just before the faults stopped;
    - the rebalance timeout (max poll interval): the rebalance that follows waits up to
      this long for the members to rejoin;
    - two heartbeat intervals, the request timeout and the maximum retry backoff: a
      member learns of the rebalance from a heartbeat, and a request lost on a connection
      that is dead but not reset is only given up after its timeout;
    - after a black hole healed without a reset, a JoinGroup lost in it is only given up
      after the JoinGroup timeout (rebalance timeout + 5 s);
    - tansu holds every JoinGroup session/2, twice (the join, and the rebalance a late
      member starts), plus its fixed ~3 s static-membership pauses on join and sync;
    - the mock waits session - 1 s in every rebalance of a non-empty group, twice, plus a
      session for a ghost member left by an injected UNKNOWN_MEMBER_ID;
    - :data:`PROCESS_SLACK`.
    """
    t = schedule.timeouts
    session, rebalance = t.session, t.max_poll_ms / 1000.0
    terms = [
        ("session timeout", session),
        ("rebalance timeout", rebalance),
        (
            "2 heartbeats + request timeout + max backoff",
            2 * t.heartbeat_ms / 1000.0
            + t.request_timeout_ms / 1000.0
            + t.retry_backoff_max_ms / 1000.0,
        ),
    ]
    if "black_hole" in schedule.kinds():
        terms.append(("JoinGroup timeout (a join lost in a black hole)", t.join_timeout))
    if schedule.broker == "tansu":
        terms.append(("tansu JoinGroup hold session/2, twice", session))
        if schedule.static:
            terms.append(("tansu static join + sync pauses", 6.0))
    if schedule.broker == "mock":
        terms.append(("mock rebalance wait (session - 1 s), twice", 2 * (session - 1.0)))
        terms.append(("mock ghost member expiry (session)", session))
    if schedule.topic_changes:
        terms.append(("the leader's metadata refresh", TOPIC_CHANGE_METADATA_MS / 1000.0))
    if "create_topic" in schedule.kinds() and schedule.protocol != "classic":
        terms.append(("the broker's regex refresh (a new topic)", REGEX_REFRESH_S))
    terms.append(("process slack", PROCESS_SLACK))
    return sum(v for _, v in terms), terms


# -- the broker under test ------------------------------------------------------------------


@dataclass
class Target:
    """The broker a schedule runs against: Kafka (with its fault proxy), tansu or the mock."""

    kind: str
    broker: KafkaBroker | TansuBroker | MockCluster
    proxy: FaultProxy | None = None

    @property
    def direct_bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def proxied_bootstrap(self) -> str:
        if self.proxy is None:
            raise RuntimeError(f"{self.kind}: no fault proxy")
        return self.proxy.address

    def bootstrap_for(self, spec: MemberSpec) -> str:
        return self.proxied_bootstrap if spec.via_proxy else self.direct_bootstrap

    async def create_topic(self, name: str, partitions: int, timeout: float = 60.0) -> None:
        """CreateTopics (an existing topic counts as done). On a real broker, retried until
        ``timeout`` while it does not answer: a schedule's step can come just after a
        broker restart that is slower than planned."""
        broker = self.broker
        if isinstance(broker, MockCluster):
            broker.create_topic(name, partitions, 1)
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                await broker.create_topic_async(name, partitions, exist_ok=True, timeout=timeout)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.25)  # then try again, until the deadline

    async def grow_topic(self, name: str, total: int, timeout: float = 60.0) -> None:
        """CreatePartitions: ``name`` gets ``total`` partitions (:meth:`_admin`); an attempt
        refused because an earlier one already took effect counts as done, any other
        refusal ends it."""
        from aiokafka.admin import NewPartitions
        from aiokafka.errors import InvalidPartitionsError

        async def grow(admin: Any) -> None:
            try:
                await admin.create_partitions({name: NewPartitions(total_count=total)})
            except InvalidPartitionsError as exc:
                if await _partition_count(admin, name) < total:
                    raise _Refused from exc

        await self._admin(grow, timeout)

    async def delete_topic(self, name: str, timeout: float = 60.0) -> None:
        """DeleteTopics (:meth:`_admin`); a topic already gone (an earlier attempt took
        effect) counts as done."""
        from aiokafka.errors import UnknownTopicOrPartitionError

        async def delete(admin: Any) -> None:
            with contextlib.suppress(UnknownTopicOrPartitionError):
                await admin.delete_topics([name])

        await self._admin(delete, timeout)

    async def _admin(self, action: Callable[[Any], Awaitable[None]], timeout: float) -> None:
        """``action(admin)`` with an admin client of the broker (Kafka, directly, not
        through the proxy), again every 0.25 s until ``timeout`` while it fails (the broker
        may be restarting); at once if it raises :class:`_Refused` (its cause is raised)."""
        from aiokafka.admin import AIOKafkaAdminClient

        deadline = time.monotonic() + timeout
        while True:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.direct_bootstrap, request_timeout_ms=10_000
            )
            try:
                await admin.start()
                await action(admin)
                return
            except _Refused as refused:
                assert refused.__cause__ is not None
                raise refused.__cause__ from None
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                await admin.close()
            await asyncio.sleep(0.25)  # then try again, until the deadline


class _Refused(Exception):
    """Raised by an :meth:`Target._admin` action, from the refusal that ends it at once."""


async def _partition_count(admin: Any, topic: str) -> int:
    described = await admin.describe_topics([topic])
    return len(described[0]["partitions"])


# -- member processes -----------------------------------------------------------------------


@dataclass
class MemberProc:
    """One member process (one incarnation of a slot) and what it reported."""

    name: str
    spec: MemberSpec
    proc: asyncio.subprocess.Process
    log_path: Path
    events_path: Path
    spawned_at: float
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: running / paused / terminating (SIGTERM sent) / killed (SIGKILL sent) / exited
    state: str = "running"
    status: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    closed: dict[str, Any] | None = None
    exit: dict[str, Any] | None = None
    gave_up: dict[str, Any] | None = None
    returncode: int | None = None
    ended_at: float | None = None
    lease_supported: bool | None = None
    lease_expirations: int = 0
    held_at_exit: list[str] = field(default_factory=list)
    terminated_before_ready: bool = False
    #: every member id the process had, and its latest JoinGroup answer (core event)
    member_ids: set[str] = field(default_factory=set)
    last_joined: dict[str, Any] | None = None
    #: Kafka's Java consumer (JavaMember.java), not kgroup
    java: bool = False
    #: confluent-kafka (_confluent_proc.py), not kgroup
    confluent: bool = False
    #: the process's group protocol (classic or consumer)
    protocol: str = "classic"

    @property
    def foreign(self) -> bool:
        """Another client than kgroup (Java or confluent): lines in JavaMember's vocabulary."""
        return self.java or self.confluent

    @property
    def client(self) -> str:
        return "Java" if self.java else "confluent" if self.confluent else "kgroup"

    @property
    def live(self) -> bool:
        """Running (or paused) and not being closed or killed."""
        return self.state in ("running", "paused") and not self.done.is_set()


@dataclass
class RunResult:
    """What one schedule did, and every invariant it broke."""

    schedule: Schedule
    workdir: Path
    replay: str
    failures: list[str] = field(default_factory=list)
    applied: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    rebalances: int = 0
    processes: int = 0
    java_processes: int = 0
    confluent_processes: int = 0
    #: overlaps of a Java member's hold across a Kafka restart that expired it (tolerated)
    java_restart_overlaps: int = 0
    initial_stable: float | None = None
    time_to_stable: float | None = None
    bound: float = 0.0
    bound_terms: list[tuple[str, float]] = field(default_factory=list)
    duration: float = 0.0
    lease_supported: bool | None = None
    lease_expirations: int = 0
    errors_seen: Counter[str] = field(default_factory=Counter)
    #: poll() errors tolerated as a broker quirk (BROKER_QUIRK_ERRORS)
    quirk_errors: Counter[str] = field(default_factory=Counter)
    #: things worth knowing that are not failures
    notes: list[str] = field(default_factory=list)
    #: on_partitions_revoked callbacks that ended because poll() was cancelled
    cancelled_revokes: int = 0
    #: members restarted after Kafka's reload fenced them (``_fenced_by_a_reload``)
    fenced_restarts: int = 0
    #: the group's partitions at the end (every topic), when add_partitions or
    #: create_topic steps added some
    grown_to: int | None = None
    #: the group did not stabilise because the broker stalled (a known broker defect)
    broker_stalls: int = 0
    #: why no fault could be applied (the broker stalled before the fault window)
    inconclusive: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        """One line: seed, faults per kind, rebalances, times."""
        s = self.schedule
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.applied.items())) or "none"
        stable = "never" if self.time_to_stable is None else f"{self.time_to_stable:.1f} s"
        initial = "never" if self.initial_stable is None else f"{self.initial_stable:.1f} s"
        lease = {True: "yes", False: "NOT IN CORE", None: "?"}[self.lease_supported]
        extra = ""
        if self.java_processes:
            extra += f"; Java processes {self.java_processes}"
        if self.confluent_processes:
            extra += f"; confluent processes {self.confluent_processes}"
        if self.java_restart_overlaps:
            extra += f" (Java overlaps across a restart: {self.java_restart_overlaps})"
        if self.cancelled_revokes:
            extra += f"; revokes cancelled by SIGTERM {self.cancelled_revokes}"
        if self.fenced_restarts:
            extra += f"; restarted after a reload fenced them {self.fenced_restarts}"
        if self.broker_stalls:
            extra += f"; BROKER STALL ({self.schedule.broker})"
        errors = " ".join(f"{k}={v}" for k, v in sorted(self.errors_seen.items())) or "none"
        grown = "" if self.grown_to is None else f" ({self.grown_to} at the end)"
        if self.quirk_errors:
            errors += f" (broker quirk: {sum(self.quirk_errors.values())})"
        return (
            f"chaos {s.label} seed={s.seed}: {s.partitions} partitions{grown}; faults {faults}; "
            f"{self.processes} processes; rebalances seen {self.rebalances}; first stable "
            f"{initial}; stable {stable} after faults stopped (bound {self.bound:.0f} s); "
            f"lease {lease} ({self.lease_expirations} expired); poll errors {errors}{extra}; "
            f"run {self.duration:.1f} s; {'OK' if self.ok else 'FAILED'}"
            + (f" ({len(self.skipped)} step(s) skipped)" if self.skipped else "")
        )

    def report(self) -> str:
        """The failure message: seed, every failure, the replay command, the logs, the
        schedule."""
        s = self.schedule
        lines = [
            f"chaos run FAILED: broker={s.broker} seed={s.seed} ({s.label})",
            f"replay: {self.replay}",
            f"member logs: {self.workdir}  (NAME.log: kgroup's log; NAME.events.jsonl: the "
            "member's JSON lines; timeline.txt: what the runner did; schedule.json)",
            f"{len(self.failures)} failure(s):",
        ]
        lines += [f"  {i}. {text}" for i, text in enumerate(self.failures, 1)]
        lines += [f"  note: {text}" for text in self.notes]
        lines += ["", str(s), "", self.summary()]
        return "\n".join(lines)


async def _spawn(
    argv: list[str], log_path: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """A member process in a session of its own: JSON lines on stdout (read as they come,
    lines up to 4 MiB), stderr to ``log_path``."""
    with log_path.open("wb") as log:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=env,
            start_new_session=True,
            limit=4 * 1024 * 1024,
        )


class ChaosRunner:
    """Runs one schedule against one target; :meth:`run` returns a :class:`RunResult`."""

    def __init__(
        self,
        schedule: Schedule,
        target: Target,
        workdir: Path,
        *,
        replay: str,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if target.kind != schedule.broker:
            raise ValueError(f"schedule for {schedule.broker} run on {target.kind}")
        self.schedule = schedule
        self.target = target
        self.workdir = workdir
        self.replay = replay
        self._log = log
        tag = uuid.uuid4().hex[:6]
        self.group = f"chaos-{schedule.broker}-{schedule.seed}-{tag}"
        self.topic = f"chaos-{schedule.broker}-{schedule.seed}-{tag}"
        self.partitions = frozenset(
            TopicPartition(self.topic, p) for p in range(schedule.partitions)
        )
        self.ownership = OwnershipLog()
        self.procs: list[MemberProc] = []
        self._incarnations: Counter[str] = Counter()
        self._changed = asyncio.Event()
        self._readers: list[asyncio.Task[None]] = []
        self._background: list[asyncio.Task[None]] = []
        self._closing = False  # _close_all began: no process is started any more
        self._converted: list[str] = []  # the broker's conversions of the group, so far
        self._log_read = 0  # ... read from its log up to this byte
        self._broker_epoch = 0
        self._restart_lock = asyncio.Lock()  # one broker restart at a time
        self._state_losses: list[tuple[float, float]] = []  # tansu restarts: (begin, back)
        self._kafka_restarts: list[tuple[float, float]] = []  # (begin, back)
        self._generations: set[tuple[int, int]] = set()
        self._t0: float | None = None
        self._java_argv: list[str] | None = None
        self._started = time.monotonic()
        self._clock = (time.time(), self._started)  # wall and monotonic, for the broker's log
        self._timeline = (workdir / "timeline.txt").open("w")
        self.result = RunResult(schedule, workdir, replay)
        self.result.bound, self.result.bound_terms = stable_bound(schedule)

    # -- bookkeeping --------------------------------------------------------------------------

    def _rel(self, at: float | None = None) -> str:
        """A time relative to the fault window's start (``w+3.20s``) or to the run's."""
        at = time.monotonic() if at is None else at
        if self._t0 is None:
            return f"r+{at - self._started:.2f}s"
        return f"w{at - self._t0:+.2f}s"

    def note(self, text: str) -> None:
        line = f"{self._rel()} {text}"
        self._timeline.write(line + "\n")
        self._timeline.flush()
        if self._log is not None:
            self._log(line)

    def fail(self, text: str) -> None:
        self.result.failures.append(text)
        self.note(f"FAILURE: {text}")

    # -- processes ----------------------------------------------------------------------------

    async def spawn(self, spec: MemberSpec) -> MemberProc:
        """Start a new process in ``spec``'s slot (the slot name, then ``m2.2``, ...)."""
        self._incarnations[spec.slot] += 1
        n = self._incarnations[spec.slot]
        name = spec.slot if n == 1 else f"{spec.slot}.{n}"
        protocol = protocol_for(self.schedule.protocol, n)
        if spec.java:
            return await self._spawn_java(spec, name, protocol)
        if spec.confluent:
            return await self._spawn_confluent(spec, name, protocol)
        t = self.schedule.timeouts
        argv = [
            *kill_with_parent_prefix(),
            sys.executable,
            "-W",
            "error::ResourceWarning",
            str(MEMBER_SCRIPT),
            "--bootstrap",
            self.target.bootstrap_for(spec),
            "--group",
            self.group,
            "--topic",
            self.topic,
            "--name",
            name,
            "--instance-id",
            spec.instance_id or "",
            "--assignor",
            assignors_for(self.schedule.assignor, spec.slot, n),
            "--session-ms",
            str(t.session_ms),
            "--heartbeat-ms",
            str(t.heartbeat_ms),
            *timing_flags(t),
            "--close-timeout-ms",
            str(t.close_timeout_ms),
            "--poll-timeout",
            str(POLL_TIMEOUT),
            "--revoke-work",
            str(self.schedule.revoke_work),
            "--protocol",
            protocol,
            "--remote-assignor",
            self.schedule.remote_assignor,
        ]
        if self.schedule.topic_changes:
            argv += ["--metadata-max-age-ms", str(TOPIC_CHANGE_METADATA_MS)]
        if self.schedule.pattern:
            # Only this group's topic: its name is unique (the tag), has no character
            # special to a regex (Python's or RE2/J's), and ``.*`` matches "".
            argv += ["--pattern", self.topic + ".*"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        log_path = self.workdir / f"{name}.log"
        proc = await _spawn(argv, log_path, env)
        where = ("via proxy" if spec.via_proxy else "direct") + f", {protocol} protocol"
        mp = self._track(spec, name, proc, log_path, where)
        mp.protocol = protocol
        return mp

    def _track(
        self,
        spec: MemberSpec,
        name: str,
        proc: asyncio.subprocess.Process,
        log_path: Path,
        where: str,
    ) -> MemberProc:
        """Track a member process just spawned and start reading its lines."""
        register_child(proc.pid)
        mp = MemberProc(
            name=name,
            spec=spec,
            proc=proc,
            log_path=log_path,
            events_path=self.workdir / f"{name}.events.jsonl",
            spawned_at=time.monotonic(),
            java=spec.java,
            confluent=spec.confluent,
            protocol=self.schedule.protocol,
        )
        self.procs.append(mp)
        self.result.processes += 1
        self.result.java_processes += int(spec.java)
        self.result.confluent_processes += int(spec.confluent)
        self.note(f"spawned {name} pid {proc.pid} ({where}, instance id {spec.instance_id})")
        self._readers.append(
            asyncio.get_running_loop().create_task(self._read(mp), name=f"chaos-read-{name}")
        )
        return mp

    async def _spawn_java(self, spec: MemberSpec, name: str, protocol: str) -> MemberProc:
        """Start Kafka's Java consumer in ``spec``'s slot, configured like the kgroup members
        (timeouts, backoffs, assignor), its stdin a pipe kept open (end of input closes it)."""
        s, t = self.schedule, self.schedule.timeouts
        if self._java_argv is None:  # fetches the jars and compiles once
            self._java_argv = await asyncio.to_thread(java_member_command, [])
        args = [
            "--bootstrap",
            self.target.bootstrap_for(spec),
            "--group",
            self.group,
            "--topic",
            self.topic,
            "--client-id",
            name,
            "--assignor",
            s.assignor,
            "--session-timeout-ms",
            str(t.session_ms),
            "--heartbeat-interval-ms",
            str(t.heartbeat_ms),
            "--max-poll-interval-ms",
            str(t.max_poll_ms),
            "--poll-ms",
            "100",
            "--close-timeout-ms",
            str(min(t.close_timeout_ms, t.request_timeout_ms)),
        ]
        if spec.instance_id:
            args += ["--group-instance-id", spec.instance_id]
        args += java_protocol_args(s, protocol)
        for key, value in (
            ("request.timeout.ms", t.request_timeout_ms),
            ("retry.backoff.ms", t.retry_backoff_ms),
            ("retry.backoff.max.ms", t.retry_backoff_max_ms),
            ("reconnect.backoff.max.ms", t.retry_backoff_max_ms),
        ):
            args += ["--property", f"{key}={value}"]
        java, *jvm = self._java_argv
        argv = [
            *kill_with_parent_prefix(),
            java,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            *jvm,
            *args,
        ]
        log_path = self.workdir / f"{name}.log"
        with log_path.open("wb") as log:
            log.write(f"argv: {argv}\n".encode())
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                limit=4 * 1024 * 1024,
            )
        mp = self._track(spec, name, proc, log_path, f"Java, direct, {protocol} protocol")
        mp.protocol = protocol
        return mp

    async def _spawn_confluent(self, spec: MemberSpec, name: str, protocol: str) -> MemberProc:
        """Start a confluent-kafka member on ``protocol`` in ``spec``'s slot, direct."""
        bootstrap = self.target.bootstrap_for(spec)
        argv = [
            *kill_with_parent_prefix(),
            *confluent_argv(self.schedule, spec, name, bootstrap, self.group, self.topic, protocol),
        ]
        log_path = self.workdir / f"{name}.log"
        proc = await _spawn(argv, log_path)
        mp = self._track(spec, name, proc, log_path, f"confluent, direct, {protocol} protocol")
        mp.protocol = protocol
        return mp

    def current(self, slot: str) -> MemberProc | None:
        """The newest process of ``slot``."""
        found = [p for p in self.procs if p.spec.slot == slot]
        return found[-1] if found else None

    async def _read(self, mp: MemberProc) -> None:
        assert mp.proc.stdout is not None
        with mp.events_path.open("w") as out:
            while True:
                try:
                    raw = await mp.proc.stdout.readline()
                except ValueError:  # a line beyond the limit: keep reading
                    continue
                if not raw:
                    break
                text = raw.decode("utf-8", "replace")
                out.write(text)
                try:
                    record = json.loads(text)
                except json.JSONDecodeError:
                    self.note(f"{mp.name}: not JSON on stdout: {text.strip()[:200]}")
                    continue
                self.feed(mp, record)
        mp.returncode = await mp.proc.wait()
        if mp.proc.stdin is not None:
            mp.proc.stdin.close()
        unregister_child(mp.proc.pid)
        mp.ended_at = time.monotonic()
        held = sorted(str(tp) for tp, who in self.ownership.holders().items() if mp.name in who)
        if mp.state != "killed":
            mp.held_at_exit = held
        # A killed process dies when it has been reaped: every line it wrote is in by now.
        self.ownership.died(mp.name, mp.ended_at)
        before, mp.state = mp.state, ("killed" if mp.state == "killed" else "exited")
        self.note(f"{mp.name} exited with {mp.returncode} (was {before})")
        mp.done.set()
        self._changed.set()

    def feed(self, mp: MemberProc, rec: dict[str, Any]) -> None:
        """One JSON line of ``mp``'s process (a kgroup member's, or a Java or confluent
        member's)."""
        if mp.foreign:
            self._on_java_event(mp, rec)
        else:
            self._on_event(mp, rec)
        self._changed.set()

    def _on_event(self, mp: MemberProc, rec: dict[str, Any]) -> None:
        event = rec.get("event")
        at = float(rec.get("t", time.monotonic()))
        if event == "ready":
            mp.lease_supported = bool(rec.get("lease"))
            if self.schedule.pattern and "pattern" in rec and not rec["pattern"]:
                self.fail(f"{mp.name} subscribed to {rec.get('topics')}, not with the pattern")
            mp.ready.set()
        elif event == "assigned":
            self.ownership.assigned(mp.name, _tps(rec), int(rec.get("generation", -1)), at)
        elif event == "revoked":
            self.ownership.revoked(mp.name, _tps(rec), at)
            if rec.get("cancelled"):
                parts = sorted(f"{t}-{p}" for t, p in rec.get("partitions", []))
                self.result.cancelled_revokes += 1
                self.note(f"{mp.name}: on_partitions_revoked cancelled (poll() cancelled) {parts}")
        elif event == "lost":
            self.ownership.lost(mp.name, _tps(rec), at)
        elif event == "lease_expired":
            mp.lease_expirations += 1
            deadline = rec.get("deadline")
            if isinstance(deadline, int | float):
                self.ownership.lease_expired(mp.name, float(deadline))
                self.note(f"{mp.name} lease expired at {self._rel(float(deadline))}")
        elif event == "core" and rec.get("name") == "member.joined":
            mp.last_joined = rec
            mp.member_ids.add(str(rec.get("member_id")))
        elif event == "status":
            mp.status = rec
            if rec.get("member_id"):
                mp.member_ids.add(str(rec["member_id"]))
            if rec.get("state") == "STABLE":
                self._generations.add((self._broker_epoch, int(rec.get("generation", -1))))
        elif event == "error":
            mp.errors.append(rec)
            self.result.errors_seen[str(rec.get("type"))] += 1
            self.note(f"{mp.name} poll raised {rec.get('type')}: {rec.get('message')}")
            if self._fenced_by_a_reload(mp, rec, at):
                rec["excused"] = "fenced by its slot's unpersisted older member after a restart"
                self._later(f"restart-{mp.name}", self._restart_fenced(mp))
        elif event == "gave_up":
            mp.gave_up = rec
        elif event == "closed":
            mp.closed = rec
        elif event == "exit":
            mp.exit = rec

    def _on_java_event(self, mp: MemberProc, rec: dict[str, Any]) -> None:
        """A Java member's line (JavaMember.java), on the invariants' terms; a confluent
        member's (``_confluent_proc.py``) alike: it writes the same lines, except that its
        ``status`` has no generation (librdkafka does not expose the member epoch) and its
        ``error`` names its type.

        Its holds start when ``onPartitionsAssigned`` starts and end when
        ``onPartitionsRevoked`` returns or ``onPartitionsLost`` starts, as a kgroup member's;
        they also end when ``close()`` returned (``closed``: a static Java member closes
        without a callback) or the process died. There is no lease: the Java client does not
        fence itself, which is why the schedule gives Java slots only the faults after which
        it holds nothing the coordinator gave to another member, and why no overlap is
        excused for it. ``status`` lines (generation, member id, assignment after a poll)
        count in the stabilisation check; ``error`` lines are invariant 3's exceptions.
        """
        event = rec.get("event")
        at = float(rec.get("t", time.monotonic()))
        if event == "started":
            mp.ready.set()
        elif event == "assigned":
            self.ownership.assigned(mp.name, _tps(rec), int(rec.get("generation", -1)), at)
        elif event == "revoked":
            self.ownership.revoked(mp.name, _tps(rec), at)
        elif event == "lost":
            self.ownership.lost(mp.name, _tps(rec), at)
        elif event == "status":
            mp.status = rec
            if rec.get("member_id"):
                mp.member_ids.add(str(rec["member_id"]))
            generation = int(rec.get("generation", -1))
            if generation > 0:
                self._generations.add((self._broker_epoch, generation))
        elif event == "error":
            rec = {"type": "JavaException", **rec}
            mp.errors.append(rec)
            self.result.errors_seen[str(rec.get("type"))] += 1
            self.note(f"{mp.name} ({mp.client}) raised: {rec.get('message')}")
        elif event == "closed":
            mp.closed = rec
            self.ownership.died(mp.name, at)

    def _signal(self, mp: MemberProc, sig: signal.Signals) -> bool:
        if mp.done.is_set() or mp.proc.returncode is not None:
            return False
        try:
            os.kill(mp.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    # -- waiting ------------------------------------------------------------------------------

    async def wait_for(self, condition: Callable[[], str | None], timeout: float) -> str | None:
        """Wait until ``condition()`` returns None (it returns why not, otherwise), waking
        on every member line; returns the last reason after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            why = condition()
            if why is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return why
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 1.0)):
                    await self._changed.wait()

    def _conversions(self) -> list[str]:
        """The broker's conversions of the group so far, from its log (:func:`conversions`;
        Kafka only; read when a migration's classic members name no leader, so on every
        member line then: only what the broker wrote since the last read is read)."""
        broker = self.target.broker
        if not isinstance(broker, KafkaBroker):
            return []
        found, self._log_read = conversions(broker.log_path, self.group, self._log_read)
        self._converted += found
        return list(self._converted)

    def why_not_stable(self) -> str | None:
        """None when the group is stable: every live member STABLE in one generation,
        their assignments a partition of the topic, and the listener holds the same.

        A Java member reports no state: it counts once it reports a generation (after a
        completed join and sync), which must be the others'; its assignment and holds count
        like a kgroup member's. A confluent member (a migration's, on classic) reports no
        generation either: it counts once librdkafka's statistics say ``steady``.

        Once a member of the consumer protocol runs in the group, generations are member
        epochs, one per member: :func:`._kip848.why_not_stable_consumer` checks instead."""
        live = [p for p in self.procs if p.live]
        if any(p.protocol == "consumer" for p in live):
            return why_not_stable_consumer(
                live,
                self.partitions,
                self.ownership.holders(),
                {p.name: p.client for p in live},
            )
        if not live:
            return "no live member"
        for p in live:
            if p.confluent:
                # librdkafka exposes no generation: its statistics' join state instead.
                if p.status is None or p.status.get("join_state") != "steady":
                    state = None if p.status is None else p.status.get("join_state")
                    return f"{p.name} ({p.client}) is {state}"
            elif p.java:
                if p.status is None or int(p.status.get("generation", -1)) < 1:
                    return f"{p.name} ({p.client}) has not joined"
            elif p.status is None or p.status.get("state") != "STABLE":
                state = None if p.status is None else p.status.get("state")
                return f"{p.name} is {state}"
        generations = {p.name: p.status["generation"] for p in live if p.status and not p.confluent}
        if len(set(generations.values())) > 1:  # none: confluent members only
            return f"generations differ: {generations}"
        why = why_not_classic_group(self.schedule, live, self._conversions)
        if why is not None:
            return why
        owners: dict[TopicPartition, list[str]] = {}
        for p in live:
            assert p.status is not None
            for topic, partition in p.status.get("assignment", []):
                owners.setdefault(TopicPartition(topic, partition), []).append(p.name)
        missing = sorted(str(tp) for tp in self.partitions - owners.keys())
        if missing:
            return f"unassigned: {missing}"
        gone = sorted(str(tp) for tp in owners.keys() - self.partitions)
        if gone:
            return f"still assigned, of a deleted topic: {gone}"
        doubled = {str(tp): who for tp, who in owners.items() if len(who) > 1}
        if doubled:
            return f"assigned twice: {doubled}"
        holders = self.ownership.holders()
        for tp in sorted(self.partitions):
            if holders.get(tp, []) != owners[tp]:
                return f"{tp}: held by {holders.get(tp, [])}, assigned to {owners[tp]}"
        held = sorted(str(tp) for tp, who in holders.items() if who and tp not in self.partitions)
        if held:
            return f"still held, of a deleted topic: {held}"
        return None

    def broker_stall(self) -> str | None:
        """On tansu, why a group that did not stabilise is the broker's doing, if it is.

        tansu 0.6.0 stalls a group in two ways seen here (never on Apache Kafka, which
        enforces the session and rebalance timeouts): it keeps electing a leader that is
        gone (a member that sent LeaveGroup while its JoinGroup was parked, or died), which
        never syncs and which it never expires; or it answers the leader's heartbeats with
        NONE while the other members loop JoinGroup -> SyncGroup -> REBALANCE_IN_PROGRESS
        in one generation, so the leader is never told to rejoin. Both show in what the
        members report: the leader named by the waiting members' latest JoinGroup answer
        is not live, or is STABLE while they are not. Anything else stays a failure.
        """
        if self.schedule.broker != "tansu":
            return None
        waiting = [p for p in self.procs if p.live and (p.status or {}).get("state") != "STABLE"]
        leaders = {str(p.last_joined.get("leader")) for p in waiting if p.last_joined}
        if not waiting or len(leaders) != 1:
            return None
        leader = leaders.pop()
        owner = next((p for p in self.procs if leader in p.member_ids), None)
        generation = {(p.last_joined or {}).get("generation") for p in waiting}
        if owner is None or not owner.live:
            who = "an unknown member" if owner is None else f"{owner.name} ({owner.state})"
            return (
                f"tansu stall: the waiting members' JoinGroup answers (generation "
                f"{sorted(map(str, generation))}) name as leader {who}, {leader}, which is gone "
                "and which tansu never expires, so nobody sends the assignment"
            )
        if (owner.status or {}).get("state") == "STABLE" and owner.status is not None:
            names = ", ".join(p.name for p in waiting)
            return (
                f"tansu stall: the leader {owner.name} is STABLE in generation "
                f"{owner.status.get('generation')} (tansu answers its heartbeats with NONE) "
                f"while {names} loop JoinGroup -> SyncGroup -> REBALANCE_IN_PROGRESS with it "
                "as leader; tansu never tells the leader to rejoin"
            )
        return None

    def describe_members(self) -> str:
        parts = []
        for p in self.procs:
            if p.done.is_set():
                continue
            st = p.status or {}
            assignment = [f"{t}-{n}" for t, n in st.get("assignment", [])]
            state = p.client if p.foreign else st.get("state")
            parts.append(f"{p.name}({p.state}): {state} gen {st.get('generation')} {assignment}")
        return "; ".join(parts) or "no process left"

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> RunResult:
        """Run the schedule; never raises for a broken invariant (see ``result.failures``)."""
        started = time.monotonic()
        (self.workdir / "schedule.json").write_text(self.schedule.dumps(indent=2))
        try:
            await self._run()
        except Exception as exc:  # a harness or broker-control error: reported with the seed
            trace = "".join(traceback.format_exception(exc)).rstrip()
            self.fail(f"the runner raised {type(exc).__name__}: {exc}\n{trace}")
        finally:
            await self._cleanup()
            self.result.duration = time.monotonic() - started
            self._keep_broker_log()
            self._timeline.close()
        return self.result

    def _keep_broker_log(self) -> None:
        """Copy Kafka's log next to the members' when the run failed or noted something
        (the broker's own directory goes with the broker)."""
        broker = self.target.broker
        if not isinstance(broker, KafkaBroker) or not (self.result.failures or self.result.notes):
            return
        with contextlib.suppress(OSError):
            shutil.copyfile(broker.log_path, self.workdir / "broker.log")

    async def _run(self) -> None:
        s = self.schedule
        await self.target.create_topic(self.topic, s.partitions)
        self.note(f"topic {self.topic} ({s.partitions} partitions), group {self.group}")
        if s.pattern:
            self.note(f"kgroup members subscribe with the pattern {self.topic}.*")
        done = await group_setup(s, self.target.direct_bootstrap, self.group)
        if done is not None:
            self.note(done)
        for spec in s.members:
            await self.spawn(spec)
        initial_bound = INITIAL_STABLE_BOUND[s.broker]
        t = time.monotonic()
        why = await self.wait_for(self.why_not_stable, initial_bound)
        if why is not None:
            text = (
                f"the group was not stable within {initial_bound:.0f} s of starting, before "
                f"any fault: {why}; members: {self.describe_members()}"
            )
            stall = self.broker_stall()
            if stall is None:
                self.fail(f"invariant 2: {text}")
            else:
                self.result.broker_stalls += 1
                self.result.inconclusive = f"{text}. {stall}"
                self.note(f"BROKER STALL before any fault: {stall}")
            await self._close_all()
            self._final_checks()
            return
        self.result.initial_stable = time.monotonic() - t
        self.note(
            f"first stable after {self.result.initial_stable:.2f} s: {self.describe_members()}"
        )
        self._t0 = time.monotonic()
        self.note(f"fault window opens (monotonic {self._t0:.3f})")
        await self._apply_steps()
        await self._stop_faults()
        stopped = time.monotonic()
        self.note(f"faults stopped; waiting up to {self.result.bound:.1f} s for a stable group")
        why = await self.wait_for(self.why_not_stable, self.result.bound)
        if why is None:
            self.result.time_to_stable = time.monotonic() - stopped
            self.note(f"stable after {self.result.time_to_stable:.2f} s: {self.describe_members()}")
        else:
            terms = " + ".join(f"{name} {value:.1f}" for name, value in self.result.bound_terms)
            text = (
                f"not stable {self.result.bound:.1f} s after the faults stopped "
                f"(bound = {terms}): {why}; members: {self.describe_members()}"
            )
            stall = self.broker_stall()
            if stall is None:
                self.fail(f"invariant 2: {text}")
            else:
                self.result.broker_stalls += 1
                self.result.notes.append(f"{text}. Not counted against kgroup: {stall}")
                self.note(f"BROKER STALL: {stall}")
        if s.protocol == "migration-back" and isinstance(self.target.broker, KafkaBroker):
            converted = self._conversions()
            self.result.notes.append(f"the broker converted the group: {', '.join(converted)}")
            if why is None and converted[-1:] != ["consumer->classic"]:
                self.fail("invariant 2: stable, but the broker's log ends with no conversion back")
        await self._close_all()
        self._final_checks()

    # -- the timeline -------------------------------------------------------------------------

    async def _apply_steps(self) -> None:
        assert self._t0 is not None
        actions: list[tuple[float, int, str, Step]] = []
        for i, step in enumerate(self.schedule.steps):
            actions.append((step.at, 2 * i, "start", step))
            if step.duration > 0:
                actions.append((step.end, 2 * i + 1, "end", step))
        actions.sort(key=lambda a: (a[0], a[1]))
        for at, _, phase, step in actions:
            delay = self._t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's own time offset
            if phase == "start":
                await self._start(step)
            else:
                await self._end(step)
        if self._background:
            await asyncio.gather(*self._background)

    def _later(self, what: str, coro: Awaitable[None]) -> None:
        async def wrapped() -> None:
            try:
                await coro
            except Exception as exc:
                self.fail(f"fault action {what} raised {type(exc).__name__}: {exc}")

        self._background.append(asyncio.get_running_loop().create_task(wrapped(), name=what))

    def _applied(self, step: Step, detail: str = "") -> None:
        self.result.applied[step.kind] += 1
        self.note(
            f"APPLY {step.kind} {' '.join(f'{k}={v}' for k, v in step.args)} {detail}".rstrip()
        )

    def _skip(self, step: Step, why: str) -> None:
        self.result.skipped.append(f"{step}: {why}")
        self.note(f"SKIP {step.kind}: {why}")

    def _running(self, step: Step) -> MemberProc | None:
        """The running (not paused) process of ``step``'s member slot; None, with the step
        recorded as skipped, when there is none."""
        slot = step.member
        assert slot is not None
        mp = self.current(slot)
        if mp is None or not mp.live or mp.state == "paused":
            self._skip(step, f"{slot} has no running process")
            return None
        return mp

    async def _start(self, step: Step) -> None:
        kind = step.kind
        target = self.target
        if kind in ("crash", "pause", "leave"):
            mp = self._running(step)
            if mp is None:
                return
            if kind == "crash":
                mp.state = "killed"
                self._signal(mp, signal.SIGKILL)
                self._applied(step, mp.name)
            elif kind == "pause":
                if self._signal(mp, signal.SIGSTOP):
                    mp.state = "paused"
                    self._applied(step, mp.name)
            else:
                self._later(f"leave-{mp.name}", self._leave(step, mp))
        elif kind == "rejoin":
            slot = step.member
            assert slot is not None
            old = self.current(slot)
            spec = self.schedule.member(slot)
            if spec.instance_id and old is not None and not old.done.is_set():
                # A static member's previous process still closing (or being reaped): wait,
                # bounded, so that two processes of one instance id never overlap.
                await self.wait_for(lambda: None if old.done.is_set() else "closing", 15.0)
            self._applied(step)
            self._later(f"rejoin-{slot}", self._spawn_quietly(spec))
        elif kind == "roll":
            mp = self._running(step)
            if mp is None:
                return
            self._later(f"roll-{mp.name}", self._roll(step, mp))
        elif kind == "black_hole":
            assert target.proxy is not None
            target.proxy.black_hole(step.arg("direction", "both"))
            self._applied(step)
        elif kind == "latency":
            assert target.proxy is not None
            target.proxy.add_latency(
                float(step.arg("seconds")), jitter=float(step.arg("jitter", 0.0))
            )
            self._applied(step)
        elif kind == "cut":
            assert target.proxy is not None
            target.proxy.cut()
            self._applied(step)
        elif kind == "broker_restart":
            self._applied(step)
            self._later("broker-restart", self._restart_broker(bool(step.arg("hard", False))))
        elif kind == "tansu_restart":
            self._applied(step)
            self._later("tansu-restart", self._restart_tansu())
        elif kind == "coordinator_move":
            cluster = self._mock()
            cluster.set_coordinator(self.group, int(step.arg("broker_id")))
            self._applied(step)
        elif kind == "broker_down":
            self._mock().broker_down(int(step.arg("broker_id")))
            self._applied(step)
        elif kind == "inject_errors":
            codes = [int(c) for c in step.arg("codes", ())]
            self._mock().push_request_errors(int(step.arg("api_key")), *codes)
            self._applied(step)
        elif kind == "add_partitions":
            self._later("add-partitions", self._grow_topic(step))
        elif kind == "create_topic":
            self._later("create-topic", self._create_topic(step))
        elif kind == "delete_topic":
            self._later("delete-topic", self._delete_topic(step))
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    async def _end(self, step: Step) -> None:
        kind = step.kind
        if kind == "pause":
            slot = step.member
            assert slot is not None
            mp = self.current(slot)
            if mp is not None and mp.state == "paused":
                self._signal(mp, signal.SIGCONT)
                mp.state = "running"
                self.note(f"END pause: SIGCONT {mp.name}")
        elif kind in ("black_hole", "latency"):
            proxy = self.target.proxy
            assert proxy is not None
            if step.arg("end") == "cut":
                proxy.cut()
            proxy.heal()
            self.note(f"END {kind}: {'cut + ' if step.arg('end') == 'cut' else ''}heal")
        elif kind == "broker_down":
            self._mock().broker_up(int(step.arg("broker_id")))
            self.note(f"END broker_down: broker {step.arg('broker_id')} up")

    async def _grow_topic(self, step: Step) -> None:
        total = int(step.arg("total"))
        await self.target.grow_topic(self.topic, total)
        mine = [tp for tp in self.partitions if tp.topic == self.topic]
        total = max(total, len(mine))  # a later step's call may have ended first
        others = {tp for tp in self.partitions if tp.topic != self.topic}
        self.partitions = frozenset(others | {TopicPartition(self.topic, p) for p in range(total)})
        self.result.grown_to = len(self.partitions)
        self._applied(step, f"{self.topic} has {total} partitions")
        self._changed.set()

    async def _create_topic(self, step: Step) -> None:
        """A second topic that the members' pattern matches (``{topic}-{index}``)."""
        name, count = f"{self.topic}-{step.arg('index')}", int(step.arg("partitions"))
        await self.target.create_topic(name, count)
        self.partitions |= {TopicPartition(name, p) for p in range(count)}
        self.result.grown_to = len(self.partitions)
        self._applied(step, f"{name} ({count} partitions)")
        self._changed.set()

    async def _delete_topic(self, step: Step) -> None:
        """The second topic goes again (``{topic}-{index}``), once its creation is done:
        from then on the group must own none of its partitions."""
        name = f"{self.topic}-{step.arg('index')}"
        created = await self.wait_for(
            lambda: None if any(tp.topic == name for tp in self.partitions) else "not created",
            timeout=60.0,
        )
        if created is not None:
            raise RuntimeError(f"delete_topic: {name} was never created")
        await self.target.delete_topic(name)
        self.partitions = frozenset(tp for tp in self.partitions if tp.topic != name)
        self.result.grown_to = len(self.partitions)
        self._applied(step, f"{name} deleted")
        self._changed.set()

    def _mock(self) -> MockCluster:
        broker = self.target.broker
        assert isinstance(broker, MockCluster), f"{self.target.kind} is not the mock cluster"
        return broker

    async def _spawn_quietly(self, spec: MemberSpec) -> None:
        await self.spawn(spec)

    def _fenced_by_a_reload(self, mp: MemberProc, rec: dict[str, Any], at: float) -> bool:
        """Whether a kgroup member's FencedInstanceId is Kafka's reload of a static member
        id it had not persisted: a static member that replaced its slot's previous process
        while the group rebalanced is recorded only when the generation completes; a Kafka
        restart before that loads the previous member id again, whose instance id then
        fences the live process (Kafka seed 72). Only in a classic schedule (a migration's
        restart would move the slot on to its next protocol, off the schedule's plan), and
        only when raised within a session timeout (+1 s) of a Kafka restart's return. The
        simulation expects it on the same terms (seed 1379); as there, the application
        restarts the member (:meth:`_restart_fenced`)."""
        if rec.get("type") != "FencedInstanceId" or self.schedule.protocol != "classic":
            return False
        if not mp.spec.instance_id:
            return False
        session = self.schedule.timeouts.session
        return any(begin <= at <= back + session + 1.0 for begin, back in self._kafka_restarts)

    async def _restart_fenced(self, mp: MemberProc) -> None:
        """What the application does with the fatal FencedInstanceId of
        :meth:`_fenced_by_a_reload`: once the process has exited, a new one in its slot
        (unless a step replaced it meanwhile, or the run is closing)."""
        await mp.done.wait()
        if self._closing or self.current(mp.spec.slot) is not mp:
            return
        self.result.fenced_restarts += 1
        self.note(f"the application restarts {mp.spec.slot} after {mp.name} was fenced")
        await self.spawn(mp.spec)

    async def _roll(self, step: Step, mp: MemberProc) -> None:
        """A migration's roll: the member closes (SIGTERM), then its slot's next process
        starts, on the consumer protocol (``protocol_for``)."""
        await self._leave(step, mp)
        if mp.state != "terminating":
            return  # skipped: not running
        why = await self.wait_for(
            lambda: None if mp.done.is_set() else f"{mp.name} closing", self._close_bound()
        )
        if why is not None:
            self.note(f"roll: {why} after {self._close_bound():.0f} s; its successor starts")
        await self.spawn(mp.spec)

    async def _leave(self, step: Step, mp: MemberProc) -> None:
        if not mp.ready.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(20.0):
                    await mp.ready.wait()
        if not mp.live or mp.state == "paused":
            self._skip(step, f"{mp.name} is {mp.state}")
            return
        mp.terminated_before_ready = not mp.ready.is_set()
        mp.state = "terminating"
        self._signal(mp, signal.SIGTERM)
        self._applied(step, mp.name)

    async def _restart_broker(self, hard: bool) -> None:
        broker = self.target.broker
        assert isinstance(broker, KafkaBroker)
        async with self._restart_lock:
            t = time.monotonic()
            if hard:
                await asyncio.to_thread(broker.kill)
                await asyncio.to_thread(broker.start)
            else:
                await asyncio.to_thread(broker.restart)
            self._kafka_restarts.append((t, time.monotonic()))
        self.note(f"END broker_restart: Kafka back after {time.monotonic() - t:.2f} s")

    async def _restart_tansu(self) -> None:
        broker = self.target.broker
        assert isinstance(broker, TansuBroker)
        async with self._restart_lock:
            t = time.monotonic()
            await asyncio.to_thread(broker.restart)
            self._broker_epoch += 1
            await self.target.create_topic(self.topic, self.schedule.partitions)
            self._state_losses.append((t, time.monotonic()))
        self.note(
            f"END tansu_restart: back with the topic recreated after {time.monotonic() - t:.2f} s"
        )

    async def _stop_faults(self) -> None:
        """Undo whatever is still in effect: every fault stops here."""
        proxy = self.target.proxy
        if proxy is not None:
            proxy.heal()
        broker = self.target.broker
        if isinstance(broker, MockCluster):
            broker.broker_up(-1)
            for api_key in API_KEYS.values():
                broker.clear_request_errors(api_key)
        elif not broker.running():
            self.fail(f"the {self.target.kind} broker is not running after the fault window")
        for mp in self.procs:
            if mp.state == "paused":
                self._signal(mp, signal.SIGCONT)
                mp.state = "running"

    # -- shutting down and the final checks ---------------------------------------------------

    def _close_bound(self) -> float:
        t = self.schedule.timeouts
        close = min(t.close_timeout_ms, t.request_timeout_ms) / 1000.0
        return close + POLL_TIMEOUT + self.schedule.revoke_work + 10.0

    async def _close_all(self) -> None:
        """SIGTERM every live member (each closes) and wait for every process to exit."""
        self._closing = True
        for mp in self.procs:
            if mp.state == "paused":
                self._signal(mp, signal.SIGCONT)
                mp.state = "running"
            if mp.live:
                mp.terminated_before_ready = not mp.ready.is_set()
                mp.state = "terminating"
                self._signal(mp, signal.SIGTERM)
        self.note("SIGTERM to every live member")
        bound = self._close_bound()
        why = await self.wait_for(
            lambda: next(
                (f"{p.name} still running" for p in self.procs if not p.done.is_set()), None
            ),
            bound,
        )
        if why is not None:
            for mp in self.procs:
                if not mp.done.is_set():
                    self.fail(
                        f"invariant 4: {mp.name} did not exit within {bound:.0f} s of SIGTERM"
                    )
                    mp.state = "killed"
                    self._signal(mp, signal.SIGKILL)
            await asyncio.gather(*(p.done.wait() for p in self.procs))

    def _final_checks(self) -> None:
        s = self.schedule
        # Invariant 1. Without the member lease in the core (a member reports lease=false:
        # ``member.lease_expired`` never fires), a paused or cut-off member holds its
        # partitions until it learns it was evicted, so an overlap whose earlier hold is such
        # a member's is the known zombie window: noted, not failed, until the lease lands.
        overlaps = self.ownership.overlaps()
        no_lease = {mp.name for mp in self.procs if mp.lease_supported is False}
        overlaps = self._tolerate(
            overlaps,
            lambda a, b: min(a, b, key=lambda h: h.start).member in no_lease,
            "after a member without the lease in its core was cut off (tolerated: "
            "member.lease_expired does not fire yet)",
        )
        unowned_at = self._unowned_conversions() if overlaps else []  # the log, read once
        overlaps = self._tolerate(
            overlaps,
            lambda a, b: self._unowned_conversion_overlap(a, b, unowned_at),
            "of a classic member's hold with a consumer-protocol member's after Kafka "
            "converted the group while its assignments were reset (tolerated: Kafka 4.4.0 "
            "then counts the classic members as owning nothing; limitations.md)",
        )
        before = len(overlaps)
        overlaps = self._tolerate(
            overlaps,
            self._java_restart_overlap,
            "of a Java member's hold across a Kafka restart that expired it (tolerated: the "
            "Java client has no lease; it held on until it reached the coordinator again and "
            "lost them, within a session of the broker's return)",
        )
        self.result.java_restart_overlaps += before - len(overlaps)
        overlaps = self._tolerate(
            overlaps,
            self._state_loss_overlap,
            "across a tansu restart, which forgot the group: the stale hold ended by its lease "
            "within a session timeout of the broker's return (tolerated: no client can see a "
            "coordinator lose its state)",
        )
        if overlaps:
            clients = {mp.name: mp.client for mp in self.procs}
            if any(mp.foreign for mp in self.procs):
                first = Counter(
                    clients.get(min(a, b, key=lambda h: h.start).member, "kgroup")
                    for a, b in overlaps
                )
                self.result.notes.append(
                    "overlaps by whose hold came first: "
                    + ", ".join(f"{who} {n}" for who, n in sorted(first.items()))
                    + " (every one fails the run: Java and confluent members only get faults "
                    "they survive)"
                )
            shown = "\n".join(
                f"       {self._hold(a)}\n         overlaps {self._hold(b)}"
                for a, b in overlaps[:10]
            )
            more = f"\n       ... and {len(overlaps) - 10} more" if len(overlaps) > 10 else ""
            self.fail(
                f"invariant 1: {len(overlaps)} overlapping hold(s) of a partition by two members "
                f"(times relative to the fault window):\n{shown}{more}"
            )
        # Invariant 3.
        quirks = BROKER_QUIRK_ERRORS.get(s.broker, ())
        for mp in self.procs:
            unexpected = []
            for e in mp.errors:
                kind, message = str(e.get("type")), str(e.get("message"))
                if kind in s.expected_errors:
                    continue
                if e.get("excused"):
                    self.result.notes.append(f"{mp.name}: {kind} tolerated: {e['excused']}")
                    continue
                if any(kind == q and message.startswith(p) for q, p, _ in quirks):
                    self.result.quirk_errors[kind] += 1
                    continue
                unexpected.append(e)
            if unexpected:
                kinds = Counter(f"{e.get('type')}: {e.get('message')}" for e in unexpected)
                listed = "; ".join(f"{text} (x{n})" for text, n in kinds.most_common(5))
                self.fail(f"invariant 3: {mp.name}: poll() raised {listed}")
        # Invariant 4 (a Java member: exit code 0 and a ``closed`` line after close(); the
        # Python leak checks do not apply to a JVM).
        for mp in self.procs:
            if mp.state == "killed" or mp.terminated_before_ready:
                continue
            problems = []
            if mp.returncode != 0:
                problems.append(f"exit code {mp.returncode}")
            closed = mp.closed
            if closed is None:
                problems.append("no report after close()")
            else:
                for key in ("tasks", "sockets", "transports", "warnings", "loop_errors"):
                    if closed.get(key):
                        problems.append(f"{key} left: {closed[key]}")
                if closed.get("close_error"):
                    problems.append(f"close() raised {closed['close_error']}")
            if mp.exit is not None and mp.exit.get("warnings"):
                problems.append(f"warnings at exit: {mp.exit['warnings']}")
            if mp.held_at_exit:
                problems.append(f"still held after close(): {mp.held_at_exit}")
            if problems:
                self.fail(f"invariant 4: {mp.name} (log {mp.log_path}): " + "; ".join(problems))
        supported = {mp.lease_supported for mp in self.procs if mp.lease_supported is not None}
        self.result.lease_supported = None if not supported else all(supported)
        self.result.lease_expirations = sum(mp.lease_expirations for mp in self.procs)
        self.result.rebalances = len(self._generations)

    def _state_loss_overlap(self, a: Hold, b: Hold) -> bool:
        """Whether an overlap is explained by a tansu restart, within the lease's bound.

        A restart of tansu (memory storage) forgets every group: the new broker may hand a
        partition to another member while a member of the old group still holds it. The
        member cannot know; its lease ends the hold at most a session timeout after its last
        proof, which the old broker gave at the latest when it went away. So the overlap is
        tolerated when the earlier hold began before a restart, the later one after it
        began, and the earlier one ended no later than a session timeout (plus 1 s of
        process slack) after the broker was back.
        """
        earlier, later = sorted((a, b), key=lambda h: h.start)
        end = float("inf") if earlier.end is None else earlier.end
        session = self.schedule.timeouts.session
        return any(
            earlier.start < begin <= later.start and end <= back + session + 1.0
            for begin, back in self._state_losses
        )

    def _tolerate(
        self,
        overlaps: list[tuple[Hold, Hold]],
        excused: Callable[[Hold, Hold], bool],
        what: str,
    ) -> list[tuple[Hold, Hold]]:
        """``overlaps`` without those ``excused`` explains, which are noted (``what``: why
        they are tolerated) rather than failed."""
        found = [pair for pair in overlaps if excused(*pair)]
        if found:
            shown = "; ".join(f"{self._hold(a)} / {self._hold(b)}" for a, b in found[:3])
            self.result.notes.append(f"{len(found)} overlap(s) {what}: {shown}")
        return [pair for pair in overlaps if pair not in found]

    def _unowned_conversion_overlap(self, a: Hold, b: Hold, unowned_at: list[float]) -> bool:
        """Whether an overlap is Kafka's conversion of a classic group whose assignments a
        rebalance had just reset (:func:`._kip848.unowned_conversions`): the one case
        where a consumer-protocol member is given what a classic member still holds, and
        no client can see it. Tolerated exactly then: the earlier hold is a classic
        process's and began before such a conversion (``unowned_at``: their times, from
        :meth:`_unowned_conversions`), the later one a consumer-protocol
        process's that began after it, and the earlier one ended no later than a session
        timeout (plus 1 s of process slack) after it: the classic member rejoins at its
        next heartbeat and gives the partition up. The broker's log clock is mapped onto
        the runner's with the wall clock read at the start (0.5 s of slack each way)."""
        earlier, later = sorted((a, b), key=lambda h: h.start)
        protocols = {mp.name: mp.protocol for mp in self.procs}
        if protocols.get(earlier.member) == "consumer" or protocols.get(later.member) != "consumer":
            return False
        if earlier.end is None:
            return False
        session = self.schedule.timeouts.session
        return any(
            earlier.start < at + 0.5
            and later.start > at - 0.5
            and earlier.end <= at + session + 1.0
            for at in unowned_at
        )

    def _unowned_conversions(self) -> list[float]:
        """:func:`._kip848.unowned_conversions` of the group, on the runner's clock (Kafka
        only)."""
        broker = self.target.broker
        if not isinstance(broker, KafkaBroker):
            return []
        return [self._from_log_clock(t) for t in unowned_conversions(broker.log_path, self.group)]

    def _from_log_clock(self, seconds: float) -> float:
        """The monotonic time of a broker log stamp (``seconds`` since local midnight)."""
        wall0, mono0 = self._clock
        day = datetime.datetime.fromtimestamp(wall0).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        wall = day.timestamp() + seconds
        if wall < wall0 - 43_200:  # the log went past midnight
            wall += 86_400
        return mono0 + (wall - wall0)

    def _java_restart_overlap(self, a: Hold, b: Hold) -> bool:
        """Whether an overlap is a Java member holding on across a Kafka restart that
        expired it: the one case where a Java member's overlap is not a failure.

        A Kafka that comes back from a restart (SIGKILL and log recovery, above all) loads
        the group and starts its members' sessions before they can reach it again, so it may
        expire every member and give the partitions to whoever arrives first. A kgroup member
        ended its holds by its lease meanwhile; the Java client has no lease and holds on until
        it reaches the coordinator and hears it is unknown (``onPartitionsLost``). Tolerated
        exactly then: the earlier hold is a Java member's, began before a restart that began
        before the later hold, and ended by ``lost`` no later than a session timeout (plus
        1 s of process slack) after the broker was back. A Java hold that ended any other
        way (revoked: the group still counted it as a member) or later, or a kgroup member's
        earlier hold, still fails. A confluent member (consumer protocol) has no lease either
        and is held to the same terms.
        """
        earlier, later = sorted((a, b), key=lambda h: h.start)
        if not any(mp.foreign and mp.name == earlier.member for mp in self.procs):
            return False
        if earlier.ended_by != "lost" or earlier.end is None:
            return False
        session = self.schedule.timeouts.session
        return any(
            earlier.start < begin <= later.start and earlier.end <= back + session + 1.0
            for begin, back in self._kafka_restarts
        )

    def _hold(self, hold: Hold) -> str:
        end = "open" if hold.end is None else f"{self._rel(hold.end)} ({hold.ended_by})"
        start = self._rel(hold.start)
        client = next((mp.client for mp in self.procs if mp.name == hold.member), "kgroup")
        who = hold.member if client == "kgroup" else f"{hold.member} ({client})"
        return f"{who} gen {hold.generation} held {hold.partition} {start}..{end}"

    async def _cleanup(self) -> None:
        """Whatever happened: no process, reader or background task outlives the run."""
        if self._background:
            # Broker restarts run in threads, which a cancel would not stop: let them end
            # (each is bounded by the broker's own start timeout) before the broker is closed.
            pending = [t for t in self._background if not t.done()]
            if pending:
                await asyncio.wait(pending, timeout=180.0)
            for task in self._background:
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
        for mp in self.procs:
            if not mp.done.is_set():
                mp.state = "killed"
                self._signal(mp, signal.SIGCONT)
                self._signal(mp, signal.SIGKILL)
        if self._readers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30.0):
                    await asyncio.gather(*self._readers, return_exceptions=True)
        for task in self._readers:
            task.cancel()
        proxy = self.target.proxy
        if proxy is not None:
            proxy.heal()


def _tps(rec: dict[str, Any]) -> list[TopicPartition]:
    return [TopicPartition(str(t), int(p)) for t, p in rec.get("partitions", [])]
