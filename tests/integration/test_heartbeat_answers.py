"""Heartbeat answers on a real connection are handed to the core without a task.

The heartbeat's request is written at once and its answer is handed over in the connection
reader's own step (``BrokerConnection.watch``), not by a task per heartbeat that awaits it:
one event-loop step less between a REBALANCE_IN_PROGRESS answer and the rejoin, and less
idle CPU. A kgroup bug in handling the answer still surfaces from ``poll()`` as an
``InternalError``, never as a broker error, and asyncio reports nothing.

The fake broker (``_fake_broker.FakeBroker``) serves one member over real TCP; the fault
cases of the same path (timeouts, malformed answers, disconnects) are in
``test_malformed_input.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kgroup import InternalError, UnexpectedBrokerError
from kgroup._runtime._tasks import TaskOwner
from kgroup.testing import MemberGroup
from tests.integration._fake_broker import FakeBroker
from tests.integration.conftest import group_config

TOPIC = "heartbeats"


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    async with FakeBroker(topics={TOPIC: 2}) as fake:
        yield fake


async def _stable(group: MemberGroup, broker: FakeBroker) -> Any:
    runner = await group.start(
        group_config(
            broker.bootstrap, "g-heartbeats", TOPIC, heartbeat_interval_ms=50, retry_backoff_ms=50
        )
    )
    await group.wait_stable(TOPIC, 2, timeout=20)
    return runner


async def test_heartbeat_answers_take_no_task(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[str] = []
    spawn = TaskOwner.spawn

    def recording(self: TaskOwner, coro: Any, name: str) -> asyncio.Task[Any]:
        spawned.append(name)
        return spawn(self, coro, name)

    monkeypatch.setattr(TaskOwner, "spawn", recording)
    group = MemberGroup()
    try:
        runner = await _stable(group, broker)
        stats = runner.member._shared.hb_stats
        before = stats.acknowledged
        await group.wait_until(
            lambda: stats.acknowledged >= before + 10,
            timeout=20,
            what="ten heartbeats answered",
        )
        assert "kgroup-heartbeat-request" not in spawned, spawned
        assert not runner.errors
    finally:
        await group.aclose()


async def test_a_bug_handling_a_heartbeat_answer_is_an_internal_error(
    broker: FakeBroker,
) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    group = MemberGroup()
    try:
        runner = await _stable(group, broker)
        core = runner.member._core
        assert core is not None

        def crash(*args: Any, **kwargs: Any) -> None:
            raise ZeroDivisionError("a bug in kgroup")

        core.on_heartbeat_response = crash
        await group.wait_until(
            lambda: bool(runner.errors), timeout=20, what="poll() raising the bug"
        )
        error = runner.errors[0]
        assert isinstance(error, InternalError)
        assert not isinstance(error, UnexpectedBrokerError)
        assert isinstance(error.__cause__, ZeroDivisionError)
        assert error.task == "kgroup-heartbeat-answer"
    finally:
        await group.aclose()
        loop.set_exception_handler(previous)
    assert reported == []
