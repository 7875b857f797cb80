"""The event log's writer: a bounded queue drained by a thread of its own.

Theory of operation. :meth:`QueueWriter.put` is what the member's loop calls: it takes a
lock, appends the record and (when the thread sleeps) wakes the thread, or, when the queue
holds ``capacity`` records already, counts the record as dropped. It never blocks on I/O
and never raises. The thread takes everything queued at once, numbers the lines (``seq``,
one counter per member stream), serialises them and hands them to the sink in chunks.

A sink that raises (a full disk, a closed stream) costs the log, never the member: the
lines of the failed chunk and the rest of its batch are dropped and counted, their
numbers are given out again (a file's ``seq`` stays contiguous), the failure is logged
once (``eventlog.write_failed``) until a write succeeds again. Whenever records were
dropped, for a full queue or a failed write, the next write carries one
``eventlog.dropped`` line per member stream saying how many (and ``eventlog.recovered``
is logged). So every loss is in the log itself, where the pipeline reads it.

Closing: the member queues its last record (``eventlog.stopped``, which a full queue
never refuses) and calls :meth:`close`; the thread writes what is queued, closes the sink
and ends. :meth:`wait_closed` waits for that without blocking the event loop.

Who touches what: ``_queue``, ``_lost``, ``_waiting``, ``_closing``, ``_overflowing``,
``dropped`` under ``_cond``; ``_seq``, ``_failing`` and the sink only in the thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .._log import logger
from ._record import MemberContext, Record, to_line
from ._sinks import Sink

__all__ = ["DEFAULT_CAPACITY", "EventLogWriter", "Line", "QueueWriter"]

#: Records a writer holds while its sink is slow; past it they are dropped and counted.
DEFAULT_CAPACITY = 10_000


class Line:
    """One serialised line of a batch: its stream, number and text. ``told`` is the count
    an ``eventlog.dropped`` line carries (0 for any other line)."""

    __slots__ = ("context", "seq", "text", "told")

    def __init__(self, context: MemberContext, seq: int, text: str, told: int = 0) -> None:
        self.context = context
        self.seq = seq
        self.text = text
        self.told = told

    @property
    def weight(self) -> int:
        """How many drops are still to be told if this line is lost: the ones an
        ``eventlog.dropped`` line tells of, or the one event any other line is."""
        return self.told or 1


class QueueWriter:
    """The queue, the numbering and the drop accounting; subclasses drain the queue to
    their destination in :meth:`_run` (see the module docstring)."""

    #: The thread's name prefix.
    kind = "kgroup-eventlog"

    def __init__(self, *, capacity: int = DEFAULT_CAPACITY, label: str = "") -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._label = label
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Record] = deque()
        self._waiting = False
        self._closing = False
        self._overflowing = False
        #: Drops not yet told in the log: member_uid -> (context, count).
        self._lost: dict[str, tuple[MemberContext, int]] = {}
        #: Events dropped in total (queue full, failed writes).
        self.dropped = 0
        #: Lines written (sent, for a topic).
        self.written = 0
        self._seq: dict[str, int] = {}
        self._failing = False
        self._thread: threading.Thread | None = None
        self._exited = False
        self._on_exit: list[Callable[[], None]] = []

    # -- what the member's side calls ------------------------------------------------------------

    @property
    def name(self) -> str:
        """The destination, as reports name it."""
        raise NotImplementedError

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is not None:
            return
        thread = threading.Thread(
            target=self._main, name=f"{self.kind}-{self._label}".rstrip("-"), daemon=True
        )
        self._thread = thread
        thread.start()

    def put(self, record: Record, *, force: bool = False) -> bool:
        """Queue ``record``; False when it was dropped (queue full, or the writer closed).
        ``force`` ignores the capacity (the last record before close)."""
        report = False
        with self._cond:
            if not self._closing and (force or len(self._queue) < self._capacity):
                self._queue.append(record)
                if self._waiting:
                    self._waiting = False
                    self._wake()
                return True
            self._count_lost(record.context, 1)
            if not self._overflowing and not self._closing:
                self._overflowing = report = True
        if report:
            logger.warning(
                "eventlog.overflow",
                group=record.context.group,
                sink=self.name,
                capacity=self._capacity,
            )
        return False

    def close(self) -> None:
        """Let the thread write what is queued, close the destination and end."""
        with self._cond:
            self._closing = True
            if self._waiting:
                self._waiting = False
                self._wake()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the thread ended (after :meth:`close`); False on timeout."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    async def wait_closed(self, timeout: float) -> bool:
        """Wait (without blocking the loop) until the thread ended, at most ``timeout``
        seconds; False when it did not."""
        thread = self._thread
        if thread is None:
            return True
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def exited() -> None:
            try:
                loop.call_soon_threadsafe(_resolve, done)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        self._add_exit_callback(exited)
        try:
            async with asyncio.timeout(timeout):
                await done
        except TimeoutError:
            return False
        thread.join()  # it has run its exit callbacks: only the return is left
        return True

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def pending(self) -> int:
        """Records queued and not yet taken by the thread."""
        with self._cond:
            return len(self._queue)

    # -- the thread's side ----------------------------------------------------------------------

    def _wake(self) -> None:
        """Wake the sleeping thread (called under ``_cond``)."""
        self._cond.notify()

    def _count_lost(self, context: MemberContext, count: int, *, new: bool = True) -> None:
        """Under ``_cond``: ``count`` drops to tell (``new``: not counted before)."""
        if new:
            self.dropped += count
        known = self._lost.get(context.member_uid)
        self._lost[context.member_uid] = (context, count + (known[1] if known else 0))

    def _lose(self, lines: list[Line]) -> None:
        """Count ``lines`` as dropped (thread)."""
        if not lines:
            return
        with self._cond:
            for line in lines:
                # A lost eventlog.dropped line: its drops were counted when they happened.
                self._count_lost(line.context, line.weight, new=not line.told)

    def _take(self) -> tuple[list[Record], dict[str, tuple[MemberContext, int]], bool] | None:
        """Everything queued, the drops to tell, and whether the writer closes; None when
        the thread must sleep first (then ``_waiting`` is set). Under no lock."""
        with self._cond:
            # Drops alone do not wake the thread: a sink that keeps failing would be
            # retried in a busy loop. They are told with the next record.
            if not self._queue and not self._closing:
                self._waiting = True
                return None
            batch = list(self._queue)
            self._queue.clear()
            lost, self._lost = self._lost, {}
            return batch, lost, self._closing

    def _sleep(self) -> None:
        """Sync threads: wait until woken (``_waiting`` was set by :meth:`_take`)."""
        with self._cond:
            while self._waiting:
                self._cond.wait()

    def _render(
        self, batch: list[Record], lost: dict[str, tuple[MemberContext, int]], now_ns: int
    ) -> list[Line]:
        """The batch's lines, numbered in order.

        Drops still to tell get one ``eventlog.dropped`` line per stream after the batch's
        records (a queue overflows only after everything queued was recorded, and a
        failed write lost older lines still), stamped now; but before that stream's
        ``eventlog.stopped``, which stays last. So ``ts`` never goes back in a stream. A
        record that cannot be serialised is dropped, and an ``eventlog.dropped`` line takes
        its place."""
        items: list[tuple[Record, int]] = [(record, 0) for record in batch]
        for context, count in lost.values():
            uid = context.member_uid
            at = len(items)
            for i, (record, _) in enumerate(items):
                if record.context.member_uid == uid and record.event == "eventlog.stopped":
                    at = i
                    break
            latest = max((r.ts_ns for r, _ in items[:at] if r.context.member_uid == uid), default=0)
            ts = items[at][0].ts_ns if at < len(items) else max(now_ns, latest)
            drop = Record(ts, context, "eventlog.dropped", {}, {"dropped": count})
            items.insert(at, (drop, count))
        lines: list[Line] = []
        failed = 0
        for record, told in items:
            try:
                lines.append(self._line(record, told))
            except Exception as exc:  # a field no JSON can hold: lose the event, not the log
                failed += 1
                with self._cond:
                    self.dropped += 1
                lines.append(self._dropped_line(record.ts_ns, record.context, 1))
                if failed == 1:
                    logger.warning(
                        "eventlog.write_failed",
                        group=record.context.group,
                        sink=self.name,
                        error=f"cannot serialise {record.event}: {exc!r}",
                    )
        return lines

    def _dropped_line(self, ts_ns: int, context: MemberContext, count: int) -> Line:
        record = Record(ts_ns, context, "eventlog.dropped", {}, {"dropped": count})
        return self._line(record, count)

    def _line(self, record: Record, told: int) -> Line:
        uid = record.context.member_uid
        seq = self._seq.get(uid, 0)
        text = json.dumps(
            to_line(record, seq), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
        self._seq[uid] = seq + 1
        return Line(record.context, seq, text + "\n", told)

    def _rewind(self, lines: list[Line]) -> None:
        """``lines`` were not written: give their numbers out again."""
        for line in reversed(lines):
            self._seq[line.context.member_uid] = line.seq

    def _failed(self, group: str, exc: BaseException) -> None:
        """A write failed: log it once per outage."""
        if self._failing:
            return
        self._failing = True
        logger.warning("eventlog.write_failed", group=group, sink=self.name, error=repr(exc))

    def _written(self, lines: list[Line]) -> None:
        """``lines`` were written: if they told drops, the outage is over."""
        self.written += len(lines)
        self._failing = False
        told = sum(line.told for line in lines)
        if told:
            with self._cond:
                self._overflowing = False
            logger.info(
                "eventlog.recovered",
                group=lines[0].context.group,
                sink=self.name,
                dropped=told,
            )

    def _main(self) -> None:
        try:
            self._run()
        finally:
            with self._cond:
                for record in self._queue:  # never written: counted
                    self._count_lost(record.context, 1)
                self._queue.clear()
                self._closing = True  # put() refuses (and counts) from now on
                self._exited = True
                callbacks, self._on_exit = self._on_exit, []
            for callback in callbacks:
                callback()

    def _add_exit_callback(self, callback: Callable[[], None]) -> None:
        with self._cond:
            if not self._exited:
                self._on_exit.append(callback)
                return
        callback()

    def _run(self) -> None:
        raise NotImplementedError


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


class EventLogWriter(QueueWriter):
    """A :class:`QueueWriter` whose thread writes to a :class:`~._sinks.Sink` (a directory
    or a stream), synchronously, in chunks of whole lines."""

    def __init__(self, sink: Sink, *, capacity: int = DEFAULT_CAPACITY, label: str = "") -> None:
        super().__init__(capacity=capacity, label=label)
        self.sink = sink

    @property
    def name(self) -> str:
        return self.sink.name

    def _run(self) -> None:
        try:
            while True:
                taken = self._take()
                if taken is None:
                    self._sleep()
                    continue
                batch, lost, closing = taken
                self._write(self._render(batch, lost, time.time_ns()))
                if closing:
                    with self._cond:
                        if not self._queue:
                            return
        finally:
            self.sink.close()

    def _write(self, lines: list[Line]) -> None:
        """Write ``lines`` in chunks; on the first failure drop the rest (see the module
        docstring)."""
        limit = self.sink.chunk_bytes
        start = 0
        while start < len(lines):
            end = start + 1
            size = len(lines[start].text)
            while end < len(lines) and size + len(lines[end].text) <= limit:
                size += len(lines[end].text)
                end += 1
            chunk = lines[start:end]
            try:
                self.sink.write("".join(line.text for line in chunk))
            except Exception as exc:
                rest = lines[start:]
                self._rewind(rest)
                self._lose(rest)
                self._failed(chunk[0].context.group, exc)
                return
            self._written(chunk)
            start = end
