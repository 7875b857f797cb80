"""One consumer process for ``benchmarks/consumer.py``; prints JSON lines (``t``, ``event``).

    python benchmarks/_consumer_proc.py --mode throughput --client kgroup \\
        --bootstrap 127.0.0.1:9092 --group g --topic t --records 500000

Modes:

- ``throughput``: one consumer (a fresh group, reading from the earliest offset) reads until
  it has ``--records`` records, in batches of at most ``--max-records``; prints ``result``
  with the time of the first and the last batch, the process CPU time between them, the
  number of records per partition and the last offset seen per partition.
- ``idle``: ``--idle N`` consumers in this one process and event loop, each alone in its own
  group on the (empty) topic, all fetching (long-poll fetches on their empty partition);
  measured by ``_member_proc.run_idle`` exactly like the membership idle scenario.

Clients: ``kgroup`` (:class:`kgroup.GroupConsumer`), ``aiokafka`` (``AIOKafkaConsumer``
with a group subscription), ``confluent-aio`` (``confluent_kafka.aio.AIOConsumer``). All use
the classic protocol, the range assignor, no auto-commit and the same session / heartbeat /
max-poll settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _member_proc as mp

CLIENTS = ("kgroup", "aiokafka", "confluent-aio")


def group_consumer_class() -> Any:
    try:
        from kgroup import GroupConsumer  # type: ignore[attr-defined]
    except ImportError:  # not exported yet
        from kgroup._runtime._consumer import GroupConsumer
    return GroupConsumer


def kgroup_config(a: argparse.Namespace, group: str, client_id: str) -> Any:
    from kgroup import GroupConfig

    return GroupConfig(
        bootstrap_servers=a.bootstrap,
        group_id=group,
        topics=[a.topic],
        assignors=("range",),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        client_id=client_id,
    )


# --- throughput ----------------------------------------------------------------------------------


class Counter:
    """Counts records per partition, the last offset per partition and the value bytes (each
    client's loop touches every record's value once, like an application would)."""

    def __init__(self) -> None:
        self.count = 0
        self.value_bytes = 0
        self.per_partition: dict[int, int] = {}
        self.last_offset: dict[int, int] = {}
        self.marks: dict[str, float] = {}

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
    consumer = group_consumer_class()(
        kgroup_config(a, a.group, a.name),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        mp.emit("started")
        while counter.count < target:
            want = min(a.max_records, target - counter.count)
            batches = await consumer.getmany(timeout=1.0, max_records=want)
            for tp, records in batches.items():
                for r in records:
                    counter.value_bytes += len(r.value)
                counter.count += len(records)
                counter.per_partition[tp.partition] = counter.per_partition.get(
                    tp.partition, 0
                ) + len(records)
                counter.last_offset[tp.partition] = records[-1].offset
            counter.batch_done()
    finally:
        await consumer.close()


async def consume_aiokafka(a: argparse.Namespace, counter: Counter, target: int) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

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
    await consumer.start()
    try:
        consumer.subscribe([a.topic])
        mp.emit("started")
        while counter.count < target:
            want = min(a.max_records, target - counter.count)
            batches = await consumer.getmany(timeout_ms=1000, max_records=want)
            for tp, records in batches.items():
                for r in records:
                    counter.value_bytes += len(r.value)
                counter.count += len(records)
                counter.per_partition[tp.partition] = counter.per_partition.get(
                    tp.partition, 0
                ) + len(records)
                counter.last_offset[tp.partition] = records[-1].offset
            counter.batch_done()
    finally:
        await consumer.stop()


async def consume_confluent_aio(a: argparse.Namespace, counter: Counter, target: int) -> None:
    from confluent_kafka.aio import AIOConsumer

    conf = mp.confluent_config(a)
    conf["auto.offset.reset"] = "earliest"
    consumer = AIOConsumer(conf)
    try:
        await consumer.subscribe([a.topic])
        mp.emit("started")
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
            group_consumer_class()
        elif a.client == "aiokafka":
            import aiokafka.consumer  # noqa: F401
        else:
            import confluent_kafka.aio  # noqa: F401
        gc.freeze()
    mp.emit("ready")
    t0, cpu0 = time.time(), time.process_time()
    task = asyncio.ensure_future(CONSUMERS[a.client](a, counter, a.records))
    try:
        await asyncio.wait_for(asyncio.shield(task), a.deadline)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 30.0)
        mp.emit("error", message=f"deadline {a.deadline:.0f} s: {counter.count} records")
        return
    span = marks.get("last_t", 0.0) - marks.get("first_t", 0.0)
    after_first = counter.count - int(marks.get("first_count", 0))
    cpu = marks.get("last_cpu", 0.0) - marks.get("first_cpu", 0.0)
    mp.emit(
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


# --- idle ----------------------------------------------------------------------------------------


async def idle_kgroup_consumer(a: argparse.Namespace, m: Any) -> None:
    class Listener:
        def on_partitions_assigned(self, parts: frozenset[Any]) -> None:
            m.assigned((tp.partition for tp in parts), full=False)

        def on_partitions_revoked(self, parts: frozenset[Any]) -> None:
            m.revoked(tp.partition for tp in parts)

        def on_partitions_lost(self, parts: frozenset[Any]) -> None:
            m.revoked(tp.partition for tp in parts)

    consumer = group_consumer_class()(
        kgroup_config(a, f"{a.group}-{m.index}", f"{a.name}-{m.index}"),
        listener=Listener(),
        enable_auto_commit=False,
        auto_offset_reset="latest",
    )
    m.handle = consumer
    async with consumer:
        while True:
            await consumer.getmany(timeout=a.idle_poll_timeout or 60.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", choices=("throughput", "idle"), required=True)
    p.add_argument("--client", choices=CLIENTS, required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", default="bench")
    p.add_argument("--session-ms", type=int, default=10_000)
    p.add_argument("--heartbeat-ms", type=int, default=3000)
    p.add_argument("--max-poll-ms", type=int, default=300_000)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--records", type=int, default=500_000, help="throughput: records to read")
    p.add_argument("--max-records", type=int, default=10_000, help="throughput: batch cap")
    p.add_argument("--deadline", type=float, default=300.0, help="throughput: deadline, s")
    p.add_argument(
        "--gc-freeze", action="store_true", help="throughput: gc.freeze() before consuming"
    )
    p.add_argument("--profile", default=None, help="throughput: write cProfile stats here")
    p.add_argument("--idle", type=int, default=0, help="idle: consumers in this process")
    p.add_argument("--window", type=float, default=30.0, help="idle: measuring window, s")
    p.add_argument("--settle", type=float, default=3.0, help="idle: wait after all stable, s")
    p.add_argument("--join-deadline", type=float, default=180.0, help="idle: join deadline, s")
    p.add_argument("--close-deadline", type=float, default=60.0, help="idle: close deadline, s")
    p.add_argument("--idle-poll-timeout", type=float, default=None)
    a = p.parse_args(argv)
    a.pause = False  # idle consumers fetch
    if a.mode == "idle" and a.idle < 1:
        p.error("--mode idle needs --idle N (N >= 1)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    mp.configure_logging(a.log_level)
    try:
        if a.mode == "throughput" and a.profile:
            import cProfile

            cProfile.runctx("asyncio.run(run_throughput(a))", globals(), {"a": a}, a.profile)
        elif a.mode == "throughput":
            asyncio.run(run_throughput(a))
        else:
            # The membership idle scenario's runner, with kgroup's GroupConsumer in the kgroup
            # slot; aiokafka and confluent-aio there already fetch (no --pause).
            mp.IDLE_RUNNERS["kgroup"] = idle_kgroup_consumer
            asyncio.run(mp.run_idle(a))
    except Exception as exc:
        mp.emit("error", message=repr(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
