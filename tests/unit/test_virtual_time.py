"""kgroup.testing.VirtualTimeLoop: time jumps to the next timer; it never spins or hangs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from kgroup.testing import VirtualTimeLoop

T = TypeVar("T")


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]], start: float = 0.0) -> tuple[T, float]:
    loop = VirtualTimeLoop(start=start)
    try:
        return loop.run_until_complete(coro_fn()), loop.time()
    finally:
        loop.close()


#: A sleep that would take an hour of real time; on the virtual clock it takes none.
AN_HOUR = 3600.0


def test_sleeps_take_no_real_time_and_add_up_exactly() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        for _ in range(10):
            await asyncio.sleep(0.1)
        await asyncio.sleep(AN_HOUR)
        return loop.time()

    seen, end = run(main)
    assert seen == end == 3601.0


def test_timeouts_fire_at_their_deadline() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(45.0):
                await asyncio.Event().wait()
        except TimeoutError:
            return loop.time()
        raise AssertionError("not timed out")

    seen, _ = run(main, start=3.1)
    assert seen == pytest.approx(48.1, abs=1e-6)


def test_a_wait_a_hair_past_a_tick_still_ends() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1e-9  # below the clock's microsecond
        while loop.time() < deadline:  # noqa: ASYNC110 - polling the clock is the point
            await asyncio.sleep(deadline - loop.time())
        return loop.time()

    seen, _ = run(main, start=1.0)
    assert seen == pytest.approx(1.000001)


def test_a_deadlock_raises_instead_of_hanging() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(RuntimeError, match="can never finish"):
        run(main)


def test_the_real_member_heartbeats_for_an_hour_in_virtual_time() -> None:
    """The testing guide's example: an hour of membership, every heartbeat sent."""
    from kgroup import GroupConfig, GroupMember
    from kgroup.testing import InMemoryCoordinator

    async def an_hour_of_membership() -> int:
        coordinator = InMemoryCoordinator({"orders": 4})
        config = GroupConfig(bootstrap_servers="in-memory:9092", group_id="g", topics=["orders"])
        async with GroupMember(config, transport=coordinator.transport()) as member:
            await member.poll(timeout=5)
            for _ in range(60):
                await member.poll(timeout=60)
            return member.stats().heartbeats_acknowledged

    acknowledged, end = run(an_hour_of_membership)
    assert end >= 3600
    assert 1190 <= acknowledged <= 1201  # one every 3 s (heartbeat_interval_ms)
