"""GroupConsumer: records delivery on top of kgroup's membership, with the records read by
an aiokafka consumer that never talks to the group coordinator."""

# Who owns what is decided by :class:`~kgroup.GroupMember` (kgroup's own join, sync,
# heartbeat and lease). The records are read by an :class:`aiokafka.AIOKafkaConsumer` created
# with ``group_id=None`` and driven by manual ``assign()``/``seek()``: aiokafka's public API
# gives prefetching, decompression, deserialisers, isolation levels and offset resets, and
# it never talks to the group coordinator, so membership and commits stay kgroup's alone.
# (Driving aiokafka's ``Fetcher`` directly would save nothing but tie kgroup to private
# aiokafka code.) GroupConsumer's internals are layered: ``_consumer_commits`` (offset
# commits), ``_consumer_assignment`` (the listener, starting positions) and
# ``_consumer_fetch`` (the fetch loop); its public methods are all defined here.
#
# Invariants (spec §6.2, §6.4, §9, §11.4):
#
# - Every fetch call (``getmany``, ``getone``, ``__anext__``) is a poll: it resets the poll
#   timer, runs a pending rebalance (and the listener callbacks) in the caller's task, and a
#   fetch that waits for records wakes up as soon as a rebalance becomes pending.
# - A record is handed to the application only for a partition that the member owns now,
#   whose revoke/lost callback has not started, and only while the member's lease holds
#   (``member.valid_until``). Everything is decided after the last ``await`` of the call, so
#   no callback can slip in between the check and the return.
# - Revoked partitions: delivery stops, their processed positions are auto-committed (when
#   enabled), the user's callback runs, then they leave the fetcher (buffered records
#   dropped). Lost partitions: delivery stops and they leave the fetcher without any commit,
#   then the user's callback runs.
# - Newly assigned partitions start at their committed offset (OffsetFetch), or where
#   ``auto_offset_reset`` says when nothing is committed; then the user's callback runs.

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from .._config import GroupConfig
from .._core._consumer_protocol import TopicPartition
from .._core._state import MemberState
from .._errors import CommitFailed, ConfigError, KGroupError, UsageError
from .._listener import RebalanceListener
from .._log import logger
from .._stats import ConsumerStats
from ._consumer_assignment import _ConsumerListener, aio_partition
from ._consumer_fetch import _ConsumerFetch
from ._list_offsets import OffsetAndTimestamp, as_partition, log_offsets, time_offsets
from ._member import GroupMember
from ._offsets import OffsetAndMetadata
from ._security import connection_kwargs

__all__ = ["ConsumerRecord", "GroupConsumer"]


_RESETS = ("earliest", "latest", "none")
_ISOLATION = ("read_uncommitted", "read_committed")
#: How long one wait inside getone()/__anext__ lasts before it polls again (seconds).
_GETONE_SLICE = 1.0


def _check_ms(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, f"must be an int >= {minimum}, got {value!r}")
    return value


class GroupConsumer(_ConsumerFetch):
    """A Kafka consumer whose group membership is kgroup's :class:`GroupMember`.

    Example::

        config = GroupConfig(bootstrap_servers="localhost:9092", group_id="g", topics=["t"])
        async with GroupConsumer(config, auto_offset_reset="earliest") as consumer:
            async for record in consumer:
                await handle(record)        # auto-commit stores what was handed out

    Parameters (besides ``config`` and ``listener``, as for :class:`GroupMember`):

    - ``enable_auto_commit``: commit the processed positions every ``auto_commit_interval_ms``
      (from the fetch calls), before partitions are revoked, and on ``close()``.
    - ``auto_offset_reset``: where a partition with no committed offset starts:
      ``"earliest"``, ``"latest"`` (default) or ``"none"`` (raise :class:`NoOffsetForPartition`).
    - ``key_deserializer`` / ``value_deserializer``: callables on the raw bytes.
    - fetch settings handed to aiokafka: ``fetch_max_wait_ms``, ``fetch_min_bytes``,
      ``fetch_max_bytes``, ``max_partition_fetch_bytes``, ``max_poll_records`` (cap of one
      ``getmany`` when ``max_records`` is not given), ``isolation_level``
      (``"read_uncommitted"`` or ``"read_committed"``), ``check_crcs``.

    The "processed position" of a partition is the offset after the last record handed to
    the application (or where it was positioned: assignment, ``seek()``). ``commit()``
    without arguments commits those positions; at-least-once delivery holds when the
    application has processed every record a fetch call returned before it makes the next
    fetch call (rebalances run only inside fetch calls and ``close()``).
    """

    def __init__(
        self,
        config: GroupConfig,
        *,
        listener: RebalanceListener | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: str = "latest",
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        max_poll_records: int | None = None,
        isolation_level: str = "read_uncommitted",
        check_crcs: bool = True,
    ) -> None:
        if not isinstance(config, GroupConfig):
            raise UsageError(f"config must be a GroupConfig, got {type(config).__name__}")
        if not config.topics:
            raise ConfigError("topics", "a GroupConsumer needs at least one topic to consume")
        if not isinstance(enable_auto_commit, bool):
            raise ConfigError("enable_auto_commit", f"must be a bool, got {enable_auto_commit!r}")
        if auto_offset_reset not in _RESETS:
            raise ConfigError(
                "auto_offset_reset",
                f"must be one of {', '.join(_RESETS)}, got {auto_offset_reset!r}",
            )
        if isolation_level not in _ISOLATION:
            raise ConfigError(
                "isolation_level",
                f"must be one of {', '.join(_ISOLATION)}, got {isolation_level!r}",
            )
        for name, fn in (
            ("key_deserializer", key_deserializer),
            ("value_deserializer", value_deserializer),
        ):
            if fn is not None and not callable(fn):
                raise ConfigError(name, f"must be callable or None, got {fn!r}")
        if max_poll_records is not None:
            _check_ms("max_poll_records", max_poll_records, minimum=1)
        self._config = config
        self._user_listener = listener
        self._auto_commit = enable_auto_commit
        self._auto_commit_interval = _check_ms(
            "auto_commit_interval_ms", auto_commit_interval_ms, minimum=1
        )
        self._reset = auto_offset_reset
        self._kafka_kwargs: dict[str, Any] = {
            "key_deserializer": key_deserializer,
            "value_deserializer": value_deserializer,
            "fetch_max_wait_ms": _check_ms("fetch_max_wait_ms", fetch_max_wait_ms),
            "fetch_min_bytes": _check_ms("fetch_min_bytes", fetch_min_bytes, minimum=1),
            "fetch_max_bytes": _check_ms("fetch_max_bytes", fetch_max_bytes, minimum=1),
            "max_partition_fetch_bytes": _check_ms(
                "max_partition_fetch_bytes", max_partition_fetch_bytes, minimum=1
            ),
            "max_poll_records": max_poll_records,
            "isolation_level": isolation_level,
            "check_crcs": bool(check_crcs),
        }
        self._member = GroupMember(config, listener=_ConsumerListener(self))
        self._kafka: AIOKafkaConsumer | None = None
        self._started = False
        self._ready = False
        self._closing = False
        self._closed = False
        # The drain (``_consumer_drain``): close() in a handoff while another task fetches.
        self._draining = False
        self._drain_over = asyncio.Event()
        self._fetcher: asyncio.Task[Any] | None = None
        self._in_hand: dict[TopicPartition, int] = {}
        self._back = asyncio.Event()
        self._back.set()
        #: close()'s budget for its commit (s); a revoke waits a quarter of it for a batch.
        self._close_budget = min(config.close_timeout_ms, config.request_timeout_ms) / 1000.0
        self._batch_wait = self._close_budget / 4
        self._poll_lock = asyncio.Lock()
        self._unsettled: tuple[asyncio.Future[Any], ...] = ()
        self._poll_slice = config.max_poll_interval_ms / 2000.0
        # Partition bookkeeping (all mutated on the event loop only).
        self._fetching: set[TopicPartition] = set()  # handed to aiokafka, positioned
        self._unpositioned: set[TopicPartition] = set()  # owned, start offset not known yet
        self._no_offset: set[TopicPartition] = set()  # nothing committed, reset "none"
        self._releasing: set[TopicPartition] = set()  # revoke/lost callback started
        self._revoke_commit_ok: frozenset[TopicPartition] = frozenset()  # revoked (not lost)
        self._positions: dict[TopicPartition, int] = {}  # processed positions
        self._committed: dict[TopicPartition, int] = {}  # last offset known committed
        self._paused: set[TopicPartition] = set()
        self._pending_error: KGroupError | None = None
        self._next_auto_commit: float | None = None
        # Counters.
        self._records_delivered = 0
        self._records_dropped = 0
        self._commits_ok = 0
        self._commits_failed = 0
        self._auto_commits_ok = 0
        self._auto_commits_failed = 0
        self._last_commit_at: float | None = None

    # -- public state ----------------------------------------------------------------------------

    @property
    def member(self) -> GroupMember:
        return self._member

    @property
    def config(self) -> GroupConfig:
        return self._config

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the member owns now (its last completed rebalance)."""
        return self._member.assignment

    def stats(self) -> ConsumerStats:
        """``member.stats()`` plus records delivered/dropped, commit counts and the age of
        the last successful commit (ms, None if none yet): a :class:`~kgroup.ConsumerStats`."""
        member = self._member.stats()
        now = self._now()
        return ConsumerStats(
            **{f.name: getattr(member, f.name) for f in dataclasses.fields(member)},
            records_delivered=self._records_delivered,
            records_dropped=self._records_dropped,
            commits_ok=self._commits_ok,
            commits_failed=self._commits_failed,
            auto_commits_ok=self._auto_commits_ok,
            auto_commits_failed=self._auto_commits_failed,
            last_commit_age_ms=None
            if self._last_commit_at is None
            else round((now - self._last_commit_at) * 1000.0, 1),
            assigned=len(self._member.assignment),
            fetching=len(self._fetching),
            paused=len(self._paused),
        )

    @property
    def closed(self) -> bool:
        """True once ``close()`` has begun to release the partitions: no record is handed
        out any more, ``async for`` ends and other fetch calls raise UsageError."""
        return self._closing or self._closed

    def __repr__(self) -> str:
        return (
            f"<GroupConsumer group={self._config.group_id!r} "
            f"state={self._member.state.name} assigned={len(self._member.assignment)}>"
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> GroupConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect the fetcher and start the member. Joining happens in the first fetch."""
        if self._started:
            raise UsageError("GroupConsumer.start() was already called")
        self._started = True
        cfg = self._config
        kafka = AIOKafkaConsumer(
            bootstrap_servers=[f"{host}:{port}" for host, port in cfg.brokers],
            client_id=cfg.client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset=self._reset,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            client_rack=cfg.rack_id,
            **self._kafka_kwargs,
            **connection_kwargs(cfg),  # security_protocol, ssl_context, sasl_*
        )
        self._kafka = kafka
        try:
            await kafka.start()
            await self._member.start()
        except BaseException:
            self._closed = True
            await kafka.stop()
            await self._member.close()
            raise
        self._ready = True
        logger.info("consumer.started", group=cfg.group_id, topics=list(cfg.topics))

    async def close(self, handoff: bool | None = None) -> None:
        """Commit the processed positions (auto-commit), revoke everything (the listener's
        ``on_partitions_revoked``), leave the group, stop the fetcher (spec G47). Idempotent.
        ``handoff`` (default: ``GroupConfig.handoff_on_close``): see
        :meth:`GroupMember.close`.

        Called from another task than the one fetching records, with the handoff, close()
        *drains*: that task's fetch calls go on handing out records of the partitions the
        member still owns until they are revoked (up to a heartbeat interval), then
        ``async for`` ends. Either way, a batch that task has in hand counts as processed
        only once it makes its next fetch call (or ends): the revoke waits for that up to a
        quarter of close()'s budget, and otherwise commits from the batch's first record."""
        if self._closed or self._closing or self._draining:
            return
        if not self._started or self._kafka is None:
            self._closed = True
            await self._member.close(handoff=False)
            return
        if handoff is None:
            handoff = self._config.handoff_on_close
        if handoff and self._may_drain():
            self._draining = True
        else:
            self._closing = True
        try:
            if self._draining:
                # The fetching task polls no more from now on; let a poll() it is in finish
                # first (a rebalance step), as close() must not run beside one.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._batch_wait), self._poll_lock:
                        pass
            if self._closing and self._auto_commit and self._member.state is MemberState.STABLE:
                deliverable = self._deliverable()
                await self._wait_for_batch(deliverable)
                await self._auto_commit_now(deliverable, timeout=self._close_budget)
            await self._member.close(handoff=handoff)
        finally:
            self._end_drain()
            self._closed = True
            await self._settle_fetch()
            await self._kafka.stop()
            logger.info("consumer.closed", group=self._config.group_id, **self._counters())

    def _counters(self) -> dict[str, Any]:
        return {
            "records_delivered": self._records_delivered,
            "commits_ok": self._commits_ok,
            "commits_failed": self._commits_failed,
        }

    # -- fetching --------------------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout: float = 0.0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        """Records of owned partitions (all, or those named), waiting up to ``timeout``
        seconds when none are buffered. A poll: see the class docstring."""
        self._fetch_call()
        self._check_open()
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        if max_records is not None and (
            isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
        ):
            raise ValueError(f"max_records must be a positive int or None, got {max_records!r}")
        for tp in partitions:
            if not isinstance(tp, tuple) or len(tp) != 2:
                raise TypeError(f"partitions must be TopicPartition values, got {tp!r}")
        wanted = frozenset(TopicPartition(tp[0], tp[1]) for tp in partitions)
        deadline = self._now() + float(timeout)
        while True:
            await self._poll_member(deadline)
            if self._closing:
                return {}
            await self._maybe_auto_commit()
            ready = self._deliverable(wanted)
            # Never wait past half the poll interval without polling again (§11.4): a long
            # wait for records is the application polling, as in the Java client's loop.
            remaining = min(deadline - self._now(), self._poll_slice)
            if ready:
                fetched = await self._fetch(ready, remaining, max_records)
                if self._closing:
                    return {}
                records = self._hand_out(fetched)
                if records:
                    self._handed_out(records)
                    return records
            else:
                await self._wait_wake(remaining)
            if self._now() >= deadline:
                # One last poll, so the poll timer counts the end of the wait too.
                await self._poll_member(deadline)
                return {}

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord[Any, Any]:
        """The next record of an owned partition (all, or those named); waits for one."""
        while True:
            batch = await self.getmany(*partitions, timeout=_GETONE_SLICE, max_records=1)
            for records in batch.values():
                return records[0]
            if self._closing or self._closed:
                raise UsageError("GroupConsumer is closed")

    def __aiter__(self) -> GroupConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord[Any, Any]:
        if self._closing or self._closed:
            self._fetch_call()
            raise StopAsyncIteration
        try:
            return await self.getone()
        except UsageError:
            if self._closing or self._closed:
                raise StopAsyncIteration from None
            raise

    # -- positions -------------------------------------------------------------------------------

    def _owned(self, tp: object, what: str) -> TopicPartition:
        part = as_partition(tp, what)
        if part not in self._member.assignment or part in self._releasing:
            raise UsageError(f"{what}: partition {part} is not assigned to this consumer")
        return part

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop handing out (and fetching) records of these owned partitions."""
        tps = [self._owned(tp, "pause") for tp in partitions]
        self._paused.update(tps)
        kafka = self._check_open()
        fetching = [aio_partition(tp) for tp in tps if tp in self._fetching]
        if fetching:
            kafka.pause(*fetching)

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo :meth:`pause`."""
        tps = [self._owned(tp, "resume") for tp in partitions]
        self._paused.difference_update(tps)
        kafka = self._check_open()
        fetching = [aio_partition(tp) for tp in tps if tp in self._fetching]
        if fetching:
            kafka.resume(*fetching)

    def paused(self) -> frozenset[TopicPartition]:
        return frozenset(self._paused)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record handed out for the owned partition ``tp``."""
        part = self._owned(tp, "seek")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek: offset must be an int >= 0, got {offset!r}")
        kafka = self._check_open()
        self._positions[part] = offset
        if part in self._fetching:
            kafka.seek(aio_partition(part), offset)
        else:
            self._unpositioned.discard(part)
            self._no_offset.discard(part)
            self._fetching.add(part)
            self._install()

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record that will be handed out for the owned ``tp``."""
        part = self._owned(tp, "position")
        known = self._positions.get(part)
        if known is not None:
            return known
        if part in self._unpositioned:
            await self._position(frozenset({part}))
        if part not in self._fetching:
            raise UsageError(f"position: {part} has no position yet (no committed offset)")
        await self._resolve_reset({part})
        known = self._positions.get(part)
        if known is None:
            raise UsageError(f"position: the position of {part} is not known yet")
        return known

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Position the owned ``partitions`` (every owned partition when none are named) at
        the first record still in their logs. As :meth:`seek_to_end`."""
        await self._seek_to(partitions, "seek_to_beginning")

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Position the owned ``partitions`` (every owned partition when none are named) at
        the end of their logs: only records produced from now on are handed out (with
        ``isolation_level="read_committed"``, from the last stable offset on).

        The offsets are looked up (ListOffsets) before this returns, so :meth:`position`
        and :meth:`commit` see them at once; aiokafka's and Java's seeks resolve at the next
        fetch instead. A partition released while the lookup runs (by a fetch call in
        another task) is left alone. Raises UsageError for a partition this consumer does
        not own, and :class:`OffsetsError` or :class:`TopicAuthorizationFailed` when the
        lookup fails (nothing is moved then)."""
        await self._seek_to(partitions, "seek_to_end")

    async def _seek_to(self, partitions: tuple[TopicPartition, ...], what: str) -> None:
        kafka = self._check_open()
        parts = [self._owned(tp, what) for tp in partitions] or sorted(
            self._member.assignment - self._releasing
        )
        found = await log_offsets(
            kafka, parts, end=what == "seek_to_end", what=what, config=self._config
        )
        for tp, offset in found.items():
            if tp in self._member.assignment and tp not in self._releasing:
                self.seek(tp, offset)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The offset of the first record still in each partition's log (any partitions of
        the cluster, owned or not). Raises :class:`OffsetsError` (a partition that does not
        exist, after ``request_timeout_ms``) or :class:`TopicAuthorizationFailed`."""
        kafka = self._check_open()
        return await log_offsets(
            kafka, partitions, end=False, what="beginning_offsets", config=self._config
        )

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset the next record produced to each partition will get (with
        ``isolation_level="read_committed"``: the last stable offset); any partitions of the
        cluster. Errors as :meth:`beginning_offsets`. The lag of an owned partition is
        ``end_offsets([tp])[tp] - await position(tp)``."""
        kafka = self._check_open()
        return await log_offsets(
            kafka, partitions, end=True, what="end_offsets", config=self._config
        )

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record whose timestamp is at or after the time
        given (milliseconds since the epoch), as an :class:`OffsetAndTimestamp`; None when
        the partition has no such record. ``seek()`` to its offset to replay from a time.
        Errors as :meth:`beginning_offsets`."""
        return await time_offsets(self._check_open(), timestamps, config=self._config)

    def highwater(self, tp: TopicPartition) -> int | None:
        """The owned partition's high watermark as of its last fetch response (None before
        the first): the offset the next record produced will get."""
        part = self._owned(tp, "highwater")
        kafka = self._check_open()
        if part not in self._fetching:
            return None
        value = kafka.highwater(aio_partition(part))
        return None if value is None else int(value)

    # -- commits ---------------------------------------------------------------------------------

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for ``tp`` (OffsetFetch), None if none."""
        self._check_open()
        part = as_partition(tp, "committed")
        found = (await self._member.fetch_committed([part])).get(part)
        return None if found is None or found.offset < 0 else found.offset

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        """Commit ``offsets`` (the next offset to process, per partition), or the processed
        positions of every owned partition. Raises :class:`CommitFailed` for a partition this
        member does not hold (revoked, lost, or its lease ran out): another member may own
        it. Raises :class:`RebalanceInProgress` while the group rebalances: finish it with a
        fetch call, then retry. While ``close()`` runs it still commits what the member holds
        (the revoked partitions from inside the revoke callback). With no ``offsets`` once
        the partitions are being released, or after ``close()``, it does nothing: the revoke
        commits them (a task that was processing while close() ran may commit as usual)."""
        if not self._ready or self._kafka is None:
            self._check_open()  # not started, or starting: UsageError
        if offsets is None:
            targets = {
                tp: OffsetAndMetadata(pos)
                for tp, pos in self._positions.items()
                if tp in self._member.assignment and tp not in self._releasing
            }
        else:
            targets = self._normalise(offsets)
        if not targets:
            return
        held = (self._member.assignment - self._releasing) | self._revoke_commit_ok
        foreign = sorted(str(tp) for tp in targets if tp not in held)
        if foreign:
            self._commits_failed += 1
            raise CommitFailed(
                f"cannot commit {', '.join(foreign)}: not held by this member (revoked, lost "
                "or never assigned); another member may own them now"
            )
        if not self._lease_holds():
            self._commits_failed += 1
            raise CommitFailed(
                "cannot commit: this member's lease ran out, its partitions may belong to "
                "another member now (they are reported lost at the next fetch call)"
            )
        await self._commit(targets)
