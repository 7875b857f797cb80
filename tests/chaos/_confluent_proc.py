"""One confluent-kafka (librdkafka) member in its own process, for the chaos suite.

A mixed consumer-protocol group (``_schedule.py``: ``MemberSpec.confluent``) runs some slots
with confluent-kafka's ``Consumer`` on KIP-848's consumer protocol (``group.protocol:
consumer``); a migration's confluent slots start on the classic protocol (``--protocol
classic``, ``--assignor`` ``range`` or ``cooperative-sticky``, the session and heartbeat
given) and are rolled onto the consumer protocol like the others. Like
``kgroup/testing/java/JavaMember.java``, it prints one JSON object per line on stdout, each
with ``t`` (``time.monotonic()``, the clock every process of the run shares) and ``event``,
in JavaMember's vocabulary, so that the runner reads both alike:

- ``started``: the consumer is created and subscribed (``pid``);
- ``assigned`` (at the START of ``on_assign``), ``revoked`` (at the END of ``on_revoke``),
  ``lost`` (at the START of ``on_lost``), each with ``partitions`` (``[[topic, partition],
  ...]``: incremental under the consumer protocol and classic cooperative-sticky; under an
  eager classic assignor everything held is revoked before each assignment, so the lists
  read the same way) and ``assignment`` (what the member holds after the callback);
- ``status``: ``member_id``, ``assignment`` (``consumer.assignment()``) and ``join_state``
  (the ``cgrp`` part of librdkafka's statistics, every second: ``steady`` once a join
  completed) after a ``poll()`` that changed them. librdkafka exposes neither the
  generation nor the member epoch;
- ``error``: a fatal error (``type``: ``KafkaError``, ``message``), from the error callback
  or ``poll()``; ``notice``: a non-fatal one (librdkafka retries those itself: a broker
  down, a transport error), for the record only;
- ``closed``: after ``close()`` returned (``close_error``, ``close_s``).

SIGTERM (and SIGINT) end the poll loop; ``close()`` then revokes the partitions (the
``on_revoke`` callback) and leaves the group. librdkafka's own log goes to stderr, which the
runner writes to the member's log file. Run by hand::

    python tests/chaos/_confluent_proc.py --bootstrap 127.0.0.1:9092 --group g --topic t
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

_stop = False


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, stamped with ``time.monotonic()``."""
    record = {"t": time.monotonic(), "event": event, **fields}
    sys.stdout.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def _parts(partitions: Any) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def _request_stop(signum: int, frame: Any) -> None:
    global _stop
    _stop = True


def consumer_config(a: argparse.Namespace) -> dict[str, Any]:
    """The consumer's configuration: the group protocol; under the consumer protocol the
    schedule's broker assignor (the session and the heartbeat interval are the broker's),
    under classic the client assignor, session and heartbeat interval; the timeouts."""
    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "client.id": a.name,
        "group.protocol": a.protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": a.max_poll_ms,
        "socket.timeout.ms": a.request_timeout_ms,
        "retry.backoff.ms": a.retry_backoff_ms,
        "retry.backoff.max.ms": a.retry_backoff_max_ms,
        "reconnect.backoff.max.ms": a.retry_backoff_max_ms,
        "error_cb": _on_error,
    }
    conf["statistics.interval.ms"] = 1000
    conf["stats_cb"] = _on_stats
    if a.protocol == "classic":
        conf["partition.assignment.strategy"] = a.assignor
        conf["session.timeout.ms"] = a.session_ms
        conf["heartbeat.interval.ms"] = a.heartbeat_ms
    elif a.remote_assignor:
        conf["group.remote.assignor"] = a.remote_assignor
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    if a.debug:
        conf["debug"] = a.debug
    return conf


#: The group's join state in librdkafka's latest statistics (``cgrp.join_state``).
_join_state: str | None = None


def _on_stats(text: str) -> None:
    global _join_state
    try:
        _join_state = json.loads(text).get("cgrp", {}).get("join_state")
    except ValueError:
        pass


def _on_error(error: Any) -> None:
    if error.fatal():
        emit("error", type="KafkaError", message=str(error), code=error.code())
    else:
        emit("notice", message=str(error), code=error.code())


def run(a: argparse.Namespace) -> int:
    from confluent_kafka import Consumer

    held: set[tuple[str, int]] = set()
    # An eager classic assignor hands over whole assignments (assign/unassign); the
    # consumer protocol and cooperative-sticky hand over increments.
    eager = a.protocol == "classic" and a.assignor != "cooperative-sticky"

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        at = time.monotonic()
        held.update((tp.topic, tp.partition) for tp in partitions)
        emit_at(at, "assigned", partitions=_parts(partitions), assignment=sorted(held))
        if eager:
            consumer.assign(partitions)
        else:
            consumer.incremental_assign(partitions)

    def release(consumer: Any, partitions: list[Any]) -> None:
        if eager:
            consumer.unassign()
        else:
            consumer.incremental_unassign(partitions)

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        if a.revoke_work > 0:
            time.sleep(a.revoke_work)  # the application finishing its work
        release(consumer, partitions)
        held.difference_update((tp.topic, tp.partition) for tp in partitions)
        emit("revoked", partitions=_parts(partitions), assignment=sorted(held))

    def on_lost(consumer: Any, partitions: list[Any]) -> None:
        at = time.monotonic()
        held.difference_update((tp.topic, tp.partition) for tp in partitions)
        emit_at(at, "lost", partitions=_parts(partitions), assignment=sorted(held))
        release(consumer, partitions)

    consumer = Consumer(consumer_config(a))
    topics = a.topic.split(",")
    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("started", pid=os.getpid())
    last: tuple[Any, ...] | None = None
    exit_code = 0
    try:
        while not _stop:
            message = consumer.poll(a.poll_timeout)
            if message is not None and message.error() is not None:
                _on_error(message.error())
            status = (
                consumer.memberid(),
                tuple(map(tuple, _parts(consumer.assignment()))),
                _join_state,
            )
            if status != last:
                last = status
                emit(
                    "status",
                    member_id=status[0],
                    assignment=[list(tp) for tp in status[1]],
                    join_state=status[2],
                )
    except Exception as exc:
        emit("error", type=type(exc).__name__, message=str(exc))
        exit_code = 1
    started = time.monotonic()
    close_error = None
    try:
        consumer.close()  # on_revoke, then the leave heartbeat
    except Exception as exc:
        close_error = f"{type(exc).__name__}: {exc}"
        exit_code = 1
    emit("closed", close_error=close_error, close_s=time.monotonic() - started)
    return exit_code


def emit_at(at: float, event: str, **fields: Any) -> None:
    """A line stamped ``at`` (a callback's start) rather than now."""
    record = {"t": at, "event": event, **fields}
    sys.stdout.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True, help="a name, or names separated by commas")
    p.add_argument("--name", default="chaos-confluent")
    p.add_argument("--instance-id", default="")
    p.add_argument("--protocol", choices=("consumer", "classic"), default="consumer")
    p.add_argument("--remote-assignor", default="", help="consumer protocol: the broker's")
    p.add_argument("--assignor", default="range", help="classic: the client's assignor")
    p.add_argument("--session-ms", type=int, default=10_000, help="classic only")
    p.add_argument("--heartbeat-ms", type=int, default=1_000, help="classic only")
    p.add_argument("--max-poll-ms", type=int, default=12_000)
    p.add_argument("--request-timeout-ms", type=int, default=5_000)
    p.add_argument("--retry-backoff-ms", type=int, default=100)
    p.add_argument("--retry-backoff-max-ms", type=int, default=1000)
    p.add_argument("--poll-timeout", type=float, default=0.1)
    p.add_argument("--revoke-work", type=float, default=0.0)
    p.add_argument("--debug", default="cgrp", help="librdkafka's debug contexts ('' for none)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
