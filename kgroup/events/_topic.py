"""The event log's Kafka sink: the same lines, one record each, to a topic.

Why a thread with an event loop of its own (and not a producer on the member's loop): the
event log must never cost the membership. A producer on the member's loop would share it
with the heartbeats: its batching, its retries and its reconnects to a broker that is down
would run between them, and an application that blocks its loop would stall the log as
well. In its own thread the producer can neither delay a heartbeat nor be delayed by the
application, and it works the same for isolated members (whose coordinator side has a
loop of its own already). It costs one thread per member that logs to a topic.

The thread runs aiokafka's ``AIOKafkaProducer`` (kgroup's dependency already) with the
member's bootstrap servers and security settings, keyed by ``member_uid`` so each member's
lines keep their order in one partition. Records wait in the writer's bounded queue while
the producer connects (retried with a growing backoff); a full queue drops and counts, as
for a file. A record the producer cannot deliver is dropped and counted too; since later
records may be delivered already, its ``seq`` stays a gap, and an ``eventlog.dropped``
line follows with the count. The topic must exist (or the cluster create topics itself).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Any

from ._writer import DEFAULT_CAPACITY, Line, QueueWriter

if TYPE_CHECKING:
    from .._config import GroupConfig

__all__ = ["TopicWriter"]

#: Reconnect backoff (s): doubles from the first to the last.
_BACKOFF_S = (0.5, 30.0)

#: How long the thread spends flushing and stopping the producer on close (s).
_CLOSE_BUDGET_S = 4.0


class TopicWriter(QueueWriter):
    """A :class:`QueueWriter` whose thread produces each line to ``topic`` (see the module
    docstring)."""

    kind = "kgroup-eventlog-topic"

    def __init__(
        self,
        config: GroupConfig,
        topic: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        label: str = "",
    ) -> None:
        super().__init__(capacity=capacity, label=label)
        self._config = config
        self.topic = topic
        self._loop: asyncio.AbstractEventLoop | None = None  # the thread's, once it runs
        self._event: asyncio.Event | None = None  # records queued, or close (thread's loop)

    @property
    def name(self) -> str:
        return f"topic {self.topic}"

    def _wake(self) -> None:
        loop, event = self._loop, self._event
        if loop is None or event is None:
            return  # not running yet: its first look at the queue comes
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # its loop has ended
            pass

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._waiting = False
            self._wake()  # also ends a reconnect backoff

    def _run(self) -> None:
        try:
            asyncio.run(self._main_async())
        except Exception as exc:  # a bug: the log stops, the member does not
            self._failed(self._config.group_id, exc)

    async def _main_async(self) -> None:
        self._event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        producer: Any = None
        backoff = _BACKOFF_S[0]
        try:
            while True:
                self._event.clear()
                taken = self._take()
                if taken is None:
                    await self._event.wait()
                    continue
                batch, lost, closing = taken
                lines = self._render(batch, lost, time.time_ns())
                while producer is None:
                    producer = await self._connect()
                    if producer is not None:
                        backoff = _BACKOFF_S[0]
                        break
                    if closing or self._closing:
                        self._lose(lines)
                        return
                    await self._pause(backoff)
                    backoff = min(backoff * 2, _BACKOFF_S[1])
                await self._send(producer, lines)
                if closing:
                    with self._cond:
                        if not self._queue:
                            break
            try:
                async with asyncio.timeout(_CLOSE_BUDGET_S / 2):
                    await producer.flush()
            except Exception as exc:
                self._failed(self._config.group_id, exc)
        finally:
            if producer is not None:
                try:
                    async with asyncio.timeout(_CLOSE_BUDGET_S / 2):
                        await producer.stop()
                except Exception:  # stopping is best effort; the thread ends either way
                    pass

    async def _pause(self, seconds: float) -> None:
        """Wait out a reconnect backoff, or until close."""
        event = self._event
        assert event is not None
        deadline = time.monotonic() + seconds
        while not self._closing:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            event.clear()
            try:
                async with asyncio.timeout(left):
                    await event.wait()
            except TimeoutError:
                return

    async def _connect(self) -> Any:
        """A started producer, or None (the failure is reported once per outage)."""
        from aiokafka import AIOKafkaProducer

        from .._runtime._security import connection_kwargs

        config = self._config
        try:
            producer = AIOKafkaProducer(
                bootstrap_servers=[
                    f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                    for host, port in config.brokers
                ],
                client_id=f"{config.client_id}-eventlog",
                acks=1,
                linger_ms=20,
                request_timeout_ms=config.request_timeout_ms,
                **connection_kwargs(config),
            )
        except Exception as exc:
            self._failed(config.group_id, exc)
            return None
        try:
            async with asyncio.timeout(config.request_timeout_ms / 1000):
                await producer.start()
        except Exception as exc:
            try:
                await producer.stop()
            except Exception:
                pass
            self._failed(config.group_id, exc)
            return None
        return producer

    async def _send(self, producer: Any, lines: list[Line]) -> None:
        for line in lines:
            try:
                delivery = await producer.send(
                    self.topic,
                    value=line.text.rstrip("\n").encode("utf-8"),
                    key=line.context.member_uid.encode("ascii"),
                )
            except Exception as exc:
                self._lose([line])
                self._failed(line.context.group, exc)
                continue
            delivery.add_done_callback(functools.partial(self._delivered, line))

    def _delivered(self, line: Line, delivery: asyncio.Future[Any]) -> None:
        error = None if delivery.cancelled() else delivery.exception()
        if delivery.cancelled() or error is not None:
            self._lose([line])
            self._failed(line.context.group, error or asyncio.CancelledError())
            return
        self._written([line])
