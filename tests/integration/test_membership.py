"""Group membership on real brokers: the same tests on Apache Kafka and on tansu.

Where tansu differs from Kafka (shared/reference/brokers.md), the test says so and checks
that kgroup stays correct anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from kgroup import FencedInstanceId, GroupConfig, MemberState
from kgroup.testing import Broker
from kgroup.testing._members import MemberGroup, MemberRunner, covered
from tests.integration.conftest import SESSION_MS, group_config

pytestmark = pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)


def kind(broker: Broker) -> str:
    return "kafka" if type(broker).__name__ == "KafkaBroker" else "tansu"


async def stable_group(
    group: MemberGroup, cfg: GroupConfig, topic: str, partitions: int, count: int
) -> list[MemberRunner]:
    """Start ``count`` members with ``cfg`` and wait until they cover ``topic``."""
    runners = [await group.start(cfg) for _ in range(count)]
    await group.wait_until(
        lambda: covered(runners, topic, partitions), timeout=60, what=f"{count} stable"
    )
    return runners


async def test_three_members_share_six_partitions(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(6)
    async with MemberGroup() as group:
        runners = await stable_group(group, group_config(broker, unique_group, topic), topic, 6, 3)
        assert all(len(r.assignment) == 2 for r in runners)
        assert len({r.member.generation.generation_id for r in runners}) == 1
        assert sum(r.member.is_leader for r in runners) == 1
        assert not any(r.errors for r in runners)


async def test_graceful_leave_moves_partitions_to_survivors(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(6)
    async with MemberGroup() as group:
        runners = await stable_group(group, group_config(broker, unique_group, topic), topic, 6, 3)
        leaving, survivors = runners[2], runners[:2]
        owned = leaving.assignment
        await leaving.close()
        # The leaver revoked (not lost) its partitions before leaving.
        assert leaving.events[-1].callback == "on_partitions_revoked"
        assert leaving.events[-1].partitions == owned
        took = await group.wait_until(
            lambda: covered(survivors, topic, 6), timeout=60, what="survivors cover"
        )
        # LeaveGroup makes the group rebalance at once, not after the session timeout.
        assert took < SESSION_MS / 1000 + (SESSION_MS / 2000 if kind(broker) == "tansu" else 0)
        assert not any(r.errors for r in runners)


async def test_silent_member_is_evicted_and_its_partitions_move(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(6)
    async with MemberGroup() as group:
        runners = await stable_group(group, group_config(broker, unique_group, topic), topic, 6, 3)
        crashed, survivors = runners[2], runners[:2]
        started = time.monotonic()
        await crashed.crash()  # no LeaveGroup, no more heartbeats
        await group.wait_until(
            lambda: covered(survivors, topic, 6), timeout=60, what="survivors cover"
        )
        # Only session expiry can remove a silent member (tansu notices it when a
        # survivor's next request for the group arrives, which heartbeats provide).
        assert time.monotonic() - started >= SESSION_MS / 1000 * 0.8
        assert not crashed.events or crashed.events[-1].callback == "on_partitions_assigned"


async def test_member_that_stops_polling_leaves_and_rejoins(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(4)
    poll_ms = 3_000
    async with MemberGroup() as group:
        cfg = group_config(broker, unique_group, topic, max_poll_interval_ms=poll_ms)
        slow, other = await group.start(cfg), await group.start(cfg)
        await group.wait_until(lambda: covered([slow, other], topic, 4), timeout=60, what="stable")
        old_member_id = slow.member.member_id
        await slow.pause()  # the application stops calling poll(); heartbeats continue
        await group.wait_until(
            lambda: slow.member.state is MemberState.UNJOINED,
            timeout=poll_ms / 1000 + 10,
            what="poll timeout leave",
        )
        # A dynamic member sends LeaveGroup on poll timeout: the other one takes over
        # without waiting for the session timeout.
        await group.wait_until(lambda: covered([other], topic, 4), timeout=30, what="other covers")
        slow.resume()
        await group.wait_until(lambda: covered([slow, other], topic, 4), timeout=60, what="rejoin")
        lost = [e for e in slow.events if e.callback == "on_partitions_lost"]
        assert lost and lost[0].partitions, "the stalled member's partitions are reported lost"
        assert slow.member.member_id != old_member_id  # rejoined as a new member (id reset)


async def test_static_member_restarted_within_session_gets_its_assignment_back(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(6)
    session_ms = 20_000
    async with MemberGroup() as group:
        cfg = lambda iid: group_config(  # noqa: E731
            broker, unique_group, topic, group_instance_id=iid, session_timeout_ms=session_ms
        )
        a, b = await group.start(cfg("instance-a")), await group.start(cfg("instance-b"))
        await group.wait_until(lambda: covered([a, b], topic, 6), timeout=60, what="stable")
        before_a, generation = a.assignment, b.member.generation.generation_id
        # b's callbacks so far: one assign, or more when a joined after b's first
        # generation had formed (seen on a loaded machine); what follows is the restart's.
        seen = len(b.events)
        await a.close()  # a static member sends no LeaveGroup: the group keeps its slot
        assert a.member.closed
        restarted = await group.start(cfg("instance-a"))
        await group.wait_until(
            lambda: covered([restarted, b], topic, 6), timeout=60, what="restarted stable"
        )
        assert restarted.assignment == before_a
        if kind(broker) == "kafka":
            # Kafka replaces the static member without a rebalance: b never moved.
            assert b.member.generation.generation_id == generation
            assert [e.callback for e in b.events[seen:]] == []


async def test_second_member_with_same_instance_id_fences_the_first(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    if kind(broker) == "tansu":
        pytest.skip("tansu never returns FENCED_INSTANCE_ID (brokers.md); Kafka-only proof")
    topic = make_topic(2)
    # Two live processes with one instance id is the misconfiguration fencing exists for:
    # the broker hands the first one's assignment to the second at once, and only the
    # first one's next request (FENCED_INSTANCE_ID) stops it. No lease can bound that, so
    # this test does not check exclusive ownership.
    async with MemberGroup(check_ownership=False) as group:
        cfg = group_config(
            broker, unique_group, topic, group_instance_id="dup", session_timeout_ms=20_000
        )
        first = await group.start(cfg, stop_on_error=True)
        await group.wait_until(lambda: covered([first], topic, 2), timeout=60, what="first stable")
        second = await group.start(cfg)
        await group.wait_until(lambda: bool(first.errors), timeout=30, what="first fenced")
        assert isinstance(first.errors[0], FencedInstanceId)
        await group.wait_until(lambda: covered([second], topic, 2), timeout=60, what="second owns")
        assert not second.errors


async def test_member_slower_than_rebalance_timeout_is_dropped(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    if kind(broker) == "tansu":
        pytest.skip("tansu does not enforce the rebalance timeout (brokers.md); Kafka-only")
    topic = make_topic(4)
    rebalance_ms = 3_000
    release = asyncio.Event()

    async def stall_in_revoke(parts: object) -> None:
        await release.wait()

    async with MemberGroup() as group:
        cfg = group_config(broker, unique_group, topic, max_poll_interval_ms=rebalance_ms)
        slow = await group.start(cfg)
        fast = await group.start(cfg)
        await group.wait_until(lambda: covered([slow, fast], topic, 4), timeout=60, what="stable")
        slow.hooks["on_partitions_revoked"] = stall_in_revoke
        newcomer = await group.start(cfg)  # triggers a rebalance; slow stalls in revoke
        await group.wait_until(
            lambda: covered([fast, newcomer], topic, 4),
            timeout=60,
            what="group completes without the slow member",
        )
        release.set()
        slow.hooks.clear()
        await group.wait_until(
            lambda: covered([slow, fast, newcomer], topic, 4), timeout=60, what="slow rejoins"
        )
