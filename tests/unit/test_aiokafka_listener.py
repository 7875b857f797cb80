"""An aiokafka ``ConsumerRebalanceListener`` works as a kgroup listener unchanged
(docs/guide/from-aiokafka.md): its two callbacks are called with kgroup's partitions, which
compare equal to aiokafka's, and the callback it lacks (``on_partitions_lost``) is skipped.
The real GroupMember over kgroup.testing's in-memory coordinator."""

from __future__ import annotations

import asyncio

from aiokafka import ConsumerRebalanceListener
from aiokafka import TopicPartition as AioTopicPartition

from kgroup import GroupMember
from kgroup.testing import InMemoryCoordinator
from tests.unit.test_in_memory_coordinator import config

Calls = list[tuple[str, frozenset[AioTopicPartition]]]


class AioListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    async def on_partitions_revoked(self, revoked: frozenset[AioTopicPartition]) -> None:
        self.calls.append(("revoked", frozenset(revoked)))

    async def on_partitions_assigned(self, assigned: frozenset[AioTopicPartition]) -> None:
        self.calls.append(("assigned", frozenset(assigned)))


async def test_an_aiokafka_listener_is_called_on_assignment_and_close() -> None:
    coordinator = InMemoryCoordinator({"t": 2})
    calls: Calls = []
    member = GroupMember(
        config(topics=["t"]), transport=coordinator.transport(), listener=AioListener(calls)
    )
    everything = frozenset({AioTopicPartition("t", 0), AioTopicPartition("t", 1)})
    await member.start()
    try:
        async with asyncio.timeout(20):
            while member.assignment != everything:
                await member.poll(timeout=0.05)
    finally:
        await member.close()
    assert calls == [("assigned", everything), ("revoked", everything)]


async def test_an_aiokafka_listener_without_on_partitions_lost_is_not_an_error() -> None:
    """The coordinator drops the member (a session timeout): its partitions are lost, which
    a listener without on_partitions_lost does not hear of; the member rejoins, and the
    listener hears of the new assignment."""
    coordinator = InMemoryCoordinator({"t": 1})
    calls: Calls = []
    member = GroupMember(
        config(topics=["t"]), transport=coordinator.transport(), listener=AioListener(calls)
    )
    lost: list[object] = []
    member.add_event_hook(
        lambda event, fields: lost.append(fields) if event == "member.partitions_lost" else None
    )
    everything = frozenset({AioTopicPartition("t", 0)})
    await member.start()
    try:
        async with asyncio.timeout(20):
            while member.assignment != everything:
                await member.poll(timeout=0.05)
            first = member.member_id
            coordinator.expire(first)
            while member.member_id in ("", first) or member.assignment != everything:
                await member.poll(timeout=0.05)
    finally:
        await member.close()
    assert lost, "no loss happened"
    assert calls == [("assigned", everything), ("assigned", everything), ("revoked", everything)]
