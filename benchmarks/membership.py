"""Group-membership benchmarks: kgroup against the clients a user would pick instead.

    python benchmarks/membership.py [--broker tansu|kafka] [--members 3] [--repeat N]
                                    [--idle-members 1000] [--json results.json]
                                    [--scenarios churn,idle,rolling]
    python benchmarks/membership.py --broker kafka --scenarios rolling

Every member runs in its own process (``benchmarks/_proc.py member``), which reports each
assignment change with a ``time.time()`` stamp. Scenarios, per client and repetition:

1. **join**: start ``--members`` members of a fresh group on a fresh topic
   (``--partitions``, 6) at once; seconds from the first spawn until all of them hold
   assignments that are non-empty, disjoint and cover every partition.
2. **leave→covered**: SIGTERM one member of that stable group (its client closes: revoke,
   LeaveGroup); seconds until the survivors' assignments cover every partition again.
3. **crash→covered**: a second fresh group and topic, joined the same way (a second join
   sample); SIGKILL one member; seconds until the survivors cover every partition. Bounded
   below by the session timeout, since nothing tells the broker that the member died.
4. **idle**: ``--idle-members`` kgroup members in ONE process (and ``--idle-peer-members``
   aiokafka and confluent-aio consumers, each also in one process), each alone in its own
   group on a 1-partition topic, at Kafka's defaults (heartbeat 3000 ms, session 45000 ms).
   Once all are stable: process CPU over ``--idle-window`` seconds, event-loop lag p99 (a
   task sleeping 10 ms), and whether every member stayed stable.
5. **rolling**: what cooperative rebalancing (KIP-429) buys, per configuration: a client
   with range (``kgroup``, ``aiokafka``) or with cooperative-sticky (``kgroup-coop``,
   ``confluent-coop``, ``kafka-python-coop``, ``java-coop``; ``--rolling-configs``);
   ``kgroup-coop-handoff`` is ``kgroup-coop`` whose members close with the handoff
   (``GroupConfig.handoff_on_close``: rejoin marked as leaving, then revoke and leave), and
   ``kgroup-848-handoff`` is ``kgroup-848`` with it (wait for the group's heartbeat tick,
   then revoke and leave).
   ``kgroup-848``, ``java-848``, ``confluent-848`` run the KIP-848 consumer protocol (the
   broker's ``uniform`` assignor; ``_kip848.py``): their group gets ``--session-ms`` and
   ``--heartbeat-ms`` as its own consumer session and heartbeat interval first, so they
   are timed like the classic ones; its "rebalances" are the broker's group-epoch bumps.
   They are also scenarios 1-3 clients (``--clients``), on Apache Kafka only. A
   ``-static`` suffix (``kgroup-coop-static``, ``kgroup-848-static``, ``confluent-848-static``,
   ...; kgroup, confluent and java) makes the members static: each slot's processes share a
   group instance id, so a restarted member gets its slot's partitions back (KIP-345).
   ``--rolling-members`` (4) members on a fresh ``--rolling-partitions`` (12) topic, stable;
   scale-out (one more member joins); then each of the 5 is restarted in turn (SIGTERM: its
   client closes, revoke and LeaveGroup; once it has exited a new process with the same
   name joins; ``--rolling-restart-gap covered``: only once the survivors cover every
   partition). Before each step the group must be covered and quiet for ``--settle`` s.
   Measured from the scale-out to the last covered group: **partition-seconds
   unavailable** (:func:`unowned_seconds`: per partition, the time nobody processed it,
   from the start of its owner's revoke callback, or the owner's exit, to the end of the
   assign callback that gives it to a member; a partition kept through a rebalance costs
   nothing; summed over partitions), **rebalances** (generations the broker's log shows
   the group stabilizing at; Apache Kafka only) and **wall** time (trigger to covered,
   summed over the 6 steps). Repetitions outermost; the ratio is to ``kgroup`` (range). A
   configuration that cannot run (kgroup without the cooperative-sticky assignor: its
   ``ConfigError``; aiokafka has no cooperative mode; ``java`` on tansu) is reported
   unavailable, with the reason.

Everything started here (broker, member processes and their process groups) is stopped
on the way out, also on Ctrl-C or SIGTERM; every wait has a deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (
    broker_pid,
    fmt,
    install_interrupts,
    killpg,
    log,
    machine,
    make_broker,
    median,
    parse_line,
    popen_child,
    proc_cpu_seconds,
    ratio,
    render_table,
    stop_processes,
    write_json,
)
from _kip848 import (
    CLIENTS_848,
    SERVER_ASSIGNOR,
    give_group_timings,
    is_848,
    split_label,
    unavailable_848,
)

CLIENTS = ("kgroup", "aiokafka", "confluent", "confluent-aio", "kafka-python", "java")
IDLE_PEERS = ("aiokafka", "confluent-aio")

# Why a client cannot run on a broker, found by running it (see README.md).
KNOWN_INCOMPATIBLE = {
    ("java", "tansu"): (
        "tansu 0.6.0 cannot decode the Kafka 4.4.0 Java client's ApiVersions request "
        "(UnexpectedEof) and drops the connection; the client retries forever"
    ),
}


class BenchmarkError(RuntimeError):
    pass


# --- member processes ------------------------------------------------------------------------


@dataclass
class Member:
    """One member process and what it reported."""

    key: int
    client: str
    name: str
    proc: subprocess.Popen[bytes]
    spawn_t: float
    log_path: Path
    reader: threading.Thread | None = None
    ready_t: float | None = None
    owned: frozenset[int] | None = None  # None until the first assignment event
    owned_t: float | None = None  # when ``owned`` last changed
    events: list[dict[str, Any]] = field(default_factory=list)
    eof_t: float | None = None
    signalled: str | None = None
    signalled_t: float | None = None  # when ``signalled`` was sent

    @property
    def exited(self) -> bool:
        return self.eof_t is not None

    def events_since(self, t: float, kinds: Iterable[str]) -> list[dict[str, Any]]:
        wanted = set(kinds)
        return [e for e in self.events if e.get("t", 0) >= t and e.get("event") in wanted]


class Fleet:
    """Spawns member processes, reads their JSON lines and stops them all at the end."""

    def __init__(self, log_dir: Path, bootstrap: str) -> None:
        self.log_dir = log_dir
        self.bootstrap = bootstrap
        self.inbox: queue.Queue[tuple[int, dict[str, Any] | None, float]] = queue.Queue()
        self.members: dict[int, Member] = {}
        self._keys = iter(range(1, 1_000_000))
        self.on_event: Callable[[Member, dict[str, Any]], None] | None = None

    def spawn(
        self,
        client: str,
        group: str,
        topic: str,
        name: str,
        extra: Sequence[str],
        mode: str = "member",
        log_name: str | None = None,
    ) -> Member:
        """``_proc.py MODE`` (``member`` or ``idle``) of ``client`` in ``group``, logging
        to ``LOG_DIR/{log_name or name}.log``."""
        key = next(self._keys)
        log_path = self.log_dir / f"{log_name or name}.log"
        library, protocol = split_label(client)  # kgroup-848: kgroup on the consumer protocol
        args = [
            mode, "--client", library, "--bootstrap", self.bootstrap,
            "--group", group, "--topic", topic, "--name", name, *protocol, *extra,
        ]  # fmt: skip
        spawn_t = time.time()
        proc = popen_child(args, log_path, stdin=subprocess.DEVNULL)
        member = Member(key, client, name, proc, spawn_t, log_path)
        self.members[key] = member
        member.reader = threading.Thread(
            target=self._read, args=(member,), name=f"reader-{name}", daemon=True
        )
        member.reader.start()
        return member

    def _read(self, member: Member) -> None:
        stdout = member.proc.stdout
        assert stdout is not None
        for raw in stdout:
            record = parse_line(raw)
            if record is not None:
                self.inbox.put((member.key, record, time.time()))
        self.inbox.put((member.key, None, time.time()))

    def pump(self, timeout: float) -> bool:
        """Apply at most one pending event (waiting up to ``timeout``); False if none came."""
        try:
            key, record, received = self.inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return False
        member = self.members[key]
        if record is None:
            member.eof_t = received
            return True
        member.events.append(record)
        kind = record.get("event")
        t = float(record.get("t", received))
        if kind == "ready" and member.ready_t is None:
            member.ready_t = t
        elif kind in ("assigned", "revoked", "lost"):
            member.owned = frozenset(int(p) for p in record.get("partitions", ()))
            member.owned_t = t
        elif kind == "closed":
            member.owned = frozenset()
            member.owned_t = t
        if self.on_event is not None:
            self.on_event(member, record)
        return True

    def wait_until(
        self,
        predicate: Callable[[], bool],
        deadline_s: float,
        *,
        watch: Iterable[Member] = (),
    ) -> tuple[bool, str]:
        """Pump events until ``predicate()`` holds; (False, reason) at the deadline or when a
        watched member exits."""
        watched = list(watch)
        end = time.monotonic() + deadline_s
        while True:
            if predicate():
                return True, ""
            gone = [m.name for m in watched if m.exited]
            if gone:
                return False, f"member(s) exited: {', '.join(gone)}"
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False, f"deadline {deadline_s:.0f}s passed"
            self.pump(min(remaining, 0.2))

    def pump_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (remaining := end - time.monotonic()) > 0:
            self.pump(min(remaining, 0.2))

    def terminate(self, member: Member) -> float:
        """SIGTERM the member process itself (a `java` wrapper forwards it to its JVM)."""
        member.signalled = "SIGTERM"
        t = member.signalled_t = time.time()
        with contextlib.suppress(ProcessLookupError):
            member.proc.send_signal(signal.SIGTERM)
        return t

    def kill(self, member: Member) -> float:
        """SIGKILL the member's whole process group (wrapper and JVM alike)."""
        member.signalled = "SIGKILL"
        t = member.signalled_t = time.time()
        killpg(member.proc.pid, signal.SIGKILL)
        return t

    def stop(self, members: Iterable[Member], grace: float = 15.0) -> None:
        """SIGTERM every live member, wait up to ``grace`` s, then SIGKILL the groups."""
        members = list(members)
        stop_processes([m.proc for m in members], grace)
        for m in members:
            if m.reader is not None:
                m.reader.join(timeout=5.0)
        # Drain what they printed while closing, so the next scenario starts clean.
        while self.pump(0.0):
            pass

    def stop_all(self) -> None:
        self.stop(list(self.members.values()), grace=10.0)


# --- scenarios -------------------------------------------------------------------------------


def covers(members: Sequence[Member], partitions: int) -> bool:
    """Every member holds a non-empty assignment; together disjoint and complete."""
    seen: set[int] = set()
    total = 0
    for m in members:
        if not m.owned:
            return False
        seen |= m.owned
        total += len(m.owned)
    return total == partitions and seen == set(range(partitions))


def covered_at(members: Sequence[Member]) -> float:
    return max(m.owned_t or 0.0 for m in members)


def learned_after(members: Sequence[Member], t: float) -> tuple[float | None, float | None]:
    """Seconds after ``t`` until the first and until the last of ``members`` reported a
    change (learned of the rebalance: eager clients revoke everything first)."""
    firsts = []
    for m in members:
        times = [float(e["t"]) for e in m.events_since(t, ("revoked", "lost", "assigned"))]
        if times:
            firsts.append(min(times) - t)
    if not firsts:
        return None, None
    return min(firsts), max(firsts) if len(firsts) == len(members) else None


@dataclass
class Settings:
    broker: str
    members: int
    partitions: int
    session_ms: int
    heartbeat_ms: int
    max_poll_ms: int
    deadline: float
    settle: float
    log_level: str
    seed: int = 1


class ChurnBench:
    """Scenarios 1-3 for one client."""

    def __init__(self, fleet: Fleet, broker: Any, settings: Settings, log: Callable[[str], None]):
        self.fleet = fleet
        self.broker = broker
        self.s = settings
        self.log = log
        self.rng = random.Random(settings.seed)

    def _member_args(self) -> list[str]:
        s = self.s
        return [
            "--session-ms",
            str(s.session_ms),
            "--heartbeat-ms",
            str(s.heartbeat_ms),
            "--max-poll-ms",
            str(s.max_poll_ms),
            "--log-level",
            s.log_level,
        ]

    def _fresh(self, client: str, tag: str) -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:6]
        topic = f"bench-{client}-{tag}-{suffix}"
        group = f"bench-{client}-{tag}-{suffix}"
        self.broker.create_topic(topic, self.s.partitions)
        if is_848(client.removesuffix(STATIC_SUFFIX)):  # the session and interval, on the group
            give_group_timings(self.broker.bootstrap, group, self.s.session_ms, self.s.heartbeat_ms)
        return group, topic

    def _join(self, client: str, tag: str) -> tuple[list[Member], dict[str, Any]]:
        """Start a fresh group; on failure its members are stopped before raising."""
        group, topic = self._fresh(client, tag)
        members: list[Member] = []
        try:
            for i in range(self.s.members):
                name = f"{client}-{tag}-{i}"
                members.append(self.fleet.spawn(client, group, topic, name, self._member_args()))
            return self._await_joined(members)
        except BaseException:
            self.fleet.stop(members)
            raise

    def _await_joined(self, members: list[Member]) -> tuple[list[Member], dict[str, Any]]:
        t0 = min(m.spawn_t for m in members)
        ok, why = self.fleet.wait_until(
            lambda: covers(members, self.s.partitions), self.s.deadline, watch=members
        )
        if not ok:
            raise BenchmarkError(f"join: {why}; {self._describe(members)}")
        t_cover = covered_at(members)
        ready = [m.ready_t for m in members if m.ready_t is not None]
        result = {
            "join_s": t_cover - t0,
            "join_from_ready_s": t_cover - max(ready) if ready else None,
            "spawn_to_ready_s": max(ready) - t0 if ready else None,
        }
        # A group that looks stable must stay so for a moment before we disturb it.
        self.fleet.pump_for(self.s.settle)
        if not covers(members, self.s.partitions):
            result["unsettled"] = True
            ok, why = self.fleet.wait_until(
                lambda: covers(members, self.s.partitions), self.s.deadline, watch=members
            )
            if not ok:
                raise BenchmarkError(f"join (resettle): {why}; {self._describe(members)}")
        return members, result

    def _jitter(self) -> float:
        """Wait a random part of a heartbeat interval before disturbing the group.

        Without it the signal would land a fixed time (the settle time) after the group
        became stable, so at a fixed phase of every member's heartbeat timer, and the
        results would measure that phase rather than the client: whether the victim's last
        heartbeat just went out decides ±1 interval of session expiry, and the survivors'
        next heartbeat decides when they learn of a rebalance. The draws are seeded per
        repetition (``--seed``), so every client gets the same sequence (paired samples)."""
        jitter = self.rng.uniform(0.0, self.s.heartbeat_ms / 1000.0)
        self.fleet.pump_for(jitter)
        return jitter

    def _describe(self, members: Sequence[Member]) -> str:
        parts = []
        for m in members:
            owned = "none" if m.owned is None else sorted(m.owned)
            state = "exited" if m.exited else "running"
            parts.append(f"{m.name}={owned} ({state}, log {m.log_path})")
        return "; ".join(parts)

    def leave(self, client: str, tag: str) -> dict[str, Any]:
        members, result = self._join(client, tag)
        try:
            victim, survivors = members[-1], members[:-1]
            result["leave_jitter_s"] = self._jitter()
            t_kill = self.fleet.terminate(victim)
            ok, why = self.fleet.wait_until(
                lambda: covers(survivors, self.s.partitions), self.s.deadline, watch=survivors
            )
            if not ok:
                result["leave_error"] = f"{why}; {self._describe(members)}"
                return result
            result["leave_s"] = covered_at(survivors) - t_kill
            first, last = learned_after(survivors, t_kill)
            result["leave_detect_s"], result["leave_detect_last_s"] = first, last
            self.fleet.wait_until(lambda: victim.exited, 30.0)
            result["leaver_exit_s"] = (victim.eof_t - t_kill) if victim.eof_t else None
            result["leaver_revoked"] = bool(victim.events_since(t_kill, ("revoked",)))
            return result
        finally:
            self.fleet.stop(members)

    def crash(self, client: str, tag: str) -> dict[str, Any]:
        members, result = self._join(client, tag)
        try:
            victim, survivors = members[-1], members[:-1]
            result["crash_jitter_s"] = self._jitter()
            t_kill = self.fleet.kill(victim)
            ok, why = self.fleet.wait_until(
                lambda: covers(survivors, self.s.partitions),
                self.s.deadline + self.s.session_ms / 1000.0,
                watch=survivors,
            )
            if not ok:
                result["crash_error"] = f"{why}; {self._describe(members)}"
                return result
            result["crash_s"] = covered_at(survivors) - t_kill
            first, last = learned_after(survivors, t_kill)
            result["crash_detect_s"], result["crash_detect_last_s"] = first, last
            return result
        finally:
            self.fleet.stop(members)

    def run(self, client: str, rep: int) -> dict[str, Any]:
        self.rng = random.Random(f"{self.s.seed}-{rep}")
        sample: dict[str, Any] = {"repeat": rep}
        a = self.leave(client, f"r{rep}a")
        sample["join_s"] = [a["join_s"]]
        sample["join_from_ready_s"] = [a["join_from_ready_s"]]
        sample["spawn_to_ready_s"] = [a["spawn_to_ready_s"]]
        for key in (
            "leave_s",
            "leave_detect_s",
            "leave_detect_last_s",
            "leave_jitter_s",
            "leaver_exit_s",
            "leaver_revoked",
            "leave_error",
        ):
            if key in a:
                sample[key] = a[key]
        self.log(
            f"  {client} r{rep}: join {fmt(a['join_s'])} s, leave→covered "
            f"{fmt(a.get('leave_s'))} s" + (f" ({a['leave_error']})" if "leave_error" in a else "")
        )
        b = self.crash(client, f"r{rep}b")
        sample["join_s"].append(b["join_s"])
        sample["join_from_ready_s"].append(b["join_from_ready_s"])
        sample["spawn_to_ready_s"].append(b["spawn_to_ready_s"])
        for key in (
            "crash_s",
            "crash_detect_s",
            "crash_detect_last_s",
            "crash_jitter_s",
            "crash_error",
        ):
            if key in b:
                sample[key] = b[key]
        self.log(
            f"  {client} r{rep}: join {fmt(b['join_s'])} s, crash→covered "
            f"{fmt(b.get('crash_s'))} s" + (f" ({b['crash_error']})" if "crash_error" in b else "")
        )
        return sample


# --- idle ------------------------------------------------------------------------------------


def run_idle(
    fleet: Fleet,
    broker: Any,
    client: str,
    members: int,
    args: argparse.Namespace,
    log: Callable[[str], None],
) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:6]
    topic = f"idle-{client}-{suffix}"
    broker.create_topic(topic, 1)
    extra = [
        "--idle",
        str(members),
        "--session-ms",
        str(args.idle_session_ms),
        "--heartbeat-ms",
        str(args.idle_heartbeat_ms),
        "--max-poll-ms",
        "300000",
        "--window",
        str(args.idle_window),
        "--settle",
        "3",
        "--join-deadline",
        str(args.idle_join_deadline),
        "--log-level",
        args.log_level if args.log_level != "debug" else "info",
    ]
    if args.idle_poll_timeout is not None:
        extra += ["--idle-poll-timeout", str(args.idle_poll_timeout)]
    if args.idle_peer_pause and client != "kgroup":
        extra.append("--pause")
    name = f"idle-{client}-{members}"
    pid = broker_pid(broker)
    marks: dict[str, float | None] = {}
    progress = {"last": -1.0}

    def on_event(member: Member, record: dict[str, Any]) -> None:
        kind = record.get("event")
        if kind == "window_start":
            marks["broker_cpu0"] = proc_cpu_seconds(pid) if pid else None
            marks["t0"] = time.monotonic()
        elif kind == "result":
            marks["broker_cpu1"] = proc_cpu_seconds(pid) if pid else None
            marks["t1"] = time.monotonic()
        elif kind == "progress" and time.monotonic() - progress["last"] > 10:
            progress["last"] = time.monotonic()
            log(f"  {name}: {record.get('stable')}/{record.get('of')} stable")

    fleet.on_event = on_event
    member = fleet.spawn(client, f"idle-{client}-{suffix}", topic, name, extra, mode="idle")
    try:
        budget = args.idle_join_deadline + args.idle_window + 90.0
        ok, why = fleet.wait_until(
            lambda: any(e.get("event") == "result" for e in member.events), budget, watch=[member]
        )
        if not ok:
            return {"client": client, "members": members, "ok": False, "reason": why}
        result = next(e for e in member.events if e.get("event") == "result")
        out = {"client": client, **{k: v for k, v in result.items() if k not in ("t", "event")}}
        b0, b1 = marks.get("broker_cpu0"), marks.get("broker_cpu1")
        t0, t1 = marks.get("t0"), marks.get("t1")
        if b0 is not None and b1 is not None and t0 is not None and t1 is not None and t1 > t0:
            out["broker_cpu_pct_of_core"] = 100.0 * (b1 - b0) / (t1 - t0)
        fleet.wait_until(lambda: member.exited, 90.0)
        closed = next((e for e in member.events if e.get("event") == "closed"), None)
        if closed is not None:
            out["close_s"] = closed.get("close_s")
            out["not_closed"] = closed.get("not_closed")
        out["log"] = str(member.log_path)
        return out
    finally:
        fleet.on_event = None
        fleet.stop([member], grace=30.0)


# --- rolling restart / scale-out ---------------------------------------------------------------

# Scenario 5's configurations: a client with range, or with cooperative-sticky ("-coop").
ROLLING_CONFIGS = (
    "kgroup-coop",
    "kgroup-coop-handoff",
    "kgroup-848-handoff",
    "kgroup",
    "aiokafka",
    "confluent-coop",
    "kafka-python-coop",
    "java-coop",
    *CLIENTS_848,
)
ROLLING_BASE = "kgroup"  # the ratio's denominator: kgroup with range
COOP_SUFFIX = "-coop"
# kgroup-coop whose members close with the handoff (GroupConfig.handoff_on_close).
HANDOFF_SUFFIX = "-handoff"
# Static members (KIP-345: a group instance id per slot, kept across its restarts): a member
# that closes keeps its assignment for its successor. Clients that have it here.
STATIC_SUFFIX = "-static"
STATIC_CLIENTS = ("kgroup", "confluent", "java")
# The assignment kinds of a member's lines (``revoking`` marks a revoke callback's start).
CHANGE_EVENTS = ("revoking", "revoked", "lost", "assigned")


def rolling_config(label: str) -> tuple[str, str]:
    """``kgroup-coop`` → (``kgroup``, ``cooperative-sticky``); ``aiokafka`` → (.., ``range``).
    ``kgroup-coop-handoff`` is ``kgroup-coop`` closing with the handoff (see
    :func:`rolling_handoff`); a ``-static`` configuration is the one before it with static
    members (:func:`rolling_static`)."""
    if rolling_static(label):
        base = label[: -len(STATIC_SUFFIX)]
        client, assignor = rolling_config(base)
        if split_label(client)[0] not in STATIC_CLIENTS or rolling_handoff(base):
            raise ValueError(f"no static members for configuration {base!r} here")
        return client, assignor
    if label == "kgroup-coop" + HANDOFF_SUFFIX:
        return "kgroup", "cooperative-sticky"
    if label == "kgroup-848" + HANDOFF_SUFFIX:
        return "kgroup-848", SERVER_ASSIGNOR
    if label in CLIENTS_848:  # the consumer protocol: the broker's assignor
        return label, SERVER_ASSIGNOR
    if label.endswith(COOP_SUFFIX):
        client, assignor = label[: -len(COOP_SUFFIX)], "cooperative-sticky"
    else:
        client, assignor = label, "range"
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r} in configuration {label!r}")
    return client, assignor


def rolling_static(label: str) -> bool:
    """Whether the configuration's members are static: each slot's processes share one
    group instance id (``--instance-id``), so a restart keeps the slot's partitions."""
    return label.endswith(STATIC_SUFFIX)


def rolling_handoff(label: str) -> bool:
    """Whether the configuration's members close with the handoff (``--handoff``)."""
    return label.endswith(HANDOFF_SUFFIX)


Interval = tuple[float, float, str]  # start, end, why it ended ("leave" / "rebalance")


def ownership(members: Iterable[Member]) -> dict[int, list[Interval]]:
    """Per partition, the intervals ``[start, end)`` during which some member processed it.

    A member owns a partition from the ``assigned`` line whose assignment holds it (the end
    of the assign callback) until the first of: the ``revoking`` line naming it (the start
    of the revoke or lost callback), a ``revoked`` / ``lost`` / ``assigned`` line whose
    assignment no longer holds it (clients or runs without ``revoking`` lines), the
    ``closed`` line, or the process's exit (a crash, or a close that revoked nothing). A
    partition kept through a rebalance (cooperative, or eager without a revoke) stays one
    interval. An interval that ends after the member was signalled ended because the member
    left ("leave"), any other because a rebalance took it ("rebalance"). Intervals of
    different members may overlap; :func:`unowned_seconds` takes their union. Times are
    the members' ``time.time()`` stamps (one clock: one machine)."""
    out: dict[int, list[Interval]] = {}
    for m in members:
        held: dict[int, float] = {}  # partition -> since when this member processes it

        def close(p: int, t: float, m: Member = m, held: dict[int, float] = held) -> None:
            start = held.pop(p, None)
            if start is not None:
                leaving = m.signalled_t is not None and t >= m.signalled_t
                out.setdefault(p, []).append((start, t, "leave" if leaving else "rebalance"))

        for e in m.events:
            kind = e.get("event")
            if "t" not in e:
                continue
            t = float(e["t"])
            if kind == "revoking":
                for p in e.get("delta", ()):
                    close(int(p), t)
            elif kind in ("revoked", "lost", "assigned"):
                now = {int(p) for p in e.get("partitions", ())}
                for p in [p for p in held if p not in now]:
                    close(p, t)
                if kind == "assigned":
                    for p in now:
                        held.setdefault(p, t)
            elif kind == "closed":
                for p in list(held):
                    close(p, t)
        end = m.eof_t if m.eof_t is not None else math.inf
        for p in list(held):
            close(p, end)
    return out


def unowned_seconds(
    intervals: dict[int, list[Interval]], partitions: int, t0: float, t1: float
) -> dict[str, float]:
    """Partition-seconds within ``[t0, t1]`` during which nobody processed a partition (per
    partition, the window minus the union of its owned intervals; summed): ``total``, and
    split by what opened each gap: ``leave`` (the owner was closing), ``rebalance`` (a
    rebalance revoked it from a member that stayed), ``other`` (never owned before)."""
    by = {"leave": 0.0, "rebalance": 0.0, "other": 0.0}
    for p in range(partitions):
        spans = sorted(intervals.get(p, ()))
        before = [(end, why) for _, end, why in spans if end <= t0]
        cursor, cause = t0, max(before)[1] if before else "other"
        for start, end, why in spans:
            if end <= t0:
                continue
            if start > cursor:
                by[cause] += min(start, t1) - cursor
            if end > cursor:
                cursor, cause = end, why
            if cursor >= t1:
                break
        if cursor < t1:
            by[cause] += t1 - cursor
    return {"total": sum(by.values()), **by}


class BrokerLog:
    """Rebalances counted from the broker's own log: Apache Kafka's group coordinator
    writes ``Stabilized group G generation N with M members.`` each time a generation
    completes its join phase, and for a consumer-protocol (KIP-848) group ``[GroupId G]
    Bumped group epoch to N ...`` each time its membership or subscriptions change. None on
    other brokers (tansu logs no such line)."""

    PATTERN = (
        r"(?:Stabilized group {group} generation |\[GroupId {group}\] Bumped group epoch to )(\d+)"
    )

    def __init__(self, broker: Any, kind: str) -> None:
        path = getattr(broker, "log_path", None) if kind == "kafka" else None
        self.path: Path | None = path if isinstance(path, Path) else None

    def offset(self) -> int | None:
        if self.path is None:
            return None
        try:
            return self.path.stat().st_size
        except OSError:
            return None

    def generations(self, group: str, start: int | None, end: int | None) -> list[int] | None:
        """Generations the group stabilized at between two :meth:`offset` readings."""
        if self.path is None or start is None:
            return None
        try:
            with self.path.open("rb") as fh:
                fh.seek(start)
                data = fh.read(None if end is None else max(0, end - start))
        except OSError:
            return None
        pattern = re.compile(self.PATTERN.format(group=re.escape(group)).encode())
        return [int(m.group(1)) for m in pattern.finditer(data)]


class RollingBench(ChurnBench):
    """Scenario 5 for one configuration (client and assignor) and repetition."""

    def __init__(
        self,
        fleet: Fleet,
        broker: Any,
        settings: Settings,
        log: Callable[[str], None],
    ) -> None:
        super().__init__(fleet, broker, settings, log)
        self.broker_log = BrokerLog(broker, settings.broker)
        self.try_incompatible = False
        # "exit": the new process starts once the old one has exited (its join may fall
        # into the survivors' rebalance or after it, depending on start-up time);
        # "covered": only once the survivors cover every partition and are quiet.
        self.restart_gap = "exit"

    def unavailable(self, client: str, assignor: str) -> str | None:
        """Why this configuration cannot run here (None: it can)."""
        reason = KNOWN_INCOMPATIBLE.get((split_label(client)[0], self.s.broker))
        if reason and not self.try_incompatible:
            return reason
        if is_848(client):
            return unavailable_848(client, self.s.broker)
        if client == "aiokafka" and assignor != "range":
            return "aiokafka has no cooperative rebalancing (eager only)"
        if client == "kgroup":
            # The members build the same GroupConfig from the same tree (child_env).
            from kgroup import ConfigError, GroupConfig

            try:
                GroupConfig(
                    bootstrap_servers=self.broker.bootstrap,
                    group_id="probe",
                    topics=["probe"],
                    assignors=(assignor,),
                )
            except ConfigError as exc:
                return f"ConfigError: {exc}"
        return None

    def _changes(self, members: Sequence[Member]) -> int:
        return sum(1 for m in members for e in m.events if e.get("event") in CHANGE_EVENTS)

    def _errors(self, members: Iterable[Member]) -> str:
        messages = [
            f"{m.name}: {e.get('message')}"
            for m in members
            for e in m.events
            if e.get("event") == "error"
        ]
        return ("; errors: " + "; ".join(messages)) if messages else ""

    def _await_stable(self, live: list[Member], everyone: list[Member], what: str) -> float:
        """Until ``live`` cover every partition and no assignment changes for ``--settle``
        s; returns when the group became covered (its last assignment change)."""
        budget = self.s.deadline + self.s.session_ms / 1000.0
        end = time.monotonic() + budget
        while True:
            ok, why = self.fleet.wait_until(
                lambda: covers(live, self.s.partitions),
                end - time.monotonic(),
                watch=live,
            )
            if not ok:
                raise BenchmarkError(
                    f"{what}: {why}; {self._describe(live)}{self._errors(everyone)}"
                )
            t_covered = covered_at(live)
            changes = self._changes(live)
            self.fleet.pump_for(self.s.settle)
            if covers(live, self.s.partitions) and self._changes(live) == changes:
                return t_covered
            if time.monotonic() > end:
                raise BenchmarkError(
                    f"{what}: not stable within {budget:.0f} s; {self._describe(live)}"
                )

    def run(self, label: str, rep: int) -> dict[str, Any]:
        """One repetition of scenario 5 for ``label`` (a :func:`rolling_config`)."""
        client, assignor = rolling_config(label)
        self.rng = random.Random(f"{self.s.seed}-rolling-{rep}")
        extra = self._member_args()
        if not is_848(client):  # under the consumer protocol the broker assigns
            extra += ["--assignor", assignor]
        if rolling_handoff(label):
            extra.append("--handoff")
        group, topic = self._fresh(label, f"roll{rep}")
        live: list[Member] = []
        everyone: list[Member] = []

        def spawn(slot: int, incarnation: int) -> Member:
            name = f"{label}-r{rep}-m{slot}"
            args = [*extra, "--instance-id", name] if rolling_static(label) else extra
            m = self.fleet.spawn(client, group, topic, name, args, log_name=f"{name}.{incarnation}")
            everyone.append(m)
            return m

        try:
            live.extend(spawn(i, 0) for i in range(self.s.members))
            self._await_stable(live, everyone, "join")
            phases: list[dict[str, Any]] = []
            # Scale out: a member more.
            self._jitter()
            offset = self.broker_log.offset()
            t_start = time.time()
            live.append(spawn(self.s.members, 0))
            t_covered = self._await_stable(live, everyone, "scale-out")
            phases.append(
                {"phase": "scale-out", "start": t_start, "covered": t_covered, "offset": offset}
            )
            # Rolling restart: each member in turn, the newest last.
            for slot in range(len(live)):
                self._jitter()
                old = live[slot]
                offset = self.broker_log.offset()
                t_start = self.fleet.terminate(old)

                def exited(m: Member = old) -> bool:
                    return m.exited

                ok, why = self.fleet.wait_until(exited, self.s.deadline)
                if not ok:
                    raise BenchmarkError(
                        f"restart m{slot}: SIGTERM, then {why} waiting for it to exit; "
                        f"{self._describe(live)}"
                    )
                if self.restart_gap == "covered":
                    survivors = live[:slot] + live[slot + 1 :]
                    self._await_stable(survivors, everyone, f"restart m{slot}: survivors")
                    # Else the spawn is locked to the survivors' heartbeat phase (settle
                    # after their last change), and the client's start-up time decides when
                    # its join falls in their heartbeat cycle (free: they cover everything).
                    self._jitter()
                live[slot] = spawn(slot, 1)
                t_covered = self._await_stable(live, everyone, f"restart m{slot}")
                revoking = old.events_since(t_start, ("revoking",))
                phases.append(
                    {
                        "phase": f"restart m{slot}",
                        "start": t_start,
                        "covered": t_covered,
                        "offset": offset,
                        "exit_s": (old.eof_t or t_start) - t_start,
                        "stop_to_revoking_s": (
                            float(revoking[0]["t"]) - t_start if revoking else None
                        ),
                    }
                )
            end_offset = self.broker_log.offset()
            return self._measure(label, group, everyone, phases, end_offset)
        finally:
            self.fleet.stop(everyone)

    def _measure(
        self,
        label: str,
        group: str,
        everyone: list[Member],
        phases: list[dict[str, Any]],
        end_offset: int | None,
    ) -> dict[str, Any]:
        intervals = ownership(everyone)
        t0, t_end = phases[0]["start"], phases[-1]["covered"]
        bounds = [ph["start"] for ph in phases[1:]] + [t_end]
        offsets = [ph["offset"] for ph in phases[1:]] + [end_offset]
        for ph, until, off_end in zip(phases, bounds, offsets, strict=True):
            gaps = unowned_seconds(intervals, self.s.partitions, ph["start"], until)
            ph["unavailable_ps"] = gaps["total"]
            ph["unavailable_by_cause_ps"] = gaps
            ph["wall_s"] = ph["covered"] - ph["start"]
            gens = self.broker_log.generations(group, ph["offset"], off_end)
            ph["rebalances"] = None if gens is None else len(gens)
        whole = unowned_seconds(intervals, self.s.partitions, t0, t_end)
        all_gens = self.broker_log.generations(group, phases[0]["offset"], end_offset)
        client_gens = sorted(
            {
                int(e["generation"])
                for m in everyone
                for e in m.events
                if "generation" in e and float(e.get("t", 0)) >= t0
            }
        )
        return {
            "configuration": label,
            "group": group,
            "unavailable_ps": whole["total"],
            "leave_ps": whole["leave"],
            "rebalance_ps": whole["rebalance"],
            "other_ps": whole["other"],
            "rebalances": None if all_gens is None else len(all_gens),
            "generations": all_gens,
            "client_generations": client_gens or None,
            "wall_s": sum(ph["wall_s"] for ph in phases),
            "elapsed_s": t_end - t0,
            "scale_out_ps": phases[0]["unavailable_ps"],
            "restarts_ps": sum(ph["unavailable_ps"] for ph in phases[1:]),
            "mismatches": sum(
                1 for m in everyone for e in m.events if e.get("event") == "mismatch"
            ),
            "phases": [{k: v for k, v in ph.items() if k != "offset"} for ph in phases],
            # Every member process's lines, so the measure can be checked (or recomputed).
            "members": [
                {
                    "name": m.name,
                    "log": str(m.log_path),
                    "spawn_t": m.spawn_t,
                    "eof_t": m.eof_t,
                    "signalled": m.signalled,
                    "events": m.events,
                }
                for m in everyone
            ],
        }


def run_rolling(
    fleet: Fleet,
    broker: Any,
    settings: Settings,
    labels: Sequence[str],
    repeat: int,
    log: Callable[[str], None],
    out: dict[str, dict[str, Any]],
    *,
    try_incompatible: bool = False,
    restart_gap: str = "exit",
) -> None:
    """Every configuration once per repetition, repetitions outermost (a drift in the
    machine's load spreads over all configurations alike). Fills ``out`` as it goes (a
    Ctrl-C keeps what was measured), by configuration; summaries at the end."""
    bench = RollingBench(fleet, broker, settings, log)
    bench.try_incompatible = try_incompatible
    bench.restart_gap = restart_gap
    runnable = []
    for label in labels:
        client, assignor = rolling_config(label)
        reason = bench.unavailable(client, assignor)
        if reason:
            log(f"rolling: {label}: unavailable: {reason}")
            out[label] = {"client": client, "assignor": assignor, "unavailable": reason}
        else:
            out[label] = {"client": client, "assignor": assignor, "samples": []}
            runnable.append(label)
    try:
        _rolling_rounds(bench, runnable, repeat, out, log)
    finally:
        for entry in out.values():
            if "samples" in entry:
                entry["summary"] = summarize_rolling(entry["samples"])


def _rolling_rounds(
    bench: RollingBench,
    runnable: Sequence[str],
    repeat: int,
    out: dict[str, dict[str, Any]],
    log: Callable[[str], None],
) -> None:
    for rep in range(repeat):
        for label in runnable:
            samples = out[label]["samples"]
            if samples and not any("error" not in x for x in samples) and rep >= 2:
                continue  # failed twice and never succeeded: it will not now either
            try:
                sample = bench.run(label, rep)
            except BenchmarkError as exc:
                log(f"  rolling {label} r{rep}: FAILED: {exc}")
                samples.append({"repeat": rep, "error": str(exc)})
                continue
            sample["repeat"] = rep
            samples.append(sample)
            log(
                f"  rolling {label} r{rep}: {fmt(sample['unavailable_ps'])} partition-s "
                f"unavailable (scale-out {fmt(sample['scale_out_ps'])}), "
                f"{fmt(sample['rebalances'])} rebalances, wall {fmt(sample['wall_s'])} s"
            )


# --- output ----------------------------------------------------------------------------------


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    joins = [j for s in samples for j in s.get("join_s", ())]
    ready = [j for s in samples for j in s.get("join_from_ready_s", ())]
    return {
        "join_s": median(joins),
        "join_from_ready_s": median(ready),
        "leave_s": median(s.get("leave_s") for s in samples),
        "leave_detect_s": median(s.get("leave_detect_s") for s in samples),
        "crash_s": median(s.get("crash_s") for s in samples),
        "crash_detect_s": median(s.get("crash_detect_s") for s in samples),
        "crash_detect_last_s": median(s.get("crash_detect_last_s") for s in samples),
        "leave_detect_last_s": median(s.get("leave_detect_last_s") for s in samples),
        "leaver_exit_s": median(s.get("leaver_exit_s") for s in samples),
        "leave_after_learn_s": median(_after_learn(s, "leave") for s in samples),
        "crash_after_learn_s": median(_after_learn(s, "crash") for s in samples),
        "join_samples": len(joins),
        "errors": [
            s[k] for s in samples for k in ("error", "leave_error", "crash_error") if k in s
        ],
    }


def _after_learn(sample: dict[str, Any], kind: str) -> float | None:
    """Seconds from the moment the last survivor learned of the rebalance until covered:
    the rebalance itself, without the heartbeat phase and session expiry before it."""
    total, learned = sample.get(f"{kind}_s"), sample.get(f"{kind}_detect_last_s")
    if total is None or learned is None:
        return None
    return float(total) - float(learned)


def churn_table(results: dict[str, dict[str, Any]]) -> str:
    base = results.get("kgroup", {}).get("summary", {})
    rows = []
    for client, entry in results.items():
        if "skipped" in entry:
            rows.append([client, "n/a", "n/a", "n/a", "n/a", "n/a", entry["skipped"][:60]])
            continue
        s = entry["summary"]
        if client == "kgroup":
            ratios = "—"
        else:
            ratios = " / ".join(
                ratio(base.get(k), s.get(k)) for k in ("join_s", "leave_s", "crash_s")
            )
        note = "; ".join(e.split(";")[0] for e in s["errors"])[:60]
        rows.append(
            [
                client,
                fmt(s["join_s"]),
                fmt(s["join_from_ready_s"]),
                f"{fmt(s['leave_s'])} ({fmt(s.get('leave_after_learn_s'))})",
                f"{fmt(s['crash_s'])} ({fmt(s.get('crash_after_learn_s'))})",
                ratios,
                note,
            ]
        )
    header = [
        "client",
        "join s",
        "join from ready s",
        "leave→covered s (after learning)",
        "crash→covered s (after learning)",
        "ratio kgroup/peer (join/leave/crash)",
        "notes",
    ]
    return render_table(header, rows)


def summarize_rolling(samples: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [s for s in samples if "error" not in s]
    return {
        "unavailable_ps": median(s.get("unavailable_ps") for s in ok),
        "scale_out_ps": median(s.get("scale_out_ps") for s in ok),
        "restarts_ps": median(s.get("restarts_ps") for s in ok),
        "leave_ps": median(s.get("leave_ps") for s in ok),
        "rebalance_ps": median(s.get("rebalance_ps") for s in ok),
        "rebalances": median(s.get("rebalances") for s in ok),
        "wall_s": median(s.get("wall_s") for s in ok),
        "elapsed_s": median(s.get("elapsed_s") for s in ok),
        "min_ps": min((s["unavailable_ps"] for s in ok), default=None),
        "max_ps": max((s["unavailable_ps"] for s in ok), default=None),
        "ok_runs": len(ok),
        "runs": len(samples),
        "mismatches": sum(int(s.get("mismatches") or 0) for s in ok),
        "errors": [s["error"] for s in samples if "error" in s],
    }


def rolling_table(results: dict[str, dict[str, Any]]) -> str:
    base = results.get(ROLLING_BASE, {}).get("summary", {}).get("unavailable_ps")
    rows = []
    for label, entry in results.items():
        assignor = entry.get("assignor", "—")
        if "unavailable" in entry:
            reason = "unavailable: " + entry["unavailable"]
            rows.append([label, assignor, "n/a", *([""] * 7), "0/0", reason[:110]])
            continue
        s = entry["summary"]
        notes = [e.split(";")[0] for e in s["errors"]]
        if s["mismatches"]:
            notes.append(f"{s['mismatches']} mismatch line(s)")
        rows.append(
            [
                label,
                assignor,
                fmt(s["unavailable_ps"]),
                f"{fmt(s['min_ps'])}-{fmt(s['max_ps'])}" if s["ok_runs"] else "—",
                ratio(s["unavailable_ps"], base),
                f"{fmt(s['scale_out_ps'])} / {fmt(s['restarts_ps'])}",
                f"{fmt(s.get('leave_ps'))} / {fmt(s.get('rebalance_ps'))}",
                fmt(s["rebalances"], 0),
                fmt(s["wall_s"]),
                fmt(s["elapsed_s"]),
                f"{s['ok_runs']}/{s['runs']}",
                "; ".join(notes)[:90],
            ]
        )
    header = [
        "configuration",
        "assignor",
        "partition-s unavailable",
        "min-max",
        "ratio to kgroup range",
        "scale-out / restarts",
        "leavers' / revoked",
        "rebalances",
        "wall s",
        "elapsed s",
        "ok runs",
        "notes",
    ]
    return render_table(header, rows)


def rolling_targets(results: dict[str, dict[str, Any]]) -> str:
    """The issue's targets as ratios (printed, not asserted)."""

    def ps(label: str) -> float | None:
        value = results.get(label, {}).get("summary", {}).get("unavailable_ps")
        return float(value) if isinstance(value, (int, float)) else None

    coop = ps("kgroup-coop")
    if "kgroup-coop" not in results:
        return "targets: kgroup-coop was not in this run"
    if coop is None:
        reason = results.get("kgroup-coop", {}).get("unavailable", "no successful run")
        return f"targets: kgroup-coop not measured ({reason})"
    peers = {
        label: v
        for label in results
        if label.endswith(COOP_SUFFIX) and not label.startswith("kgroup-coop")
        if (v := ps(label)) is not None
    }
    parts = [f"kgroup-coop / kgroup range = {ratio(coop, ps(ROLLING_BASE))} (target <= 0.10)"]
    if peers:
        best = min(peers, key=lambda k: peers[k])
        parts.append(
            f"kgroup-coop / best peer cooperative ({best}) = {ratio(coop, peers[best])} "
            "(target <= 1.00)"
        )
    handoff = ps("kgroup-coop" + HANDOFF_SUFFIX)
    if handoff is not None:
        parts.append(
            f"kgroup-coop-handoff / kgroup range = {ratio(handoff, ps(ROLLING_BASE))}, "
            f"/ kgroup-coop = {ratio(handoff, coop)}"
        )
    kip848 = ps("kgroup-848")
    if kip848 is not None:
        parts.append(f"kgroup-848 / kgroup-coop = {ratio(kip848, coop)} (target <= 0.50)")
    handoff_848 = ps("kgroup-848" + HANDOFF_SUFFIX)
    if handoff_848 is not None:
        parts.append(
            f"kgroup-848-handoff / kgroup-coop = {ratio(handoff_848, coop)} (target <= 0.50)"
            + (f", / kgroup-coop-handoff = {ratio(handoff_848, handoff)}" if handoff else "")
        )
    # Like for like: static members on both protocols (each restart keeps its partitions).
    static_848, static_coop = ps("kgroup-848" + STATIC_SUFFIX), ps("kgroup-coop" + STATIC_SUFFIX)
    if static_848 is not None:
        parts.append(
            f"kgroup-848-static / kgroup-coop = {ratio(static_848, coop)}"
            + (
                f", / kgroup-coop-static = {ratio(static_848, static_coop)}"
                if static_coop is not None
                else ""
            )
        )
    return "targets: " + "; ".join(parts)


def idle_table(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        if not r.get("ok"):
            rows.append(
                [r["client"], str(r.get("members")), "FAILED: " + str(r.get("reason"))[:70]]
            )
            rows[-1] += [""] * 8
            continue
        rows.append(
            [
                r["client"] + (" (paused)" if r.get("paused") else ""),
                str(r["members"]),
                fmt(r.get("join_s"), 1),
                fmt(r.get("cpu_pct_of_core"), 1),
                fmt(r.get("cpu_ms_per_member_minute"), 2),
                fmt(r.get("lag_p99_ms"), 1),
                fmt(r.get("lag_max_ms"), 1),
                fmt(r.get("all_stable")),
                fmt(r.get("broker_cpu_pct_of_core"), 1),
                fmt(r.get("rss_mb"), 0),
                str(r.get("threads", "—")),
            ]
        )
    header = [
        "client",
        "members",
        "all stable after s",
        "CPU % of 1 core",
        "CPU ms / member-minute",
        "loop lag p99 ms",
        "lag max ms",
        "stayed stable",
        "broker CPU %",
        "RSS MB",
        "threads",
    ]
    return render_table(header, rows)


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    p.add_argument("--members", type=int, default=3, help="members per group (default 3)")
    p.add_argument("--partitions", type=int, default=6, help="topic partitions (default 6)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions of scenarios 1-3 (3)")
    p.add_argument(
        "--clients",
        default=",".join((*CLIENTS, *CLIENTS_848)),
        help=f"comma-separated subset of {','.join((*CLIENTS, *CLIENTS_848))} (default: all;\n"
        "CLIENT-848: on the KIP-848 consumer protocol, Apache Kafka only)",
    )
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--max-poll-ms", type=int, default=300_000)
    p.add_argument("--deadline", type=float, default=60.0, help="per-wait deadline, s")
    p.add_argument("--settle", type=float, default=1.0, help="stability check after join, s")
    p.add_argument("--idle-members", type=int, default=1000, help="kgroup idle members (0: skip)")
    p.add_argument(
        "--idle-peer-members",
        type=int,
        default=300,
        help="aiokafka / confluent-aio idle members, and a kgroup run at the same N (0: skip)",
    )
    p.add_argument("--idle-clients", default="kgroup," + ",".join(IDLE_PEERS))
    p.add_argument("--idle-window", type=float, default=30.0, help="idle measuring window, s")
    p.add_argument("--idle-session-ms", type=int, default=45_000)
    p.add_argument("--idle-heartbeat-ms", type=int, default=3000)
    p.add_argument("--idle-join-deadline", type=float, default=180.0)
    p.add_argument(
        "--idle-poll-timeout",
        type=float,
        default=None,
        help="kgroup idle members call poll(timeout=this) in a loop (default: None, long-poll)",
    )
    p.add_argument(
        "--idle-peer-pause",
        action="store_true",
        help="idle peers pause their partitions (no fetching: membership-only like kgroup)",
    )
    p.add_argument(
        "--scenarios",
        default="churn,idle,rolling",
        help="comma-separated subset of churn (1-3), idle (4), rolling (5); default: all",
    )
    p.add_argument("--skip-churn", action="store_true", help="leave out scenarios 1-3")
    p.add_argument("--skip-idle", action="store_true", help="leave out the idle scenario")
    p.add_argument("--skip-rolling", action="store_true", help="leave out the rolling restart")
    p.add_argument(
        "--rolling-configs",
        default=",".join(ROLLING_CONFIGS),
        help="scenario 5's configurations: CLIENT (range) or CLIENT-coop (cooperative-sticky)"
        f" (default: {','.join(ROLLING_CONFIGS)})",
    )
    p.add_argument("--rolling-members", type=int, default=4, help="members before scale-out (4)")
    p.add_argument("--rolling-partitions", type=int, default=12, help="topic partitions (12)")
    p.add_argument(
        "--rolling-repeat", type=int, default=None, help="repetitions of scenario 5 (--repeat)"
    )
    p.add_argument(
        "--rolling-restart-gap",
        choices=("exit", "covered"),
        default="exit",
        help="start the new process once the old one exited (exit), or once the survivors\n"
        "cover every partition and are quiet (covered: a leave and a join, always apart)",
    )
    p.add_argument("--try-incompatible", action="store_true", help="run known-broken pairs too")
    p.add_argument("--log-level", default="info", help="members' log level (stderr → log files)")
    p.add_argument("--log-dir", type=Path, default=None, help="member logs (default: temp dir)")
    p.add_argument("--seed", type=int, default=1, help="seed of the pre-signal jitter")
    p.add_argument("--json", type=Path, default=None, help="write all results here")
    p.add_argument(
        "--render", type=Path, default=None, help="only print the tables of a --json file"
    )
    args = p.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c not in CLIENTS and c not in CLIENTS_848:
            p.error(f"unknown client {c!r}")
    args.client_list = clients
    idle_clients = [c.strip() for c in args.idle_clients.split(",") if c.strip()]
    for c in idle_clients:
        if c not in ("kgroup", *IDLE_PEERS):
            p.error(f"unknown idle client {c!r}")
    args.idle_client_list = idle_clients
    scenarios = {x.strip() for x in args.scenarios.split(",") if x.strip()}
    if not scenarios <= {"churn", "idle", "rolling"}:
        p.error(f"unknown scenario(s) in --scenarios {args.scenarios!r}")
    args.skip_churn = args.skip_churn or "churn" not in scenarios
    args.skip_idle = args.skip_idle or "idle" not in scenarios
    args.skip_rolling = args.skip_rolling or "rolling" not in scenarios
    labels = [c.strip() for c in args.rolling_configs.split(",") if c.strip()]
    for label in labels:
        try:
            rolling_config(label)
        except ValueError as exc:
            p.error(str(exc))
    args.rolling_labels = labels
    if args.rolling_repeat is None:
        args.rolling_repeat = args.repeat
    if not 1 <= args.rolling_members < args.rolling_partitions:
        p.error("--rolling-members must be at least 1 and below --rolling-partitions")
    if not 1 <= args.members <= args.partitions:
        p.error("--members must be between 1 and --partitions (each member needs a partition)")
    if args.members < 2:
        p.error("--members must be at least 2 (a survivor must take over)")
    return args


def print_tables(results: dict[str, Any]) -> None:
    m = results["meta"]
    if results["churn"]:
        print(
            f"\nMembership on {m['broker']}: {m['members']} members, {m['partitions']} "
            f"partitions, session {m['session_ms']} ms, heartbeat {m['heartbeat_ms']} ms, "
            f"range; median of {m['repeat']} run(s) (join: {2 * m['repeat']} samples); "
            "(after learning): from the last survivor learning of the rebalance"
        )
        print(churn_table(results["churn"]))
    if results.get("rolling"):
        print(
            f"\nRolling restart on {m['broker']}: {m['rolling_members']} members on "
            f"{m['rolling_partitions']} partitions, scale-out to {m['rolling_members'] + 1}, "
            f"then each of the {m['rolling_members'] + 1} restarted in turn (SIGTERM, exit, "
            + ("the survivors cover, " if m.get("rolling_restart_gap") == "covered" else "")
            + f"a new process joins); session {m['session_ms']} ms, heartbeat {m['heartbeat_ms']} "
            f"ms; median of {m['rolling_repeat']} run(s). partition-s unavailable: summed over "
            "partitions and the scenario, split by step (scale-out / the 5 restarts) and by "
            "cause (the leavers' partitions / revoked from members that stayed); rebalances: "
            "generations in the broker's log; wall s: trigger → covered, summed over the 6 "
            "steps; elapsed s: first trigger → last covered, settling included"
        )
        print(rolling_table(results["rolling"]))
        print(rolling_targets(results["rolling"]))
    if results["idle"]:
        print(
            f"\nIdle members on {m['broker']}: one process per row, each member alone in its "
            f"own group, heartbeat {m['idle_heartbeat_ms']} ms, session "
            f"{m['idle_session_ms']} ms, window {m['idle_window_s']:.0f} s"
        )
        print(idle_table(results["idle"]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        for entry in saved.get("churn", {}).values():
            if "samples" in entry:
                entry["summary"] = summarize(entry["samples"])
        for entry in saved.get("rolling", {}).values():
            if "samples" in entry:
                entry["summary"] = summarize_rolling(entry["samples"])
        print_tables(saved)
        return 0
    install_interrupts()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="kgroup-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    results: dict[str, Any] = {
        "meta": {
            "broker": args.broker,
            "members": args.members,
            "partitions": args.partitions,
            "session_ms": args.session_ms,
            "heartbeat_ms": args.heartbeat_ms,
            "max_poll_ms": args.max_poll_ms,
            "repeat": args.repeat,
            "seed": args.seed,
            "idle_session_ms": args.idle_session_ms,
            "idle_heartbeat_ms": args.idle_heartbeat_ms,
            "idle_window_s": args.idle_window,
            "idle_poll_timeout": args.idle_poll_timeout,
            "rolling_members": args.rolling_members,
            "rolling_partitions": args.rolling_partitions,
            "rolling_repeat": args.rolling_repeat,
            "rolling_restart_gap": args.rolling_restart_gap,
            "idle_peer_pause": args.idle_peer_pause,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "log_dir": str(log_dir),
            **machine(),
        },
        "churn": {},
        "idle": [],
        "rolling": {},
    }
    broker = make_broker(args.broker)
    fleet: Fleet | None = None
    interrupted = False
    try:
        log(f"starting {args.broker} ...")
        broker.start()
        results["meta"]["bootstrap"] = broker.bootstrap
        if args.broker == "kafka":
            results["meta"]["kafka_version"] = getattr(broker, "version", None)
        fleet = Fleet(log_dir, broker.bootstrap)
        wants_java = (
            any(split_label(c)[0] == "java" for c in args.client_list) and not args.skip_churn
        ) or (
            not args.skip_rolling
            and any(
                split_label(rolling_config(label)[0])[0] == "java" for label in args.rolling_labels
            )
        )
        if wants_java:
            if (("java", args.broker) not in KNOWN_INCOMPATIBLE) or args.try_incompatible:
                from kgroup.testing._java import java_member_command

                log("preparing the Java member (jars, javac) ...")
                java_member_command(["--help"])  # fetch + compile once, outside any timing
        settings = Settings(
            broker=args.broker,
            members=args.members,
            partitions=args.partitions,
            session_ms=args.session_ms,
            heartbeat_ms=args.heartbeat_ms,
            max_poll_ms=args.max_poll_ms,
            deadline=args.deadline,
            settle=args.settle,
            log_level=args.log_level,
            seed=args.seed,
        )
        if not args.skip_churn:
            bench = ChurnBench(fleet, broker, settings, log)
            for client in args.client_list:
                reason = KNOWN_INCOMPATIBLE.get((split_label(client)[0], args.broker))
                reason = unavailable_848(client, args.broker) or reason
                if reason and not args.try_incompatible:
                    log(f"{client}: skipped on {args.broker}: {reason}")
                    results["churn"][client] = {"skipped": reason}
                    continue
                log(f"{client}: scenarios 1-3 x{args.repeat}")
                samples: list[dict[str, Any]] = []
                for rep in range(args.repeat):
                    try:
                        samples.append(bench.run(client, rep))
                    except BenchmarkError as exc:
                        log(f"  {client} r{rep}: FAILED: {exc}")
                        samples.append({"repeat": rep, "error": str(exc)})
                        if not any("error" not in x for x in samples):
                            break  # it never joined: it will not in the next round either
                results["churn"][client] = {"samples": samples, "summary": summarize(samples)}
        if not args.skip_idle:
            plan: list[tuple[str, int]] = []
            for client in args.idle_client_list:
                if client == "kgroup":
                    if args.idle_members:
                        plan.append(("kgroup", args.idle_members))
                    if args.idle_peer_members and args.idle_peer_members != args.idle_members:
                        plan.append(("kgroup", args.idle_peer_members))
                elif args.idle_peer_members:
                    plan.append((client, args.idle_peer_members))
            for client, n in plan:
                log(f"idle: {n} {client} members in one process ...")
                r = run_idle(fleet, broker, client, n, args, log)
                r["paused"] = bool(args.idle_peer_pause and client != "kgroup")
                results["idle"].append(r)
                log(
                    f"  {client} x{n}: cpu {fmt(r.get('cpu_pct_of_core'), 1)}% of a core, "
                    f"lag p99 {fmt(r.get('lag_p99_ms'), 1)} ms, stable {fmt(r.get('all_stable'))}"
                    + ("" if r.get("ok") else f" FAILED: {r.get('reason')}")
                )
        if not args.skip_rolling and args.rolling_labels:
            log(
                f"rolling restart: {len(args.rolling_labels)} configuration(s) "
                f"x{args.rolling_repeat} ..."
            )
            run_rolling(
                fleet,
                broker,
                replace(
                    settings,
                    members=args.rolling_members,
                    partitions=args.rolling_partitions,
                ),
                args.rolling_labels,
                args.rolling_repeat,
                log,
                results["rolling"],
                try_incompatible=args.try_incompatible,
                restart_gap=args.rolling_restart_gap,
            )
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping everything ...")
    finally:
        if fleet is not None:
            fleet.stop_all()
        broker.close()

    results["meta"]["loadavg_end"] = list(os.getloadavg())
    print_tables(results)
    print(f"\nmember logs: {log_dir}")
    write_json(args.json, results)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
