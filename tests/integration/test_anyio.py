"""kgroup's public API under anyio, on tansu (fast).

- ``anyio.run(..., backend="asyncio")``: start/poll/close and ``async with`` work, in both
  modes (default and ``isolate_heartbeat``).
- Inside an anyio task group: cancelling the group in the middle of ``poll()`` leaves no
  task of kgroup's behind, and ``close()`` still works afterwards.
- ``anyio.run(..., backend="trio")``: kgroup needs asyncio; it fails at once with a
  UsageError that says so (and names trio), without starting anything.

The tests call ``anyio.run`` themselves (pytest's own asyncio loop is not running in a
plain ``def`` test), so each one exercises anyio's runner exactly as an application would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from kgroup import GroupConfig, GroupMember, MemberState, UsageError
from kgroup.testing import Broker
from tests.integration.conftest import HEARTBEAT_MS, group_config


def kgroup_tasks() -> list[asyncio.Task[Any]]:
    """kgroup's tasks alive on the running loop (they are all named ``kgroup-...``)."""
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("kgroup-") and not t.done()]


def kgroup_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kgroup-coordinator")]


async def poll_until_stable(member: GroupMember, partitions: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (member.state is MemberState.STABLE and len(member.assignment) == partitions):
        if time.monotonic() > deadline:
            raise AssertionError(f"not stable within {timeout}s: {member!r}")
        await member.poll(timeout=0.5)


@pytest.mark.parametrize("isolated", [False, True], ids=["default", "isolated"])
def test_async_with_under_anyio_asyncio_backend(
    tansu_broker: Broker, make_topic: Callable[..., str], unique_group: str, isolated: bool
) -> None:
    topic = make_topic(2)
    cfg = group_config(tansu_broker, unique_group, topic, isolate_heartbeat=isolated)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with GroupMember(cfg) as member:
            await poll_until_stable(member, 2)
            seen["generation"] = member.generation.generation_id
            seen["stats"] = member.stats().as_dict()
            seen["tasks_open"] = {t.get_name() for t in kgroup_tasks()}
            seen["threads_open"] = len(kgroup_threads())
        seen["closed"] = member.closed
        seen["tasks_after"] = kgroup_tasks()
        seen["threads_after"] = kgroup_threads()

    anyio.run(main, backend="asyncio")
    assert seen["generation"] >= 0
    assert seen["stats"]["state"] == "STABLE"
    assert seen["stats"]["isolated"] is isolated
    assert seen["stats"]["assignment"] == [f"{topic}-0", f"{topic}-1"]
    # Isolated mode: the tasks run on the coordinator thread's loop, not the app's.
    # One heartbeat task (which also watches the lease), at most a heartbeat in flight, and
    # the metadata watch.
    if isolated:
        assert seen["tasks_open"] == set()
    else:
        assert "kgroup-heartbeat" in seen["tasks_open"]
        assert seen["tasks_open"] <= {
            "kgroup-heartbeat",
            "kgroup-heartbeat-request",
            "kgroup-metadata-watch",
        }
    assert seen["threads_open"] == (1 if isolated else 0)
    assert seen["closed"] is True
    assert seen["tasks_after"] == []
    assert seen["threads_after"] == []


@pytest.mark.parametrize("isolated", [False, True], ids=["default", "isolated"])
def test_cancelling_task_group_mid_poll_leaves_no_task(
    tansu_broker: Broker, make_topic: Callable[..., str], unique_group: str, isolated: bool
) -> None:
    topic = make_topic(1)
    cfg = group_config(tansu_broker, unique_group, topic, isolate_heartbeat=isolated)
    seen: dict[str, Any] = {}

    async def main() -> None:
        member = GroupMember(cfg)
        await member.start()
        in_poll = anyio.Event()

        async def poll_forever() -> None:
            await poll_until_stable(member, 1)
            in_poll.set()
            while True:
                await member.poll(timeout=None)  # stable and idle: waits until cancelled

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll_forever)
            with anyio.fail_after(60):
                await in_poll.wait()
            # Let the poll task enter poll() and park in it, then cancel the group.
            await anyio.sleep(0.2)
            tg.cancel_scope.cancel()
        seen["cancelled_state"] = member.state
        seen["generation"] = member.generation.generation_id
        # The member survives its poller's cancellation: poll again, then close.
        assignment = await member.poll(timeout=0)
        seen["assignment_after"] = sorted(str(tp) for tp in assignment)
        await member.close()
        seen["tasks_after"] = kgroup_tasks()
        seen["threads_after"] = kgroup_threads()
        seen["other_tasks"] = [
            t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()
        ]

    anyio.run(main, backend="asyncio")
    assert seen["cancelled_state"] is MemberState.STABLE
    assert seen["generation"] >= 0
    assert seen["assignment_after"] == [f"{topic}-0"]
    assert seen["tasks_after"] == []
    assert seen["threads_after"] == []
    assert seen["other_tasks"] == []


def test_trio_backend_fails_at_once_with_a_clear_usage_error() -> None:
    cfg = GroupConfig(bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"])
    outcome: dict[str, Any] = {}

    async def main() -> None:
        member = GroupMember(cfg)
        started = time.monotonic()
        try:
            await member.start()
        except UsageError as exc:
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - started
        try:
            async with GroupMember(cfg):
                pass
        except UsageError as exc:
            outcome["async_with_error"] = exc
        outcome["threads"] = kgroup_threads()

    anyio.run(main, backend="trio")
    message = str(outcome["error"])
    assert "kgroup needs asyncio" in message
    assert "trio" in message
    assert "backend='asyncio'" in message
    assert outcome["elapsed"] < 1.0
    assert "kgroup needs asyncio" in str(outcome["async_with_error"])
    assert outcome["threads"] == []


def test_trio_backend_fails_for_isolated_mode_too() -> None:
    cfg = GroupConfig(
        bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"], isolate_heartbeat=True
    )
    outcome: dict[str, Any] = {}

    async def main() -> None:
        try:
            await GroupMember(cfg).start()
        except UsageError as exc:
            outcome["error"] = exc
        outcome["threads"] = kgroup_threads()

    anyio.run(main, backend="trio")
    assert "runs under trio" in str(outcome["error"])
    assert outcome["threads"] == []  # no coordinator thread was started


def test_isolated_member_abandoned_with_its_loop_stops_its_thread(
    tansu_broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """An application that ends its loop without close(): the coordinator thread notices
    (within a heartbeat interval), closes its connections and ends, instead of heartbeating
    for a member nobody polls until the process exits."""
    topic = make_topic(1)
    cfg = group_config(tansu_broker, unique_group, topic, isolate_heartbeat=True)
    seen: dict[str, Any] = {}

    async def main() -> None:
        member = GroupMember(cfg)
        await member.start()
        await poll_until_stable(member, 1)
        seen["member"] = member
        seen["threads_open"] = len(kgroup_threads())
        # return without close(): anyio.run closes the loop

    anyio.run(main, backend="asyncio")
    assert seen["threads_open"] == 1
    deadline = time.monotonic() + 10 * HEARTBEAT_MS / 1000
    while kgroup_threads():
        assert time.monotonic() < deadline, "the coordinator thread outlived its app loop"
        time.sleep(0.05)
    assert seen["member"].closed
