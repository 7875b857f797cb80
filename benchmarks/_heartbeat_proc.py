"""The subject of ``benchmarks/heartbeat.py``: one group member whose application loop is kept
busy; prints JSON lines (``t`` = ``time.time()``, ``event``).

    python benchmarks/_heartbeat_proc.py --client kgroup --bootstrap 127.0.0.1:9092 \\
        --group g --topic t --slices 0,10,50,200 --phase-s 20 --block-s 12

It joins, reports its assignment (``assigned`` / ``revoked`` / ``lost``), then waits for a
``go`` line on stdin. Then, for each slice length S in ``--slices`` (ms), for ``--phase-s``
seconds, the application loop spins the CPU for S ms on average (each slice S x
uniform(1 - j, 1 + j), ``--slice-jitter`` j = 0.5, seeded: exact slices that divide the
heartbeat interval phase-lock with it; a pure-Python busy loop, which holds
the GIL but lets other threads take it at the interpreter's switch interval), then makes one
non-blocking client call (``poll`` / ``getmany`` with timeout 0) and yields to the event loop
once (``asyncio.sleep(0)``), back to back. S = 0 is the baseline: an idle application
waiting in the client's poll (100 ms at a time). Each phase is framed by ``phase`` and
``phase_end`` lines. Then the loop is blocked with ``time.sleep(--block-s)``
(``block_start``, ``block_end``), the member idles ``--observe-s`` seconds and prints
``observed`` (with kgroup's own stats when the client is kgroup), and idles until SIGTERM.

Clients: ``kgroup`` (:class:`kgroup.GroupConsumer` by default, ``--kgroup-api member`` for
:class:`kgroup.GroupMember`), ``kgroup-isolated`` (the same with
``GroupConfig(isolate_heartbeat=True)``), ``aiokafka`` (``AIOKafkaConsumer``) and
``confluent-aio`` (``confluent_kafka.aio.AIOConsumer``; librdkafka heartbeats on its own
threads). All consume the (empty) topic with the same session / heartbeat settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _member_proc as mp

CLIENTS = ("kgroup", "kgroup-isolated", "aiokafka", "confluent-aio")


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


class Subject:
    """One client behind a common face: ``start``, ``step(timeout)``, ``close``, ``stats``."""

    def __init__(self, a: argparse.Namespace, tracker: mp.Tracker) -> None:
        self.a = a
        self.tracker = tracker
        self.handle: Any = None
        self.kind = a.client

    async def start(self) -> None:
        a, tracker = self.a, self.tracker
        if a.client.startswith("kgroup"):
            from kgroup import GroupConfig

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
                isolate_heartbeat=a.client == "kgroup-isolated",
            )
            if a.kgroup_api == "member":
                from kgroup import GroupMember

                self.handle = GroupMember(config, listener=Listener())
            else:
                from _consumer_proc import group_consumer_class

                self.handle = group_consumer_class()(
                    config,
                    listener=Listener(),
                    enable_auto_commit=False,
                    auto_offset_reset="latest",
                )
            await self.handle.start()
        elif a.client == "aiokafka":
            from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
            from aiokafka.coordinator.assignors.range import RangePartitionAssignor

            class AioListener(ConsumerRebalanceListener):  # type: ignore[misc]
                def on_partitions_revoked(self, revoked: Any) -> None:
                    tracker.revoked(tp.partition for tp in revoked)

                def on_partitions_assigned(self, assigned: Any) -> None:
                    tracker.assigned((tp.partition for tp in assigned), full=True)

            self.handle = AIOKafkaConsumer(
                bootstrap_servers=a.bootstrap,
                group_id=a.group,
                client_id=a.name,
                partition_assignment_strategy=(RangePartitionAssignor,),
                session_timeout_ms=a.session_ms,
                heartbeat_interval_ms=a.heartbeat_ms,
                max_poll_interval_ms=a.max_poll_ms,
                enable_auto_commit=False,
                auto_offset_reset="latest",
            )
            await self.handle.start()
            self.handle.subscribe([a.topic], listener=AioListener())
        else:
            from confluent_kafka.aio import AIOConsumer

            async def on_assign(c: Any, parts: list[Any]) -> None:
                tracker.assigned((tp.partition for tp in parts), full=True)

            async def on_revoke(c: Any, parts: list[Any]) -> None:
                tracker.revoked(tp.partition for tp in parts)

            async def on_lost(c: Any, parts: list[Any]) -> None:
                tracker.revoked((tp.partition for tp in parts), "lost")

            conf = mp.confluent_config(a)
            conf["auto.offset.reset"] = "latest"
            self.handle = AIOConsumer(conf)
            await self.handle.subscribe(
                [a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
            )

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
            s = dict(fn())
        except Exception as exc:
            return {"error": repr(exc)}
        keep = (
            "state",
            "generation",
            "member_id",
            "rebalances",
            "isolated",
            "heartbeats_sent",
            "heartbeats_failed",
            "heartbeats_late",
            "heartbeat_lateness_ms",
            "heartbeat_rtt_ms",
        )
        return {k: s.get(k) for k in keep}

    async def close(self) -> None:
        h = self.handle
        if h is None:
            return
        if self.kind == "aiokafka":
            await h.stop()
        else:
            await h.close()


async def run(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    mp.install_cancel_on_signals(main)
    go = asyncio.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                loop.call_soon_threadsafe(go.set)
        # EOF: the orchestrator is gone; SIGTERM / the parent-death signal ends us.

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    tracker = mp.Tracker()
    subject = Subject(a, tracker)
    mp.emit("ready", client=a.client, kgroup_api=a.kgroup_api)
    try:
        await subject.start()
        while not go.is_set():
            await subject.step(0.1)
        mp.emit("go", stats=subject.stats())
        rng = random.Random(a.seed)
        for slice_ms in a.slice_list:
            mp.emit("phase", slice_ms=slice_ms)
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
            mp.emit("phase_end", slice_ms=slice_ms, steps=steps, stats=subject.stats())
        mp.emit("block_start", block_s=a.block_s)
        time.sleep(a.block_s)  # noqa: ASYNC251 - the point: the whole loop stops
        mp.emit("block_end")
        end = time.monotonic() + a.observe_s
        while time.monotonic() < end:
            await subject.step(0.1)
        mp.emit("observed", stats=subject.stats(), owned=sorted(tracker.owned))
        while True:
            await subject.step(0.5)
    except asyncio.CancelledError:
        mp.emit("closing")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(subject.close(), 30.0)
    mp.emit("closed")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--client", choices=CLIENTS, required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", default="hb-subject")
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument("--max-poll-ms", type=int, default=300_000)
    p.add_argument("--slices", default="0,10,50,200", help="busy slices, ms (0: idle baseline)")
    p.add_argument("--phase-s", type=float, default=20.0)
    p.add_argument(
        "--slice-jitter",
        type=float,
        default=0.5,
        help="each slice lasts S x uniform(1-j, 1+j) (0: exactly S)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--block-s", type=float, default=12.0)
    p.add_argument("--observe-s", type=float, default=8.0)
    p.add_argument("--kgroup-api", choices=("consumer", "member"), default="consumer")
    p.add_argument("--log-level", default="warning")
    a = p.parse_args(argv)
    try:
        a.slice_list = [float(x) for x in a.slices.split(",") if x.strip()]
    except ValueError:
        p.error(f"--slices must be comma-separated numbers, got {a.slices!r}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    mp.configure_logging(a.log_level)
    try:
        asyncio.run(run(a))
    except Exception as exc:
        mp.emit("error", message=repr(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
