"""poll() cancellation and close() hygiene on real brokers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import structlog

from kgroup import GroupConfig, GroupMember, ListenerError, MemberState, RebalanceListener
from kgroup._config import DEFAULT_MAX_POLL_INTERVAL_MS, DEFAULT_REQUEST_TIMEOUT_MS
from kgroup.testing import KafkaBroker, TansuBroker
from kgroup.testing._members import MemberGroup, covered
from tests.integration.conftest import group_config

# GroupConfig's own max poll interval and request timeout, not the integration defaults.
cfg = functools.partial(
    group_config,
    max_poll_interval_ms=DEFAULT_MAX_POLL_INTERVAL_MS,
    request_timeout_ms=DEFAULT_REQUEST_TIMEOUT_MS,
)


def joins_sent(logs: Sequence[Mapping[str, Any]], member_id: str | None = None) -> int:
    return sum(
        1
        for e in logs
        if e["event"] == "member.join_sent" and (member_id is None or e["member_id"] == member_id)
    )


async def test_cancelled_poll_does_not_cancel_an_inflight_join_on_kafka(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Kafka holds a JoinGroup until every known member rejoined: a member that stops
    polling (but heartbeats) keeps the others' JoinGroups in flight, long enough to cancel
    the poll() that sent one."""
    topic = make_topic(4)
    async with MemberGroup() as group:
        config = cfg(kafka_broker.bootstrap, unique_group, topic, max_poll_interval_ms=60_000)
        a = await group.start(config)
        b = await group.start(config)
        await group.wait_until(lambda: covered([a, b], topic, 4), timeout=60, what="stable")
        await a.pause()
        await b.pause()  # b will not rejoin: the coordinator holds a's JoinGroup for it
        with structlog.testing.capture_logs() as logs:
            c = await group.start(config)  # triggers a rebalance
            await group.wait_until(
                lambda: a.member._core is not None and a.member._core.rejoin_needed,
                timeout=30,
                what="a told to rejoin",
            )
            poll = asyncio.create_task(a.member.poll())
            await group.wait_until(
                lambda: a.member.state is MemberState.PREPARING_REBALANCE,
                timeout=30,
                what="a's JoinGroup in flight",
            )
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poll
            assert a.member.state is MemberState.PREPARING_REBALANCE  # still joining
            member_a = a.member.member_id
            a.resume()
            b.resume()
            await group.wait_until(lambda: covered([a, b, c], topic, 4), timeout=60, what="3")
        # One JoinGroup from a for this rebalance: the cancelled poll's join was reused.
        assert joins_sent(logs, member_a) == 1


async def test_poll_timeout_returns_while_join_continues_on_tansu(
    tansu_broker: TansuBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """tansu holds each JoinGroup ~session/2: poll(timeout=0.2) returns mid-join, and the
    next poll() finishes the same join instead of sending another."""
    topic = make_topic(2)
    with structlog.testing.capture_logs() as logs:
        async with GroupMember(cfg(tansu_broker.bootstrap, unique_group, topic)) as member:
            assert await member.poll(timeout=0.2) == frozenset()
            assert member.state is MemberState.PREPARING_REBALANCE
            sent = joins_sent(logs)
            assignment = await asyncio.wait_for(member.poll(), 30)
            assert member.state is MemberState.STABLE and len(assignment) == 2  # type: ignore[comparison-overlap]
            assert joins_sent(logs) == sent  # no second JoinGroup
    # MEMBER_ID_REQUIRED round trip + the real join: exactly two.
    assert joins_sent(logs) == 2


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_close_leaves_no_task_connection_or_warning(
    broker: Any, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    before = asyncio.all_tasks()
    member = GroupMember(cfg(broker.bootstrap, unique_group, topic))
    async with member:
        await asyncio.wait_for(member.poll(), 60)
        assert member.state is MemberState.STABLE
        kgroup_tasks = {
            t for t in asyncio.all_tasks() - before if t.get_name().startswith("kgroup")
        }
        assert kgroup_tasks  # the heartbeat task runs while open
    assert member.closed
    assert not {t for t in asyncio.all_tasks() - before if not t.done()} - {asyncio.current_task()}
    assert member._link.connection_open is None
    await member.close()  # idempotent
    # ResourceWarning is an error in this suite (pyproject filterwarnings): an unclosed
    # socket would fail the test at garbage collection.


async def test_revoke_callback_cancelled_mid_way_is_reported_lost_at_close_on_kafka(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A poll() cancelled while on_partitions_revoked awaits (SIGTERM mid-callback): the
    application never heard the end of the revoke and its commit may not have gone out, so
    close() reports those partitions lost (they are no longer this member's)."""
    topic = make_topic(2)
    config = cfg(kafka_broker.bootstrap, unique_group, topic)
    entered = asyncio.Event()
    calls: list[tuple[str, frozenset[Any]]] = []

    class Stuck(RebalanceListener):
        async def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
            calls.append(("revoked", partitions))
            if partitions:
                entered.set()
                await asyncio.Event().wait()  # a commit that never completes

        def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
            calls.append(("lost", partitions))

    member = GroupMember(config, listener=Stuck())
    other = GroupMember(config)
    with structlog.testing.capture_logs() as logs:
        await _rebalance_and_cancel_revoke(member, other, entered, calls)
    assert calls[-1] == ("lost", calls[0][1])
    assert calls == [calls[0], ("lost", calls[0][1])]
    # Both left the group: other's LeaveGroup did not queue behind its own JoinGroup, which
    # Kafka holds for the stuck member (the connection is dropped with the chain).
    events = [e["event"] for e in logs]
    assert events.count("member.left_group") == 2 and "member.leave_group_failed" not in events


async def _rebalance_and_cancel_revoke(
    member: GroupMember,
    other: GroupMember,
    entered: asyncio.Event,
    calls: list[tuple[str, frozenset[Any]]],
) -> None:
    async with member, other:
        async with asyncio.timeout(60):
            while len(member.assignment) != 2:
                await member.poll(timeout=0.2)
        held = member.assignment
        drive = asyncio.create_task(other.poll(timeout=30))  # joins: a rebalance starts
        poll = asyncio.create_task(member.poll(timeout=30))
        async with asyncio.timeout(60):
            await entered.wait()
        poll.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poll
        drive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drive
        assert calls == [("revoked", held)]


class _RevokeRaises(RebalanceListener):
    async def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
        if partitions:
            raise RuntimeError("revoke callback failed")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_close_raises_a_callback_error_once_closed(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, protocol: str
) -> None:
    """A revoke callback that raises during close(): the member still releases, leaves and
    closes, and close() then raises ListenerError (the callback's error as its cause), on
    both protocols alike."""
    topic = make_topic(2)
    config = (
        GroupConfig(
            bootstrap_servers=kafka_broker.bootstrap,
            group_id=unique_group,
            topics=[topic],
            group_protocol="consumer",
        )
        if protocol == "consumer"
        else cfg(kafka_broker.bootstrap, unique_group, topic)
    )
    member = GroupMember(config, listener=_RevokeRaises())
    await member.start()
    try:
        async with asyncio.timeout(60):
            while len(member.assignment) < 2:
                await member.poll(timeout=0.2)
    except BaseException:
        await member.close()
        raise
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(ListenerError) as raised:
            await member.close()
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert member.closed and member.assignment == frozenset()
    events = [e["event"] for e in logs]
    assert "member.listener_error" in events and "member.closed" in events
    left = "member.leave_sent" if protocol == "consumer" else "member.left_group"
    assert left in events
    await member.close()  # idempotent, and raises nothing more
