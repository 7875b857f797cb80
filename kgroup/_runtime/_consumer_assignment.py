"""How a :class:`~kgroup.GroupConsumer` keeps its fetcher in step with the member's
assignment: the listener it gives the member, and where each newly assigned partition starts."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition

from .._core._consumer_protocol import TopicPartition
from .._errors import KGroupError
from .._listener import RebalanceListener
from .._log import logger
from ._consumer_drain import _ConsumerDrain

__all__ = ["NoOffsetForPartition", "aio_partition"]


class NoOffsetForPartition(KGroupError):
    """A partition was assigned with no committed offset and ``auto_offset_reset="none"``.

    ``partitions`` lists them. They stay assigned but are not fetched until the application
    positions them with :meth:`GroupConsumer.seek`."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions = frozenset(partitions)
        names = ", ".join(sorted(str(tp) for tp in self.partitions))
        super().__init__(
            f"no committed offset for {names} and auto_offset_reset='none': seek() them"
        )


def aio_partition(tp: TopicPartition) -> AioTopicPartition:
    return AioTopicPartition(tp.topic, tp.partition)


class _ConsumerListener(RebalanceListener):
    """The listener kgroup gives the member: it keeps the fetcher in step with the
    assignment, then calls the application's listener."""

    def __init__(self, consumer: _ConsumerAssignment) -> None:
        self._consumer = consumer

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self._consumer._on_revoked(partitions)

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await self._consumer._on_assigned(partitions)

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        await self._consumer._on_lost(partitions)


class _ConsumerAssignment(_ConsumerDrain):
    """The assignment layer of :class:`~kgroup.GroupConsumer`: its listener callbacks run
    inside ``member.poll()``/``close()``, in the caller's task."""

    _user_listener: RebalanceListener | None
    _auto_commit: bool
    _auto_commit_interval: int
    _reset: str
    _kafka: AIOKafkaConsumer | None
    _closed: bool
    _fetching: set[TopicPartition]  # handed to aiokafka, positioned
    _unpositioned: set[TopicPartition]  # owned, start offset not known yet
    _no_offset: set[TopicPartition]  # nothing committed, reset "none"
    _releasing: set[TopicPartition]  # revoke/lost callback started
    _revoke_commit_ok: frozenset[TopicPartition]  # revoked (not lost)
    _paused: set[TopicPartition]
    _pending_error: KGroupError | None
    _next_auto_commit: float | None

    async def _call_user(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        method = getattr(self._user_listener, name, None)
        if method is None:
            return
        result = method(frozenset(partitions))
        if inspect.isawaitable(result):
            await result

    async def _on_assigned(self, added: frozenset[TopicPartition]) -> None:
        self._releasing -= added
        self._next_auto_commit = self._now() + self._auto_commit_interval / 1000.0
        if added:
            await self._position(added)
        await self._call_user("on_partitions_assigned", added)

    async def _on_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self._releasing |= revoked  # no record of these is handed out from now on
        self._revoke_commit_ok = revoked
        try:
            if self._draining or self._closing:
                self._end_drain()
                await self._wait_for_batch(revoked)
            if self._auto_commit and revoked:
                await self._auto_commit_now(revoked & self._positions.keys())
            await self._call_user("on_partitions_revoked", revoked)
        finally:
            self._revoke_commit_ok = frozenset()
            self._drop(revoked)

    async def _on_lost(self, lost: frozenset[TopicPartition]) -> None:
        self._releasing |= lost
        if self._draining:
            self._end_drain()
        self._drop(lost)
        await self._call_user("on_partitions_lost", lost)

    def _drop(self, partitions: frozenset[TopicPartition]) -> None:
        """Forget ``partitions``: out of the fetcher (its buffered records go with it)."""
        for tp in partitions:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)
        self._fetching -= partitions
        self._unpositioned -= partitions
        self._no_offset -= partitions
        self._paused -= partitions
        self._releasing -= partitions
        self._install()

    def _install(self) -> None:
        """Hand ``_fetching`` to aiokafka at the known positions. No await inside: the
        fetcher's background task sees the assignment and its positions together."""
        kafka = self._kafka
        if kafka is None or self._closed:
            return
        tps = sorted(self._fetching)
        kafka.assign([aio_partition(tp) for tp in tps])
        for tp in tps:
            position = self._positions.get(tp)
            if position is not None:
                kafka.seek(aio_partition(tp), position)
        paused = [aio_partition(tp) for tp in tps if tp in self._paused]
        if paused:
            kafka.pause(*paused)

    async def _position(self, partitions: Iterable[TopicPartition]) -> None:
        """Start ``partitions`` at their committed offsets, or by ``auto_offset_reset``.
        Partitions whose OffsetFetch fails stay unpositioned; the next fetch call retries."""
        wanted = frozenset(partitions)
        if not wanted:
            return
        self._unpositioned |= wanted
        try:
            committed = await self._member.fetch_committed(wanted)
        except KGroupError as exc:
            logger.warning(
                "consumer.offset_fetch_failed",
                group=self._config.group_id,
                partitions=sorted(str(tp) for tp in wanted),
                error=repr(exc),
            )
            return
        owned = self._member.assignment
        fresh: set[TopicPartition] = set()
        missing: set[TopicPartition] = set()
        for tp in wanted:
            if tp not in owned or tp not in self._unpositioned:
                continue  # released (or seek()ed) while we waited
            found = committed.get(tp)
            if found is not None and found.offset >= 0:
                self._positions[tp] = found.offset
                self._committed[tp] = found.offset
            elif self._reset == "none":
                missing.add(tp)
                self._unpositioned.discard(tp)
                self._no_offset.add(tp)
                continue
            else:
                fresh.add(tp)
            self._unpositioned.discard(tp)
            self._fetching.add(tp)
        if wanted & self._fetching:
            self._install()
        logger.info(
            "consumer.positioned",
            group=self._config.group_id,
            positions={str(tp): self._positions.get(tp) for tp in sorted(wanted)},
            reset=sorted(str(tp) for tp in fresh),
        )
        if fresh:
            await self._resolve_reset(fresh)
        if missing:
            self._pending_error = NoOffsetForPartition(missing)

    async def _resolve_reset(self, partitions: Iterable[TopicPartition]) -> None:
        """Wait for aiokafka's offset reset of ``partitions`` and remember where it put
        them, so a later re-assignment of the fetcher keeps their place."""
        kafka = self._kafka
        if kafka is None:
            return

        bound = self._config.request_timeout_ms / 1000.0

        async def one(tp: TopicPartition) -> None:
            # Best effort: without it the partition is still fetched from the reset
            # position; it is only not committed until a record is handed out.
            with contextlib.suppress(Exception):
                position = await asyncio.wait_for(kafka.position(aio_partition(tp)), bound)
                if tp in self._fetching and tp not in self._positions:
                    self._positions[tp] = int(position)

        await asyncio.gather(*(one(tp) for tp in partitions))
