"""Groups that are not consumers, on real brokers: the built-in LeaderElection and
WorkSharding through joins, leaves, crashes and a network cut. The ownership log of every
test (checked when its MemberGroup closes) proves that no item, the leadership included,
was ever held by two members at once."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kgroup import LEADER, LeaderElection, WorkSharding
from kgroup.testing import Broker, KafkaBroker, ProxiedBroker
from kgroup.testing._members import MemberGroup, MemberRunner
from tests.integration.conftest import SESSION_MS, group_config

both_brokers = pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)


def one_leader(runners: Sequence[MemberRunner], elections: Sequence[LeaderElection]) -> bool:
    """Every runner STABLE, exactly one holds the token, and every election names it."""
    holders = [r for r in runners if LEADER in r.assignment]
    return (
        all(r.stable for r in runners)
        and len(holders) == 1
        and all(e.leader == holders[0].member.member_id for e in elections)
    )


@both_brokers
@pytest.mark.parametrize("cooperative", [True, False], ids=["cooperative", "eager"])
async def test_leadership_moves_on_leave_and_crash(
    broker: Broker, unique_group: str, cooperative: bool
) -> None:
    cfg = group_config(broker, unique_group, "unused", topics=())
    async with MemberGroup() as group:
        elections = [
            LeaderElection(info=f"node-{i}".encode(), cooperative=cooperative) for i in range(3)
        ]
        runners = [await group.start(cfg, protocol=e) for e in elections]
        await group.wait_until(lambda: one_leader(runners, elections), timeout=60, what="leader")
        leader = next(r for r in runners if LEADER in r.assignment)
        i = runners.index(leader)
        assert all(e.leader_info == f"node-{i}".encode() for e in elections)
        # the leader leaves: another takes over
        await leader.close()
        rest = [r for r in runners if r is not leader]
        rest_elections = [e for e in elections if e is not elections[i]]
        await group.wait_until(lambda: one_leader(rest, rest_elections), timeout=60, what="2nd")
        # the new leader crashes: the last one leads once the session has expired
        second = next(r for r in rest if LEADER in r.assignment)
        await second.crash()
        last = [r for r in rest if r is not second]
        last_election = [elections[runners.index(last[0])]]
        await group.wait_until(
            lambda: one_leader(last, last_election), timeout=SESSION_MS / 1000 + 60, what="3rd"
        )
        assert not any(r.errors for r in runners)


@both_brokers
async def test_a_stable_leader_keeps_leading_when_members_come_and_go(
    broker: Broker, unique_group: str
) -> None:
    cfg = group_config(broker, unique_group, "unused", topics=())
    async with MemberGroup() as group:
        first = LeaderElection()
        a = await group.start(cfg, protocol=first)
        await group.wait_until(lambda: one_leader([a], [first]), timeout=60, what="a leads")
        a.events.clear()
        others = [LeaderElection(), LeaderElection()]
        runners = [a, *[await group.start(cfg, protocol=e) for e in others]]
        await group.wait_until(
            lambda: one_leader(runners, [first, *others]), timeout=60, what="three"
        )
        await runners[2].close()
        await group.wait_until(
            lambda: one_leader(runners[:2], [first, others[0]]), timeout=60, what="two"
        )
        assert LEADER in a.assignment
        assert not [e for e in a.events if e.callback != "on_partitions_assigned"]


@both_brokers
async def test_work_sharding_spreads_and_moves_only_what_must(
    broker: Broker, unique_group: str
) -> None:
    names = [f"job-{i}" for i in range(9)]
    cfg = group_config(broker, unique_group, "unused", topics=())
    async with MemberGroup() as group:
        shardings = [WorkSharding(names) for _ in range(3)]

        def spread(rs: Sequence[MemberRunner], total: int) -> bool:
            held = [i for r in rs for i in r.assignment]
            counts = [len(r.assignment) for r in rs]
            return (
                all(r.stable for r in rs)
                and len(held) == len(set(held)) == total
                and max(counts) - min(counts) <= 1
            )

        runners = [await group.start(cfg, protocol=shardings[0])]
        await group.wait_until(lambda: spread(runners, 9), timeout=60, what="one")
        for s in shardings[1:]:
            runners.append(await group.start(cfg, protocol=s))
        await group.wait_until(lambda: spread(runners, 9), timeout=60, what="three")
        kept = {r.name: r.assignment for r in runners}
        for r in runners:
            r.events.clear()
        for s, r in zip(shardings, runners, strict=True):
            s.set_resources([*names, "job-9", "job-10", "job-11"])
            r.member.enforce_rebalance("resources changed")
        await group.wait_until(lambda: spread(runners, 12), timeout=60, what="twelve")
        for r in runners:  # cooperative and sticky: nobody gave anything up
            assert kept[r.name] <= r.assignment
            assert not [e for e in r.events if e.callback == "on_partitions_revoked"]
        await runners[0].close()
        await group.wait_until(lambda: spread(runners[1:], 12), timeout=60, what="two left")
        assert not any(r.errors for r in runners)


@pytest.mark.kafka
async def test_a_cut_off_leader_steps_down_before_another_leads(
    proxied_kafka: ProxiedBroker[KafkaBroker], unique_group: str
) -> None:
    """The leader is behind a proxy that black-holes its traffic. Its lease runs out before
    the coordinator can expire its session, so it stops leading (lost) before the other
    member is made leader; the ownership log, which ends a hold at the lease deadline,
    shows no moment with two leaders. After the heal it rejoins as a follower."""
    proxy = proxied_kafka.proxy
    direct_cfg = group_config(proxied_kafka.direct_bootstrap, unique_group, "unused", topics=())
    behind_cfg = group_config(proxied_kafka.bootstrap, unique_group, "unused", topics=())
    async with MemberGroup() as group:
        ours, theirs = LeaderElection(), LeaderElection()
        behind = await group.start(behind_cfg, protocol=ours, name="behind-proxy")
        await group.wait_until(lambda: one_leader([behind], [ours]), timeout=60, what="leads")
        direct = await group.start(direct_cfg, protocol=theirs, name="direct")
        both = [behind, direct]
        await group.wait_until(lambda: one_leader(both, [ours, theirs]), timeout=60, what="two")
        assert LEADER in behind.assignment  # sticky: the first leader kept it
        proxy.black_hole()
        await group.wait_until(
            lambda: one_leader([direct], [theirs]), timeout=SESSION_MS / 1000 + 30, what="moved"
        )
        assert any(e.callback == "on_partitions_lost" for e in behind.events)
        proxy.heal()
        await group.wait_until(lambda: one_leader(both, [ours, theirs]), timeout=60, what="heal")
        assert LEADER in direct.assignment
