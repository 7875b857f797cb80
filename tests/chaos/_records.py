"""Records through a chaos run (a schedule with ``records``): the stream the runner produces,
and invariant 5 over what the GroupConsumers processed and committed.

Invariant 5 (at least once, and never below a commit): every record the broker acknowledged
to the producer is processed by some member; and no member processes a record below an
offset that was committed, and whose commit had returned to its member, before the
processing member's hold of the partition began (its ``assigned`` line). A record may be
processed twice only when its earlier processing was never covered by a commit that
returned before the partition moved on: a crash, a lost partition, a failed commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer

__all__ = ["RecordLedger", "RecordStream"]

#: One record every this many seconds, the partitions in turn.
PRODUCE_EVERY = 0.04


class RecordStream:
    """The records the runner produces through the run (directly to the broker, never
    through the proxy): one every :data:`PRODUCE_EVERY` seconds, partitions in turn, each
    awaited. ``acked`` has the offsets the broker acknowledged, per partition; a send that
    fails (the broker restarting) is counted and not retried (if it was written after all,
    its record is processed as any other, unchecked)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[int, set[int]] = defaultdict(set)
        self.failed_sends = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.acked.values())

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", request_timeout_ms=5_000, linger_ms=0
        )
        await producer.start()
        self._task = asyncio.get_running_loop().create_task(
            self._run(producer), name="chaos-record-stream"
        )

    async def _run(self, producer: AIOKafkaProducer) -> None:
        try:
            i = 0
            while not self._stop.is_set():
                partition = i % self.partitions
                try:
                    meta = await producer.send_and_wait(
                        self.topic, value=str(i).encode(), partition=partition
                    )
                except Exception:  # the broker restarting, a timeout: counted, not retried
                    self.failed_sends += 1
                    await asyncio.sleep(0.2)
                else:
                    self.acked[meta.partition].add(meta.offset)
                i += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), PRODUCE_EVERY)
        finally:
            await producer.stop()

    async def stop(self) -> None:
        """Stop producing; returns once the producer is closed."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            await task


@dataclass
class _Line:
    t: float
    proc: str
    kind: str  # assigned / records / committed
    partitions: tuple[int, ...] = ()
    first: int = 0
    last: int = 0


@dataclass
class RecordLedger:
    """What the GroupConsumers reported: holds begun, batches processed, commits returned."""

    lines: list[_Line] = field(default_factory=list)
    processed: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    commits: int = 0
    failed_commits: int = 0
    batches: int = 0
    #: records handed to the application, a record processed twice counted twice
    handled: int = 0

    @property
    def repeats(self) -> int:
        """Processings beyond the first (the duplicates at least once allowed)."""
        return self.handled - sum(len(v) for v in self.processed.values())

    def assigned(self, proc: str, t: float, partitions: list[int]) -> None:
        self.lines.append(_Line(t, proc, "assigned", tuple(partitions)))

    def records(self, proc: str, t: float, partition: int, first: int, last: int) -> None:
        self.batches += 1
        self.handled += last - first + 1
        self.processed[partition].update(range(first, last + 1))
        self.lines.append(_Line(t, proc, "records", (partition,), first, last))

    def committed(self, proc: str, t: float, partition: int, offset: int) -> None:
        self.commits += 1
        self.lines.append(_Line(t, proc, "committed", (partition,), offset))

    def missing(self, acked: dict[int, set[int]]) -> dict[int, list[int]]:
        """Acknowledged records no member processed, per partition (sorted)."""
        out = {}
        for partition, offsets in acked.items():
            lost = sorted(offsets - self.processed.get(partition, set()))
            if lost:
                out[partition] = lost
        return out

    def duplicates_below_commits(self) -> list[str]:
        """Every batch processed (in part) below an offset committed before its member's hold
        began: one description each."""
        found: list[str] = []
        committed: dict[int, tuple[int, str, float]] = {}  # partition -> (offset, by, at)
        floor: dict[tuple[str, int], tuple[int, str, float] | None] = {}
        for line in sorted(self.lines, key=lambda x: x.t):
            if line.kind == "assigned":
                for p in line.partitions:
                    floor[(line.proc, p)] = committed.get(p)
            elif line.kind == "committed":
                p = line.partitions[0]
                if line.first > committed.get(p, (-1, "", 0.0))[0]:
                    committed[p] = (line.first, line.proc, line.t)
            else:
                p = line.partitions[0]
                below = floor.get((line.proc, p))
                if below is not None and line.first < below[0]:
                    offset, by, at = below
                    found.append(
                        f"{line.proc} processed partition {p} offsets {line.first}..{line.last}"
                        f" at {line.t:.3f}, below offset {offset} that {by} had committed at "
                        f"{at:.3f}, before this hold began"
                    )
        return found
