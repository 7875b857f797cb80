"""The real GroupMember, driven through the transport seam by kgroup.testing's in-memory
coordinator: no broker, no socket, the same runtime users run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kgroup import ErrorCode, GroupConfig, GroupMember, GroupProtocol, MemberState, TopicPartition
from kgroup.testing import InMemoryCoordinator, MockTransport
from kgroup.testing import messages as m

TOPIC = "t"


def config(**overrides: Any) -> GroupConfig:
    settings: dict[str, Any] = {
        "bootstrap_servers": "in-memory:9092",
        "group_id": "g",
        "topics": [TOPIC],
        "session_timeout_ms": 6_000,
        "heartbeat_interval_ms": 100,
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 50,
        "request_timeout_ms": 2_000,
    }
    settings.update(overrides)
    return GroupConfig(**settings)


class Members:
    """Members polling in background tasks, all closed at the end."""

    def __init__(self, coordinator: InMemoryCoordinator) -> None:
        self.coordinator = coordinator
        self.members: list[GroupMember] = []
        self.transports: list[MockTransport] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.changed = asyncio.Event()

    async def start(self, protocol: GroupProtocol | None = None, **overrides: Any) -> GroupMember:
        """One more member (``protocol``: of a group that is not a consumer group)."""
        transport = self.coordinator.transport()
        member = GroupMember(config(**overrides), transport=transport, protocol=protocol)
        member.add_event_hook(lambda name, fields: self.changed.set())
        await member.start()
        self.members.append(member)
        self.transports.append(transport)

        async def loop() -> None:
            while not member.closed:
                await member.poll(timeout=0.05)

        self._tasks.append(asyncio.create_task(loop()))
        return member

    async def wait(self, condition: Callable[[], bool], what: str) -> None:
        """Re-check ``condition`` at every membership event (and every 50 ms: requests
        are not events), for at most 20 s."""
        async with asyncio.timeout(20):
            while not condition():
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), 0.05)
                except TimeoutError:
                    pass

    def covered(self, partitions: int, members: list[GroupMember] | None = None) -> bool:
        live = members if members is not None else [m for m in self.members if not m.closed]
        owned = [m.assignment for m in live]
        union = frozenset().union(*owned)
        disjoint = sum(len(o) for o in owned) == len(union)
        stable = all(mem.state is MemberState.STABLE for mem in live)
        want = {TopicPartition(TOPIC, p) for p in range(partitions)}
        return stable and disjoint and union == want

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for member in self.members:
            await member.close()


@pytest.fixture
async def group() -> AsyncIterator[Members]:
    members = Members(InMemoryCoordinator({TOPIC: 4}))
    try:
        yield members
    finally:
        await members.aclose()


async def test_two_members_join_share_the_partitions_and_heartbeat(group: Members) -> None:
    a = await group.start()
    await group.wait(lambda: group.covered(4), "a alone")
    b = await group.start()
    await group.wait(lambda: group.covered(4) and bool(b.assignment), "both")
    assert a.generation.generation_id == b.generation.generation_id == 2
    assert len(a.assignment) == len(b.assignment) == 2
    beats = sum(isinstance(r, m.HeartbeatRequest) for r in group.transports[0].requests)
    await group.wait(
        lambda: (
            sum(isinstance(r, m.HeartbeatRequest) for r in group.transports[0].requests)
            >= beats + 3
        ),
        "heartbeats",
    )


async def test_a_leaving_member_hands_its_partitions_over(group: Members) -> None:
    a = await group.start()
    b = await group.start()
    await group.wait(lambda: group.covered(4) and bool(a.assignment and b.assignment), "both")
    await b.close()
    assert any(isinstance(r, m.LeaveGroupRequest) for r in group.transports[1].requests)
    await group.wait(lambda: group.covered(4, [a]), "a takes over")


async def test_coordinator_errors_and_a_cut_cost_no_membership(group: Members) -> None:
    a = await group.start()
    await group.wait(lambda: group.covered(4), "a alone")
    generation = a.generation.generation_id
    lookups = sum(isinstance(r, m.FindCoordinatorRequest) for r in group.transports[0].requests)
    group.coordinator.fail_next(m.HeartbeatRequest, ErrorCode.NOT_COORDINATOR)
    await group.wait(
        lambda: (
            sum(isinstance(r, m.FindCoordinatorRequest) for r in group.transports[0].requests)
            > lookups
        ),
        "rediscovery",
    )
    group.transports[0].disconnect()
    beats = len(group.transports[0].requests)
    await group.wait(lambda: len(group.transports[0].requests) > beats + 3, "back")
    assert a.generation.generation_id == generation
    assert a.state is MemberState.STABLE


async def test_an_expired_member_reports_its_partitions_lost_and_rejoins(group: Members) -> None:
    lost: list[frozenset[TopicPartition]] = []

    class Listener:
        def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            lost.append(partitions)

    transport = group.coordinator.transport()
    member = GroupMember(config(), transport=transport, listener=Listener())  # type: ignore[arg-type]
    async with member:
        async with asyncio.timeout(20):
            while not group.covered(4, [member]):
                await member.poll(timeout=0.05)
        group.coordinator.expire(member.member_id)
        async with asyncio.timeout(20):
            while not (lost and group.covered(4, [member])):
                await member.poll(timeout=0.05)
    assert lost == [frozenset(TopicPartition(TOPIC, p) for p in range(4))]
