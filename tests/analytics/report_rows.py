"""Hand-built rows of the analytics tables (contract v1), for the HTML report's tests.

:func:`make_tables` builds a consistent set of tables for ``groups`` groups of ``members``
members: generations one after another, the partitions dealt round-robin in each, a
rebalance (and a gap in ownership) between generations, heartbeat health and histograms,
churn, and ``overlaps`` overlaps in the first group. It is seeded, so the same arguments
give the same rows. Timestamps are RFC 3339 strings with microseconds and ``Z``, as the
pipeline hands them over.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
# heartbeat_histogram bucket edges (ms), log-spaced; the last bucket is open.
EDGES: tuple[float, ...] = (0, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)

Rows = list[dict[str, Any]]


def ts(seconds: float) -> str:
    """``T0 + seconds`` as the pipeline writes it: RFC 3339, microseconds, ``Z``."""
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def uid(group: int, member: int) -> str:
    return f"host-{member % 7}:{1000 + member}:consumer-{group}-{member}"


def make_tables(
    groups: int = 2,
    members: int = 4,
    *,
    rebalances: int = 3,
    partitions: int | None = None,
    overlaps: int = 0,
    seconds: float = 600.0,
    seed: int = 7,
) -> dict[str, Rows]:
    rng = random.Random(seed)
    t: dict[str, Rows] = {
        name: []
        for name in (
            "generations", "ownership", "rebalances", "rebalance_stats", "unavailability",
            "unavailability_by_rebalance", "churn", "heartbeat_health", "heartbeat_failures",
            "heartbeat_histogram", "overlaps",
        )
    }  # fmt: skip
    n_parts = partitions if partitions is not None else 2 * members
    step = seconds / (rebalances + 1)
    for g in range(groups):
        group = f"group-{g:03d}"
        topic = f"orders-{g % 3}"
        durations: list[float] = []
        for gen in range(rebalances + 1):
            start = gen * step + (0.0 if gen == 0 else 2.0)
            end = (gen + 1) * step
            t["generations"].append(
                {
                    "group": group,
                    "generation": gen + 1,
                    "first_ts": ts(start),
                    "last_ts": ts(end),
                    "leader": uid(g, 0),
                    "members": members,
                }
            )
            for p in range(n_parts):
                m = (p + gen) % members
                last = gen == rebalances
                t["ownership"].append(
                    {
                        "group": group,
                        "member_uid": uid(g, m),
                        "member_id": f"consumer-{g}-{m}",
                        "host": f"host-{m % 7}",
                        "topic": topic,
                        "partition": p,
                        "from_ts": ts(start),
                        "to_ts": ts(end),
                        "seconds": end - start,
                        "end": "open" if last else "revoked",
                    }
                )
            if gen == rebalances:
                break
            rb_start, duration = end, 2.0 + rng.random()
            durations.append(duration)
            rid = gen + 1
            t["rebalances"].append(
                {
                    "group": group,
                    "rebalance_id": rid,
                    "start_ts": ts(rb_start),
                    "end_ts": ts(rb_start + duration),
                    "duration_s": duration,
                    "reason": "member joined" if gen % 2 else "heartbeat session expired",
                    "members": members,
                    "complete": True,
                }
            )
            t["unavailability_by_rebalance"].append(
                {
                    "group": group,
                    "rebalance_id": rid,
                    "topic": topic,
                    "partition_seconds": 2.0 * n_parts,
                    "partitions": n_parts,
                }
            )
            for p in range(min(n_parts, 4)):
                t["unavailability"].append(
                    {
                        "group": group,
                        "topic": topic,
                        "partition": p,
                        "rebalance_id": rid,
                        "from_ts": ts(rb_start),
                        "to_ts": ts(rb_start + 2.0),
                        "seconds": 2.0,
                        "previous_owner": uid(g, (p + gen) % members),
                        "next_owner": uid(g, (p + gen + 1) % members),
                    }
                )
        durations.sort()
        t["rebalance_stats"].append(
            {
                "group": group,
                "rebalances": len(durations),
                "p50_s": durations[len(durations) // 2] if durations else None,
                "p95_s": durations[-1] if durations else None,
                "max_s": durations[-1] if durations else None,
            }
        )
        for m in range(members):
            flaps = rng.randrange(0, 5)
            t["churn"].append(
                {
                    "group": group,
                    "member_uid": uid(g, m),
                    "member_id": f"consumer-{g}-{m}",
                    "instance_id": None,
                    "host": f"host-{m % 7}",
                    "pid": 1000 + m,
                    "joins": 1 + flaps,
                    "leaves": 1,
                    "evictions": 0,
                    "fencings": 0,
                    "lease_expiries": 0,
                    "crashes": 0,
                    "first_ts": ts(0),
                    "last_ts": ts(seconds),
                    "flaps": 1 + flaps,
                }
            )
            t["heartbeat_health"].append(
                {
                    "group": group,
                    "member_uid": uid(g, m),
                    "host": f"host-{m % 7}",
                    "heartbeats": int(seconds / 3),
                    "rtt_p50_ms": 1.5 + rng.random(),
                    "rtt_p99_ms": 8 + 10 * rng.random(),
                    "late_p50_ms": 0.2 + rng.random(),
                    "late_p99_ms": 5 + 100 * rng.random(),
                    "failures": m % 2,
                    "session_expiries": 0,
                    "stalls": m % 3,
                    "max_stall_ms": 120.0 * (m % 3),
                }
            )
            if m % 2:
                t["heartbeat_failures"].append(
                    {"group": group, "member_uid": uid(g, m), "error": "REQUEST_TIMED_OUT",
                     "count": 1}
                )  # fmt: skip
        for metric in ("rtt", "late"):
            for i, lo in enumerate(EDGES):
                hi = EDGES[i + 1] if i + 1 < len(EDGES) else None
                t["heartbeat_histogram"].append(
                    {
                        "group": group,
                        "metric": metric,
                        "bucket_lo_ms": lo,
                        "bucket_hi_ms": hi,
                        "count": int(members * 40 / (1 + abs(i - 4))),
                    }
                )
    for k in range(overlaps if groups else 0):
        at = 0.5 * step + k
        t["overlaps"].append(
            {
                "group": "group-000",
                "topic": "orders-0",
                "partition": k % n_parts,
                "member_a": uid(0, 0),
                "member_b": uid(0, 1 % members),
                "host_a": "host-0",
                "host_b": f"host-{1 % members % 7}",
                "from_ts": ts(at),
                "to_ts": ts(at + 0.8),
                "seconds": 0.8,
                "skew_allowance_s": 0.25,
            }
        )
    events = len(t["ownership"]) * 3 + sum(r["heartbeats"] for r in t["heartbeat_health"])
    t["summary"] = [
        {
            "events": events,
            "bad_records": 3,
            "duplicates": 1,
            "out_of_order": 2,
            "groups": groups,
            "members": groups * members,
            "first_ts": ts(0),
            "last_ts": ts(seconds),
            "job_seconds": 12.5,
        }
    ]
    return t
