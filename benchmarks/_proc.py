"""The benchmark child process: one client library, one scenario; reports JSON lines.

    python benchmarks/_proc.py member --client kgroup --bootstrap 127.0.0.1:9092 \\
        --group g --topic t
    python benchmarks/_proc.py idle --client aiokafka --idle 300 ... --window 30
    python benchmarks/_proc.py throughput --client kgroup ... --records 500000
    python benchmarks/_proc.py heartbeat --client kgroup-isolated ... --slices 0,10,50,200

Every line on stdout is one JSON object with ``t`` (``time.time()`` when it happened) and
``event``; logs (kgroup's structlog, librdkafka, the Java client) go to stderr. An uncaught
failure is an ``error`` line (``message``). The arguments every subcommand takes (client,
bootstrap, group, topic, client id, session / heartbeat / max-poll, log level) and the way
each client is built (classic protocol, range assignor unless told, no auto-commit, the same
timings; ``--group-protocol consumer``: KIP-848 for kgroup, confluent and java, where the
broker assigns and owns the session and interval) live in ``_bench.py``.

**member** (``membership.py``, ``heartbeat.py``'s watcher, ``reaction.py``): one member.
``--kgroup-api consumer`` makes the kgroup one a ``GroupConsumer`` (``getmany`` loop).
``--assignor range|cooperative-sticky`` (range by default; aiokafka has only range and
fails with an ``error`` line otherwise); ``--handoff``: kgroup closes with the handoff.
``ready`` (imports done, the client is about to be created), then from the rebalance
callbacks: ``revoking`` first thing in a revoke or lost callback (``delta``: the
partitions being taken away, ``partitions``: still all held, ``callback``: ``revoked`` /
``lost``), then ``revoked`` / ``lost`` at its end, and
``assigned`` at the end of an assign callback (``partitions``: the whole assignment after
the change, ``delta``: the callback's partitions; cooperative callbacks give only what is
added / taken away). ``mismatch`` when a client's own view of its assignment disagrees with
the callbacks. ``closing`` on SIGTERM / SIGINT (the client is closed: revoke, LeaveGroup),
``closed``. SIGKILL simply kills it. Clients:
``kgroup`` (``GroupMember``), ``aiokafka``, ``confluent`` (``Consumer``), ``confluent-aio``
(``aio.AIOConsumer``), ``kafka-python``, ``java`` (Kafka's KafkaConsumer, the
``kgroup/testing/java/JavaMember.java`` program as a child, its events re-stamped here).

**idle** (``membership.py``, ``consumer.py``): ``--idle N`` members in this one process and
event loop, each alone in its own group (``GROUP-0`` ..), all on the same topic. Once all
hold an assignment, it waits ``--settle`` s and measures ``--window`` s: process CPU, the
loop's lag (a task sleeping 10 ms), assignment changes. ``progress`` lines while joining,
``window_start``, one ``result``. ``--kgroup-api consumer`` puts ``GroupConsumer`` in the
kgroup slot; ``--pause`` makes aiokafka / confluent-aio pause what they are assigned.

**throughput** (``consumer.py``): one consumer in a fresh group reads from the earliest
offset until it has ``--records`` records (batches of ``--max-records``); one ``result``
line with the first / last batch times, CPU between them, records and last offset per
partition. ``--gc-freeze``, ``--profile PATH`` (cProfile).

**heartbeat** (``heartbeat.py``'s subject): joins, reports its assignment, waits for ``go``
on stdin; then per slice length S in ``--slices`` (ms), for ``--phase-s`` s, spins the CPU
S x uniform(1 ± ``--slice-jitter``) ms, makes one non-blocking poll and one
``asyncio.sleep(0)``, back to back (S = 0: idle in the client's poll, 100 ms at a time);
``phase`` / ``phase_end`` frame each. Then ``time.sleep(--block-s)`` (``block_start``,
``block_end``), ``--observe-s`` s of idling, ``observed`` (with kgroup's stats), and idles
until SIGTERM. Clients ``kgroup`` (``--kgroup-api consumer|member``), ``kgroup-isolated``
(``isolate_heartbeat=True``), ``aiokafka``, ``confluent-aio``.

**relay** (``reaction.py``): ``_bench.Relay`` in a process of its own, driven over stdin
(``_bench.RelayProcess``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench as b

MEMBER_CLIENTS = (
    "kgroup",
    "aiokafka",
    "confluent",
    "confluent-aio",
    "kafka-python",
    "java",
    "floor",
)
IDLE_CLIENTS = ("kgroup", "aiokafka", "confluent-aio")
THROUGHPUT_CLIENTS = ("kgroup", "aiokafka", "confluent-aio")
HEARTBEAT_CLIENTS = ("kgroup", "kgroup-isolated", "aiokafka", "confluent-aio")


def current_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None
    return task


# --- member: one per process ------------------------------------------------------------------


async def member_kgroup(a: argparse.Namespace) -> None:
    import kgroup
    from kgroup import GroupMember

    tracker = b.Tracker()
    b.install_cancel_on_signals(current_task())
    b.emit("ready", kgroup=os.path.dirname(kgroup.__file__))
    config, listener = b.kgroup_config(a), b.kgroup_listener(tracker)
    consumer = a.kgroup_api == "consumer"
    if consumer:
        client = b.group_consumer_class()(
            config, listener=listener, enable_auto_commit=False, auto_offset_reset="earliest"
        )
    else:
        client = GroupMember(config, listener=listener)
    with contextlib.suppress(asyncio.CancelledError):
        async with client:
            try:
                while True:
                    if consumer:
                        await client.getmany(timeout=1.0)
                        continue
                    assignment = await client.poll(timeout=1.0)
                    mine = frozenset(tp.partition for tp in assignment)
                    if mine != tracker.owned:
                        # poll()'s return value disagrees with the callbacks: worth a look.
                        b.emit("mismatch", poll=sorted(mine), callbacks=sorted(tracker.owned))
            except asyncio.CancelledError:
                b.emit("closing")
                # leaving the async-with closes the member: revoke, then LeaveGroup.
    b.emit("closed")


async def member_aiokafka(a: argparse.Namespace) -> None:
    tracker = b.Tracker()
    b.install_cancel_on_signals(current_task())
    b.emit("ready")
    consumer = b.aiokafka_consumer(a)
    try:
        await consumer.start()
        consumer.subscribe([a.topic], listener=b.aiokafka_listener(tracker))
        while True:
            await consumer.getmany(timeout_ms=1000)
    except asyncio.CancelledError:
        b.emit("closing")
    finally:
        # stop() revokes and sends LeaveGroup (aiokafka skips it at generation 0 and below).
        await consumer.stop()
    b.emit("closed")


def member_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    flag = b.StopFlag()
    tracker = b.Tracker()
    b.emit("ready")
    consumer = Consumer(b.confluent_config(a))
    callbacks = b.confluent_callbacks(tracker, aio=False, cooperative=b.cooperative(a))
    consumer.subscribe([a.topic], **callbacks)
    try:
        while not flag.stop:
            consumer.poll(0.1)
        b.emit("closing")
    finally:
        consumer.close()  # revoke callback, then LeaveGroup
    b.emit("closed")


async def member_confluent_aio(a: argparse.Namespace) -> None:
    from confluent_kafka.aio import AIOConsumer

    tracker = b.Tracker()
    b.install_cancel_on_signals(current_task())
    b.emit("ready")
    consumer = AIOConsumer(b.confluent_config(a))
    try:
        callbacks = b.confluent_callbacks(tracker, aio=True, cooperative=b.cooperative(a))
        await consumer.subscribe([a.topic], **callbacks)
        while True:
            await consumer.poll(0.1)
    except asyncio.CancelledError:
        b.emit("closing")
    finally:
        await consumer.close()
    b.emit("closed")


def member_kafka_python(a: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    flag = b.StopFlag()
    tracker = b.Tracker()
    coop = b.cooperative(a)
    holder: dict[str, Any] = {}

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        # Eager: the whole assignment each time. Cooperative (KIP-429): the partitions
        # revoked / added; on_partitions_assigned is not called when nothing was added.
        def on_partitions_revoked(self, revoked: Any) -> None:
            numbers = [tp.partition for tp in revoked]
            tracker.revoking(numbers)
            tracker.revoked(numbers)

        def on_partitions_lost(self, lost: Any) -> None:
            numbers = [tp.partition for tp in lost]
            tracker.revoking(numbers, "lost")
            tracker.revoked(numbers, "lost")

        def on_partitions_assigned(self, assigned: Any) -> None:
            tracker.assigned((tp.partition for tp in assigned), full=not coop)
            consumer = holder.get("consumer")
            if coop and consumer is not None:
                held = frozenset(tp.partition for tp in consumer.assignment())
                if held != tracker.owned:
                    b.emit("mismatch", client=sorted(held), callbacks=sorted(tracker.owned))

    b.emit("ready")
    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        client_id=a.name,
        partition_assignment_strategy=[
            CooperativeStickyAssignor if coop else RangePartitionAssignor
        ],
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    holder["consumer"] = consumer
    consumer.subscribe([a.topic], listener=Listener())
    try:
        while not flag.stop:
            consumer.poll(timeout_ms=100)
        b.emit("closing")
    finally:
        consumer.close()  # revoke callback, then LeaveGroup
    b.emit("closed")


def member_java(a: argparse.Namespace) -> int:
    """Kafka's KafkaConsumer (JavaMember.java) as our child, in our process group."""
    from kgroup.testing._java import java_member_command
    from kgroup.testing._ports import kill_with_parent_prefix

    argv = java_member_command(
        [
            "--bootstrap", a.bootstrap, "--group", a.group, "--topic", a.topic,
            "--protocol", a.group_protocol, "--assignor", b.assignor_of(a),
            "--session-timeout-ms", str(a.session_ms),
            "--heartbeat-interval-ms", str(a.heartbeat_ms),
            "--max-poll-interval-ms", str(a.max_poll_ms),
            "--client-id", a.name, "--poll-ms", "100",
            *(["--group-instance-id", a.instance_id] if a.instance_id else []),
        ]
    )  # fmt: skip
    b.emit("ready")
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
    tracker = b.Tracker()
    assert proc.stdout is not None
    for raw in proc.stdout:
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue
        kind = event.get("event")
        parts = [int(p) for _, p in event.get("partitions", ())]
        info = {"generation": event["generation"]} if "generation" in event else {}
        if kind == "assigned":
            # Inside onPartitionsAssigned, consumer.assignment() is the whole new assignment;
            # the callback's partitions are all of it (eager) or the ones added (cooperative,
            # which calls it on every rebalance, with nothing added too).
            whole = frozenset(int(p) for _, p in event.get("assignment", ()))
            expected = tracker.owned | frozenset(parts) if b.cooperative(a) else frozenset(parts)
            if whole != expected:
                b.emit("mismatch", client=sorted(whole), callbacks=sorted(expected))
            tracker.assigned(whole, full=True, delta=parts, **info)
        elif kind in ("revoked", "lost"):
            # The Java callback's one action is to print this line, first thing: its
            # start. Stamped here on arrival, like every line of this client.
            tracker.revoking(parts, kind, **info)
            tracker.revoked(parts, kind, **info)
        elif kind == "error":
            b.emit("error", message=event.get("message"))
        elif kind == "closed":
            b.emit("closed")
    return proc.wait()


def _member_floor(a: argparse.Namespace) -> None:
    from _floor import member_floor  # reaction.py's measurement floor (no client library)

    member_floor(a)


def run_member(a: argparse.Namespace) -> int | None:
    runners: dict[str, Callable[[argparse.Namespace], Any]] = {
        "kgroup": member_kgroup,
        "aiokafka": member_aiokafka,
        "confluent": member_confluent,
        "confluent-aio": member_confluent_aio,
        "kafka-python": member_kafka_python,
        "java": member_java,
        "floor": _member_floor,
    }
    out = runners[a.client](a)
    if asyncio.iscoroutine(out):
        asyncio.run(out)
        return None
    return out if isinstance(out, int) else None


# --- idle: many in one process --------------------------------------------------------------


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


class IdleMember:
    """One idle member: its task, its (quiet) assignment tracker and its client object."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tracker = b.Tracker(report=False)
        self.handle: Any = None
        self.task: asyncio.Task[None] | None = None
        self.error: str | None = None


async def idle_kgroup(a: argparse.Namespace, m: IdleMember) -> None:
    config = b.kgroup_config(a, group=f"{a.group}-{m.index}", client_id=f"{a.name}-{m.index}")
    listener = b.kgroup_listener(m.tracker)
    if a.kgroup_api == "consumer":
        consumer = b.group_consumer_class()(
            config, listener=listener, enable_auto_commit=False, auto_offset_reset="latest"
        )
        m.handle = consumer
        async with consumer:
            while True:
                await consumer.getmany(timeout=a.idle_poll_timeout or 60.0)
    else:
        from kgroup import GroupMember

        async with GroupMember(config, listener=listener) as member:
            m.handle = member
            while True:
                await member.poll(timeout=a.idle_poll_timeout)


async def idle_aiokafka(a: argparse.Namespace, m: IdleMember) -> None:
    consumer = b.aiokafka_consumer(
        a, group=f"{a.group}-{m.index}", client_id=f"{a.name}-{m.index}", offset_reset="latest"
    )

    def on_assigned(assigned: Any) -> None:
        if a.pause:
            consumer.pause(*assigned)

    m.handle = consumer
    try:
        await consumer.start()
        consumer.subscribe([a.topic], listener=b.aiokafka_listener(m.tracker, on_assigned))
        while True:
            await consumer.getmany(timeout_ms=int((a.idle_poll_timeout or 60.0) * 1000))
    finally:
        await consumer.stop()


async def idle_confluent_aio(a: argparse.Namespace, m: IdleMember) -> None:
    from confluent_kafka.aio import AIOConsumer

    conf = b.confluent_config(
        a, group=f"{a.group}-{m.index}", client_id=f"{a.name}-{m.index}", offset_reset="latest"
    )
    consumer = AIOConsumer(conf)
    m.handle = consumer
    try:
        await consumer.subscribe(
            [a.topic], **b.confluent_callbacks(m.tracker, aio=True, pause=a.pause)
        )
        while True:
            # librdkafka heartbeats on its own threads; poll() serves the callbacks and
            # max.poll.interval.ms. Each poll holds one executor thread for up to 1 s.
            await consumer.poll(min(1.0, a.idle_poll_timeout or 1.0))
    finally:
        await consumer.close()


IDLE_RUNNERS: dict[str, Callable[[argparse.Namespace, IdleMember], Coroutine[Any, Any, None]]] = {
    "kgroup": idle_kgroup,
    "aiokafka": idle_aiokafka,
    "confluent-aio": idle_confluent_aio,
}


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _kgroup_stats(members: list[IdleMember]) -> list[dict[str, Any]] | None:
    if not all(callable(getattr(m.handle, "stats", None)) for m in members):
        return None
    return [b.stats_dict(m.handle.stats()) for m in members]


async def run_idle(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    b.install_cancel_on_signals(current_task())
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

    b.emit("ready", members=a.idle)
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
                b.emit("progress", stable=stable, of=len(members))
                next_report = now + 2.0
            await asyncio.sleep(0.1)
        joined_s = time.time() - t_start
        if failed or stable < len(members):
            b.emit(
                "result",
                ok=False,
                reason="members failed" if failed else "not all stable before the deadline",
                stable=stable,
                members=len(members),
                join_s=joined_s,
                errors=[m.error for m in failed if m.error][:5],
            )
            return
        b.emit("progress", stable=stable, of=len(members))
        await asyncio.sleep(a.settle)
        changes0 = sum(m.tracker.changes for m in members)
        stats0 = _kgroup_stats(members)
        b.emit("window_start")
        recording = True
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(a.window)
        cpu1, wall1 = time.process_time(), time.monotonic()
        recording = False
        changes1 = sum(m.tracker.changes for m in members)
        stats1 = _kgroup_stats(members)
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
            "lag_p50_ms": _ms(b.percentile(lags, 0.50)),
            "lag_p99_ms": _ms(b.percentile(lags, 0.99)),
            "lag_max_ms": _ms(max(lags) if lags else None),
            "assignment_changes_in_window": changes1 - changes0,
            "all_stable": all_stable,
            "rss_mb": None if (kb := _proc_status("VmRSS")) is None else kb / 1024.0,
            "threads": _proc_status("Threads") or threading.active_count(),
        }
        if stats0 is not None and stats1 is not None:
            result["kgroup_rebalances_in_window"] = sum(
                int(s.get("rebalances", 0)) for s in stats1
            ) - sum(int(s.get("rebalances", 0)) for s in stats0)
            ages = [float(x) for s in stats1 if (x := s.get("last_heartbeat_age_ms")) is not None]
            result["kgroup_max_heartbeat_age_ms"] = max(ages) if ages else None
        b.emit("result", **result)
    except asyncio.CancelledError:
        b.emit("closing")
    finally:
        monitor.cancel()
        close_start = time.monotonic()
        tasks = [m.task for m in members if m.task is not None]
        for task in tasks:
            task.cancel()
        done, pending = await asyncio.wait(tasks, timeout=a.close_deadline) if tasks else ((), ())
        b.emit(
            "closed",
            close_s=time.monotonic() - close_start,
            closed=len(done),
            not_closed=len(pending),
        )


# --- throughput -------------------------------------------------------------------------------


class Counter:
    """Counts records per partition, the last offset per partition and the value bytes (each
    client's loop touches every record's value once, like an application would)."""

    def __init__(self) -> None:
        self.count = 0
        self.value_bytes = 0
        self.per_partition: dict[int, int] = {}
        self.last_offset: dict[int, int] = {}
        self.marks: dict[str, float] = {}

    def add_batches(self, batches: dict[Any, list[Any]]) -> None:
        """One ``getmany`` result (kgroup and aiokafka alike)."""
        for tp, records in batches.items():
            for r in records:
                self.value_bytes += len(r.value)
            self.count += len(records)
            self.per_partition[tp.partition] = self.per_partition.get(tp.partition, 0) + len(
                records
            )
            self.last_offset[tp.partition] = records[-1].offset
        self.batch_done()

    def batch_done(self) -> None:
        """After every fetch call: stamps of the first batch with records and the latest."""
        marks = self.marks
        if self.count and "first_t" not in marks:
            marks["first_t"] = time.time()
            marks["first_cpu"] = time.process_time()
            marks["first_count"] = self.count
        marks["last_t"] = time.time()
        marks["last_cpu"] = time.process_time()


async def consume_kgroup(a: argparse.Namespace, counter: Counter, target: int) -> None:
    consumer = b.group_consumer_class()(
        b.kgroup_config(a), enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        b.emit("started")
        while counter.count < target:
            want = min(a.max_records, target - counter.count)
            counter.add_batches(await consumer.getmany(timeout=1.0, max_records=want))
    finally:
        await consumer.close()


async def consume_aiokafka(a: argparse.Namespace, counter: Counter, target: int) -> None:
    consumer = b.aiokafka_consumer(a)
    await consumer.start()
    try:
        consumer.subscribe([a.topic])
        b.emit("started")
        while counter.count < target:
            want = min(a.max_records, target - counter.count)
            counter.add_batches(await consumer.getmany(timeout_ms=1000, max_records=want))
    finally:
        await consumer.stop()


async def consume_confluent_aio(a: argparse.Namespace, counter: Counter, target: int) -> None:
    from confluent_kafka.aio import AIOConsumer

    consumer = AIOConsumer(b.confluent_config(a))
    try:
        await consumer.subscribe([a.topic])
        b.emit("started")
        while counter.count < target:
            want = min(a.max_records, target - counter.count)
            # consume() returns at `want` messages or at the timeout, whichever first.
            messages = await consumer.consume(num_messages=want, timeout=1.0)
            got = 0
            for m in messages:
                if m.error() is not None:
                    continue
                got += 1
                counter.value_bytes += len(m.value())
                p = m.partition()
                counter.per_partition[p] = counter.per_partition.get(p, 0) + 1
                counter.last_offset[p] = m.offset()
            counter.count += got
            counter.batch_done()
    finally:
        await consumer.close()


CONSUMERS = {
    "kgroup": consume_kgroup,
    "aiokafka": consume_aiokafka,
    "confluent-aio": consume_confluent_aio,
}


async def run_throughput(a: argparse.Namespace) -> None:
    counter = Counter()
    marks = counter.marks
    if a.gc_freeze:
        # Import the client first, then move every object alive now (modules, classes) out
        # of the collector's reach: full collections then scan only what consuming creates.
        if a.client == "kgroup":
            b.group_consumer_class()
        elif a.client == "aiokafka":
            import aiokafka.consumer  # noqa: F401
        else:
            import confluent_kafka.aio  # noqa: F401
        gc.freeze()
    b.emit("ready")
    t0, cpu0 = time.time(), time.process_time()
    task = asyncio.ensure_future(CONSUMERS[a.client](a, counter, a.records))
    try:
        await asyncio.wait_for(asyncio.shield(task), a.deadline)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 30.0)
        b.emit("error", message=f"deadline {a.deadline:.0f} s: {counter.count} records")
        return
    span = marks.get("last_t", 0.0) - marks.get("first_t", 0.0)
    after_first = counter.count - int(marks.get("first_count", 0))
    cpu = marks.get("last_cpu", 0.0) - marks.get("first_cpu", 0.0)
    b.emit(
        "result",
        client=a.client,
        records=counter.count,
        value_bytes=counter.value_bytes,
        first_batch_s=marks.get("first_t", t0) - t0,
        span_s=span,
        records_per_s=after_first / span if span > 0 else None,
        total_s=marks.get("last_t", t0) - t0,
        cpu_s=cpu,
        cpu_us_per_record=1e6 * cpu / after_first if after_first else None,
        cpu_total_s=time.process_time() - cpu0,
        per_partition={str(k): v for k, v in sorted(counter.per_partition.items())},
        last_offset={str(k): v for k, v in sorted(counter.last_offset.items())},
    )


def throughput_main(a: argparse.Namespace) -> None:
    if a.profile:
        import cProfile

        cProfile.runctx("asyncio.run(run_throughput(a))", globals(), {"a": a}, a.profile)
    else:
        asyncio.run(run_throughput(a))


# --- heartbeat subject --------------------------------------------------------------------------


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


class Subject:
    """One client behind a common face: ``start``, ``step(timeout)``, ``close``, ``stats``."""

    STATS_KEPT = (
        "state", "generation", "member_id", "rebalances", "isolated", "heartbeats_sent",
        "heartbeats_failed", "heartbeats_late", "heartbeat_lateness_ms", "heartbeat_rtt_ms",
    )  # fmt: skip

    def __init__(self, a: argparse.Namespace, tracker: b.Tracker) -> None:
        self.a = a
        self.tracker = tracker
        self.handle: Any = None
        self.kind = a.client

    async def start(self) -> None:
        a, tracker = self.a, self.tracker
        if a.client.startswith("kgroup"):
            a.isolate_heartbeat = a.client == "kgroup-isolated"
            config, listener = b.kgroup_config(a), b.kgroup_listener(tracker)
            if a.kgroup_api == "member":
                from kgroup import GroupMember

                self.handle = GroupMember(config, listener=listener)
            else:
                self.handle = b.group_consumer_class()(
                    config, listener=listener, enable_auto_commit=False, auto_offset_reset="latest"
                )
            await self.handle.start()
        elif a.client == "aiokafka":
            self.handle = b.aiokafka_consumer(a, offset_reset="latest")
            await self.handle.start()
            self.handle.subscribe([a.topic], listener=b.aiokafka_listener(tracker))
        else:
            from confluent_kafka.aio import AIOConsumer

            self.handle = AIOConsumer(b.confluent_config(a, offset_reset="latest"))
            await self.handle.subscribe([a.topic], **b.confluent_callbacks(tracker, aio=True))

    async def step(self, timeout: float) -> None:
        h = self.handle
        if self.kind.startswith("kgroup"):
            if self.a.kgroup_api == "member":
                await h.poll(timeout=timeout)
            else:
                await h.getmany(timeout=timeout)
        elif self.kind == "aiokafka":
            await h.getmany(timeout_ms=int(timeout * 1000))
        else:
            await h.poll(timeout)

    def stats(self) -> dict[str, Any] | None:
        fn = getattr(self.handle, "stats", None)
        if fn is None or not self.kind.startswith("kgroup"):
            return None
        try:
            s = b.stats_dict(fn())
        except Exception as exc:
            return {"error": repr(exc)}
        return {k: s.get(k) for k in self.STATS_KEPT}

    async def close(self) -> None:
        h = self.handle
        if h is None:
            return
        if self.kind == "aiokafka":
            await h.stop()
        else:
            await h.close()


async def run_heartbeat(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    b.install_cancel_on_signals(current_task())
    go = asyncio.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                loop.call_soon_threadsafe(go.set)
        # EOF: the orchestrator is gone; SIGTERM / the parent-death signal ends us.

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    tracker = b.Tracker()
    subject = Subject(a, tracker)
    b.emit("ready", client=a.client, kgroup_api=a.kgroup_api)
    try:
        await subject.start()
        while not go.is_set():
            await subject.step(0.1)
        b.emit("go", stats=subject.stats())
        rng = random.Random(a.seed)
        for slice_ms in a.slice_list:
            b.emit("phase", slice_ms=slice_ms)
            end = time.monotonic() + a.phase_s
            steps = 0
            while time.monotonic() < end:
                if slice_ms == 0:
                    await subject.step(0.1)
                else:
                    spin(slice_ms * rng.uniform(1.0 - a.slice_jitter, 1.0 + a.slice_jitter))
                    await subject.step(0)
                    await asyncio.sleep(0)
                steps += 1
            b.emit("phase_end", slice_ms=slice_ms, steps=steps, stats=subject.stats())
        b.emit("block_start", block_s=a.block_s)
        time.sleep(a.block_s)  # noqa: ASYNC251 - the point: the whole loop stops
        b.emit("block_end")
        end = time.monotonic() + a.observe_s
        while time.monotonic() < end:
            await subject.step(0.1)
        b.emit("observed", stats=subject.stats(), owned=sorted(tracker.owned))
        while True:
            await subject.step(0.5)
    except asyncio.CancelledError:
        b.emit("closing")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(subject.close(), 30.0)
    b.emit("closed")


# --- entry point ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)

    sub_member = sub.add_parser("member", help="one member")
    b.add_client_args(sub_member, MEMBER_CLIENTS, log_level="info")
    sub_member.add_argument(
        "--kgroup-api",
        choices=("member", "consumer"),
        default="member",
        help="kgroup: GroupMember (poll) or GroupConsumer (getmany)",
    )
    sub_member.add_argument(
        "--assignor",
        choices=b.ASSIGNORS,
        default="range",
        help="range (eager) or cooperative-sticky (KIP-429; not aiokafka)",
    )
    sub_member.add_argument(
        "--handoff",
        action="store_true",
        help="kgroup: close with the handoff (GroupConfig.handoff_on_close)",
    )
    sub_member.add_argument(
        "--instance-id",
        default=None,
        help="kgroup, confluent, java: a static member with this group instance id (KIP-345)",
    )

    sub_relay = sub.add_parser("relay", help="the frame-aware relay (_bench.run_relay_child)")
    sub_relay.add_argument("--log-level", default="warning")

    sub_idle = sub.add_parser("idle", help="N idle members in one process")
    b.add_client_args(sub_idle, IDLE_CLIENTS, heartbeat_ms=3000, session_ms=45_000)
    sub_idle.add_argument("--idle", type=int, required=True, help="members in this process")
    sub_idle.add_argument("--window", type=float, default=30.0, help="measuring window, s")
    sub_idle.add_argument("--settle", type=float, default=3.0, help="wait after all stable, s")
    sub_idle.add_argument("--join-deadline", type=float, default=180.0)
    sub_idle.add_argument("--close-deadline", type=float, default=60.0)
    sub_idle.add_argument(
        "--idle-poll-timeout",
        type=float,
        default=None,
        help="kgroup: poll(timeout=...) (default None: long-poll without limit)",
    )
    sub_idle.add_argument("--pause", action="store_true", help="peers pause their partitions")
    sub_idle.add_argument("--kgroup-api", choices=("member", "consumer"), default="member")

    sub_tp = sub.add_parser("throughput", help="one consumer reads --records records")
    b.add_client_args(sub_tp, THROUGHPUT_CLIENTS, session_ms=10_000, heartbeat_ms=3000)
    sub_tp.add_argument("--records", type=int, default=500_000)
    sub_tp.add_argument("--max-records", type=int, default=10_000, help="batch cap")
    sub_tp.add_argument("--deadline", type=float, default=300.0, help="s")
    sub_tp.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after imports")
    sub_tp.add_argument("--profile", default=None, help="write cProfile stats here")

    sub_hb = sub.add_parser("heartbeat", help="a member whose loop is kept busy")
    b.add_client_args(sub_hb, HEARTBEAT_CLIENTS, heartbeat_ms=500, name="hb-subject")
    sub_hb.add_argument("--slices", default="0,10,50,200", help="busy slices, ms (0: idle)")
    sub_hb.add_argument("--phase-s", type=float, default=20.0)
    sub_hb.add_argument("--slice-jitter", type=float, default=0.5, help="S x uniform(1±j)")
    sub_hb.add_argument("--seed", type=int, default=1)
    sub_hb.add_argument("--block-s", type=float, default=12.0)
    sub_hb.add_argument("--observe-s", type=float, default=8.0)
    sub_hb.add_argument("--kgroup-api", choices=("consumer", "member"), default="consumer")

    a = p.parse_args(argv)
    if a.mode == "idle" and a.idle < 1:
        p.error("--idle N needs N >= 1")
    if a.mode == "heartbeat":
        try:
            a.slice_list = [float(x) for x in a.slices.split(",") if x.strip()]
        except ValueError:
            p.error(f"--slices must be comma-separated numbers, got {a.slices!r}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    run: Callable[[], Any] = {
        "member": lambda: run_member(a),
        "idle": lambda: asyncio.run(run_idle(a)),
        "throughput": lambda: throughput_main(a),
        "heartbeat": lambda: asyncio.run(run_heartbeat(a)),
        "relay": b.run_relay_child,
    }[a.mode]
    return b.child_main(run, a.log_level)


if __name__ == "__main__":
    sys.exit(main())
