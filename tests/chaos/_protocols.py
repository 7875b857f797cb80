"""The group-protocol dimension of the chaos schedules (KIP-848), for ``_schedule.py``.

On Kafka a schedule runs the classic protocol, the consumer protocol (kgroup members,
possibly beside Kafka's Java consumer and confluent-kafka, all on the consumer protocol), a
migration: a classic group of kgroup members (possibly beside Java and confluent-kafka
members, rolled like them) rolled onto the consumer protocol while the faults run, or a
migration and back: rolled onto it, then back to classic (Kafka converts the group back when
its last consumer-protocol member is gone). Here: the names, the shares
:func:`protocol_params` draws them with, the validation of
:func:`~._schedule.make_schedule`'s protocol parameters, which protocol a slot's process
runs (:func:`protocol_for`) and what each slot runs at the end (:func:`final_protocols`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

__all__ = [
    "BACK_PROBABILITY",
    "BACK_ROLL_GAP",
    "BACK_WINDOW",
    "CONFLUENT_MIGRATION_PROBABILITY",
    "CONSUMER_PROBABILITY",
    "FOREIGN_PROBABILITY",
    "MIGRATIONS",
    "MIGRATION_ASSIGNORS",
    "MIGRATION_PROBABILITY",
    "MIXED_MIGRATION_PROBABILITY",
    "PROTOCOLS",
    "REMOTE_ASSIGNORS",
    "ROLLS",
    "ROLL_BUSY",
    "ROLL_WEIGHT",
    "back_tail",
    "check_protocol",
    "final_protocols",
    "protocol_for",
    "protocol_params",
]

#: ``Schedule.protocol``: the classic protocol, KIP-848's consumer protocol, a classic group
#: rolled onto the consumer protocol under faults, or rolled onto it and back to classic.
PROTOCOLS = ("classic", "consumer", "migration", "migration-back")
#: The protocols that roll slots (``roll`` steps), and how many restarts (rolls or rejoins)
#: a slot may get from rolls: one (onto the consumer protocol), or two (and back).
MIGRATIONS = ("migration", "migration-back")
ROLLS = {"migration": 1, "migration-back": 2}
#: The broker's assignors a consumer-protocol member may name (``group_remote_assignor``).
REMOTE_ASSIGNORS = ("uniform", "range")
#: The classic assignors a migration starts from (what the group runs before its roll).
MIGRATION_ASSIGNORS = ("range", "cooperative-sticky")
#: ``schedule_for`` on Kafka: how likely a seed runs the consumer protocol, and a migration
#: (drawn from a generator of their own, so that a classic seed keeps its schedule).
CONSUMER_PROBABILITY = 0.25
MIGRATION_PROBABILITY = 0.1
#: How likely a migration goes back to classic (a draw of its own, after the migration's
#: others), and its fault window (seconds: two rolls per slot take longer than one).
BACK_PROBABILITY = 0.5
BACK_WINDOW = 30.0
#: The seconds between the rolls back at the end of a migration back's window.
BACK_ROLL_GAP = 1.0
#: ``schedule_for``: how likely a consumer-protocol schedule has Java or confluent members.
FOREIGN_PROBABILITY = 0.6
#: ``schedule_for``: how likely a migration (there, or there and back) has Java members,
#: rolled like the others (a draw of its own, after the migration's others), and then,
#: while Java members fill fewer than half of the slots, confluent-kafka members (a draw
#: of its own again, so that the seeds drawn before keep their Java members). Only from
#: ``range``: librdkafka's cooperative-sticky writes user data into the assignments it
#: computes, and Kafka 4.4.0 refuses to convert a classic group whose current assignments
#: carry any ("userData from a custom assignor would be lost"; Kafka seed 213, where a
#: confluent member led), so such a group is never upgraded while it leads.
MIXED_MIGRATION_PROBABILITY = 0.5
CONFLUENT_MIGRATION_PROBABILITY = 0.5
#: The weight of a ``roll`` in a migration schedule (high: every slot should be rolled
#: within the window), and the seconds a rolled slot is left alone (its close, the new
#: process's start) before another member fault may hit it.
ROLL_WEIGHT = 10.0
ROLL_BUSY = 4.0


def protocol_for(protocol: str, incarnation: int) -> str:
    """The ``group_protocol`` of a slot's ``incarnation``-th process (1 = the first): the
    schedule's, or for a migration ``classic`` for the first process and ``consumer`` for
    every later one (a roll or a rejoin); for a migration back ``consumer`` for the second
    process only (the first restart moves the slot onto the consumer protocol, the second
    back to classic, where it stays)."""
    if protocol == "migration":
        return "classic" if incarnation == 1 else "consumer"
    if protocol == "migration-back":
        return "consumer" if incarnation == 2 else "classic"
    return protocol


def back_tail(members: int) -> float:
    """The end of a migration back's window kept for rolling back the slots still on the
    consumer protocol (at most every slot, :data:`BACK_ROLL_GAP` apart, the last one left
    alone :data:`ROLL_BUSY` seconds)."""
    return members * BACK_ROLL_GAP + ROLL_BUSY


def final_protocols(protocol: str, slots: Iterable[str], steps: Iterable[Any]) -> dict[str, str]:
    """What each slot runs once ``steps`` (``Step``s, in order) have all been applied: the
    ``group_protocol`` of its last process, or ``"down"`` after a crash or leave that no
    rejoin followed. For a migration back, the group is converted back to classic (and
    stays so) when no slot ends on ``consumer``: a crashed or left consumer-protocol member
    is fenced within a session."""
    incarnation = dict.fromkeys(slots, 1)
    down: set[str] = set()
    for step in steps:
        slot = step.member
        if step.kind in ("crash", "leave"):
            down.add(slot)
        elif step.kind in ("roll", "rejoin"):
            incarnation[slot] += 1
            down.discard(slot)
    return {
        slot: "down" if slot in down else protocol_for(protocol, n)
        for slot, n in incarnation.items()
    }


def check_protocol(
    broker: str,
    protocol: str,
    assignor: str,
    remote_assignor: str,
    java_members: int,
    confluent_members: int,
) -> str:
    """Validate the protocol parameters of :func:`make_schedule`; the remote assignor."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
    if protocol == "classic":
        if remote_assignor or confluent_members:
            raise ValueError("remote_assignor and confluent members need the consumer protocol")
        return ""
    if broker != "kafka":
        raise ValueError(f"the {protocol} protocol runs on Kafka only, not on {broker}")
    if protocol == "consumer":
        remote_assignor = remote_assignor or assignor
        if assignor != remote_assignor:
            raise ValueError("a consumer-protocol schedule's assignor is its remote assignor")
    elif assignor not in MIGRATION_ASSIGNORS:
        raise ValueError(f"a migration starts from one of {MIGRATION_ASSIGNORS}")
    if remote_assignor not in REMOTE_ASSIGNORS:
        raise ValueError(f"remote_assignor must be one of {REMOTE_ASSIGNORS}")
    return remote_assignor


def protocol_params(seed: int, members: int) -> dict[str, Any]:
    """A Kafka seed's group protocol (:data:`CONSUMER_PROBABILITY`,
    :data:`MIGRATION_PROBABILITY`) and what comes with it, from a generator of its own, so
    that a seed that stays classic keeps the schedule it had (the classic default cases
    among them: they all draw classic here). A consumer-protocol group draws its broker
    assignor and, with :data:`FOREIGN_PROBABILITY`, Java and confluent members (together 1
    to half of the slots); a migration 3 to 5 slots (so that most are rolled inside the
    window), its classic assignor and the broker's, then whether it goes back to classic
    (:data:`BACK_PROBABILITY`; then with :data:`BACK_WINDOW`, unless overridden), then its
    Java members and its confluent members (:data:`MIXED_MIGRATION_PROBABILITY`,
    :data:`CONFLUENT_MIGRATION_PROBABILITY`, from ``range`` only; together at most half of
    the slots). Both
    replace the classic draws (assignor, Java members)."""
    rng = random.Random(f"protocol:kafka:{seed}")
    draw = rng.random()
    if draw < CONSUMER_PROBABILITY:
        remote = rng.choice(REMOTE_ASSIGNORS)
        params: dict[str, Any] = {
            "protocol": "consumer",
            "assignor": remote,
            "remote_assignor": remote,
            "java_members": 0,
            "confluent_members": 0,
        }
        if rng.random() < FOREIGN_PROBABILITY:
            foreign = rng.randint(1, members // 2)
            params["java_members"] = rng.randint(0, foreign)
            params["confluent_members"] = foreign - params["java_members"]
        return params
    if draw < CONSUMER_PROBABILITY + MIGRATION_PROBABILITY:
        migration: dict[str, Any] = {
            "protocol": "migration",
            "members": min(members, rng.randint(3, 5)),
            "assignor": rng.choice(MIGRATION_ASSIGNORS),
            "remote_assignor": rng.choice(REMOTE_ASSIGNORS),
            "java_members": 0,
        }
        if rng.random() < BACK_PROBABILITY:
            migration.update(protocol="migration-back", fault_window=BACK_WINDOW)
        # Java members: a draw of its own, after the others, so that a kgroup-only seed
        # keeps its schedule (a migration back's from a stream of its own too).
        stream = "mixed-migration" if migration["protocol"] == "migration" else "mixed-back"
        mixed = random.Random(f"{stream}:kafka:{seed}")
        if mixed.random() < MIXED_MIGRATION_PROBABILITY:
            migration["java_members"] = mixed.randint(1, migration["members"] // 2)
        room = migration["members"] // 2 - migration["java_members"]
        librdkafka = random.Random(f"confluent-{stream}:kafka:{seed}")
        eligible = room > 0 and migration["assignor"] == "range"
        if eligible and librdkafka.random() < CONFLUENT_MIGRATION_PROBABILITY:
            migration["confluent_members"] = librdkafka.randint(1, room)
        return migration
    return {}
