"""examples/leader_election.py and examples/work_sharding.py, run as a user runs them (one
process each, on Kafka and on tansu), through a leader's exit and a member's exit."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kgroup.testing import Broker

pytestmark = pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
ROOT = Path(__file__).resolve().parents[2]


class Example:
    """One example process; its stdout lines are collected as they come."""

    def __init__(self, script: str, *args: str) -> None:
        self.argv = [sys.executable, str(ROOT / "examples" / script), *args]
        self.lines: list[str] = []
        self.changed = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Example:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode().strip())
            self.changed.set()

    async def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float = 60) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not predicate(self.lines):
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise AssertionError(f"{self.argv[1:]} printed only {self.lines}") from None

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        async with asyncio.timeout(30):
            code = await self.proc.wait()
        if self._reader is not None:
            await self._reader
        return code


@pytest.fixture
async def examples() -> AsyncIterator[list[Example]]:
    started: list[Example] = []
    try:
        yield started
    finally:
        for ex in started:
            if ex.proc is not None and ex.proc.returncode is None:
                ex.proc.kill()
                await ex.proc.wait()


def last(prefix: str) -> Callable[[list[str]], bool]:
    return lambda lines: any(line.startswith(prefix) for line in lines)


async def test_leader_election_example(broker: Broker, examples: list[Example]) -> None:
    group = f"election-{uuid.uuid4().hex[:8]}"
    common = ("--bootstrap", broker.bootstrap, "--group", group, "--session-ms", "4000")
    a = await Example("leader_election.py", *common, "--name", "node-a").start()
    examples.append(a)
    await a.wait_for(last("leader node-a"))
    b = await Example("leader_election.py", *common, "--name", "node-b").start()
    examples.append(b)
    await b.wait_for(last("follower of node-a"))
    await a.wait_for(last("node-a working"))
    assert await a.stop() == 0  # a clean exit: it leaves the group
    await b.wait_for(last("leader node-b"))
    assert not any(line.startswith("leader") for line in b.lines[: b.lines.index("leader node-b")])
    assert await b.stop() == 0


async def test_work_sharding_example(broker: Broker, examples: list[Example]) -> None:
    group = f"sharding-{uuid.uuid4().hex[:8]}"
    common = (
        "--bootstrap",
        broker.bootstrap,
        "--group",
        group,
        "--jobs",
        "6",
        "--session-ms",
        "4000",
    )
    a = await Example("work_sharding.py", *common).start()
    examples.append(a)
    await a.wait_for(last("holding 6:"))
    b = await Example("work_sharding.py", *common).start()
    examples.append(b)
    await b.wait_for(last("holding 3:"))
    await a.wait_for(lambda lines: sum(line.startswith("stop ") for line in lines) == 3)
    assert await a.stop() == 0
    await b.wait_for(last("holding 6:"))
    assert not any(line.startswith("stop ") for line in b.lines)  # b gave nothing up
    assert await b.stop() == 0
