"""An asyncio event loop on a virtual clock, for driving members in tests without waiting.

When nothing is ready to run, :class:`VirtualTimeLoop` moves its clock straight to the
next timer instead of sleeping, so a test of a 45-second session timeout takes
milliseconds. With :class:`~kgroup.testing.MockTransport` (which never touches a socket),
the real :class:`~kgroup.GroupMember` runs on it unchanged::

    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(scenario())  # heartbeats, timeouts and sleeps: instant
    finally:
        loop.close()

The clock counts whole microseconds and moves at least one forward whenever it jumps, so
a wait can never spin at one instant.
A loop with nothing ready and no timer can never make progress: it raises
``RuntimeError`` instead of hanging. It has no I/O: a real socket or a thread that calls
``call_soon_threadsafe`` cannot be used on it.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

__all__ = ["VirtualTimeLoop"]


class _Jump:
    """The selector: instead of waiting ``timeout`` seconds, move the clock forward."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise RuntimeError(
                "VirtualTimeLoop: nothing is ready and no timer is pending; the awaited "
                "work can never finish (a deadlock, or a wait on real I/O)"
            )
        if timeout > 0:
            self._loop._advance(timeout)
        return []

    def close(self) -> None:
        pass


class VirtualTimeLoop(asyncio.BaseEventLoop):
    """An asyncio event loop whose ``time()`` is virtual (see the module docstring).

    ``start``: the clock's first reading, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._ticks = math.ceil(start * 1e6)
        self._selector = _Jump(self)

    def time(self) -> float:
        return self._ticks / 1e6

    def _advance(self, seconds: float) -> None:
        # To the nearest microsecond (3.1 s + 0.2 s is 3.3 s, not 3.300001 s), and at least
        # one: a timer a hair past a tick fires one tick later, never in a spin.
        when = self.time() + seconds
        self._ticks = max(self._ticks + 1, round(when * 1e6))

    def _process_events(self, event_list: Any) -> None:
        pass

    def _write_to_self(self) -> None:
        pass
