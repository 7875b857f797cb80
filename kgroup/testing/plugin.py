"""pytest plugin ``kgroup``: fixtures that start real brokers for integration tests.

Registered through the ``pytest11`` entry point, so installing kgroup enables it (disable
with ``-p no:kgroup``). Fixtures:

``kafka_broker`` (session)
    Apache Kafka (:class:`~kgroup.testing.KafkaBroker`), started on first use.
``tansu_broker`` (session)
    tansu (:class:`~kgroup.testing.TansuBroker`), started on first use.
``broker`` (session, parametrised)
    Each of ``"kafka"`` and ``"tansu"`` in turn; narrow it with
    ``@pytest.mark.parametrize("broker", ["tansu"], indirect=True)`` or the
    :data:`broker_params` / :data:`kafka_and_tansu` shorthands.
``mock_cluster`` (function)
    A fresh 3-broker librdkafka mock cluster (:class:`~kgroup.testing.MockCluster`).
``kafka_broker_factory`` / ``tansu_broker_factory`` (function)
    Start private brokers (for tests that restart or kill them); all stopped afterwards.
``make_topic`` / ``topic_factory`` (function)
    ``make_topic(partitions=1, *, broker=None, name=None) -> str`` creates a topic with a
    unique name on ``broker`` (default: the broker fixture the test uses).
``unique_group`` (function)
    A group id unique to the test.
``fault_proxy`` / ``proxied_kafka`` / ``proxied_tansu`` (function)
    A :class:`~kgroup.testing.FaultProxy` factory, and brokers whose advertised address is
    a proxy (latency, black holes, stalls, cuts, refused connections); see
    :mod:`kgroup.testing._proxy_fixtures`.
``group_members`` (function, async; needs pytest-asyncio)
    A :class:`~kgroup.testing.MemberGroup`: ``await group_members.start(config)`` starts a
    member polling in the background; ``await group_members.wait_stable(topic, n)`` waits
    (on events, no sleeps) until the live members hold the ``n`` partitions between them.
    At the end of the test every member is closed and the ownership log is checked: no
    partition may have been held by two members at once.

Tests using these fixtures get the ``kafka`` / ``tansu`` / ``mock_cluster`` markers
automatically, so ``-m "not kafka"`` deselects them. Tests marked ``slow`` are skipped
unless ``--run-slow`` is given.

When a broker cannot run here (no Java, no Maven, package missing) its fixture skips with
a message naming what to install, except when the ``CI`` environment variable is set:
there it fails, because CI must run every broker.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import pytest

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the async fixtures need pytest-asyncio
    pytest_asyncio = None  # type: ignore[assignment]

from .._tansu import TansuBroker
from ._fixture_support import start_or_skip, started_logs
from ._kafka import KafkaBroker
from ._kafka_secure import SecureKafkaBroker
from ._members import MemberGroup
from ._mock_cluster import MockCluster
from ._ports import Broker
from ._proxy import FaultProxy

# The fault proxy's fixtures live in their own module; importing them here registers them.
from ._proxy_fixtures import (
    fault_proxy,
    proxied_kafka,
    proxied_kafka_session,
    proxied_tansu,
    proxied_tansu_session,
)

__all__ = [
    "BROKER_KINDS",
    "broker_params",
    "fault_proxy",
    "kafka_and_tansu",
    "proxied_kafka",
    "proxied_kafka_session",
    "proxied_tansu",
    "proxied_tansu_session",
]

#: The brokers the ``broker`` fixture runs over.
BROKER_KINDS = ("kafka", "tansu")

#: ``@broker_params`` runs a test on each broker (same as the ``broker`` default).
broker_params = pytest.mark.parametrize("broker", BROKER_KINDS, indirect=True)
kafka_and_tansu = broker_params

_FIXTURE_MARKERS = {
    "kafka_broker": "kafka",
    "secure_kafka_broker": "kafka",
    "proxied_kafka": "kafka",
    "proxied_kafka_session": "kafka",
    "proxied_tansu": "tansu",
    "proxied_tansu_session": "tansu",
    "kafka_broker_factory": "kafka",
    "tansu_broker": "tansu",
    "tansu_broker_factory": "tansu",
    "mock_cluster": "mock_cluster",
}
_MARKERS = {
    "kafka": "needs the Apache Kafka broker (Java + Maven)",
    "tansu": "needs the tansu broker",
    "mock_cluster": "needs librdkafka's mock cluster",
    "slow": "long chaos/soak runs, only with --run-slow",
}


# --- options, markers --------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kgroup", "kgroup test brokers")
    group.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run tests marked slow (long chaos/soak runs)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in _MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = bool(config.getoption("--run-slow"))
    skip_slow = pytest.mark.skip(reason="slow test: run with --run-slow")
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        wanted = {marker for fixture, marker in _FIXTURE_MARKERS.items() if fixture in names}
        callspec = getattr(item, "callspec", None)
        if "broker" in names and callspec is not None:
            kind = callspec.params.get("broker")
            if kind in BROKER_KINDS:
                wanted.add(kind)
        for marker in sorted(wanted):
            if item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))
        if not run_slow and item.get_closest_marker("slow") is not None:
            item.add_marker(skip_slow)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """After failures, say where the brokers' logs are (they outlive the session)."""
    failed = terminalreporter.stats.get("failed") or terminalreporter.stats.get("error")
    if not started_logs or not failed:
        return
    terminalreporter.section("kgroup test brokers")
    for what, path in started_logs:
        terminalreporter.write_line(f"{what} log: {path}")


# --- brokers -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka for the whole session (started on first use, log in pytest's tmp dir).
    Clients on ``bootstrap`` talk to it directly; its second listener sits behind a
    :class:`~kgroup.testing.FaultProxy` (``broker.proxy``, see ``proxied_kafka``)."""
    log_path = tmp_path_factory.mktemp("kafka-broker") / "broker.log"
    started_logs.append(("kafka_broker", log_path))
    proxy = FaultProxy(name="kafka-proxy")
    broker = KafkaBroker(log_path=log_path, proxy=proxy)
    try:
        start_or_skip(broker.start)
        yield broker
    finally:
        broker.close()
        proxy.close()


@pytest.fixture(scope="session")
def secure_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafkaBroker]:
    """Apache Kafka with an SSL and a SASL_SSL (PLAIN, SCRAM-SHA-512) listener and ACLs
    enforced; users ``admin`` (super user), ``alice`` and ``bob`` with random passwords
    (``broker.passwords``), CA in ``broker.ca_file``. Started on first use (about 3 s)."""
    log_path = tmp_path_factory.mktemp("secure-kafka") / "broker.log"
    started_logs.append(("secure_kafka_broker", log_path))
    broker = SecureKafkaBroker(log_path=log_path)
    try:
        start_or_skip(broker.start)
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """tansu for the whole session (started on first use). Do not restart it: use
    ``tansu_broker_factory`` for that, since a restart drops every topic and group."""
    log_path = tmp_path_factory.mktemp("tansu-broker") / "tansu.log"
    started_logs.append(("tansu_broker", log_path))
    broker = TansuBroker(log_path=log_path)
    try:
        start_or_skip(broker.start)
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session", params=BROKER_KINDS)
def broker(request: pytest.FixtureRequest) -> Broker:
    """The session's Kafka or tansu broker, per ``request.param`` ("kafka" / "tansu")."""
    kind = request.param
    if kind not in BROKER_KINDS:
        raise ValueError(f"broker fixture: unknown kind {kind!r}, expected one of {BROKER_KINDS}")
    value: Broker = request.getfixturevalue(f"{kind}_broker")
    return value


_B = TypeVar("_B", KafkaBroker, TansuBroker)


@contextlib.contextmanager
def _private_brokers(
    cls: type[_B], fixture: str, log_name: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., _B]]:
    """A factory of started private brokers of ``cls``; all closed on exit."""
    started: list[_B] = []

    def factory(**kwargs: Any) -> _B:
        kwargs.setdefault("log_path", tmp_path_factory.mktemp(f"{fixture}-") / log_name)
        broker = cls(**kwargs)
        started_logs.append((fixture, broker.log_path))
        started.append(broker)
        start_or_skip(broker.start)
        return broker

    try:
        yield factory
    finally:
        for broker in started:
            broker.close()


@pytest.fixture
def kafka_broker_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., KafkaBroker]]:
    """``factory(**KafkaBroker kwargs) -> KafkaBroker``: a started private Kafka broker."""
    with _private_brokers(
        KafkaBroker, "kafka_broker_factory", "broker.log", tmp_path_factory
    ) as factory:
        yield factory


@pytest.fixture
def tansu_broker_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., TansuBroker]]:
    """``factory(**TansuBroker kwargs) -> TansuBroker``: a started private tansu broker."""
    with _private_brokers(
        TansuBroker, "tansu_broker_factory", "tansu.log", tmp_path_factory
    ) as factory:
        yield factory


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    """A fresh librdkafka mock cluster with 3 brokers (ids 1..3), closed after the test."""
    cluster = start_or_skip(lambda: MockCluster(3))
    try:
        yield cluster
    finally:
        cluster.close()


# --- names -------------------------------------------------------------------------------

_counter = itertools.count(1)


def _slug(request: pytest.FixtureRequest, limit: int = 60) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-.")
    return name[:limit] or "test"


def _unique(prefix: str, request: pytest.FixtureRequest) -> str:
    return f"{prefix}-{_slug(request)}-{next(_counter)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def unique_group(request: pytest.FixtureRequest) -> str:
    """A consumer-group id unique to this test (and this run)."""
    return _unique("g", request)


TopicTarget = Broker | MockCluster


def _default_target(request: pytest.FixtureRequest) -> TopicTarget:
    for name in ("broker", "kafka_broker", "tansu_broker", "mock_cluster"):
        if name in request.fixturenames:
            target: TopicTarget = request.getfixturevalue(name)
            return target
    raise RuntimeError(
        "make_topic: the test uses no broker fixture (broker, kafka_broker, tansu_broker, "
        "mock_cluster); pass broker=... explicitly"
    )


@pytest.fixture
def make_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``make_topic(partitions=1, *, broker=None, name=None, replication=1) -> str``.

    Creates a topic with a unique name (or ``name``) on ``broker`` (default: the broker
    fixture this test uses) and waits until every partition has a leader. ``replication``
    applies to the mock cluster only (the real brokers here are single-node).
    """

    def factory(
        partitions: int = 1,
        *,
        broker: TopicTarget | None = None,
        name: str | None = None,
        replication: int = 1,
    ) -> str:
        target = broker if broker is not None else _default_target(request)
        topic = name or _unique("t", request)
        if isinstance(target, MockCluster):
            target.create_topic(topic, partitions, replication)
        else:
            target.create_topic(topic, partitions)
        return topic

    return factory


@pytest.fixture
def topic_factory(make_topic: Callable[..., str]) -> Callable[..., str]:
    """Alias of :func:`make_topic`."""
    return make_topic


# --- members -----------------------------------------------------------------------------

if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def group_members() -> AsyncIterator[MemberGroup]:
        """A MemberGroup whose members are all closed after the test; a clean test also
        checks that no partition was held by two members at once."""
        async with MemberGroup() as group:
            yield group
