"""Rebalance reaction latency, measured on the wire.

    python benchmarks/reaction.py [--clients kgroup,kgroup-consumer,aiokafka,confluent]
                                  [--reactions 10] [--heartbeat-ms 100] [--json out.json]

How long a member takes from *learning* that its group is rebalancing to *acting* on it:
the time from the Heartbeat response carrying REBALANCE_IN_PROGRESS (error 27) passing a
relay toward the client, to that client's next JoinGroup request passing the relay toward
the broker. Everything the client does in between (waking up on the response, running
its revoke callback, committing nothing: auto-commit is off, building the JoinGroup) is in
it; the broker is not.

The broker (tansu by default, started here) advertises a frame-aware relay
(``_bench.Relay``, run in a process of its own: ``_bench.RelayProcess``), so every
connection of every client goes through it. The relay reads whole Kafka frames and stamps
(``time.perf_counter()``) each group request just before writing it to the broker and each
Heartbeat response just before writing it to the client.

Per client, on a fresh 2-partition topic and group G:

1. member A of the client under test joins G (``_proc.py member``, its own process);
2. a trigger member B (``--trigger-client``, confluent-kafka's ``Consumer`` by default, the
   same for every client and revision; bootstrapped on the broker itself, but tansu
   advertises only the relay, so its group traffic passes the relay too) joins G: the
   broker answers A's next Heartbeat with REBALANCE_IN_PROGRESS; A rejoins; both hold a
   partition. One sample;
3. B is stopped (SIGTERM: its client closes and sends LeaveGroup): again A's next
   Heartbeat is answered REBALANCE_IN_PROGRESS and A rejoins alone. A second sample;
4. 2-3 repeat until ``--reactions`` samples (10) are in, with ``--settle`` s (plus a random
   part of one heartbeat interval) of stable group before each change.

A sample pairs the first REBALANCE_IN_PROGRESS response to A after its previous JoinGroup
with A's next JoinGroup (A's requests are told apart by their client id). Every client
uses the classic protocol, the range assignor, no auto-commit, the same heartbeat interval
(``--heartbeat-ms``, 100) and session timeout (``--session-ms``, 3000: tansu holds each
JoinGroup about session / 2), and has rebalance callbacks that write one JSON line each.

Clients: ``floor`` (``_floor.py``: no client library, one thread and blocking sockets; it
writes the same two callback lines and a JoinGroup built in advance, so its figure is what
the relay, the kernel's wake-ups and the callback cost on this machine: the floor under
every client's), ``kgroup`` (``GroupMember``, awaiting ``poll(timeout=1)``), ``kgroup-consumer``
(``GroupConsumer``, awaiting ``getmany(timeout=1)``), ``aiokafka`` (``AIOKafkaConsumer``
with a group subscription, awaiting ``getmany``), ``confluent`` (``Consumer``, ``poll(0.1)``
in a loop: librdkafka serves the revoke callback from ``poll``), ``confluent-aio``.

Every process started here, the relay and the broker are stopped on the way out (also on
Ctrl-C or SIGTERM); every wait has a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
    RelayProcess,
    Request,
    client_args,
    fmt,
    install_interrupts,
    log,
    machine,
    make_broker,
    median,
    percentile,
    render_table,
    where,
    write_json,
)

CLIENTS = ("kgroup", "kgroup-consumer", "aiokafka", "confluent", "confluent-aio", "floor")
DEFAULT_CLIENTS = ("kgroup", "kgroup-consumer", "aiokafka", "confluent")
REBALANCE_IN_PROGRESS = 27
CHANGES = ("assigned", "revoked", "lost")


def owned(p: Proc) -> list[int] | None:
    changes = [e for e in p.events if e.get("event") in CHANGES]
    return None if not changes else list(changes[-1].get("partitions", []))


def member_args(client: str) -> list[str]:
    if client == "kgroup-consumer":
        return ["--client", "kgroup", "--kgroup-api", "consumer"]
    return ["--client", client]


def reactions(requests: list[Request], group: str, client_id: str) -> list[dict[str, Any]]:
    """The samples of one member: each first REBALANCE_IN_PROGRESS answer to its Heartbeats
    after its previous JoinGroup, paired with its next JoinGroup (relay forward stamps)."""
    events: list[tuple[float, str, Request]] = []
    for r in requests:
        if r.group_id != group or r.client_id != client_id:
            continue
        if (
            r.api_key == API_HEARTBEAT
            and r.error_code == REBALANCE_IN_PROGRESS
            and r.response_fwd is not None
        ):
            events.append((r.response_fwd, "rebalancing", r))
        elif r.api_key == API_JOIN_GROUP and r.fwd is not None:
            events.append((r.fwd, "join", r))
    events.sort(key=lambda e: e[0])
    out: list[dict[str, Any]] = []
    pending: tuple[float, Request] | None = None
    for t, kind, r in events:
        if kind == "rebalancing":
            if pending is None:
                pending = (t, r)
        elif pending is not None:
            t0, hb = pending
            out.append(
                {
                    "ms": 1000.0 * (t - t0),
                    "at": hb.response_t,  # wall clock, to match with the trigger
                    "generation": hb.generation,
                    "join_version": r.api_version,
                    "heartbeat_version": hb.api_version,
                }
            )
            pending = None
    return out


def run_client(
    procs: Procs, broker: Any, relay: RelayProcess, client: str, a: argparse.Namespace
) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:6]
    topic = group = f"react-{client}-{suffix}"
    broker.create_topic(topic, 2)
    name = f"react-{client}-{suffix}"
    out: dict[str, Any] = {"client": client, "group": group, "triggers": []}
    common = ["--group", group, "--topic", topic, *client_args(a)]
    subject = procs.spawn(
        ["member", "--bootstrap", relay.address, "--name", name, *common, *member_args(client)],
        name,
    )
    started: list[Proc] = [subject]
    rng = random.Random(f"{a.seed}-{client}")
    try:
        ok, why = procs.wait(lambda: owned(subject) == [0, 1], a.deadline, watch=[subject])
        if not ok:
            return {**out, "ok": False, "reason": f"join: {why}"}
        cycle = 0
        while 2 * cycle < a.reactions:
            time.sleep(a.settle + rng.uniform(0.0, a.heartbeat_ms / 1000.0))
            trigger_name = f"{name}-b{cycle}"
            trigger = procs.spawn(
                [
                    "member", "--bootstrap", broker.bootstrap, "--name", trigger_name,
                    *common, "--client", a.trigger_client,
                ],
                trigger_name,
            )  # fmt: skip
            started.append(trigger)
            out["triggers"].append({"kind": "join", "t": time.time()})
            ok, why = procs.wait(
                lambda: len(owned(subject) or []) == 1 and len(owned(trigger) or []) == 1,  # noqa: B023
                a.deadline,
                watch=[subject, trigger],
            )
            if not ok:
                return {**out, "ok": False, "reason": f"cycle {cycle}, B joins: {why}"}
            time.sleep(a.settle + rng.uniform(0.0, a.heartbeat_ms / 1000.0))
            out["triggers"].append({"kind": "leave", "t": time.time()})
            procs.stop([trigger])
            ok, why = procs.wait(lambda: owned(subject) == [0, 1], a.deadline, watch=[subject])
            if not ok:
                return {**out, "ok": False, "reason": f"cycle {cycle}, B leaves: {why}"}
            cycle += 1
        time.sleep(0.2)
        samples = reactions(relay.snapshot(), group, name)
        for s in samples:
            before = [tr for tr in out["triggers"] if tr["t"] <= (s["at"] or 0.0)]
            s["trigger"] = before[-1]["kind"] if before else None
        out["samples"] = samples
        out["ok"] = True
        return out
    finally:
        procs.stop(started)


# --- output --------------------------------------------------------------------------------------


def summary(entry: dict[str, Any]) -> dict[str, Any]:
    ms = [s["ms"] for s in entry.get("samples", [])]
    return {
        "n": len(ms),
        "median_ms": median(ms),
        "p90_ms": percentile(ms, 0.90),
        "max_ms": max(ms) if ms else None,
        "min_ms": min(ms) if ms else None,
    }


def table(results: dict[str, Any]) -> str:
    rows = []
    for client, entry in results.items():
        s = summary(entry)
        note = "" if entry.get("ok") else f"FAILED: {entry.get('reason')}"[:70]
        rows.append(
            [
                client,
                str(s["n"]),
                fmt(s["median_ms"], 2),
                fmt(s["p90_ms"], 2),
                fmt(s["max_ms"], 2),
                fmt(s["min_ms"], 2),
                note,
            ]
        )
    header = ["client", "n", "median ms", "p90 ms", "max ms", "min ms", "notes"]
    return render_table(header, rows)


def print_table(results: dict[str, Any]) -> None:
    m = results["meta"]
    print(
        f"\nRebalance reaction (Heartbeat response REBALANCE_IN_PROGRESS → next JoinGroup, "
        f"at the relay) on {where(m)}; heartbeat {m['heartbeat_ms']} ms, session "
        f"{m['session_ms']} ms, trigger member: {m['trigger_client']}; kgroup from "
        f"{m.get('kgroup_tree')}"
    )
    print(table(results["clients"]))


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    p.add_argument(
        "--clients", default=",".join(DEFAULT_CLIENTS), help="subset of " + ",".join(CLIENTS)
    )
    p.add_argument("--reactions", type=int, default=10, help="samples per client (10)")
    p.add_argument("--heartbeat-ms", type=int, default=100)
    p.add_argument("--session-ms", type=int, default=3000)
    p.add_argument("--max-poll-ms", type=int, default=300_000)
    p.add_argument("--trigger-client", default="confluent", help="member B's client")
    p.add_argument("--settle", type=float, default=0.5, help="stable group before a change, s")
    p.add_argument("--seed", type=int, default=1)
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
    if a.heartbeat_ms >= a.session_ms:
        p.error("--heartbeat-ms must be below --session-ms")
    if a.reactions < 1:
        p.error("--reactions must be positive")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        print_table(json.loads(args.render.read_text()))
        return 0
    install_interrupts()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="kgroup-bench-reaction-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "broker": args.broker,
            "heartbeat_ms": args.heartbeat_ms,
            "session_ms": args.session_ms,
            "reactions": args.reactions,
            "trigger_client": args.trigger_client,
            "settle_s": args.settle,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "log_dir": str(log_dir),
            **machine(),
        },
        "clients": {},
    }
    procs = Procs(log_dir)
    relay = RelayProcess(procs)
    broker = make_broker(args.broker, proxy=relay)
    interrupted = False
    try:
        log(f"starting {args.broker} behind the relay ...")
        broker.start()
        for client in args.client_list:
            log(f"{client} ...")
            r = run_client(procs, broker, relay, client, args)
            results["clients"][client] = r
            s = summary(r)
            log(
                f"  n={s['n']} median {fmt(s['median_ms'])} ms, max {fmt(s['max_ms'])} ms"
                + ("" if r.get("ok") else f" FAILED: {r.get('reason')}")
            )
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
