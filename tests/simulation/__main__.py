"""Replay or sweep simulation schedules.

python -m tests.simulation --seed N [--trace]      # one schedule (the full trace)
python -m tests.simulation --seeds 1000 [--start S] [--workers 2] [--flavor leader]

The group kind is drawn from the seed; --flavor (or its older name --assignor) forces one
of range, roundrobin, sticky, cooperative-sticky, upgrade, leader, shards, or consumer (the
KIP-848 consumer protocol), leaving the schedule's other parameters as they are.
Seeds found before the kinds were drawn replay with --flavor range or --flavor roundrobin.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

from ._world import run_schedule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    parser.add_argument("--seed", type=int, help="run this one schedule")
    parser.add_argument("--trace", action="store_true", help="print its full event trace")
    parser.add_argument("--seeds", type=int, default=0, help="sweep this many schedules")
    parser.add_argument("--start", type=int, default=0, help="first seed of the sweep")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--flavor", "--assignor", dest="flavor", default=None)
    args = parser.parse_args(argv)
    if args.seed is not None:
        result = run_schedule(args.seed, trace=True, flavor=args.flavor)
        if args.trace:
            for line in result.trace:
                print(line)
        digest = hashlib.sha256("\n".join(result.trace).encode()).hexdigest()
        print(f"# {result.params.describe()}")
        print(
            f"# faults={dict(sorted(result.faults.items()))} rebalances={result.rebalances} "
            f"time_to_stable={result.time_to_stable} events={result.sim_events} "
            f"cooperative_rebalances={result.cooperative_rebalances} "
            f"trace_sha256={digest}"
        )
        if result.failure is not None:
            print(f"# FAILED: {result.failure}")
            return 1
        print("# ok")
        return 0
    if args.seeds:
        from .test_simulation import sweep

        summary = sweep(range(args.start, args.start + args.seeds), args.workers, args.flavor)
        print(summary.table())
        return 1 if summary.failures else 0
    parser.print_usage()
    return 2


if __name__ == "__main__":
    sys.exit(main())
