"""The fetch loop under :class:`~kgroup.GroupConsumer`'s fetch calls: polling the member,
waiting for records or a rebalance, and handing out only records the member may deliver."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord
from aiokafka.structs import TopicPartition as AioTopicPartition

from .._core._assignors import RebalanceProtocol
from .._core._consumer_protocol import TopicPartition
from .._errors import UsageError
from .._log import logger
from ._consumer_assignment import _ConsumerAssignment, aio_partition

__all__: list[str] = []

_Fetched = dict[AioTopicPartition, list[ConsumerRecord[Any, Any]]]


class _ConsumerFetch(_ConsumerAssignment):
    """The fetch layer of :class:`~kgroup.GroupConsumer`."""

    _started: bool
    _ready: bool  # start() has returned
    _poll_lock: asyncio.Lock
    _poll_slice: float
    _records_delivered: int
    _records_dropped: int
    #: A fetch cut short by a rebalance and its wake-up, not awaited yet (_settle_fetch).
    _unsettled: tuple[asyncio.Future[Any], ...]

    def _check_open(self) -> AIOKafkaConsumer:
        if self._kafka is None or not self._started:
            raise UsageError("GroupConsumer is not started: use 'async with' or await start()")
        if not self._ready and not (self._closed or self._closing):
            raise UsageError("GroupConsumer is starting: call it once start() has returned")
        if self._closed or self._closing:
            raise UsageError("GroupConsumer is closed")
        return self._kafka

    def _lease_holds(self) -> bool:
        valid_until = self._member.valid_until
        return valid_until is not None and self._now() < valid_until

    def _deliverable(self, partitions: Iterable[TopicPartition] = ()) -> frozenset[TopicPartition]:
        """Partitions whose records may be handed to the application right now."""
        if not self._lease_holds():
            return frozenset()
        ready = (self._fetching & self._member.assignment) - self._releasing
        wanted = frozenset(partitions)
        if wanted:
            ready &= wanted
        return frozenset(ready)

    def _rebalancing(self) -> bool:
        """A rebalance is under way and nothing may be delivered until it completes. A
        COOPERATIVE member that still holds a lease on partitions keeps delivering them
        (only a revoke callback takes partitions away), so it is not blocked."""
        member = self._member
        if self._draining or not member.rebalance_pending:
            return False
        keeps = member.rebalance_protocol is RebalanceProtocol.COOPERATIVE and bool(
            member.assignment
        )
        return not (keeps and self._lease_holds())

    async def _poll_member(self, deadline: float) -> None:
        """The poll part of a fetch call: reset the poll timer, run what is pending; while
        a rebalance is in progress keep driving it until ``deadline``. While close() drains
        (``_consumer_drain``) it drives the member itself: nothing is polled here."""
        if self._draining:
            return
        async with self._poll_lock:
            await self._member.poll(timeout=0)
            while not (self._closing or self._draining) and self._rebalancing():
                remaining = deadline - self._now()
                if remaining <= 0:
                    break
                await self._member.poll(timeout=remaining)
            retry = frozenset(self._unpositioned) & self._member.assignment
            if retry and not (self._closing or self._draining):
                await self._position(retry)
        error, self._pending_error = self._pending_error, None
        if error is not None:
            raise error

    async def _maybe_auto_commit(self) -> None:
        due = self._next_auto_commit
        if not self._auto_commit or due is None or self._now() < due or self._draining:
            return
        self._next_auto_commit = self._now() + self._auto_commit_interval / 1000.0
        if self._rebalancing():
            return
        await self._auto_commit_now(self._deliverable())

    async def _wait_wake(self, timeout: float) -> bool:
        """Wait until the member has something for poll() (or ``timeout``). True if so."""
        if timeout <= 0:
            return False
        if self._draining:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._drain_over.wait()
            return self._drain_over.is_set()
        return await self._member.wait_rebalance_pending(timeout)

    async def _wake(self) -> bool:
        """What cuts a waiting fetch short: a pending rebalance, or the end of a drain."""
        if self._draining:
            await self._drain_over.wait()
            return True
        return await self._member.wait_rebalance_pending()

    async def _fetch(
        self, partitions: frozenset[TopicPartition], timeout: float, max_records: int | None
    ) -> _Fetched:
        """aiokafka's getmany, cut short when a rebalance becomes pending. Cancelling it is
        safe: aiokafka drains its buffer only after its last await.

        A fetch cut short is not awaited here: the rebalance that cut it runs at once (the
        caller polls the member next), and the cancelled fetch ends in the loop's next
        step. :meth:`_settle_fetch` collects it before the next fetch and in ``close()``."""
        kafka = self._check_open()
        await self._settle_fetch()
        tps = [aio_partition(tp) for tp in sorted(partitions)]
        # Buffered records first, without a task: the common case under load.
        drained: _Fetched = await kafka.getmany(*tps, timeout_ms=0, max_records=max_records)
        if drained or timeout <= 0:
            return drained
        fetch: asyncio.Future[_Fetched] = asyncio.ensure_future(
            kafka.getmany(*tps, timeout_ms=max(1, int(timeout * 1000)), max_records=max_records)
        )
        wake: asyncio.Future[Any] = asyncio.ensure_future(self._wake())
        try:
            await asyncio.wait({fetch, wake}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not wake.done():
                wake.cancel()
            if not fetch.done():
                fetch.cancel()
            self._unsettled = (fetch, wake)
        if fetch.done() and not fetch.cancelled():
            self._unsettled = (wake,)
            result: _Fetched = fetch.result()
            return result
        return {}

    async def _settle_fetch(self) -> None:
        """Wait for the fetch (and its wake-up) that :meth:`_fetch` cut short, if any.
        Should the fetch have ended with records despite its cancellation, aiokafka's
        position goes back to the first of them, so none is skipped; an error it ended
        with was not asked for and is dropped, as a cancelled fetch's would be."""
        unsettled, self._unsettled = self._unsettled, ()
        if not unsettled:
            return
        await asyncio.wait(unsettled)
        fetch = unsettled[0]
        if len(unsettled) == 2 and not fetch.cancelled() and fetch.exception() is None:
            kafka = self._kafka
            for aio_tp, records in fetch.result().items():
                if records and kafka is not None:
                    kafka.seek(aio_tp, records[0].offset)
        for task in unsettled:
            if not task.cancelled():
                task.exception()  # retrieved: no "exception was never retrieved" warning

    def _hand_out(
        self, fetched: Mapping[AioTopicPartition, list[ConsumerRecord[Any, Any]]]
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        """Keep only records the application may see now; remember the positions."""
        allowed = self._deliverable()
        out: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
        for aio_tp, records in fetched.items():
            if not records:
                continue
            tp = TopicPartition(aio_tp.topic, aio_tp.partition)
            if tp not in allowed:
                self._records_dropped += len(records)
                if tp in self._fetching and self._kafka is not None:
                    # aiokafka moved past them: go back, so nothing is skipped if kept.
                    self._kafka.seek(aio_tp, records[0].offset)
                logger.debug(
                    "consumer.records_dropped", group=self._config.group_id, partition=str(tp)
                )
                continue
            out[tp] = records
            self._positions[tp] = records[-1].offset + 1
            self._records_delivered += len(records)
        return out
