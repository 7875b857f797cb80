"""Leader election on a Kafka group: exactly one process leads; the others know who.

python examples/leader_election.py --bootstrap localhost:9092 --group scheduler --name node-1

Start it two or three times with different ``--name``s; stop the leader (Ctrl-C, or kill
it) and another takes over. Each process prints one line per change:
``leader <name>`` when it starts leading, ``follower of <leader's name>``, ``stepped down``.
A leader does its work only while it holds the token *and* its lease is valid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from kgroup import LEADER, GroupConfig, GroupMember, ItemListener, LeaderElection


class Announcer(ItemListener):
    """The listener: called in poll() as leadership moves (item names, not partitions)."""

    def __init__(self, name: str, election: LeaderElection) -> None:
        self.name, self.election = name, election

    def on_partitions_assigned(self, items: frozenset[str]) -> None:
        if LEADER in items:
            print(f"leader {self.name}", flush=True)
        elif self.election.leader_info:
            print(f"follower of {self.election.leader_info.decode()}", flush=True)

    def on_partitions_revoked(self, items: frozenset[str]) -> None:
        if LEADER in items:
            print("stepped down", flush=True)

    def on_partitions_lost(self, items: frozenset[str]) -> None:
        if LEADER in items:
            print("stepped down (lost)", flush=True)


async def lead(member: GroupMember, name: str) -> None:
    """The leader's work: here, a line every second while the lease vouches for it."""
    loop = asyncio.get_running_loop()
    while True:
        valid_until = member.valid_until
        if LEADER in member.assignment and valid_until is not None and loop.time() < valid_until:
            print(f"{name} working", flush=True)
        await asyncio.sleep(1.0)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--group", default="kgroup-leader-example")
    parser.add_argument("--name", required=True, help="what the others see of this process")
    parser.add_argument("--session-ms", type=int, default=10_000, help="session timeout")
    args = parser.parse_args()
    election = LeaderElection(info=args.name.encode())
    config = GroupConfig(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=min(1_000, args.session_ms // 3),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    listener = Announcer(args.name, election)
    async with GroupMember(config, listener=listener, protocol=election) as member:
        work = asyncio.create_task(lead(member, args.name))
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await member.poll(timeout=1.0)
        finally:
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
    # Leaving the block gave the leadership up and sent LeaveGroup: another leads at once.


if __name__ == "__main__":
    asyncio.run(main())
