"""Shared plumbing of the benchmarks, written once.

Orchestrator side (``membership.py``, ``consumer.py``, ``heartbeat.py``, ``reaction.py``):
spawning ``_proc.py`` children that print JSON lines and stopping them (:class:`Procs`,
:func:`popen_child`), starting the broker (:func:`make_broker`), table and number
formatting, and a frame-aware Kafka relay that timestamps group requests and responses
(:class:`Relay`).

Child side (``_proc.py``): JSON lines on stdout (:func:`emit`), logging to stderr, the
arguments every child takes (:func:`add_client_args`), the assignment :class:`Tracker`, and
how each client library is built with the same settings (``kgroup_*``, ``aiokafka_*``,
``confluent_*``: the peer selection).

Which kgroup: the one ``import kgroup`` finds. With ``PYTHONPATH`` set (e.g. to another
worktree, as ``compare_revisions.py`` does) that one; otherwise this checkout's. Children get
the same tree first on their ``PYTHONPATH``. Nothing here imports kgroup at module level, so
a child running a peer client does not carry kgroup's objects (they would change its garbage
collector's work).

Child processes run in their own session (process group) with a parent-death signal; the
:class:`Procs` that spawned them SIGTERMs, then SIGKILLs every group on :meth:`Procs.stop_all`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import json
import logging
import math
import os
import platform
import signal
import statistics
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
PROC = HERE / "_proc.py"
LOOPBACK = "127.0.0.1"

if str(REPO) not in sys.path and (
    not os.environ.get("PYTHONPATH") or importlib.util.find_spec("kgroup") is None
):
    sys.path.insert(1, str(REPO))  # this checkout's kgroup, unless PYTHONPATH names one


def kgroup_tree() -> Path:
    """The directory holding the ``kgroup`` package that ``import kgroup`` finds here."""
    spec = importlib.util.find_spec("kgroup")
    if spec is None or spec.origin is None:
        raise RuntimeError("kgroup is not importable: set PYTHONPATH to a kgroup checkout")
    return Path(spec.origin).resolve().parent.parent


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- child processes (orchestrator side) -------------------------------------------------------


_compiled: set[Path] = set()


def compile_kgroup() -> None:
    """Write the bytecode of the kgroup under test (and of these scripts), once per run, as
    ``pip install`` does for an installed package: a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module again in every
    child process, about 90 ms of each one's start-up that no user pays. A source newer
    than its bytecode is still read from source (Python checks)."""
    import compileall

    tree = kgroup_tree()
    for target in (tree / "kgroup", HERE):
        if target not in _compiled:
            compileall.compile_dir(str(target), quiet=1)
            _compiled.add(target)


def child_env() -> dict[str, str]:
    compile_kgroup()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(kgroup_tree()), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def popen_child(
    args: Sequence[str],
    log_path: Path,
    *,
    stdin: int | None = subprocess.PIPE,
    script: Path = PROC,
) -> subprocess.Popen[bytes]:
    """``python _proc.py ARGS`` (or ``script``) in its own session with a parent-death
    signal; stdout is a pipe of JSON lines, stderr goes to ``log_path``."""
    from kgroup.testing._ports import kill_with_parent_prefix

    argv = [*kill_with_parent_prefix(), sys.executable, str(script), *args]
    with log_path.open("ab") as fh:
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=fh,
            env=child_env(),
            start_new_session=True,  # its own process group (the JVM of `java` joins it)
            close_fds=True,
        )


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
    """Spawns ``python _proc.py ARGS`` children; a reader thread per child collects its lines."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self._changed = threading.Condition()

    def spawn(self, args: Sequence[str], name: str, *, script: Path = PROC) -> Proc:
        log_path = self.log_dir / f"{name}.log"
        p = Proc(name, popen_child(args, log_path, script=script), log_path)
        self.procs.append(p)
        p.reader = threading.Thread(target=self._read, args=(p,), name=f"read-{name}", daemon=True)
        p.reader.start()
        return p

    def _read(self, p: Proc) -> None:
        assert p.proc.stdout is not None
        for raw in p.proc.stdout:
            record = parse_line(raw)
            if record is not None:
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
        procs = list(procs)
        stop_processes([p.proc for p in procs], grace)
        for p in procs:
            if p.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    p.proc.stdin.close()
            if p.reader is not None:
                p.reader.join(timeout=5.0)

    def stop_all(self) -> None:
        self.stop(self.procs, grace=10.0)


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One JSON line of a child; anything else becomes an ``output`` event."""
    try:
        record = json.loads(raw)
    except json.JSONDecodeError:
        record = {"t": time.time(), "event": "output", "line": raw.decode("replace")}
    return record if isinstance(record, dict) else None


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM the live ones, wait up to ``grace`` s, then SIGKILL every process group."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + grace
    for p in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        killpg(p.pid, signal.SIGKILL)  # the group: also a JVM left behind
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5.0)


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
        "kgroup_tree": str(kgroup_tree()),
    }


def where(meta: dict[str, Any]) -> str:
    """``tansu, 2 CPUs (model), Python 3.11.7, load average at start ...`` for a table title."""
    load = meta.get("loadavg_start")
    return (
        f"{meta['broker']}, {meta.get('cpus')} CPUs ({meta.get('cpu_model')}), Python "
        f"{meta.get('python')}, load average at start "
        f"{', '.join(f'{x:.2f}' for x in load) if load else '—'}"
    )


def write_json(path: Path | None, results: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results: {path}")


# --- brokers ------------------------------------------------------------------------------------


def make_broker(kind: str, proxy: Any = None) -> Any:
    """A (not yet started) ``TansuBroker`` or ``KafkaBroker`` from ``kgroup.testing``; with
    ``proxy`` (a :class:`Relay`), the broker advertises it so every client goes through it."""
    from kgroup.testing import KafkaBroker, TansuBroker

    cls = TansuBroker if kind == "tansu" else KafkaBroker
    return cls(proxy=proxy) if proxy is not None else cls()


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def broker_pid(broker: Any) -> int | None:
    proc = getattr(broker, "_proc", None)  # kgroup.testing's ManagedProcess
    pid = getattr(proc, "pid", None)
    return pid if isinstance(pid, int) else None


# --- numbers and tables -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def median(values: Iterable[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(numbers) if numbers else None


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    sep = "-+-".join("-" * w for w in widths)
    body = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, sep, *body])


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
    #: ``time.perf_counter()`` in the relay's process just before the whole request frame
    #: is written toward the broker / the whole response frame toward the client.
    fwd: float | None = None
    response_fwd: float | None = None


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
                    req.fwd = time.perf_counter()
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
                        req.response_fwd = time.perf_counter()
                writer.write(head + frame)
                await writer.drain()


class RelayProcess:
    """A :class:`Relay` in a child process of its own (``_proc.py relay``), with the same
    face to the broker (``start``, ``address``, ``set_upstream``) and ``snapshot()``.

    For sub-millisecond timings: in a process of its own the relay's thread does not share
    the interpreter lock with the orchestrator's threads (the readers of the children's
    JSON lines wake exactly when a member reports a rebalance)."""

    def __init__(self, procs: Procs, name: str = "relay") -> None:
        self.procs = procs
        self.name = name
        self._proc: Proc | None = None
        self._port: int | None = None
        self._dumps = 0

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._port

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _command(self, line: str, event: str, count: int) -> dict[str, Any]:
        p = self._proc
        if p is None:
            raise RuntimeError(f"{self.name}: not started")
        p.send(line)
        ok, why = self.procs.wait(lambda: len(p.all(event)) >= count, 30.0, watch=[p])
        if not ok:
            raise RuntimeError(f"{self.name}: {line.split()[0]}: {why}")
        return p.all(event)[count - 1]

    def start(self) -> RelayProcess:
        if self._proc is not None:
            return self
        p = self._proc = self.procs.spawn(["relay"], self.name)
        ok, why = self.procs.wait(lambda: p.find("listening") is not None, 30.0, watch=[p])
        if not ok:
            raise RuntimeError(f"{self.name}: {why}")
        self._port = int((p.find("listening") or {})["port"])
        return self

    def set_upstream(self, host: str, port: int) -> None:
        self._command(f"upstream {host} {port}", "upstream", 1)

    def snapshot(self) -> list[Request]:
        """Every group request the relay has seen so far (and the Heartbeat responses)."""
        self._dumps += 1
        path = self.procs.log_dir / f"{self.name}-{self._dumps}.json"
        self._command(f"dump {path}", "dumped", self._dumps)
        return [Request(**r) for r in json.loads(path.read_text())]

    def close(self) -> None:
        if self._proc is not None:
            self.procs.stop([self._proc], grace=10.0)


def run_relay_child() -> None:
    """``_proc.py relay``: a :class:`Relay` on a free port (``listening`` with ``port``);
    stdin lines ``upstream HOST PORT`` (answered ``upstream``) and ``dump PATH`` (every
    request as a JSON list in PATH, answered ``dumped``); stops at end of input."""
    import dataclasses

    relay = Relay().start()
    emit("listening", port=relay.port)
    try:
        for line in sys.stdin:
            cmd = line.split()
            if cmd[:1] == ["upstream"]:
                relay.set_upstream(cmd[1], int(cmd[2]))
                emit("upstream")
            elif cmd[:1] == ["dump"]:
                rows = [dataclasses.asdict(r) for r in relay.snapshot()]
                Path(cmd[1]).write_text(json.dumps(rows))
                emit("dumped", requests=len(rows))
    finally:
        relay.close()


# --- child side: JSON lines, logging, arguments -------------------------------------------------

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, stamped with ``time.time()``."""
    record = {"t": time.time(), "event": event, **fields}
    line = json.dumps(record, separators=(",", ":"), default=str)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def configure_logging(level: str) -> None:
    """Logs to stderr at ``level`` (kgroup logs through structlog, which prints to stdout
    and at every level unless configured: stdout carries our JSON lines)."""
    numeric = getattr(logging, level.upper())
    logging.basicConfig(
        stream=sys.stderr,
        level=numeric,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import structlog
    except ImportError:
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f"),
            structlog.processors.KeyValueRenderer(
                key_order=["timestamp", "level", "event"], drop_missing=True
            ),
        ],
    )


def add_client_args(p: Any, clients: Sequence[str], **defaults: Any) -> None:
    """The arguments every child takes: which client, where, which group and topic, and the
    group timings every client gets alike. ``defaults`` override the defaults by dest."""
    d: dict[str, Any] = {
        "name": "bench",
        "session_ms": 6000,
        "heartbeat_ms": 1000,
        "max_poll_ms": 300_000,
        "log_level": "warning",
        **defaults,
    }
    p.add_argument("--client", choices=clients, required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", default=d["name"], help="client id")
    p.add_argument("--session-ms", type=int, default=d["session_ms"])
    p.add_argument("--heartbeat-ms", type=int, default=d["heartbeat_ms"])
    p.add_argument("--max-poll-ms", type=int, default=d["max_poll_ms"])
    p.add_argument("--log-level", default=d["log_level"])
    p.add_argument(
        "--group-protocol",
        choices=GROUP_PROTOCOLS,
        default="classic",
        help="consumer: KIP-848 (kgroup, confluent, java; the broker owns the session, the\n"
        "heartbeat interval and the assignor: --session-ms is only kgroup's lease)",
    )


def client_args(a: Any, *, client: str | None = None, **extra: Any) -> list[str]:
    """The orchestrator's half of :func:`add_client_args`: the group timings and log level
    of ``a`` as child arguments, plus ``--client`` and ``extra`` (``--key value``; ``True``
    is a bare flag, ``None`` / ``False`` are left out)."""
    out = [
        "--session-ms", str(a.session_ms), "--heartbeat-ms", str(a.heartbeat_ms),
        "--max-poll-ms", str(getattr(a, "max_poll_ms", 300_000)), "--log-level", a.log_level,
    ]  # fmt: skip
    if client is not None:
        out += ["--client", client]
    for key, value in extra.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out


def install_cancel_on_signals(task: asyncio.Task[Any]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)


class StopFlag:
    """SIGTERM / SIGINT set a flag that a synchronous poll loop checks."""

    def __init__(self) -> None:
        self.stop = False
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        self.stop = True


class Tracker:
    """A member's current assignment (partition numbers), updated by rebalance callbacks;
    with ``report`` every change is also an ``assigned`` / ``revoked`` / ``lost`` line with
    the whole assignment after it (``partitions``) and the callback's partitions (``delta``).

    A revoke or lost callback calls :meth:`revoking` first thing, before any work of its own
    (an incremental unassign, a commit): a ``revoking`` line (``delta``: the partitions
    being taken away, ``partitions``: the whole assignment, still held, ``callback``:
    ``revoked`` or ``lost``) marks the moment the member stops processing them. The
    ``assigned`` line is written last thing in the assign callback, once the client holds
    the partitions. ``info`` fields (e.g. the Java client's ``generation``) go on the line."""

    def __init__(self, *, report: bool = True) -> None:
        self.owned: frozenset[int] = frozenset()
        self.changes = 0
        self.report = report

    def _changed(self, event: str, delta: frozenset[int], info: dict[str, Any]) -> None:
        self.changes += 1
        if self.report:
            emit(event, partitions=sorted(self.owned), delta=sorted(delta), **info)

    def revoking(self, parts: Iterable[int], callback: str = "revoked", **info: Any) -> None:
        """The start of a revoke / lost callback (the assignment does not change yet)."""
        if self.report:
            emit(
                "revoking",
                partitions=sorted(self.owned),
                delta=sorted(frozenset(parts)),
                callback=callback,
                **info,
            )

    def assigned(
        self,
        parts: Iterable[int],
        *,
        full: bool,
        delta: Iterable[int] | None = None,
        **info: Any,
    ) -> None:
        """``full``: ``parts`` is the whole new assignment (eager clients' callbacks, the
        Java client's ``assignment()``), else the partitions added to it (kgroup's contract,
        cooperative callbacks). ``delta``: the callback's partitions when they differ."""
        given = frozenset(parts)
        self.owned = given if full else self.owned | given
        self._changed("assigned", given if delta is None else frozenset(delta), info)

    def revoked(self, parts: Iterable[int], event: str = "revoked", **info: Any) -> None:
        delta = frozenset(parts)
        self.owned = self.owned - delta
        self._changed(event, delta, info)


def stats_dict(stats: Any) -> dict[str, Any]:
    """``stats()`` of a kgroup member or consumer as a dict: a plain dict in older kgroup,
    a ``MemberStats`` / ``ConsumerStats`` dataclass with ``as_dict()`` since."""
    if hasattr(stats, "as_dict"):
        return dict(stats.as_dict())
    return dict(stats)


def child_main(run: Callable[[], Any], level: str) -> int:
    """Configure logging, run, and report an uncaught failure as an ``error`` line."""
    configure_logging(level)
    try:
        code = run()
    except Exception as exc:
        emit("error", message=repr(exc))
        raise
    return code if isinstance(code, int) else 0


# --- child side: the clients, built alike (peer selection) --------------------------------------


ASSIGNORS = ("range", "cooperative-sticky")
GROUP_PROTOCOLS = ("classic", "consumer")


def consumer_protocol(a: Any) -> bool:
    """Whether the child runs the KIP-848 ``consumer`` group protocol."""
    return getattr(a, "group_protocol", "classic") == "consumer"


def assignor_of(a: Any) -> str:
    """The assignor a child was asked for (``--assignor``; range where there is no flag)."""
    return str(getattr(a, "assignor", None) or "range")


def cooperative(a: Any) -> bool:
    """Whether the child's rebalance callbacks are incremental: KIP-429 cooperative
    rebalancing, or the KIP-848 consumer protocol (always incremental)."""
    return assignor_of(a) == "cooperative-sticky" or consumer_protocol(a)


def kgroup_config(a: Any, *, group: str | None = None, client_id: str | None = None) -> Any:
    """kgroup's ``GroupConfig``: ``a``'s assignor (range by default) and timings;
    ``a.isolate_heartbeat`` and ``a.handoff`` when the namespace has them. Raises kgroup's
    ``ConfigError`` for an assignor this kgroup does not have."""
    from kgroup import GroupConfig

    extra: dict[str, Any] = {}
    if getattr(a, "isolate_heartbeat", False):
        extra["isolate_heartbeat"] = True
    if getattr(a, "handoff", False):
        extra["handoff_on_close"] = True  # only when asked: older trees lack the field
    if getattr(a, "instance_id", None):
        # Static: close() keeps the assignment for the next process with this id (Kafka's
        # rule for a static member; -2 under the consumer protocol, no LeaveGroup on classic).
        extra["group_instance_id"] = a.instance_id
    if consumer_protocol(a):
        # The broker assigns and owns the session and interval (the benchmark sets the
        # group's own to --session-ms / --heartbeat-ms); the lease is told the session.
        return GroupConfig(
            bootstrap_servers=a.bootstrap,
            group_id=group or a.group,
            topics=[a.topic],
            group_protocol="consumer",
            consumer_session_timeout_ms=a.session_ms,
            max_poll_interval_ms=a.max_poll_ms,
            client_id=client_id or a.name,
            **extra,
        )
    return GroupConfig(
        bootstrap_servers=a.bootstrap,
        group_id=group or a.group,
        topics=[a.topic],
        assignors=(assignor_of(a),),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        client_id=client_id or a.name,
        **extra,
    )


def group_consumer_class() -> Any:
    try:
        from kgroup import GroupConsumer  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # not exported (older trees)
        from kgroup._runtime._consumer import GroupConsumer
    return GroupConsumer


def kgroup_listener(tracker: Tracker) -> Any:
    """A kgroup ``RebalanceListener``: callbacks give the partitions added / taken away
    (eager and cooperative alike)."""

    class Listener:
        def on_partitions_assigned(self, parts: frozenset[Any]) -> None:
            tracker.assigned((tp.partition for tp in parts), full=False)

        def on_partitions_revoked(self, parts: frozenset[Any]) -> None:
            numbers = [tp.partition for tp in parts]
            tracker.revoking(numbers)
            tracker.revoked(numbers)

        def on_partitions_lost(self, parts: frozenset[Any]) -> None:
            numbers = [tp.partition for tp in parts]
            tracker.revoking(numbers, "lost")
            tracker.revoked(numbers, "lost")

    return Listener()


def aiokafka_consumer(
    a: Any,
    *,
    group: str | None = None,
    client_id: str | None = None,
    offset_reset: str = "earliest",
) -> Any:
    """``AIOKafkaConsumer`` with a group: range assignor, ``a``'s timings, no auto-commit.
    aiokafka has no cooperative rebalancing: asking for it raises ``ValueError``."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    if assignor_of(a) != "range":
        raise ValueError(f"aiokafka has no {assignor_of(a)} assignor (it rebalances eagerly only)")

    return AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=group or a.group,
        client_id=client_id or a.name,
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_ms,
        enable_auto_commit=False,
        auto_offset_reset=offset_reset,
    )


def aiokafka_listener(tracker: Tracker, on_assigned: Callable[[Any], None] | None = None) -> Any:
    """An aiokafka ``ConsumerRebalanceListener`` (eager: the whole assignment each time)."""
    from aiokafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            numbers = [tp.partition for tp in revoked]
            tracker.revoking(numbers)
            tracker.revoked(numbers)

        def on_partitions_assigned(self, assigned: Any) -> None:
            if on_assigned is not None:
                on_assigned(assigned)
            tracker.assigned((tp.partition for tp in assigned), full=True)

    return Listener()


def confluent_config(
    a: Any,
    *,
    group: str | None = None,
    client_id: str | None = None,
    offset_reset: str = "earliest",
) -> dict[str, Any]:
    """librdkafka settings: classic protocol, ``a``'s assignor (range by default) and
    timings, no auto-commit. With ``--group-protocol consumer``: KIP-848, where librdkafka
    refuses an assignor, session timeout or heartbeat interval (the broker owns them)."""
    common = {
        "bootstrap.servers": a.bootstrap,
        "group.id": group or a.group,
        "client.id": client_id or a.name,
        "max.poll.interval.ms": a.max_poll_ms,
        "enable.auto.commit": False,
        "auto.offset.reset": offset_reset,
    }
    if getattr(a, "instance_id", None):
        common["group.instance.id"] = a.instance_id
    if consumer_protocol(a):
        return {**common, "group.protocol": "consumer"}
    return {
        **common,
        "group.protocol": "classic",
        "partition.assignment.strategy": assignor_of(a),
        "session.timeout.ms": a.session_ms,
        "heartbeat.interval.ms": a.heartbeat_ms,
    }


def confluent_callbacks(
    tracker: Tracker, *, aio: bool, pause: bool = False, cooperative: bool = False
) -> dict[str, Any]:
    """``on_assign`` / ``on_revoke`` / ``on_lost`` for ``subscribe()`` of ``Consumer``
    (``aio=False``) or ``aio.AIOConsumer`` (coroutines); ``pause`` pauses what is assigned.

    Eager (range): librdkafka's callbacks give the whole assignment / everything revoked,
    and confluent-kafka calls ``assign()`` / ``unassign()`` itself when the callback did
    not. ``cooperative`` (``partition.assignment.strategy=cooperative-sticky``): they give
    the partitions added / taken away, and the callbacks call ``incremental_assign()`` /
    ``incremental_unassign()`` themselves; a ``mismatch`` line is written if the client's
    ``assignment()`` then disagrees with the tracker."""

    def numbers(parts: list[Any]) -> list[int]:
        return [tp.partition for tp in parts]

    def check(held: list[Any]) -> None:
        if frozenset(numbers(held)) != tracker.owned:
            emit("mismatch", client=sorted(numbers(held)), callbacks=sorted(tracker.owned))

    if aio:

        async def on_assign(c: Any, parts: list[Any]) -> None:
            if cooperative:
                await c.incremental_assign(parts)
                if pause:
                    await c.pause(parts)
                tracker.assigned(numbers(parts), full=False)
                check(await c.assignment())
                return
            if pause:
                await c.assign(parts)
                await c.pause(parts)
            tracker.assigned(numbers(parts), full=True)

        async def on_revoke(c: Any, parts: list[Any]) -> None:
            tracker.revoking(numbers(parts))
            if cooperative:
                await c.incremental_unassign(parts)
            tracker.revoked(numbers(parts))

        async def on_lost(c: Any, parts: list[Any]) -> None:
            tracker.revoking(numbers(parts), "lost")
            if cooperative:
                await c.incremental_unassign(parts)
            tracker.revoked(numbers(parts), "lost")

        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}

    def on_assign_sync(c: Any, parts: list[Any]) -> None:
        if cooperative:
            c.incremental_assign(parts)
            tracker.assigned(numbers(parts), full=False)
            check(c.assignment())
            return
        tracker.assigned(numbers(parts), full=True)

    def on_revoke_sync(c: Any, parts: list[Any]) -> None:
        tracker.revoking(numbers(parts))
        if cooperative:
            c.incremental_unassign(parts)
        tracker.revoked(numbers(parts))

    def on_lost_sync(c: Any, parts: list[Any]) -> None:
        tracker.revoking(numbers(parts), "lost")
        if cooperative:
            c.incremental_unassign(parts)
        tracker.revoked(numbers(parts), "lost")

    return {"on_assign": on_assign_sync, "on_revoke": on_revoke_sync, "on_lost": on_lost_sync}
