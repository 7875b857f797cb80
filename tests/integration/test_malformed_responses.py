"""Malformed answers from the coordinator: truncated frames, wrong correlation ids, garbage
bodies, absurd sizes. The member must report a clear error, reconnect, and lose nothing.

A :class:`Mangler` sits where a fault proxy would (the broker advertises its address, so
every connection of the member goes through it). It forwards Kafka frames one by one, knows
each response's API from the request with the same correlation id, and spoils the next
``count`` responses of one API in one of the ways below. A real broker does the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import structlog

from kgroup.testing import KafkaBroker, MemberGroup, TansuBroker
from tests.integration.conftest import group_config

HEARTBEAT, JOIN_GROUP, SYNC_GROUP, FIND_COORDINATOR = 12, 11, 14, 10
MALFORMATIONS = ("truncated", "truncated_hang", "wrong_correlation", "garbage", "absurd_size")


class Mangler:
    """A Kafka-frame-aware forwarder in the test's event loop (duck-types the
    ``start``/``address``/``set_upstream`` part of FaultProxy that brokers use)."""

    def __init__(self) -> None:
        # Bound and listening from here on: a port only found free (free_port()) could be
        # taken while the broker starts (CI saw "address already in use" in serve()).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.rule: tuple[int, str] | None = None
        self.left = 0
        self.spoiled: list[tuple[int, str]] = []
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Mangler:
        return self  # the broker calls this; serve() binds inside the test's loop

    def set_upstream(self, host: str, port: int) -> None:
        self.upstream = (host, port)

    def spoil(self, api_key: int, how: str, count: int = 1) -> None:
        self.rule, self.left = (api_key, how), count

    async def serve(self) -> None:
        self._server = await asyncio.start_server(self._client, sock=self._sock)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        else:
            self._sock.close()

    async def _client(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None and self.upstream is not None
        self._tasks.add(task)
        self._writers.add(cwriter)
        swriter: asyncio.StreamWriter | None = None
        try:
            sreader, swriter = await asyncio.open_connection(*self.upstream)
            self._writers.add(swriter)
            apis: dict[int, int] = {}
            up = asyncio.create_task(self._requests(creader, swriter, apis))
            self._tasks.add(up)
            try:
                await self._responses(sreader, cwriter, apis)
            finally:
                up.cancel()
                await asyncio.gather(up, return_exceptions=True)
                self._tasks.discard(up)
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # aclose(): end quietly (start_server would log a cancelled handler)
        finally:
            for writer in (cwriter, swriter):
                if writer is not None:
                    writer.transport.abort()
                    self._writers.discard(writer)
            self._tasks.discard(task)

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, apis: dict[int, int]
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                body = await reader.readexactly(size)
                api_key, _version, correlation = struct.unpack(">hhi", body[:8])
                apis[correlation] = api_key
                writer.write(struct.pack(">i", size) + body)
                await writer.drain()

    async def _responses(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, apis: dict[int, int]
    ) -> None:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            body = await reader.readexactly(size)
            (correlation,) = struct.unpack(">i", body[:4])
            api = apis.pop(correlation, -1)
            if self.rule is not None and self.left > 0 and api == self.rule[0]:
                self.left -= 1
                how = self.rule[1]
                self.spoiled.append((api, how))
                if how == "truncated":  # half a frame, then the connection closes
                    writer.write(struct.pack(">i", size) + body[: size // 2])
                    await writer.drain()
                    return
                if how == "truncated_hang":  # half a frame, then silence
                    writer.write(struct.pack(">i", size) + body[: size // 2])
                    await writer.drain()
                    await asyncio.Event().wait()
                if how == "absurd_size":  # a 2 GiB frame announced, a few bytes sent
                    writer.write(struct.pack(">i", 2**31 - 1) + body[:16])
                    await writer.drain()
                    await asyncio.Event().wait()
                if how == "wrong_correlation":
                    body = struct.pack(">i", correlation + 1000) + body[4:]
                elif how == "garbage":  # right size and correlation id, random body
                    body = body[:4] + os.urandom(size - 4)
            writer.write(struct.pack(">i", size) + body)
            await writer.drain()


MAX_POLL_MS = 8_000  # the rebalance timeout: a JoinGroup may be held that long, plus 5 s


async def stable_behind(
    mangler: Mangler,
    broker: Any,
    group: MemberGroup,
    group_id: str,
    topic: str,
    session_ms: int = 10_000,
) -> Any:
    await mangler.serve()
    await broker.create_topic_async(topic, 3)  # async: the mangler runs on this loop
    member = await group.start(
        group_config(
            mangler.address,
            group_id,
            topic,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=300,
            request_timeout_ms=3_000,
            retry_backoff_ms=50,
            max_poll_interval_ms=MAX_POLL_MS,
        )
    )
    await group.wait_stable(topic, 3, timeout=60)
    return member


async def heartbeat_after(group: MemberGroup, member: Any) -> None:
    """Wait for a heartbeat answered after now (on the member's clock)."""
    timers = member.member._core.timers
    before = timers.last_heartbeat_received
    await group.wait_until(
        lambda: (timers.last_heartbeat_received or 0) > (before or 0),
        timeout=30,
        what="a heartbeat answered after the spoiled one",
    )


def _errors(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"{e['event']}: {e.get('error', '')}"
        for e in entries
        if e["event"]
        in ("member.heartbeat_failed", "member.join_failed", "member.coordinator_lost")
        or "failed" in e["event"]
    ]


@pytest.mark.parametrize("how", MALFORMATIONS)
async def test_spoiled_heartbeat_answer_costs_a_reconnect_and_nothing_else(
    tansu_broker_factory: Callable[..., TansuBroker], unique_group: str, how: str
) -> None:
    """A heartbeat answer spoiled once while stable: the member logs a clear error naming
    the API and the broker, drops the connection, reconnects and goes on in the same
    generation with the same assignment and no listener callback (the session never
    lapsed, so nothing was lost)."""
    mangler = Mangler()
    topic = "t-malformed"
    try:
        broker = tansu_broker_factory(proxy=mangler)
        async with MemberGroup() as group:
            with structlog.testing.capture_logs() as entries:
                member = await stable_behind(mangler, broker, group, unique_group, topic)
                generation, seen = member.member.generation, len(member.events)
                assignment, accepted = member.assignment, mangler.accepted
                mangler.spoil(HEARTBEAT, how)
                await group.wait_until(
                    lambda: bool(mangler.spoiled), timeout=30, what="a spoiled answer"
                )
                await heartbeat_after(group, member)
                assert mangler.accepted > accepted  # it reconnected
            assert member.member.generation == generation
            assert member.assignment == assignment
            assert member.events[seen:] == []  # no revoke, no lost
            assert not member.errors
            failures = _errors(entries)
            assert any("Heartbeat" in f for f in failures), failures
            assert all("struct.error" not in f and "IndexError" not in f for f in failures)
    finally:
        await mangler.aclose()


@pytest.mark.parametrize(
    ("api", "how"),
    [(JOIN_GROUP, how) for how in MALFORMATIONS]
    + [(SYNC_GROUP, "truncated"), (SYNC_GROUP, "garbage"), (SYNC_GROUP, "wrong_correlation")],
)
async def test_spoiled_join_answer_is_retried(
    tansu_broker_factory: Callable[..., TansuBroker], unique_group: str, api: int, how: str
) -> None:
    """A JoinGroup or SyncGroup answer spoiled during the first join: a clear error, a new
    connection, and the member joins; poll() never raises. An answer that never completes
    (half a frame, or a 2 GiB size) costs that request's timeout: for JoinGroup the
    rebalance timeout plus 5 s, since a coordinator may hold a JoinGroup that long."""
    mangler = Mangler()
    topic = "t-malformed"
    try:
        broker = tansu_broker_factory(proxy=mangler)
        async with MemberGroup() as group:
            mangler.spoil(api, how)
            member = await stable_behind(mangler, broker, group, unique_group, topic, 6_000)
            assert mangler.spoiled == [(api, how)]
            assert mangler.accepted >= 2
            assert not member.errors
    finally:
        await mangler.aclose()


async def test_on_kafka_garbage_heartbeat_answers_keep_the_membership(
    kafka_broker_factory: Callable[..., KafkaBroker], unique_group: str
) -> None:
    """The same on Apache Kafka, with three spoiled answers in a row of different kinds."""
    mangler = Mangler()
    topic = "t-malformed"
    try:
        broker = kafka_broker_factory(proxy=mangler)
        async with MemberGroup() as group:
            member = await stable_behind(mangler, broker, group, unique_group, topic)
            generation, seen = member.member.generation, len(member.events)
            for how in ("garbage", "wrong_correlation", "absurd_size"):
                done = len(mangler.spoiled)
                mangler.spoil(HEARTBEAT, how)

                def spoiled_again(done: int = done) -> bool:
                    return len(mangler.spoiled) > done

                await group.wait_until(spoiled_again, timeout=30, what=how)
            await heartbeat_after(group, member)
            assert member.member.generation == generation
            assert member.events[seen:] == []
            assert not member.errors
    finally:
        await mangler.aclose()
