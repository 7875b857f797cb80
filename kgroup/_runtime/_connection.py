"""Broker connections over aiokafka's connection layer, with kgroup's own timeouts.

aiokafka's ``AIOKafkaConnection`` has one timeout for every request; a JoinGroup may be held
by the coordinator for the whole rebalance timeout, so kgroup opens its connections with a
large aiokafka timeout and bounds each request itself (spec §3.1, §11.6). A request that
times out closes its connection: every other request in flight on it fails promptly with a
disconnect, and nothing is left orphaned. aiokafka's exceptions never escape this module:
transport failures become :class:`CoordinatorError` (retriable, chained ``from`` the cause),
malformed answers :class:`RemoteProtocolError`.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka.conn import AIOKafkaConnection, create_conn
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from .. import _protocol
from .._core._messages import FindCoordinatorResponse
from .._errors import (
    CoordinatorError,
    RemoteProtocolError,
    UnsupportedVersion,
)

__all__ = ["BrokerConnection", "Cluster", "SupportsRequest"]

# aiokafka's own per-connection timeout: larger than any request kgroup sends, so that
# kgroup's per-request deadlines are the ones that fire.
_AIOKAFKA_TIMEOUT_MS = 2**31 - 1


class SupportsRequest(Protocol):
    async def request(self, message: Any, timeout_ms: float) -> Any: ...


class BrokerConnection:
    """One TCP connection to one broker, requests bounded by per-request timeouts."""

    def __init__(self, conn: AIOKafkaConnection, host: str, port: int) -> None:
        self._conn = conn
        self.host = host
        self.port = port
        self._closed = False

    @classmethod
    async def open(
        cls, host: str, port: int, *, client_id: str, timeout_ms: float
    ) -> BrokerConnection:
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                conn = await create_conn(
                    host, port, client_id=client_id, request_timeout_ms=_AIOKAFKA_TIMEOUT_MS
                )
        except (OSError, KafkaError, TimeoutError) as exc:
            raise CoordinatorError(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return cls(conn, host, port)

    @property
    def connected(self) -> bool:
        return not self._closed and bool(self._conn.connected())

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        versions: dict[int, tuple[int, int]] = self._conn._versions
        return versions

    async def request(self, message: Any, timeout_ms: float) -> Any:
        """Send a kgroup message (from ``kgroup._core._messages``) and return its decoded
        response value. Raises CoordinatorError on transport failure or timeout (the
        connection is then closed), UnsupportedVersion, or RemoteProtocolError."""
        if self._closed:
            raise CoordinatorError(f"connection to {self.host}:{self.port} is closed")
        wire = _protocol.to_wire(message)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                response = await self._conn.send(wire)
        except TimeoutError as exc:
            self.close()
            raise CoordinatorError(
                f"{type(message).__name__} to {self.host}:{self.port} timed out after "
                f"{timeout_ms:.0f} ms"
            ) from exc
        except (UnsupportedVersion, RemoteProtocolError):
            raise
        except KafkaError as exc:
            self.close()
            raise CoordinatorError(
                f"{type(message).__name__} to {self.host}:{self.port} failed: {exc!r}"
            ) from exc
        except (OSError, ValueError) as exc:
            self.close()
            raise CoordinatorError(
                f"{type(message).__name__} to {self.host}:{self.port} failed: {exc!r}"
            ) from exc
        return _protocol.from_wire(response)

    async def raw_request(self, request: Any, timeout_ms: float) -> Any:
        """Send an aiokafka ``Request`` builder as is (metadata); same error mapping."""
        if self._closed:
            raise CoordinatorError(f"connection to {self.host}:{self.port} is closed")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await self._conn.send(request)
        except TimeoutError as exc:
            self.close()
            raise CoordinatorError(f"request to {self.host}:{self.port} timed out") from exc
        except (KafkaError, OSError, ValueError, NotImplementedError) as exc:
            self.close()
            raise CoordinatorError(f"request to {self.host}:{self.port} failed: {exc!r}") from exc

    def close(self) -> asyncio.Future[Any]:
        """Close at once; in-flight requests fail with a disconnect. Returns a future that
        resolves when the socket is gone."""
        self._closed = True
        fut: asyncio.Future[Any] = self._conn.close(reason=None)
        return fut

    async def aclose(self) -> None:
        fut = self.close()
        try:
            await asyncio.wait_for(asyncio.shield(fut), 5)
        except (TimeoutError, Exception):  # pragma: no cover - socket teardown only
            pass


class Cluster:
    """The member's view of the cluster: one bootstrap connection (reopened on failure),
    metadata on demand, and FindCoordinator."""

    def __init__(
        self,
        brokers: Sequence[tuple[str, int]],
        *,
        client_id: str,
        request_timeout_ms: int,
    ) -> None:
        self._seeds = list(brokers)
        self._client_id = client_id
        self._timeout_ms = request_timeout_ms
        self._known: dict[int, tuple[str, int]] = {}
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()
        self._rr = itertools.count(random.randrange(1 << 16))
        self._closed = False

    def _candidates(self) -> list[tuple[str, int]]:
        addresses = list(dict.fromkeys([*self._seeds, *self._known.values()]))
        start = next(self._rr) % len(addresses)
        return addresses[start:] + addresses[:start]

    async def connection(self) -> BrokerConnection:
        """A live connection to some broker (the least-loaded one, in the Java client's
        words; here: the current one, else the next reachable address)."""
        async with self._lock:
            if self._closed:
                raise CoordinatorError("cluster connection closed")
            if self._conn is not None and self._conn.connected:
                return self._conn
            if self._conn is not None:
                await self._conn.aclose()
                self._conn = None
            errors: list[str] = []
            for host, port in self._candidates():
                try:
                    self._conn = await BrokerConnection.open(
                        host, port, client_id=self._client_id, timeout_ms=self._timeout_ms
                    )
                    return self._conn
                except CoordinatorError as exc:
                    errors.append(str(exc))
            raise CoordinatorError("no broker reachable: " + "; ".join(errors))

    async def find_coordinator(self, message: Any) -> FindCoordinatorResponse:
        conn = await self.connection()
        response: FindCoordinatorResponse = await conn.request(message, self._timeout_ms)
        return response

    async def partitions_for(self, topics: Sequence[str]) -> dict[str, int]:
        """Partition counts of ``topics`` from a fresh Metadata request. Topics that do not
        exist (or answer an error) are left out, as the assignors expect (§6.3)."""
        if not topics:
            return {}
        conn = await self.connection()
        resp = await conn.raw_request(
            MetadataRequest(list(topics), allow_auto_topic_creation=False), self._timeout_ms
        )
        try:
            for broker in resp.brokers:
                node_id, host, port = broker[0], broker[1], broker[2]
                self._known[int(node_id)] = (str(host), int(port))
            counts: dict[str, int] = {}
            for topic in resp.topics:
                error_code, name, partitions = topic[0], topic[1], topic[-1]
                if error_code == 0:
                    counts[str(name)] = len(partitions)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"malformed Metadata response: {exc!r}") from exc
        return counts

    async def aclose(self) -> None:
        async with self._lock:
            self._closed = True
            if self._conn is not None:
                await self._conn.aclose()
                self._conn = None
