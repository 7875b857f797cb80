"""Consumer benchmarks: kgroup's GroupConsumer against aiokafka and confluent-kafka's asyncio
consumer, on the same broker in the same run.

    python benchmarks/consumer.py [--broker tansu|kafka] [--records 500000] [--repeat 5]
                                  [--idle-counts 100,300] [--json results.json]

1. **throughput**: ``--records`` small records (``--value-bytes``, 100) are produced once,
   round-robin, to a ``--partitions`` (6) topic. Then, per repetition and client (the order
   rotates every repetition), ONE consumer process in a fresh group reads the topic from the
   earliest offset until it has every record (``benchmarks/_proc.py
   throughput``). records/s counts from the first batch that had records to the last one, so
   the join (which on tansu is held ~session/2) is not in it; CPU µs per record is the
   consumer process's CPU time over the same span. Medians over ``--repeat`` runs.
2. **idle**: for each N in ``--idle-counts``, N consumers of one client in ONE process and
   event loop, each alone in its own group on an empty 1-partition topic, all fetching
   (long-polling their empty partition), at Kafka's default heartbeat / session. Once all
   are stable: process CPU over ``--idle-window`` seconds and the event-loop lag p99 (the
   membership idle scenario's method, ``_proc.py idle``).

Every process started here and the broker are stopped on the way out (also on Ctrl-C or
SIGTERM); every wait has a deadline.
"""

from __future__ import annotations

import argparse
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
    Procs,
    broker_pid,
    client_args,
    fmt,
    install_interrupts,
    log,
    machine,
    make_broker,
    median,
    proc_cpu_seconds,
    ratio,
    render_table,
    where,
    write_json,
)

CLIENTS = ("kgroup", "aiokafka", "confluent-aio")
BASE = "aiokafka"  # ratios are kgroup (and confluent-aio) / aiokafka


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> float:
    """``records`` values of ``value_bytes`` bytes, round-robin over the partitions; returns
    the seconds it took. Raises if any delivery failed or did not finish in time."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
            "enable.idempotence": False,
        }
    )
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and len(failures) < 5:
            failures.append(str(err))

    t0 = time.monotonic()
    for i in range(records):
        value = i.to_bytes(8, "big") * (value_bytes // 8) + b"x" * (value_bytes % 8)
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120.0)
    if left or failures:
        raise RuntimeError(f"produce: {left} undelivered, errors {failures}")
    return time.monotonic() - t0


def throughput_run(
    procs: Procs, bootstrap: str, topic: str, client: str, rep: int, args: argparse.Namespace
) -> dict[str, Any]:
    group = f"tp-{client}-{rep}-{uuid.uuid4().hex[:6]}"
    name = f"tp-{client}-r{rep}"
    argv = [
        "throughput", "--bootstrap", bootstrap, "--group", group, "--topic", topic,
        *client_args(
            args,
            client=client,
            name=name,
            records=args.records,
            max_records=args.max_records,
            deadline=args.deadline,
            gc_freeze=args.gc_freeze,
        ),
    ]  # fmt: skip
    p = procs.spawn(argv, name)
    try:
        ok, why = procs.wait(lambda: p.find("result") is not None, args.deadline + 60, watch=[p])
        if not ok:
            return {"client": client, "repeat": rep, "ok": False, "reason": why}
        r = dict(p.find("result") or {})
        r.pop("event", None)
        r.pop("t", None)
        expected_last = sum(int(v) + 1 for v in r.get("last_offset", {}).values())
        r["ok"] = r["records"] == args.records and expected_last == args.records
        if not r["ok"]:
            r["reason"] = f"read {r['records']} records, offsets cover {expected_last}"
        r["repeat"] = rep
        return r
    finally:
        procs.stop([p])


def idle_run(
    procs: Procs, broker: Any, client: str, n: int, args: argparse.Namespace
) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:6]
    topic = f"idle-{client}-{suffix}"
    broker.create_topic(topic, 1)
    name = f"idle-{client}-{n}"
    argv = [
        "idle", "--bootstrap", broker.bootstrap, "--group", f"idle-{client}-{suffix}",
        "--topic", topic, "--name", name, "--session-ms", str(args.idle_session_ms),
        "--heartbeat-ms", str(args.idle_heartbeat_ms), "--log-level", args.log_level,
        "--client", client, "--kgroup-api", "consumer", "--idle", str(n),
        "--window", str(args.idle_window), "--settle", "3",
        "--join-deadline", str(args.idle_join_deadline),
    ]  # fmt: skip
    p = procs.spawn(argv, name)
    pid = broker_pid(broker)
    try:
        ok, why = procs.wait(
            lambda: p.find("window_start") is not None or p.find("result") is not None,
            args.idle_join_deadline + 60,
            watch=[p],
        )
        b0, t0 = (proc_cpu_seconds(pid) if pid else None), time.monotonic()
        if ok:
            ok, why = procs.wait(
                lambda: p.find("result") is not None, args.idle_window + 60, watch=[p]
            )
        b1, t1 = (proc_cpu_seconds(pid) if pid else None), time.monotonic()
        if not ok:
            return {"client": client, "members": n, "ok": False, "reason": why}
        r = {k: v for k, v in (p.find("result") or {}).items() if k not in ("t", "event")}
        r["client"] = client
        if b0 is not None and b1 is not None and t1 > t0:
            r["broker_cpu_pct_of_core"] = 100.0 * (b1 - b0) / (t1 - t0)
        procs.wait(lambda: p.find("closed") is not None, 90.0)
        closed = p.find("closed")
        if closed is not None:
            r["close_s"] = closed.get("close_s")
        r["log"] = str(p.log_path)
        return r
    finally:
        procs.stop([p], grace=30.0)


# --- output --------------------------------------------------------------------------------------


def summarize_throughput(samples: list[dict[str, Any]]) -> dict[str, Any]:
    good = [s for s in samples if s.get("ok")]
    rates = [s["records_per_s"] for s in good if s.get("records_per_s")]
    return {
        "runs": len(samples),
        "ok_runs": len(good),
        "records_per_s": median(rates),
        "records_per_s_min": min(rates) if rates else None,
        "records_per_s_max": max(rates) if rates else None,
        "cpu_us_per_record": median([s.get("cpu_us_per_record") for s in good]),
        "first_batch_s": median([s.get("first_batch_s") for s in good]),
        "total_s": median([s.get("total_s") for s in good]),
        "errors": [s.get("reason") for s in samples if not s.get("ok")],
    }


def throughput_table(results: dict[str, Any]) -> str:
    summaries = {c: summarize_throughput(s) for c, s in results.items()}
    base = summaries.get(BASE, {})
    rows = []
    for client, s in summaries.items():
        spread = (
            "—"
            if s["records_per_s_min"] is None
            else f"{fmt(s['records_per_s_min'], 0)}-{fmt(s['records_per_s_max'], 0)}"
        )
        rows.append(
            [
                client,
                fmt(s["records_per_s"], 0),
                spread,
                ratio(s["records_per_s"], base.get("records_per_s")),
                fmt(s["cpu_us_per_record"], 2),
                ratio(s["cpu_us_per_record"], base.get("cpu_us_per_record")),
                fmt(s["first_batch_s"], 2),
                fmt(s["total_s"], 2),
                f"{s['ok_runs']}/{s['runs']}",
                "; ".join(str(e) for e in s["errors"])[:60],
            ]
        )
    header = [
        "client",
        "records/s (median)",
        "min-max",
        f"ratio to {BASE}",
        "CPU µs/record",
        f"CPU ratio to {BASE}",
        "first batch s",
        "total s",
        "ok runs",
        "notes",
    ]
    return render_table(header, rows)


def idle_table(rows_in: list[dict[str, Any]]) -> str:
    base = {r["members"]: r for r in rows_in if r["client"] == BASE and r.get("ok")}
    rows = []
    for r in rows_in:
        if not r.get("ok"):
            rows.append(
                [r["client"], str(r.get("members")), "FAILED: " + str(r.get("reason"))[:70]]
            )
            rows[-1] += [""] * 9
            continue
        b = base.get(r["members"], {})
        rows.append(
            [
                r["client"],
                str(r["members"]),
                fmt(r.get("join_s"), 1),
                fmt(r.get("cpu_pct_of_core"), 1),
                ratio(r.get("cpu_pct_of_core"), b.get("cpu_pct_of_core")),
                fmt(r.get("lag_p99_ms"), 1),
                fmt(r.get("lag_max_ms"), 1),
                fmt(r.get("all_stable")),
                fmt(r.get("broker_cpu_pct_of_core"), 1),
                fmt(r.get("rss_mb"), 0),
                str(r.get("threads", "—")),
            ]
        )
    header = [
        "client",
        "consumers",
        "all stable after s",
        "CPU % of 1 core",
        f"CPU ratio to {BASE}",
        "loop lag p99 ms",
        "lag max ms",
        "stayed stable",
        "broker CPU %",
        "RSS MB",
        "threads",
    ]
    return render_table(header, rows)


def print_tables(results: dict[str, Any]) -> None:
    m = results["meta"]
    place = where(m)
    if results["throughput"]:
        print(
            f"\nConsumption throughput on {place}: {m['records']} records of "
            f"{m['value_bytes']} B on {m['partitions']} partitions, one consumer, fresh group "
            f"from earliest, batches of <= {m['max_records']}; median of {m['repeat']} runs"
            + ("; gc.freeze() after imports" if m.get("gc_freeze") else "")
        )
        print(throughput_table(results["throughput"]))
    if results["idle"]:
        print(
            f"\nIdle fetching consumers on {place}: one process per row, each consumer alone "
            f"in its own group on an empty 1-partition topic, heartbeat "
            f"{m['idle_heartbeat_ms']} ms, session {m['idle_session_ms']} ms, window "
            f"{m['idle_window_s']:.0f} s"
        )
        print(idle_table(results["idle"]))


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    p.add_argument("--clients", default=",".join(CLIENTS), help="subset of " + ",".join(CLIENTS))
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--repeat", type=int, default=5, help="throughput runs per client (5)")
    p.add_argument("--max-records", type=int, default=10_000, help="batch cap of every client")
    p.add_argument("--session-ms", type=int, default=10_000, help="throughput consumers")
    p.add_argument("--heartbeat-ms", type=int, default=3000, help="throughput consumers")
    p.add_argument("--deadline", type=float, default=180.0, help="one throughput run, s")
    p.add_argument("--idle-counts", default="100,300", help="consumers per idle process")
    p.add_argument("--idle-window", type=float, default=20.0)
    p.add_argument("--idle-session-ms", type=int, default=45_000)
    p.add_argument("--idle-heartbeat-ms", type=int, default=3000)
    p.add_argument("--idle-join-deadline", type=float, default=180.0)
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="throughput consumers call gc.freeze() after importing their client",
    )
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-idle", action="store_true")
    p.add_argument("--log-level", default="warning", help="consumer processes' log level")
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write all results here")
    p.add_argument("--render", type=Path, default=None, help="only print a --json file's tables")
    a = p.parse_args(argv)
    a.client_list = [c.strip() for c in a.clients.split(",") if c.strip()]
    for c in a.client_list:
        if c not in CLIENTS:
            p.error(f"unknown client {c!r}")
    try:
        a.idle_count_list = [int(x) for x in a.idle_counts.split(",") if x.strip()]
    except ValueError:
        p.error(f"--idle-counts must be comma-separated integers, got {a.idle_counts!r}")
    if a.records < 1 or a.partitions < 1 or a.repeat < 1:
        p.error("--records, --partitions and --repeat must be positive")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        print_tables(json.loads(args.render.read_text()))
        return 0
    install_interrupts()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="kgroup-bench-consumer-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "broker": args.broker,
            "records": args.records,
            "value_bytes": args.value_bytes,
            "partitions": args.partitions,
            "repeat": args.repeat,
            "max_records": args.max_records,
            "gc_freeze": args.gc_freeze,
            "idle_session_ms": args.idle_session_ms,
            "idle_heartbeat_ms": args.idle_heartbeat_ms,
            "idle_window_s": args.idle_window,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "log_dir": str(log_dir),
            **machine(),
        },
        "throughput": {},
        "idle": [],
    }
    broker = make_broker(args.broker)
    procs = Procs(log_dir)
    interrupted = False
    try:
        log(f"starting {args.broker} ...")
        broker.start()
        if not args.skip_throughput:
            topic = f"tp-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic, args.partitions)
            log(f"producing {args.records} records to {topic} ...")
            results["meta"]["produce_s"] = produce(
                broker.bootstrap, topic, args.records, args.partitions, args.value_bytes
            )
            log(f"  produced in {results['meta']['produce_s']:.1f} s")
            clients = list(args.client_list)
            for rep in range(args.repeat):
                order = clients[rep % len(clients) :] + clients[: rep % len(clients)]
                for client in order:
                    r = throughput_run(procs, broker.bootstrap, topic, client, rep, args)
                    results["throughput"].setdefault(client, []).append(r)
                    log(
                        f"  {client} r{rep}: {fmt(r.get('records_per_s'), 0)} records/s, "
                        f"{fmt(r.get('cpu_us_per_record'), 2)} CPU µs/record"
                        + ("" if r.get("ok") else f" FAILED: {r.get('reason')}")
                    )
            results["throughput"] = {
                c: results["throughput"][c] for c in clients if c in results["throughput"]
            }
        if not args.skip_idle:
            for n in args.idle_count_list:
                for client in args.client_list:
                    log(f"idle: {n} {client} consumers in one process ...")
                    r = idle_run(procs, broker, client, n, args)
                    results["idle"].append(r)
                    log(
                        f"  {client} x{n}: cpu {fmt(r.get('cpu_pct_of_core'), 1)}% of a core, "
                        f"lag p99 {fmt(r.get('lag_p99_ms'), 1)} ms, stable "
                        f"{fmt(r.get('all_stable'))}"
                        + ("" if r.get("ok") else f" FAILED: {r.get('reason')}")
                    )
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping everything ...")
    finally:
        procs.stop_all()
        broker.close()
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    print_tables(results)
    print(f"\nlogs: {log_dir}")
    write_json(args.json, results)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
