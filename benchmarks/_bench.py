"""Shared plumbing of ``consumer.py`` and ``heartbeat.py``: child processes that print JSON
lines, a frame-aware Kafka relay that timestamps requests, and small statistics helpers.

Child processes run in their own session (process group) with a parent-death signal; the
:class:`Procs` that spawned them SIGTERMs, then SIGKILLs every group on :meth:`Procs.stop_all`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import math
import os
import platform
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kgroup.testing._ports import LOOPBACK, kill_with_parent_prefix  # noqa: E402

# --- child processes ---------------------------------------------------------------------------


@dataclass
class Proc:
    """One child process and the JSON lines it printed (each with ``t`` and ``event``)."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    eof: bool = False
    reader: threading.Thread | None = None

    def find(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == event), None)

    def all(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == event]

    def send(self, line: str) -> None:
        """A line on the child's stdin (ignored if it is gone)."""
        if self.proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()


class Procs:
    """Spawns ``python SCRIPT ARGS`` children; a reader thread per child collects its lines."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self._changed = threading.Condition()

    def spawn(self, script: Path, args: Sequence[str], name: str) -> Proc:
        log_path = self.log_dir / f"{name}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        argv = [*kill_with_parent_prefix(), sys.executable, str(script), *args]
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        p = Proc(name, popen, log_path)
        self.procs.append(p)
        p.reader = threading.Thread(target=self._read, args=(p,), name=f"read-{name}", daemon=True)
        p.reader.start()
        return p

    def _read(self, p: Proc) -> None:
        assert p.proc.stdout is not None
        for raw in p.proc.stdout:
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                record = {"t": time.time(), "event": "output", "line": raw.decode("replace")}
            if isinstance(record, dict):
                with self._changed:
                    p.events.append(record)
                    self._changed.notify_all()
        with self._changed:
            p.eof = True
            self._changed.notify_all()

    def wait(
        self, predicate: Callable[[], bool], deadline_s: float, *, watch: Iterable[Proc] = ()
    ) -> tuple[bool, str]:
        """Until ``predicate()``; (False, why) at the deadline or when a watched child exits
        or reports an ``error``."""
        watched = list(watch)
        end = time.monotonic() + deadline_s
        with self._changed:
            while True:
                if predicate():
                    return True, ""
                for p in watched:
                    err = p.find("error")
                    if err is not None:
                        return False, f"{p.name}: {err.get('message')}"
                    if p.eof:
                        return False, f"{p.name} exited (log {p.log_path})"
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False, f"deadline {deadline_s:.0f} s passed"
                self._changed.wait(min(remaining, 0.2))

    def stop(self, procs: Iterable[Proc], grace: float = 20.0) -> None:
        """SIGTERM, wait up to ``grace`` s, then SIGKILL the whole process group."""
        live = [p for p in procs if p.proc.poll() is None]
        for p in live:
            with contextlib.suppress(ProcessLookupError):
                p.proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + grace
        for p in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.proc.wait(timeout=max(0.0, end - time.monotonic()))
        for p in procs:
            killpg(p.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.proc.wait(timeout=5.0)
            if p.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    p.proc.stdin.close()
            if p.reader is not None:
                p.reader.join(timeout=5.0)

    def stop_all(self) -> None:
        self.stop(self.procs, grace=10.0)


def killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def install_interrupts() -> None:
    """SIGTERM / SIGHUP end the run like Ctrl-C (the ``finally`` blocks clean up)."""
    signal.signal(signal.SIGTERM, raise_interrupt)
    with contextlib.suppress(AttributeError, ValueError):
        signal.signal(signal.SIGHUP, raise_interrupt)


def machine() -> dict[str, Any]:
    model = None
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if "model name" in ln), None)
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "loadavg_start": list(os.getloadavg()),
    }


# --- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --- a frame-aware Kafka relay -----------------------------------------------------------------

API_HEARTBEAT = 12
API_JOIN_GROUP = 11
API_SYNC_GROUP = 14
API_LEAVE_GROUP = 13
# First flexible (compact encoding, tagged fields) request version per API we decode.
_FLEXIBLE_FROM = {API_HEARTBEAT: 4, API_JOIN_GROUP: 6, API_SYNC_GROUP: 4, API_LEAVE_GROUP: 4}
_GROUP_APIS = frozenset(_FLEXIBLE_FROM)


@dataclass
class Request:
    """One group request the relay saw (client → broker), stamped on arrival."""

    t: float
    conn: int
    api_key: int
    api_version: int
    correlation: int
    client_id: str | None
    group_id: str | None = None
    member_id: str | None = None
    generation: int | None = None
    error_code: int | None = None  # of the response (Heartbeat only), when it came
    response_t: float | None = None


class _Buf:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def parse_request(frame: bytes, conn: int, t: float) -> Request | None:
    """A group request (JoinGroup, Heartbeat, SyncGroup, LeaveGroup) from one frame (without
    its size prefix); None for any other API. Header: api_key int16, api_version int16,
    correlation_id int32, client_id nullable int16 string, then tagged fields in flexible
    versions."""
    if len(frame) < 8:
        return None
    api_key, version, correlation = struct.unpack_from(">hhi", frame, 0)
    if api_key not in _GROUP_APIS:
        return None
    b = _Buf(frame, 8)
    req = Request(t, conn, api_key, version, correlation, None)
    try:
        req.client_id = b.string()
        flexible = version >= _FLEXIBLE_FROM[api_key]
        if flexible:
            b.skip_tags()
        text = b.compact_string if flexible else b.string
        req.group_id = text()
        if api_key in (API_HEARTBEAT, API_SYNC_GROUP):
            req.generation = b.take(">i")
            req.member_id = text()
        elif api_key == API_JOIN_GROUP:
            b.take(">i")  # session timeout
            if version >= 1:
                b.take(">i")  # rebalance timeout
            req.member_id = text()
        elif api_key == API_LEAVE_GROUP and version <= 2:
            req.member_id = text()
    except (struct.error, IndexError):
        pass  # keep what was decoded
    return req


def parse_heartbeat_error(frame: bytes, version: int) -> int | None:
    """The error code of a Heartbeat response frame (correlation first, no size prefix)."""
    try:
        b = _Buf(frame, 4)
        if version >= _FLEXIBLE_FROM[API_HEARTBEAT]:
            b.skip_tags()
        if version >= 1:
            b.take(">i")  # throttle time
        return int(b.take(">h"))
    except (struct.error, IndexError):
        return None


class Relay:
    """A TCP relay between Kafka clients and one broker listener that reads whole request
    frames (4-byte size, then the request) and records every group request with the time it
    arrived, plus the error codes of the Heartbeat responses.

    Duck-compatible with what ``TansuBroker(proxy=...)`` and ``KafkaBroker(proxy=...)``
    expect of a proxy (``start``, ``address``, ``set_upstream``), so the broker advertises
    the relay and clients make every connection through it. Runs its own event loop in a
    daemon thread, so it keeps relaying while a client's loop is blocked."""

    def __init__(self, name: str = "relay") -> None:
        self.name = name
        self.requests: list[Request] = []
        self._upstream: tuple[str, int] | None = None
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._port

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def set_upstream(self, host: str, port: int) -> None:
        self._upstream = (host, port)

    def start(self) -> Relay:
        if self.running:
            return self
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), name=f"bench-{self.name}", daemon=True
        )
        self._thread.start()
        ready.result(timeout=10.0)
        return self

    def _main(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(asyncio.start_server(self._accept, LOOPBACK, 0))
            self._port = self._server.sockets[0].getsockname()[1]
            ready.set_result(None)
            loop.run_forever()
        except BaseException as exc:  # pragma: no cover - start failure
            if not ready.done():
                ready.set_exception(exc)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10.0)

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        if self._upstream is None:
            c_writer.transport.abort()
            return
        self._conns += 1
        conn = self._conns
        try:
            b_reader, b_writer = await asyncio.wait_for(
                asyncio.open_connection(*self._upstream), 10.0
            )
        except (OSError, TimeoutError):
            c_writer.transport.abort()
            return
        self._writers |= {c_writer, b_writer}
        pending: dict[int, Request] = {}  # correlation -> Heartbeat awaiting its response
        up = asyncio.ensure_future(self._pipe_requests(conn, c_reader, b_writer, pending))
        down = asyncio.ensure_future(self._pipe_responses(b_reader, c_writer, pending))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            for w in (c_writer, b_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pipe_requests(
        self,
        conn: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, Request],
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readexactly(4)
                t = time.time()
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                req = parse_request(frame, conn, t)
                if req is not None:
                    with self._lock:
                        self.requests.append(req)
                    if req.api_key == API_HEARTBEAT:
                        pending[req.correlation] = req
                writer.write(head + frame)
                await writer.drain()

    async def _pipe_responses(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, Request],
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                if pending and len(frame) >= 4:
                    req = pending.pop(struct.unpack_from(">i", frame, 0)[0], None)
                    if req is not None:
                        req.response_t = time.time()
                        req.error_code = parse_heartbeat_error(frame, req.api_version)
                writer.write(head + frame)
                await writer.drain()
