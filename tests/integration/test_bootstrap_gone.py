"""A member whose bootstrap brokers are all gone finds its coordinator through the brokers it
learned from Metadata (spec §4.1: a FindCoordinator retry follows a metadata refresh)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kgroup import GroupMember, MemberState
from kgroup.testing import FaultProxy, KafkaBroker
from tests.integration.conftest import group_config

pytestmark = pytest.mark.kafka


async def _poll_until(
    members: list[GroupMember], done: Callable[[], bool], timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            states = [(m.state.name, sorted(map(str, m.assignment))) for m in members]
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s: {states}")
        await asyncio.gather(*(m.poll(timeout=0.2) for m in members))


async def test_a_follower_finds_its_coordinator_after_its_only_bootstrap_broker_is_gone(
    kafka_broker_factory: Callable[..., KafkaBroker],
    make_topic: Callable[..., str],
    unique_group: str,
) -> None:
    kafka = kafka_broker_factory()
    topic = make_topic(2, broker=kafka)
    host, port = kafka.bootstrap.rsplit(":", 1)
    # The follower's only bootstrap address: a proxy to the broker's listener, which
    # advertises its own address in Metadata and FindCoordinator answers.
    seed = FaultProxy((host, int(port)), name="only-seed").start()
    found: list[float] = []

    def hook(event: str, fields: Mapping[str, Any]) -> None:
        if event == "member.coordinator_found":
            found.append(time.monotonic())

    # The leader bootstraps directly (and asks for Metadata for its assignment anyway);
    # the follower never needs topic metadata, so it knows of the broker only through the
    # refresh before its FindCoordinator.
    leader = GroupMember(group_config(kafka.bootstrap, unique_group, topic))
    follower = GroupMember(group_config(seed.address, unique_group, topic))
    follower.add_event_hook(hook)
    members = [leader, follower]
    try:
        async with leader:
            await _poll_until([leader], lambda: len(leader.assignment) == 2, 60, "leader alone")
            async with follower:

                def both_stable() -> bool:
                    return all(
                        m.state is MemberState.STABLE and len(m.assignment) == 1 for m in members
                    ) and (leader.generation.generation_id == follower.generation.generation_id)

                await _poll_until(members, both_stable, 60, "a group of two")
                assert found, "the follower never found its coordinator"
                seed.close()  # its only bootstrap address is gone for good
                # A restart breaks the coordinator connections: the follower must look its
                # coordinator up again, and no bootstrap broker answers.
                await asyncio.to_thread(kafka.restart)
                restarted = time.monotonic()
                await _poll_until(
                    members,
                    lambda: both_stable() and any(t > restarted for t in found),
                    90,
                    "the group again after the restart, the follower through a learned broker",
                )
    finally:
        seed.close()
