"""Heartbeat punctuality under a busy application loop, measured from outside the client.

    python benchmarks/heartbeat.py [--broker tansu|kafka] [--slices 0,10,50,200]
                                   [--phase-s 20] [--repeat 1] [--json results.json]

The broker advertises a relay (``_bench.Relay``) that every client connection goes through;
it reads whole Kafka request frames (4-byte size, api_key, api_version, correlation id,
client id, ...) and stamps each Heartbeat (API key 12) and JoinGroup (11) on arrival, with
the group, member id and generation it carries, plus each Heartbeat response's error code.

Per client (``kgroup`` default mode, ``kgroup-isolated`` = ``isolate_heartbeat=True``,
``aiokafka``, ``confluent-aio``), on a fresh 2-partition topic and group:

1. The subject (``_proc.py heartbeat``) joins; a watcher member of the same client
   (``_proc.py member``, its own process) joins the same group; both hold one partition.
2. For each slice length S in ``--slices`` the subject's loop spins the CPU S ms at a time,
   back to back, for ``--phase-s`` seconds (S = 0: an idle baseline). Lateness of one
   heartbeat = the gap since the subject's previous heartbeat (both inside the phase) minus
   the configured heartbeat interval; p50 / p99 per phase.
3. The subject's loop is blocked once with ``time.sleep(2 x session timeout)``. It
   *survived* if, until ``--observe-s`` after the block, nobody in the group sent a
   JoinGroup, no Heartbeat of the group was answered with an error, the subject's
   heartbeats after the block carry the member id and generation of its last one before
   it, and neither member's rebalance callbacks ran.

Every process started here, the relay and the broker are stopped on the way out (also on
Ctrl-C or SIGTERM); every wait has a deadline.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (
    API_HEARTBEAT,
    API_JOIN_GROUP,
    Proc,
    Procs,
    Relay,
    Request,
    client_args,
    fmt,
    install_interrupts,
    log,
    machine,
    make_broker,
    percentile,
    render_table,
    where,
    write_json,
)

CLIENTS = ("kgroup", "kgroup-isolated", "aiokafka", "confluent-aio")
BASE = "aiokafka"
WATCHER_CLIENT = {"kgroup-isolated": "kgroup"}
CHANGES = ("assigned", "revoked", "lost")


def owned(p: Proc) -> list[int] | None:
    changes = [e for e in p.events if e.get("event") in CHANGES]
    return None if not changes else list(changes[-1].get("partitions", []))


def run_client(
    procs: Procs, broker: Any, relay: Relay, client: str, rep: int, a: argparse.Namespace
) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:6]
    topic = group = f"hb-{client}-{rep}-{suffix}"
    broker.create_topic(topic, 2)
    subject_name, watcher_name = f"hb-subject-{client}-{rep}", f"hb-watch-{client}-{rep}"
    common = ["--bootstrap", relay.address, "--group", group, "--topic", topic]
    block_s = a.block_factor * a.session_ms / 1000.0
    subject_args = client_args(
        a,
        client=client,
        name=subject_name,
        slices=a.slices,
        phase_s=a.phase_s,
        block_s=block_s,
        observe_s=a.observe_s,
        kgroup_api=a.kgroup_api,
        slice_jitter=a.slice_jitter,
        seed=a.seed + rep,
    )
    subject = procs.spawn(["heartbeat", *common, *subject_args], subject_name)
    started: list[Proc] = [subject]
    out: dict[str, Any] = {"client": client, "repeat": rep, "group": group, "block_s": block_s}
    try:
        ok, why = procs.wait(lambda: bool(owned(subject)), a.deadline, watch=[subject])
        if not ok:
            return {**out, "ok": False, "reason": f"subject join: {why}"}
        watcher_args = client_args(a, client=WATCHER_CLIENT.get(client, client), name=watcher_name)
        watcher = procs.spawn(["member", *common, *watcher_args], watcher_name)
        started.append(watcher)
        ok, why = procs.wait(
            lambda: len(owned(subject) or []) == 1 and len(owned(watcher) or []) == 1,
            a.deadline,
            watch=[subject, watcher],
        )
        if not ok:
            return {**out, "ok": False, "reason": f"watcher join: {why}"}
        time.sleep(a.settle)  # a few heartbeats of the stable group before the phases
        subject.send("go")
        total = len(a.slice_list) * a.phase_s + block_s + a.observe_s + a.deadline
        ok, why = procs.wait(
            lambda: subject.find("observed") is not None, total, watch=[subject, watcher]
        )
        if not ok:
            return {**out, "ok": False, "reason": f"run: {why}"}
        out.update(analyse(relay.snapshot(), subject, watcher, group, subject_name, a))
        out["ok"] = True
        return out
    finally:
        procs.stop(started)


def analyse(
    requests: list[Request],
    subject: Proc,
    watcher: Proc,
    group: str,
    subject_name: str,
    a: argparse.Namespace,
) -> dict[str, Any]:
    interval = a.heartbeat_ms / 1000.0
    mine = sorted(
        (
            r
            for r in requests
            if r.api_key == API_HEARTBEAT and r.group_id == group and r.client_id == subject_name
        ),
        key=lambda r: r.t,
    )
    phases: dict[str, Any] = {}
    starts = subject.all("phase")
    ends = subject.all("phase_end")
    for start, end in zip(starts, ends, strict=False):
        t0, t1 = float(start["t"]), float(end["t"])
        inside = [r.t for r in mine if t0 <= r.t <= t1]
        gaps = [b - x for x, b in itertools.pairwise(inside)]
        late = [1000.0 * (g - interval) for g in gaps]
        phases[fmt_slice(start["slice_ms"])] = {
            "heartbeats": len(inside),
            "lateness_ms": late,
            "p50_ms": percentile(late, 0.50),
            "p99_ms": percentile(late, 0.99),
            "max_ms": max(late) if late else None,
            "early": sum(1 for g in gaps if g < 0.9 * interval),
            "steps": end.get("steps"),
            "kgroup_stats": end.get("stats"),
        }
    block0 = float((subject.find("block_start") or {})["t"])
    block1 = float((subject.find("block_end") or {})["t"])
    observed = subject.find("observed") or {}
    t_end = float(observed["t"])
    before = [r for r in mine if r.t < block0]
    during = [r.t for r in mine if block0 <= r.t <= block1]
    after = [r for r in mine if block1 < r.t <= t_end]
    last = before[-1] if before else None
    same_generation = (
        last is not None
        and bool(after)
        and all(r.generation == last.generation and r.member_id == last.member_id for r in after)
    )
    joins = [
        r
        for r in requests
        if r.api_key == API_JOIN_GROUP and r.group_id == group and block0 <= r.t <= t_end
    ]
    errors = sorted(
        {
            int(r.error_code)
            for r in requests
            if r.api_key == API_HEARTBEAT
            and r.group_id == group
            and block0 <= r.t <= t_end
            and r.error_code not in (None, 0)
        }
    )
    callbacks = {
        p.name: [e["event"] for e in p.events if e.get("event") in CHANGES and e["t"] >= block0]
        for p in (subject, watcher)
    }
    # The longest silence around the block: from the last heartbeat before it, through
    # those during it, to the first one after it.
    stamps = [*([last.t] if last else []), *during, *([after[0].t] if after else [])]
    gaps_in_block = [b - x for x, b in itertools.pairwise(stamps)]
    survived = same_generation and not joins and not errors and not any(callbacks.values())
    return {
        "phases": phases,
        "heartbeats_total": len(mine),
        "block": {
            "survived": survived,
            "same_generation": same_generation,
            "generation_before": None if last is None else last.generation,
            "generations_after": sorted({r.generation for r in after if r.generation is not None}),
            "heartbeats_during_block": len(during),
            "max_gap_in_block_s": max(gaps_in_block) if gaps_in_block else None,
            "join_requests_after": len(joins),
            "heartbeat_errors_after": errors,
            "callbacks_after": callbacks,
            "kgroup_stats": observed.get("stats"),
        },
    }


def fmt_slice(ms: Any) -> str:
    return f"{float(ms):g}"


# --- output --------------------------------------------------------------------------------------


def pooled(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """All repetitions of one client: lateness samples pooled per slice; survival counted."""
    good = [s for s in samples if s.get("ok")]
    slices: dict[str, list[float]] = {}
    early: dict[str, int] = {}
    for s in good:
        for name, ph in s["phases"].items():
            slices.setdefault(name, []).extend(ph["lateness_ms"])
            early[name] = early.get(name, 0) + ph["early"]
    return {
        "slices": {
            name: {
                "n": len(v),
                "p50_ms": percentile(v, 0.5),
                "p99_ms": percentile(v, 0.99),
                "early": early.get(name, 0),
            }
            for name, v in slices.items()
        },
        "survived": sum(1 for s in good if s["block"]["survived"]),
        "runs": len(good),
        "errors": [s.get("reason") for s in samples if not s.get("ok")],
        "block_gap_s": [s["block"]["max_gap_in_block_s"] for s in good],
        "block_joins": [s["block"]["join_requests_after"] for s in good],
    }


def table(results: dict[str, list[dict[str, Any]]], slice_names: list[str]) -> str:
    summaries = {c: pooled(s) for c, s in results.items()}
    base = summaries.get(BASE, {}).get("slices", {})
    busy = [n for n in slice_names if float(n) > 0]
    rows = []
    for client, s in summaries.items():
        row = [client]
        for name in slice_names:
            ph = s["slices"].get(name)
            row.append("—" if ph is None else f"{fmt(ph['p50_ms'], 1)} / {fmt(ph['p99_ms'], 1)}")
        ratios = []
        for name in busy:
            mine, theirs = s["slices"].get(name, {}), base.get(name, {})
            a, b = mine.get("p99_ms"), theirs.get("p99_ms")
            ratios.append("—" if a is None or b is None or b <= 0 else f"{a / b:.2f}")
        row.append(" / ".join(ratios))
        gaps = [g for g in s["block_gap_s"] if g is not None]
        row.append(
            f"{s['survived']}/{s['runs']}" + (f" (max gap {max(gaps):.1f} s)" if gaps else "")
        )
        notes = [f"{n} ms: {s['slices'][n]['early']} early" for n in slice_names
                 if s["slices"].get(n, {}).get("early")]  # fmt: skip
        if any(s["block_joins"]):
            notes.append(f"JoinGroups after block {s['block_joins']}")
        notes += [str(e) for e in s["errors"]]
        row.append("; ".join(notes)[:70])
        rows.append(row)
    header = [
        "client",
        *[
            ("idle" if float(n) == 0 else f"{n} ms slices") + " p50 / p99 ms late"
            for n in slice_names
        ],
        f"p99 ratio to {BASE} ({' / '.join(busy)} ms)",
        "survived 2x session block",
        "notes",
    ]
    return render_table(header, rows)


def print_table(results: dict[str, Any]) -> None:
    m = results["meta"]
    print(
        f"\nHeartbeat lateness (gap between consecutive heartbeats at the relay minus the "
        f"{m['heartbeat_ms']} ms interval) on {where(m)}; session {m['session_ms']} ms, "
        f"{m['phase_s']:.0f} s per phase, slices S x uniform(1 ± {m.get('slice_jitter', 0)}), "
        f"{m['repeat']} run(s); kgroup API: {m['kgroup_api']}"
    )
    print(table(results["clients"], [fmt_slice(x) for x in m["slices"]]))


# --- main ----------------------------------------------------------------------------------------


def group_consumer_available() -> bool:
    from _bench import group_consumer_class

    try:
        group_consumer_class()
    except ImportError:
        return False
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    p.add_argument("--clients", default=",".join(CLIENTS), help="subset of " + ",".join(CLIENTS))
    p.add_argument("--slices", default="0,10,50,200", help="busy slice lengths, ms (0: idle)")
    p.add_argument("--phase-s", type=float, default=20.0, help="seconds per slice length")
    p.add_argument(
        "--slice-jitter",
        type=float,
        default=0.5,
        help="a slice of S ms lasts S x uniform(1-j, 1+j) ms (0: exactly S)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the slice lengths")
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument("--max-poll-ms", type=int, default=300_000)
    p.add_argument("--block-factor", type=float, default=2.0, help="block = this x session")
    p.add_argument("--observe-s", type=float, default=8.0, help="watch this long after block")
    p.add_argument("--settle", type=float, default=2.0, help="stable group before the phases, s")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument(
        "--kgroup-api",
        choices=("auto", "consumer", "member"),
        default="auto",
        help="kgroup subject: GroupConsumer, GroupMember, or auto (GroupConsumer if it imports)",
    )
    p.add_argument("--deadline", type=float, default=60.0, help="per-wait deadline, s")
    p.add_argument("--log-level", default="warning", help="member processes' log level")
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--render", type=Path, default=None, help="only print a --json file's table")
    a = p.parse_args(argv)
    a.client_list = [c.strip() for c in a.clients.split(",") if c.strip()]
    for c in a.client_list:
        if c not in CLIENTS:
            p.error(f"unknown client {c!r}")
    try:
        a.slice_list = [float(x) for x in a.slices.split(",") if x.strip()]
    except ValueError:
        p.error(f"--slices must be comma-separated numbers, got {a.slices!r}")
    if a.kgroup_api == "auto":
        a.kgroup_api = "consumer" if group_consumer_available() else "member"
    if a.heartbeat_ms >= a.session_ms:
        p.error("--heartbeat-ms must be below --session-ms")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        print_table(json.loads(args.render.read_text()))
        return 0
    install_interrupts()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="kgroup-bench-heartbeat-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "broker": args.broker,
            "slices": args.slice_list,
            "phase_s": args.phase_s,
            "slice_jitter": args.slice_jitter,
            "seed": args.seed,
            "session_ms": args.session_ms,
            "heartbeat_ms": args.heartbeat_ms,
            "block_factor": args.block_factor,
            "repeat": args.repeat,
            "kgroup_api": args.kgroup_api,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "log_dir": str(log_dir),
            **machine(),
        },
        "clients": {},
    }
    relay = Relay()
    broker = make_broker(args.broker, proxy=relay)
    procs = Procs(log_dir)
    interrupted = False
    try:
        log(f"starting {args.broker} behind the relay ...")
        broker.start()
        for rep in range(args.repeat):
            for client in args.client_list:
                log(f"{client} r{rep} ...")
                r = run_client(procs, broker, relay, client, rep, args)
                results["clients"].setdefault(client, []).append(r)
                if r.get("ok"):
                    lat = ", ".join(
                        f"{k} ms: {fmt(v['p50_ms'], 1)}/{fmt(v['p99_ms'], 1)}"
                        for k, v in r["phases"].items()
                    )
                    log(f"  lateness p50/p99 {lat}; survived block: {r['block']['survived']}")
                else:
                    log(f"  FAILED: {r.get('reason')}")
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping everything ...")
    finally:
        procs.stop_all()
        broker.close()
        relay.close()
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    print_table(results)
    print(f"\nlogs: {log_dir}")
    write_json(args.json, results)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
