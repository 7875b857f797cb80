"""Event hooks see every membership event the member logs: the core's (state changes,
heartbeats) and the runtime's (the partition callbacks, subscription changes, an enforced
rebalance, offset commits), as the member guide's own example expects of
``member.partitions_lost``. The real GroupMember over kgroup.testing's in-memory
coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kgroup import GroupMember, TopicPartition
from kgroup.testing import InMemoryCoordinator
from tests.unit.test_in_memory_coordinator import config

T = TopicPartition


async def test_hooks_see_the_runtimes_events_too() -> None:
    coordinator = InMemoryCoordinator({"t": 1, "u": 1})
    member = GroupMember(config(topics=["t"]), transport=coordinator.transport())
    seen: list[tuple[str, Mapping[str, Any]]] = []
    member.add_event_hook(lambda name, fields: seen.append((name, fields)))

    def fields_of(name: str) -> list[Mapping[str, Any]]:
        return [f for n, f in seen if n == name]

    async def until(condition: Any) -> None:
        async with asyncio.timeout(20):
            while not condition():
                await member.poll(timeout=0.05)

    await member.start()
    try:
        await until(lambda: member.assignment == {T("t", 0)})
        (assigned,) = fields_of("member.partitions_assigned")
        assert assigned["partitions"] == ["t-0"] and assigned["group"] == "g"

        await member.commit_offsets({T("t", 0): 5})
        (committed,) = fields_of("offsets.committed")
        assert committed["partitions"] == 1

        await member.subscribe(["u"])
        assert fields_of("member.subscription_changed")[0]["topics"] == ["u"]
        await until(lambda: member.assignment == {T("u", 0)})
        assert fields_of("member.partitions_revoked")[0]["partitions"] == ["t-0"]

        generation = member.generation.generation_id
        member.enforce_rebalance("hooks")
        assert fields_of("member.rebalance_enforced") == [{"group": "g", "reason": "hooks"}]
        await until(lambda: member.generation.generation_id > generation and member.assignment)

        before = member.member_id
        coordinator.expire(before)
        await until(
            lambda: member.member_id not in ("", before) and member.assignment == {T("u", 0)}
        )
        (lost,) = fields_of("member.partitions_lost")
        assert lost["partitions"] == ["u-0"]
    finally:
        await member.close()
    assert fields_of("member.left_group"), [n for n, _ in seen]
