"""kgroup's log events: their stable names, levels and fields, and the logger that emits them.

Every event kgroup logs is named in :data:`EVENTS` (the docs' log-event reference is
generated from it) and typed by :data:`EventName`, so mypy refuses a name that is not
registered. Member events carry ``group``, ``member_id`` and ``generation`` besides the
fields listed. No event carries a credential.

Logging is observation only: nothing in kgroup reacts to a log event. A log sink that
raises (a closed stdout pipe, a full disk, a broken handler) is contained here: the event
is dropped, the failure counted (:func:`sink_failures`) and reported once on standard
error, and the member goes on as if the event had been written.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import structlog

__all__ = [
    "EVENTS",
    "EventInfo",
    "EventName",
    "Level",
    "log_event",
    "logger",
    "sink_failures",
]

Level = Literal["debug", "info", "warning", "error"]

EventName = Literal[
    "member.state_changed",
    "member.reconcile_interrupted",
    "member.protocol_fallback",
    "member.fenced",
    "member.assignment_received",
    "member.reconciling",
    "member.reconciled",
    "member.topic_lookup_failed",
    "member.leave_sent",
    "member.member_id_changed",
    "member.join_sent",
    "member.joined",
    "member.synced",
    "member.stable",
    "member.rejoin_requested",
    "member.follow_up_expected",
    "member.coordinator_found",
    "member.coordinator_lost",
    "member.coordinator_lookup_failed",
    "member.heartbeat_ok",
    "member.heartbeat_failed",
    "member.heartbeat_stale_error",
    "member.poll_timeout",
    "member.poll_timeout_left",
    "member.handoff_started",
    "member.handoff_done",
    "member.handoff_waiting",
    "member.handoff_cut_short",
    "member.leaving",
    "member.left_group",
    "member.leave_group_failed",
    "member.subscription_changed",
    "member.metadata_changed",
    "member.metadata_refresh_failed",
    "member.rebalance_enforced",
    "member.fatal_error",
    "member.partitions_revoked",
    "member.partitions_assigned",
    "member.partitions_lost",
    "member.listener_error",
    "member.event_hook_failed",
    "member.lease_expired",
    "member.session_timeout_learned",
    "member.session_timeout_unknown",
    "member.lease_proof_needed",
    "member.lease_renewed",
    "member.isolated",
    "member.abandoned",
    "member.task_crashed",
    "member.loop_thread_crashed",
    "member.close_timed_out",
    "member.closed",
    "member.aborted",
    "heartbeat.late",
    "offsets.committed",
    "offsets.retry",
    "offsets.commit_failed",
    "offsets.fetch_failed",
    "consumer.started",
    "consumer.positioned",
    "consumer.offset_fetch_failed",
    "consumer.committed",
    "consumer.commit_failed",
    "consumer.auto_commit_failed",
    "consumer.records_dropped",
    "consumer.batch_unfinished",
    "consumer.closed",
    "connection.protocol_error",
    "connection.unknown_error_code",
    "fastapi.started",
    "fastapi.stopped",
    "fastapi.processing_failed",
    "fastapi.processing_cancelled",
    "fastapi.processing_failed_at_shutdown",
    "fastapi.rewind_failed",
    "eventlog.write_failed",
    "eventlog.overflow",
    "eventlog.recovered",
    "eventlog.close_timed_out",
]


@dataclass(frozen=True, slots=True)
class EventInfo:
    """One log event: its level, the fields it carries besides the common ones, and what it
    means."""

    level: Level
    fields: tuple[str, ...]
    summary: str


def _e(level: Level, fields: str, summary: str) -> EventInfo:
    return EventInfo(level, tuple(fields.split()), summary)


EVENTS: Mapping[EventName, EventInfo] = {
    "member.reconcile_interrupted": _e(
        "warning",
        "owned",
        "Consumer protocol: poll() was cancelled during a reconciliation; the next poll() "
        "goes on from what the member holds.",
    ),
    "member.protocol_fallback": _e(
        "warning",
        "reason",
        "The broker does not offer the consumer protocol: the member falls back to classic.",
    ),
    "member.fenced": _e(
        "warning",
        "reason",
        "Consumer protocol: fenced by the broker (or its lease ran out): its partitions "
        "are lost and it rejoins with epoch 0.",
    ),
    "member.assignment_received": _e(
        "info", "partitions", "Consumer protocol: a new target assignment arrived from the broker."
    ),
    "member.reconciling": _e(
        "info",
        "revoked assigned unresolved_topics",
        "Consumer protocol: a reconciliation starts (revoke, then assign).",
    ),
    "member.reconciled": _e(
        "info",
        "owned",
        "Consumer protocol: the reconciliation is done; the next heartbeat acknowledges it.",
    ),
    "member.topic_lookup_failed": _e(
        "warning",
        "reason",
        "Consumer protocol: a Metadata lookup of assigned topic ids failed; retried after "
        "the backoff.",
    ),
    "member.leave_sent": _e(
        "info",
        "epoch",
        "Consumer protocol: the leave heartbeat (epoch -1, or -2 for a static member) was sent.",
    ),
    "member.member_id_changed": _e(
        "warning",
        "old new",
        "Consumer protocol: the broker answered with another member id, which the member adopts.",
    ),
    "member.state_changed": _e("info", "old new reason", "The member's state changed."),
    "member.join_sent": _e("info", "reason", "A JoinGroup request is being sent."),
    "member.joined": _e(
        "info", "leader protocol members", "JoinGroup succeeded: a new generation."
    ),
    "member.synced": _e(
        "info", "rebalance_ms", "SyncGroup succeeded; the assignment is about to be installed."
    ),
    "member.stable": _e(
        "info",
        "assignment rebalance_ms",
        "The assignment is installed and its callbacks have run.",
    ),
    "member.rejoin_requested": _e(
        "info", "reason", "Something asks for a rebalance; the next poll() rejoins."
    ),
    "member.coordinator_found": _e("info", "node_id host port", "FindCoordinator succeeded."),
    "member.coordinator_lost": _e(
        "warning", "reason node_id", "The coordinator is forgotten; its connection is dropped."
    ),
    "member.coordinator_lookup_failed": _e(
        "info", "reason retry_in_ms", "FindCoordinator failed; retried after a backoff."
    ),
    "member.heartbeat_ok": _e("debug", "", "A heartbeat was answered without error."),
    "member.heartbeat_failed": _e(
        "warning", "error", "A heartbeat got an error answer, or no answer."
    ),
    "member.heartbeat_stale_error": _e(
        "debug", "error", "An error answer about an older generation, ignored."
    ),
    "member.poll_timeout": _e(
        "warning",
        "max_poll_interval_ms",
        "poll() was not called within max_poll_interval_ms: the member leaves its generation.",
    ),
    "member.poll_timeout_left": _e(
        "warning", "sent_leave_group", "The member left after a poll timeout."
    ),
    "member.handoff_started": _e(
        "info", "", "close() hands the partitions off: one rejoin marked as leaving."
    ),
    "member.handoff_done": _e(
        "info",
        "outcome partitions",
        "The handoff on close ended: handed_off (revoked once the others were told), or "
        "kept, failed, timed_out (close() then releases as without a handoff).",
    ),
    "member.handoff_waiting": _e(
        "info",
        "release_in_ms",
        "Consumer protocol: close() keeps the partitions until just before the group's next "
        "heartbeat tick, then revokes them and leaves (the handoff).",
    ),
    "member.handoff_cut_short": _e(
        "info",
        "reason",
        "Consumer protocol: a close waiting to hand off releases at once (the broker asked "
        "for some of its partitions back meanwhile).",
    ),
    "member.leaving": _e("info", "reason send_leave_group", "The member leaves its generation."),
    "member.left_group": _e("info", "error_code", "LeaveGroup was answered."),
    "member.leave_group_failed": _e(
        "info", "error", "LeaveGroup got no answer in time (best effort, not retried)."
    ),
    "member.subscription_changed": _e(
        "info",
        "topics before pattern",
        "The subscription changed (subscribe(), or a pattern matched other topics); the "
        "member rejoins.",
    ),
    "member.metadata_changed": _e(
        "info",
        "reason",
        "The leader saw a subscribed topic's partitions change since it assigned; it rejoins.",
    ),
    "member.metadata_refresh_failed": _e(
        "warning", "error", "A metadata refresh failed; it is retried after retry_backoff_max_ms."
    ),
    "member.rebalance_enforced": _e(
        "info", "reason", "The application asked for a rebalance (enforce_rebalance())."
    ),
    "member.fatal_error": _e("error", "error message", "A fatal error; the next poll() raises it."),
    "member.partitions_revoked": _e("info", "partitions", "on_partitions_revoked is about to run."),
    "member.partitions_assigned": _e(
        "info", "partitions", "on_partitions_assigned is about to run."
    ),
    "member.partitions_lost": _e("info", "partitions", "on_partitions_lost is about to run."),
    "member.listener_error": _e(
        "error", "callback error", "A listener callback raised (logged with the traceback)."
    ),
    "member.event_hook_failed": _e(
        "error",
        "hook error",
        "An event hook raised; logged once per hook, counted in stats().event_hook_failures.",
    ),
    "member.follow_up_expected": _e(
        "debug",
        "rejoin_at",
        "The leader announced a follow-up rebalance: faster heartbeats until it starts.",
    ),
    "member.lease_expired": _e(
        "info",
        "deadline session_deadline rebalance_deadline poll_deadline late_ms",
        "The member's lease ran out: its partitions are reported lost at the next poll().",
    ),
    "member.session_timeout_learned": _e(
        "info",
        "broker_ms session_timeout_ms",
        "Consumer protocol: the broker's session timeout for the group was read "
        "(DescribeConfigs); the lease uses session_timeout_ms, the smaller of it and "
        "consumer_session_timeout_ms.",
    ),
    "member.session_timeout_unknown": _e(
        "warning",
        "error session_timeout_ms",
        "Consumer protocol: the broker's session timeout for the group could not be read "
        "(no DescribeConfigs, no DESCRIBE_CONFIGS permission on the group, a failure); the "
        "lease keeps consumer_session_timeout_ms. Once per member.",
    ),
    "member.lease_proof_needed": _e(
        "info", "deadline", "An assignment waits for a heartbeat to prove the session."
    ),
    "member.lease_renewed": _e(
        "info", "valid_until", "A heartbeat proved the session; the assignment is installed."
    ),
    "member.isolated": _e(
        "info", "thread", "Isolated mode: the coordinator side runs on its own thread."
    ),
    "member.abandoned": _e(
        "warning",
        "reason",
        "Isolated mode: the application's loop closed without close(); the member stops.",
    ),
    "member.task_crashed": _e(
        "error",
        "task error",
        "A kgroup task failed (a kgroup bug): poll() raises InternalError.",
    ),
    "member.loop_thread_crashed": _e(
        "error", "thread", "Isolated mode: the coordinator thread's loop failed."
    ),
    "member.close_timed_out": _e("warning", "", "close() ran out of its budget."),
    "member.closed": _e("info", "", "close() finished: no task or connection is left."),
    "member.aborted": _e("info", "", "abort() finished."),
    "heartbeat.late": _e(
        "warning",
        "lag_ms due threshold_ms isolated",
        "A heartbeat ran more than loop_stall_warn_ms after it was due (a busy event loop).",
    ),
    "offsets.committed": _e("debug", "offsets", "OffsetCommit succeeded."),
    "offsets.retry": _e("info", "api reason attempt", "An offsets request is retried."),
    "offsets.commit_failed": _e("warning", "error message", "commit_offsets() failed."),
    "offsets.fetch_failed": _e("warning", "error message", "fetch_committed() failed."),
    "consumer.started": _e("info", "topics", "GroupConsumer started."),
    "consumer.positioned": _e(
        "info", "positions", "Fetch positions set for newly assigned partitions."
    ),
    "consumer.offset_fetch_failed": _e(
        "warning", "error partitions", "Committed offsets could not be fetched; retried."
    ),
    "consumer.committed": _e("debug", "offsets", "The consumer committed offsets."),
    "consumer.commit_failed": _e("info", "error", "A consumer commit failed."),
    "consumer.auto_commit_failed": _e("warning", "error", "An auto-commit failed."),
    "consumer.records_dropped": _e(
        "debug", "partition count", "Fetched records dropped: their partition is not owned."
    ),
    "consumer.batch_unfinished": _e(
        "warning",
        "partitions waited_s",
        "Partitions were released while another task still had a batch of theirs in hand: "
        "they are committed from the batch's first records.",
    ),
    "consumer.closed": _e("info", "records_delivered commits_ok commits_failed", "Closed."),
    "connection.protocol_error": _e(
        "error", "broker api error", "A malformed answer: the connection is dropped."
    ),
    "connection.unknown_error_code": _e(
        "warning", "broker api error_code", "An answer carried an error code kgroup does not know."
    ),
    "fastapi.started": _e("info", "consumer", "KGroupLifespan started its member."),
    "fastapi.stopped": _e("info", "", "KGroupLifespan stopped."),
    "fastapi.processing_failed": _e(
        "error", "error", "The processing function raised (with traceback); health turns 503."
    ),
    "fastapi.processing_cancelled": _e("warning", "", "Processing was cancelled."),
    "fastapi.processing_failed_at_shutdown": _e(
        "error", "error", "The processing failure is raised again at shutdown."
    ),
    "fastapi.rewind_failed": _e("warning", "error", "A failed batch could not be rewound."),
    "eventlog.write_failed": _e(
        "warning",
        "sink error",
        "The event log could not be written (a full disk, a raising stream, an unreachable "
        "topic): its events are dropped and counted until a write succeeds. Once per outage.",
    ),
    "eventlog.overflow": _e(
        "warning",
        "sink capacity",
        "The event log's queue is full (its sink is slower than the events): events are "
        "dropped and counted. Once per episode.",
    ),
    "eventlog.recovered": _e(
        "info",
        "sink dropped",
        "The event log is written again after drops; an eventlog.dropped line gives the count.",
    ),
    "eventlog.close_timed_out": _e(
        "warning",
        "sink pending",
        "close() did not see the event log's writer finish in time; it is left to finish "
        "(a daemon thread) and what it still holds may be lost.",
    ),
}

if set(EVENTS) != set(get_args(EventName)):  # pragma: no cover - caught by the unit test
    raise RuntimeError("kgroup._log: EVENTS and EventName disagree")


class _SinkGuard:
    """Counts log sink failures and reports the first one once, on standard error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0

    def failed(self, event: str, exc: BaseException) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            stream = sys.__stderr__
            try:
                if stream is not None:
                    stream.write(
                        f"kgroup: a log sink raised {exc!r} while writing {event!r}; kgroup "
                        "drops log events that cannot be written and goes on (this is "
                        "reported once; the count is in member.stats().log_sink_failures)\n"
                    )
                    stream.flush()
            except Exception:  # standard error is broken too: nothing more to do
                pass


_guard = _SinkGuard()


def sink_failures() -> int:
    """How many log events this process could not write because a sink raised."""
    return _guard.failures


class _ContainedLogger:
    """structlog's logger for kgroup, with registered names and a failing sink contained.

    structlog's lazy proxy assembles a new bound logger (and, with the default
    ``PrintLoggerFactory``, a new ``PrintLogger``) for every call unless the application
    configured ``cache_logger_on_first_use``: a few microseconds per event, even for events
    its level filters out, on the path from a heartbeat answer to the JoinGroup. kgroup
    keeps the assembled logger and assembles a new one whenever what it was made from
    changes: structlog's configuration (``structlog.configure``, ``capture_logs``) or the
    process's ``sys.stdout`` / ``sys.stderr`` (which printing loggers write to).
    """

    __slots__ = ("_bound", "_made_from", "_proxy")

    def __init__(self, proxy: Any) -> None:
        self._proxy = proxy
        self._bound: Any = None
        self._made_from: tuple[Any, ...] = ()

    def _logger(self) -> Any:
        config = structlog.get_config()
        made_from = (
            config["processors"],
            config["wrapper_class"],
            config["logger_factory"],
            config["context_class"],
            sys.stdout,
            sys.stderr,
        )
        bound = self._bound
        if bound is None or made_from != self._made_from:  # items compare by identity first
            bound = self._bound = self._proxy.bind()
            self._made_from = made_from
        return bound

    def _call(self, method: str, event: EventName, fields: dict[str, Any]) -> None:
        try:
            getattr(self._logger(), method)(event, **fields)
        except Exception as exc:
            _guard.failed(event, exc)

    def debug(self, event: EventName, **fields: Any) -> None:
        self._call("debug", event, fields)

    def info(self, event: EventName, **fields: Any) -> None:
        self._call("info", event, fields)

    def warning(self, event: EventName, **fields: Any) -> None:
        self._call("warning", event, fields)

    def error(self, event: EventName, **fields: Any) -> None:
        self._call("error", event, fields)

    def exception(self, event: EventName, **fields: Any) -> None:
        """Log at error level with the current exception's traceback."""
        self._call("exception", event, fields)


logger = _ContainedLogger(structlog.get_logger("kgroup"))


def log_event(event: EventName, **fields: Any) -> None:
    """Log ``event`` at its registered level."""
    logger._call(EVENTS[event].level, event, fields)
