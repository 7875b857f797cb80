"""pytest fixtures around :class:`~kgroup.testing.FaultProxy`.

``fault_proxy`` (function)
    ``fault_proxy(upstream=None, **FaultProxy kwargs) -> FaultProxy``: a started proxy;
    every proxy made is closed after the test.
``proxied_kafka`` / ``proxied_tansu`` (function, over a session-scoped broker and proxy)
    A :class:`~kgroup.testing.ProxiedBroker`: a broker whose advertised address is the
    proxy, so members bootstrapped on ``.bootstrap`` (the proxy) make every connection
    through it, while ``.direct_bootstrap`` reaches the broker itself. Counters are reset
    before each test and every fault is healed after it. These are separate brokers from
    ``kafka_broker`` / ``tansu_broker``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .._tansu import TansuBroker
from ._fixture_support import start_or_skip, started_logs
from ._kafka import KafkaBroker
from ._proxy import FaultProxy, ProxiedBroker

__all__ = [
    "fault_proxy",
    "proxied_kafka",
    "proxied_kafka_session",
    "proxied_tansu",
    "proxied_tansu_session",
]


@pytest.fixture
def fault_proxy() -> Iterator[Callable[..., FaultProxy]]:
    """``fault_proxy(upstream=None, **kwargs) -> FaultProxy``: a started proxy to
    ``upstream`` (``(host, port)``, or set later with ``set_upstream``); all closed after
    the test."""
    made: list[FaultProxy] = []

    def factory(upstream: tuple[str, int] | None = None, **kwargs: Any) -> FaultProxy:
        kwargs.setdefault("name", f"fault-proxy-{len(made) + 1}")
        proxy = FaultProxy(upstream, **kwargs)
        made.append(proxy)
        return proxy.start()

    try:
        yield factory
    finally:
        for proxy in made:
            proxy.close()


@pytest.fixture(scope="session")
def proxied_kafka_session(kafka_broker: KafkaBroker) -> ProxiedBroker[KafkaBroker]:
    """The session's Kafka (``kafka_broker``, which always has a proxied listener) with its
    proxy (use :func:`proxied_kafka`): one JVM serves both."""
    assert kafka_broker.proxy is not None
    return ProxiedBroker(kafka_broker, kafka_broker.proxy)


@pytest.fixture(scope="session")
def proxied_tansu_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ProxiedBroker[TansuBroker]]:
    """tansu behind a proxy for the whole session (use :func:`proxied_tansu`)."""
    log_path = tmp_path_factory.mktemp("proxied-tansu") / "tansu.log"
    started_logs.append(("proxied_tansu", log_path))
    proxy = FaultProxy(name="tansu-proxy")
    broker = TansuBroker(log_path=log_path, proxy=proxy)
    try:
        start_or_skip(broker.start)
        yield ProxiedBroker(broker, proxy)
    finally:
        broker.close()
        proxy.close()


@pytest.fixture
def proxied_kafka(
    proxied_kafka_session: ProxiedBroker[KafkaBroker],
) -> Iterator[ProxiedBroker[KafkaBroker]]:
    """The session's proxied Kafka; counters reset before the test, faults healed after."""
    proxied_kafka_session.proxy.reset_counters()
    try:
        yield proxied_kafka_session
    finally:
        proxied_kafka_session.proxy.heal()


@pytest.fixture
def proxied_tansu(
    proxied_tansu_session: ProxiedBroker[TansuBroker],
) -> Iterator[ProxiedBroker[TansuBroker]]:
    """The session's proxied tansu; counters reset before the test, faults healed after."""
    proxied_tansu_session.proxy.reset_counters()
    try:
        yield proxied_tansu_session
    finally:
        proxied_tansu_session.proxy.heal()
