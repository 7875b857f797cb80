"""Work sharding on a Kafka group: named jobs spread over the running processes.

python examples/work_sharding.py --bootstrap localhost:9092 --group crawlers --jobs 12

Start it a few times: the jobs are spread evenly (counts differ by at most one); when a
process joins or leaves only the jobs that must move do (cooperative, sticky). Each
process prints ``start <job>`` and ``stop <job>`` lines and, after every change,
``holding <n>: <jobs>``. Send SIGUSR1 to add a job to this process's list (it tells the
group at once; start the others with the same jobs, or signal them too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from kgroup import GroupConfig, GroupMember, ItemListener, WorkSharding


class Jobs(ItemListener):
    """The listener: starts and stops jobs as the group hands them over."""

    def __init__(self) -> None:
        self.running: set[str] = set()

    def on_partitions_assigned(self, jobs: frozenset[str]) -> None:
        for job in sorted(jobs):
            print(f"start {job}", flush=True)
        self.running |= jobs
        print(f"holding {len(self.running)}: {' '.join(sorted(self.running))}", flush=True)

    def on_partitions_revoked(self, jobs: frozenset[str]) -> None:
        for job in sorted(jobs):
            print(f"stop {job}", flush=True)  # finish or checkpoint the job here
        self.running -= jobs

    def on_partitions_lost(self, jobs: frozenset[str]) -> None:
        for job in sorted(jobs):
            print(f"stop {job} (lost)", flush=True)
        self.running -= jobs


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--group", default="kgroup-sharding-example")
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--session-ms", type=int, default=10_000, help="session timeout")
    args = parser.parse_args()
    names = [f"job-{i:03d}" for i in range(args.jobs)]
    sharding = WorkSharding(names)
    config = GroupConfig(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=min(1_000, args.session_ms // 3),
    )
    stop, grow = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, grow.set)
    async with GroupMember(config, listener=Jobs(), protocol=sharding) as member:
        while not stop.is_set():
            if grow.is_set():
                grow.clear()
                names.append(f"job-{len(names):03d}")
                if sharding.set_resources(names):
                    member.enforce_rebalance("jobs added")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await member.poll(timeout=1.0)


if __name__ == "__main__":
    asyncio.run(main())
