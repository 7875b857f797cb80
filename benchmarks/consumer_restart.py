"""Records consumers through a rolling restart: how long partitions go unprocessed.

    python benchmarks/consumer_restart.py [--configs kgroup-coop,kgroup-848-handoff,...]
                                          [--repeat 2] [--json results.json]

Where ``membership.py``'s rolling restart measures ownership (how long a partition has no
owner), this one measures what an application sees: records processed. Per configuration
and repetition, on Apache Kafka 4.4.0, in a fresh group on a fresh topic of ``--partitions``
(6): a producer writes ``--rate`` (100) records a second into every partition; ``--members``
(3) consumer processes (``_restart_proc.py consume``) process them in batches (2 ms of work
each, then a synchronous commit); once all process, each is restarted in turn (SIGTERM,
and its replacement spawned at once), waiting for the replacement's first batch and
``--settle`` (3) seconds between restarts. The measurement runs from 1 s before the first
SIGTERM to the producer's stop.

- **stalled partition-s**: per partition, the time during which its oldest unprocessed
  record was more than ``--stale-ms`` (250 ms) old (records arrive every 10 ms; after a
  batch whose last record was produced at ``pt``, processed at ``t``, the partition is
  stale from ``max(t, pt + stale)`` to the next batch), summed over the partitions; the
  median over the repetitions (min-max).
- **max delay s**: the longest a record waited from its production to its processing
  (the next batch's time minus the previous batch's last production time), median over
  repetitions.
- **steady state**: the same measure over ``--steady`` (10) seconds of the same consumers
  before the first restart, scaled to the restarts' window: what the client's own batching
  costs without any restart.
- **duplicates**: records processed twice (should be 0: graceful restarts, a commit after
  every batch and on revoke).
- **close s**: from the SIGTERM to the process's ``closed`` line (median over restarts).

Configurations: ``kgroup-coop`` / ``kgroup-848`` (GroupConsumer, cooperative-sticky /
the consumer protocol, ordinary close: the loop stops, then ``close()``), ``-handoff``
(``handoff_on_close``: the loop goes on while ``close()`` runs from the signal's task,
GroupConsumer's drain), ``-handoff-nodrain`` (the handoff, but the loop stops first, as
before the drain), ``aiokafka`` (range: it has nothing else), ``confluent-aio-coop`` and
``confluent-aio-848`` (confluent-kafka's ``aio.AIOConsumer``). Consumer-protocol groups get
``--session-ms`` / ``--heartbeat-ms`` as their group configs, as in ``membership.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (
    Proc,
    Procs,
    fmt,
    install_interrupts,
    log,
    machine,
    make_broker,
    median,
    ratio,
    render_table,
    where,
    write_json,
)
from _kip848 import give_group_timings

SCRIPT = Path(__file__).resolve().parent / "_restart_proc.py"
COOP = ["--assignor", "cooperative-sticky"]
K848 = ["--group-protocol", "consumer"]
CONFIGS: dict[str, tuple[str, list[str]]] = {
    "kgroup-coop": ("kgroup", COOP),
    "kgroup-coop-handoff": ("kgroup", [*COOP, "--handoff"]),
    "kgroup-coop-handoff-nodrain": ("kgroup", [*COOP, "--handoff", "--no-drain"]),
    "kgroup-848": ("kgroup", K848),
    "kgroup-848-handoff": ("kgroup", [*K848, "--handoff"]),
    "kgroup-848-handoff-nodrain": ("kgroup", [*K848, "--handoff", "--no-drain"]),
    "aiokafka": ("aiokafka", ["--assignor", "range"]),
    "confluent-aio-coop": ("confluent-aio", COOP),
    "confluent-aio-848": ("confluent-aio", K848),
}
BASE = "kgroup-coop"


class RunFailed(RuntimeError):
    pass


def _wait(procs: Procs, what: str, predicate: Any, deadline: float, watch: list[Proc]) -> None:
    ok, why = procs.wait(predicate, deadline, watch=watch)
    if not ok:
        raise RunFailed(f"{what}: {why}")


def run_once(
    procs: Procs, broker: Any, label: str, rep: int, a: argparse.Namespace
) -> dict[str, Any]:
    client, extra = CONFIGS[label]
    tag = f"{label}-r{rep}-{uuid.uuid4().hex[:6]}"
    topic, group = f"t-{tag}", f"g-{tag}"
    broker.create_topic(topic, a.partitions)
    if "--group-protocol" in extra:
        give_group_timings(broker.bootstrap, group, a.session_ms, a.heartbeat_ms)
    common = [
        "--bootstrap", broker.bootstrap, "--group", group, "--topic", topic,
        "--session-ms", str(a.session_ms), "--heartbeat-ms", str(a.heartbeat_ms),
        "--log-level", a.log_level,
    ]  # fmt: skip
    producer = procs.spawn(
        ["produce", "--bootstrap", broker.bootstrap, "--topic", topic,
         "--partitions", str(a.partitions), "--rate", str(a.rate)],
        f"{tag}-producer", script=SCRIPT,
    )  # fmt: skip
    everyone: list[Proc] = []

    def spawn(slot: int, incarnation: int) -> Proc:
        name = f"{tag}-m{slot}i{incarnation}"
        p = procs.spawn(["consume", "--client", client, *extra, *common, "--name", name], name,
                        script=SCRIPT)  # fmt: skip
        everyone.append(p)
        return p

    try:
        _wait(procs, "producer", lambda: producer.find("ready") is not None, 60, [producer])
        live = [spawn(slot, 0) for slot in range(a.members)]
        _wait(procs, "all processing", lambda: all(p.find("batch") for p in live), 90, live)

        def covered_since(t: float) -> bool:
            seen = {e["p"] for p in live for e in p.all("batch") if e["t"] > t}
            return len(seen) == a.partitions

        mark = time.time()
        _wait(procs, "every partition processed", lambda: covered_since(mark), 60, live)
        time.sleep(a.settle)
        steady = (time.time(), time.time() + a.steady)
        time.sleep(a.steady)
        start = time.time() - 1.0
        terms: list[tuple[Proc, float]] = []
        for slot in range(a.members):
            old = live[slot]
            terms.append((old, time.time()))
            old.proc.send_signal(signal.SIGTERM)
            new = spawn(slot, 1)
            live[slot] = new
            _wait(procs, f"restart {slot}: closed", lambda o=old: o.find("closed") is not None,
                  60, [p for p in live if p is not new])  # fmt: skip
            _wait(procs, f"restart {slot}: new processes", lambda n=new: n.find("batch"),
                  60, [new])  # fmt: skip
            time.sleep(a.settle)
        end = time.time()
        procs.stop([producer], grace=20)
    finally:
        procs.stop([p for p in everyone if p.proc.poll() is None], grace=20)
        if producer.proc.poll() is None:
            procs.stop([producer], grace=5)
    # Every child's lines, for a closer look (``--log-dir``).
    dump = {p.name: p.events for p in [producer, *everyone]}
    (procs.log_dir / f"{tag}.events.json").write_text(json.dumps(dump))
    return measure(everyone, terms, start, end, steady, a)


def stalled_in(
    batches: list[tuple[float, float]], lo: float, hi: float, stale_s: float
) -> tuple[float, float]:
    """(stale seconds within [lo, hi], the longest record delay) of one partition's
    batches ((processed at, last record produced at), sorted)."""
    stalled = 0.0
    longest = 0.0
    for (t0, pt0), (t1, _) in itertools.pairwise(batches):
        if t1 < lo or t0 > hi:
            continue
        longest = max(longest, t1 - pt0)
        stalled += max(0.0, min(t1, hi) - max(t0, pt0 + stale_s, lo))
    return stalled, longest


def measure(
    everyone: list[Proc], terms: list[tuple[Proc, float]], start: float, end: float,
    steady: tuple[float, float], a: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    per_partition: dict[int, list[tuple[float, float]]] = {}
    counts: dict[tuple[int, int], int] = {}
    for p in everyone:
        for e in p.all("batch"):
            for offset in range(e["first"], e["last"] + 1):
                counts[(e["p"], offset)] = counts.get((e["p"], offset), 0) + 1
            per_partition.setdefault(e["p"], []).append((e["t"], e["pt"]))
    stale_s = a.stale_ms / 1000.0
    stalled = longest = baseline = 0.0
    for p in range(a.partitions):
        batches = sorted(per_partition.get(p, []))
        s, m = stalled_in(batches, start, end, stale_s)
        stalled, longest = stalled + s, max(longest, m)
        baseline += stalled_in(batches, *steady, stale_s)[0]
    # The same client's steady state, scaled to the restarts' window.
    baseline *= (end - start) / (steady[1] - steady[0])
    closes = [closed["t"] - t for old, t in terms if (closed := old.find("closed")) is not None]
    return {
        "ok": True,
        "stalled_partition_s": round(stalled, 3),
        "steady_partition_s": round(baseline, 3),
        "max_delay_s": round(longest, 3),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        "records": len(counts),
        "close_s": median(closes),
        "window_s": round(end - start, 2),
    }


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    good = [s for s in samples if s.get("ok")]
    stalled = [s["stalled_partition_s"] for s in good]
    return {
        "runs": len(good),
        "failed": [s.get("reason") for s in samples if not s.get("ok")],
        "stalled": median(stalled),
        "stalled_min": min(stalled, default=None),
        "stalled_max": max(stalled, default=None),
        "steady": median([s["steady_partition_s"] for s in good]),
        "max_delay": median([s["max_delay_s"] for s in good]),
        "duplicates": sum(s["duplicates"] for s in good),
        "close": median([s["close_s"] for s in good if s["close_s"] is not None]),
    }


def table(results: dict[str, Any]) -> str:
    summaries = {label: summarize(samples) for label, samples in results.items()}
    base = summaries.get(BASE, {}).get("stalled")
    rows = []
    for label, s in summaries.items():
        spread = f" ({fmt(s['stalled_min'])}-{fmt(s['stalled_max'])})" if s["runs"] > 1 else ""
        rows.append([
            label, f"{fmt(s['stalled'])}{spread}", ratio(s["stalled"], base), fmt(s["steady"]),
            fmt(s["max_delay"]),
            str(s["duplicates"]), fmt(s["close"]),
            f"{s['runs']}" + (f" ({len(s['failed'])} failed)" if s["failed"] else ""),
        ])  # fmt: skip
    header = [
        "configuration", "stalled partition-s", f"ratio to {BASE}",
        "steady state, same window", "max delay s",
        "duplicates", "close s", "runs",
    ]  # fmt: skip
    return render_table(header, rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--rate", type=int, default=100, help="records a second per partition")
    p.add_argument("--stale-ms", type=float, default=250.0)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--steady", type=float, default=10.0, help="steady-state window (s)")
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--log-dir", type=Path)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    a.config_list = [c.strip() for c in a.configs.split(",") if c.strip()]
    unknown = [c for c in a.config_list if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    install_interrupts()
    log_dir = a.log_dir or Path(tempfile.mkdtemp(prefix="kgroup-bench-restart-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "configs": a.config_list, "repeat": a.repeat, "members": a.members,
        "partitions": a.partitions, "rate": a.rate, "stale_ms": a.stale_ms,
        "session_ms": a.session_ms, "heartbeat_ms": a.heartbeat_ms,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "log_dir": str(log_dir),
        "broker": "kafka", **machine(),
    }  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in a.config_list}
    broker = make_broker("kafka")
    procs = Procs(log_dir)
    interrupted = False
    try:
        log("starting kafka ...")
        broker.start()
        for rep in range(a.repeat):
            order = (
                a.config_list[rep % len(a.config_list) :]
                + a.config_list[: rep % len(a.config_list)]
            )
            for label in order:
                try:
                    r = run_once(procs, broker, label, rep, a)
                except RunFailed as exc:
                    r = {"ok": False, "reason": str(exc)}
                results[label].append(r)
                log(
                    f"  {label} r{rep}: stalled {fmt(r.get('stalled_partition_s'))} partition-s "
                    f"(steady {fmt(r.get('steady_partition_s'))}), "
                    f"max delay {fmt(r.get('max_delay_s'))} s, duplicates {r.get('duplicates')}, "
                    f"close {fmt(r.get('close_s'))} s"
                    + ("" if r.get("ok") else f" FAILED: {r.get('reason')}")
                )
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping everything ...")
    finally:
        procs.stop_all()
        broker.close()
    meta["loadavg_end"] = list(os.getloadavg())
    print(f"\n{where(meta)}\n")
    print(table(results))
    print(f"\nlogs: {log_dir}")
    write_json(a.json, {"meta": meta, "results": results})
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
