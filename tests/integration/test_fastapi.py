"""kgroup.fastapi end to end: the example app under a real uvicorn, real HTTP, real brokers.

Every server is ``python -m uvicorn examples.fastapi_app:app`` in its own process (cwd: the
repository root), configured by environment variables, and is always stopped by a fixture
finalizer. Each test runs on Apache Kafka and on tansu.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from kgroup import GroupConfig, GroupConsumer, TopicPartition, UsageError
from kgroup.testing import Broker, set_consumer_group_timeouts
from kgroup.testing._ports import ManagedProcess, free_port, log_tail, port_is_open

REPO = Path(__file__).resolve().parents[2]
#: Session timeout per broker. tansu holds every JoinGroup about session_timeout / 2 (see
#: shared brokers notes), so it gets a shorter session to keep its joins short.
SESSION_MS = {"kafka": 30_000, "tansu": 16_000}
#: The longest a hand-over after SIGTERM may take: Kafka rebalances as soon as the leaver's
#: LeaveGroup arrives and the survivor rejoins (next heartbeat); tansu adds its join hold.
HANDOVER_S = {"kafka": 10.0, "tansu": 16_000 / 2000 + 4.0}
HEARTBEAT_MS = 1_000
STARTUP_TIMEOUT = 45.0


class Server:
    """One uvicorn process serving examples/fastapi_app.py."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        self.proc = ManagedProcess(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "examples.fastapi_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            log_path,
            env=full_env,
            cwd=REPO,
        )
        self.client = httpx.Client(base_url=self.url, timeout=10.0)

    def start(self) -> None:
        self.proc.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str) -> httpx.Response:
        return self.client.get(path)

    def health(self, kind: str = "ready") -> tuple[int, dict[str, Any]]:
        response = self.get(f"/health/{kind}")
        return response.status_code, response.json()

    def wait_listening(self, timeout: float = STARTUP_TIMEOUT) -> None:
        until(
            lambda: port_is_open("127.0.0.1", self.port),
            timeout=timeout,
            what=f"{self.name} listening",
            alive=self,
        )

    def wait_health(
        self, check: Callable[[int, dict[str, Any]], bool], *, timeout: float, what: str
    ) -> dict[str, Any]:
        seen: list[dict[str, Any]] = []

        def ok() -> bool:
            status, body = self.health()
            seen[:] = [body]
            return check(status, body)

        until(ok, timeout=timeout, what=f"{self.name}: {what} (last: {seen})", alive=self)
        return seen[0]

    def signal(self, sig: int) -> None:
        os.kill(self.proc.popen.pid, sig)

    def close(self) -> None:
        self.client.close()
        if self.proc.running():
            self.proc.kill()
        else:
            self.proc.stop()


def until(
    condition: Callable[[], bool], *, timeout: float, what: str, alive: Server | None = None
) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` s or if the server died."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and not alive.proc.running():
            pytest.fail(
                f"{alive.name} exited while waiting for {what}:\n{log_tail(alive.log_path)}"
            )
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        if time.monotonic() >= deadline:
            logs = "" if alive is None else log_tail(alive.log_path)
            pytest.fail(f"{what} not reached within {timeout:.0f} s\n{logs}")
        time.sleep(0.05)


@pytest.fixture
def servers(broker: Broker, unique_group: str, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``servers(name, topic, **env)`` -> a started Server in the test's group."""
    made: list[Server] = []

    def factory(name: str, topic: str, **env: str) -> Server:
        server = Server(
            name,
            {
                "KGROUP_BOOTSTRAP": broker.bootstrap,
                "KGROUP_GROUP": unique_group,
                "KGROUP_TOPIC": topic,
                "KGROUP_SESSION_TIMEOUT_MS": str(SESSION_MS[broker.kind]),
                "KGROUP_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
                "KGROUP_CLOSE_TIMEOUT_MS": "10000",
                "KGROUP_CLIENT_ID": name,
                **env,
            },
            tmp_path / f"{name}.log",
        )
        made.append(server)
        server.start()
        return server

    yield factory
    for server in made:
        server.close()


async def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for partition, key, value in records:
            await producer.send_and_wait(topic, key=key, value=value, partition=partition)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    asyncio.run(_produce(bootstrap, topic, records))


async def _committed(bootstrap: str, group: str, topic: str) -> int | None:
    """The group's committed offset of ``topic``-0 (OffsetFetch; the consumer never joins)."""
    config = GroupConfig(bootstrap_servers=bootstrap, group_id=group, topics=[topic])
    async with GroupConsumer(config) as consumer:
        return await consumer.committed(TopicPartition(topic, 0))


def committed(bootstrap: str, group: str, topic: str) -> int | None:
    return asyncio.run(_committed(bootstrap, group, topic))


def all_partitions(topic: str, n: int) -> list[str]:
    return sorted(f"{topic}-{p}" for p in range(n))


def test_ready_once_stable_and_processes(
    broker: Broker, make_topic: Callable[..., str], servers: Callable[..., Server]
) -> None:
    topic = make_topic(2)
    server = servers("solo", topic)
    server.wait_listening()
    body = server.wait_health(
        lambda status, body: status == 200, timeout=STARTUP_TIMEOUT, what="ready"
    )
    assert body["ready"] is True and body["live"] is True
    assert body["state"] == "STABLE"
    assert body["generation"] >= 0  # tansu numbers generations from 0, Kafka from 1
    assert body["member_id"]
    assert body["assignment"] == all_partitions(topic, 2)
    assert body["session_timeout_ms"] == SESSION_MS[broker.kind]
    assert set(body["heartbeat_lateness_ms"]) == {"p50", "p99", "max"}
    live = server.get("/health/live")
    assert live.status_code == 200 and live.json()["live"] is True

    produce(broker.bootstrap, topic, [(0, b"a", b"1"), (1, b"a", b"2"), (1, b"b", b"3")])

    def counted() -> bool:
        counts: dict[str, int] = server.get("/stats").json()["counts"]
        return counts == {"a": 2, "b": 1}

    until(counted, timeout=30, what="records counted", alive=server)
    assert server.get("/stats").json()["records"] == 3


def hand_over(
    leaving: Server, survivor: Server, topic: str, partitions: int, *, same_generation: bool
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Wait until both servers are ready and share every partition (in one generation if
    ``same_generation``), SIGTERM ``leaving``, and wait until ``survivor`` owns everything.
    Returns the survivor's health before and after, and the seconds the hand-over took."""
    leaving.wait_listening()
    survivor.wait_listening()
    everything = all_partitions(topic, partitions)
    snapshot: dict[str, dict[str, Any]] = {}

    def shared() -> bool:
        for server in (leaving, survivor):
            status, body = server.health()
            if status != 200:
                return False
            snapshot[server.name] = body
        a, b = snapshot["leaving"], snapshot["survivor"]
        return (
            (not same_generation or a["generation"] == b["generation"])
            and bool(a["assignment"])
            and bool(b["assignment"])
            and sorted(a["assignment"] + b["assignment"]) == everything
        )

    until(shared, timeout=STARTUP_TIMEOUT, what="both members stable, partitions shared")
    started = time.monotonic()
    leaving.signal(signal.SIGTERM)
    after = survivor.wait_health(
        lambda status, body: status == 200 and body["assignment"] == everything,
        timeout=20,
        what="survivor owns every partition",
    )
    return snapshot["survivor"], after, time.monotonic() - started


def left_cleanly(leaving: Server, leave_event: str = "member.leaving") -> str:
    """Wait for ``leaving`` to exit; check that it shut down and left (``leave_event``:
    the classic LeaveGroup's, or ``member.leave_sent`` for the consumer protocol's leave
    heartbeat); return its log."""
    code = leaving.proc.popen.wait(timeout=30)
    output = leaving.log()
    # A clean exit: uvicorn (0.29+) finishes the graceful shutdown, then re-raises the
    # SIGTERM it captured so the exit status reflects the signal; older versions exit 0.
    assert code in (0, -signal.SIGTERM), output[-4000:]
    assert "Application shutdown complete." in output, output[-4000:]
    assert "Application shutdown failed" not in output
    assert leave_event in output, output[-4000:]
    assert "member.left_group" in output and "error_code=0" in output, output[-4000:]
    assert "member.closed" in output
    assert "fastapi.stopped" in output
    return output


def test_sigterm_hands_partitions_over_in_one_rebalance(
    broker: Broker, make_topic: Callable[..., str], servers: Callable[..., Server]
) -> None:
    partitions = 4
    topic = make_topic(partitions)
    leaving = servers("leaving", topic)
    survivor = servers("survivor", topic)  # both start in parallel
    before, body, took = hand_over(leaving, survivor, topic, partitions, same_generation=True)
    generation = before["generation"]
    session_ms = SESSION_MS[broker.kind]
    assert took < HANDOVER_S[broker.kind] < session_ms / 1000, (
        f"hand-over took {took:.1f} s (session timeout {session_ms} ms)"
    )
    assert body["generation"] == generation + 1
    assert body["state"] == "STABLE"
    left_cleanly(leaving)
    # Still exactly one rebalance later: nothing else happened to the survivor.
    status, after = survivor.health()
    assert status == 200 and after["generation"] == generation + 1


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_sigterm_hands_partitions_over_on_the_consumer_protocol(
    broker: Broker,
    make_topic: Callable[..., str],
    servers: Callable[..., Server],
    unique_group: str,
) -> None:
    """The same hand-over with ``KGROUP_GROUP_PROTOCOL=consumer`` (KIP-848): the leaver
    revokes and sends its leave heartbeat; the survivor owns everything at its next
    heartbeat (the group's interval, 1 s here), well within the 30 s session. Epochs are
    per member under this protocol, so no generation is compared across the two."""
    partitions = 4
    topic = make_topic(partitions)
    session_ms = SESSION_MS["kafka"]
    asyncio.run(
        set_consumer_group_timeouts(
            broker.bootstrap,
            unique_group,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
    )
    env = {
        "KGROUP_GROUP_PROTOCOL": "consumer",
        "KGROUP_SESSION_TIMEOUT_MS": "",  # classic-only: the broker's group config rules
        "KGROUP_HEARTBEAT_INTERVAL_MS": "",
        "KGROUP_CONSUMER_SESSION_TIMEOUT_MS": str(session_ms),
    }
    leaving = servers("leaving", topic, **env)
    survivor = servers("survivor", topic, **env)
    before, body, took = hand_over(leaving, survivor, topic, partitions, same_generation=False)
    assert took < HANDOVER_S["kafka"] < session_ms / 1000, f"hand-over took {took:.1f} s"
    assert body["state"] == "STABLE" and body["generation"] > before["generation"]
    output = left_cleanly(leaving, "member.leave_sent")
    assert "protocol=consumer" in output, output[-4000:]
    # The survivor lost nothing on the way (a loss would show as partitions lost).
    assert "member.partitions_lost" not in survivor.log()


def test_failing_handler_turns_unhealthy_with_traceback(
    broker: Broker,
    make_topic: Callable[..., str],
    servers: Callable[..., Server],
    unique_group: str,
) -> None:
    topic = make_topic(1)
    poison = f"poison-{uuid.uuid4().hex[:8]}"
    server = servers("failing", topic, KGROUP_FAIL_ON_VALUE=poison)
    server.wait_listening()
    server.wait_health(lambda status, body: status == 200, timeout=STARTUP_TIMEOUT, what="ready")

    produce(broker.bootstrap, topic, [(0, b"k", b"fine"), (0, b"k", poison.encode())])
    body = server.wait_health(
        lambda status, body: status == 503 and body["error"] is not None,
        timeout=30,
        what="503 after the handler raised",
    )
    assert body["live"] is False and body["ready"] is False
    assert body["error"]["type"] == "PoisonRecord"
    assert poison in body["error"]["message"]
    assert body["error"]["fatal"] is False
    live = server.get("/health/live")
    assert live.status_code == 503 and live.json()["error"]["type"] == "PoisonRecord"

    until(
        lambda: "fastapi.processing_failed" in server.log(),
        timeout=10,
        what="failure logged",
        alive=server,
    )
    output = server.log()
    assert "Traceback (most recent call last)" in output, output[-4000:]
    assert "PoisonRecord" in output
    assert "in handle" in output  # the frame of the user's handler is in the traceback

    # At shutdown the member still leaves cleanly, and the error is raised again from the
    # lifespan, so uvicorn reports the failed shutdown too.
    server.signal(signal.SIGTERM)
    server.proc.popen.wait(timeout=30)
    output = server.log()
    assert "member.left_group" in output, output[-4000:]
    assert "fastapi.processing_failed_at_shutdown" in output
    assert "Application shutdown failed" in output, output[-4000:]
    # The failed batch was not committed as processed: the poison record (offset 1) comes
    # again after a restart.
    offset = committed(broker.bootstrap, unique_group, topic)
    assert offset is None or offset <= 1, offset


async def test_member_mode_in_process(
    kafka_broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Without ``process=`` a plain GroupMember runs; on_assignment sees each assignment."""
    from fastapi import FastAPI

    from kgroup.fastapi import KGroupLifespan

    topic = make_topic(3, broker=kafka_broker)
    seen: list[frozenset[TopicPartition]] = []
    assigned = asyncio.Event()

    async def on_assignment(partitions: frozenset[TopicPartition]) -> None:
        seen.append(partitions)
        assigned.set()

    kg = KGroupLifespan(
        GroupConfig(
            bootstrap_servers=kafka_broker.bootstrap,
            group_id=unique_group,
            topics=[topic],
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        ),
        on_assignment=on_assignment,
        poll_timeout=0.2,
    )
    app = FastAPI(lifespan=kg.lifespan)
    app.include_router(kg.health_router(prefix="/hc"))
    transport = httpx.ASGITransport(app=app)
    async with kg.lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        await asyncio.wait_for(assigned.wait(), 30)
        response = await c.get("/hc/ready")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["assignment"] == all_partitions(topic, 3)
        assert seen == [frozenset(TopicPartition(topic, p) for p in range(3))]
        member = kg.member
    assert member.closed
    with pytest.raises(UsageError, match="not started"):
        kg.member  # noqa: B018
    assert kg.health()["ready"] is False


def test_bad_arguments_are_named() -> None:
    from kgroup.fastapi import KGroupLifespan

    async def process(records: list[Any]) -> None:
        pass

    async def on_assignment(partitions: frozenset[TopicPartition]) -> None:
        pass

    config = GroupConfig(bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"])
    with pytest.raises(UsageError, match="config must be a GroupConfig"):
        KGroupLifespan("localhost:9092", process=process)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not both"):
        KGroupLifespan(config, process=process, on_assignment=on_assignment)
    with pytest.raises(UsageError, match="max_records"):
        KGroupLifespan(config, process=process, max_records=0)
    with pytest.raises(UsageError, match="poll_timeout"):
        KGroupLifespan(config, process=process, poll_timeout=0)
    with pytest.raises(UsageError, match="consumer_options need process"):
        KGroupLifespan(config, consumer_options={"auto_offset_reset": "earliest"})
