"""FaultProxy: every fault against a local echo server, then routing on real brokers.

On Apache Kafka and tansu, a client bootstrapped through the proxy is told only about the
proxy, so all its connections go through it; on Kafka, a member behind a black-holed proxy
is evicted after the session timeout and rejoins once the proxy heals.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import socket
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.coordination import FindCoordinatorRequest

from kgroup.testing import FaultProxy, KafkaBroker, ProxiedBroker, TansuBroker
from kgroup.testing._members import MemberGroup, covered
from tests.integration.conftest import SESSION_MS, group_config

LOOPBACK = "127.0.0.1"

# Behind a proxy, a member gives up on a request after 3 s and backs off at most 0.5 s.
member_config = functools.partial(group_config, request_timeout_ms=3_000, retry_backoff_max_ms=500)

ProxyFactory = Callable[..., FaultProxy]
Connect = Callable[[int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def until(condition: Callable[[], bool], *, timeout: float = 10.0, what: str = "") -> None:
    """Poll ``condition`` until it holds; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what or 'condition'} not reached within {timeout:.0f} s")
        await asyncio.sleep(0.01)


class EchoServer:
    """An asyncio echo server on loopback that records everything it received."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> EchoServer:
        self._server = await asyncio.start_server(self._on_connect, LOOPBACK, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    @property
    def upstream(self) -> tuple[str, int]:
        return (LOOPBACK, self.port)

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._echo(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while data := await reader.read(65536):
                self.received += data
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self.writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in list(self.writers):
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = await EchoServer().start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """``await connect(port)``: a client connection to loopback, closed after the test."""
    writers: list[asyncio.StreamWriter] = []

    async def factory(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        writers.append(writer)
        return reader, writer

    try:
        yield factory
    finally:
        for writer in writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> float:
    """Send ``data``, read its echo, return the seconds it took."""
    started = time.monotonic()
    writer.write(data)
    assert await asyncio.wait_for(reader.readexactly(len(data)), 10) == data
    return time.monotonic() - started


def open_sockets() -> set[str]:
    """The process's open sockets, as ``"socket:[INODE]"``."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:"):
                found.add(target)
    return found


def proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kgroup-")]


# --- faults against an echo server ----------------------------------------------------


async def test_forwards_both_ways_and_counts(
    echo: EchoServer, fault_proxy: ProxyFactory, connect: Connect
) -> None:
    proxy = fault_proxy(echo.upstream)
    assert proxy.address == f"{LOOPBACK}:{proxy.port}"
    reader, writer = await connect(proxy.port)
    await round_trip(reader, writer, b"hello")
    assert (proxy.connections, proxy.accepted) == (1, 1)
    await until(lambda: proxy.bytes_upstream == 5 and proxy.bytes_downstream == 5, what="counts")
    proxy.reset_counters()
    assert (proxy.accepted, proxy.bytes_upstream, proxy.bytes_downstream) == (0, 0, 0)
    assert proxy.connections == 1
    assert [port for _, port in proxy.peers()] == [writer.get_extra_info("sockname")[1]]


async def test_latency_adds_at_least_the_delay_and_keeps_order(
    echo: EchoServer, fault_proxy: ProxyFactory, connect: Connect
) -> None:
    proxy = fault_proxy(echo.upstream)
    reader, writer = await connect(proxy.port)
    await round_trip(reader, writer, b"warm-up")

    proxy.add_latency(0.2, direction="upstream")
    assert await round_trip(reader, writer, b"one way") >= 0.2
    proxy.add_latency(0.15)  # both directions
    assert await round_trip(reader, writer, b"both ways") >= 0.3

    proxy.add_latency(0.005, jitter=0.05)
    payload = b"".join(b"%05d" % i for i in range(300))
    for i in range(0, len(payload), 50):
        writer.write(payload[i : i + 50])
        await writer.drain()
    received = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
    assert received == payload  # jitter never reorders

    proxy.add_latency(60)
    writer.write(b"released")
    await until(lambda: proxy.held_bytes("upstream") == 8, what="delayed bytes held")
    proxy.heal()  # delayed bytes go out at once
    assert await asyncio.wait_for(reader.readexactly(8), 10) == b"released"


async def test_black_hole_loses_only_that_directions_bytes(
    echo: EchoServer, fault_proxy: ProxyFactory, connect: Connect
) -> None:
    proxy = fault_proxy(echo.upstream)
    reader, writer = await connect(proxy.port)

    proxy.black_hole("downstream")  # the request arrives, the answer vanishes
    writer.write(b"lost")
    await until(lambda: proxy.dropped_downstream == 4, what="answer dropped")
    assert bytes(echo.received) == b"lost"
    proxy.heal()
    await round_trip(reader, writer, b"kept")  # the next bytes are "kept", not "lost"

    proxy.black_hole("upstream")  # the request vanishes
    writer.write(b"gone")
    await until(lambda: proxy.dropped_upstream == 4, what="request dropped")
    proxy.heal()
    await round_trip(reader, writer, b"back")
    assert bytes(echo.received) == b"lostkeptback"
    assert (proxy.connections, proxy.accepted) == (1, 1)  # the connection stayed open


async def test_stall_then_heal_delivers_in_order(
    echo: EchoServer, fault_proxy: ProxyFactory, connect: Connect
) -> None:
    proxy = fault_proxy(echo.upstream)
    reader, writer = await connect(proxy.port)
    payload = bytes(i % 251 for i in range(100_000))

    proxy.stall("upstream")
    for i in range(0, len(payload), 1000):
        writer.write(payload[i : i + 1000])
    await until(lambda: proxy.held_bytes("upstream") == len(payload), what="upstream held")
    assert echo.received == b""
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(len(payload)), 10) == payload

    proxy.stall("downstream")
    writer.write(payload)
    await until(lambda: proxy.held_bytes("downstream") == len(payload), what="downstream held")
    assert len(echo.received) == 2 * len(payload)
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(len(payload)), 10) == payload
    assert proxy.dropped_upstream == proxy.dropped_downstream == 0


async def test_cut_resets_every_connection(
    echo: EchoServer, fault_proxy: ProxyFactory, connect: Connect
) -> None:
    proxy = fault_proxy(echo.upstream)
    clients = [await connect(proxy.port) for _ in range(2)]
    for reader, writer in clients:
        await round_trip(reader, writer, b"ping")
    proxy.cut()
    assert proxy.connections == 0
    for reader, _ in clients:
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 10)
    await until(lambda: not echo.writers, what="upstream side reset too")
    reader, writer = await connect(proxy.port)  # new connections are fine
    await round_trip(reader, writer, b"after")
    assert proxy.accepted == 3


async def test_refuse_then_allow_again_on_the_same_port(
    echo: EchoServer, fault_proxy: ProxyFactory, connect: Connect
) -> None:
    proxy = fault_proxy(echo.upstream)
    port = proxy.port
    reader, writer = await connect(port)
    proxy.refuse(True)
    assert proxy.refusing
    with pytest.raises(ConnectionRefusedError):
        await connect(port)
    await round_trip(reader, writer, b"still open")  # current connections go on
    proxy.refuse(False)
    assert proxy.port == port
    await round_trip(*await connect(port), b"allowed")
    proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        await connect(port)
    proxy.heal()  # heal allows connections too
    await round_trip(*await connect(port), b"healed")
    assert proxy.accepted == 3


async def test_close_leaves_no_thread_socket_or_warning(echo: EchoServer) -> None:
    gc.collect()
    sockets_before = open_sockets()
    threads_before = proxy_threads()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        proxy = FaultProxy(echo.upstream, name="closing").start()
        assert proxy.running and len(proxy_threads()) == len(threads_before) + 1
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
        await round_trip(reader, writer, b"x")
        proxy.stall()
        writer.write(b"held at close")
        await until(lambda: proxy.held_bytes() > 0, what="bytes held")
        proxy.close()
        proxy.close()  # idempotent
        assert not proxy.running
        assert proxy_threads() == threads_before
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 10)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(LOOPBACK, proxy.port)
        await until(lambda: not echo.writers, what="upstream side closed")
        await until(lambda: open_sockets() <= sockets_before, what="every new socket closed")
        del reader, writer
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_forwards_while_the_calling_thread_blocks() -> None:
    """Sync code and blocking sockets: the proxy forwards on its own thread."""
    with socket.create_server((LOOPBACK, 0)) as listener:
        listener.settimeout(10)
        with FaultProxy(listener.getsockname()[:2], name="sync") as proxy:
            with socket.create_connection((LOOPBACK, proxy.port), timeout=10) as client:
                upstream, _ = listener.accept()
                with upstream:
                    upstream.settimeout(10)
                    client.sendall(b"blocking")
                    assert upstream.recv(100) == b"blocking"
                    proxy.add_latency(0.1, direction="downstream")
                    started = time.monotonic()
                    upstream.sendall(b"reply")
                    assert client.recv(100) == b"reply"
                    assert time.monotonic() - started >= 0.1
        assert not proxy.running


# --- routing through the proxy on real brokers ---------------------------------------


async def addresses_seen(
    bootstrap: str, group: str, proxy: FaultProxy | None = None
) -> dict[str, Any]:
    """Bootstrap an aiokafka client on ``bootstrap``; return the brokers its metadata
    names, the group coordinator's address, where its open connections go and (with
    ``proxy``) the client ports of the proxy's connections at that moment."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await client.bootstrap()
    try:
        metadata = await client.fetch_all_metadata()
        node = client.get_random_node()
        deadline = time.monotonic() + 30
        while True:  # a fresh Kafka answers COORDINATOR_NOT_AVAILABLE for a moment
            found = await client.send(node, FindCoordinatorRequest(group, 0))
            if found.error_code != 15 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
        assert found.error_code == 0, found
        assert await client.ready(found.coordinator_id)
        conns = list(client._conns.values())
        return {
            "brokers": {(b.host, b.port) for b in metadata.brokers()},
            "coordinator": (found.host, found.port),
            "targets": {(c.host, c.port) for c in conns},
            "local_ports": {c._writer.get_extra_info("sockname")[1] for c in conns},
            "proxy_peers": set() if proxy is None else {port for _, port in proxy.peers()},
        }
    finally:
        await client.close()


async def check_client_sees_only_the_proxy(
    proxied: ProxiedBroker[Any], make_topic: Callable[..., str], group: str
) -> None:
    make_topic(2, broker=proxied.broker)
    proxy = proxied.proxy
    proxy_address = (LOOPBACK, proxy.port)
    proxy.reset_counters()
    seen = await addresses_seen(proxied.bootstrap, group, proxy)
    assert seen["brokers"] == {proxy_address}
    assert seen["coordinator"] == proxy_address
    assert seen["targets"] == {proxy_address}
    assert seen["local_ports"] <= seen["proxy_peers"]  # each one is a proxy connection
    assert proxy.accepted >= 1 + len(seen["local_ports"])  # and so was the bootstrap one


@pytest.mark.kafka
async def test_kafka_metadata_through_the_proxy_names_only_the_proxy(
    proxied_kafka: ProxiedBroker[KafkaBroker], make_topic: Callable[..., str], unique_group: str
) -> None:
    await check_client_sees_only_the_proxy(proxied_kafka, make_topic, unique_group)
    # The direct listener still advertises itself (admin work, members not behind it).
    direct = await addresses_seen(proxied_kafka.direct_bootstrap, unique_group)
    assert direct["brokers"] == {(LOOPBACK, proxied_kafka.broker.port)}
    assert direct["coordinator"] == (LOOPBACK, proxied_kafka.broker.port)
    assert proxied_kafka.proxy.upstream == (LOOPBACK, proxied_kafka.broker.proxied_port)


@pytest.mark.tansu
async def test_tansu_metadata_through_the_proxy_names_only_the_proxy(
    proxied_tansu: ProxiedBroker[TansuBroker], make_topic: Callable[..., str], unique_group: str
) -> None:
    await check_client_sees_only_the_proxy(proxied_tansu, make_topic, unique_group)
    assert proxied_tansu.proxy.upstream == (LOOPBACK, proxied_tansu.broker.port)


@pytest.mark.kafka
async def test_kafka_black_holed_member_is_evicted_and_rejoins_after_heal(
    proxied_kafka: ProxiedBroker[KafkaBroker], make_topic: Callable[..., str], unique_group: str
) -> None:
    proxy = proxied_kafka.proxy
    topic = make_topic(6, broker=proxied_kafka.broker)
    # The member behind the black hole believes in its assignment until its lease expires;
    # MemberGroup checks on exit that its hold ended before the other member's began.
    async with MemberGroup() as group:
        direct = await group.start(
            member_config(proxied_kafka.direct_bootstrap, unique_group, topic), name="direct"
        )
        behind = await group.start(
            member_config(proxied_kafka.bootstrap, unique_group, topic), name="behind-proxy"
        )
        both = [direct, behind]

        def shared() -> bool:  # covered by both, each holding some partitions
            return covered(both, topic, 6) and all(r.assignment for r in both)

        await group.wait_until(shared, timeout=60, what="both stable")
        assert proxy.connections >= 1
        generation = behind.member.generation.generation_id

        proxy.black_hole()
        started = time.monotonic()
        await group.wait_until(
            lambda: covered([direct], topic, 6), timeout=SESSION_MS / 1000 + 30, what="takeover"
        )
        # Only the session timeout can remove a member that is cut off, not gone.
        assert time.monotonic() - started >= SESSION_MS / 1000 * 0.8
        assert proxy.dropped_upstream > 0

        proxy.heal()
        await group.wait_until(shared, timeout=60, what="rejoined")
        assert behind.member.generation.generation_id > generation
        # Cut off, it gave its partitions up as lost (lease expiry or UNKNOWN_MEMBER_ID).
        assert any(e.callback == "on_partitions_lost" for e in behind.events)


@pytest.mark.kafka
async def test_kafka_restart_keeps_the_proxied_listener(
    proxied_kafka: ProxiedBroker[KafkaBroker], unique_group: str
) -> None:
    broker, proxy = proxied_kafka.broker, proxied_kafka.proxy
    before = (broker.port, broker.proxied_port, proxy.port)
    await asyncio.to_thread(broker.restart)
    assert (broker.port, broker.proxied_port, proxy.port) == before
    assert proxy.upstream == (LOOPBACK, broker.proxied_port)
    seen = await addresses_seen(proxied_kafka.bootstrap, unique_group, proxy)
    assert seen["brokers"] == seen["targets"] == {(LOOPBACK, proxy.port)}
