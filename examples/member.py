"""A group member in an asyncio service: join, log assignment changes, leave on Ctrl-C.

python examples/member.py --bootstrap localhost:9092 --group billing --topic invoices
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from kgroup import GroupConfig, GroupMember, TopicPartition


class PrintingListener:
    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        print("revoked:", sorted(map(str, partitions)))  # commit your work here

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        print("assigned:", sorted(map(str, partitions)))

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        print("lost (another member may own them now):", sorted(map(str, partitions)))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--group", default="kgroup-example")
    parser.add_argument("--topic", action="append", required=True)
    args = parser.parse_args()
    config = GroupConfig(bootstrap_servers=args.bootstrap, group_id=args.group, topics=args.topic)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with GroupMember(config, listener=PrintingListener()) as member:
        while not stop.is_set():
            poll = asyncio.create_task(member.poll(timeout=1.0))
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not poll.done():
                poll.cancel()  # safe: an in-flight JoinGroup keeps going inside the member
            with contextlib.suppress(asyncio.CancelledError):
                await poll
    # Leaving the block revoked the partitions and sent LeaveGroup.


if __name__ == "__main__":
    asyncio.run(main())
