"""A fault-injecting TCP proxy for tests (:class:`FaultProxy`: latency, black holes, stalls,
resets, refusals), and :class:`ProxiedBroker`, a broker paired with the proxy in front of it."""

# :class:`FaultProxy` listens on a loopback port and forwards every connection to an
# upstream address (a broker listener). Faults can be switched on and off while connections
# are open:
#
# * :meth:`~FaultProxy.add_latency`: every chunk is delivered ``seconds`` (plus up to
#   ``jitter``) after it arrived, in order.
# * :meth:`~FaultProxy.black_hole`: connections stay open but the bytes vanish.
# * :meth:`~FaultProxy.stall`: the bytes are held back and delivered, in order, on heal.
# * :meth:`~FaultProxy.cut`: every current connection is reset (RST) at once.
# * :meth:`~FaultProxy.refuse`: the listening socket is closed, so new connects fail with
#   ECONNREFUSED; allowing them again binds the same port.
# * :meth:`~FaultProxy.heal`: everything back to normal, stalled bytes released.
#
# The proxy is asyncio inside but runs its own event loop in a daemon thread that it owns
# and joins on :meth:`~FaultProxy.close`. It therefore keeps forwarding while a test blocks
# its own loop, and it serves sync tests and subprocess clients alike. Every public method
# is synchronous and thread-safe: it hands the change to the proxy's loop and waits until
# it has been applied, so it can be called from sync and async code. The forwarding itself
# (connections, pipes) is in ``_proxy_pipes``.
#
# :class:`ProxiedBroker` pairs a broker with the proxy its clients go through (what the
# ``proxied_kafka`` / ``proxied_tansu`` fixtures return).

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from ._ports import LOOPBACK, Broker
from ._proxy_pipes import Faults, Pipe, ProxyConnection

__all__ = ["Direction", "FaultProxy", "ProxiedBroker"]

_T = TypeVar("_T")
_B = TypeVar("_B", bound=Broker)

#: ``"upstream"`` is client → broker, ``"downstream"`` broker → client.
Direction = Literal["upstream", "downstream", "both"]
_DIRECTIONS: tuple[str, str] = ("upstream", "downstream")

_CONNECT_TIMEOUT = 10.0
_CALL_TIMEOUT = 10.0


def _directions(direction: Direction) -> tuple[str, ...]:
    if direction == "both":
        return _DIRECTIONS
    if direction in _DIRECTIONS:
        return (str(direction),)
    raise ValueError(f"direction must be 'upstream', 'downstream' or 'both', not {direction!r}")


class FaultProxy:
    """A TCP proxy on ``host`` (default loopback) that forwards to ``upstream`` and injects
    faults on demand. ``port=0`` picks a free port (known as :attr:`port` after
    :meth:`start`).

    Use as a context manager, or call :meth:`start` and :meth:`close`. Every fault method
    takes ``direction``: ``"upstream"`` (client → broker), ``"downstream"`` (broker →
    client) or ``"both"`` (the default). Faults apply to bytes as they arrive at the proxy:
    bytes already queued (delayed) when a black hole starts are still delivered. A FIN is
    held back by a black hole or stall like data; a reset from either end is passed on at
    once (the other side is reset too), whatever the faults.
    """

    def __init__(
        self,
        upstream: tuple[str, int] | None = None,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        name: str = "proxy",
    ) -> None:
        self.name = name
        self.host = host
        self._wanted_port = port
        self._port: int | None = None
        self._upstream = upstream
        self._faults: dict[str, Faults] = {d: Faults() for d in _DIRECTIONS}
        self._refusing = False
        self._forwarded: dict[str, int] = dict.fromkeys(_DIRECTIONS, 0)
        self._dropped: dict[str, int] = dict.fromkeys(_DIRECTIONS, 0)
        self._accepted = 0
        self._conns: set[ProxyConnection] = set()
        self._lock = threading.Lock()  # start/close
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._listener: socket.socket | None = None

    # --- addresses ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The listening port (the same one across :meth:`refuse` and back)."""
        if self._port is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._port

    @property
    def address(self) -> str:
        """``"HOST:PORT"`` of the proxy, e.g. for ``bootstrap_servers``."""
        return f"{self.host}:{self.port}"

    @property
    def upstream(self) -> tuple[str, int] | None:
        """Where new connections are forwarded to."""
        return self._upstream

    def set_upstream(self, host: str, port: int) -> None:
        """Forward new connections to ``host:port`` (current ones stay where they are)."""
        self._upstream = (host, port)

    @property
    def running(self) -> bool:
        """Whether the proxy's thread and loop are up."""
        return self._thread is not None and self._thread.is_alive()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Bind the port and start forwarding in a background thread; returns ``self``.
        Does nothing if already running."""
        with self._lock:
            if self.running:
                return self
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            thread = threading.Thread(
                target=self._thread_main, args=(ready,), name=f"kgroup-{self.name}", daemon=True
            )
            thread.start()
            try:
                ready.result(timeout=_CALL_TIMEOUT)
            except BaseException:
                thread.join(timeout=_CALL_TIMEOUT)
                raise
            self._thread = thread
            return self

    def close(self) -> None:
        """Reset every connection, close the listening socket and join the thread.
        Idempotent; afterwards no thread, socket or task is left."""
        with self._lock:
            thread, loop, stop = self._thread, self._loop, self._stop
            if thread is None:
                return
            if loop is not None and stop is not None:
                with contextlib.suppress(RuntimeError):  # loop already gone
                    loop.call_soon_threadsafe(stop.set)
            thread.join(timeout=30.0)
            if thread.is_alive():  # pragma: no cover - a wedged loop
                raise RuntimeError(f"{self.name}: proxy thread did not stop")
            self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _thread_main(self, ready: concurrent.futures.Future[None]) -> None:
        try:
            asyncio.run(self._main(ready))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:  # pragma: no cover - a bug in the proxy itself
                raise
        finally:
            self._loop = None
            self._stop = None

    async def _main(self, ready: concurrent.futures.Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._listen()
        if self._refusing:
            self._unlisten()
        ready.set_result(None)
        try:
            await self._stop.wait()
        finally:
            self._unlisten()
            await self._reset_all()
            await asyncio.sleep(0)  # let aborted transports close their sockets

    def _listen(self) -> None:
        """Bind and listen (on the loop thread); the port stays the same once known."""
        port = self._port if self._port is not None else self._wanted_port
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, port))
            sock.listen(128)
            sock.setblocking(False)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept_ready)
        except BaseException:
            sock.close()
            raise
        self._port = int(sock.getsockname()[1])
        self._listener = sock

    def _unlisten(self) -> None:
        """Close the listening socket (connects get ECONNREFUSED); connections stay,
        including those still in the backlog, which are accepted first."""
        if self._listener is not None:
            self._accept_ready()
        sock, self._listener = self._listener, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()

    async def _reset_all(self) -> None:
        conns = list(self._conns)
        for conn in conns:
            conn.reset()
            if conn.task is not None:
                conn.task.cancel()
        tasks = [c.task for c in conns if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=_CALL_TIMEOUT)

    # --- forwarding ---------------------------------------------------------------------

    def _accept_ready(self) -> None:
        # The listening socket is ours (not an asyncio.Server), so closing it in refuse()
        # cannot race with an accept that asyncio has half done.
        loop = asyncio.get_running_loop()
        while True:
            listener = self._listener
            if listener is None:
                return
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ECONNABORTED, EMFILE, ...: try again on the next wakeup
                return
            sock.setblocking(False)
            conn = ProxyConnection(sock, peer)
            self._conns.add(conn)
            self._accepted += 1
            conn.task = loop.create_task(self._forward(conn), name=f"{self.name}-{peer[1]}")
            conn.task.add_done_callback(functools.partial(self._finished, conn))

    def _pipe(
        self, direction: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Pipe:
        return Pipe(
            direction,
            reader,
            writer,
            faults=self._faults[direction],
            forwarded=self._forwarded,
            dropped=self._dropped,
        )

    def _finished(self, conn: ProxyConnection, task: asyncio.Task[None]) -> None:
        conn.drop_socket()
        self._conns.discard(conn)

    async def _forward(self, conn: ProxyConnection) -> None:
        tasks: list[asyncio.Task[None]] = []
        failed = False
        try:
            assert conn.sock is not None
            client_reader, client_writer = await asyncio.open_connection(sock=conn.sock)
            conn.sock = None  # the transport owns it now
            conn.writers.append(client_writer)
            upstream = self._upstream
            if upstream is None:
                failed = True
                return
            try:
                async with asyncio.timeout(_CONNECT_TIMEOUT):
                    server_reader, server_writer = await asyncio.open_connection(*upstream)
            except (OSError, TimeoutError):
                failed = True  # the client sees a reset, as if the upstream refused
                return
            conn.writers.append(server_writer)
            conn.pipes = [
                self._pipe("upstream", client_reader, server_writer),
                self._pipe("downstream", server_reader, client_writer),
            ]
            for pipe in conn.pipes:
                tasks.append(asyncio.create_task(pipe.read_loop()))
                tasks.append(asyncio.create_task(pipe.write_loop()))
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = any(not t.cancelled() and t.exception() is not None for t in done)
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if failed or conn.aborted:
                conn.reset()
            else:
                conn.close()

    # --- calling into the loop ----------------------------------------------------------

    def _on_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _call(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the proxy's loop and return its result (directly when the proxy
        is not running, or when called from the loop itself)."""
        loop = self._loop
        if loop is None or not self.running or self._on_loop_thread():
            return fn()
        done: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # pragma: no cover - handed to the caller
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result(timeout=_CALL_TIMEOUT)

    def _call_async(self, factory: Callable[[], Awaitable[_T]]) -> _T | None:
        """Run the coroutine from ``factory`` on the proxy's loop and wait for it. Returns
        None without running it when the proxy is not running."""
        loop = self._loop
        if loop is None or not self.running:
            return None
        if self._on_loop_thread():
            raise RuntimeError(f"{self.name}: cannot wait for the proxy from its own loop")

        async def run() -> _T:
            return await factory()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=_CALL_TIMEOUT)

    def _wake_all(self) -> None:
        for conn in self._conns:
            for pipe in conn.pipes:
                pipe.wake()

    # --- faults -------------------------------------------------------------------------

    def add_latency(
        self, seconds: float, *, jitter: float = 0.0, direction: Direction = "both"
    ) -> None:
        """Deliver every chunk that arrives from now on ``seconds`` later, plus a random
        extra of up to ``jitter`` seconds; order is kept. ``add_latency(0)`` removes it."""
        if seconds < 0 or jitter < 0:
            raise ValueError("latency and jitter must be >= 0")
        names = _directions(direction)

        def apply() -> None:
            for d in names:
                self._faults[d].latency = seconds
                self._faults[d].jitter = jitter
            self._wake_all()

        self._call(apply)

    def black_hole(self, direction: Direction = "both") -> None:
        """Silently discard every byte that arrives from now on in ``direction``;
        connections stay open (a FIN is held back until heal). Undone by :meth:`heal`."""
        names = _directions(direction)

        def apply() -> None:
            for d in names:
                self._faults[d].black_hole = True
            self._wake_all()

        self._call(apply)

    def stall(self, direction: Direction = "both") -> None:
        """Hold back every byte in ``direction`` (connections stay open); :meth:`heal`
        delivers them in order. Past a few MiB per connection the sender is throttled."""
        names = _directions(direction)

        def apply() -> None:
            for d in names:
                self._faults[d].stalled = True
            self._wake_all()

        self._call(apply)

    def cut(self) -> None:
        """Reset every current connection (RST both ways, queued bytes dropped). Returns
        once they are gone; new connections are accepted as usual."""
        self._call_async(self._reset_all)

    def refuse(self, refusing: bool = True) -> None:
        """``refuse(True)`` closes the listening socket: new connects fail with
        ECONNREFUSED while current connections go on. ``refuse(False)`` binds the same
        port again."""

        def apply() -> None:
            self._refusing = refusing
            if not self._on_loop_thread():
                return  # not running: start() honours the flag
            if refusing:
                self._unlisten()
            elif self._listener is None:
                self._listen()

        self._call(apply)

    def heal(self) -> None:
        """Clear every fault: no latency, black hole, stall or refusal; stalled and delayed
        bytes are released at once, in order."""

        def apply() -> None:
            self._refusing = False
            for faults in self._faults.values():
                faults.clear()
            for conn in self._conns:
                for pipe in conn.pipes:
                    pipe.release()
            if self._on_loop_thread() and self._listener is None:
                self._listen()

        self._call(apply)

    # --- observation --------------------------------------------------------------------

    @property
    def refusing(self) -> bool:
        """Whether new connections are being refused."""
        return self._refusing

    @property
    def connections(self) -> int:
        """How many connections are open through the proxy right now."""
        return len(self._conns)

    @property
    def accepted(self) -> int:
        """How many connections the proxy accepted (since start or :meth:`reset_counters`)."""
        return self._accepted

    @property
    def bytes_upstream(self) -> int:
        """Bytes forwarded client → upstream (since :meth:`reset_counters`)."""
        return self._forwarded["upstream"]

    @property
    def bytes_downstream(self) -> int:
        """Bytes forwarded upstream → client (since :meth:`reset_counters`)."""
        return self._forwarded["downstream"]

    @property
    def dropped_upstream(self) -> int:
        """Bytes a black hole discarded client → upstream."""
        return self._dropped["upstream"]

    @property
    def dropped_downstream(self) -> int:
        """Bytes a black hole discarded upstream → client."""
        return self._dropped["downstream"]

    def held_bytes(self, direction: Direction = "both") -> int:
        """Bytes the proxy holds right now in ``direction``: stalled, or delayed by latency."""
        names = _directions(direction)
        return self._call(
            lambda: sum(p.buffered for c in self._conns for p in c.pipes if p.direction in names)
        )

    def peers(self) -> list[tuple[str, int]]:
        """The client-side ``(host, port)`` of every open connection."""
        return self._call(lambda: [c.peer for c in self._conns])

    def stats(self) -> dict[str, Any]:
        """All counters and the current faults in one dict (for logs and failures)."""

        def collect() -> dict[str, Any]:
            return {
                "connections": len(self._conns),
                "accepted": self._accepted,
                "forwarded": dict(self._forwarded),
                "dropped": dict(self._dropped),
                "held": {
                    d: sum(p.buffered for c in self._conns for p in c.pipes if p.direction == d)
                    for d in _DIRECTIONS
                },
                "refusing": self._refusing,
                "faults": {d: dict(vars(f)) for d, f in self._faults.items()},
            }

        return self._call(collect)

    def reset_counters(self) -> None:
        """Set :attr:`accepted` and the byte counters back to zero."""

        def apply() -> None:
            self._accepted = 0
            for d in _DIRECTIONS:
                self._forwarded[d] = 0
                self._dropped[d] = 0

        self._call(apply)

    def __repr__(self) -> str:
        where = self.address if self._port is not None else "not started"
        return f"<FaultProxy {self.name} {where} -> {self._upstream}>"


@dataclass(frozen=True)
class ProxiedBroker(Generic[_B]):
    """A broker whose advertised address is a :class:`FaultProxy`: clients bootstrapped
    through :attr:`bootstrap` see only the proxy in metadata, so every connection they
    make goes through it and its faults."""

    broker: _B
    proxy: FaultProxy

    @property
    def bootstrap(self) -> str:
        """The proxy's address: what members behind the proxy use."""
        return self.proxy.address

    @property
    def direct_bootstrap(self) -> str:
        """The broker's own listener (not through the proxy; for admin work)."""
        return self.broker.bootstrap
