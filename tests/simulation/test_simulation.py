"""Deterministic simulation (issue 5): kgroup members against a model of the classic group
coordinator, in virtual time, with a seeded scheduler (``_world.py``, ``_model.py``).

Every schedule checks four invariants:

1. no partition is held by two members at the same time. A hold runs from the START of a
   member's on_partitions_assigned to the first of: the END of its on_partitions_revoked,
   the START of its on_partitions_lost, its ``member.lease_expired`` deadline, its crash
   (or its lease deadline, if that came first);
2. after the faults stop, the group becomes stable (the coordinator's group STABLE with every
   member slot live and joined, each member done with its rebalance and holding exactly what
   the broker assigned it, every partition held exactly once), and stays so for
   2 x session + max_poll, within ``Params.stable_bound_ms`` = J + S + 5R + 4H + 1 s
   (J JoinGroup timeout, S session, R rebalance timeout = max_poll, H heartbeat interval);
3. nothing escapes a member except the documented fatal FencedInstanceId. The simulation
   never runs two live processes with one instance id, so it comes from a static member's
   own older JoinGroup reaching the broker late, or from a coordinator reload that brings
   back an unpersisted older member id (seed 1379); the app then restarts the member;
4. the coordinator model's own consistency checks (``ClassicGroupModel.check``).

Counts: ``KGROUP_SIM_SEEDS`` (default 10 000) schedules from ``KGROUP_SIM_START`` (default
0) in the default run, on ``KGROUP_SIM_WORKERS`` (default 2) processes; ``KGROUP_SIM_SEED``
runs that one seed only; the ``slow`` soak (``--run-slow``) runs ``KGROUP_SIM_SOAK_SEEDS``
(default 200 000) more. ``-s`` prints the summary table. Replay a failure with
``python -m tests.simulation --seed N --trace``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import pytest

from ._world import FAULT_KINDS, run_schedule

ASSIGNORS = ("range", "roundrobin")


@dataclass
class Outcome:
    """What one schedule contributes to the summary (picklable, small)."""

    seed: int
    assignor: str
    failure: str | None
    faults: dict[str, int]
    events: dict[str, int]
    rebalances: int
    time_to_stable: float | None
    bound: float
    virtual_ms: float
    sim_events: int


def run_one(seed: int, assignor: str | None = None) -> Outcome:
    name = assignor or ASSIGNORS[seed % len(ASSIGNORS)]
    result = run_schedule(seed, assignor=name)
    return Outcome(
        seed=seed,
        assignor=name,
        failure=None if result.failure is None else str(result.failure),
        faults=dict(result.faults),
        events=dict(result.events),
        rebalances=result.rebalances,
        time_to_stable=result.time_to_stable,
        bound=result.params.stable_bound_ms,
        virtual_ms=result.virtual_ms,
        sim_events=result.sim_events,
    )


def _chunk(args: tuple[list[int], str | None]) -> list[Outcome]:
    seeds, assignor = args
    return [run_one(seed, assignor) for seed in seeds]


@dataclass
class Summary:
    schedules: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    rebalances: int = 0
    max_time_to_stable: float = 0.0
    max_share_of_bound: float = 0.0
    max_stable_seed: int | None = None
    virtual_ms: float = 0.0
    sim_events: int = 0
    wall_s: float = 0.0
    failures: list[Outcome] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        self.schedules += 1
        self.faults.update(outcome.faults)
        self.events.update(outcome.events)
        self.rebalances += outcome.rebalances
        self.virtual_ms += outcome.virtual_ms
        self.sim_events += outcome.sim_events
        if outcome.failure is not None:
            self.failures.append(outcome)
        elif outcome.time_to_stable is not None:
            if outcome.time_to_stable > self.max_time_to_stable:
                self.max_time_to_stable = outcome.time_to_stable
                self.max_stable_seed = outcome.seed
            share = outcome.time_to_stable / outcome.bound
            self.max_share_of_bound = max(self.max_share_of_bound, share)

    def table(self) -> str:
        rows = [
            ("schedules run", f"{self.schedules}"),
            ("failures", f"{len(self.failures)}"),
            ("wall time", f"{self.wall_s:.1f} s"),
            ("virtual time", f"{self.virtual_ms / 3_600_000:.1f} h"),
            ("simulation events", f"{self.sim_events}"),
            ("rebalances (join phases completed)", f"{self.rebalances}"),
            ("lease expirations", f"{self.events.get('lease_expired', 0)}"),
            (
                "FencedInstanceId, one process per id (app restarted)",
                f"{self.events.get('fenced_single_process', 0)}",
            ),
            (
                "max time to stable after faults stop",
                f"{self.max_time_to_stable:.0f} ms (seed {self.max_stable_seed})",
            ),
            ("max time to stable / bound", f"{self.max_share_of_bound:.2f}"),
        ]
        rows += [(f"faults: {kind}", f"{self.faults.get(kind, 0)}") for kind in FAULT_KINDS]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        for outcome in self.failures[:20]:
            lines.append(f"FAILED seed {outcome.seed} ({outcome.assignor}): {outcome.failure}")
            lines.append(
                f"  replay: python -m tests.simulation --seed {outcome.seed} --trace"
                f" --assignor {outcome.assignor}"
            )
        return "\n".join(lines)


def sweep(seeds: Iterable[int], workers: int = 1, assignor: str | None = None) -> Summary:
    seeds = list(seeds)
    summary = Summary()
    started = time.perf_counter()
    if workers <= 1 or len(seeds) < 200:
        outcomes: Iterable[Outcome] = (run_one(seed, assignor) for seed in seeds)
        for outcome in outcomes:
            summary.add(outcome)
    else:
        size = 250
        chunks = [(seeds[i : i + size], assignor) for i in range(0, len(seeds), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for result in pool.map(_chunk, chunks):
                for outcome in result:
                    summary.add(outcome)
    summary.wall_s = time.perf_counter() - started
    return summary


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if not value else int(value)


def _failure_message(summary: Summary) -> str:
    return "simulation invariant broken:\n" + summary.table()


def test_schedules() -> None:
    """The default volume: 10 000 schedules (about a minute on 2 workers)."""
    single = os.environ.get("KGROUP_SIM_SEED")
    if single:
        seeds: Iterable[int] = [int(single)]
    else:
        start = _env_int("KGROUP_SIM_START", 0)
        seeds = range(start, start + _env_int("KGROUP_SIM_SEEDS", 10_000))
    summary = sweep(seeds, _env_int("KGROUP_SIM_WORKERS", 2))
    print("\n" + summary.table())  # shown with -s
    assert not summary.failures, _failure_message(summary)


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_soak() -> None:
    """Far more schedules, after the default ones (``--run-slow``)."""
    start = _env_int("KGROUP_SIM_SOAK_START", 1_000_000)
    count = _env_int("KGROUP_SIM_SOAK_SEEDS", 200_000)
    summary = sweep(range(start, start + count), _env_int("KGROUP_SIM_WORKERS", 2))
    print("\n" + summary.table())  # shown with -s
    assert not summary.failures, _failure_message(summary)


@pytest.mark.parametrize("seed", [7, 13, 154])
def test_a_seed_replays_byte_for_byte(seed: int) -> None:
    first = run_schedule(seed, trace=True)
    second = run_schedule(seed, trace=True)
    digest = [hashlib.sha256("\n".join(r.trace).encode()).hexdigest() for r in (first, second)]
    assert digest[0] == digest[1], f"seed {seed} is not deterministic"
    assert len(first.trace) > 50


def test_a_seed_replays_in_another_process() -> None:
    """Hash randomisation (PYTHONHASHSEED) must not leak into a schedule."""
    import subprocess
    import sys

    def digest_of(hashseed: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "tests.simulation", "--seed", "13"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": hashseed},
            check=False,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        line = next(x for x in out.stdout.splitlines() if "trace_sha256=" in x)
        return line.split("trace_sha256=")[1].split()[0]

    assert digest_of("1") == digest_of("2")
