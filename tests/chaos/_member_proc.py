"""One kgroup member in its own process, for the chaos suite (``_runner.py`` starts it).

Its own process, so that SIGKILL and SIGSTOP hit a real process. It runs a
:class:`kgroup.GroupMember` with a recording listener and a poll loop, and prints one JSON
object per line on stdout. Every line has ``t`` (``time.monotonic()``: CLOCK_MONOTONIC is
system-wide on Linux, so every process of the run shares it) and ``event``:

- ``ready``: the member is constructed and about to start (``pid``, ``lease``: whether the
  core knows the member lease, i.e. may emit ``lease_expired``; ``protocol``: classic or
  consumer);
- ``assigned`` (at the START of ``on_partitions_assigned``), ``revoked`` (at the END of
  ``on_partitions_revoked``, ``cancelled`` when it ended because ``poll()`` was cancelled
  while it awaited), ``lost`` (at the START of ``on_partitions_lost``), each with
  ``partitions`` (``[[topic, partition], ...]``) and ``generation``;
- ``lease_expired``: the core's ``member.lease_expired`` with ``deadline`` converted to
  seconds of ``time.monotonic()`` (the core's clock is the event loop's ``time()`` in ms);
- ``status``: ``state``, ``generation``, ``member_id``, ``leader`` and ``assignment``,
  whenever one of them changed (checked after every ``poll()`` and state change);
- ``core``: other core events worth reading in a failure (joins, rejoin reasons,
  coordinator changes, fatal errors), with their fields;
- ``error``: an exception ``poll()`` raised (``type``, ``mro``: the class names, ``message``,
  ``fatal``: a :class:`kgroup.GroupError`). The loop keeps polling, as an application that
  catches and retries would, except after ``FencedInstanceId`` (the documented reaction
  is to shut down);
- ``closing`` (SIGTERM seen: the poll task is cancelled and ``close()`` runs), then
  ``closed`` with what was left after ``close()``: ``tasks`` (asyncio tasks other than the
  main one), ``sockets`` (socket fds beyond those open before the member was created),
  ``transports`` (asyncio transports not closing), ``warnings`` (every warning and
  unraisable exception captured, ResourceWarning as an error), ``loop_errors`` (the loop's
  exception handler calls), ``close_error`` and ``close_s``; finally ``exit`` (after the
  event loop closed) with any warning captured since ``closed``.

``--protocol consumer`` runs KIP-848's consumer protocol (``--remote-assignor``, and
``--session-ms`` as ``consumer_session_timeout_ms``, the bound of the lease; the session,
heartbeat and assignor options of the classic protocol are not used). Its ``generation``
is the member epoch, which differs from member to member.

``--handoff`` closes with ``handoff_on_close`` (the runner gives it to half the kgroup
processes: ``handoff_for``): under classic cooperative-sticky a rejoin marked as leaving
first, under the consumer protocol a wait for the group's next heartbeat tick.

``--consume`` runs a :class:`kgroup.GroupConsumer` instead (the same listener and lines; its
member is ``consumer.member``): every fetch call is a poll, each batch is "processed" for
``--process-ms`` and then committed (auto-commit off), and two more kinds of line report
it: ``records`` (``partition``, ``first`` and ``last`` offset of a batch, written once it
is processed, before its commit) and ``committed`` (``partition``, ``offset``: the commit
of that batch returned); a commit that raises gives ``commit_failed`` (``type``). A start
that fails (no bootstrap broker answers: a broker restart) gives ``start_failed`` and is
retried with a new GroupConsumer, as an application would.

kgroup's own logs (structlog) go to stderr, which the runner writes to the member's log
file. Run by hand::

    python tests/chaos/_member_proc.py --bootstrap 127.0.0.1:9092 --group g --topic t
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

_captured: list[str] = []
_reported = 0  # how many of _captured the ``closed`` line carried


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, stamped with ``time.monotonic()``."""
    record = {"t": time.monotonic(), "event": event, **fields}
    sys.stdout.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def _showwarning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    _captured.append(f"{category.__name__}: {message} ({filename}:{lineno})")


def _unraisable(unraisable: Any) -> None:
    exc = unraisable.exc_value
    _captured.append(
        f"unraisable {type(exc).__name__}: {exc} ({unraisable.err_msg or 'in'} "
        f"{unraisable.object!r})"
    )


def capture_warnings() -> None:
    """Record every warning (each time it happens) and every unraisable exception;
    ResourceWarning is an error, which surfaces through the unraisable hook when raised in
    a ``__del__``."""
    warnings.showwarning = _showwarning
    warnings.simplefilter("always")
    warnings.simplefilter("error", ResourceWarning)
    sys.unraisablehook = _unraisable


def configure_logging(level: str) -> None:
    """kgroup's structlog events to stderr (stdout carries the JSON lines)."""
    import structlog

    numeric = getattr(logging, level.upper())
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(asctime)s %(name)s %(message)s")
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f"),
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(
                key_order=["timestamp", "level", "event"], drop_missing=True
            ),
        ],
    )


def open_sockets() -> set[str]:
    """This process's socket fds, as ``"fd -> socket:[inode]"``."""
    found: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:"):
                found.add(target)
    return found


# Core events copied to stdout as ``core`` lines (the rest is in the log file).
_CORE_EVENTS = frozenset(
    {
        "member.joined",
        "member.synced",
        "member.rejoin_requested",
        "member.coordinator_found",
        "member.coordinator_lost",
        "member.fatal_error",
        "member.poll_timeout",
        "member.leaving",
        "member.lease_renewed",
    }
)


def _parts(partitions: Any) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


async def run(a: argparse.Namespace) -> None:
    from kgroup import (
        CommitFailed,
        FencedInstanceId,
        GroupConfig,
        GroupConsumer,
        GroupError,
        GroupMember,
        OffsetsError,
        RebalanceInProgress,
    )
    from kgroup._core._member import MemberCore

    loop = asyncio.get_running_loop()
    loop_errors: list[str] = []

    def on_loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        where = context.get("future") or context.get("task") or context.get("handle")
        made = context.get("source_traceback")  # with PYTHONASYNCIODEBUG=1
        origin = f" made at {made[-1].filename}:{made[-1].lineno}" if made else ""
        loop_errors.append(
            f"{context.get('message')}: {exc!r}" + (f" ({where!r}{origin})" if where else "")
        )

    loop.set_exception_handler(on_loop_error)
    baseline = open_sockets()  # the loop's self-pipe and whatever the runtime opened

    protocol: dict[str, Any]
    if a.protocol == "consumer":
        # KIP-848: the broker owns the session, the interval and the assignment (the
        # classic settings are ConfigErrors); the lease is told the group's session.
        protocol = {
            "group_protocol": "consumer",
            "group_remote_assignor": a.remote_assignor or None,
            "consumer_session_timeout_ms": a.session_ms,
        }
    else:
        protocol = {
            "assignors": tuple(a.assignor.split(",")),
            "session_timeout_ms": a.session_ms,
            "heartbeat_interval_ms": a.heartbeat_ms,
        }
        if a.metadata_max_age_ms:  # a schedule that grows the topic: the leader must see it
            protocol["metadata_max_age_ms"] = a.metadata_max_age_ms
    config = GroupConfig(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        topics=[] if a.pattern else a.topic.split(","),
        topic_pattern=a.pattern or None,
        group_instance_id=a.instance_id or None,
        **protocol,
        max_poll_interval_ms=a.max_poll_ms,
        request_timeout_ms=a.request_timeout_ms,
        retry_backoff_ms=a.retry_backoff_ms,
        retry_backoff_max_ms=a.retry_backoff_max_ms,
        close_timeout_ms=a.close_timeout_ms,
        client_id=a.name,
        handoff_on_close=a.handoff,
    )
    member: GroupMember

    class Listener:
        async def on_partitions_assigned(self, partitions: frozenset[Any]) -> None:
            emit("assigned", partitions=_parts(partitions), generation=generation())

        async def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
            cancelled = False
            try:
                if a.revoke_work > 0:
                    await asyncio.sleep(a.revoke_work)  # the application finishing its work
            except asyncio.CancelledError:
                # poll() was cancelled (SIGTERM) while this callback awaited: the callback
                # ends here, and the application stops working on these partitions.
                cancelled = True
                raise
            finally:
                emit(
                    "revoked",
                    partitions=_parts(partitions),
                    generation=generation(),
                    cancelled=cancelled,
                )

        async def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
            emit("lost", partitions=_parts(partitions), generation=generation())

    def generation() -> int:
        return member.generation.generation_id

    last_status: tuple[Any, ...] | None = None

    def emit_status() -> None:
        nonlocal last_status
        status = (
            member.state.name,
            member.generation.generation_id,
            member.member_id,
            member.is_leader,
            tuple(map(tuple, _parts(member.assignment))),
        )
        if status != last_status:
            last_status = status
            emit(
                "status",
                state=status[0],
                generation=status[1],
                member_id=status[2],
                leader=status[3],
                assignment=_parts(member.assignment),
            )

    def observer(event: str, fields: Mapping[str, Any]) -> None:
        if event == "member.lease_expired":
            deadline = fields.get("deadline")
            extra = {k: v for k, v in fields.items() if k != "deadline"}
            emit(
                "lease_expired",
                deadline=None if deadline is None else float(deadline) / 1000.0,
                **extra,
            )
        elif event in _CORE_EVENTS:
            emit("core", name=event, **fields)
        if event == "member.state_changed":
            loop.call_soon(emit_status)  # after the core finished the transition

    def new_consumer() -> GroupConsumer:
        made = GroupConsumer(
            config, listener=Listener(), auto_offset_reset="earliest", enable_auto_commit=False
        )
        made.member.add_event_hook(observer)
        return made

    consumer: GroupConsumer | None = None
    if a.consume:
        consumer = new_consumer()
        member = consumer.member
    else:
        member = GroupMember(config, listener=Listener())
        member.add_event_hook(observer)

    async def start_consumer() -> GroupConsumer:
        """Start the GroupConsumer; when no bootstrap broker answers (a broker restart),
        the application's retry: a new GroupConsumer, half a second later."""
        nonlocal consumer, member
        while True:
            assert consumer is not None
            try:
                await consumer.start()
            except Exception as exc:
                emit("start_failed", type=type(exc).__name__, message=str(exc))
                await asyncio.sleep(0.5)
                consumer = new_consumer()
                member = consumer.member
            else:
                return consumer

    async def consume(consumer: GroupConsumer) -> None:
        """One fetch call, the batch's processing, and its commit."""
        batch = await consumer.getmany(timeout=a.poll_timeout, max_records=a.max_records)
        if not batch:
            return
        await asyncio.sleep(a.process_ms / 1000.0)  # the application's processing
        for tp, records in sorted(batch.items()):
            emit(
                "records", partition=tp.partition, first=records[0].offset, last=records[-1].offset
            )
        offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
        try:
            await consumer.commit(offsets)
        except (CommitFailed, RebalanceInProgress, OffsetsError) as exc:
            emit("commit_failed", type=type(exc).__name__, message=str(exc))
            return
        for tp, offset in sorted(offsets.items()):
            emit("committed", partition=tp.partition, offset=offset)

    async def poll_loop() -> None:
        started = await start_consumer() if consumer is not None else None
        failures = 0
        while True:
            try:
                if started is not None:
                    await consume(started)
                else:
                    await member.poll(timeout=a.poll_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                emit(
                    "error",
                    type=type(exc).__name__,
                    mro=[c.__name__ for c in type(exc).__mro__],
                    message=str(exc),
                    fatal=isinstance(exc, GroupError),
                )
                if isinstance(exc, FencedInstanceId) or failures > 100:
                    emit("gave_up", reason=type(exc).__name__, failures=failures)
                    return
                await asyncio.sleep(0.1)  # the application's retry pace after an error
            emit_status()

    poll_task = loop.create_task(poll_loop(), name="chaos-poll-loop")
    loop.add_signal_handler(signal.SIGTERM, poll_task.cancel)
    emit(
        "ready",
        pid=os.getpid(),
        lease=hasattr(MemberCore, "check_lease"),
        protocol=a.protocol,
        topics=list(config.topics),
        pattern=config.topic_pattern,
    )
    if consumer is None:
        await member.start()  # connects nothing: the first poll() does
    with contextlib.suppress(asyncio.CancelledError):
        await poll_task
    emit("closing")
    loop.remove_signal_handler(signal.SIGTERM)
    started = time.monotonic()
    close_error = None
    try:
        await (member.close() if consumer is None else consumer.close())
    except Exception as exc:
        close_error = f"{type(exc).__name__}: {exc}"
    close_s = time.monotonic() - started
    emit_status()
    await asyncio.sleep(0)  # let callbacks scheduled by close() run
    me = asyncio.current_task()
    tasks = [f"{t.get_name()}: {t.get_coro()!r}" for t in asyncio.all_tasks() if t is not me]
    gc.collect()
    transports = [
        repr(o)
        for o in gc.get_objects()
        if isinstance(o, asyncio.BaseTransport) and not o.is_closing()
    ]
    global _reported
    _reported = len(_captured)
    emit(
        "closed",
        close_s=close_s,
        close_error=close_error,
        tasks=tasks,
        sockets=sorted(open_sockets() - baseline),
        transports=transports,
        warnings=list(_captured),
        loop_errors=loop_errors,
        assignment=_parts(member.assignment),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True, help="a name, or names separated by commas")
    p.add_argument("--name", default="chaos-member")
    p.add_argument("--instance-id", default="")
    p.add_argument("--assignor", default="range", help="name, or names separated by commas")
    p.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    p.add_argument("--remote-assignor", default="", help="the broker's (consumer protocol)")
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument("--max-poll-ms", type=int, default=12_000)
    p.add_argument("--request-timeout-ms", type=int, default=5_000)
    p.add_argument("--retry-backoff-ms", type=int, default=100)
    p.add_argument("--retry-backoff-max-ms", type=int, default=1000)
    p.add_argument("--close-timeout-ms", type=int, default=10_000)
    p.add_argument("--poll-timeout", type=float, default=0.5)
    p.add_argument("--revoke-work", type=float, default=0.0)
    p.add_argument("--metadata-max-age-ms", type=int, default=0, help="0: kgroup's default")
    p.add_argument("--pattern", default="", help="subscribe with this regex, not --topic")
    p.add_argument("--handoff", action="store_true", help="close with handoff_on_close")
    p.add_argument("--consume", action="store_true", help="a GroupConsumer (see above)")
    p.add_argument("--process-ms", type=int, default=20, help="--consume: per batch")
    p.add_argument("--max-records", type=int, default=10, help="--consume: per batch")
    p.add_argument("--log-level", default="info")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    capture_warnings()
    a = parse_args(argv)
    configure_logging(a.log_level)
    asyncio.run(run(a))
    gc.collect()
    emit("exit", warnings=_captured[_reported:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
