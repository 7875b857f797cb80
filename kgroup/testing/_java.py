"""A group member run by Kafka's own Java client, for interop tests.

:class:`JavaMember` starts ``kgroup/testing/java/JavaMember.java`` (a KafkaConsumer in a
poll loop) as a child process with the jars :func:`~kgroup.testing._kafka.kafka_libs`
fetched for :class:`~kgroup.testing.KafkaBroker`, reads the JSON events it prints (one per
line: ``started``, ``assigned``, ``revoked``, ``lost``, ``status``, ``committed``,
``error``, ``closed``; each with ``t``, ``System.nanoTime()`` in seconds, which on Linux is
the clock of :func:`time.monotonic`) and exposes them to async tests::

    async with JavaMember(broker.bootstrap, group, topic) as member:
        await member.wait_for(lambda e: e["event"] == "assigned")
        assert member.assignment == {(topic, p) for p in range(6)}

The program is compiled once with ``javac`` into the jar cache (keyed by a hash of its
source); without ``javac`` it runs in Java's single-file source mode instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ._javac import HELPER_JVM_OPTIONS, java_program_command
from ._kafka import KAFKA_VERSION
from ._ports import (
    kill_with_parent_prefix,
    log_tail,
    owned_temp_dir,
    register_child,
    unregister_child,
)

__all__ = ["JAVA_MEMBER_SOURCE", "JavaMember", "JavaMemberError", "java_member_command"]

#: The Java source of the member program.
JAVA_MEMBER_SOURCE = Path(__file__).resolve().parent / "java" / "JavaMember.java"

Event = dict[str, Any]
TopicPartition = tuple[str, int]


class JavaMemberError(RuntimeError):
    """The Java member failed, exited early, or an awaited event did not come in time."""


def java_member_command(args: Sequence[str], *, version: str = KAFKA_VERSION) -> list[str]:
    """The argv that runs JavaMember with ``args`` (fetches jars / compiles if needed)."""
    return java_program_command(
        JAVA_MEMBER_SOURCE,
        args,
        cache_name="java-member",
        jvm_options=(
            *HELPER_JVM_OPTIONS,
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ),
        version=version,
        error=JavaMemberError,
    )


class JavaMember:
    """One Java KafkaConsumer in a group, reporting its rebalance events.

    Classic protocol with the RangeAssignor by default; ``protocol="consumer"`` uses
    KIP-848 (then the session, heartbeat and assignor settings are the broker's).
    ``properties`` are extra consumer configs. ``log_level`` is the Java client's slf4j
    level (its log goes to :attr:`log_path`).
    """

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: str | Sequence[str],
        *,
        protocol: str = "classic",
        assignor: str = "range",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 1_000,
        max_poll_interval_ms: int = 300_000,
        group_instance_id: str | None = None,
        client_id: str | None = None,
        poll_ms: int = 100,
        properties: Mapping[str, str] | None = None,
        log_level: str = "info",
        log_path: Path | None = None,
        version: str = KAFKA_VERSION,
    ) -> None:
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        args = [
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--topic",
            ",".join(topic_list),
            "--protocol",
            protocol,
            "--assignor",
            assignor,
            "--session-timeout-ms",
            str(session_timeout_ms),
            "--heartbeat-interval-ms",
            str(heartbeat_interval_ms),
            "--max-poll-interval-ms",
            str(max_poll_interval_ms),
            "--poll-ms",
            str(poll_ms),
        ]
        if group_instance_id is not None:
            args += ["--group-instance-id", group_instance_id]
        if client_id is not None:
            args += ["--client-id", client_id]
        for key, value in (properties or {}).items():
            args += ["--property", f"{key}={value}"]
        self.args = args
        self.group = group
        self.topics = topic_list
        self.version = version
        self.log_level = log_level
        if log_path is None:
            tmp, _ = owned_temp_dir(self, "kgroup-java-member-")
            log_path = tmp / "member.log"
        #: The Java program's stderr (the client's log) and the command line.
        self.log_path = log_path
        #: Every event received so far, in order.
        self.events: list[Event] = []
        #: When each of :attr:`events` arrived (``time.monotonic()``), for ownership logs.
        self.received: list[float] = []
        #: The member's current assignment as (topic, partition) pairs.
        self.assignment: frozenset[TopicPartition] = frozenset()
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed: asyncio.Condition | None = None
        self._eof = False
        self.returncode: int | None = None

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return None if self._proc is None else self._proc.pid

    async def start(self, timeout: float = 120.0) -> JavaMember:
        """Start the JVM and wait for its ``started`` event."""
        if self._proc is not None:
            raise RuntimeError("JavaMember already started")
        loop = asyncio.get_running_loop()
        argv = await loop.run_in_executor(
            None, lambda: java_member_command(self.args, version=self.version)
        )
        argv.insert(1, f"-Dorg.slf4j.simpleLogger.defaultLogLevel={self.log_level}")
        self._changed = asyncio.Condition()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} start: {argv}\n".encode())
            log.flush()
            self._proc = await asyncio.create_subprocess_exec(
                *kill_with_parent_prefix(),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        register_child(self._proc.pid)
        self._reader = asyncio.create_task(self._read_events(), name="java-member-reader")
        try:
            await self.wait_for(lambda e: e["event"] == "started", timeout=timeout)
        except BaseException:
            await self.close(timeout=5.0)
            raise
        return self

    async def _read_events(self) -> None:
        proc, changed = self._proc, self._changed
        assert proc is not None and proc.stdout is not None and changed is not None
        try:
            async for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    event = {"event": "output", "line": line}
                if not isinstance(event, dict):
                    event = {"event": "output", "line": line}
                self._apply(event)
                self.received.append(time.monotonic())
                async with changed:
                    self.events.append(event)
                    changed.notify_all()
        finally:
            self.returncode = await proc.wait()
            unregister_child(proc.pid)
            self._eof = True
            async with changed:
                changed.notify_all()

    def _apply(self, event: Event) -> None:
        # Track the assignment from the callbacks' deltas: inside onPartitionsRevoked the
        # consumer still reports the partitions being revoked as assigned.
        kind = event.get("event")
        partitions = frozenset((str(t), int(p)) for t, p in event.get("partitions", ()))
        if kind == "assigned":
            self.assignment = self.assignment | partitions
        elif kind in ("revoked", "lost"):
            self.assignment = self.assignment - partitions
        elif kind == "closed":
            self.assignment = frozenset()

    async def close(self, timeout: float = 30.0) -> int | None:
        """Graceful close: the consumer leaves the group, the JVM exits. Returns its code.

        Falls back to SIGTERM and then SIGKILL if the program does not exit in time.
        Safe to call more than once, and after :meth:`kill`.
        """
        proc = self._proc
        if proc is None:
            return self.returncode
        try:
            if proc.returncode is None and proc.stdin is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    proc.stdin.write(b"close\n")
                    await proc.stdin.drain()
            if not await self._wait_exit(timeout):
                self._signal(signal.SIGTERM)
                if not await self._wait_exit(10.0):
                    self._signal(signal.SIGKILL)
                    await self._wait_exit(None)
        finally:
            if proc.returncode is None:  # cancelled mid-close: leave nothing running
                self._signal(signal.SIGKILL)
            if proc.stdin is not None:
                proc.stdin.close()
            if self._reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self._reader)
        return self.returncode

    async def _wait_exit(self, limit: float | None) -> bool:
        reader = self._reader
        if reader is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(reader), limit)
        except TimeoutError:
            return False
        return True

    def _signal(self, sig: int) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the JVM: a crash, no LeaveGroup. Await :meth:`close` afterwards to reap."""
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM the JVM: it closes the consumer gracefully, then exits 0."""
        self._signal(signal.SIGTERM)

    async def __aenter__(self) -> JavaMember:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- commands and events ---------------------------------------------------------------

    async def commit(self, timeout: float = 30.0) -> Event:
        """commitSync the current positions; returns the ``committed`` event."""
        mark = len(self.events)
        await self._send("commit")
        return await self.wait_for(
            lambda e: e["event"] in ("committed", "error"), timeout=timeout, since=mark
        )

    async def _send(self, command: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise JavaMemberError("JavaMember is not running")
        proc.stdin.write(command.encode() + b"\n")
        await proc.stdin.drain()

    def mark(self) -> int:
        """The current event count: pass it as ``since`` to wait only for later events."""
        return len(self.events)

    async def wait_for(
        self,
        predicate: Callable[[Event], bool],
        timeout: float = 60.0,
        *,
        since: int = 0,
    ) -> Event:
        """The first event from index ``since`` on that satisfies ``predicate``.

        Returns at once if such an event already arrived. Raises :class:`JavaMemberError`
        if the program exits or ``timeout`` passes first (with the log tail).
        """
        changed = self._changed
        if changed is None:
            raise RuntimeError("JavaMember not started")
        index = since
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with changed:
            while True:
                while index < len(self.events):
                    event = self.events[index]
                    index += 1
                    if predicate(event):
                        return event
                if self._eof:
                    raise JavaMemberError(
                        f"JavaMember exited ({self.returncode}) before the awaited event; "
                        f"events {self.events[since:]}; log:\n{log_tail(self.log_path)}"
                    )
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise JavaMemberError(
                        f"no matching JavaMember event within {timeout:.0f}s; "
                        f"events {self.events[since:]}; log:\n{log_tail(self.log_path)}"
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)

    async def wait_for_assignment(
        self,
        expected: set[TopicPartition]
        | frozenset[TopicPartition]
        | Callable[[frozenset[TopicPartition]], bool],
        timeout: float = 60.0,
    ) -> frozenset[TopicPartition]:
        """Wait until :attr:`assignment` equals ``expected`` (or satisfies it, if callable)."""

        def ok(assignment: frozenset[TopicPartition]) -> bool:
            if callable(expected):
                return expected(assignment)
            return assignment == frozenset(expected)

        if ok(self.assignment):
            return self.assignment
        # _apply() runs before an event is appended, so the predicate sees the new state.
        await self.wait_for(lambda e: ok(self.assignment), timeout=timeout, since=self.mark())
        return self.assignment

    def __repr__(self) -> str:
        return (
            f"<JavaMember group={self.group!r} pid={self.pid} assignment={sorted(self.assignment)}>"
        )
