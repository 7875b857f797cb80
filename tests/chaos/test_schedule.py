"""The schedule generator: pure, seeded, serialisable, and consistent with its own rules.

No broker here: these run in milliseconds, over many seeds.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json

import pytest

from . import _schedule
from ._protocols import (
    BACK_ROLL_GAP,
    BACK_WINDOW,
    CONFLUENT_MIGRATION_PROBABILITY,
    MIGRATION_ASSIGNORS,
    MIGRATIONS,
    MIXED_MIGRATION_PROBABILITY,
    ROLL_BUSY,
    ROLLS,
    back_tail,
    final_protocols,
)
from ._runner import stable_bound
from ._schedule import (
    ASSIGNORS,
    BROKERS,
    CREATE_AGAIN_PROBABILITY,
    DELETE_TOPIC_PROBABILITY,
    FAULT_KINDS,
    JAVA_ASSIGNORS,
    JAVA_FAULTS,
    MIXED_PROBABILITY,
    NAMED_TOPIC_PROBABILITY,
    PATTERN_PROBABILITY,
    PROTOCOLS,
    PROXY_FAULTS,
    REMOTE_ASSIGNORS,
    RESTART_BUSY,
    TOPIC_CHANGE_PROBABILITY,
    WEIGHTS,
    Schedule,
    Step,
    assignors_for,
    make_schedule,
    protocol_for,
)
from ._seeds import DEFAULT_REQUIREMENTS, default_cases, schedule_for

SEEDS = range(1, 301)


def without_topic_changes(s: Schedule) -> Schedule:
    """``s`` as drawn without ``topic_changes`` (its add_partitions steps dropped) and
    without ``pattern``."""
    topics = ("add_partitions", "create_topic", "delete_topic", "create_again")
    steps = tuple(st for st in s.steps if st.kind not in topics)
    return dataclasses.replace(s, steps=steps, topic_changes=False, pattern=False)


@pytest.mark.parametrize("broker", BROKERS)
def test_same_seed_same_schedule_and_other_seeds_differ(broker: str) -> None:
    a = make_schedule(7, broker=broker, members=5, static=True, assignor="roundrobin")
    b = make_schedule(7, broker=broker, members=5, static=True, assignor="roundrobin")
    assert a == b
    assert str(a) == str(b)
    others = [make_schedule(s, broker=broker, members=5, static=True) for s in range(8, 20)]
    assert all(o.steps != a.steps for o in others)


@pytest.mark.parametrize("broker", BROKERS)
def test_json_round_trip(broker: str) -> None:
    for seed in range(1, 50):
        schedule = schedule_for(broker, seed)
        text = schedule.dumps()
        json.loads(text)  # plain JSON
        assert Schedule.from_json(text) == schedule
        assert Schedule.from_json(json.loads(text)) == schedule


def test_parameters_are_validated() -> None:
    with pytest.raises(ValueError, match="members"):
        make_schedule(1, broker="kafka", members=2, static=False)
    with pytest.raises(ValueError, match="broker"):
        make_schedule(1, broker="redpanda", members=3, static=False)
    with pytest.raises(ValueError, match="Kafka only"):
        make_schedule(1, broker="tansu", members=3, static=False, java_members=1)
    with pytest.raises(ValueError, match="java_members"):
        make_schedule(1, broker="kafka", members=3, static=False, java_members=3)
    with pytest.raises(ValueError, match="assignor"):
        make_schedule(
            1, broker="kafka", members=3, static=False, assignor="upgrade-2", java_members=1
        )
    with pytest.raises(ValueError, match="protocol must be"):
        make_schedule(1, broker="kafka", members=3, static=False, protocol="eager")
    with pytest.raises(ValueError, match="Kafka only"):
        make_schedule(1, broker="tansu", members=3, static=False, protocol="consumer")
    with pytest.raises(ValueError, match="consumer protocol"):
        make_schedule(1, broker="kafka", members=3, static=False, confluent_members=1)
    with pytest.raises(ValueError, match="remote_assignor"):
        make_schedule(
            1, broker="kafka", members=3, static=False, protocol="consumer", assignor="sticky"
        )
    with pytest.raises(ValueError, match=r"java_members \+ confluent_members must be 1\.\.2"):
        make_schedule(
            1, broker="kafka", members=3, static=False, protocol="migration",
            remote_assignor="uniform", java_members=1, confluent_members=2,
        )  # fmt: skip
    with pytest.raises(ValueError, match="migration starts"):
        make_schedule(
            1, broker="kafka", members=3, static=False, protocol="migration",
            assignor="upgrade-1", remote_assignor="uniform",
        )  # fmt: skip


def test_the_assignor_is_a_parameter() -> None:
    schedule = make_schedule(3, broker="mock", members=3, static=False, assignor="cooperative")
    assert schedule.assignor == "cooperative"
    classic = [s for s in map(functools.partial(schedule_for, "kafka"), range(1, 120))]
    assert {s.assignor for s in classic if s.protocol == "classic"} == set(ASSIGNORS)
    # a consumer-protocol schedule's assignor is the broker's; a migration names both
    assert {s.assignor for s in classic if s.protocol == "consumer"} == set(REMOTE_ASSIGNORS)
    assert {s.assignor for s in classic if s.protocol == "migration"} == set(MIGRATION_ASSIGNORS)


def test_an_upgrade_never_mixes_the_first_list_with_the_last() -> None:
    for bounce in ("upgrade-1", "upgrade-2"):
        lists = {assignors_for(bounce, f"m{i}", n) for i in range(1, 9) for n in (1, 2, 3)}
        assert len(lists) == 2  # the old list and the new one of this bounce
    assert assignors_for("upgrade-2", "m1", 1) == "cooperative-sticky,range"
    assert assignors_for("upgrade-2", "m2", 1) == "cooperative-sticky"
    assert assignors_for("upgrade-2", "m1", 2) == "cooperative-sticky"
    assert assignors_for("sticky", "m3", 3) == "sticky"


@pytest.mark.parametrize("broker", BROKERS)
def test_schedules_keep_their_own_rules(broker: str) -> None:
    seen: set[str] = set()
    for seed in SEEDS:
        s = schedule_for(broker, seed)
        seen |= s.kinds()
        assert 3 <= len(s.members) <= 8
        if broker == "tansu":
            assert not s.static, "tansu stalls static groups (schedule_for)"
        allowed = set(WEIGHTS[broker]) | ({"roll"} if s.protocol in MIGRATIONS else set())
        allowed |= {"add_partitions"} if s.topic_changes else set()
        new_topic = s.topic_changes and not (s.pattern and s.foreign_slots)
        allowed |= {"create_topic", "delete_topic", "create_again"} if new_topic else set()
        assert s.kinds() <= allowed, "a fault of another broker or protocol"
        assert list(s.steps) == sorted(s.steps, key=lambda st: st.at)
        # every fault starts and ends inside the window
        assert all(0 <= st.at and st.end <= s.fault_window for st in s.steps)
        # static members carry their slot as instance id; only Kafka members use the proxy
        assert all((m.instance_id == m.slot) == s.static for m in s.members)
        proxied = [m.via_proxy for m in s.members]
        if broker == "kafka":
            assert any(proxied) and not all(proxied), "some members direct, some proxied"
        else:
            assert not any(proxied)
        _check_member_timeline(s)
        _check_exclusive(s, PROXY_FAULTS)
        _check_exclusive(s, ("broker_restart", "tansu_restart", "broker_down"))
        bound, terms = stable_bound(s)
        assert bound == pytest.approx(sum(v for _, v in terms))
        assert bound > s.timeouts.session + s.timeouts.max_poll_ms / 1000
    kafka_only = {"roll", "add_partitions", "create_topic", "delete_topic", "create_again"}
    every = set(WEIGHTS[broker]) | (kafka_only if broker == "kafka" else set())
    assert seen == every, f"kinds never drawn: {every - seen}"


@pytest.mark.parametrize("static", [False, True])
def test_mixed_groups_keep_java_members_to_the_faults_they_survive(static: bool) -> None:
    """Java slots: direct, never paused, only JAVA_FAULTS; kgroup slots still get every
    fault, at least one of them through the proxy; deterministic."""
    seen_java: set[str] = set()
    seen_kgroup: set[str] = set()
    for seed in SEEDS:
        members = 3 + seed % 6
        n_java = 1 + seed % (members - 1)
        assignor = JAVA_ASSIGNORS[seed % len(JAVA_ASSIGNORS)]
        make = functools.partial(
            make_schedule,
            seed,
            broker="kafka",
            members=members,
            static=static,
            assignor=assignor,
            java_members=n_java,
        )
        s = make()
        assert s == make()
        assert Schedule.from_json(s.dumps()) == s
        java = set(s.java_slots)
        assert len(java) == n_java and f"{n_java}java" in s.label
        assert all(not m.via_proxy for m in s.members if m.java), "Java slots are direct"
        assert any(m.via_proxy for m in s.members if not m.java), "some kgroup slot proxied"
        for step in s.steps:
            if step.member in java:
                assert step.kind in JAVA_FAULTS, step
                seen_java.add(step.kind)
            elif step.member is not None:
                seen_kgroup.add(step.kind)
        _check_member_timeline(s)
        _check_exclusive(s, PROXY_FAULTS)
    assert seen_java == set(JAVA_FAULTS)
    assert seen_kgroup == {"crash", "pause", "leave", "rejoin"}


def test_schedule_for_draws_mixed_groups_on_kafka_cooperative_sticky_only() -> None:
    """Classic mixed groups (consumer-protocol ones: see the KIP-848 tests below)."""
    classic = [
        s
        for s in (schedule_for("kafka", seed) for seed in range(1, 900))
        if s.protocol == "classic"
    ]
    mixed = [s for s in classic if s.java_slots]
    coop = [s for s in classic if s.assignor == "cooperative-sticky"]
    assert mixed and all(s.assignor == "cooperative-sticky" for s in mixed)
    assert 0.3 < len(mixed) / len(coop) < 0.7, MIXED_PROBABILITY
    assert all(1 <= len(s.java_slots) <= len(s.members) // 2 for s in mixed)
    for broker in ("tansu", "mock"):
        assert not any(schedule_for(broker, seed).java_slots for seed in SEEDS)
    # drawn last, so a kgroup-only seed keeps its schedule (a default case, as it was)
    s = schedule_for("kafka", 65)
    assert not s.java_slots and s.label == "kafka-dynamic-cooperative-sticky-4m-seed65"


def _check_member_timeline(s: Schedule) -> None:
    """Crash, pause and leave hit running, unpaused members; rejoin only fills a slot that
    is down; at least one member is always left; a Java or confluent slot only gets
    JAVA_FAULTS (and a migration's rolls), and when static rejoins a session timeout after
    a crash of a consumer-protocol process at the earliest (its instance id is not
    released before); a roll hits a running
    slot restarted fewer than ROLLS times (once for a migration: not rolled yet; twice for a
    migration back), which is then left alone for ROLL_BUSY seconds."""
    alive = {m.slot: True for m in s.members}
    rejoin_at = {m.slot: 0.0 for m in s.members}
    paused_until = {m.slot: 0.0 for m in s.members}
    restarts = dict.fromkeys(alive, 0)
    for step in s.steps:
        slot = step.member
        assert slot not in s.foreign_slots or step.kind in (*JAVA_FAULTS, "roll"), step
        if step.kind == "roll":
            assert s.protocol in MIGRATIONS, step
            assert slot is not None and alive[slot] and paused_until[slot] <= step.at, step
            assert restarts[slot] < ROLLS[s.protocol], f"{slot} rolled once too often"
            restarts[slot] += 1
            paused_until[slot] = step.at + ROLL_BUSY
        elif step.kind in ("crash", "leave", "pause"):
            assert slot is not None and alive[slot] and paused_until[slot] <= step.at, step
            if step.kind == "pause":
                assert step.duration > s.timeouts.session, "a pause outlasts the session"
                paused_until[slot] = step.end
            else:
                alive[slot] = False
                assert any(alive.values()), "the last member went away"
                spec = s.member(slot)
                late = step.kind == "crash" and spec.foreign and s.static
                late = late and protocol_for(s.protocol, restarts[slot] + 1) == "consumer"
                rejoin_at[slot] = step.at + (s.timeouts.session + 1.0 if late else 0.5)
        elif step.kind == "rejoin":
            assert slot is not None and not alive[slot], step
            assert step.at >= rejoin_at[slot] - 1e-6, f"{step}: before {rejoin_at[slot]}"
            alive[slot] = True
            restarts[slot] += 1  # a migration's new process runs the slot's next protocol


def _check_exclusive(s: Schedule, kinds: tuple[str, ...]) -> None:
    steps = [st for st in s.steps if st.kind in kinds]
    for a, b in itertools.pairwise(steps):
        assert a.end <= b.at, f"{a} overlaps {b}"


def test_an_injected_fatal_code_makes_its_error_expected() -> None:
    found = 0
    for seed in SEEDS:
        s = schedule_for("mock", seed)
        fatal = any(30 in st.arg("codes", ()) for st in s.steps if st.kind == "inject_errors")
        assert ("GroupAuthorizationFailed" in s.expected_errors) == fatal
        found += fatal
    assert found, "no schedule draws a fatal code"


def test_default_cases_cover_every_fault_kind_and_both_memberships() -> None:
    cases = default_cases()
    assert len(cases) <= len(DEFAULT_REQUIREMENTS)
    schedules = [schedule_for(b, s) for b, s in cases]
    for broker, what, predicate in DEFAULT_REQUIREMENTS:  # each met by some chosen case
        assert any(s.broker == broker and predicate(s) for s in schedules), what
    assert all(len(s.members) <= 5 for s in schedules)
    assert {s.assignor for s in schedules} >= {"cooperative-sticky", "upgrade-2"}
    assert any(s.java_slots for s in schedules), "a mixed Java/kgroup group"
    consumer = [s for s in schedules if s.protocol == "consumer"]
    assert any(s.java_slots and s.confluent_slots for s in consumer), "kgroup + Java + confluent"
    assert any(s.protocol == "migration" for s in schedules)
    assert ("kafka", 117) in cases, "the migration default case keeps its seed"
    assert any(s.protocol == "migration" and s.java_slots for s in schedules), "mixed migration"
    assert sum(s.protocol != "classic" for s in schedules) == 4, "four cases: the time budget"
    assert any(s.protocol == "consumer" and s.topic_changes for s in schedules)
    assert any(s.assignor == "cooperative-sticky" and not s.java_slots for s in schedules)
    covered = set().union(*(s.kinds() for s in schedules))
    assert covered == set(FAULT_KINDS)
    kafka = [s for s in schedules if s.broker == "kafka"]
    assert {s.static for s in kafka} == {True, False}
    assert default_cases() == cases, "pure: the same every time"


def test_printable() -> None:
    s = schedule_for("kafka", 1)
    text = str(s)
    assert s.label in text and "session 6000 ms" in text
    assert all(str(step) in text for step in s.steps)
    assert str(Step.make(1.5, "crash", member="m2")) == "+  1.50s  crash            member=m2"


# -- the group protocol (KIP-848) --------------------------------------------------------------


def test_the_protocol_is_drawn_on_kafka_only_and_classic_seeds_keep_their_schedule() -> None:
    kafka = [schedule_for("kafka", seed) for seed in range(1, 600)]
    share = {p: sum(s.protocol == p for s in kafka) / len(kafka) for p in PROTOCOLS}
    assert 0.17 < share["consumer"] < 0.33, share
    assert 0.05 < share["migration"] + share["migration-back"] < 0.16, share
    assert 0.3 < share["migration-back"] / (share["migration"] + share["migration-back"]) < 0.7
    for broker in ("tansu", "mock"):
        assert {schedule_for(broker, seed).protocol for seed in SEEDS} == {"classic"}
    for s in kafka:
        assert Schedule.from_json(s.dumps()) == s
        assert (s.remote_assignor == "") == (s.protocol == "classic")
        if s.protocol == "classic":
            # the protocol draw changed nothing else: the same schedule as before
            assert without_topic_changes(s) == make_schedule(
                s.seed, broker="kafka", members=len(s.members), static=s.static,
                assignor=s.assignor, java_members=len(s.java_slots),
            )  # fmt: skip
            assert "consumer" not in s.label and "migration" not in s.label


def test_consumer_protocol_groups_mix_three_clients_on_the_java_slots_rules() -> None:
    consumer = [s for s in map(functools.partial(schedule_for, "kafka"), SEEDS)]
    consumer = [s for s in consumer if s.protocol == "consumer"]
    assert consumer and all(s.assignor == s.remote_assignor for s in consumer)
    assert {s.remote_assignor for s in consumer} == set(REMOTE_ASSIGNORS)
    assert any(s.java_slots and s.confluent_slots for s in consumer)
    assert any(not s.foreign_slots for s in consumer), "kgroup-only consumer groups too"
    assert {s.static for s in consumer} == {True, False}
    for s in consumer:
        assert "roll" not in s.kinds()
        assert len(s.foreign_slots) <= len(s.members) // 2
        assert not (set(s.java_slots) & set(s.confluent_slots))
        assert all(not m.via_proxy for m in s.members if m.foreign), "foreign slots are direct"
        assert any(m.via_proxy for m in s.members if not m.foreign)
        label = s.label
        assert label.startswith(f"kafka-consumer-{'static' if s.static else 'dynamic'}-")
        if s.confluent_slots:
            assert f"{len(s.confluent_slots)}confluent" in label and ":confluent" in str(s)
        _check_member_timeline(s)


def test_a_migration_rolls_its_slots_one_by_one() -> None:
    """Half the migrations (not back) have Java members (1 to half the slots, a draw of
    their own), and half of those with room left confluent members (a draw of their own
    again; Java and confluent together at most half the slots; from range only: Kafka does
    not convert a group whose assignments carry librdkafka cooperative-sticky's user data),
    rolled like the kgroup ones."""
    migrations = [s for s in map(functools.partial(schedule_for, "kafka"), range(1, 600))]
    migrations = [s for s in migrations if s.protocol == "migration"]
    every_slot = 0
    mixed = [s for s in migrations if s.java_slots]
    many = [schedule_for("kafka", seed) for seed in range(600, 2400)]
    share = [bool(s.java_slots) for s in many if s.protocol == "migration"]
    assert 0.35 < sum(share) / len(share) < 0.65
    roomy = [
        s
        for s in many
        if s.protocol == "migration"
        and s.assignor == "range"
        and len(s.java_slots) < len(s.members) // 2
    ]
    librdkafka = sum(bool(s.confluent_slots) for s in roomy) / len(roomy)
    assert 0.3 < librdkafka < 0.7, CONFLUENT_MIGRATION_PROBABILITY
    assert any(st.kind == "roll" and st.member in s.java_slots for s in mixed for st in s.steps), (
        "a Java slot rolled"
    )
    assert any(
        st.kind == "roll" and st.member in s.confluent_slots for s in many for st in s.steps
    ), "a confluent slot rolled"
    for s in migrations:
        assert 3 <= len(s.members) <= 5
        assert len(s.java_slots) + len(s.confluent_slots) <= len(s.members) // 2
        assert not s.confluent_slots or s.assignor == "range"
        assert s.assignor in MIGRATION_ASSIGNORS and s.remote_assignor in REMOTE_ASSIGNORS
        assert f"{s.assignor}-to-{s.remote_assignor}" in s.label
        rolls = [st for st in s.steps if st.kind == "roll"]
        # a rejoin's process runs the consumer protocol too
        assert rolls or "rejoin" in s.kinds(), "a migration that moves no slot"
        # one at a time: a roll starts after the previous one's busy time
        assert all(b.at - a.at >= 1.0 for a, b in itertools.pairwise(rolls))
        moved = {st.member for st in s.steps if st.kind in ("roll", "rejoin")}
        every_slot += moved == {m.slot for m in s.members}
        _check_member_timeline(s)
    assert every_slot / len(migrations) > 0.4, "most migrations move every slot"
    assert [protocol_for("migration", n) for n in (1, 2, 3)] == ["classic", "consumer", "consumer"]
    assert protocol_for("consumer", 1) == "consumer" and protocol_for("classic", 4) == "classic"


def test_a_migration_back_rolls_every_slot_onto_the_consumer_protocol_and_back() -> None:
    """A migration back (half the migrations; the others keep their schedules) restarts each
    slot at most twice from rolls, rolls back in the window's tail every running slot still
    on the consumer protocol, Java slots too (half the migrations back have 1 to half of
    their slots Java), and so always ends with none on it (a crashed or left one is fenced
    by the broker): Kafka converts the group back to classic. Not a default case."""
    kafka = [s for s in map(functools.partial(schedule_for, "kafka"), range(1, 1200))]
    backs = [s for s in kafka if s.protocol == "migration-back"]
    assert len(backs) > 30
    twice = 0
    mixed = [s for s in backs if s.java_slots]
    assert 0.3 < len(mixed) / len(backs) < 0.7, MIXED_MIGRATION_PROBABILITY
    for s in backs:
        assert len(s.java_slots) + len(s.confluent_slots) <= len(s.members) // 2
        assert not s.confluent_slots or s.assignor == "range"
        assert 3 <= len(s.members) <= 5
        assert s.fault_window == BACK_WINDOW and s.faults_end <= BACK_WINDOW
        assert s.label.startswith("kafka-migration-back-") and "and back" in str(s)
        assert f"{s.assignor}-to-{s.remote_assignor}" in s.label
        _check_member_timeline(s)
        slots = [m.slot for m in s.members]
        final = final_protocols(s.protocol, slots, s.steps)
        assert "consumer" not in final.values(), f"{s.label} ends with {final}"
        assert any(st.kind in ("roll", "rejoin") for st in s.steps), "never consumer"
        # the tail: rolls only, BACK_ROLL_GAP apart, after every other fault ended
        main = s.fault_window - back_tail(len(s.members))
        tail = [st for st in s.steps if st.at >= main]
        assert all(st.kind == "roll" for st in tail), s
        assert all(abs(b.at - a.at - BACK_ROLL_GAP) < 1e-6 for a, b in itertools.pairwise(tail))
        assert all(st.end <= main for st in s.steps if st.at < main)
        twice += any(sum(st.member == m for st in s.steps if st.kind == "roll") == 2 for m in slots)
    assert twice / len(backs) > 0.8, "most roll a slot onto the consumer protocol and back"

    def restarts(s: Schedule, slot: str) -> int:
        return sum(st.member == slot for st in s.steps if st.kind in ("roll", "rejoin"))

    java_back = [s for s in mixed if any(restarts(s, m) >= 2 for m in s.java_slots)]
    assert len(java_back) > len(mixed) / 2, "most restart a Java slot there and back"
    librdkafka = [s for s in backs if s.confluent_slots]
    confluent_back = [s for s in librdkafka if any(restarts(s, m) >= 2 for m in s.confluent_slots)]
    assert len(confluent_back) > len(librdkafka) / 2, "most restart a confluent slot there and back"
    # the other migrations keep the schedules they had: drawn as before
    for s in kafka:
        if s.protocol == "migration":
            assert s.fault_window == 20.0
            assert without_topic_changes(s) == make_schedule(
                s.seed, broker="kafka", members=len(s.members), static=s.static,
                assignor=s.assignor, protocol="migration", remote_assignor=s.remote_assignor,
                java_members=len(s.java_slots), confluent_members=len(s.confluent_slots),
            )  # fmt: skip
    assert not any(schedule_for(b, n).protocol == "migration-back" for b, n in default_cases())


def test_a_migration_back_runs_consumer_on_a_slots_second_process_only() -> None:
    assert [protocol_for("migration-back", n) for n in (1, 2, 3, 4)] == [
        "classic", "consumer", "classic", "classic",
    ]  # fmt: skip
    steps = [
        Step.make(1.0, "roll", member="m1"),  # m1: consumer
        Step.make(2.0, "roll", member="m2"),
        Step.make(3.0, "crash", member="m2"),  # m2: consumer, down (fenced in a session)
        Step.make(4.0, "roll", member="m1"),  # m1: classic again
        Step.make(5.0, "leave", member="m3"),
        Step.make(6.0, "rejoin", member="m3"),  # m3: consumer
    ]
    slots = ("m1", "m2", "m3")
    assert final_protocols("migration-back", slots, steps) == {
        "m1": "classic", "m2": "down", "m3": "consumer",
    }  # fmt: skip
    assert final_protocols("migration", slots, steps) == {
        "m1": "consumer", "m2": "down", "m3": "consumer",
    }  # fmt: skip
    assert final_protocols("classic", slots, steps[:1]) == dict.fromkeys(slots, "classic")


# -- topic changes ------------------------------------------------------------------------------


def test_topic_changes_grow_the_topic_apart_from_the_other_faults() -> None:
    """About :data:`TOPIC_CHANGE_PROBABILITY` of the Kafka seeds grow their topic (never a
    classic group with Java members, never another broker): one or two add_partitions
    steps, each to a larger total, inside the window and never while the broker restarts;
    the other faults are those the seed draws without them."""
    kafka = [schedule_for("kafka", seed) for seed in range(1, 600)]
    growing = [s for s in kafka if s.topic_changes]
    share = len(growing) / len(kafka)
    assert TOPIC_CHANGE_PROBABILITY - 0.1 < share < TOPIC_CHANGE_PROBABILITY + 0.1, share
    assert {s.protocol for s in growing} == set(PROTOCOLS)
    assert not any(s.protocol == "classic" and s.java_slots for s in growing)
    assert any(s.foreign_slots for s in growing if s.protocol == "consumer")
    for broker in ("tansu", "mock"):
        assert not any(schedule_for(broker, seed).topic_changes for seed in SEEDS)
    for s in kafka:
        grows = [st for st in s.steps if st.kind == "add_partitions"]
        assert bool(grows) <= s.topic_changes
        assert ("-topics-" in s.label) == s.topic_changes
        assert list(s.steps) == sorted(s.steps, key=lambda st: st.at)
        totals = [s.partitions] + [int(st.arg("total")) for st in grows]
        assert all(0 < b - a <= 3 for a, b in itertools.pairwise(totals)), s
        restarts = [st for st in s.steps if st.kind == "broker_restart"]
        for st in grows:
            assert 0 < st.at < s.fault_window - 0.5
            for r in restarts:
                busy = RESTART_BUSY["hard" if r.arg("hard") else "soft"]
                assert not r.at - 1.0 <= st.at < r.at + busy, (st, r)
        assert Schedule.from_json(s.dumps()) == s
        if s.topic_changes:
            assert without_topic_changes(s).steps == make_schedule(
                s.seed, broker="kafka", members=len(s.members), static=s.static,
                assignor=s.assignor, java_members=len(s.java_slots),
                confluent_members=len(s.confluent_slots), protocol=s.protocol,
                remote_assignor=s.remote_assignor, fault_window=s.fault_window,
            ).steps  # fmt: skip
    # none only when restarts leave no free second (a soft and a hard one back to back)
    assert sum("add_partitions" in s.kinds() for s in growing) / len(growing) > 0.95
    with pytest.raises(ValueError, match="topic_changes"):
        make_schedule(1, broker="tansu", members=3, static=False, topic_changes=True)
    with pytest.raises(ValueError, match="topic_changes"):
        make_schedule(
            1, broker="kafka", members=4, static=False, assignor="range", java_members=1,
            topic_changes=True,
        )  # fmt: skip


def test_patterns_are_drawn_apart_and_change_no_fault() -> None:
    """About :data:`PATTERN_PROBABILITY` of the Kafka seeds subscribe their kgroup members
    with a pattern, on every protocol; the label and the printout say so, JSON keeps it,
    and the schedule is otherwise the one drawn without it. Default cases cover it on the
    classic and on the consumer protocol."""
    kafka = [schedule_for("kafka", seed) for seed in range(1, 600)]
    regex = [s for s in kafka if s.pattern]
    share = len(regex) / len(kafka)
    assert PATTERN_PROBABILITY - 0.1 < share < PATTERN_PROBABILITY + 0.1, share
    assert {s.protocol for s in regex} == set(PROTOCOLS)
    for s in regex:
        assert "-regex-" in s.label and "subscribe with a pattern" in str(s)
        assert Schedule.from_json(s.dumps()) == s
        plain = dataclasses.replace(s, pattern=False)
        assert "-regex-" not in plain.label
        if s.protocol == "classic" and not s.topic_changes:
            assert plain == make_schedule(
                s.seed, broker="kafka", members=len(s.members), static=s.static,
                assignor=s.assignor, java_members=len(s.java_slots),
            )  # fmt: skip
    for broker in ("tansu", "mock"):
        assert not any(schedule_for(broker, seed).pattern for seed in SEEDS)
    chosen = [schedule_for(b, n) for b, n in default_cases()]
    assert {s.protocol for s in chosen if s.pattern} >= {"classic", "consumer"}


def test_half_the_new_topics_are_deleted_again_after_they_were_created() -> None:
    """A ``delete_topic`` step (its own generator) follows about half the ``create_topic``
    steps, for the same topic, 2 s or more after it, inside the window, never while the
    broker restarts; the other steps are those of the same seed without it."""
    kafka = [schedule_for("kafka", seed) for seed in range(1, 2000)]
    created = [s for s in kafka if "create_topic" in s.kinds()]
    deleted = [s for s in created if "delete_topic" in s.kinds()]
    assert 0.3 < len(deleted) / len(created) < 0.7, DELETE_TOPIC_PROBABILITY
    assert all("create_topic" in s.kinds() for s in kafka if "delete_topic" in s.kinds())
    for s in deleted:
        (made,) = [st for st in s.steps if st.kind == "create_topic"]
        (gone,) = [st for st in s.steps if st.kind == "delete_topic"]
        assert gone.arg("index") == made.arg("index")
        assert made.at + 2.0 <= gone.at < s.fault_window - 1.0
        for r in (st for st in s.steps if st.kind == "broker_restart"):
            busy = RESTART_BUSY["hard" if r.arg("hard") else "soft"]
            assert not r.at - 1.0 <= gone.at < r.at + busy
    assert ("kafka", 47) in default_cases(), "a default case deletes the pattern's new topic"


def test_half_the_deleted_topics_are_created_again_under_their_names() -> None:
    """A ``create_again`` step (its own generator) follows about half the ``delete_topic``
    steps, for the same topic, 2 s or more after it, inside the window, never while the
    broker restarts, with as many partitions as the topic was created with or up to two
    more; without it the schedule is the one the seed had."""
    kafka = [schedule_for("kafka", seed) for seed in range(1, 2000)]
    deleted = [s for s in kafka if "delete_topic" in s.kinds()]
    again = [s for s in deleted if "create_again" in s.kinds()]
    room = [  # deleted early enough for a step 2 s later inside the window
        s
        for s in deleted
        if next(st for st in s.steps if st.kind == "delete_topic").at + 2.0 < s.fault_window - 1.0
    ]
    assert 0.3 < len(again) / len(room) < 0.7, CREATE_AGAIN_PROBABILITY
    assert all("delete_topic" in s.kinds() for s in kafka if "create_again" in s.kinds())
    assert {s.protocol for s in again} >= {"classic", "consumer"}
    for s in again:
        (made,) = [st for st in s.steps if st.kind == "create_topic"]
        (gone,) = [st for st in s.steps if st.kind == "delete_topic"]
        (back,) = [st for st in s.steps if st.kind == "create_again"]
        assert back.arg("index") == gone.arg("index")
        assert made.arg("partitions") <= back.arg("partitions") <= made.arg("partitions") + 2
        assert gone.at + 2.0 <= back.at < s.fault_window - 1.0
        for r in (st for st in s.steps if st.kind == "broker_restart"):
            busy = RESTART_BUSY["hard" if r.arg("hard") else "soft"]
            assert not r.at - 1.0 <= back.at < r.at + busy


def test_a_new_topic_comes_with_topic_changes_and_kgroup_members_only() -> None:
    """A ``create_topic`` step (one, ``{topic}-2``, 1 to 4 partitions) comes only with
    ``topic_changes``, inside the window and never while the broker restarts: in every
    schedule with ``pattern`` and no Java or confluent member (unless restarts leave no
    time), in about half those without ``pattern``, whose members (of every client) then
    subscribe to it by name from the start (``named_topics``)."""
    kafka = [schedule_for("kafka", seed) for seed in range(1, 1200)]
    created = [s for s in kafka if "create_topic" in s.kinds()]
    assert len(created) > 10
    assert {s.protocol for s in created} >= {"classic", "consumer"}
    for s in kafka:
        steps = [st for st in s.steps if st.kind == "create_topic"]
        assert len(steps) <= 1
        if steps:
            assert s.topic_changes and not (s.pattern and s.foreign_slots)
            assert s.named_topics == (() if s.pattern else ("-2",))
            assert steps[0].arg("index") == 2 and 1 <= steps[0].arg("partitions") <= 4
            assert 0 < steps[0].at < s.fault_window - 0.5
            for r in (st for st in s.steps if st.kind == "broker_restart"):
                busy = RESTART_BUSY["hard" if r.arg("hard") else "soft"]
                assert not r.at - 1.0 <= steps[0].at < r.at + busy
        elif s.topic_changes and s.pattern and not s.foreign_slots:
            restarts = sum(st.kind == "broker_restart" for st in s.steps)
            assert restarts >= 2, "no free second for it"


def test_half_the_groups_without_a_pattern_subscribe_by_name_to_a_later_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its own draw (``NAMED_TOPIC_PROBABILITY``): the label says ``named``, the printout
    says so, and without the new topic's steps the schedule is the one the seed had."""
    kafka = [schedule_for("kafka", seed) for seed in range(1, 1500)]
    candidates = [s for s in kafka if s.topic_changes and not s.pattern]
    named = [s for s in candidates if s.named_topics]
    assert 0.3 < len(named) / len(candidates) < 0.7, NAMED_TOPIC_PROBABILITY
    assert {s.protocol for s in named} >= {"classic", "consumer", "migration"}
    assert any(s.java_slots for s in named) and any(s.confluent_slots for s in named)
    for s in named:
        assert "-named-" in s.label and "subscribe by name to a topic created later" in str(s)
        assert Schedule.from_json(s.to_json()) == s
    assert not any(s.named_topics for s in kafka if s.pattern)
    monkeypatch.setattr(_schedule, "NAMED_TOPIC_PROBABILITY", 0.0)
    for s in named:
        before = schedule_for("kafka", s.seed)
        assert not before.named_topics
        new = ("create_topic", "delete_topic", "create_again")
        assert before.steps == tuple(st for st in s.steps if st.kind not in new)


def test_only_kafka_schedules_run_the_first_bounce_of_an_upgrade() -> None:
    """tansu refuses a range-only member into a group that runs cooperative-sticky, though
    every member supports range, and the mock cluster aborts the process electing a leader
    among such members (``_seeds.schedule_for``); Kafka runs both bounces."""
    for broker in BROKERS:
        drawn = {schedule_for(broker, seed).assignor for seed in range(1, 200)}
        assert ("upgrade-1" in drawn) == (broker == "kafka"), broker
        assert "upgrade-2" in drawn
