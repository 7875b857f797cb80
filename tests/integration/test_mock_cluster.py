"""Faults on librdkafka's mock cluster: coordinator moves, error codes injected per API,
authorization failures, and the coordinator's broker going down and up (spec §4, §12 A6-A10,
B14-B16, C20-C25, E30)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from kgroup import GroupAuthorizationFailed, GroupConfig
from kgroup.testing import MockCluster
from kgroup.testing._members import MemberGroup, MemberRunner, covered

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, SYNC_GROUP = 10, 11, 12, 14
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 16, 15, 14
REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 27, 22, 25
GROUP_AUTHORIZATION_FAILED = 30
SESSION_MS = 6_000


def cfg(cluster: MockCluster, group: str, topic: str, **kw: Any) -> GroupConfig:
    values: dict[str, Any] = dict(
        bootstrap_servers=cluster.bootstrap,
        group_id=group,
        topics=[topic],
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=300,
        request_timeout_ms=5_000,
    )
    values.update(kw)
    return GroupConfig(**values)


def coordinator_id(runner: MemberRunner) -> int | None:
    core = runner.member._core
    return None if core is None or core.coordinator is None else core.coordinator.node_id


def callbacks(runner: MemberRunner, since: int = 0) -> list[str]:
    return [e.callback for e in runner.events[since:]]


async def stable_member(
    group: MemberGroup, cluster: MockCluster, unique_group: str, topic: str, **kw: Any
) -> MemberRunner:
    runner = await group.start(cfg(cluster, unique_group, topic, **kw))
    await group.wait_until(lambda: covered([runner], topic, 4), timeout=30, what="stable")
    return runner


async def heartbeats_after(
    group: MemberGroup, cluster: MockCluster, count: int, broker_id: int | None = None
) -> None:
    """Wait until ``count`` more heartbeats (to ``broker_id`` if given) were received."""

    def seen() -> int:
        return sum(
            1
            for r in cluster.requests([HEARTBEAT])
            if broker_id is None or r.broker_id == broker_id
        )

    target = seen() + count
    await group.wait_until(lambda: seen() >= target, timeout=30, what=f"{count} heartbeats")


async def test_coordinator_moved_while_stable_keeps_the_generation(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """E30: heartbeats follow the coordinator to its new broker; no JoinGroup, no callbacks."""
    topic = make_topic(4, broker=mock_cluster)
    async with MemberGroup() as group:
        a = await group.start(cfg(mock_cluster, unique_group, topic))
        b = await group.start(cfg(mock_cluster, unique_group, topic))
        await group.wait_until(lambda: covered([a, b], topic, 4), timeout=30, what="stable")
        generations = [(r.member.generation, len(r.events)) for r in (a, b)]
        old = coordinator_id(a)
        new = next(i for i in mock_cluster.broker_ids if i != old)
        mock_cluster.start_request_tracking()
        mock_cluster.set_coordinator(unique_group, new)
        await group.wait_until(
            lambda: coordinator_id(a) == new and coordinator_id(b) == new,
            timeout=30,
            what="both follow the coordinator",
        )
        await heartbeats_after(group, mock_cluster, 4, broker_id=new)
        assert [(r.member.generation, len(r.events)) for r in (a, b)] == generations
        assert not mock_cluster.requests([JOIN_GROUP, SYNC_GROUP])
        assert not a.errors and not b.errors


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (NOT_COORDINATOR, "kept"),
        (COORDINATOR_NOT_AVAILABLE, "kept"),
        (REBALANCE_IN_PROGRESS, "rejoined"),
        (ILLEGAL_GENERATION, "lost, same member id"),
        (UNKNOWN_MEMBER_ID, "lost, new member id"),
    ],
)
async def test_injected_heartbeat_errors(
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    code: int,
    outcome: str,
) -> None:
    """§4.4 / C20-C21: each heartbeat error gets its reaction; nothing reaches poll()."""
    topic = make_topic(4, broker=mock_cluster)
    async with MemberGroup() as group:
        member = await stable_member(group, mock_cluster, unique_group, topic)
        generation, member_id, seen = (
            member.member.generation,
            member.member.member_id,
            len(member.events),
        )
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(HEARTBEAT, code)
        if outcome == "kept":
            await heartbeats_after(group, mock_cluster, 4)
            assert member.member.generation == generation
            assert callbacks(member, seen) == []
            assert not mock_cluster.requests([JOIN_GROUP])
        else:
            await group.wait_until(
                lambda: len(member.events) > seen + 1 and covered([member], topic, 4),
                timeout=30,
                what="rejoined",
            )
            assert mock_cluster.requests([JOIN_GROUP])
            if outcome == "rejoined":
                assert callbacks(member, seen)[:2] == [
                    "on_partitions_revoked",
                    "on_partitions_assigned",
                ]
                assert member.member.member_id == member_id
            else:
                assert callbacks(member, seen)[:2] == [
                    "on_partitions_lost",
                    "on_partitions_assigned",
                ]
                same = member.member.member_id == member_id
                assert same is (outcome == "lost, same member id")
        assert not member.errors


@pytest.mark.parametrize(
    ("api", "code"),
    [
        (JOIN_GROUP, COORDINATOR_LOAD_IN_PROGRESS),
        (JOIN_GROUP, NOT_COORDINATOR),
        (JOIN_GROUP, COORDINATOR_NOT_AVAILABLE),
        (JOIN_GROUP, REBALANCE_IN_PROGRESS),
        (JOIN_GROUP, UNKNOWN_MEMBER_ID),
        (SYNC_GROUP, REBALANCE_IN_PROGRESS),
        (SYNC_GROUP, ILLEGAL_GENERATION),
        (SYNC_GROUP, UNKNOWN_MEMBER_ID),
        (SYNC_GROUP, NOT_COORDINATOR),
    ],
)
async def test_injected_join_and_sync_errors_are_retried(
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    api: int,
    code: int,
) -> None:
    """§4.2/§4.3, A7-A9, B14-B15: retriable Join/Sync answers restart the join; the member
    ends stable, and poll() never sees them."""
    topic = make_topic(4, broker=mock_cluster)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(api, code)
    async with MemberGroup() as group:
        member = await stable_member(group, mock_cluster, unique_group, topic)
        assert len(mock_cluster.requests([JOIN_GROUP])) >= 2  # the failed attempt + a retry
        if code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
            assert len(mock_cluster.requests([FIND_COORDINATOR])) >= 2  # rediscovered
        assert not member.errors


async def test_join_group_authorization_failure_is_raised_from_poll(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(4, broker=mock_cluster)
    mock_cluster.push_request_errors(JOIN_GROUP, GROUP_AUTHORIZATION_FAILED)
    async with MemberGroup() as group:
        member = await group.start(cfg(mock_cluster, unique_group, topic), stop_on_error=True)
        await group.wait_until(lambda: bool(member.errors), timeout=30, what="error raised")
        assert isinstance(member.errors[0], GroupAuthorizationFailed)
        assert member.errors[0].api == "JoinGroup"


async def test_find_coordinator_authorization_failure_sends_no_join(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A6: GROUP_AUTHORIZATION_FAILED on FindCoordinator is raised and no JoinGroup is sent."""
    topic = make_topic(4, broker=mock_cluster)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(FIND_COORDINATOR, GROUP_AUTHORIZATION_FAILED)
    async with MemberGroup() as group:
        member = await group.start(cfg(mock_cluster, unique_group, topic), stop_on_error=True)
        await group.wait_until(lambda: bool(member.errors), timeout=30, what="error raised")
        assert isinstance(member.errors[0], GroupAuthorizationFailed)
        assert not mock_cluster.requests([JOIN_GROUP])


@pytest.mark.parametrize("outage_s", [2.0, SESSION_MS / 1000 + 3])
async def test_coordinator_broker_down_and_up(
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    outage_s: float,
) -> None:
    """A short outage (< session): the member keeps its generation, no callbacks. A long
    one (> session): the broker evicts it; the member reports its partitions lost and
    rejoins. The outage length is the test's input, not a wait for an event."""
    topic = make_topic(4, broker=mock_cluster)
    async with MemberGroup() as group:
        member = await stable_member(group, mock_cluster, unique_group, topic)
        generation, seen = member.member.generation, len(member.events)
        coordinator = coordinator_id(member)
        assert coordinator is not None
        mock_cluster.broker_down(coordinator)
        try:
            await asyncio.sleep(outage_s)
            assert member.member.generation == generation  # an outage alone resets nothing
        finally:
            mock_cluster.broker_up(coordinator)
        mock_cluster.start_request_tracking()
        if outage_s < SESSION_MS / 1000:
            await heartbeats_after(group, mock_cluster, 3)
            assert member.member.generation == generation
            assert callbacks(member, seen) == []
        else:
            await group.wait_until(
                lambda: (
                    "on_partitions_lost" in callbacks(member, seen) and covered([member], topic, 4)
                ),
                timeout=60,
                what="lost then rejoined",
            )
        assert not member.errors
