"""FastAPI integration: run a group consumer (or a plain member) as part of an app.

Needs the ``fastapi`` extra (``pip install 'kgroup[fastapi]'``); ``import kgroup`` does not.

Example::

    from fastapi import FastAPI
    from kgroup import GroupConfig
    from kgroup.fastapi import KGroupLifespan

    async def handle(records):            # one batch of aiokafka ConsumerRecords
        for record in records:
            ...

    kg = KGroupLifespan(
        GroupConfig(bootstrap_servers="localhost:9092", group_id="g", topics=["t"]),
        process=handle,
    )
    app = FastAPI(lifespan=kg.lifespan)
    app.include_router(kg.health_router(prefix="/health"))

The lifespan starts a :class:`~kgroup.GroupConsumer` and a processing task that fetches
batches and awaits ``process(records)`` for each; without ``process`` it starts a plain
:class:`~kgroup.GroupMember` whose task only polls (``on_assignment`` is then called with
each new assignment). At shutdown the task stops between two batches and the consumer is
closed: processed positions committed (auto-commit), partitions revoked, LeaveGroup sent.
With ``handoff_on_close`` the consumer is closed first, while the task goes on processing
the partitions it still owns until they are handed off (GroupConsumer's drain); the task
then ends on its own.

Health (``GET {prefix}/live`` and ``GET {prefix}/ready``, JSON from :meth:`health`):

- live (else 503): the processing task has not died, the member hit no fatal error, and
  while heartbeats run (STABLE or COMPLETING_REBALANCE) the last one answered was less
  than ``session_timeout_ms`` ago;
- ready (else 503): live, the processing task is running and the member is STABLE.

An exception escaping ``process`` (or a fatal group error) ends the task: it is logged
with its traceback as ``fastapi.processing_failed``, both endpoints answer 503 with its
type and message, and it is raised again from the lifespan at shutdown. The batch that
failed is not counted as processed: its partitions are moved back to its first records, so
the commit at close leaves it to be delivered again (at-least-once). Until the app is
restarted the member keeps its partitions; if nothing restarts it, the poll timer
(``max_poll_interval_ms``) makes it leave the group, as a Java consumer would.

Log events: ``fastapi.started``, ``fastapi.processing_failed`` (error, with traceback),
``fastapi.processing_cancelled`` (warning: the loop outlived the close timeout),
``fastapi.rewind_failed``, ``fastapi.stopped``, ``fastapi.processing_failed_at_shutdown``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

try:
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("kgroup.fastapi needs FastAPI: pip install 'kgroup[fastapi]'") from exc

from aiokafka.structs import ConsumerRecord

from ._config import GroupConfig
from ._core._consumer_protocol import TopicPartition
from ._core._state import MemberState
from ._errors import KGroupError, UsageError
from ._listener import RebalanceListener
from ._log import logger
from ._runtime._consumer import GroupConsumer
from ._runtime._member import GroupMember
from ._stats import MemberStats

__all__ = ["AssignmentFn", "KGroupLifespan", "ProcessFn"]

#: ``async def process(records: list[ConsumerRecord]) -> None``: one fetched batch.
ProcessFn = Callable[[list[ConsumerRecord[Any, Any]]], Awaitable[None]]
#: ``async def on_assignment(partitions: frozenset[TopicPartition]) -> None`` (member mode).
AssignmentFn = Callable[[frozenset[TopicPartition]], Awaitable[None]]

_HEARTBEATING = (MemberState.STABLE, MemberState.COMPLETING_REBALANCE)


class KGroupLifespan:
    """Owns one consumer (or member) and its processing task for a FastAPI app.

    Parameters:

    - ``config``: a :class:`~kgroup.GroupConfig`, or a callable returning one (called at
      startup, e.g. to read environment variables then).
    - ``process``: ``async def process(records)`` called with each non-empty batch (a list
      of aiokafka ``ConsumerRecord``, in offset order per partition). With it a
      :class:`~kgroup.GroupConsumer` is run; without it a plain :class:`~kgroup.GroupMember`.
    - ``on_assignment``: member mode only: ``async def on_assignment(partitions)`` after
      each completed rebalance.
    - ``listener``: a rebalance listener handed to the consumer/member.
    - ``max_records``: cap of one batch (default 500); ``poll_timeout``: seconds one fetch
      waits for records (default 1.0): the longest a shutdown waits for the loop besides
      the batch being processed.
    - ``consumer_options``: more keyword arguments for :class:`~kgroup.GroupConsumer`
      (``auto_offset_reset``, ``enable_auto_commit``, deserialisers, ...).
    """

    def __init__(
        self,
        config: GroupConfig | Callable[[], GroupConfig],
        *,
        process: ProcessFn | None = None,
        on_assignment: AssignmentFn | None = None,
        listener: RebalanceListener | None = None,
        max_records: int = 500,
        poll_timeout: float = 1.0,
        consumer_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(config, GroupConfig) and not callable(config):
            raise UsageError(
                f"config must be a GroupConfig or a callable returning one, got {config!r}"
            )
        if process is not None and not callable(process):
            raise UsageError(f"process must be an async function, got {process!r}")
        if process is not None and on_assignment is not None:
            raise UsageError(
                "pass process (records, GroupConsumer) or on_assignment (GroupMember), not both"
            )
        if on_assignment is not None and not callable(on_assignment):
            raise UsageError(f"on_assignment must be an async function, got {on_assignment!r}")
        if process is None and consumer_options:
            raise UsageError("consumer_options need process= (they configure a GroupConsumer)")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise UsageError(f"max_records must be a positive int, got {max_records!r}")
        if (
            isinstance(poll_timeout, bool)
            or not isinstance(poll_timeout, int | float)
            or poll_timeout <= 0
        ):
            raise UsageError(f"poll_timeout must be a number of seconds > 0, got {poll_timeout!r}")
        self._config_source = config
        self._process = process
        self._on_assignment = on_assignment
        self._listener = listener
        self._max_records = max_records
        self._poll_timeout = float(poll_timeout)
        self._consumer_options = dict(consumer_options or {})
        self._config: GroupConfig | None = config if isinstance(config, GroupConfig) else None
        self._consumer: GroupConsumer | None = None
        self._member: GroupMember | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._fatal = False
        self._batches = 0
        self._records = 0

    # -- public state ----------------------------------------------------------------------------

    @property
    def config(self) -> GroupConfig:
        if self._config is None:
            raise UsageError("the config is built at startup: the lifespan has not run yet")
        return self._config

    @property
    def member(self) -> GroupMember:
        """The group member (also in consumer mode). UsageError before startup."""
        if self._member is None:
            raise UsageError("KGroupLifespan is not started: the app's lifespan has not run")
        return self._member

    @property
    def consumer(self) -> GroupConsumer:
        """The consumer (``process=`` mode only). UsageError before startup."""
        if self._consumer is None:
            raise UsageError("no GroupConsumer: the lifespan has not run, or no process= was given")
        return self._consumer

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the processing task, if any."""
        return self._error

    def health(self) -> dict[str, Any]:
        """``live``, ``ready``, ``reasons`` (why not), ``error`` ({type, message} or None),
        ``batches``/``records`` processed, ``session_timeout_ms`` and ``member.stats()``
        (state, generation, member_id, assignment, heartbeat ages and lateness, ...)."""
        reasons: list[str] = []
        live = True
        ready = True
        member = self._member
        stats: MemberStats | None = None
        session_ms: int | None = None if self._config is None else self._config.session_timeout_ms
        if member is None:
            ready = False
            reasons.append("not started")
        else:
            stats = member.stats() if self._consumer is None else self._consumer.stats()
        error = self._error
        if error is not None:
            live = ready = False
            what = "fatal group error" if self._fatal else "processing failed"
            reasons.append(f"{what}: {type(error).__name__}: {error}")
        task = self._task
        if member is not None and (task is None or task.done()):
            ready = False
            if error is None:
                reasons.append("processing task not running")
        if stats is not None:
            state = stats.state
            if state != MemberState.STABLE.name:
                ready = False
                reasons.append(f"member state is {state}")
            age = stats.last_heartbeat_age_ms
            if (
                session_ms is not None
                and state in {s.name for s in _HEARTBEATING}
                and age is not None
                and age > session_ms
            ):
                live = ready = False
                reasons.append(
                    f"last heartbeat answered {age:.0f} ms ago (session timeout {session_ms} ms)"
                )
        return {
            "live": live,
            "ready": ready,
            "reasons": reasons,
            "error": None
            if error is None
            else {"type": type(error).__name__, "message": str(error), "fatal": self._fatal},
            "batches": self._batches,
            "records": self._records,
            "session_timeout_ms": session_ms,
            **({} if stats is None else stats.as_dict()),
        }

    # -- router ----------------------------------------------------------------------------------

    def health_router(
        self, prefix: str = "/health", *, tags: Sequence[str] = ("health",)
    ) -> APIRouter:
        """An APIRouter with ``GET {prefix}/live`` and ``GET {prefix}/ready`` (200 or 503,
        both with the :meth:`health` JSON)."""
        router = APIRouter(prefix=prefix, tags=list(tags))

        @router.get("/live", summary="Liveness of the Kafka group member")
        async def live() -> JSONResponse:
            body = self.health()
            return JSONResponse(body, status_code=200 if body["live"] else 503)

        @router.get("/ready", summary="Readiness: member STABLE and processing running")
        async def ready() -> JSONResponse:
            body = self.health()
            return JSONResponse(body, status_code=200 if body["ready"] else 503)

        return router

    # -- lifespan --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """``FastAPI(lifespan=kg.lifespan)``. Starts the consumer/member and the task;
        stops and closes them at shutdown, then raises the task's error, if any."""
        if self._member is not None:
            raise UsageError("this KGroupLifespan is already running")
        source = self._config_source
        if isinstance(source, GroupConfig):
            config = source
        else:
            config = source()
            if not isinstance(config, GroupConfig):
                raise UsageError(f"the config factory must return a GroupConfig, got {config!r}")
        self._config = config
        self._stop = asyncio.Event()
        self._error = None
        self._fatal = False
        if self._process is not None:
            consumer = GroupConsumer(config, listener=self._listener, **self._consumer_options)
            await consumer.start()
            self._consumer, self._member = consumer, consumer.member
            runner = self._run_consumer(consumer, self._process)
        else:
            member = GroupMember(config, listener=self._listener)
            await member.start()
            self._member = member
            runner = self._run_member(member)
        self._task = asyncio.create_task(runner, name=f"kgroup-fastapi-{config.group_id}")
        logger.info("fastapi.started", group=config.group_id, consumer=self._consumer is not None)
        try:
            yield
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        config = self.config
        task = self._task
        budget = config.close_timeout_ms / 1000.0
        drain_error: Exception | None = None
        if config.handoff_on_close and self._consumer is not None and task is not None:
            # The drain: the task keeps processing until the handoff revokes its partitions
            # (the revoke waits for the batch in hand), then its loop sees the consumer
            # closed. Closing twice below is a no-op.
            try:
                await self._consumer.close()
            except Exception as exc:  # raised below, once the task is stopped
                drain_error = exc
        self._stop.set()
        if task is not None and not task.done():
            # The loop notices the stop between batches (at most poll_timeout plus the
            # batch in hand); past the close timeout it is cancelled.
            done, _ = await asyncio.wait({task}, timeout=budget)
            if not done:
                logger.warning("fastapi.processing_cancelled", group=config.group_id)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            if self._consumer is not None:
                await self._consumer.close()
            elif self._member is not None:
                await self._member.close()
        finally:
            logger.info(
                "fastapi.stopped",
                group=config.group_id,
                batches=self._batches,
                records=self._records,
                failed=self._error is not None,
            )
            self._consumer = None
            self._member = None
            self._task = None
        if drain_error is not None:
            raise drain_error
        if self._error is not None:
            logger.error(
                "fastapi.processing_failed_at_shutdown",
                group=config.group_id,
                error=f"{type(self._error).__name__}: {self._error}",
            )
            raise self._error

    def _failed(self, exc: BaseException) -> None:
        self._error = exc
        self._fatal = isinstance(exc, KGroupError)
        logger.exception(
            "fastapi.processing_failed",
            group=self.config.group_id,
            error_type=type(exc).__name__,
            fatal_group_error=self._fatal,
        )

    async def _run_consumer(self, consumer: GroupConsumer, process: ProcessFn) -> None:
        batch: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
        try:
            while not self._stop.is_set() and not consumer.closed:
                batch = await consumer.getmany(
                    timeout=self._poll_timeout, max_records=self._max_records
                )
                # Records handed out count as processed for the next commit: always
                # process a batch in hand, even when a stop was requested meanwhile.
                records = [record for part in sorted(batch) for record in batch[part]]
                if not records:
                    continue
                await process(records)
                batch = {}
                self._batches += 1
                self._records += len(records)
        except asyncio.CancelledError:
            self._rewind(consumer, batch)
            raise
        except Exception as exc:
            self._rewind(consumer, batch)
            self._failed(exc)

    def _rewind(
        self,
        consumer: GroupConsumer,
        batch: Mapping[TopicPartition, list[ConsumerRecord[Any, Any]]],
    ) -> None:
        """The batch in hand was not processed: move each partition's position back to its
        first record, so the commit at close does not count the batch as done (it is
        delivered again after a restart: at-least-once)."""
        for tp, records in batch.items():
            if not records:
                continue
            try:
                consumer.seek(tp, records[0].offset)
            except (KGroupError, UsageError, ValueError) as exc:  # not owned any more, closed
                logger.warning(
                    "fastapi.rewind_failed",
                    group=self.config.group_id,
                    partition=str(tp),
                    error=repr(exc),
                )

    async def _run_member(self, member: GroupMember) -> None:
        previous: frozenset[TopicPartition] | None = None
        try:
            while not self._stop.is_set():
                assignment = await member.poll(timeout=self._poll_timeout)
                if (
                    self._on_assignment is not None
                    and (previous is None or assignment != previous)
                    and member.state is MemberState.STABLE
                ):
                    previous = assignment
                    await self._on_assignment(assignment)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(exc)
