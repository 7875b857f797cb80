"""The chaos suite's cases (a broker and a seed), known bugs, and the session's totals."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ``(test, broker, seed)`` -> reason: a schedule that finds a kgroup bug, run as
#: ``xfail(strict=True)`` until the bug is fixed (see the report of issue 5).
#:
#: Kafka seed 98 (``--chaos-protocol migration-back``, not a default case) once failed
#: invariant 3: the first consumer-protocol members died of GROUP_ID_NOT_FOUND ("unsupported
#: custom assignor") while a follow-up-marked cooperative generation was current. Fixed by
#: deviation 19 (a refused join is retried); regression test:
#: ``test_an_online_upgrade_is_not_refused_while_a_cooperative_generation_awaits_its_follow_up``.
#:
#: Kafka seed 67 (``--chaos-protocol migration-back``, not a default case) once failed
#: invariant 2 ("no member leads"): its last consumer-protocol member, static, was replaced
#: by a classic one with its instance id, and Kafka converted the group back to classic
#: without a rebalance, so no member led or watched the partition counts. Fixed by
#: deviation 21 (a member whose JoinGroup named no leader watches them); regression test:
#: ``test_a_group_converted_back_by_a_static_replacement_takes_new_partitions``.
KNOWN_BUGS: dict[tuple[str, str, int], str] = {}


@dataclass(frozen=True)
class ChaosCase:
    """One parametrisation of a chaos test: a broker and a seed."""

    broker: str
    seed: int
    soak: bool = False
    #: GroupConsumers consuming and committing records (the schedule's ``records``)
    records: bool = False

    @property
    def test(self) -> str:
        return "test_soak" if self.soak else "test_chaos"

    def replay(self) -> str:
        slow = " --run-slow" if self.soak else ""
        records = " --chaos-records" if self.records else ""
        return (
            f'python -m pytest tests/chaos -k "{self.test} and {self.broker}" '
            f"--chaos-seed {self.seed}{records}{slow} -s"
        )


@dataclass
class Totals:
    """Every schedule run in this session: for the terminal summary and the JSON file."""

    schedules: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    #: runs where the broker stalled (tansu), and runs with notes
    stalled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(self, result: Any) -> None:
        self.schedules[result.schedule.broker] += 1
        self.faults.update(result.applied)
        self.lines.append(result.summary())
        if not result.ok:
            self.failed.append(f"{result.schedule.label}: {result.replay}")
        if result.broker_stalls:
            self.stalled.append(f"{result.schedule.label}: {result.replay}")
        self.notes += [f"{result.schedule.label}: {note}" for note in result.notes]

    def to_json(self) -> dict[str, Any]:
        return {
            "schedules": dict(self.schedules),
            "schedules_total": sum(self.schedules.values()),
            "faults": dict(sorted(self.faults.items())),
            "faults_total": sum(self.faults.values()),
            "failed": self.failed,
            "broker_stalled": self.stalled,
            "notes": self.notes,
            "runs": self.lines,
        }


TOTALS = Totals()


def merged_totals(paths: Iterable[Path]) -> Totals:
    """The totals of several sessions (pytest-xdist workers), from their JSON files."""
    merged = Totals()
    for path in paths:
        data = json.loads(path.read_text())
        merged.schedules.update(data["schedules"])
        merged.faults.update(data["faults"])
        merged.lines += data["runs"]
        merged.failed += data["failed"]
        merged.stalled += data["broker_stalled"]
        merged.notes += data["notes"]
    return merged


def write_summary(tr: Any, totals: Totals) -> None:
    """The terminal summary of the chaos runs: every run, the totals, what failed."""
    if not totals.lines:
        return
    tr.section("kgroup chaos")
    for line in totals.lines:
        tr.write_line(line)
    data = totals.to_json()
    per_broker = ", ".join(f"{b} {n}" for b, n in sorted(totals.schedules.items()))
    tr.write_line(f"schedules: {data['schedules_total']} ({per_broker})")
    faults = ", ".join(f"{k} {v}" for k, v in sorted(totals.faults.items()))
    tr.write_line(f"faults injected: {data['faults_total']} ({faults})")
    for line in totals.failed:
        tr.write_line(f"FAILED {line}")
    for line in totals.notes:
        tr.write_line(f"note: {line}")
    for line in totals.stalled:
        tr.write_line(f"broker stalled (not counted against kgroup) {line}")
