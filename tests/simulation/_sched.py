"""The world's virtual time: a seeded scheduler and the futures of simulated I/O.

Time is in milliseconds. Events at equal times run in the order they were scheduled, so a
schedule is a pure function of its seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Failure", "Future", "Handle", "Scheduler"]


class Handle:
    __slots__ = ("args", "cancelled", "fn")

    def __init__(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """Virtual time in milliseconds; events at equal times run in scheduling order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Handle]] = []
        self._seq = 0
        self.events = 0

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> Handle:
        handle = Handle(fn, args)
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.now), self._seq, handle))
        return handle

    def run_until(self, end: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= end:
            when, _, handle = heapq.heappop(heap)
            if handle.cancelled:
                continue
            self.now = when
            self.events += 1
            handle.fn(*handle.args)
        self.now = max(self.now, end)


class Future:
    """The outcome of one simulated network operation (a value or a :class:`Failure`)."""

    __slots__ = ("_callbacks", "done", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self._callbacks: list[Callable[[Any], None]] | None = None

    def set(self, value: Any = None) -> None:
        if self.done:
            return
        self.done = True
        self.value = value
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                callback(value)

    def on_done(self, callback: Callable[[Any], None]) -> None:
        if self.done:
            callback(self.value)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)


@dataclass(frozen=True, slots=True)
class Failure:
    """A transport failure (what the member's transport reports as CoordinatorError)."""

    reason: str
