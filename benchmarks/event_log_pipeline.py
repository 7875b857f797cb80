"""The event-log pipeline (kgroup.analytics) on big generated logs, against the reference.

    python benchmarks/event_log_pipeline.py                       # 1M and 10M events
    python benchmarks/event_log_pipeline.py --sizes 1000000 --skip-reference
    python benchmarks/event_log_pipeline.py --dir /data/bench      # where logs are kept

Logs: 100 groups of 50 members (20 hosts) with heartbeats every 3 s for as long as it takes
to reach the size (about 10 minutes of the groups' life for 1M events, 1.7 hours for 10M),
rebalances as members join, leave gracefully, crash, are evicted, fenced or lose their lease
(0.3 faults per member), late heartbeats and loop stalls, per-host clock skew; one file per
process, gzipped for 30% of them. They are generated once by tests/analytics/_logs.py (one
group at a time, so the generator's memory stays small) and kept under ``--dir``.

Each run is a fresh process, measured end to end (wall time from process start to exit,
JVM start included): the Spark job as ``python -m kgroup.analytics.job LOGS --out DIR
--master local[2] --no-html`` and the pure-Python reference (tests/analytics/_reference.py)
reading the same files. Peak memory: every 0.2 s the benchmark reads ``VmHWM`` (the
kernel's peak resident set) of the measured process and of each of its descendants (the
driver's JVM), keeps each process's highest, and reports their sum: for the Spark job that
is the Python driver plus the JVM (in local mode the JVM is driver and executors at once),
an upper bound of the peak of their sum. The JVM runs with the job's own settings for a
local master (``kgroup.analytics.job.LOCAL_DEFAULTS``: a 512 MiB heap, the serial
collector, bounded code cache, metaspace and thread stacks), as a user gets them;
``--driver-memory`` and ``--driver-java-options`` override them. The
reference runs up to 2M events (``--reference-max-events``): it holds every event in
memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from tests.analytics._logs import Options, simulate, write_logs  # noqa: E402

GROUPS = 100
MEMBERS = 50
HEARTBEAT_S = 3.0


def generate(target_events: int, directory: Path, seed: int = 7) -> int:
    """Write logs of about ``target_events`` events under ``directory``; return the number
    of lines written (kept in ``directory/_events``, so a second call reuses them)."""
    marker = directory / "_events"
    if marker.exists():
        return int(marker.read_text())
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    per_group = target_events / GROUPS
    duration = per_group / MEMBERS * HEARTBEAT_S
    total = 0
    for gi in range(GROUPS):
        opts = Options(
            groups=1,
            members=(MEMBERS, MEMBERS),
            partitions=(MEMBERS * 2, MEMBERS * 2),
            duration_s=duration,
            heartbeat_s=HEARTBEAT_S,
            faults=0.3,
            overlaps=0.0,
            skew_ms=20.0,
            leader_groups=0.05,
            cooperative=0.3,
            stall_rate=0.002,
            fail_rate=0.002,
            hosts=20,
        )
        members = simulate(seed * 1000 + gi, opts, first_group=gi)
        n = sum(len(m) for m in members)
        total += n
        write_logs(members, directory / f"g{gi:03d}", seed + gi, rotate_lines=1_000_000)
        if gi == 0:  # calibrate the duration on the first group
            duration *= per_group / max(1, n)
        print(f"\r  generated {gi + 1}/{GROUPS} groups, {total:,} events", end="", flush=True)
    print()
    marker.write_text(str(total))
    return total


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for c in children:
        out.append(int(c))
        out.extend(_descendants(int(c)))
    return out


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``cmd``; return (wall seconds, peak MiB of it and its descendants, stdout)."""
    peaks: dict[int, int] = {}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    while proc.poll() is None:
        for pid in [proc.pid, *_descendants(proc.pid)]:
            peaks[pid] = max(peaks.get(pid, 0), _hwm_kib(pid))
        try:
            proc.wait(0.2)
        except subprocess.TimeoutExpired:
            pass
    wall = time.monotonic() - start
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}):\n{out[-2000:]}")
    return wall, sum(peaks.values()) / 1024, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--dir", default="/tmp/kgroup-bench-logs")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument(
        "--reference-max-events",
        type=int,
        default=2_000_000,
        help="run the reference only up to this size (it holds every event in memory, "
        "about 2 KiB each: 10M events would need about 20 GiB)",
    )
    parser.add_argument(
        "--driver-memory",
        help="the JVM heap (spark.driver.memory); default: the job's own (512m on a local "
        "master, kgroup.analytics.job.LOCAL_DEFAULTS)",
    )
    parser.add_argument(
        "--driver-java-options",
        help="spark.driver.extraJavaOptions; default: the job's own",
    )
    args = parser.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(CHECKOUT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jvm = []
    if args.driver_memory:
        jvm += ["--conf", f"spark.driver.memory={args.driver_memory}"]
    if args.driver_java_options:
        jvm += ["--conf", f"spark.driver.extraJavaOptions={args.driver_java_options}"]
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        logs = Path(args.dir) / str(size)
        print(f"logs for {size:,} events under {logs}")
        generated = generate(size, logs)
        print(f"  {generated:,} events in the logs")
        out = Path(args.dir) / f"out-{size}"
        shutil.rmtree(out, ignore_errors=True)
        wall, mib, _ = measure(
            [
                sys.executable, "-m", "kgroup.analytics.job", str(logs), "--out", str(out),
                "--master", "local[2]", "--no-html", "-q", *jvm,
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.driver.host=127.0.0.1",
            ],
            env,
        )  # fmt: skip
        summary = json.loads((out / "summary.json").read_text())
        rows.append(("Spark local[2]", summary["events"], wall, mib))
        print(f"  spark: {wall:.1f} s, {summary['events'] / wall:,.0f} events/s, {mib:.0f} MiB")
        if not args.skip_reference and size <= args.reference_max_events:
            code = (
                "import sys; from tests.analytics._reference import reference_tables, "
                "source_lines; t = reference_tables(source_lines([sys.argv[1]])); "
                "print(t['summary'][0]['events'])"
            )
            wall, mib, text = measure([sys.executable, "-c", code, str(logs)], env)
            n = int(text.split()[-1])
            rows.append(("pure-Python reference", n, wall, mib))
            print(f"  reference: {wall:.1f} s, {n / wall:,.0f} events/s, {mib:.0f} MiB")
    print()
    print("| pipeline | events | wall time | events/s | peak memory |")
    print("|---|---:|---:|---:|---:|")
    for name, n, wall, mib in rows:
        print(f"| {name} | {n:,} | {wall:.1f} s | {n / wall:,.0f} | {mib:,.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
