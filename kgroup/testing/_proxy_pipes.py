"""The forwarding inside :class:`~kgroup.testing.FaultProxy`: one proxied connection and its
two pipes, each applying the faults of its direction to the bytes it forwards."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import socket
import struct
from typing import Any

__all__ = ["Faults", "Pipe", "ProxyConnection", "reset_abruptly"]

_CHUNK = 64 * 1024
# Bytes one direction of one connection may hold (stalled or delayed) before the proxy
# stops reading from the sender, which then feels TCP backpressure.
_BUFFER_LIMIT = 4 * 1024 * 1024
_LINGER_RST = struct.pack("ii", 1, 0)


def reset_abruptly(writer: asyncio.StreamWriter) -> None:
    """Close a connection abruptly: SO_LINGER 0 makes the close send RST, not FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


class Faults:
    """The faults of one direction (only touched on the proxy's loop once it runs)."""

    def __init__(self) -> None:
        self.latency = 0.0
        self.jitter = 0.0
        self.black_hole = False
        self.stalled = False

    def clear(self) -> None:
        self.latency = self.jitter = 0.0
        self.black_hole = self.stalled = False


class Pipe:
    """One direction of one connection: a read task queues chunks, a write task sends
    them when they are due and the direction is not stalled. ``None`` queues EOF."""

    def __init__(
        self,
        direction: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        faults: Faults,
        forwarded: dict[str, int],
        dropped: dict[str, int],
    ) -> None:
        self.direction = direction
        self.faults = faults  # this direction's, changed in place by the proxy
        self.forwarded = forwarded  # the proxy's byte counters, by direction
        self.dropped = dropped
        self.reader = reader
        self.writer = writer
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.buffered = 0
        self.last_due = 0.0
        self.changed = asyncio.Event()  # for the write task: new chunk or fault change
        self.space = asyncio.Event()  # for the read task: buffer below the limit

    def wake(self) -> None:
        self.changed.set()

    def release(self) -> None:
        """Make every queued chunk due now (heal)."""
        self.queue = collections.deque((0.0, data) for _, data in self.queue)
        self.last_due = 0.0
        self.changed.set()

    async def read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self.buffered >= _BUFFER_LIMIT:
                self.space.clear()
                await self.space.wait()
            data = await self.reader.read(_CHUNK)
            if not data:
                self.queue.append((loop.time(), None))
                self.changed.set()
                return
            faults = self.faults
            if faults.black_hole:
                self.dropped[self.direction] += len(data)
                continue
            delay = faults.latency
            if faults.jitter > 0:
                delay += random.uniform(0.0, faults.jitter)
            due = max(loop.time() + delay, self.last_due)
            self.last_due = due
            self.queue.append((due, data))
            self.buffered += len(data)
            self.changed.set()

    async def _wait(self, timeout: float | None) -> None:
        self.changed.clear()
        if timeout is None:
            await self.changed.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.changed.wait()

    async def write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.queue:
                await self._wait(None)
                continue
            due, data = self.queue[0]
            faults = self.faults
            if faults.stalled or (data is None and faults.black_hole):
                await self._wait(None)  # a FIN is held (as if retransmitted) until it heals
                continue
            left = due - loop.time()
            if left > 0:
                await self._wait(left)
                continue
            self.queue.popleft()
            if data is None:
                if self.writer.can_write_eof():
                    with contextlib.suppress(OSError):
                        self.writer.write_eof()
                return
            self.buffered -= len(data)
            self.space.set()
            self.writer.write(data)
            await self.writer.drain()
            self.forwarded[self.direction] += len(data)


class ProxyConnection:
    """A proxied connection: the accepted socket (until a stream owns it), the client's
    and the upstream streams, the pipes and the task that runs them."""

    def __init__(self, sock: socket.socket, peer: Any) -> None:
        self.sock: socket.socket | None = sock
        self.peer: tuple[str, int] = (str(peer[0]), int(peer[1]))
        self.writers: list[asyncio.StreamWriter] = []
        self.pipes: list[Pipe] = []
        self.task: asyncio.Task[None] | None = None
        self.aborted = False

    def reset(self) -> None:
        """RST both sides now; queued bytes are dropped."""
        self.aborted = True
        for writer in self.writers:
            reset_abruptly(writer)

    def close(self) -> None:
        """Close both sides gracefully (after what is still buffered)."""
        for writer in self.writers:
            writer.close()

    def drop_socket(self) -> None:
        """Close the accepted socket if no stream took it over (the task was cancelled
        before or while wrapping it). A no-op when a transport already closed it."""
        sock, self.sock = self.sock, None
        if sock is not None:
            if self.aborted:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
            sock.close()
