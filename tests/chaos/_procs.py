"""A chaos run's member processes and its result: :class:`MemberProc` (one incarnation of a
member slot and what it reported), :class:`RunResult` (what the schedule did and every
invariant it broke) and :func:`spawn_process`."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._schedule import MemberSpec, Schedule

__all__ = ["MemberProc", "RunResult", "spawn_process"]


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


async def spawn_process(
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
