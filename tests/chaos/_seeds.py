"""Seeds to chaos schedules: :func:`schedule_for` draws a schedule's parameters from its seed
(so ``(broker, seed)`` alone replays it), and :func:`default_cases` picks the smallest seeds
that cover :data:`DEFAULT_REQUIREMENTS`, the default run's cases."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
from typing import Any

from ._protocols import protocol_params
from ._schedule import (
    ASSIGNORS,
    MIXED_PROBABILITY,
    PATTERN_PROBABILITY,
    TOPIC_CHANGE_PROBABILITY,
    Schedule,
    make_schedule,
)

__all__ = [
    "DEFAULT_REQUIREMENTS",
    "RECORDS_BROKERS",
    "RECORDS_REQUIREMENTS",
    "default_cases",
    "records_cases",
    "records_fit",
    "schedule_for",
]


def schedule_for(broker: str, seed: int, **overrides: Any) -> Schedule:
    """The schedule of ``seed`` on ``broker``: the member count (3..8), static or dynamic,
    the assignor and, for a Kafka cooperative-sticky group, whether some members are Java
    consumers (:data:`MIXED_PROBABILITY`; 1 to half of them) are drawn from the seed too,
    so ``(broker, seed)`` alone replays it. ``overrides`` go to :func:`make_schedule` (e.g.
    ``fault_window`` for the soak)."""
    rng = random.Random(f"params/{broker}/{seed}")
    params: dict[str, Any] = {
        "members": rng.randint(3, 8),
        "static": rng.random() < 0.5,
        "assignor": rng.choice(ASSIGNORS),
    }
    if broker == "tansu":
        # tansu 0.6.0 stalls static groups: some members STABLE keep getting NONE to their
        # heartbeats while the others loop JoinGroup (same generation) -> SyncGroup ->
        # REBALANCE_IN_PROGRESS forever. Measured with no fault at all: 4 of 6 static
        # groups of 4 to 6 members never formed. Static membership is covered on Kafka
        # and the mock; tansu schedules are dynamic (make_schedule still takes static=True).
        params["static"] = False
        # tansu 0.6.0 checks a joining member against the protocol the group runs, not
        # the ones every member supports (Kafka's rule): in the first bounce of an upgrade
        # a member offering only range is refused (INCONSISTENT_GROUP_PROTOCOL) by a group
        # its cooperative-sticky,range members formed first, and never joins (soak seed
        # 537599; test_brokers.py). Its tansu schedules run the second bounce instead.
        if params["assignor"] == "upgrade-1":
            params["assignor"] = "upgrade-2"
    if broker == "mock" and params["assignor"] == "upgrade-1":
        # librdkafka's mock cluster aborts the whole process when it elects a classic
        # group's leader among members whose first protocols differ (the first bounce:
        # "range" beside "cooperative-sticky,range"): the assertion
        # ``!rd_kafkap_str_cmp_str(member2->protos[0].name, mcgrp->protocol_name)`` in
        # rd_kafka_mock_cgrp_classic_elect_leader (librdkafka 2.16.0; mock seed 493597).
        # Its mock schedules run the second bounce instead; the first is run on Kafka.
        params["assignor"] = "upgrade-2"
    # Drawn last (and only here), so that every other seed keeps its schedule; the upper
    # part of [0, 1) is mixed, which leaves the kgroup-only default cases as they were.
    if broker == "kafka" and params["assignor"] == "cooperative-sticky":
        if rng.random() >= 1.0 - MIXED_PROBABILITY:
            params["java_members"] = rng.randint(1, params["members"] // 2)
    if broker == "kafka":
        params.update(protocol_params(seed, params["members"]))
        # A draw of its own: the other faults of a seed stay what they were.
        grows = random.Random(f"topics:kafka:{seed}").random() < TOPIC_CHANGE_PROBABILITY
        classic_java = params.get("protocol", "classic") == "classic" and params.get(
            "java_members", 0
        )
        params["topic_changes"] = grows and not classic_java
        # Another draw of its own: the members' subscription, not the faults.
        params["pattern"] = random.Random(f"pattern:kafka:{seed}").random() < PATTERN_PROBABILITY
    records = bool(overrides.pop("records", False))
    params.update(overrides)
    schedule = make_schedule(seed, broker=broker, **params)
    return dataclasses.replace(schedule, records=True) if records else schedule


def _has(*kinds: str) -> Callable[[Schedule], bool]:
    return lambda s: set(kinds) <= s.kinds()


#: The brokers a ``records`` schedule runs on (tansu forgets every record on a restart).
RECORDS_BROKERS = ("kafka", "mock")


def records_fit(schedule: Schedule) -> bool:
    """Whether ``schedule`` can run with GroupConsumers (``records``): a group of kgroup
    members only (a Java or confluent member consumes nothing) on Kafka or the mock cluster,
    on one topic that keeps its partitions (invariant 5 counts a fixed set of partitions)."""
    return (
        schedule.broker in RECORDS_BROKERS
        and not schedule.foreign_slots
        and not schedule.topic_changes
        and not schedule.pattern
        and not schedule.named_topics
    )


#: The default run's GroupConsumer cases (``records``): (broker, description, predicate).
RECORDS_REQUIREMENTS: tuple[tuple[str, str, Callable[[Schedule], bool]], ...] = (
    (
        "kafka",
        "GroupConsumers, classic protocol: a crash, a black hole and a broker restart",
        lambda s: s.protocol == "classic" and _has("crash", "black_hole", "broker_restart")(s),
    ),
    (
        "kafka",
        "GroupConsumers, consumer protocol: a crash and a pause",
        lambda s: s.protocol == "consumer" and _has("crash", "pause")(s),
    ),
    (
        "mock",
        "GroupConsumers on three brokers: coordinator moves, a broker down, injected errors",
        _has("coordinator_move", "broker_down", "inject_errors", "crash"),
    ),
)


def records_cases(*, max_members: int = 5, max_seed: int = 10_000) -> list[tuple[str, int]]:
    """``(broker, seed)`` of the default run's GroupConsumer cases: for each of
    :data:`RECORDS_REQUIREMENTS`, the smallest seed that fits it and is not a default case
    already (pure and deterministic)."""
    cases: list[tuple[str, int]] = []
    taken = set(default_cases())
    for broker, what, predicate in RECORDS_REQUIREMENTS:
        for seed in range(1, max_seed):
            schedule = schedule_for(broker, seed)
            if (
                (broker, seed) not in cases
                and (broker, seed) not in taken
                and schedule.protocol != "migration-back"
                and len(schedule.members) <= max_members
                and records_fit(schedule)
                and predicate(schedule)
            ):
                cases.append((broker, seed))
                break
        else:  # pragma: no cover - the generator changed so much that nothing qualifies
            raise LookupError(f"no {broker} seed below {max_seed} gives {what}")
    return cases


#: What the default run must cover, one schedule each: (broker, description, predicate).
#: Members are capped at 5 there to keep the run inside its time budget.
DEFAULT_REQUIREMENTS: tuple[tuple[str, str, Callable[[Schedule], bool]], ...] = (
    (
        "kafka",
        "static, broker restart, black hole, crash and rejoin",
        lambda s: (
            s.static
            and _has("broker_restart", "black_hole", "crash", "rejoin")(s)
            and not any(st.arg("hard") for st in s.steps)
        ),
    ),
    (
        "kafka",
        "dynamic, latency, pause, leave",
        lambda s: not s.static and _has("latency", "pause", "leave")(s),
    ),
    (
        "tansu",
        "dynamic, tansu restart, pause, crash",
        lambda s: not s.static and _has("tansu_restart", "pause", "crash")(s),
    ),
    (
        "kafka",
        "a hard broker restart (SIGKILL: log recovery), pause, leave",
        lambda s: any(st.arg("hard") for st in s.steps) and _has("pause", "leave")(s),
    ),
    (
        "kafka",
        "cooperative-sticky (kgroup only), black hole, crash",
        lambda s: (
            s.assignor == "cooperative-sticky"
            and not s.java_slots
            and _has("black_hole", "crash")(s)
        ),
    ),
    (
        "kafka",
        "the second upgrade bounce (eager and cooperative members) under faults, restarts",
        lambda s: s.assignor == "upgrade-2" and _has("crash", "rejoin")(s),
    ),
    (
        "kafka",
        "a mixed Java/kgroup cooperative-sticky group: a Java member leaves, crashes and "
        "rejoins, a kgroup member is cut off",
        lambda s: (
            bool(s.java_slots)
            and {"leave", "crash", "rejoin"}
            <= {st.kind for st in s.steps if st.member in s.java_slots}
            and "black_hole" in s.kinds()
        ),
    ),
    (
        "mock",
        "coordinator move, broker down/up, injected errors",
        _has("coordinator_move", "broker_down", "inject_errors"),
    ),
    (
        "kafka",
        "a consumer-protocol group of kgroup, Java and confluent members: a Java or confluent "
        "member crashes and rejoins, one leaves, a kgroup member is paused and cut off",
        lambda s: (
            s.protocol == "consumer"
            and bool(s.java_slots)
            and bool(s.confluent_slots)
            and {"crash", "rejoin", "leave"}
            <= {st.kind for st in s.steps if st.member in s.foreign_slots}
            and _has("pause", "black_hole")(s)
        ),
    ),
    (
        "kafka",
        "a migration under faults: every slot rolled (or restarted) onto the consumer "
        "protocol one by one, a crash and a broker restart",
        lambda s: (
            s.protocol == "migration"
            and not s.java_slots
            and {m.slot for m in s.members}
            <= {st.member for st in s.steps if st.kind in ("roll", "rejoin")}
            and "roll" in s.kinds()
            and _has("crash", "broker_restart")(s)
        ),
    ),
    (
        "kafka",
        "a mixed migration: Java and kgroup members rolled onto the consumer protocol, a "
        "Java slot among them, under a crash",
        lambda s: (
            s.protocol == "migration"
            and bool(s.java_slots)
            and any(st.kind == "roll" and st.member in s.java_slots for st in s.steps)
            and _has("crash")(s)
        ),
    ),
    (
        "kafka",
        "a consumer-protocol group whose topic grows under faults, a crash and a black hole, "
        "subscribed by name to a second topic that is created, deleted and created again "
        "under its name",
        lambda s: (
            s.protocol == "consumer"
            and s.topic_changes
            and bool(s.named_topics)
            and "add_partitions" in s.kinds()
            and _has("crash", "black_hole", "create_again")(s)
        ),
    ),
    (
        "kafka",
        "kgroup members subscribed with a pattern, classic protocol, a second topic the "
        "pattern matches created and deleted under faults",
        lambda s: s.pattern and s.protocol == "classic" and _has("crash", "delete_topic")(s),
    ),
    (
        "kafka",
        "kgroup members subscribed with a pattern, consumer protocol",
        lambda s: s.pattern and s.protocol == "consumer" and _has("crash")(s),
    ),
)


def default_cases(
    requirements: Iterable[tuple[str, str, Callable[[Schedule], bool]]] = DEFAULT_REQUIREMENTS,
    *,
    max_members: int = 5,
    max_seed: int = 10_000,
) -> list[tuple[str, int]]:
    """``(broker, seed)`` of the default run: for each requirement in turn that no case
    chosen so far meets, the smallest seed whose schedule (:func:`schedule_for`) meets it
    (pure and deterministic). Migrations back (a longer window) are left out: they came
    after the default cases, which keep their seeds so."""
    cases: list[tuple[str, int]] = []
    for broker, what, predicate in requirements:
        if any(b == broker and predicate(schedule_for(b, s)) for b, s in cases):
            continue  # a schedule already chosen covers this one too
        for seed in range(1, max_seed):
            if (broker, seed) in cases:
                continue
            schedule = schedule_for(broker, seed)
            if schedule.protocol == "migration-back":
                continue
            if len(schedule.members) <= max_members and predicate(schedule):
                cases.append((broker, seed))
                break
        else:  # pragma: no cover - the generator changed so much that nothing qualifies
            raise LookupError(f"no seed below {max_seed} gives a {broker} schedule with {what}")
    return cases
