"""A GroupConsumer in its own process, for the crash tests in test_consumer.py.

Usage: python _consumer_proc.py BOOTSTRAP GROUP TOPIC OUT_FILE NAME [ASSIGNOR]

ASSIGNOR is a classic assignor (``range`` by default), or ``consumer`` for the KIP-848
consumer protocol (the broker assigns; the group's session must be set to 6 s on the
broker, which the member is told through ``consumer_session_timeout_ms``).

It consumes TOPIC in GROUP from the earliest offset, and appends to OUT_FILE (one line per
event, each line written with one unbuffered ``os.write`` so a SIGKILL never leaves half a
line):

- ``P <name> <partition> <offset>`` after it processed a record;
- ``C <name> <partition> <offset>`` after a commit of <offset> succeeded;
- ``A <name> <partitions>`` / ``R ...`` / ``L ...`` when partitions are assigned, revoked or
  lost;
- ``READY <name>`` once it has started.

SIGTERM makes it close gracefully (commit, revoke, leave); SIGKILL is the crash under test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from kgroup import CommitFailed, GroupConfig, GroupConsumer, RebalanceInProgress, TopicPartition


def main() -> None:
    bootstrap, group, topic, out_path, name = sys.argv[1:6]
    assignor = sys.argv[6] if len(sys.argv) > 6 else "range"
    fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    class Listener:
        def on_partitions_assigned(self, tps: frozenset[TopicPartition]) -> None:
            emit(f"A {name} {','.join(str(tp.partition) for tp in sorted(tps))}")

        def on_partitions_revoked(self, tps: frozenset[TopicPartition]) -> None:
            emit(f"R {name} {','.join(str(tp.partition) for tp in sorted(tps))}")

        def on_partitions_lost(self, tps: frozenset[TopicPartition]) -> None:
            emit(f"L {name} {','.join(str(tp.partition) for tp in sorted(tps))}")

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        protocol: dict[str, object] = (
            {"group_protocol": "consumer", "consumer_session_timeout_ms": 6000}
            if assignor == "consumer"
            else {
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 500,
                "assignors": (assignor,),
            }
        )
        config = GroupConfig(
            bootstrap_servers=bootstrap,
            group_id=group,
            topics=[topic],
            max_poll_interval_ms=20_000,
            request_timeout_ms=10_000,
            client_id=name,
            **protocol,  # type: ignore[arg-type]
        )
        consumer = GroupConsumer(
            config, listener=Listener(), auto_offset_reset="earliest", enable_auto_commit=True
        )
        async with consumer:
            emit(f"READY {name}")
            while not stop.is_set():
                batch = await consumer.getmany(timeout=0.5, max_records=10)
                if not batch:
                    continue
                done: dict[TopicPartition, int] = {}
                for tp, records in batch.items():
                    for record in records:
                        emit(f"P {name} {tp.partition} {record.offset}")
                    done[tp] = records[-1].offset + 1
                await asyncio.sleep(0.02)  # the "processing" of a batch
                try:
                    await consumer.commit(done)
                except (CommitFailed, RebalanceInProgress):
                    continue  # the revoke's auto-commit or the next owner takes over
                for tp, offset in done.items():
                    emit(f"C {name} {tp.partition} {offset}")
        emit(f"CLOSED {name}")

    asyncio.run(run())


if __name__ == "__main__":
    main()
