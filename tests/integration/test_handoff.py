"""The handoff on close (deviations.md row 14) on Apache Kafka: a cooperative-sticky member
that closes rejoins once marked as leaving, keeps its partitions until the generation that
gives it nothing, then revokes and leaves; the others pick its partitions up in the
follow-up rebalance at once instead of at their next heartbeat. Under a Java leader (which
ignores the mark) the member falls back to the ordinary revoke-then-leave. Every test's
MemberGroup checks on exit that no partition was held by two members at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kgroup import TopicPartition
from kgroup.testing import JavaMember, KafkaBroker, TansuBroker
from kgroup.testing._members import MemberGroup, MemberRunner, covered
from tests.integration.conftest import group_config
from tests.integration.test_cooperative import COOP, java_coop, replay_java, union_covers

LONG_HEARTBEAT_MS = 5_000


def outcomes(runner: MemberRunner) -> list[str]:
    """The outcomes of the runner's handoffs, recorded from its event hook."""
    found: list[str] = []

    def hook(event: str, fields: Mapping[str, Any]) -> None:
        if event == "member.handoff_done":
            found.append(str(fields["outcome"]))

    runner.member.add_event_hook(hook)
    return found


def unowned_gaps(group: MemberGroup, leaver: str, partitions: set[TopicPartition]) -> list[float]:
    """Per partition the leaver held: from the end of its hold to the start of the next."""
    gaps = []
    for tp in partitions:
        holds = sorted(
            (h for h in group.ownership.holds if h.partition == tp), key=lambda h: h.start
        )
        mine = [h for h in holds if h.member == leaver]
        assert mine and mine[-1].end is not None
        after = [h for h in holds if h.member != leaver and h.start >= mine[-1].end]
        assert after, tp
        gaps.append(after[0].start - mine[-1].end)
    return gaps


@pytest.mark.parametrize("isolated", [False, True], ids=["app-loop", "isolated"])
async def test_close_hands_the_partitions_over_without_waiting_for_a_heartbeat(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str, isolated: bool
) -> None:
    """Three kgroup members on 6 partitions with a 5 s heartbeat interval; one closes with
    the handoff (its coordinator side on the application's loop, or isolated on its own).
    Its partitions are unowned only from its revoke until the follow-up rebalance, which
    the survivors (told by the leader's mark) start within a tenth of the interval: well
    under the 5 s an ordinary close costs them at worst."""
    topic = make_topic(6)
    cfg = group_config(
        kafka_broker,
        unique_group,
        topic,
        assignors=COOP,
        heartbeat_interval_ms=LONG_HEARTBEAT_MS,
        session_timeout_ms=45_000,
        request_timeout_ms=30_000,  # close()'s budget: the handoff waits for a heartbeat
    )
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(2)]
        leaving = dataclasses.replace(cfg, handoff_on_close=True, isolate_heartbeat=isolated)
        runners.append(await group.start(leaving))
        await group.wait_until(
            lambda: covered(runners, topic, 6) and all(len(r.assignment) == 2 for r in runners),
            timeout=90,
            what="three stable",
        )
        leaver, survivors = runners[2], runners[:2]
        held = set(leaver.assignment)
        done = outcomes(leaver)
        before = [len(r.events) for r in survivors]
        await leaver.close()
        assert done == ["handed_off"]
        waited = await group.wait_until(
            lambda: covered(survivors, topic, 6),
            timeout=LONG_HEARTBEAT_MS / 2000,
            what="the survivors own everything",
        )
        gaps = unowned_gaps(group, leaver.name, held)
        assert max(gaps) < LONG_HEARTBEAT_MS / 2000, (gaps, waited)
        # From the close on, the survivors only gain (what they did while the group
        # formed, before it, is not the handoff's doing).
        for r, seen in zip(survivors, before, strict=True):
            assert not [e for e in r.events[seen:] if e.callback != "on_partitions_assigned"]
        assert not any(r.errors for r in runners)


async def test_a_java_leader_ignores_the_mark_and_the_member_leaves_as_usual(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A Java consumer leads (it joined first); its CooperativeStickyAssignor reads the
    generation from the Subscription and never looks at the user data, so the marked
    member gets its partitions back: it then revokes them and leaves, as without a
    handoff, and the group converges with every partition held once."""
    topic = make_topic(6)
    cfg = group_config(kafka_broker, unique_group, topic, assignors=COOP)
    javas: list[JavaMember] = []
    async with MemberGroup() as group:
        try:
            javas.append(await java_coop(kafka_broker, unique_group, topic).start())
            await javas[0].wait_for(lambda e: e["event"] == "assigned" and e["assignment"])
            ours = [
                await group.start(cfg),
                await group.start(dataclasses.replace(cfg, handoff_on_close=True)),
            ]

            def spread() -> bool:
                return (
                    union_covers(ours, javas, topic, 6)
                    and all(r.assignment for r in ours)
                    and all(j.assignment for j in javas)
                )

            await group.wait_until(spread, timeout=90, what="three members")
            assert not any(r.member.is_leader for r in ours)
            leaver = ours.pop()
            held = leaver.assignment
            done = outcomes(leaver)
            await leaver.close()
            assert done == ["kept"]
            revoked = [e.partitions for e in leaver.events if e.callback == "on_partitions_revoked"]
            assert revoked[-1] == held
            await group.wait_until(
                lambda: union_covers(ours, javas, topic, 6), timeout=90, what="after the leave"
            )
            assert not any(r.errors for r in ours)
        finally:
            for j in javas:
                await j.close()
        for i, j in enumerate(javas):
            replay_java(j, f"java-{i}", group.ownership)
        group.ownership.check()


async def test_close_hands_off_on_tansu(
    tansu_broker: TansuBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """On tansu too: the marked rejoin, nothing for the leaver, its revoke and leave, and
    the survivors owning everything after, never a partition held twice. (tansu holds a
    JoinGroup until its rebalance ends, about half the session, so here the handoff does not
    shorten the gap; it must only be safe and complete.)

    The timings follow from how tansu answers (docs/design/brokers.md): it looks for a
    follower's assignment about once a second, so the leader's own follow-up rejoin, one
    heartbeat interval after its sync, must come later than that (2 s), or the followers'
    SyncGroups are answered REBALANCE_IN_PROGRESS and the handoff fails. The leaver's
    heartbeats wait behind its held SyncGroup, so its lease rests on its JoinGroup's send
    time: the survivors' notice (one interval) plus their held JoinGroup (half the
    session) plus that second must fit in the session (10 s)."""
    topic = make_topic(4)
    cfg = group_config(
        tansu_broker,
        unique_group,
        topic,
        assignors=COOP,
        heartbeat_interval_ms=2_000,
        session_timeout_ms=10_000,
        request_timeout_ms=30_000,
    )
    async with MemberGroup() as group:
        runners = [await group.start(cfg), await group.start(cfg)]
        runners.append(await group.start(dataclasses.replace(cfg, handoff_on_close=True)))
        await group.wait_until(
            lambda: covered(runners, topic, 4) and all(r.assignment for r in runners),
            timeout=90,
            what="three stable",
        )
        leaver, survivors = runners[2], runners[:2]
        held = leaver.assignment
        done = outcomes(leaver)
        await leaver.close()
        assert done == ["handed_off"]
        revoked = [e.partitions for e in leaver.events if e.callback == "on_partitions_revoked"]
        assert revoked[-1] == held
        await group.wait_until(
            lambda: covered(survivors, topic, 4), timeout=60, what="the survivors own everything"
        )
        assert not any(r.errors for r in runners)
