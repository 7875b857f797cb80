"""Deviation 16 on Apache Kafka 4.4.0: a static member whose join is refused with
UNRELEASED_INSTANCE_ID retries; it gives up once a run of refusals spans two session
timeouts, unless Kafka names the member's own id as the instance's holder.

The holder is a bare connection that joins the group under the instance id and heartbeats
on its own schedule. In the first test it uses the kgroup member's own member id (as the
member's earlier incarnation would, whose join answer was lost): the member waits past the
window until the holder stops and Kafka releases the id a session later, then joins. In
the second the holder is another member that never stops: the kgroup member fails, two
sessions after its first refusal. The group's session is 3 s (the test brokers allow
1000 ms and up), and the member's ``consumer_session_timeout_ms`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import types
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from kgroup import GroupConfig, GroupMember, MemberState, UnexpectedBrokerError
from kgroup._runtime import _kip848
from kgroup.testing import KafkaBroker, set_consumer_group_timeouts
from kgroup.testing.messages import ConsumerGroupHeartbeatRequest
from tests.integration.test_kip848_commit_epochs import open_at_coordinator

SESSION_MS = 3_000
INTERVAL_MS = 500
WINDOW_S = 2 * SESSION_MS / 1000  # UNRELEASED_WINDOW_SESSIONS sessions
UNRELEASED_INSTANCE_ID = 111


@contextlib.asynccontextmanager
async def holder(
    broker: KafkaBroker, group: str, topic: str, instance: str, member_id: str
) -> AsyncIterator[asyncio.Event]:
    """A static member with ``instance`` and ``member_id`` that heartbeats every interval
    until the event it yields is set (then it stops, as a crashed process would: no leave)."""
    conn = await open_at_coordinator(broker, group, "unreleased-holder")
    stop = asyncio.Event()
    try:
        joined = await conn.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=member_id,
                member_epoch=0,
                instance_id=instance,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=(topic,),
                topic_partitions=(),
            ),
            10_000,
        )
        assert joined.error_code == 0, joined
        epoch = joined.member_epoch

        async def beat() -> None:
            nonlocal epoch
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), INTERVAL_MS / 1000)
                if stop.is_set():
                    return
                resp = await conn.request(
                    ConsumerGroupHeartbeatRequest(
                        group_id=group, member_id=member_id, member_epoch=epoch
                    ),
                    10_000,
                )
                assert resp.error_code == 0, resp
                epoch = resp.member_epoch

        task = asyncio.create_task(beat())
        try:
            yield stop
        finally:
            stop.set()
            await task
    finally:
        await conn.aclose()


def refusals(member: GroupMember) -> list[float]:
    """When the member's heartbeats were answered UNRELEASED_INSTANCE_ID."""
    seen: list[float] = []

    def hook(event: str, fields: Mapping[str, Any]) -> None:
        if event == "member.heartbeat_failed" and "UNRELEASED_INSTANCE_ID" in str(
            fields.get("error")
        ):
            seen.append(time.monotonic())

    member.add_event_hook(hook)
    return seen


async def start_member(broker: KafkaBroker, group: str, topic: str, instance: str) -> GroupMember:
    member = GroupMember(
        GroupConfig(
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            topics=[topic],
            group_protocol="consumer",
            group_instance_id=instance,
            consumer_session_timeout_ms=SESSION_MS,
            request_timeout_ms=10_000,
        )
    )
    await member.start()
    return member


async def _setup(broker: KafkaBroker, group: str) -> None:
    await set_consumer_group_timeouts(
        broker.bootstrap, group, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS
    )


async def test_a_member_refused_by_its_own_member_id_waits_for_the_release(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    unique_group: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = make_topic(2)
    await _setup(kafka_broker, unique_group)
    own = uuid.uuid4()
    # The kgroup member generates this member id (KIP-1082), as its earlier incarnation did.
    monkeypatch.setattr(_kip848, "uuid", types.SimpleNamespace(uuid4=lambda: own, UUID=uuid.UUID))
    hold_s = WINDOW_S + 3  # the holder outlives the window by a session
    async with holder(kafka_broker, unique_group, topic, "i-1", str(own)) as stop:
        member = await start_member(kafka_broker, unique_group, topic, "i-1")
        try:
            refused = refusals(member)
            started = time.monotonic()
            while time.monotonic() - started < hold_s:
                # poll() would raise the fatal error of a member that gave up.
                await member.poll(timeout=0.2)
                assert not member.assignment
            assert refused and refused[-1] - refused[0] > WINDOW_S, refused
            stop.set()  # the holder stops heartbeating; Kafka releases the id a session later
            deadline = time.monotonic() + 30
            while member.state is not MemberState.STABLE or len(member.assignment) != 2:
                assert time.monotonic() < deadline, (member.state, member.assignment)
                await member.poll(timeout=0.2)
            assert member.member_id == str(own)
        finally:
            await member.close()


async def test_a_member_refused_by_another_live_holder_gives_up_after_two_sessions(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    await _setup(kafka_broker, unique_group)
    async with holder(kafka_broker, unique_group, topic, "i-1", str(uuid.uuid4())):
        member = await start_member(kafka_broker, unique_group, topic, "i-1")
        try:
            refused = refusals(member)
            deadline = time.monotonic() + WINDOW_S + 30
            with pytest.raises(UnexpectedBrokerError) as failed:
                while True:
                    assert time.monotonic() < deadline, "the member never gave up"
                    await member.poll(timeout=0.2)
            assert failed.value.error_code == UNRELEASED_INSTANCE_ID, failed.value
            gave_up = time.monotonic()
            # Two sessions after the first refusal (its request left a round trip before),
            # and not much later: the next refusal after the window ends it.
            assert refused and WINDOW_S <= gave_up - refused[0] + 0.5, refused
            assert gave_up - refused[0] < WINDOW_S + 5, refused
            assert not member.assignment
        finally:
            await member.close()
