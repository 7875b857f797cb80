"""The broker a chaos schedule runs against, and the admin operations its steps need."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kgroup.testing import FaultProxy, KafkaBroker, MockCluster, TansuBroker

from ._schedule import MemberSpec

__all__ = ["Target"]


@dataclass
class Target:
    """The broker a schedule runs against: Kafka (with its fault proxy), tansu or the mock."""

    kind: str
    broker: KafkaBroker | TansuBroker | MockCluster
    proxy: FaultProxy | None = None

    @property
    def direct_bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def proxied_bootstrap(self) -> str:
        if self.proxy is None:
            raise RuntimeError(f"{self.kind}: no fault proxy")
        return self.proxy.address

    def bootstrap_for(self, spec: MemberSpec) -> str:
        return self.proxied_bootstrap if spec.via_proxy else self.direct_bootstrap

    async def create_topic(self, name: str, partitions: int, timeout: float = 60.0) -> None:
        """CreateTopics (an existing topic counts as done). On a real broker, retried until
        ``timeout`` while it does not answer: a schedule's step can come just after a
        broker restart that is slower than planned."""
        broker = self.broker
        if isinstance(broker, MockCluster):
            broker.create_topic(name, partitions, 1)
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                await broker.create_topic_async(name, partitions, exist_ok=True, timeout=timeout)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.25)  # then try again, until the deadline

    async def grow_topic(self, name: str, total: int, timeout: float = 60.0) -> None:
        """CreatePartitions: ``name`` gets ``total`` partitions (:meth:`_admin`); an attempt
        refused because an earlier one already took effect counts as done, any other
        refusal ends it."""
        from aiokafka.admin import NewPartitions
        from aiokafka.errors import InvalidPartitionsError

        async def grow(admin: Any) -> None:
            try:
                await admin.create_partitions({name: NewPartitions(total_count=total)})
            except InvalidPartitionsError as exc:
                if await _partition_count(admin, name) < total:
                    raise _Refused from exc

        await self._admin(grow, timeout)

    async def delete_topic(self, name: str, timeout: float = 60.0) -> None:
        """DeleteTopics (:meth:`_admin`); a topic already gone (an earlier attempt took
        effect) counts as done."""
        from aiokafka.errors import UnknownTopicOrPartitionError

        async def delete(admin: Any) -> None:
            with contextlib.suppress(UnknownTopicOrPartitionError):
                await admin.delete_topics([name])

        await self._admin(delete, timeout)

    async def _admin(self, action: Callable[[Any], Awaitable[None]], timeout: float) -> None:
        """``action(admin)`` with an admin client of the broker (Kafka, directly, not
        through the proxy), again every 0.25 s until ``timeout`` while it fails (the broker
        may be restarting); at once if it raises :class:`_Refused` (its cause is raised)."""
        from aiokafka.admin import AIOKafkaAdminClient

        deadline = time.monotonic() + timeout
        while True:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.direct_bootstrap, request_timeout_ms=10_000
            )
            try:
                await admin.start()
                await action(admin)
                return
            except _Refused as refused:
                assert refused.__cause__ is not None
                raise refused.__cause__ from None
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                await admin.close()
            await asyncio.sleep(0.25)  # then try again, until the deadline


class _Refused(Exception):
    """Raised by an :meth:`Target._admin` action, from the refusal that ends it at once."""


async def _partition_count(admin: Any, topic: str) -> int:
    described = await admin.describe_topics([topic])
    return len(described[0]["partitions"])
