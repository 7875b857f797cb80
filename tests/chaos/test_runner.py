"""The runner's invariant checks on hand-made member lines, without a broker: what a mixed
Java/kgroup group's lines count as, what a consumer-protocol group's (kgroup, Java and
confluent members, member epochs) and a migrating group's count as, and that a broken
ownership feed fails the run.

The last test starts a JavaMember (no broker needed) to check that its stamps are on the
clock of ``time.monotonic()``; it skips without Java.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from kgroup import TopicPartition
from kgroup.testing import JavaMember

from ._kip848 import conversions, unowned_conversions, why_not_stable_consumer
from ._runner import ChaosRunner, MemberProc, Target
from ._schedule import MemberSpec, Schedule, Step, Timeouts

TOPIC = "t"


def make_runner(
    tmp_path: Path,
    partitions: int = 2,
    *,
    protocol: str = "classic",
    members: tuple[MemberSpec, ...] = (
        MemberSpec("m1", via_proxy=True),
        MemberSpec("m2", java=True),
    ),
) -> ChaosRunner:
    schedule = Schedule(
        seed=1,
        broker="kafka",
        static=False,
        assignor="cooperative-sticky" if protocol == "classic" else "range",
        partitions=partitions,
        members=members,
        timeouts=Timeouts(
            session_ms=6000, heartbeat_ms=500, max_poll_ms=12_000, request_timeout_ms=5000
        ),
        fault_window=20.0,
        steps=(Step.make(1.0, "crash", member="m2"),),
        protocol=protocol,
        remote_assignor="" if protocol == "classic" else "uniform",
    )
    runner = ChaosRunner(schedule, Target("kafka", cast(Any, None)), tmp_path, replay="replay")
    runner.topic = TOPIC
    runner.partitions = frozenset(TopicPartition(TOPIC, p) for p in range(partitions))
    return runner


def add(
    runner: ChaosRunner,
    slot: str,
    *,
    java: bool = False,
    confluent: bool = False,
    protocol: str = "classic",
    name: str | None = None,
) -> MemberProc:
    spec = runner.schedule.member(slot)
    name = name or slot
    mp = MemberProc(
        name=name,
        spec=spec,
        proc=cast(Any, None),
        log_path=runner.workdir / f"{name}.log",
        events_path=runner.workdir / f"{name}.events.jsonl",
        spawned_at=0.0,
        java=java,
        confluent=confluent,
        protocol=protocol,
    )
    runner.procs.append(mp)
    return mp


def line(event: str, t: float, *partitions: int, **fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"event": event, "t": t, **fields}
    if partitions:
        rec["partitions"] = [[TOPIC, p] for p in partitions]
    return rec


def exit_cleanly(runner: ChaosRunner, mp: MemberProc, t: float) -> None:
    """The process closed and exited 0 (what _read does at EOF)."""
    if mp.foreign:
        runner.feed(mp, line("closed", t))
    else:
        runner.feed(mp, line("closed", t, tasks=[], sockets=[], transports=[], warnings=[]))
    mp.returncode = 0
    mp.state = "exited"
    runner.ownership.died(mp.name, t)


def failures(runner: ChaosRunner) -> list[str]:
    runner._final_checks()
    return runner.result.failures


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[ChaosRunner, MemberProc, MemberProc]]:
    """A runner with a kgroup member m1 and a Java member m2, both ready."""
    runner = make_runner(tmp_path)
    kg = add(runner, "m1", java=False)
    java = add(runner, "m2", java=True)
    runner.feed(kg, line("ready", 0.0, lease=True))
    runner.feed(java, line("started", 0.0))
    yield runner, kg, java
    runner._timeline.close()


def test_a_clean_handover_between_java_and_kgroup_passes(group: Any) -> None:
    runner, kg, java = group
    runner.feed(java, line("assigned", 1.0, 0, 1, generation=1))
    runner.feed(java, line("revoked", 2.0, 1, generation=1))  # cooperative: gives up p1
    runner.feed(kg, line("assigned", 2.5, 1, generation=2))
    # kgroup's lease ends its hold: the Java member may take p1 before the revoke line
    runner.feed(kg, line("lease_expired", 4.0, deadline=3.0))
    runner.feed(java, line("assigned", 3.5, 1, generation=3))
    runner.feed(kg, line("revoked", 5.0, 1, generation=3))
    exit_cleanly(runner, java, 6.0)
    exit_cleanly(runner, kg, 6.0)
    assert failures(runner) == []


def test_a_kgroup_member_holding_a_partition_given_to_java_fails(group: Any) -> None:
    runner, kg, java = group
    runner.feed(kg, line("assigned", 1.0, 0, generation=1))
    runner.feed(java, line("assigned", 2.0, 0, generation=2))  # kgroup has not let go
    runner.feed(kg, line("revoked", 3.0, 0, generation=2))
    exit_cleanly(runner, java, 6.0)
    exit_cleanly(runner, kg, 6.0)
    found = failures(runner)
    assert len(found) == 1 and found[0].startswith("invariant 1: 1 overlapping hold")
    assert "m1 gen 1" in found[0] and "m2 (Java) gen 2" in found[0]
    assert any("kgroup 1" in note for note in runner.result.notes)


def test_a_java_member_holding_a_partition_given_to_kgroup_fails_too(group: Any) -> None:
    """No lease excuses a Java member: its overlaps fail the run as well."""
    runner, kg, java = group
    runner.feed(java, line("assigned", 1.0, 0, generation=1))
    runner.feed(kg, line("assigned", 2.0, 0, generation=2))
    runner.feed(java, line("lost", 3.0, 0, generation=2))
    exit_cleanly(runner, java, 6.0)
    exit_cleanly(runner, kg, 6.0)
    found = failures(runner)
    assert len(found) == 1 and "invariant 1" in found[0] and "m2 (Java) gen 1" in found[0]
    assert any("Java 1" in note for note in runner.result.notes)


@pytest.mark.parametrize(
    ("earlier", "ended_by", "end", "fails"),
    [
        ("m2", "lost", 20.0, False),  # Java, lost within a session of the broker's return
        ("m2", "lost", 30.0, True),  # ... later than that
        ("m2", "revoked", 20.0, True),  # still a member, asked to revoke: not expired
        ("m1", "revoked", 20.0, True),  # a kgroup member holding on: never excused
    ],
)
def test_only_a_java_member_expired_by_a_kafka_restart_is_excused(
    group: Any, earlier: str, ended_by: str, end: float, fails: bool
) -> None:
    runner, kg, java = group
    first, second = (java, kg) if earlier == "m2" else (kg, java)
    runner._kafka_restarts.append((5.0, 18.0))  # down at 5 s, back at 18 s
    runner.feed(first, line("assigned", 1.0, 0, generation=4))
    runner.feed(second, line("assigned", 18.5, 0, generation=1))  # the group was forgotten
    runner.feed(first, line(ended_by, end, 0, generation=4))
    exit_cleanly(runner, java, 40.0)
    exit_cleanly(runner, kg, 40.0)
    found = failures(runner)
    assert bool(found) == fails, found
    if not fails:
        assert runner.result.java_restart_overlaps == 1
        assert "across a Kafka restart" in runner.result.notes[0]


def test_a_java_members_close_ends_its_holds(group: Any) -> None:
    """A static Java member closes without a callback: the ``closed`` line ends its holds."""
    runner, kg, java = group
    runner.feed(java, line("assigned", 1.0, 0, generation=1))
    exit_cleanly(runner, java, 2.0)
    runner.feed(kg, line("assigned", 2.5, 0, generation=2))
    exit_cleanly(runner, kg, 6.0)
    assert failures(runner) == []


def test_java_errors_and_exit_codes_are_invariants_3_and_4(group: Any) -> None:
    runner, kg, java = group
    runner.feed(java, line("error", 1.0, message="java.lang.IllegalStateException: boom"))
    exit_cleanly(runner, java, 2.0)
    java.returncode = 1
    exit_cleanly(runner, kg, 2.0)
    found = failures(runner)
    assert any(f.startswith("invariant 3: m2: poll() raised JavaException") for f in found)
    assert any(f.startswith("invariant 4: m2") and "exit code 1" in f for f in found)


def test_stability_counts_the_java_members_assignment(group: Any) -> None:
    runner, kg, java = group
    tp = [[TOPIC, 0]], [[TOPIC, 1]]
    runner.feed(kg, line("assigned", 1.0, 0, generation=3))
    runner.feed(kg, line("status", 1.0, state="STABLE", generation=3, assignment=tp[0]))
    assert runner.why_not_stable() == "m2 (Java) has not joined"
    runner.feed(java, line("status", 1.0, generation=2, member_id="j", assignment=[]))
    assert "generations differ" in str(runner.why_not_stable())
    runner.feed(java, line("status", 1.1, generation=3, member_id="j", assignment=[]))
    assert "unassigned" in str(runner.why_not_stable())
    runner.feed(java, line("status", 1.2, generation=3, member_id="j", assignment=tp[1]))
    assert "held by []" in str(runner.why_not_stable())  # status without the callback
    runner.feed(java, line("assigned", 1.3, 1, generation=3))
    assert runner.why_not_stable() is None
    runner.feed(java, line("status", 1.4, generation=3, member_id="j", assignment=tp[0] + tp[1]))
    assert "assigned twice" in str(runner.why_not_stable())


def test_a_confluent_classic_member_counts_once_librdkafka_says_steady(tmp_path: Path) -> None:
    """A migration's confluent member on classic reports no generation: it counts once its
    statistics' join state is ``steady``, and its assignment and holds count as any."""
    members = (MemberSpec("m1", via_proxy=True), MemberSpec("m2", confluent=True))
    runner = make_runner(tmp_path, members=members, protocol="migration")
    try:
        kg, rdk = add(runner, "m1"), add(runner, "m2", confluent=True)
        runner.feed(kg, line("ready", 0.0, lease=True))
        runner.feed(rdk, line("started", 0.0))
        runner.feed(kg, line("assigned", 1.0, 0, generation=3))
        runner.feed(kg, line("status", 1.0, state="STABLE", generation=3, leader=True,
                             assignment=parts(0)))  # fmt: skip
        assert runner.why_not_stable() == "m2 (confluent) is None"
        runner.feed(rdk, line("status", 1.1, member_id="r", assignment=parts(1),
                              join_state="wait-sync"))  # fmt: skip
        assert runner.why_not_stable() == "m2 (confluent) is wait-sync"
        runner.feed(rdk, line("status", 1.2, member_id="r", assignment=parts(1),
                              join_state="steady"))  # fmt: skip
        assert "held by []" in str(runner.why_not_stable())  # status without the callback
        runner.feed(rdk, line("assigned", 1.3, 1))
        assert runner.why_not_stable() is None
        runner.feed(rdk, line("status", 1.4, member_id="r", assignment=parts(0, 1),
                              join_state="steady"))  # fmt: skip
        assert "assigned twice" in str(runner.why_not_stable())
    finally:
        runner._timeline.close()


# -- consumer-protocol groups (KIP-848) ----------------------------------------------------------

CONSUMER_MEMBERS = (
    MemberSpec("m1", via_proxy=True),
    MemberSpec("m2", java=True),
    MemberSpec("m3", confluent=True),
)


@pytest.fixture
def consumer_group(
    tmp_path: Path,
) -> Iterator[tuple[ChaosRunner, MemberProc, MemberProc, MemberProc]]:
    """A consumer-protocol group of 4 partitions: kgroup m1, Java m2, confluent m3, ready."""
    runner = make_runner(tmp_path, 4, protocol="consumer", members=CONSUMER_MEMBERS)
    kg = add(runner, "m1", protocol="consumer")
    java = add(runner, "m2", java=True, protocol="consumer")
    rdk = add(runner, "m3", confluent=True, protocol="consumer")
    runner.feed(kg, line("ready", 0.0, lease=True, protocol="consumer"))
    runner.feed(java, line("started", 0.0))
    runner.feed(rdk, line("started", 0.0, pid=1))
    yield runner, kg, java, rdk
    runner._timeline.close()


def parts(*partitions: int) -> list[list[Any]]:
    return [[TOPIC, p] for p in partitions]


def test_a_consumer_group_is_stable_with_a_different_epoch_per_member(consumer_group: Any) -> None:
    """Member epochs differ (7, 3, none reported by librdkafka): no "generations differ";
    every member settled, the topic covered exactly once, holds agreeing, balanced."""
    runner, kg, java, rdk = consumer_group
    runner.feed(kg, line("assigned", 1.0, 0, 1, generation=7))
    runner.feed(kg, line("status", 1.0, state="STABLE", generation=7, assignment=parts(0, 1)))
    runner.feed(java, line("assigned", 1.0, 2, generation=3))
    runner.feed(java, line("status", 1.0, generation=3, member_id="j", assignment=parts(2)))
    assert runner.why_not_stable() == "m3 (confluent) has not reported an assignment"
    runner.feed(rdk, line("status", 1.0, member_id="c", assignment=[]))
    assert "unassigned" in str(runner.why_not_stable())
    runner.feed(rdk, line("status", 1.1, member_id="c", assignment=parts(3)))
    assert "held by []" in str(runner.why_not_stable())  # status before the callback's line
    runner.feed(rdk, line("assigned", 1.1, 3, assignment=parts(3)))
    assert runner.why_not_stable() is None
    runner.feed(kg, line("status", 1.2, state="COMPLETING_REBALANCE", generation=8,
                         assignment=parts(0, 1)))  # fmt: skip
    assert runner.why_not_stable() == "m1 is COMPLETING_REBALANCE"


def test_a_consumer_group_waiting_for_a_members_share_is_not_stable(consumer_group: Any) -> None:
    """The others' shares still cover the topic while the confluent member waits for its
    own (a target not reached yet): the imbalance says so."""
    runner, kg, java, rdk = consumer_group
    runner.feed(kg, line("assigned", 1.0, 0, 1, 2, generation=4))
    runner.feed(kg, line("status", 1.0, state="STABLE", generation=4, assignment=parts(0, 1, 2)))
    runner.feed(java, line("assigned", 1.0, 3, generation=2))
    runner.feed(java, line("status", 1.0, generation=2, member_id="j", assignment=parts(3)))
    runner.feed(rdk, line("status", 1.0, member_id="c", assignment=[]))
    assert str(runner.why_not_stable()).startswith("not balanced yet")


class _Settled:
    """A kgroup member for :func:`why_not_stable_consumer`: STABLE with ``assignment``."""

    foreign = False

    def __init__(self, name: str, assignment: list[tuple[str, int]]) -> None:
        self.name = name
        self.assignment = assignment
        self.status: dict[str, Any] | None = {"state": "STABLE", "assignment": assignment}


def test_two_topics_may_be_balanced_per_topic_or_in_total() -> None:
    """Once a pattern matched a second topic: ``range`` balances each topic (totals may
    differ by more than one), ``uniform`` the totals; a member still waiting for its share
    is unbalanced either way."""
    a, b = "t", "t-2"
    everything = [TopicPartition(a, p) for p in range(3)] + [TopicPartition(b, p) for p in range(3)]

    def check(*members: _Settled) -> str | None:
        owners = {TopicPartition(t, p): [m.name] for m in members for t, p in m.assignment}
        return why_not_stable_consumer(members, everything, owners, {})

    per_topic = [_Settled("m1", [(a, 0), (a, 1), (b, 0), (b, 1)]), _Settled("m2", [(a, 2), (b, 2)])]
    assert check(*per_topic) is None  # range: 4 and 2, each topic 2/1
    totals = [_Settled("m1", [(a, 0), (a, 1), (a, 2)]), _Settled("m2", [(b, 0), (b, 1), (b, 2)])]
    assert check(*totals) is None  # uniform: 3 and 3
    waiting = [
        _Settled("m1", [(a, 0), (a, 1), (b, 0), (b, 1)]),
        _Settled("m2", [(a, 2), (b, 2)]),
        _Settled("m3", []),
    ]
    assert str(check(*waiting)).startswith("not balanced yet")


def test_a_confluent_hold_overlapping_a_kgroup_hold_fails_invariant_1(consumer_group: Any) -> None:
    runner, kg, java, rdk = consumer_group
    runner.feed(rdk, line("assigned", 1.0, 0))
    runner.feed(kg, line("assigned", 2.0, 0, generation=5))
    runner.feed(rdk, line("revoked", 3.0, 0))
    for mp in (kg, java, rdk):
        exit_cleanly(runner, mp, 6.0)
    found = failures(runner)
    assert len(found) == 1 and found[0].startswith("invariant 1: 1 overlapping hold")
    assert "m3 (confluent) gen -1" in found[0] and "m1 gen 5" in found[0]
    assert any("confluent 1" in note for note in runner.result.notes)


def _old_hold_then_new(runner: ChaosRunner, kg: MemberProc, java: MemberProc, again: bool) -> None:
    """The topic deleted (DeleteTopics sent at 2.0) and, if ``again``, created again
    (CreateTopics sent at 3.0); the kgroup member held partition 0 from 1.0 to 4.0, the
    Java member from 3.5."""
    runner.deleted_topics[TOPIC] = 2.0
    if again:
        runner.recreated_topics[TOPIC] = 3.0
    runner.feed(kg, line("assigned", 1.0, 0, generation=4))
    runner.feed(java, line("assigned", 3.5, 0, generation=2))
    runner.feed(kg, line("revoked", 4.0, 0, generation=4))


@pytest.mark.parametrize("created_again", [True, False])
def test_a_topic_created_again_excuses_an_old_hold_beside_a_new_one(
    consumer_group: Any, created_again: bool
) -> None:
    """The kgroup member's hold of the old partition 0 beside the Java member's of the new
    one is tolerated and noted. Without the creation again it is an overlap."""
    runner, kg, java, rdk = consumer_group
    _old_hold_then_new(runner, kg, java, created_again)
    for mp in (kg, java, rdk):
        exit_cleanly(runner, mp, 6.0)
    found = failures(runner)
    if created_again:
        assert found == []
        assert any("created again" in note for note in runner.result.notes)
    else:
        assert len(found) == 1 and found[0].startswith("invariant 1: 1 overlapping hold")


def test_two_holds_of_a_topic_created_again_still_overlap(consumer_group: Any) -> None:
    """After the topic came back, the Java and confluent members both holding its new
    partition 0 is an overlap; only the old hold beside a new one is excused."""
    runner, kg, java, rdk = consumer_group
    _old_hold_then_new(runner, kg, java, True)
    runner.feed(rdk, line("assigned", 4.5, 0))
    for mp in (kg, java, rdk):
        exit_cleanly(runner, mp, 6.0)
    found = failures(runner)
    assert len(found) == 1 and found[0].startswith("invariant 1: 1 overlapping hold")
    assert "m2 (Java)" in found[0] and "m3 (confluent)" in found[0]


def test_a_confluent_member_expired_by_a_kafka_restart_is_excused_like_java(
    consumer_group: Any,
) -> None:
    runner, kg, java, rdk = consumer_group
    runner._kafka_restarts.append((5.0, 18.0))
    runner.feed(rdk, line("assigned", 1.0, 0))
    runner.feed(kg, line("assigned", 18.5, 0, generation=1))
    runner.feed(rdk, line("lost", 20.0, 0))
    for mp in (kg, java, rdk):
        exit_cleanly(runner, mp, 40.0)
    assert failures(runner) == []
    assert runner.result.java_restart_overlaps == 1


def test_confluent_errors_and_exit_codes_are_invariants_3_and_4(consumer_group: Any) -> None:
    runner, kg, java, rdk = consumer_group
    runner.feed(rdk, line("notice", 1.0, message="broker transport failure", code=-195))
    runner.feed(rdk, line("error", 1.5, type="KafkaError", message="fenced", code=82))
    exit_cleanly(runner, rdk, 2.0)
    rdk.returncode = 1
    exit_cleanly(runner, kg, 2.0)
    exit_cleanly(runner, java, 2.0)
    found = failures(runner)
    assert [f for f in found if f.startswith("invariant 3")] == [
        "invariant 3: m3: poll() raised KafkaError: fenced (x1)"
    ]  # a notice is not an error
    assert any(f.startswith("invariant 4: m3") and "exit code 1" in f for f in found)


def test_a_migrating_group_is_held_to_one_generation_until_a_consumer_member_runs(
    tmp_path: Path,
) -> None:
    """Classic members only: one generation, as in any classic group. Once a rolled member
    runs the consumer protocol, generations are member epochs: the consumer check."""
    members = (MemberSpec("m1"), MemberSpec("m2"))
    runner = make_runner(tmp_path, 2, protocol="migration", members=members)
    try:
        m1, m2 = add(runner, "m1"), add(runner, "m2")
        for mp, p, gen in ((m1, 0, 3), (m2, 1, 4)):
            runner.feed(mp, line("assigned", 1.0, p, generation=gen))
            runner.feed(mp, line("status", 1.0, state="STABLE", generation=gen,
                                 assignment=parts(p)))  # fmt: skip
        assert "generations differ" in str(runner.why_not_stable())
        runner.feed(m2, line("revoked", 2.0, 1, generation=4))
        m2.state = "exited"
        m2.done.set()
        rolled = add(runner, "m2", protocol="consumer", name="m2.2")
        runner.feed(rolled, line("assigned", 3.0, 1, generation=5))
        runner.feed(rolled, line("status", 3.0, state="STABLE", generation=5,
                                 assignment=parts(1)))  # fmt: skip
        assert runner.why_not_stable() is None  # m1 gen 3 (classic), m2.2 epoch 5
    finally:
        runner._timeline.close()


def test_a_migration_back_is_stable_only_once_the_group_is_classic_again(
    tmp_path: Path,
) -> None:
    """Classic members alone in one "generation" are not enough on the way back: inside a
    consumer group (a consumer-protocol member not fenced yet) they are followers whose
    generations are member epochs, possibly equal. Stable once one of them leads (Kafka
    converted the group back to classic), or once the broker's log says it converted the
    group back. A classic schedule's members need no leader."""
    members = (MemberSpec("m1"), MemberSpec("m2"))
    runner = make_runner(tmp_path, 2, protocol="migration-back", members=members)
    try:
        m1, m2 = add(runner, "m1", name="m1.3"), add(runner, "m2", name="m2.3")
        for mp, p in ((m1, 0), (m2, 1)):
            runner.feed(mp, line("assigned", 1.0, p, generation=9))
            runner.feed(mp, line("status", 1.0, state="STABLE", generation=9, leader=False,
                                 assignment=parts(p)))  # fmt: skip
        assert "no member leads" in str(runner.why_not_stable())
        # The broker's log says it converted the group back (a static replacement: no
        # rebalance, nobody told it leads; kgroup's members watch the counts, row 21).
        back = ["classic->consumer", "consumer->classic"]
        runner._conversions = lambda: back  # type: ignore[method-assign]
        assert runner.why_not_stable() is None
        del runner._conversions
        assert "no member leads" in str(runner.why_not_stable())
        runner.feed(m1, line("status", 2.0, state="STABLE", generation=9, leader=True,
                             assignment=parts(0)))  # fmt: skip
        assert runner.why_not_stable() is None
    finally:
        runner._timeline.close()
    (tmp_path / "classic").mkdir()
    classic = make_runner(tmp_path / "classic", 2, members=members)
    try:
        for name, p in (("m1", 0), ("m2", 1)):
            mp = add(classic, name)
            classic.feed(mp, line("assigned", 1.0, p, generation=9))
            classic.feed(mp, line("status", 1.0, state="STABLE", generation=9, leader=False,
                                  assignment=parts(p)))  # fmt: skip
        assert classic.why_not_stable() is None
    finally:
        classic._timeline.close()
    # With a Java or confluent member, which does not say whether it leads: the broker's
    # log decides, and a group never converted is a classic group all along.
    (tmp_path / "mixed").mkdir()
    members = (MemberSpec("m1"), MemberSpec("m2", confluent=True))
    mixed = make_runner(tmp_path / "mixed", 2, protocol="migration-back", members=members)
    try:
        kg, rdk = add(mixed, "m1", name="m1.3"), add(mixed, "m2", name="m2.3", confluent=True)
        mixed.feed(kg, line("assigned", 1.0, 0, generation=9))
        mixed.feed(kg, line("status", 1.0, state="STABLE", generation=9, leader=False,
                            assignment=parts(0)))  # fmt: skip
        mixed.feed(rdk, line("assigned", 1.0, 1))
        mixed.feed(rdk, line("status", 1.0, member_id="r", assignment=parts(1),
                             join_state="steady"))  # fmt: skip
        seen: list[str] = []
        mixed._conversions = lambda: seen  # type: ignore[method-assign]
        assert mixed.why_not_stable() is None
        seen.append("classic->consumer")
        assert "no conversion back yet" in str(mixed.why_not_stable())
        seen.append("consumer->classic")
        assert mixed.why_not_stable() is None
    finally:
        mixed._timeline.close()


def test_the_conversions_come_from_the_broker_log_of_this_group_in_order(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    prefix = "INFO org.apache.kafka.coordinator.group.GroupMetadataManager - [GroupCoordinator"
    log.write_text(
        f"{prefix} id=1] [GroupId g1] Converted the classic group to a consumer group.\n"
        f"{prefix} id=1] [GroupId other] Converted the consumer group to a classic group.\n"
        f"{prefix} id=1] [GroupId g1] Converted the consumer group to a classic group.\n"
        f"{prefix} id=1] [GroupId g1] Converted the empty classic group to a consumer group.\n"
    )
    found, end = conversions(log, "g1")
    assert found == ["classic->consumer", "consumer->classic", "classic->consumer"]
    assert end == log.stat().st_size
    assert conversions(log, "g") == ([], end)
    assert conversions(tmp_path / "missing.log", "g1") == ([], 0)
    # Read on from where the last read ended; a line not ended yet waits for the next read.
    with log.open("a") as out:
        out.write(f"{prefix} id=1] [GroupId g1] Converted the consumer group to a classic")
    assert conversions(log, "g1", end) == ([], end)
    with log.open("a") as out:
        out.write(" group.\n")
    assert conversions(log, "g1", end) == (["consumer->classic"], log.stat().st_size)


def _java_available() -> bool:
    from kgroup.testing._java import java_member_command

    try:
        java_member_command([])
    except Exception:
        return False
    return True


async def test_java_stamps_are_on_the_monotonic_clock(tmp_path: Path) -> None:
    """JavaMember's ``t`` (System.nanoTime) is CLOCK_MONOTONIC, Python's time.monotonic():
    the ``started`` line is stamped after the JVM was spawned and before it arrived."""
    if not _java_available():
        pytest.skip("no Java or no Kafka jars")
    before = time.monotonic()
    # No broker: the consumer is created and subscribes (``started``) without one.
    member = JavaMember("127.0.0.1:9", "g", "t", log_path=tmp_path / "java.log")
    await member.start()
    try:
        stamp, received = float(member.events[0]["t"]), member.received[0]
        assert before < stamp <= received < stamp + 5.0
    finally:
        await member.close(timeout=20.0)
    assert member.returncode == 0
    assert member.events[-1]["event"] == "closed" and member.events[-1]["t"] >= stamp


def test_a_conversion_while_the_assignments_were_reset_is_found_in_the_broker_log(
    tmp_path: Path,
) -> None:
    """A JoinGroup while the group completes a rebalance (Stabilized, no assignment from
    the leader yet) resets every assignment until the leader's next SyncGroup: a
    conversion to a consumer group in between is one as if nobody owned anything (the
    lines of Kafka seed 98's log, shortened)."""
    mgr = "INFO org.apache.kafka.coordinator.group.GroupMetadataManager - [GroupCoordinator id=1]"
    lines = [
        "08:49:41.422 {m} Stabilized group g generation 3 with 5 members.",
        "08:49:41.455 {m} Assignment received from leader a for group g for generation 3.",
        "08:49:41.611 {m} Preparing to rebalance group g in state PreparingRebalance with old "
        "generation 3 (reason: Updating metadata for member d during Stable).",
        "08:49:41.700 {m} Stabilized group other generation 7 with 1 members.",
        "08:49:41.771 {m} Stabilized group g generation 4 with 5 members.",
        "08:49:47.399 {m} Preparing to rebalance group g in state PreparingRebalance with old "
        "generation 4 (reason: Updating metadata for member c during CompletingRebalance).",
        "08:49:47.442 {m} [GroupId g] Converted the classic group to a consumer group.",
        "08:50:04.996 {m} [GroupId g] Converted the consumer group to a classic group.",
    ]
    log = tmp_path / "broker.log"
    log.write_text("\n".join(line.format(m=mgr) for line in lines) + "\n")
    assert unowned_conversions(log, "g") == [8 * 3600 + 49 * 60 + 47.442]
    assert unowned_conversions(log, "other") == []
    # The leader's SyncGroup came in before the conversion: the assignments were back.
    lines.insert(
        6, "08:49:47.420 {m} Assignment received from leader a for group g for generation 5."
    )
    log.write_text("\n".join(line.format(m=mgr) for line in lines) + "\n")
    assert unowned_conversions(log, "g") == []
    # A rebalance prepared from Stable resets nothing.
    del lines[4:7]
    log.write_text("\n".join(line.format(m=mgr) for line in lines) + "\n")
    assert unowned_conversions(log, "g") == []
    assert unowned_conversions(tmp_path / "missing.log", "g") == []


@pytest.mark.parametrize(
    ("earlier", "later", "end", "fails"),
    [
        ("m3", "m2.2", 5.9, False),  # classic, then consumer protocol: Kafka's gap, excused
        ("m3", "m2.2", 13.0, True),  # ... but held longer than a session (6 s) + 1 s after it
        ("m3", "m3.3", 5.9, True),  # two classic processes: never excused
        ("m2.2", "m3", 5.9, True),  # the consumer-protocol hold first: never excused
    ],
)
def test_only_a_classic_hold_across_an_unowned_conversion_is_excused(
    tmp_path: Path, earlier: str, later: str, end: float, fails: bool
) -> None:
    members = (MemberSpec("m2"), MemberSpec("m3"))
    runner = make_runner(tmp_path, 2, protocol="migration-back", members=members)
    try:
        procs = {
            "m3": add(runner, "m3"),
            "m2.2": add(runner, "m2", name="m2.2", protocol="consumer"),
            "m3.3": add(runner, "m3", name="m3.3"),
        }
        runner._unowned_conversions = lambda: [5.53]  # type: ignore[method-assign]
        first, second = procs[earlier], procs[later]
        runner.feed(first, line("assigned", -0.1 if earlier == "m3" else 5.55, 0, generation=3))
        runner.feed(second, line("assigned", 5.6, 0, generation=5))
        runner.feed(first, line("revoked", end, 0, generation=5))
        for mp in procs.values():
            exit_cleanly(runner, mp, 40.0)
        found = failures(runner)
        assert bool(found) == fails, found
        if not fails:
            assert "converted the group while its assignments were reset" in "".join(
                runner.result.notes
            )
        del runner._unowned_conversions
        if not fails:  # without the broker's word, the same overlap fails
            runner.result.failures.clear()
            assert any("invariant 1" in f for f in failures(runner))
    finally:
        runner._timeline.close()


def test_a_deleted_topics_partitions_may_be_neither_assigned_nor_held(tmp_path: Path) -> None:
    """After ``delete_topic`` the runner drops the topic's partitions; a member still
    assigned one, or still holding one, keeps the group from counting as stable, on either
    protocol."""
    a, gone = "t", "t-2"
    left = [TopicPartition(a, p) for p in range(2)]
    member = _Settled("m1", [(a, 0), (a, 1), (gone, 0)])
    owners = {TopicPartition(t, p): ["m1"] for t, p in member.assignment}
    assert "still assigned, of a deleted topic: ['t-2-0']" in str(
        why_not_stable_consumer([member], left, owners, {})
    )
    member = _Settled("m1", [(a, 0), (a, 1)])
    assert "still held, of a deleted topic: ['t-2-0']" in str(
        why_not_stable_consumer([member], left, owners, {})
    )
    assert why_not_stable_consumer([member], left, {tp: ["m1"] for tp in left}, {}) is None
    members = (MemberSpec("m1", via_proxy=True),)
    runner = make_runner(tmp_path, 2, members=members)
    try:
        kg = add(runner, "m1")
        runner.feed(kg, line("ready", 0.0, lease=True))
        runner.feed(kg, line("assigned", 1.0, 0, 1, generation=3))
        runner.ownership.assigned("m1", [TopicPartition(gone, 0)], 3, 1.0)
        status = {"state": "STABLE", "generation": 3, "leader": True}
        runner.feed(kg, line("status", 1.1, assignment=[*parts(0, 1), [gone, 0]], **status))
        assert "still assigned, of a deleted topic" in str(runner.why_not_stable())
        runner.feed(kg, line("status", 1.2, assignment=parts(0, 1), **status))
        assert "still held, of a deleted topic: ['t-2-0']" in str(runner.why_not_stable())
        runner.ownership.revoked("m1", [TopicPartition(gone, 0)], 1.3)
        assert runner.why_not_stable() is None
    finally:
        runner._timeline.close()


async def test_a_static_member_fenced_after_a_kafka_restart_is_restarted_by_the_app(
    tmp_path: Path,
) -> None:
    """Kafka seed 72: a static member that replaced its slot's previous process while the
    group rebalanced is persisted only when the generation completes; a Kafka restart
    before that brings the previous member id back, and its instance id fences the live
    process. Within a session (+1 s) of a restart's return, a static member's
    FencedInstanceId in a classic schedule is tolerated and the application restarts the
    slot, as in the simulation; at any other time, or in a migration, it stays invariant
    3."""
    members = (MemberSpec("m1", instance_id="m1"), MemberSpec("m2", instance_id="m2"))
    runner = make_runner(tmp_path, 2, members=members)
    started: list[str] = []

    async def spawn(spec: MemberSpec) -> Any:
        started.append(spec.slot)
        return add(runner, spec.slot, name=f"{spec.slot}.3")

    runner.spawn = spawn  # type: ignore[method-assign]
    try:
        fenced, early = add(runner, "m2", name="m2.2"), add(runner, "m1")
        runner._kafka_restarts.append((10.0, 13.0))
        error = {"type": "FencedInstanceId", "message": "another member joined with m2"}
        runner.feed(fenced, line("error", 18.5, **error))
        runner.feed(early, line("error", 9.0, **error))  # before the restart: a real fault
        exit_cleanly(runner, fenced, 19.0)
        fenced.done.set()
        await asyncio.gather(*runner._background)
        assert started == ["m2"] and runner.result.fenced_restarts == 1
        found = failures(runner)
        assert [f for f in found if "invariant 3" in f] == [
            "invariant 3: m1: poll() raised FencedInstanceId: another member joined with m2 (x1)"
        ]
        assert any("m2.2: FencedInstanceId tolerated" in note for note in runner.result.notes)
        late = add(runner, "m2", name="m2.4")
        runner.feed(late, line("error", 20.5, **error))  # past the session (6 s) + 1 s
        assert "excused" not in late.errors[0]
    finally:
        runner._timeline.close()
    # In a migration a restart would move the slot on to its next protocol: not excused.
    (tmp_path / "migration").mkdir()
    migration = make_runner(tmp_path / "migration", 2, members=members, protocol="migration")
    try:
        mp = add(migration, "m2", name="m2.2")
        migration._kafka_restarts.append((10.0, 13.0))
        migration.feed(mp, line("error", 14.0, **error))
        assert "excused" not in mp.errors[0] and not migration._background
    finally:
        migration._timeline.close()
