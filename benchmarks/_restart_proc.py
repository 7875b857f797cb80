"""The children of ``consumer_restart.py``: one consumer that processes records until
SIGTERM, and the producer that keeps the topic busy meanwhile.

    python benchmarks/_restart_proc.py consume --client kgroup --bootstrap ... --group g \\
        --topic t [--assignor cooperative-sticky] [--group-protocol consumer] [--handoff]
    python benchmarks/_restart_proc.py produce --bootstrap ... --topic t --partitions 6 \\
        --rate 100

Every stdout line is one JSON object with ``t`` (``time.time()``) and ``event``.

**consume**: ``ready``, then for every batch one ``batch`` line per partition (``p``,
``first``, ``last``: offsets, ``pt``: when its last record was produced) once the batch is
processed (``--work-ms`` of sleep per
batch), after which the offsets are committed (a synchronous commit after every batch, in
all three clients: at-least-once, and exactly once across graceful restarts). On SIGTERM:
``closing``, the client is closed (revoke, leave), ``closed``. kgroup (``GroupConsumer``)
stops its loop and then closes, as the other clients do; with ``--handoff`` it closes with
the handoff from the signal's task while the loop goes on (GroupConsumer's drain), and the
loop ends when the consumer is closed; ``--handoff --no-drain`` stops the loop first.
Clients: ``kgroup``, ``aiokafka`` (range only), ``confluent-aio`` (``aio.AIOConsumer``).

**produce**: ``--rate`` records a second into every partition (value: the time it was
produced), until SIGTERM; ``produced`` once a second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench as b

CLIENTS = ("kgroup", "aiokafka", "confluent-aio")


def stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def report(batches: dict[int, list[tuple[int, bytes]]]) -> None:
    """One ``batch`` line per partition: first / last offset, and ``pt``, when its last
    record was produced (the producer writes ``time.time()`` as the value)."""
    for p, records in sorted(batches.items()):
        if records:
            b.emit(
                "batch",
                p=p,
                first=records[0][0],
                last=records[-1][0],
                n=len(records),
                pt=float(records[-1][1]),
            )


async def consume_kgroup(a: argparse.Namespace, stop: asyncio.Event) -> None:
    from kgroup import CommitFailed, RebalanceInProgress

    consumer = b.group_consumer_class()(
        b.kgroup_config(a), auto_offset_reset="earliest", enable_auto_commit=True
    )
    drain = a.handoff and not a.no_drain
    await consumer.start()

    async def loop() -> None:
        while not consumer.closed and not (stop.is_set() and not drain):
            batch = await consumer.getmany(timeout=0.5, max_records=a.max_records)
            if not batch:
                continue
            await asyncio.sleep(a.work_ms / 1000)
            report(
                {tp.partition: [(r.offset, r.value) for r in recs] for tp, recs in batch.items()}
            )
            with contextlib.suppress(CommitFailed, RebalanceInProgress):
                await consumer.commit()

    task = asyncio.create_task(loop())
    await stop.wait()
    b.emit("closing")
    if drain:
        await consumer.close()
        await task
    else:
        await task
        await consumer.close()


async def consume_aiokafka(a: argparse.Namespace, stop: asyncio.Event) -> None:
    from aiokafka.errors import CommitFailedError, RebalanceInProgressError

    consumer = b.aiokafka_consumer(a)
    await consumer.start()
    try:
        consumer.subscribe([a.topic])
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=a.max_records)
            if not batch:
                continue
            await asyncio.sleep(a.work_ms / 1000)
            report(
                {tp.partition: [(r.offset, r.value) for r in recs] for tp, recs in batch.items()}
            )
            with contextlib.suppress(CommitFailedError, RebalanceInProgressError):
                await consumer.commit()
        b.emit("closing")
    finally:
        await consumer.stop()  # revoke, LeaveGroup


async def consume_confluent_aio(a: argparse.Namespace, stop: asyncio.Event) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.aio import AIOConsumer

    consumer = AIOConsumer(b.confluent_config(a))
    try:
        callbacks = b.confluent_callbacks(
            b.Tracker(report=False), aio=True, cooperative=b.cooperative(a)
        )
        await consumer.subscribe([a.topic], **callbacks)
        while not stop.is_set():
            # A short timeout: consume() waits for num_messages or the timeout, whichever
            # comes first, where the others return as soon as records are there.
            messages = await consumer.consume(num_messages=a.max_records, timeout=0.1)
            batches: dict[int, list[tuple[int, bytes]]] = {}
            for m in messages:
                if m.error() is None:
                    batches.setdefault(m.partition(), []).append((m.offset(), m.value()))
            if not batches:
                continue
            await asyncio.sleep(a.work_ms / 1000)
            report(batches)
            with contextlib.suppress(KafkaException):
                await consumer.commit(asynchronous=False)
        b.emit("closing")
    finally:
        await consumer.close()


async def run_consume(a: argparse.Namespace) -> None:
    stop = stop_event()
    b.emit("ready")
    runners: dict[str, Callable[[argparse.Namespace, asyncio.Event], Any]] = {
        "kgroup": consume_kgroup,
        "aiokafka": consume_aiokafka,
        "confluent-aio": consume_confluent_aio,
    }
    await runners[a.client](a, stop)
    b.emit("closed")


async def run_produce(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaProducer

    stop = stop_event()
    sent = 0
    async with AIOKafkaProducer(bootstrap_servers=a.bootstrap, linger_ms=2) as producer:
        b.emit("ready")
        start = time.monotonic()
        tick = 0
        while not stop.is_set():
            tick += 1
            value = repr(time.time()).encode()
            for p in range(a.partitions):
                await producer.send(a.topic, value=value, partition=p)
            sent += a.partitions
            if tick % a.rate == 0:
                b.emit("produced", records=sent)
            delay = start + tick / a.rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
        await producer.flush()
    b.emit("produced", records=sent, final=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("consume")
    b.add_client_args(c, CLIENTS)
    c.add_argument("--assignor", default="range", choices=("range", "cooperative-sticky"))
    c.add_argument("--handoff", action="store_true", help="kgroup: close with the handoff")
    c.add_argument("--no-drain", action="store_true", help="kgroup: stop the loop first")
    c.add_argument("--work-ms", type=float, default=2.0, help="processing time per batch")
    c.add_argument("--max-records", type=int, default=100)
    q = sub.add_parser("produce")
    q.add_argument("--bootstrap", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--partitions", type=int, required=True)
    q.add_argument("--rate", type=int, default=100, help="records a second per partition")
    q.add_argument("--log-level", default="warning")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    b.configure_logging(a.log_level)
    try:
        asyncio.run(run_consume(a) if a.mode == "consume" else run_produce(a))
    except Exception as exc:  # the orchestrator reads this line
        b.emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
