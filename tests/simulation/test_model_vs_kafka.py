"""Keep the model honest: scripted scenarios run both in the simulation and on Apache Kafka.

Each test runs one scenario twice: in the simulated world (``_world.py`` against the
coordinator model of ``_model.py``, fixed seed, no faults but the scripted ones) and on a
real Kafka broker (``kafka_broker``, real ``GroupMember``s through ``MemberGroup``). Then it
compares what a member can observe, which must agree:

- the assignment map (static members: instance id -> partitions; the range assignor orders
  static members by instance id, so the map is comparable; dynamic members: the multiset of
  partition sets, since member ids are random);
- whether the event made a new generation on the survivors (delta > 0 or == 0, never the
  absolute numbers);
- for a graceful leave, that the survivors took over before the session timeout.

Where the two disagree the broker wins and the model gets fixed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kgroup import GroupConfig
from kgroup.testing import KafkaBroker
from kgroup.testing._members import MemberGroup, MemberRunner

from ._groups import plain_kind
from ._process import Process
from ._world import Params, World, stable_state

SESSION_MS = 6_000
HEARTBEAT_MS = 500
MAX_POLL_MS = 30_000
REQUEST_TIMEOUT_MS = 10_000
PARTITIONS = 6
SEED = 4_242
RESTART_AFTER_MS = 1_000  # well within the session timeout

Assignment = dict[str, frozenset[int]]


@dataclass
class Observed:
    """What one side saw in one scenario."""

    before: Assignment
    after: Assignment
    new_generation: bool  # the survivors' generation moved
    took_ms: float  # from the scripted event until the survivors were stable again


def shape(assignment: Assignment) -> list[tuple[int, ...]]:
    """The assignment without its keys (for dynamic members, whose ids are random)."""
    return sorted(tuple(sorted(parts)) for parts in assignment.values())


# ---------------------------------------------------------------------------------------------
# The simulated side: a scripted driver over the world's classes
# ---------------------------------------------------------------------------------------------


class ScriptedWorld:
    """The simulated world with no random faults: members start, crash, restart and close
    only when the test says so. ``instances[i]`` is slot ``m{i}``'s instance id (None:
    dynamic)."""

    def __init__(self, instances: list[str | None], seed: int = SEED) -> None:
        params = Params(
            seed=seed,
            kind=plain_kind("range", len(instances)),
            members=len(instances),
            static=tuple(iid is not None for iid in instances),
            topics=(("t0", PARTITIONS),),
            nodes=1,  # the real broker is single-node
            session_ms=SESSION_MS,
            heartbeat_ms=HEARTBEAT_MS,
            max_poll_ms=MAX_POLL_MS,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            initial_delay_ms=0,  # group.initial.rebalance.delay.ms=0 on the test broker
            fault_window_ms=0.0,
            fault_events=0.0,
            p_drop=0.0,
            p_duplicate=0.0,
            p_delay=0.0,
            p_error=0.0,
            latency_ms=1.0,
        )
        self.world = World(params, random.Random(seed), tracing=True)
        for i, iid in enumerate(instances):
            slot = f"m{i}"
            self.world.statics[slot] = iid
            self.world.slot_assignors[slot] = ("range",)
            self.world.slots[slot] = None
            self.world.sched.at(i * 100.0, self.world.start, slot)

    @property
    def now(self) -> float:
        return self.world.now

    def proc(self, slot: str) -> Process:
        proc = self.world.slots[slot]
        assert proc is not None, f"{slot} is not running"
        return proc

    def _check(self) -> None:
        if self.world.failure is not None:
            raise AssertionError(f"{self.world.failure}\n" + "\n".join(self.world.trace[-60:]))

    def run_until(self, condition: Callable[[], bool], timeout_ms: float, what: str) -> float:
        """Advance virtual time in 10 ms steps until ``condition()``; the ms it took."""
        start = self.now
        t = start
        while True:
            self._check()
            if condition():
                return self.now - start
            if self.now - start > timeout_ms:
                raise AssertionError(
                    f"simulation: {what} not reached within {timeout_ms:.0f} ms "
                    f"({stable_state(self.world)})\n" + "\n".join(self.world.trace[-60:])
                )
            t += 10.0
            self.world.sched.run_until(t)

    def wait_stable(self, timeout_ms: float = 60_000) -> float:
        return self.run_until(lambda: stable_state(self.world) is None, timeout_ms, "stable")

    def advance(self, ms: float) -> None:
        self.world.sched.run_until(self.now + ms)
        self._check()

    def assignment(self) -> Assignment:
        result: Assignment = {}
        for slot, proc in self.world.slots.items():
            if proc is not None:
                key = proc.instance_id or slot
                result[key] = frozenset(tp.partition for tp in proc.owned)
        return result

    def generations(self) -> dict[str, int]:
        return {
            slot: proc.core.generation.generation_id
            for slot, proc in self.world.slots.items()
            if proc is not None
        }

    def crash(self, slot: str, *, forever: bool) -> None:
        self.proc(slot).crash()
        if forever:
            del self.world.slots[slot]  # stable_state then waits for the others only
        else:
            self.world.slots[slot] = None

    def restart(self, slot: str) -> None:
        self.world.start(slot)  # a new incarnation, same instance id

    def close(self, slot: str) -> None:
        proc = self.proc(slot)
        closed = proc.close()
        self.run_until(lambda: closed.done, REQUEST_TIMEOUT_MS, "close")
        del self.world.slots[slot]


def survivors_moved(before: dict[str, int], after: dict[str, int]) -> bool:
    common = set(before) & set(after)
    assert common, "no survivor to compare"
    deltas = {after[s] - before[s] for s in common}
    assert deltas == {0} or 0 not in deltas, f"survivors disagree: {before} -> {after}"
    return max(deltas) > 0


# ---------------------------------------------------------------------------------------------
# The Kafka side
# ---------------------------------------------------------------------------------------------


def kafka_config(broker: KafkaBroker, group: str, topic: str, **overrides: Any) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": group,
        "topics": [topic],
        "assignors": ["range"],
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "max_poll_interval_ms": MAX_POLL_MS,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
    }
    values.update(overrides)
    return GroupConfig(**values)


def kafka_assignment(runners: list[MemberRunner]) -> Assignment:
    return {
        (r.config.group_instance_id or r.name): frozenset(tp.partition for tp in r.assignment)
        for r in runners
    }


def kafka_generations(runners: list[MemberRunner]) -> dict[str, int]:
    return {r.name: r.member.generation.generation_id for r in runners}


async def kafka_start(
    group: MemberGroup, broker: KafkaBroker, name: str, topic: str, instances: list[str | None]
) -> list[MemberRunner]:
    runners = []
    for iid in instances:
        runners.append(await group.start(kafka_config(broker, name, topic, group_instance_id=iid)))
    await group.wait_stable(topic, PARTITIONS, members=runners, timeout=30)
    return runners


STATIC = ["i0", "i1", "i2"]
EXPECTED = {
    "i0": frozenset({0, 1}),
    "i1": frozenset({2, 3}),
    "i2": frozenset({4, 5}),
}


# ---------------------------------------------------------------------------------------------
# Scenario 1: three static members join
# ---------------------------------------------------------------------------------------------


def sim_three_static_join() -> Observed:
    sim = ScriptedWorld(list(STATIC))
    took = sim.wait_stable()
    return Observed(before={}, after=sim.assignment(), new_generation=True, took_ms=took)


async def kafka_three_static_join(broker: KafkaBroker, group_id: str, topic: str) -> Observed:
    async with MemberGroup() as group:
        started = time.monotonic()
        runners = await kafka_start(group, broker, group_id, topic, list(STATIC))
        took = (time.monotonic() - started) * 1000
        return Observed({}, kafka_assignment(runners), True, took)


async def test_three_static_members_join(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    sim = sim_three_static_join()
    kafka = await kafka_three_static_join(kafka_broker, unique_group, make_topic(PARTITIONS))
    assert sim.after == kafka.after == EXPECTED


# ---------------------------------------------------------------------------------------------
# Scenario 2: a static member crashes and comes back within the session timeout
# ---------------------------------------------------------------------------------------------


def sim_static_restart_within_session() -> Observed:
    sim = ScriptedWorld(list(STATIC))
    sim.wait_stable()
    before, gens = sim.assignment(), sim.generations()
    sim.crash("m1", forever=False)
    started = sim.now
    sim.advance(RESTART_AFTER_MS)
    sim.restart("m1")
    sim.wait_stable()
    # Stay past the old incarnation's session timeout: nothing may expire it later.
    sim.advance(SESSION_MS + 2 * HEARTBEAT_MS)
    sim.wait_stable()
    after = sim.generations()
    moved = survivors_moved({s: gens[s] for s in ("m0", "m2")}, after)
    return Observed(before, sim.assignment(), moved, sim.now - started)


async def kafka_static_restart_within_session(
    broker: KafkaBroker, group_id: str, topic: str
) -> Observed:
    async with MemberGroup() as group:
        runners = await kafka_start(group, broker, group_id, topic, list(STATIC))
        before, gens = kafka_assignment(runners), kafka_generations(runners)
        started = time.monotonic()
        await runners[1].crash()
        await asyncio.sleep(RESTART_AFTER_MS / 1000)
        restarted = await group.start(
            kafka_config(broker, group_id, topic, group_instance_id=STATIC[1])
        )
        current = [runners[0], restarted, runners[2]]
        await group.wait_stable(topic, PARTITIONS, members=current, timeout=30)
        await asyncio.sleep((SESSION_MS + 2 * HEARTBEAT_MS) / 1000)
        await group.wait_stable(topic, PARTITIONS, members=current, timeout=30)
        survivors = [runners[0], runners[2]]
        moved = survivors_moved(
            {r.name: gens[r.name] for r in survivors}, kafka_generations(survivors)
        )
        took = (time.monotonic() - started) * 1000
        return Observed(before, kafka_assignment(current), moved, took)


async def test_static_member_restarts_within_session(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    sim = sim_static_restart_within_session()
    topic = make_topic(PARTITIONS)
    kafka = await kafka_static_restart_within_session(kafka_broker, unique_group, topic)
    assert sim.before == kafka.before == EXPECTED
    assert sim.after == kafka.after == EXPECTED
    assert sim.new_generation == kafka.new_generation, (sim, kafka)
    assert not kafka.new_generation  # Kafka: the static member is replaced in place


# ---------------------------------------------------------------------------------------------
# Scenario 3: a static member crashes and stays down past the session timeout
# ---------------------------------------------------------------------------------------------


def sim_static_crash_for_good() -> Observed:
    sim = ScriptedWorld(list(STATIC))
    sim.wait_stable()
    before, gens = sim.assignment(), sim.generations()
    sim.crash("m1", forever=True)
    took = sim.wait_stable()
    moved = survivors_moved(gens, sim.generations())
    return Observed(before, sim.assignment(), moved, took)


async def kafka_static_crash_for_good(broker: KafkaBroker, group_id: str, topic: str) -> Observed:
    async with MemberGroup() as group:
        runners = await kafka_start(group, broker, group_id, topic, list(STATIC))
        before, gens = kafka_assignment(runners), kafka_generations(runners)
        started = time.monotonic()
        await runners[1].crash()
        survivors = [runners[0], runners[2]]

        def rebalanced() -> bool:  # both survivors past their old generation (no assert:
            # one of them may get there first)
            now = kafka_generations(survivors)
            return all(r.stable and now[r.name] > gens[r.name] for r in survivors)

        await group.wait_until(rebalanced, timeout=30, what="survivors in a new generation")
        await group.wait_stable(topic, PARTITIONS, members=survivors, timeout=30)
        took = (time.monotonic() - started) * 1000
        moved = survivors_moved(
            {r.name: gens[r.name] for r in survivors}, kafka_generations(survivors)
        )
        return Observed(before, kafka_assignment(survivors), moved, took)


async def test_static_member_crashes_past_session(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    sim = sim_static_crash_for_good()
    kafka = await kafka_static_crash_for_good(kafka_broker, unique_group, make_topic(PARTITIONS))
    expected = {"i0": frozenset({0, 1, 2}), "i2": frozenset({3, 4, 5})}
    assert sim.before == kafka.before == EXPECTED
    assert sim.after == kafka.after == expected
    assert sim.new_generation and kafka.new_generation
    # Only the session timeout removes a silent static member, in both.
    assert sim.took_ms >= SESSION_MS * 0.8, sim
    assert kafka.took_ms >= SESSION_MS * 0.8, kafka


# ---------------------------------------------------------------------------------------------
# Scenario 4: a dynamic member leaves gracefully
# ---------------------------------------------------------------------------------------------


def sim_dynamic_leave() -> Observed:
    sim = ScriptedWorld([None, None, None])
    sim.wait_stable()
    before, gens = sim.assignment(), sim.generations()
    started = sim.now
    sim.close("m2")
    sim.wait_stable()
    moved = survivors_moved(gens, sim.generations())
    return Observed(before, sim.assignment(), moved, sim.now - started)


async def kafka_dynamic_leave(broker: KafkaBroker, group_id: str, topic: str) -> Observed:
    async with MemberGroup() as group:
        runners = await kafka_start(group, broker, group_id, topic, [None, None, None])
        before, gens = kafka_assignment(runners), kafka_generations(runners)
        survivors = runners[:2]
        started = time.monotonic()
        await runners[2].close()
        await group.wait_stable(topic, PARTITIONS, members=survivors, timeout=30)
        took = (time.monotonic() - started) * 1000
        moved = survivors_moved(
            {r.name: gens[r.name] for r in survivors}, kafka_generations(survivors)
        )
        return Observed(before, kafka_assignment(survivors), moved, took)


async def test_dynamic_member_leaves_gracefully(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    sim = sim_dynamic_leave()
    kafka = await kafka_dynamic_leave(kafka_broker, unique_group, make_topic(PARTITIONS))
    assert shape(sim.before) == shape(kafka.before) == [(0, 1), (2, 3), (4, 5)]
    assert shape(sim.after) == shape(kafka.after) == [(0, 1, 2), (3, 4, 5)]
    assert sim.new_generation and kafka.new_generation
    # LeaveGroup rebalances at once: well before the session timeout, in both.
    assert sim.took_ms < SESSION_MS / 2, sim
    assert kafka.took_ms < SESSION_MS / 2, kafka
