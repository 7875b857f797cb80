"""End to end: real kgroup members on Apache Kafka write their event logs; the report on
those logs agrees with what the test did.

Three members join; the event loop stalls for 1.2 s (every member's heartbeat runs late);
one member leaves gracefully, one crashes (``abort()``: no LeaveGroup, no callbacks), the
survivor takes every partition after the session timeout and closes. The report must show
the three members and the crash, the rebalances, the crashed member's partitions without
an owner for about the session timeout, the stall, no overlap, no bad record, and every
table equal to the reference's. Then the test forces an overlap (the crashed member's log
goes on after the survivor took its partitions over), which the report must find.

The members run under ``asyncio.run`` first; Spark is called after it returns.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kgroup.analytics._judge import judge, judged_events
from kgroup.analytics._members import members
from kgroup.analytics._ownership import ownership
from kgroup.analytics._pipeline import collect_rows, run_pipeline
from kgroup.analytics._read import parse, read_files
from kgroup.analytics._safety import overlaps
from kgroup.testing import KafkaBroker
from kgroup.testing._members import MemberGroup
from tests.analytics._compare import assert_tables_equal
from tests.analytics._logs import fmt_ts
from tests.analytics._reference import reference_tables, source_lines
from tests.integration.conftest import SESSION_MS, group_config

# One worker runs every Spark test (one JVM; see the Makefile's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("spark")

PARTITIONS = 6
STALL_S = 1.2


async def scenario(bootstrap: str, topic: str, group_id: str, logs: Path) -> dict[str, str]:
    """Run the members; return each one's role by its last member id."""
    cfg = group_config(bootstrap, group_id, topic, event_log=logs, loop_stall_warn_ms=300)
    async with MemberGroup() as group:
        survivor, crashing, leaving = [await group.start(cfg) for _ in range(3)]
        await group.wait_stable(topic, PARTITIONS)
        time.sleep(STALL_S)  # noqa: ASYNC251 - on purpose: the event loop stalls
        await group.wait_stable(topic, PARTITIONS)
        # Every member heartbeats before one leaves and one crashes (on a loaded machine
        # the rebalances can take a member's whole life before its first heartbeat).
        await group.wait_until(
            lambda: all(
                r.member.stats().heartbeats_acknowledged > 0 for r in (survivor, crashing, leaving)
            ),
            timeout=60,
            what="a heartbeat answered for every member",
        )
        roles = {leaving.member.member_id: "leaving", crashing.member.member_id: "crashing"}
        await leaving.close()
        await group.wait_stable(topic, PARTITIONS, members=[survivor, crashing])
        await crashing.crash()
        await group.wait_stable(
            topic, PARTITIONS, members=[survivor], timeout=SESSION_MS / 1000 + 60
        )
        roles[survivor.member.member_id] = "survivor"
        await survivor.close()
    return roles


def test_report_on_real_members(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    unique_group: str,
    tmp_path: Path,
) -> None:
    topic = make_topic(PARTITIONS)
    logs = tmp_path / "logs"
    roles = asyncio.run(scenario(kafka_broker.bootstrap, topic, unique_group, logs))
    got = run_pipeline(
        spark,
        read_files(spark, [str(logs)]),
        out=str(tmp_path / "out"),
        clock_skew_s=0.1,
        numbered_by_pos=False,
        progress=lambda _t: None,
    )
    tables = got.tables
    assert_tables_equal(tables, reference_tables(source_lines([str(logs)])))
    assert got.summary["bad_records"] == 0 and got.summary["groups"] == 1
    churn = {roles[r["member_id"]]: r for r in tables["churn"]}
    assert set(churn) == {"survivor", "crashing", "leaving"}
    assert [churn[k]["crashes"] for k in ("survivor", "crashing", "leaving")] == [0, 1, 0]
    assert churn["leaving"]["leaves"] >= 1 and churn["survivor"]["joins"] >= 3
    uid = {role: row["member_uid"] for role, row in churn.items()}
    # Rebalances: the joins, the leave, the crash (and the survivor's close at the end).
    rebalances = tables["rebalances"]
    assert len(rebalances) >= 3
    assert all(r["complete"] for r in rebalances[:3])
    # The crashed member's partitions had no owner from its last event until the survivor
    # took them: about the session timeout, and not much longer.
    crashed_at = churn["crashing"]["last_ts"]
    after_crash = [u for u in tables["unavailability"] if u["from_ts"] == crashed_at]
    assert after_crash and all(u["previous_owner"] == uid["crashing"] for u in after_crash)
    assert all(u["next_owner"] == uid["survivor"] for u in after_crash)
    session_s = SESSION_MS / 1000
    assert all(0.5 * session_s <= u["seconds"] <= session_s + 10 for u in after_crash)
    assert all(u["rebalance_id"] is not None for u in after_crash)
    # The stall: seen by the members as late heartbeats.
    health = {r["member_uid"]: r for r in tables["heartbeat_health"]}
    stalls = [(h["stalls"], h["max_stall_ms"]) for h in health.values()]
    assert any(n >= 1 and 300 <= (worst or 0) <= STALL_S * 1000 + 500 for n, worst in stalls), (
        stalls
    )
    assert all(h["heartbeats"] > 0 for h in health.values())
    assert tables["overlaps"] == []

    # Forced overlap: the crashed member's log goes on 2 s past the survivor's takeover (to
    # after the survivor's close): its claims overlap the survivor's from the takeover on.
    forced = tmp_path / "forced"
    shutil.copytree(logs, forced)
    own = [o for o in tables["ownership"] if o["member_uid"] == uid["survivor"]]
    takeover = max(o["from_ts"] for o in own)
    append_after(forced, uid["crashing"], takeover, seconds=2.0)
    judged = judge(parse(read_files(spark, [str(forced)])))
    # The survivor closes soon after its takeover, so the overlap is short: no allowance.
    intervals = ownership(judged_events(judged), members(judged))
    found = collect_rows(overlaps(intervals, 0.0), "overlaps")
    assert found, "the forced overlap was not found"
    assert {(r["member_a"], r["member_b"]) for r in found} == {(uid["crashing"], uid["survivor"])}
    assert all(r["from_ts"] == takeover and r["seconds"] > 0 for r in found)


def append_after(logs: Path, member_uid: str, after_ts: str, seconds: float) -> None:
    """Append to ``member_uid``'s log file one more heartbeat, ``seconds`` after
    ``after_ts``."""
    last: dict[str, Any] | None = None
    where: Path | None = None
    for path in sorted(logs.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["member_uid"] == member_uid and (last is None or event["seq"] > last["seq"]):
                last, where = event, path
    assert last is not None and where is not None
    from datetime import UTC, datetime

    base = datetime.strptime(after_ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    us = int(base.timestamp()) * 1_000_000 + base.microsecond + int(seconds * 1_000_000)
    extra = {
        **{k: last[k] for k in ("v", "member_uid", "group", "host", "pid", "client_id")},
        "seq": last["seq"] + 1,
        "ts": fmt_ts(us),
        "event": "member.heartbeat_ok",
        "hb_rtt_ms": 1.0,
    }
    with where.open("a") as handle:
        handle.write(json.dumps(extra) + "\n")
