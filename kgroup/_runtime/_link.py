"""The coordinator link: the lookup task and the connection to the group coordinator, and
the one door for requests to it. It reaches the brokers through the member's
:class:`~._transport.Transport`.

Runs on the coordinator loop (the application's loop in the default mode). The core decides
when the coordinator is known or forgotten; the link only connects, sends and reports.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from .._core._state import Coordinator
from .._errors import CoordinatorError, KGroupError, RemoteProtocolError
from ._shared import Lifecycle, Shared
from ._transport import Connection, Transport

__all__ = ["CoordinatorLink"]


class CoordinatorLink:
    """Owns the transport, the coordinator connection and the lookup."""

    def __init__(self, shared: Shared, transport: Transport) -> None:
        self._shared = shared
        self.transport = transport
        self._conn: Connection | None = None
        self._conn_for: Coordinator | None = None
        self._conn_lock = asyncio.Lock()
        self._closing: set[asyncio.Future[Any]] = set()
        self._lookup: asyncio.Task[None] | None = None

    def _closed(self) -> bool:
        return self._shared.lifecycle is Lifecycle.CLOSED

    @property
    def connection_open(self) -> Connection | None:
        """The coordinator connection if one is open (tests look at it)."""
        return self._conn

    def drop(self) -> None:
        """Close the coordinator connection (every request in flight on it fails)."""
        conn, self._conn, self._conn_for = self._conn, None, None
        if conn is not None:
            fut = conn.close()
            self._closing.add(fut)
            fut.add_done_callback(self._closing.discard)

    async def connection(self) -> Connection:
        shared = self._shared
        core = shared.core
        if core is None or shared.lifecycle is Lifecycle.CLOSED:
            raise CoordinatorError("member is closed")
        async with self._conn_lock:
            coord = core.coordinator
            if coord is None:
                raise CoordinatorError("coordinator unknown")
            conn = self._conn
            if conn is not None and self._conn_for is coord and conn.connected:
                return conn
            if conn is not None:
                self.drop()
            try:
                conn = await self.transport.connect(coord.host, coord.port)
            except CoordinatorError as exc:
                with shared.step() as core:
                    if core.coordinator is coord:
                        core.on_coordinator_unreachable(shared.now(), str(exc))
                raise
            if core.coordinator is not coord or self._closed():
                await conn.aclose()
                raise CoordinatorError("coordinator changed while connecting")
            self._conn, self._conn_for = conn, coord
            return conn

    async def request(self, request: Any, timeout_ms: float) -> Any:
        """Send one request to the group coordinator; raises ``CoordinatorError`` when it
        is unknown or unreachable and ``RemoteProtocolError`` for a malformed answer (the
        connection is dropped then)."""
        conn = await self.connection()
        return await conn.request(request, timeout_ms)

    def _ready(self) -> Connection | None:
        """The coordinator connection, if a request may be written to it right now: it is
        open and current, and nobody is connecting."""
        shared = self._shared
        core = shared.core
        conn = self._conn
        if (
            conn is None
            or core is None
            or shared.lifecycle is Lifecycle.CLOSED
            or self._conn_lock.locked()
            or self._conn_for is not core.coordinator
            or not conn.connected
        ):
            return None
        return conn

    def _start(self, request: Any, timeout_ms: float, then: str) -> tuple[Any, Any] | None:
        """Write ``request`` now through a connection that offers ``start`` and ``then``:
        (the pending request, the connection's ``then`` method), or None when the request
        must go another way (see :meth:`send_now`)."""
        conn = self._ready()
        start = getattr(conn, "start", None)
        after = getattr(conn, then, None)
        if start is None or after is None:
            return None
        try:
            return start(request, timeout_ms), after
        except KGroupError:
            return None  # request() meets the same failure and reports it

    def send_now(self, request: Any, timeout_ms: float) -> Callable[[], Awaitable[Any]] | None:
        """Write ``request`` to the coordinator before returning, when its connection is
        open and nobody is connecting (so it leaves in this loop step, not after whatever
        else is ready: a busy application loop must not delay a heartbeat or a JoinGroup by
        one more of its slices). Returns the wait for the answer, or None when the request
        must go through :meth:`request` instead. A connection offers this with
        ``start(request, timeout_ms)`` (write now) and ``finish(pending)`` (the answer)."""
        started = self._start(request, timeout_ms, "finish")
        if started is None:
            return None
        pending, finish = started
        return functools.partial(finish, pending)

    def send_watched(
        self, request: Any, timeout_ms: float, on_answer: Callable[[Any], None]
    ) -> bool:
        """As :meth:`send_now`, but the answer (or the kgroup error replacing it) goes to
        ``on_answer`` without a task, as soon as it is read (a connection offers this with
        ``watch(pending, callback)``). False when the request was not sent: the caller
        sends it another way."""
        started = self._start(request, timeout_ms, "watch")
        if started is None:
            return False
        pending, watch = started
        watch(pending, on_answer)
        return True

    def ensure_lookup(self) -> asyncio.Task[None]:
        """The running FindCoordinator lookup, started if none runs (at most one)."""
        if self._lookup is None or self._lookup.done():
            self._lookup = self._shared.tasks.spawn(self._lookup_once(), "kgroup-find-coordinator")
        return self._lookup

    async def _lookup_once(self) -> None:
        shared = self._shared
        with shared.step() as core:
            request = core.find_coordinator_request()
        try:
            response = await self.transport.find_coordinator(request)
        except (CoordinatorError, RemoteProtocolError) as exc:
            with shared.step() as core:
                core.on_find_coordinator_failed(shared.now(), str(exc))
            return
        except KGroupError as exc:
            with shared.step() as core:
                core.record_fatal(exc)
            return
        with shared.step() as core:
            core.on_find_coordinator_response(response, shared.now())

    async def aclose(self) -> None:
        """Close the coordinator connection and the transport."""
        self.drop()
        await self.transport.aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
