"""Run group members of one client library in this process; report events as JSON lines.

Used by ``benchmarks/membership.py``; it can also be run by hand::

    python benchmarks/_member_proc.py --client kgroup --bootstrap 127.0.0.1:9092 \\
        --group g --topic t

Two modes:

**One member** (default). Prints one JSON object per line on stdout, each with ``t``
(``time.time()`` when it happened) and ``event``:

- ``ready``: imports done, the client is about to be created and subscribed;
- ``assigned`` / ``revoked`` / ``lost``: an assignment change reported by the client's
  rebalance callback; ``partitions`` is the member's whole assignment after the change
  (partition numbers of the one topic), ``delta`` the partitions of that callback;
- ``closing`` (SIGTERM or SIGINT seen: the client is being closed, which sends
  LeaveGroup), ``closed`` (the client's close returned), ``error`` (``message``).

SIGTERM closes the client cleanly and exits 0; SIGKILL simply kills it (no LeaveGroup).
Logs (kgroup's structlog, librdkafka, the Java client) go to stderr.

**Idle** (``--idle N``, clients kgroup, aiokafka, confluent-aio): N members in this one
process and event loop, each alone in its own group (``GROUP-0`` .. ``GROUP-{N-1}``), all
subscribed to the same topic. Once every member holds an assignment it waits
``--settle`` seconds, then measures for ``--window`` seconds: process CPU time
(``time.process_time()``, all threads), the event loop's lag (a task sleeping 10 ms and
recording actual minus expected), and assignment changes. Prints ``progress`` lines while
joining, ``window_start`` when measuring begins and one ``result`` line at the end.

Clients: ``kgroup``, ``aiokafka``, ``confluent`` (``confluent_kafka.Consumer``),
``confluent-aio`` (``confluent_kafka.aio.AIOConsumer``), ``kafka-python`` and ``java``
(Kafka's own KafkaConsumer, the ``kgroup/testing/java/JavaMember.java`` program run as a
child of this process, its events re-stamped on arrival). All use the classic protocol,
the range assignor, no auto-commit and the same session, heartbeat and max-poll settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

CLIENTS = ("kgroup", "aiokafka", "confluent", "confluent-aio", "kafka-python", "java")
IDLE_CLIENTS = ("kgroup", "aiokafka", "confluent-aio")

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, stamped with ``time.time()``."""
    record = {"t": time.time(), "event": event, **fields}
    line = json.dumps(record, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Tracker:
    """The member's current assignment (partition numbers), updated by rebalance callbacks."""

    def __init__(self) -> None:
        self.owned: frozenset[int] = frozenset()
        self.changes = 0

    def _report(self, event: str, delta: Iterable[int]) -> None:
        self.changes += 1
        emit(event, partitions=sorted(self.owned), delta=sorted(delta))

    def assigned(self, parts: Iterable[int], *, full: bool) -> None:
        """``full``: the callback gives the whole new assignment (eager clients), else the
        partitions added to it (kgroup's contract)."""
        delta = frozenset(parts)
        self.owned = delta if full else self.owned | delta
        self._report("assigned", delta)

    def revoked(self, parts: Iterable[int], event: str = "revoked") -> None:
        delta = frozenset(parts)
        self.owned = self.owned - delta
        self._report(event, delta)


def configure_logging(level: str) -> None:
    """Logs to stderr at ``level`` (kgroup logs through structlog, which prints to stdout
    and at every level unless configured: stdout carries our JSON lines)."""
    numeric = getattr(logging, level.upper())
    logging.basicConfig(
        stream=sys.stderr,
        level=numeric,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import structlog
    except ImportError:
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f"),
            structlog.processors.KeyValueRenderer(
                key_order=["timestamp", "level", "event"], drop_missing=True
            ),
        ],
    )


def install_cancel_on_signals(task: asyncio.Task[Any]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)


class StopFlag:
    """SIGTERM / SIGINT set a flag that a synchronous poll loop checks."""

    def __init__(self) -> None:
        self.stop = False
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        self.stop = True


# --- one member per process -----------------------------------------------------------------


async def run_kgroup(a: argparse.Namespace) -> None:
    from kgroup import GroupConfig, GroupMember

    tracker = Tracker()

    class Listener:
        def on_partitions_assigned(self, parts: frozenset[Any]) -> None:
            tracker.assigned((tp.partition for tp in parts), full=False)

        def on_partitions_revoked(self, parts: frozenset[Any]) -> None:
            tracker.revoked(tp.partition for tp in parts)

        def on_partitions_lost(self, parts: frozenset[Any]) -> None:
            tracker.revoked((tp.partition for tp in parts), "lost")

    config = GroupConfig(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        topics=[a.topic],
        assignors=("range",),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        client_id=a.name,
    )

    async def body() -> None:
        emit("ready")
        member = GroupMember(config, listener=Listener())
        async with member:
            try:
                while True:
                    assignment = await member.poll(timeout=1.0)
                    mine = frozenset(tp.partition for tp in assignment)
                    if mine != tracker.owned:
                        # poll()'s return value disagrees with the callbacks: worth a look.
                        emit("mismatch", poll=sorted(mine), callbacks=sorted(tracker.owned))
            except asyncio.CancelledError:
                emit("closing")
                # leaving the async-with closes the member: revoke, then LeaveGroup.

    task = asyncio.current_task()
    assert task is not None
    install_cancel_on_signals(task)
    with contextlib.suppress(asyncio.CancelledError):
        await body()
    emit("closed")


async def run_aiokafka(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    tracker = Tracker()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            tracker.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            tracker.assigned((tp.partition for tp in assigned), full=True)

    task = asyncio.current_task()
    assert task is not None
    install_cancel_on_signals(task)
    emit("ready")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        client_id=a.name,
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        await consumer.start()
        consumer.subscribe([a.topic], listener=Listener())
        while True:
            await consumer.getmany(timeout_ms=1000)
    except asyncio.CancelledError:
        emit("closing")
    finally:
        # stop() revokes and sends LeaveGroup (aiokafka skips it at generation 0 and below).
        await consumer.stop()
    emit("closed")


def confluent_config(a: argparse.Namespace) -> dict[str, Any]:
    return {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "client.id": a.name,
        "partition.assignment.strategy": "range",
        "session.timeout.ms": a.session_ms,
        "heartbeat.interval.ms": a.heartbeat_ms,
        "max.poll.interval.ms": a.max_poll_ms,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }


def run_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    flag = StopFlag()
    tracker = Tracker()
    emit("ready")
    consumer = Consumer(confluent_config(a))

    def on_assign(c: Any, parts: list[Any]) -> None:
        tracker.assigned((tp.partition for tp in parts), full=True)

    def on_revoke(c: Any, parts: list[Any]) -> None:
        tracker.revoked(tp.partition for tp in parts)

    def on_lost(c: Any, parts: list[Any]) -> None:
        tracker.revoked((tp.partition for tp in parts), "lost")

    consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        while not flag.stop:
            consumer.poll(0.1)
        emit("closing")
    finally:
        consumer.close()  # revoke callback, then LeaveGroup
    emit("closed")


async def run_confluent_aio(a: argparse.Namespace) -> None:
    from confluent_kafka.aio import AIOConsumer

    tracker = Tracker()

    async def on_assign(c: Any, parts: list[Any]) -> None:
        tracker.assigned((tp.partition for tp in parts), full=True)

    async def on_revoke(c: Any, parts: list[Any]) -> None:
        tracker.revoked(tp.partition for tp in parts)

    async def on_lost(c: Any, parts: list[Any]) -> None:
        tracker.revoked((tp.partition for tp in parts), "lost")

    task = asyncio.current_task()
    assert task is not None
    install_cancel_on_signals(task)
    emit("ready")
    consumer = AIOConsumer(confluent_config(a))
    try:
        await consumer.subscribe(
            [a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )
        while True:
            await consumer.poll(0.1)
    except asyncio.CancelledError:
        emit("closing")
    finally:
        await consumer.close()
    emit("closed")


def run_kafka_python(a: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    flag = StopFlag()
    tracker = Tracker()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            tracker.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            tracker.assigned((tp.partition for tp in assigned), full=True)

    emit("ready")
    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        client_id=a.name,
        partition_assignment_strategy=[RangePartitionAssignor],
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.subscribe([a.topic], listener=Listener())
    try:
        while not flag.stop:
            consumer.poll(timeout_ms=100)
        emit("closing")
    finally:
        consumer.close()  # revoke callback, then LeaveGroup
    emit("closed")


def run_java(a: argparse.Namespace) -> int:
    """Kafka's KafkaConsumer (JavaMember.java) as our child, in our process group."""
    from kgroup.testing._java import java_member_command
    from kgroup.testing._ports import kill_with_parent_prefix

    argv = java_member_command(
        [
            "--bootstrap",
            a.bootstrap,
            "--group",
            a.group,
            "--topic",
            a.topic,
            "--protocol",
            "classic",
            "--assignor",
            "range",
            "--session-timeout-ms",
            str(a.session_ms),
            "--heartbeat-interval-ms",
            str(a.heartbeat_ms),
            "--max-poll-interval-ms",
            str(a.max_poll_ms),
            "--client-id",
            a.name,
            "--poll-ms",
            "100",
        ]
    )
    emit("ready")
    # stdin stays open: JavaMember closes on end of input. stderr (the client's log) is ours.
    proc = subprocess.Popen(
        [*kill_with_parent_prefix(), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )

    def forward(signum: int, frame: object) -> None:
        # JavaMember's shutdown hook closes the consumer (LeaveGroup) and exits 0.
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    tracker = Tracker()
    assert proc.stdout is not None
    for raw in proc.stdout:
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue
        kind = event.get("event")
        parts = [int(p) for _, p in event.get("partitions", ())]
        if kind == "assigned":
            # Inside onPartitionsAssigned, consumer.assignment() is the whole new assignment.
            whole = [int(p) for _, p in event.get("assignment", ())] or parts
            tracker.assigned(whole, full=True)
        elif kind in ("revoked", "lost"):
            tracker.revoked(parts, kind)
        elif kind == "error":
            emit("error", message=event.get("message"))
        elif kind == "closed":
            emit("closed")
    return proc.wait()


# --- idle members: many in one process -------------------------------------------------------


def _proc_status(key: str) -> int | None:
    """A number from /proc/self/status (``VmRSS`` in kB, ``Threads``: OS threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _rss_mb() -> float | None:
    kb = _proc_status("VmRSS")
    return None if kb is None else kb / 1024.0


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


class IdleMember:
    """One idle member: its task, its tracked assignment and (kgroup) its GroupMember."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tracker = Tracker()
        self.handle: Any = None
        self.task: asyncio.Task[None] | None = None
        self.error: str | None = None

    def assigned(self, parts: Iterable[int], *, full: bool) -> None:
        delta = frozenset(parts)
        self.tracker.owned = delta if full else self.tracker.owned | delta
        self.tracker.changes += 1

    def revoked(self, parts: Iterable[int]) -> None:
        self.tracker.owned = self.tracker.owned - frozenset(parts)
        self.tracker.changes += 1


async def idle_kgroup(a: argparse.Namespace, m: IdleMember) -> None:
    from kgroup import GroupConfig, GroupMember

    class Listener:
        def on_partitions_assigned(self, parts: frozenset[Any]) -> None:
            m.assigned((tp.partition for tp in parts), full=False)

        def on_partitions_revoked(self, parts: frozenset[Any]) -> None:
            m.revoked(tp.partition for tp in parts)

        def on_partitions_lost(self, parts: frozenset[Any]) -> None:
            m.revoked(tp.partition for tp in parts)

    config = GroupConfig(
        bootstrap_servers=a.bootstrap,
        group_id=f"{a.group}-{m.index}",
        topics=[a.topic],
        assignors=("range",),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        client_id=f"{a.name}-{m.index}",
    )
    async with GroupMember(config, listener=Listener()) as member:
        m.handle = member
        while True:
            await member.poll(timeout=a.idle_poll_timeout)


async def idle_aiokafka(a: argparse.Namespace, m: IdleMember) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    consumer = AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=f"{a.group}-{m.index}",
        client_id=f"{a.name}-{m.index}",
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        enable_auto_commit=False,
        auto_offset_reset="latest",
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            m.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            if a.pause:
                consumer.pause(*assigned)
            m.assigned((tp.partition for tp in assigned), full=True)

    m.handle = consumer
    try:
        await consumer.start()
        consumer.subscribe([a.topic], listener=Listener())
        while True:
            await consumer.getmany(timeout_ms=int((a.idle_poll_timeout or 60.0) * 1000))
    finally:
        await consumer.stop()


async def idle_confluent_aio(a: argparse.Namespace, m: IdleMember) -> None:
    from confluent_kafka.aio import AIOConsumer

    conf = confluent_config(a)
    conf["group.id"] = f"{a.group}-{m.index}"
    conf["client.id"] = f"{a.name}-{m.index}"
    conf["auto.offset.reset"] = "latest"

    async def on_assign(c: Any, parts: list[Any]) -> None:
        if a.pause:
            await c.assign(parts)
            await c.pause(parts)
        m.assigned((tp.partition for tp in parts), full=True)

    async def on_revoke(c: Any, parts: list[Any]) -> None:
        m.revoked(tp.partition for tp in parts)

    consumer = AIOConsumer(conf)
    m.handle = consumer
    try:
        await consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke)
        while True:
            # librdkafka heartbeats on its own threads; poll() serves the callbacks and
            # max.poll.interval.ms. Each poll holds one executor thread for up to 1 s.
            await consumer.poll(min(1.0, a.idle_poll_timeout or 1.0))
    finally:
        await consumer.close()


IDLE_RUNNERS = {
    "kgroup": idle_kgroup,
    "aiokafka": idle_aiokafka,
    "confluent-aio": idle_confluent_aio,
}


async def run_idle(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    install_cancel_on_signals(main)
    runner = IDLE_RUNNERS[a.client]
    members = [IdleMember(i) for i in range(a.idle)]
    lags: list[float] = []
    recording = False

    async def lag_monitor() -> None:
        while True:
            start = loop.time()
            await asyncio.sleep(0.01)
            if recording:
                lags.append(loop.time() - start - 0.01)

    async def guarded(m: IdleMember) -> None:
        try:
            await runner(a, m)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            m.error = repr(exc)
            raise

    emit("ready", members=a.idle)
    t_start = time.time()
    monitor = asyncio.create_task(lag_monitor(), name="lag-monitor")
    for m in members:
        m.task = asyncio.create_task(guarded(m), name=f"member-{m.index}")
    try:
        deadline = time.monotonic() + a.join_deadline
        next_report = 0.0
        while True:
            stable = sum(1 for m in members if m.tracker.owned)
            failed = [m for m in members if m.task is not None and m.task.done()]
            now = time.monotonic()
            if stable == len(members) or failed or now >= deadline:
                break
            if now >= next_report:
                emit("progress", stable=stable, of=len(members))
                next_report = now + 2.0
            await asyncio.sleep(0.1)
        joined_s = time.time() - t_start
        if failed or stable < len(members):
            errors = [m.error for m in failed if m.error][:5]
            emit(
                "result",
                ok=False,
                reason="members failed" if failed else "not all stable before the deadline",
                stable=stable,
                members=len(members),
                join_s=joined_s,
                errors=errors,
            )
            return
        emit("progress", stable=stable, of=len(members))
        await asyncio.sleep(a.settle)
        changes0 = sum(m.tracker.changes for m in members)
        rebalances0 = _kgroup_rebalances(members)
        emit("window_start")
        recording = True
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(a.window)
        cpu1, wall1 = time.process_time(), time.monotonic()
        recording = False
        changes1 = sum(m.tracker.changes for m in members)
        rebalances1 = _kgroup_rebalances(members)
        n = len(members)
        cpu_s, wall_s = cpu1 - cpu0, wall1 - wall0
        all_stable = (
            changes1 == changes0
            and all(m.tracker.owned for m in members)
            and not any(m.task is not None and m.task.done() for m in members)
        )
        result: dict[str, Any] = {
            "ok": True,
            "members": n,
            "join_s": joined_s,
            "window_s": wall_s,
            "cpu_s": cpu_s,
            "cpu_pct_of_core": 100.0 * cpu_s / wall_s,
            "cpu_ms_per_member_minute": 1000.0 * cpu_s / n / (wall_s / 60.0),
            "lag_samples": len(lags),
            "lag_p50_ms": _ms(_percentile(lags, 0.50)),
            "lag_p99_ms": _ms(_percentile(lags, 0.99)),
            "lag_max_ms": _ms(max(lags) if lags else None),
            "assignment_changes_in_window": changes1 - changes0,
            "all_stable": all_stable,
            "rss_mb": _rss_mb(),
            "threads": _proc_status("Threads") or threading.active_count(),
        }
        if rebalances0 is not None and rebalances1 is not None:
            result["kgroup_rebalances_in_window"] = rebalances1 - rebalances0
            ages = [
                m.handle.stats().get("last_heartbeat_age_ms")
                for m in members
                if m.handle is not None
            ]
            ages = [x for x in ages if x is not None]
            result["kgroup_max_heartbeat_age_ms"] = max(ages) if ages else None
        emit("result", **result)
    except asyncio.CancelledError:
        emit("closing")
    finally:
        monitor.cancel()
        close_start = time.monotonic()
        tasks = [m.task for m in members if m.task is not None]
        for task in tasks:
            task.cancel()
        done, pending = await asyncio.wait(tasks, timeout=a.close_deadline) if tasks else ((), ())
        emit(
            "closed",
            close_s=time.monotonic() - close_start,
            closed=len(done),
            not_closed=len(pending),
        )


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _kgroup_rebalances(members: list[IdleMember]) -> int | None:
    total = 0
    for m in members:
        stats = getattr(m.handle, "stats", None)
        if stats is None:
            return None
        total += int(stats().get("rebalances", 0))
    return total


# --- entry point -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--client", choices=CLIENTS, required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", default="bench")
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--max-poll-ms", type=int, default=300_000)
    p.add_argument("--log-level", default="info")
    p.add_argument("--idle", type=int, default=0, help="run N idle members in this process")
    p.add_argument("--window", type=float, default=30.0, help="idle: measuring window, s")
    p.add_argument("--settle", type=float, default=3.0, help="idle: wait after all stable, s")
    p.add_argument("--join-deadline", type=float, default=180.0, help="idle: join deadline, s")
    p.add_argument("--close-deadline", type=float, default=60.0, help="idle: close deadline, s")
    p.add_argument(
        "--idle-poll-timeout",
        type=float,
        default=None,
        help="idle kgroup: poll(timeout=...) (default None: long-poll without limit)",
    )
    p.add_argument("--pause", action="store_true", help="idle peers: pause assigned partitions")
    args = p.parse_args(argv)
    if args.idle and args.client not in IDLE_CLIENTS:
        p.error(f"--idle supports {', '.join(IDLE_CLIENTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    configure_logging(a.log_level)
    try:
        if a.idle:
            asyncio.run(run_idle(a))
        elif a.client == "kgroup":
            asyncio.run(run_kgroup(a))
        elif a.client == "aiokafka":
            asyncio.run(run_aiokafka(a))
        elif a.client == "confluent":
            run_confluent(a)
        elif a.client == "confluent-aio":
            asyncio.run(run_confluent_aio(a))
        elif a.client == "kafka-python":
            run_kafka_python(a)
        else:
            return run_java(a)
    except Exception as exc:
        emit("error", message=repr(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
