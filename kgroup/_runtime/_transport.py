"""The transport seam: how a member reaches the brokers.

Everything the member's runtime sends goes through a :class:`Transport`: the bootstrap side
(FindCoordinator, topic metadata for the leader's assignment) and connections to the group
coordinator. :class:`KafkaTransport`, the default, speaks Kafka's wire protocol through
aiokafka's connection layer; ``kgroup.testing.MockTransport`` answers from a function in
memory (httpx's ``MockTransport`` is the model), so tests and simulations drive the real
:class:`~kgroup.GroupMember` without sockets.

Requests and responses are kgroup's message values (``kgroup.testing`` re-exports them).
A transport reports failures with kgroup's errors: ``CoordinatorError`` for anything
retriable (refused, timed out, disconnected), ``RemoteProtocolError`` for a malformed
answer, ``AuthenticationFailed`` for rejected credentials.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._core._messages import FindCoordinatorRequest, FindCoordinatorResponse
from .._core._racks import TopicLayout
from ._connection import BrokerConnection, Cluster
from ._security import connection_kwargs

if TYPE_CHECKING:
    from .._config import GroupConfig

__all__ = ["Connection", "KafkaTransport", "Transport"]


@runtime_checkable
class Connection(Protocol):
    """One connection to one broker."""

    @property
    def connected(self) -> bool:
        """False once the connection failed or was closed."""
        ...

    async def request(self, message: Any, timeout_ms: float) -> Any:
        """Send ``message`` and return the decoded response."""
        ...

    def close(self, reason: str = ...) -> asyncio.Future[Any]:
        """Close now; every request in flight fails. The future is done once closed."""
        ...

    async def aclose(self) -> None:
        """Close and wait until closed."""
        ...


@runtime_checkable
class Transport(Protocol):
    """How one member reaches the cluster. One transport serves one member."""

    async def connect(self, host: str, port: int) -> Connection:
        """A new connection to the broker at ``host:port`` (the group coordinator)."""
        ...

    async def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        """Send FindCoordinator to any bootstrap broker."""
        ...

    async def partitions_for(self, topics: Sequence[str]) -> Mapping[str, int]:
        """Partition counts of ``topics`` (missing topics left out). A
        :class:`~kgroup.TopicLayout` also gives the replicas' racks, for rack-aware
        assignors; a plain ``dict`` means none are known."""
        ...

    async def list_topics(self) -> Mapping[str, int]:
        """Partition counts of every (non-internal) topic: pattern subscriptions use it."""
        ...

    async def aclose(self) -> None:
        """Close every connection the transport opened itself."""
        ...


class KafkaTransport:
    """The default transport: Kafka's wire protocol through aiokafka's connection layer,
    with the member's TLS/SASL settings."""

    def __init__(self, config: GroupConfig) -> None:
        self._client_id = config.client_id
        self._timeout_ms = config.request_timeout_ms
        #: TLS/SASL arguments for every connection (secrets stay inside aiokafka).
        self._security = connection_kwargs(config)
        self._cluster = Cluster(
            config.brokers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            security=self._security,
        )

    async def connect(self, host: str, port: int) -> BrokerConnection:
        return await BrokerConnection.open(
            host,
            port,
            client_id=self._client_id,
            timeout_ms=self._timeout_ms,
            security=self._security,
        )

    async def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        return await self._cluster.find_coordinator(request)

    async def partitions_for(self, topics: Sequence[str]) -> TopicLayout:
        return await self._cluster.partitions_for(topics)

    async def list_topics(self) -> TopicLayout:
        return await self._cluster.list_topics()

    async def aclose(self) -> None:
        await self._cluster.aclose()
