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
kernel's peak resident set) of the measured process and of its descendants, keeps each
process's highest, and reports two sums: the driver (the Python driver and Spark's JVM,
which in local mode is driver and executors at once; for the reference, its one process)
and PySpark's Python workers (the daemon and the workers it forks, which the python reader
runs its tasks in; the JVM starts them from a worker thread). Each is an upper bound of the
peak of its sum (a forked worker's pages shared with the daemon count twice). Short-lived
helpers (Spark's launcher, which exits before the JVM starts, and the JVM's spawn helper)
are left out. The JVM runs with the job's own settings for a
local master (``kgroup.analytics.job.LOCAL_DEFAULTS``: a 512 MiB heap, the serial
collector, bounded code cache, metaspace and thread stacks; with the python reader, the
JIT's first tier only, ``FIRST_TIER_ONLY``), as a user gets them;
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
    """Every descendant of ``pid``: the children of each of its threads (the JVM starts
    PySpark's Python workers from a worker thread, not from its main one)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for c in children:
            out.append(int(c))
            out.extend(_descendants(int(c)))
    return out


def _role(pid: int, root: int) -> str | None:
    """``driver`` (the measured process, or Spark's JVM), ``workers`` (PySpark's Python
    workers), or None: a process that is not part of the peak (the launcher that builds
    the JVM's command line and exits before it starts, ``chmod`` and the JVM's spawn helper,
    which shares the JVM's memory until it runs its command)."""
    if pid == root:
        return "driver"
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    text = b" ".join(args)
    if b"pyspark.daemon" in text or b"pyspark.worker" in text:
        return "workers"
    if b"org.apache.spark.deploy.SparkSubmit" in text:
        # A child that still shows the JVM's command line is its spawn helper before it
        # runs its command (it shares the JVM's memory): not counted twice.
        return None if _is_jvm(_parent(pid)) else "driver"
    return None


def _is_jvm(pid: int) -> bool:
    try:
        return b"org.apache.spark.deploy.SparkSubmit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Run ``cmd``; return (wall seconds, peak MiB of the driver (it and Spark's JVM), peak
    MiB of PySpark's Python workers, stdout)."""
    peaks: dict[int, tuple[str, int]] = {}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    while proc.poll() is None:
        for pid in [proc.pid, *_descendants(proc.pid)]:
            role = _role(pid, proc.pid)
            if role is not None:
                peaks[pid] = (role, max(peaks.get(pid, (role, 0))[1], _hwm_kib(pid)))
        try:
            proc.wait(0.2)
        except subprocess.TimeoutExpired:
            pass
    wall = time.monotonic() - start
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}):\n{out[-2000:]}")
    driver = sum(kib for role, kib in peaks.values() if role == "driver") / 1024
    workers = sum(kib for role, kib in peaks.values() if role == "workers") / 1024
    return wall, driver, workers, out


def verify(outs: list[Path], env: dict[str, str]) -> None:
    """Check that every run wrote the same tables (each one's rows, as multisets)."""
    code = f"""
import sys
from kgroup.analytics import TABLES
from kgroup.analytics.job import build_session
spark = build_session("local[2]", conf=["spark.ui.enabled=false"])
outs = {[str(o) for o in outs]!r}
for name in TABLES:
    path = "bad_records" if name == "bad_records" else "tables/" + name
    frames = [spark.read.parquet(o + "/" + path) for o in outs]
    if name == "summary":
        frames = [f.drop("job_seconds") for f in frames]
    for other in frames[1:]:
        a, b = frames[0].exceptAll(other).count(), other.exceptAll(frames[0]).count()
        if a or b:
            sys.exit(f"{{name}}: {{a}} and {{b}} rows differ")
print("same tables:", ", ".join(TABLES))
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the readers' tables differ: {done.stderr[-2000:]}")
    print("  " + done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--dir", default="/tmp/kgroup-bench-logs")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument(
        "--readers",
        default="python,spark",
        help="the job's readers to time (--reader of kgroup report), comma-separated",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking that the readers' tables are the same (a Spark job after the runs)",
    )
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
        outs = []
        for reader in args.readers.split(","):
            out = Path(args.dir) / f"out-{size}-{reader}"
            shutil.rmtree(out, ignore_errors=True)
            wall, mib, workers, _ = measure(
                [
                    sys.executable, "-m", "kgroup.analytics.job", str(logs), "--out", str(out),
                    "--master", "local[2]", "--no-html", "-q", "--reader", reader, *jvm,
                    "--conf", "spark.ui.enabled=false",
                    "--conf", "spark.driver.host=127.0.0.1",
                ],
                env,
            )  # fmt: skip
            summary = json.loads((out / "summary.json").read_text())
            rows.append((f"Spark local[2], {reader} reader", summary["events"], wall, mib, workers))
            print(
                f"  {reader} reader: {wall:.1f} s, {summary['events'] / wall:,.0f} events/s, "
                f"driver {mib:.0f} MiB, Python workers {workers:.0f} MiB"
            )
            outs.append(out)
        if len(outs) > 1 and not args.no_verify:
            verify(outs, env)
        if not args.skip_reference and size <= args.reference_max_events:
            code = (
                "import sys; from tests.analytics._reference import reference_tables, "
                "source_lines; t = reference_tables(source_lines([sys.argv[1]])); "
                "print(t['summary'][0]['events'])"
            )
            wall, mib, _workers, text = measure([sys.executable, "-c", code, str(logs)], env)
            n = int(text.split()[-1])
            rows.append(("pure-Python reference", n, wall, mib, 0.0))
            print(f"  reference: {wall:.1f} s, {n / wall:,.0f} events/s, {mib:.0f} MiB")
    print()
    print("| pipeline | events | wall time | events/s | driver peak | Python workers' peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, wall, mib, workers in rows:
        w = f"{workers:,.0f} MiB" if workers else "none"
        print(f"| {name} | {n:,} | {wall:.1f} s | {n / wall:,.0f} | {mib:,.0f} MiB | {w} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
