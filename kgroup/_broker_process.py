"""A broker as a child process on loopback: ports, process lifetime, topic creation.

``kgroup demo`` runs its embedded tansu broker (:mod:`kgroup._tansu`) on this, and so do the
test toolkit's brokers. Everything here is about never leaking anything:

* :func:`free_port` / :func:`wait_for_port` find and probe loopback ports.
* :class:`ManagedProcess` runs a broker (or another helper) as a child process with its
  output appended to a log file, stops it with SIGTERM and then SIGKILL, and makes sure it
  cannot outlive the process that started it: every live child is tracked and killed at
  interpreter exit, and children spawned from the main thread also get a parent-death
  signal (via ``setpriv --pdeathsig KILL`` where util-linux provides it), so even a
  SIGKILLed parent leaves no broker behind.
* :class:`ProcessBroker` is what every broker process shares: stop, kill, restart, close,
  context manager, topic creation.
* :func:`admin_create_topic` creates a topic over the wire (CreateTopics through aiokafka's
  admin client) and waits until metadata shows every partition with a leader;
  :func:`run_blocking` runs such a coroutine to completion from sync or async code.
* :class:`BrokerUnavailable` says that a broker cannot run on this machine and what to
  install (the pytest plugin turns it into a skip, or a failure under CI).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

_T = TypeVar("_T")

__all__ = [
    "LOOPBACK",
    "BrokerStartError",
    "BrokerUnavailable",
    "ManagedProcess",
    "ProcessBroker",
    "admin_create_topic",
    "free_port",
    "kill_with_parent_prefix",
    "log_tail",
    "owned_temp_dir",
    "port_is_open",
    "register_child",
    "run_blocking",
    "unregister_child",
    "wait_for_port",
]

LOOPBACK = "127.0.0.1"


class BrokerUnavailable(RuntimeError):
    """A broker cannot run on this machine; the message names what to install."""


class BrokerStartError(RuntimeError):
    """A broker process was started but did not become ready (message has the log tail)."""


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that was free a moment ago.

    The port is found by binding port 0 and closing the socket again, so another process
    may take it before the caller binds it: callers that start servers retry on a bind
    failure.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a TCP connect to ``host:port`` succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(
    host: str,
    port: int,
    timeout: float,
    *,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    """Block until ``host:port`` accepts TCP connections.

    Raises :class:`TimeoutError` after ``timeout`` seconds, and :class:`BrokerStartError`
    at once if ``process`` is given and exits while we wait.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if port_is_open(host, port):
            return
        if process is not None and process.poll() is not None:
            raise BrokerStartError(
                f"process {process.pid} exited with code {process.returncode} "
                f"before {host}:{port} opened"
            )
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{host}:{port} did not open within {timeout:.1f}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def log_tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a log file (empty string if it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def owned_temp_dir(owner: object, prefix: str) -> tuple[Path, weakref.finalize[Any, Any]]:
    """A fresh temporary directory removed when ``owner`` is collected or at exit.

    Call the returned finalizer to remove it earlier. Unlike TemporaryDirectory, nothing
    warns when the owner is simply dropped.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    return path, weakref.finalize(owner, shutil.rmtree, str(path), ignore_errors=True)


# --- child-process registry ------------------------------------------------------------

_children_lock = threading.Lock()
_children: set[int] = set()


def register_child(pid: int) -> None:
    """Track a child process (its own session/process group) for killing at exit."""
    with _children_lock:
        _children.add(pid)


def unregister_child(pid: int) -> None:
    """Stop tracking a child process that has been reaped."""
    with _children_lock:
        _children.discard(pid)


def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (falling back to the pid)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all_children() -> None:
    """atexit hook: SIGTERM every tracked child, then SIGKILL whatever is left."""
    with _children_lock:
        pids = list(_children)
        _children.clear()
    if not pids:
        return
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_pid_alive(pid) for pid in pids):
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    for pid in pids:
        _signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


atexit.register(_kill_all_children)


def kill_with_parent_prefix() -> list[str]:
    """argv prefix that makes the child die with us (empty where it cannot be done safely).

    ``setpriv --pdeathsig KILL`` sets PR_SET_PDEATHSIG and execs the command, so the
    broker itself gets SIGKILL when its parent goes away. Linux sends that signal when the
    *thread* that forked the child exits, so it is only used from the main thread (which
    lives as long as the process); children spawned elsewhere rely on the atexit hook.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


class ManagedProcess:
    """One child process with its stdout/stderr appended to ``log_path``."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        """The running :class:`subprocess.Popen` (raises if not started)."""
        if self._proc is None:
            raise RuntimeError("process not started")
        return self._proc

    @property
    def pid(self) -> int | None:
        """The child's pid, or None when not started."""
        return None if self._proc is None else self._proc.pid

    def running(self) -> bool:
        """Whether the child has been started and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Spawn the child in its own session, output appended to the log file."""
        if self._proc is not None:
            raise RuntimeError("process already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} start: {self.argv}\n".encode())
            log.flush()
            # The registry is updated under the lock together with the spawn so an atexit
            # hook running concurrently cannot miss the child.
            with _children_lock:
                self._proc = subprocess.Popen(
                    [*kill_with_parent_prefix(), *self.argv],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                    close_fds=True,
                )
                _children.add(self._proc.pid)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the child (and its process group), SIGKILL after ``timeout``; reap it.

        Returns the exit code (None if it was never started). Idempotent.
        """
        proc = self._proc
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait()
        finally:
            if proc.poll() is None:  # pragma: no cover - only on KeyboardInterrupt mid-wait
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            unregister_child(proc.pid)
            self._proc = None
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL the child at once and reap it."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            _signal_group(proc.pid, signal.SIGKILL)
        self.stop(timeout=5.0)


# --- topics over the wire --------------------------------------------------------------

_TOPIC_ALREADY_EXISTS = 36
# Codes that mean "not yet" while a fresh broker or topic settles.
_RETRIABLE_TOPIC_ERRORS = {
    3,  # UNKNOWN_TOPIC_OR_PARTITION
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    41,  # NOT_CONTROLLER
}


def run_blocking(factory: Callable[[], Awaitable[_T]], timeout: float | None = None) -> _T:
    """Run the coroutine made by ``factory`` to completion and return its result.

    The coroutine runs on a fresh event loop in a private thread, so this works from plain
    code and from inside a running event loop alike (where it blocks that loop meanwhile).
    """

    async def main() -> _T:
        return await factory()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgroup-blocking") as ex:
        return ex.submit(asyncio.run, main()).result(timeout)


async def admin_create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    timeout: float = 30.0,
) -> None:
    """Create ``name`` with CreateTopics and wait until every partition has a leader."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    deadline = time.monotonic() + timeout
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        while True:
            resp = await admin.create_topics(
                [NewTopic(name, partitions, replication, topic_configs=dict(config or {}))],
                timeout_ms=int(timeout * 1000),
            )
            errors: list[tuple[int, Any]] = [
                (int(entry[1]), entry[2] if len(entry) > 2 else None) for entry in resp.topic_errors
            ]
            code, message = errors[0] if errors else (0, None)
            if code == 0 or (code == _TOPIC_ALREADY_EXISTS and exist_ok):
                break
            if code in _RETRIABLE_TOPIC_ERRORS and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                continue
            raise RuntimeError(f"CreateTopics({name!r}) failed: error {code} {message or ''}")
        delay = 0.02
        while True:
            if await _topic_ready(admin, name, partitions):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {name!r} has no leaders after {timeout:.0f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
    finally:
        await admin.close()


async def _topic_ready(admin: Any, name: str, partitions: int) -> bool:
    """Whether metadata shows ``name`` with ``partitions`` partitions, each with a leader."""
    try:
        topics = await admin.describe_topics([name])
    except Exception:  # metadata can fail transiently on a fresh broker
        return False
    for topic in topics:
        if topic["topic"] != name or topic["error_code"] != 0:
            continue
        parts = topic["partitions"]
        return len(parts) >= partitions and all(
            p["error_code"] == 0 and p["leader"] >= 0 for p in parts
        )
    return False


class ProcessBroker:
    """What every broker process here shares: stop, kill, restart, close, context manager,
    topic creation. Subclasses start the process (``start``) and know their address
    (``bootstrap``); ``STOP_TIMEOUT`` is how long a SIGTERM gets before SIGKILL."""

    STOP_TIMEOUT = 10.0
    _proc: ManagedProcess | None
    _port: int | None
    _workdir: Path | None
    _remove_workdir: Callable[[], Any] | None

    def start(self) -> Self:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the broker (a controlled shutdown), SIGKILL after ``timeout``."""
        if self._proc is not None:
            self._proc.stop(timeout=self.STOP_TIMEOUT if timeout is None else timeout)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the broker: an unclean crash."""
        if self._proc is not None:
            self._proc.kill()
            self._proc = None

    def restart(self) -> None:
        """Stop and start again on the same ports (and data dir, where it has one)."""
        if self._port is None:
            raise RuntimeError("broker was never started")
        self.stop()
        self.start()

    def _forget_ports(self) -> None:
        self._port = None

    def close(self) -> None:
        """Stop the broker and delete its working directory (with its log)."""
        self.stop()
        if self._remove_workdir is not None:
            self._remove_workdir()
            self._remove_workdir = None
            self._workdir = None
            self._forget_ports()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic (CreateTopics via aiokafka) and wait until every partition has a
        leader. Blocking; callable from sync code and from inside a running event loop
        (async code that must not block its loop awaits :meth:`create_topic_async`)."""
        run_blocking(
            lambda: self.create_topic_async(
                name, partitions, config=config, exist_ok=exist_ok, timeout=timeout
            )
        )

    async def create_topic_async(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Async form of :meth:`create_topic`."""
        await admin_create_topic(
            self.bootstrap, name, partitions, config=config, exist_ok=exist_ok, timeout=timeout
        )
