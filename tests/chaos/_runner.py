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
from pathlib import Path
from typing import Any

from kgroup import TopicPartition
from kgroup.testing import KafkaBroker, OwnershipLog
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
from ._procs import MemberProc, RunResult, spawn_process
from ._records import RecordLedger, RecordStream
from ._schedule import MemberSpec, Schedule, assignors_for, handoff_for, protocol_for
from ._steps import StepDriver
from ._target import Target
from ._verdict import final_checks

__all__ = ["ChaosRunner", "MemberProc", "RunResult", "Target", "stable_bound"]

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
#: ``records`` schedules: how long the stable group has to process every acknowledged record.
RECORDS_DRAIN_BOUND = 60.0
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
        #: Topics deleted by a ``delete_topic`` step: name -> when DeleteTopics was sent
        #: (set once it is done; a ``create_again`` step waits for it).
        self.deleted_topics: dict[str, float] = {}
        #: Topics a ``create_again`` step made again: name -> when CreateTopics was sent.
        self.recreated_topics: dict[str, float] = {}
        self._kafka_restarts: list[tuple[float, float]] = []  # (begin, back)
        self._generations: set[tuple[int, int]] = set()
        self._t0: float | None = None
        self._java_argv: list[str] | None = None
        self._started = time.monotonic()
        self._clock = (time.time(), self._started)  # wall and monotonic, for the broker's log
        self._steps = StepDriver(self)
        #: ``records`` schedules: the stream produced and what the GroupConsumers reported.
        self.stream: RecordStream | None = None
        self.ledger = RecordLedger()
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
        if handoff_for(self.schedule.seed, name):
            argv.append("--handoff")
        if self.schedule.records:
            argv.append("--consume")
        if self.schedule.pattern:
            # Only this group's topic: its name is unique (the tag), has no character
            # special to a regex (Python's or RE2/J's), and ``.*`` matches "".
            argv += ["--pattern", self.topic + ".*"]
        elif self.schedule.named_topics:
            argv[argv.index("--topic") + 1] = self.topic_names()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        log_path = self.workdir / f"{name}.log"
        proc = await spawn_process(argv, log_path, env)
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
            self.topic_names(),
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
            *confluent_argv(
                self.schedule, spec, name, bootstrap, self.group, self.topic_names(), protocol
            ),
        ]
        log_path = self.workdir / f"{name}.log"
        proc = await spawn_process(argv, log_path)
        mp = self._track(spec, name, proc, log_path, f"confluent, direct, {protocol} protocol")
        mp.protocol = protocol
        return mp

    def topic_names(self) -> str:
        """What a member subscribed by name is given: the group's topic, and those the
        schedule creates later (:attr:`~._schedule.Schedule.named_topics`), by commas."""
        return ",".join([self.topic, *(self.topic + s for s in self.schedule.named_topics)])

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
            self.ledger.assigned(mp.name, at, [tp.partition for tp in _tps(rec)])
        elif event == "records":
            first, last = int(rec["first"]), int(rec["last"])
            self.ledger.records(mp.name, at, int(rec["partition"]), first, last)
        elif event == "committed":
            self.ledger.committed(mp.name, at, int(rec["partition"]), int(rec["offset"]))
        elif event == "commit_failed":
            self.ledger.failed_commits += 1
        elif event == "start_failed":
            self.note(f"{mp.name}: start() failed, retried: {rec.get('type')}")
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
        if s.records:
            self.stream = RecordStream(self.target.direct_bootstrap, self.topic, s.partitions)
            await self.stream.start()
            self.note("producing records (invariant 5)")
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
        await self._steps.apply_steps()
        await self._steps.stop_faults()
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
        if self.stream is not None:
            await self._records_processed()
        if s.protocol == "migration-back" and isinstance(self.target.broker, KafkaBroker):
            converted = self._conversions()
            self.result.notes.append(f"the broker converted the group: {', '.join(converted)}")
            if why is None and converted[-1:] != ["consumer->classic"]:
                self.fail("invariant 2: stable, but the broker's log ends with no conversion back")
        await self._close_all()
        self._final_checks()

    async def _records_processed(self) -> None:
        """Stop the stream, then wait for every acknowledged record to be processed
        (invariant 5's first half)."""
        stream = self.stream
        assert stream is not None
        await stream.stop()
        self.note(
            f"stopped producing: {stream.total} records acknowledged, "
            f"{stream.failed_sends} sends failed"
        )
        why = await self.wait_for(
            lambda: (
                f"{sum(map(len, missing.values()))} not processed"
                if (missing := self.ledger.missing(stream.acked))
                else None
            ),
            RECORDS_DRAIN_BOUND,
        )
        led = self.ledger
        self.note(
            f"records: {led.batches} batches processed ({led.repeats} records again), "
            f"{led.commits} commits returned, {led.failed_commits} commits failed"
        )
        if why is not None:
            missing = self.ledger.missing(stream.acked)
            first = {p: offsets[:5] for p, offsets in sorted(missing.items())}
            self.fail(
                f"invariant 5: {why} within {RECORDS_DRAIN_BOUND:.0f} s of the stable group "
                f"(partition: first offsets missing) {first}"
            )

    # -- the timeline -------------------------------------------------------------------------

    def _later(self, what: str, coro: Awaitable[None]) -> None:
        async def wrapped() -> None:
            try:
                await coro
            except Exception as exc:
                self.fail(f"fault action {what} raised {type(exc).__name__}: {exc}")

        self._background.append(asyncio.get_running_loop().create_task(wrapped(), name=what))

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
        """The invariants, once everything has ended (:func:`._verdict.final_checks`)."""
        final_checks(self)

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

    async def _cleanup(self) -> None:
        """Whatever happened: no process, reader or background task outlives the run."""
        if self.stream is not None:
            await self.stream.stop()
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
