"""Apache Kafka itself, as a single-node KRaft broker on loopback, for tests.

The broker comes from Maven Central: :func:`kafka_libs` fetches ``kafka_2.13`` and
``kafka-clients`` (the same :data:`KAFKA_VERSION`) plus their runtime dependencies once, with
Maven, into ``$KGROUP_CACHE_DIR/kafka-<version>/libs`` (default ``~/.cache/kgroup``). The
fill is guarded by a file lock, so parallel test processes share one download.

:class:`KafkaBroker` formats a private log directory, starts ``kafka.Kafka`` in one JVM
(``process.roles=broker,controller``) on free loopback ports and stops it with SIGTERM.
The log directory lives as long as the object, so :meth:`KafkaBroker.restart` keeps topics,
groups and committed offsets. Settings are tuned for tests: no initial rebalance delay,
replication factor 1 everywhere, low session-timeout and heartbeat bounds (classic and
KIP-848), small heap, no automatic topic creation.

Where ``java`` (or, for the first fetch, ``mvn``) is missing, :class:`BrokerUnavailable`
is raised with what to install.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._ports import (
    LOOPBACK,
    BrokerStartError,
    BrokerUnavailable,
    ManagedProcess,
    ProcessBroker,
    free_port,
    log_tail,
    owned_temp_dir,
    port_is_open,
)

if TYPE_CHECKING:
    from ._proxy import FaultProxy

__all__ = [
    "KAFKA_VERSION",
    "SCALA_VERSION",
    "KafkaBroker",
    "cache_root",
    "find_java",
    "kafka_classpath",
    "kafka_libs",
]

#: The one place the Kafka version is pinned: broker and Java client alike.
KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
#: slf4j binding for the broker's and the Java client's logs (matches kafka-clients' slf4j-api).
SLF4J_VERSION = "1.7.36"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

_INSTALL_HINT = (
    "install a Java 17+ JDK and Maven (Debian/Ubuntu: "
    "`apt-get install openjdk-17-jdk-headless maven`, or run .ci/install-system-deps.sh)"
)

_STARTED_RE = re.compile(r"Kafka ?Server started|KafkaRaftServer.*started")
_BIND_FAILED_RE = re.compile(r"Address already in use|BindException")


class _PortTaken(BrokerStartError):
    """Kafka could not bind a listener port (taken since free_port() found it)."""


def cache_root() -> Path:
    """Where downloaded jars live: ``$KGROUP_CACHE_DIR`` or ``~/.cache/kgroup``."""
    override = os.environ.get("KGROUP_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "kgroup"


def find_java() -> str:
    """Path of the ``java`` launcher (``$JAVA_HOME/bin/java`` first), else BrokerUnavailable."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    java = shutil.which("java")
    if java is None:
        raise BrokerUnavailable(f"Apache Kafka tests need `java` on PATH: {_INSTALL_HINT}")
    return java


def _pom(version: str) -> str:
    deps = [
        ("org.apache.kafka", f"kafka_{SCALA_VERSION}", version),
        ("org.apache.kafka", "kafka-clients", version),
        ("org.slf4j", "slf4j-simple", SLF4J_VERSION),
    ]
    dep_xml = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in deps
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kgroup.testing</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{dep_xml}
  </dependencies>
</project>
"""


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory holding the broker's and client's jars, fetched with Maven if needed.

    Safe to call from several processes at once: one fills the cache, the others wait on
    its file lock and then reuse it. Raises :class:`BrokerUnavailable` when Maven is needed
    but missing, or the fetch fails (no network): the message says why.
    """
    base = cache_root() / f"kafka-{version}"
    libs = base / "libs"
    marker = base / ".complete"
    if marker.is_file() and libs.is_dir():
        return libs
    with _file_lock(base.parent / f"kafka-{version}.lock"):
        if marker.is_file() and libs.is_dir():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerUnavailable(
                f"Apache Kafka tests need `mvn` to fetch Kafka {version} once: {_INSTALL_HINT}"
            )
        base.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=base))
        try:
            (work / "pom.xml").write_text(_pom(version))
            out = work / "libs"
            log = base / "maven.log"
            with log.open("wb") as fh:
                result = subprocess.run(
                    [
                        mvn,
                        "-q",
                        "-B",
                        "-f",
                        str(work / "pom.xml"),
                        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                        f"-DoutputDirectory={out}",
                        "-DincludeScope=runtime",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                    timeout=900,
                    check=False,
                )
            jars = sorted(out.glob("*.jar")) if out.is_dir() else []
            if result.returncode != 0 or not any(
                j.name.startswith(f"kafka_{SCALA_VERSION}-") for j in jars
            ):
                raise BrokerUnavailable(
                    f"could not fetch Kafka {version} with Maven (exit {result.returncode}; "
                    f"no network to Maven Central?). Maven output ({log}):\n{log_tail(log)}"
                )
            if libs.exists():
                shutil.rmtree(libs)
            out.rename(libs)
            marker.write_text(f"{len(jars)} jars\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return libs


def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    """A ``-cp`` value covering every cached jar (the broker, the client and their deps)."""
    return str(kafka_libs(version) / "*")


def _new_cluster_id() -> str:
    # Kafka's Uuid.toString: URL-safe base64 without padding, never starting with '-'.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaBroker(ProcessBroker):
    """A single-node Apache Kafka (KRaft, broker+controller in one JVM) on loopback.

    ``extra_config`` entries override the test-friendly defaults in ``server.properties``.
    Use as a context manager, or call :meth:`start` / :meth:`stop`.

    With ``proxy`` (a :class:`~kgroup.testing.FaultProxy`, started here if it is not
    running yet, never closed here), a second listener ``PROXIED`` on its own loopback port
    advertises the proxy's address and becomes the proxy's upstream: clients bootstrapped
    through ``proxy.address`` get metadata naming only the proxy. :attr:`bootstrap` stays
    the direct listener.
    """

    #: Which broker this is ("kafka"), e.g. for tests that must allow for its quirks.
    kind = "kafka"

    def __init__(
        self,
        *,
        version: str = KAFKA_VERSION,
        extra_config: Mapping[str, str] | None = None,
        heap: str = "512m",
        start_timeout: float = 120.0,
        log_path: Path | None = None,
        proxy: FaultProxy | None = None,
    ) -> None:
        self.version = version
        self.proxy = proxy
        self.extra_config = dict(extra_config or {})
        self.heap = heap
        self.start_timeout = start_timeout
        self._workdir: Path | None = None
        self._remove_workdir: weakref.finalize[Any, Any] | None = None
        self._log_path_override = log_path
        self._proc: ManagedProcess | None = None
        self._port: int | None = None
        self._controller_port: int | None = None
        self._proxied_port: int | None = None
        self._java: str | None = None
        self._classpath: str | None = None
        self.cluster_id = _new_cluster_id()
        #: Seconds the last start took (JVM launch to "Kafka Server started").
        self.last_start_seconds: float | None = None

    # --- properties -------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The client (PLAINTEXT) listener port."""
        if self._port is None:
            raise RuntimeError("broker not started")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for ``bootstrap_servers``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def proxied_port(self) -> int:
        """The port of the ``PROXIED`` listener (the proxy's upstream); needs ``proxy``."""
        if self._proxied_port is None:
            raise RuntimeError("broker has no proxy or was not started")
        return self._proxied_port

    @property
    def log_path(self) -> Path:
        """The broker's log file (stdout and stderr of the JVM)."""
        if self._log_path_override is not None:
            return self._log_path_override
        return self._dir() / "broker.log"

    @property
    def data_dir(self) -> Path:
        """The KRaft log directory (kept across :meth:`restart`)."""
        return self._dir() / "data"

    @property
    def classpath(self) -> str:
        """The ``-cp`` value of the broker JVM (also usable for Java clients)."""
        if self._classpath is None:
            self._classpath = kafka_classpath(self.version)
        return self._classpath

    def running(self) -> bool:
        """Whether the broker JVM is alive."""
        return self._proc is not None and self._proc.running()

    def _dir(self) -> Path:
        if self._workdir is None:
            self._workdir, self._remove_workdir = owned_temp_dir(self, "kgroup-kafka-")
        return self._workdir

    # --- configuration ------------------------------------------------------------------

    def _properties(self) -> dict[str, str]:
        assert self._port is not None and self._controller_port is not None
        listeners = f"PLAINTEXT://{LOOPBACK}:{self._port}"
        advertised = listeners
        protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        if self.proxy is not None:
            # Kafka answers with the advertised listeners of the listener a request came in
            # on, so clients that came through the proxy are only ever told about the proxy.
            assert self._proxied_port is not None
            listeners += f",PROXIED://{LOOPBACK}:{self._proxied_port}"
            advertised += f",PROXIED://{self.proxy.address}"
            protocols += ",PROXIED:PLAINTEXT"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{self._controller_port}",
            "listeners": f"{listeners},CONTROLLER://{LOOPBACK}:{self._controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "group.max.session.timeout.ms": "300000",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.session.timeout.ms": "45000",
            "group.consumer.min.heartbeat.interval.ms": "100",
            # KIP-848 members heartbeat at the broker's interval: 500 ms, as the classic
            # test members do, so that a leave or a new target reaches them quickly.
            "group.consumer.heartbeat.interval.ms": "500",
            # KIP-848 (4.3+) batches target assignments every 1000 ms by default; a test
            # member should get its partitions on the heartbeat after its join.
            "group.consumer.assignment.interval.ms": "0",
            "group.share.min.session.timeout.ms": "1000",
            "group.share.min.heartbeat.interval.ms": "100",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "4",
            "log.flush.interval.messages": "9223372036854775807",
        }
        props.update(self.extra_config)
        return props

    def _write_properties(self) -> Path:
        path = self._dir() / "server.properties"
        lines = [f"{k}={v}" for k, v in self._properties().items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def _jvm_args(self) -> list[str]:
        assert self._java is not None
        return [
            self._java,
            f"-Xmx{self.heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss1m",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
            "-Dorg.slf4j.simpleLogger.log.kafka.log=warn",
            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.storage=warn",
            "-cp",
            self.classpath,
        ]

    def _format_args(self) -> list[str]:
        """Extra StorageTool ``format`` arguments (a subclass adds SCRAM credentials)."""
        return []

    def _format(self, props: Path) -> None:
        result = subprocess.run(
            [
                *self._jvm_args(),
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(props),
                "--ignore-formatted",
                *self._format_args(),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=self.start_timeout,
            check=False,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", "replace")
            raise BrokerStartError(f"kafka StorageTool format failed:\n{output[-4000:]}")

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> KafkaBroker:
        """Fetch jars if needed, format the log dir (first start only) and start the JVM."""
        if self.running():
            return self
        self._java = find_java()
        _ = self.classpath  # fetch jars (may raise BrokerUnavailable)
        if self.proxy is not None:
            self.proxy.start()  # its address goes into advertised.listeners
        first = self._port is None
        attempts = 3 if first else 1
        for attempt in range(attempts):
            if first:
                self._port = free_port()
                self._controller_port = free_port()
                while self._controller_port == self._port:
                    self._controller_port = free_port()
                if self.proxy is not None:
                    self._proxied_port = free_port()
                    while self._proxied_port in (self._port, self._controller_port):
                        self._proxied_port = free_port()
            props = self._write_properties()
            if first and attempt == 0:
                self._format(props)
            try:
                self._launch(props)
                if self.proxy is not None:
                    self.proxy.set_upstream(LOOPBACK, self.proxied_port)
                return self
            except _PortTaken:
                if first and attempt + 1 < attempts:
                    continue  # someone took a port between free_port() and bind: new ports
                raise
        raise AssertionError("unreachable")

    def _launch(self, props: Path) -> None:
        assert self._port is not None
        log = self.log_path
        offset = log.stat().st_size if log.exists() else 0
        proc = ManagedProcess([*self._jvm_args(), "kafka.Kafka", str(props)], log)
        t0 = time.monotonic()
        proc.start()
        self._proc = proc
        deadline = t0 + self.start_timeout
        delay = 0.02
        while True:
            if not proc.running():
                code = proc.stop()
                self._proc = None
                self._started_since(offset)  # raises _PortTaken on a bind failure
                raise BrokerStartError(
                    f"Kafka exited with code {code} during startup; log {log}:\n{log_tail(log)}"
                )
            try:
                started = self._started_since(offset)
            except BrokerStartError:
                proc.stop(timeout=5.0)
                self._proc = None
                raise
            if started and port_is_open(LOOPBACK, self._port):
                break
            if time.monotonic() >= deadline:
                proc.stop()
                self._proc = None
                raise BrokerStartError(
                    f"Kafka did not start within {self.start_timeout:.0f}s; "
                    f"log {log}:\n{log_tail(log)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)
        self.last_start_seconds = time.monotonic() - t0

    def _started_since(self, offset: int) -> bool:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return False
        if _BIND_FAILED_RE.search(text):
            # Surface a bind failure right away so start() can retry on other ports.
            raise _PortTaken(f"Kafka could not bind its ports:\n{log_tail(self.log_path)}")
        return _STARTED_RE.search(text) is not None

    STOP_TIMEOUT = 30.0

    def _forget_ports(self) -> None:
        self._port = self._controller_port = self._proxied_port = None

    def __repr__(self) -> str:
        where = self.bootstrap if self._port is not None else "not started"
        return f"<KafkaBroker {self.version} {where}>"
