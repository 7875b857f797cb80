"""Before / after: the same benchmarks, in one run, against two kgroup checkouts.

    git worktree add /work/wt-before 7257d92            # the "before" revision, read-only
    PYTHONPATH=$PWD python3 benchmarks/compare_revisions.py --before /work/wt-before
    python3 benchmarks/compare_revisions.py --render /tmp/kgroup-compare-XXXX

Runs ``membership.py`` (join, leave→covered, crash→covered; idle CPU of many members),
``heartbeat.py`` (punctuality under a busy loop, surviving a blocked loop), ``consumer.py``
(throughput) and ``reaction.py`` (rebalance reaction at the relay), each once with
``PYTHONPATH`` set to the *before* tree and once to the *after* tree (``--after``, by
default the checkout this script is in). The benchmark scripts are always this checkout's,
so both revisions are measured by the same code; only ``import kgroup`` differs (the scripts
read ``stats()`` as a dict or as a dataclass with ``as_dict()``, whichever the tree has).
Each script starts its own broker from the tree's ``kgroup.testing`` (the launchers are
compared first and a difference is reported), with the same settings for both. The two
revisions alternate which goes first from one benchmark to the next, so a drift in the
machine's load does not always favour the same one.

Sizes are modest by default (about 10 minutes in all on 2 cores); ``--repeat``,
``--idle-members``, ``--phase-s``, ``--records``, ``--reactions`` scale them, ``--only``
picks benchmarks, ``--peers`` adds aiokafka as a reference row (it does not depend on the
tree, so its two columns show the run-to-run noise). Each script's own output, logs and
JSON go to ``--out`` (a new temporary directory by default); ``--render DIR`` reprints the
side-by-side tables from a finished run. On a shared or busy machine single numbers move
by tens of percent: read small differences as noise and re-run on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import consumer as consumer_bench
import heartbeat as heartbeat_bench
import reaction as reaction_bench
from _bench import fmt, install_interrupts, killpg, log, machine, render_table, where

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("membership", "heartbeat", "consumer", "reaction")
#: The broker launchers, by the paths they have had (the first that exists is compared).
LAUNCHERS = (
    ("kgroup/_tansu.py", "kgroup/testing/_tansu.py"),
    ("kgroup/testing/_kafka.py",),
    ("kgroup/_broker_process.py", "kgroup/testing/_ports.py"),
)


def _launcher(tree: Path, paths: tuple[str, ...]) -> Path:
    return next((tree / p for p in paths if (tree / p).exists()), tree / paths[-1])


def _launchers_differ(before: Path, after: Path) -> list[str]:
    return [
        paths[0]
        for paths in LAUNCHERS
        if not filecmp.cmp(_launcher(before, paths), _launcher(after, paths), shallow=False)
    ]


def bench_args(bench: str, a: argparse.Namespace) -> list[str]:
    peers = ["aiokafka"] if a.peers else []
    if bench == "membership":
        return [
            "--broker", a.broker, "--clients", ",".join(["kgroup", *peers]),
            "--repeat", str(a.repeat), "--idle-clients", "kgroup",
            "--idle-members", str(a.idle_members), "--idle-peer-members", "0",
            "--idle-window", str(a.idle_window), "--log-level", "warning",
            "--skip-rolling",
        ]  # fmt: skip
    if bench == "heartbeat":
        return [
            "--broker", a.broker, "--clients", ",".join(["kgroup", "kgroup-isolated", *peers]),
            "--slices", a.slices, "--phase-s", str(a.phase_s), "--repeat", "1",
        ]  # fmt: skip
    if bench == "consumer":
        return [
            "--broker", a.broker, "--clients", ",".join(["kgroup", *peers]),
            "--records", str(a.records), "--repeat", str(a.repeat), "--skip-idle",
        ]  # fmt: skip
    return [
        "--broker", a.broker, "--clients", ",".join(["kgroup", "kgroup-consumer", *peers]),
        "--reactions", str(a.reactions),
    ]  # fmt: skip


def run_one(bench: str, label: str, tree: Path, a: argparse.Namespace) -> dict[str, Any]:
    """``python benchmarks/BENCH.py ... --json`` with ``PYTHONPATH=tree``."""
    out: Path = a.out
    json_path = out / f"{bench}-{label}.json"
    argv = [
        sys.executable, str(HERE / f"{bench}.py"), *bench_args(bench, a),
        "--json", str(json_path), "--log-dir", str(out / f"logs-{bench}-{label}"),
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["PYTHONUNBUFFERED"] = "1"
    log(f"{bench} [{label}: {tree}] ...")
    t0 = time.monotonic()
    with (out / f"{bench}-{label}.txt").open("wb") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = proc.wait(timeout=a.timeout)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            # SIGTERM: the script stops its members and broker itself; then the group.
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60.0)
            killpg(proc.pid, signal.SIGKILL)
            raise
    log(f"  exit {code} after {time.monotonic() - t0:.0f} s; output {out / f'{bench}-{label}.txt'}")
    return {"bench": bench, "label": label, "tree": str(tree), "exit": code}


# --- side-by-side tables ---------------------------------------------------------------------


def membership_rows(r: dict[str, Any]) -> list[tuple[str, str, float | None, int]]:
    """(metric, client, value, digits) for one membership.py result."""
    rows: list[tuple[str, str, float | None, int]] = []
    for client, entry in r.get("churn", {}).items():
        s = entry.get("summary", {})
        for key, label in (
            ("join_s", "join s"),
            ("join_from_ready_s", "join from ready s"),
            ("leave_s", "leave→covered s"),
            ("leave_after_learn_s", "leave→covered after learning s"),
            ("crash_s", "crash→covered s"),
            ("crash_after_learn_s", "crash→covered after learning s"),
        ):
            rows.append((label, client, s.get(key), 2))
    for row in r.get("idle", []):
        who = f"{row.get('client')} x{row.get('members')}"
        if not row.get("ok"):
            rows.append(("idle: FAILED", who, None, 1))
            continue
        rows += [
            ("idle CPU % of 1 core", who, row.get("cpu_pct_of_core"), 1),
            ("idle CPU ms / member-minute", who, row.get("cpu_ms_per_member_minute"), 2),
            ("idle loop lag p99 ms", who, row.get("lag_p99_ms"), 1),
            ("idle stayed stable (1 = yes)", who, float(bool(row.get("all_stable"))), 0),
        ]
    return rows


def heartbeat_rows(r: dict[str, Any]) -> list[tuple[str, str, float | None, int]]:
    rows: list[tuple[str, str, float | None, int]] = []
    for client, samples in r.get("clients", {}).items():
        s = heartbeat_bench.pooled(samples)
        for name, ph in s["slices"].items():
            what = "idle" if float(name) == 0 else f"{name} ms slices"
            rows.append((f"{what}: p50 ms late", client, ph.get("p50_ms"), 1))
            rows.append((f"{what}: p99 ms late", client, ph.get("p99_ms"), 1))
        rows.append(("survived 2x session block (runs)", client, float(s["survived"]), 0))
    return rows


def consumer_rows(r: dict[str, Any]) -> list[tuple[str, str, float | None, int]]:
    rows: list[tuple[str, str, float | None, int]] = []
    for client, samples in r.get("throughput", {}).items():
        s = consumer_bench.summarize_throughput(samples)
        rows.append(("records/s (median)", client, s.get("records_per_s"), 0))
        rows.append(("CPU µs/record", client, s.get("cpu_us_per_record"), 2))
        rows.append(("ok runs", client, float(s.get("ok_runs", 0)), 0))
    return rows


def reaction_rows(r: dict[str, Any]) -> list[tuple[str, str, float | None, int]]:
    rows: list[tuple[str, str, float | None, int]] = []
    for client, entry in r.get("clients", {}).items():
        s = reaction_bench.summary(entry)
        rows.append(("reaction n", client, float(s["n"]), 0))
        rows.append(("reaction median ms", client, s["median_ms"], 2))
        rows.append(("reaction p90 ms", client, s["p90_ms"], 2))
        rows.append(("reaction max ms", client, s["max_ms"], 2))
    return rows


ROWS: dict[str, Callable[[dict[str, Any]], list[tuple[str, str, float | None, int]]]] = {
    "membership": membership_rows,
    "heartbeat": heartbeat_rows,
    "consumer": consumer_rows,
    "reaction": reaction_rows,
}


def side_by_side(bench: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    b_rows = ROWS[bench](before) if before else []
    a_rows = ROWS[bench](after) if after else []
    keys: list[tuple[str, str]] = []
    for metric, client, _, _ in [*b_rows, *a_rows]:
        if (metric, client) not in keys:
            keys.append((metric, client))
    bv = {(m, c): (v, d) for m, c, v, d in b_rows}
    av = {(m, c): (v, d) for m, c, v, d in a_rows}
    rows = []
    for key in keys:
        (v0, d0), (v1, d1) = bv.get(key, (None, 2)), av.get(key, (None, 2))
        change = "—" if v0 is None or v1 is None or v0 == 0 else f"{v1 / v0:.2f}"
        rows.append([key[1], key[0], fmt(v0, d0), fmt(v1, d1), change])
    return render_table(["client", "metric", "before", "after", "after/before"], rows)


def print_comparison(out: Path) -> None:
    meta = json.loads((out / "compare.json").read_text())
    m = meta["machine"]
    print(
        f"\nBefore: {meta['before']} ({meta.get('before_rev')}); after: {meta['after']} "
        f"({meta.get('after_rev')}); on {where({**m, 'broker': meta['broker']})}, load "
        f"average at end {', '.join(f'{x:.2f}' for x in meta.get('loadavg_end', []))}"
    )
    if meta.get("launchers_differ"):
        print(f"NOTE: broker launchers differ between the trees: {meta['launchers_differ']}")
    for bench in meta["benchmarks"]:
        loaded = {}
        for label in ("before", "after"):
            path = out / f"{bench}-{label}.json"
            loaded[label] = json.loads(path.read_text()) if path.exists() else None
        runs = {r["label"]: r for r in meta.get("runs", []) if r["bench"] == bench}
        bad = [f"{k} exit {v.get('exit')}" for k, v in runs.items() if v.get("exit")]
        print(f"\n{bench}.py" + (f" ({'; '.join(bad)})" if bad else ""))
        print(side_by_side(bench, loaded["before"], loaded["after"]))


# --- main ------------------------------------------------------------------------------------


def revision(tree: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--", "kgroup"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.strip()
    return (out.stdout.strip() or None) and out.stdout.strip() + (" +changes" if dirty else "")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--before", type=Path, default=Path("/work/wt-before"))
    p.add_argument("--after", type=Path, default=HERE.parent)
    p.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    p.add_argument("--only", default=",".join(BENCHMARKS), help="subset of the benchmarks")
    p.add_argument("--peers", action="store_true", help="aiokafka as a reference row")
    p.add_argument("--repeat", type=int, default=1, help="membership / consumer repetitions")
    p.add_argument("--idle-members", type=int, default=200)
    p.add_argument("--idle-window", type=float, default=10.0)
    p.add_argument("--slices", default="0,10,50", help="heartbeat.py slices, ms")
    p.add_argument("--phase-s", type=float, default=5.0, help="heartbeat.py seconds per slice")
    p.add_argument("--records", type=int, default=300_000, help="consumer.py records")
    p.add_argument("--reactions", type=int, default=10)
    p.add_argument("--timeout", type=float, default=1800.0, help="per benchmark run, s")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: temp)")
    p.add_argument("--render", type=Path, default=None, help="reprint the tables of a run dir")
    a = p.parse_args(argv)
    a.bench_list = [x.strip() for x in a.only.split(",") if x.strip()]
    for x in a.bench_list:
        if x not in BENCHMARKS:
            p.error(f"unknown benchmark {x!r}")
    for tree in (a.before, a.after):
        if a.render is None and not (tree / "kgroup" / "__init__.py").exists():
            p.error(f"{tree} holds no kgroup package")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.render is not None:
        print_comparison(a.render)
        return 0
    install_interrupts()
    a.out = a.out or Path(tempfile.mkdtemp(prefix="kgroup-compare-"))
    a.out.mkdir(parents=True, exist_ok=True)
    before, after = a.before.resolve(), a.after.resolve()
    differ = _launchers_differ(before, after)  # each tree starts the broker from its own code
    meta: dict[str, Any] = {
        "before": str(before),
        "after": str(after),
        "before_rev": revision(before),
        "after_rev": revision(after),
        "broker": a.broker,
        "benchmarks": a.bench_list,
        "launchers_differ": differ,
        "args": {k: str(v) for k, v in vars(a).items()},
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "runs": [],
    }
    interrupted = False
    try:
        for i, bench in enumerate(a.bench_list):
            order = [("before", before), ("after", after)]
            if i % 2:
                order.reverse()
            for label, tree in order:
                meta["runs"].append(run_one(bench, label, tree, a))
                meta["loadavg_end"] = list(os.getloadavg())
                (a.out / "compare.json").write_text(json.dumps(meta, indent=2) + "\n")
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted")
    meta["loadavg_end"] = list(os.getloadavg())
    (a.out / "compare.json").write_text(json.dumps(meta, indent=2) + "\n")
    print_comparison(a.out)
    print(f"\noutputs: {a.out}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
