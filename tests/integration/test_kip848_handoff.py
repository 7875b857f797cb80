"""The consumer-protocol handoff on close (deviations.md row 22) on Apache Kafka 4.4.0.

kgroup's consumer-protocol members heartbeat on a grid shared by the group; a member that
closes with ``handoff_on_close`` keeps its partitions until just before the next tick, then
revokes them and leaves, so the others take them over in the answers to their heartbeats on
that tick. Without the handoff they would wait for their next heartbeat: anywhere in the
interval (4 s here). Every MemberGroup checks on exit that no partition was held by two
members at once.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import pytest

from kgroup.testing import KafkaBroker, set_consumer_group_timeouts
from kgroup.testing._members import MemberGroup, MemberRunner, covered
from tests.integration.test_handoff import unowned_gaps
from tests.integration.test_kip848 import consumer_config, events_of

pytestmark = pytest.mark.kafka

INTERVAL_MS = 4_000
SESSION_MS = 30_000
#: A handoff's partitions wait for the survivors' heartbeats on the tick right after the
#: leave: tens of milliseconds. This test closes each leaver right after the others'
#: heartbeats on a tick (it waits for them), so an ordinary leave would wait a whole
#: interval (seen: 4.00 s when the core skips the handoff).
GAP_LIMIT_S = INTERVAL_MS / 4000


def settled(runners: list[MemberRunner], marks: list[int]) -> bool:
    """Every member has sent 8 heartbeats since ``marks``: past its pickup heartbeats
    (25 ms doubling up to the interval) and on the grid."""
    return all(
        r.member.stats().heartbeats_sent >= mark + 8 for r, mark in zip(runners, marks, strict=True)
    )


async def test_members_closing_with_a_handoff_are_covered_within_milliseconds(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Four members on 8 partitions (uniform), heartbeat interval 4 s. Two close in turn
    with the handoff: each waits for the grid (``member.handoff_waiting``), and the
    partitions it held are owned again less than a second after its revoke ended."""
    topic = make_topic(8)
    await set_consumer_group_timeouts(
        kafka_broker.bootstrap,
        unique_group,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=INTERVAL_MS,
    )
    cfg = consumer_config(
        kafka_broker,
        unique_group,
        topic,
        consumer_session_timeout_ms=SESSION_MS,
        request_timeout_ms=20_000,  # close()'s budget: the handoff waits for a tick
    )
    leaving = dataclasses.replace(cfg, handoff_on_close=True)
    async with MemberGroup() as group:
        stay = [await group.start(cfg) for _ in range(2)]
        leavers = [await group.start(leaving) for _ in range(2)]
        runners = stay + leavers
        await group.wait_until(
            lambda: covered(runners, topic, 8) and all(len(r.assignment) == 2 for r in runners),
            timeout=90,
            what="four members, two partitions each",
        )
        for leaver in leavers:
            remaining = [r for r in runners if r is not leaver]
            marks = [r.member.stats().heartbeats_sent for r in remaining]
            await group.wait_until(
                functools.partial(settled, remaining, marks),
                timeout=90,
                what="heartbeats on the grid",
            )
            held = set(leaver.assignment)
            waiting = events_of(leaver.member, "member.handoff_waiting")
            await leaver.close()
            runners = remaining
            assert len(waiting) == 1 and 0 < waiting[0]["release_in_ms"] <= INTERVAL_MS
            await group.wait_until(
                functools.partial(covered, remaining, topic, 8),
                timeout=30,
                what="the others own all",
            )
            gaps = unowned_gaps(group, leaver.name, held)
            assert max(gaps) < GAP_LIMIT_S, gaps
        assert not any(r.errors for r in stay + leavers)
