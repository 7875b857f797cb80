"""One member's event log: the member's context on every record, and the fields only the
runtime knows (heartbeat times, what the member owns, the lease in wall time).

The member creates a :class:`MemberRecorder` in ``start()`` when its config asks for an
event log (``GroupConfig.event_log`` / ``event_log_topic``) and hands it every event it
observes or logs (:meth:`record`); ``close()`` and ``abort()`` end it (:meth:`aclose`).
Without an event log there is no recorder and the runtime pays one ``is None`` test per
event.

:meth:`record` runs on the member's loop (in isolated mode also on the coordinator's
thread): it computes what must be read now (the clock, the lease, the owned set), stamps
the wall time and queues the record on each writer under one lock, so that ``seq``
follows ``ts`` and the file and the topic see the same order. Serialising and writing
happen on the writers' threads.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._log import logger
from ._record import PARTITION_FIELDS, MemberContext, Record
from ._sinks import DirectorySink, Sink, StreamSink
from ._writer import DEFAULT_CAPACITY, EventLogWriter, QueueWriter

if TYPE_CHECKING:
    from .._config import GroupConfig

__all__ = ["MemberRecorder", "open_sink"]

#: How long ``close()`` waits for the event log's threads to finish (s).
CLOSE_TIMEOUT_S = 5.0

#: The events that answer a heartbeat: they get hb_sent, hb_rtt_ms and hb_late_ms.
_HEARTBEAT_ANSWERS = frozenset({"member.heartbeat_ok", "member.heartbeat_failed"})

#: Events whose field is a lease deadline on the member's clock (ms).
_LEASE_FIELDS: Mapping[str, str] = {
    "member.lease_renewed": "valid_until",
    "member.lease_proof_needed": "deadline",
    "member.lease_expired": "deadline",
}

#: Events that carry the member's lease deadline as it is after them.
_LEASE_AFTER = frozenset(
    {"member.heartbeat_ok", "member.partitions_assigned", "member.stable", "member.synced"}
)


def open_sink(
    target: str | os.PathLike[str] | Any, *, host: str, pid: int, started_ns: int, max_bytes: int
) -> Sink:
    """A directory sink for a path, a stream sink for anything with ``write``."""
    if isinstance(target, str | os.PathLike):
        return DirectorySink(target, host=host, pid=pid, started_ns=started_ns, max_bytes=max_bytes)
    return StreamSink(target)


class MemberRecorder:
    """Builds one member's records and queues them on its writers (module docstring).

    - ``now_ms``: the member's monotonic clock in ms (its timers and lease use it).
    - ``generation``: the member's (member_id, generation id) now.
    - ``valid_until``: the member's lease deadline on that clock, or None.
    """

    def __init__(
        self,
        config: GroupConfig,
        *,
        protocol_type: str,
        now_ms: Callable[[], float],
        generation: Callable[[], tuple[str, int]],
        valid_until: Callable[[], float | None],
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self.context = MemberContext(
            member_uid=uuid.uuid4().hex,
            group=config.group_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            client_id=config.client_id,
            instance_id=config.group_instance_id,
            protocol_type=protocol_type,
        )
        self._now_ms = now_ms
        self._generation = generation
        self._valid_until = valid_until
        self._lock = threading.Lock()
        self._started_ns = time.time_ns()
        label = config.group_id
        self.writers: list[QueueWriter] = []
        if config.event_log is not None:
            sink = open_sink(
                config.event_log,
                host=self.context.host,
                pid=self.context.pid,
                started_ns=self._started_ns,
                max_bytes=config.event_log_max_bytes,
            )
            self.writers.append(EventLogWriter(sink, capacity=capacity, label=label))
        if config.event_log_topic is not None:
            from ._topic import TopicWriter

            self.writers.append(
                TopicWriter(config, config.event_log_topic, capacity=capacity, label=label)
            )
        #: What the member owns after the last partition event (app loop only).
        self._owned: frozenset[Any] = frozenset()
        #: Lateness of the heartbeat in flight (ms; None: not sent on a schedule).
        self._hb_late: float | None = None
        #: (send time, answer time) of the heartbeat answered now, on the member's clock.
        self._hb: tuple[float, float, float | None] | None = None
        self._open = False

    @property
    def dropped(self) -> int:
        """Events dropped, over all of the member's writers."""
        return sum(w.dropped for w in self.writers)

    def start(self) -> None:
        """Start the writers' threads and write ``eventlog.started``."""
        if self._open:
            return
        self._open = True
        for writer in self.writers:
            writer.start()
        self._put(
            "eventlog.started",
            {"member_id": "", "generation": -1},
            {"extra": {"sinks": [w.name for w in self.writers]}},
        )

    # -- what the runtime tells ------------------------------------------------------------------

    def heartbeat_sending(self, lateness_ms: float | None) -> None:
        """A heartbeat goes out ``lateness_ms`` after it was due (None: not on a schedule)."""
        self._hb_late = lateness_ms

    def heartbeat_answered(self, sent_ms: float, now_ms: float) -> None:
        """The heartbeat sent at ``sent_ms`` is answered (or failed) at ``now_ms``; the
        core's event about it follows."""
        self._hb = (sent_ms, now_ms, self._hb_late)

    def record(self, event: str, fields: Mapping[str, Any]) -> None:
        """Queue ``event`` (never blocks, never raises)."""
        if not self._open:
            return
        try:
            derived = self._derive(event, fields)
        except Exception:  # observation only: a bad field costs its derived values
            derived = {}
        self._put(event, fields, derived)

    def _derive(self, event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        derived: dict[str, Any] = {}
        if "member_id" not in fields or "generation" not in fields:
            member_id, generation = self._generation()
            derived["member_id"] = member_id
            derived["generation"] = generation
        if event in _HEARTBEAT_ANSWERS:
            hb, self._hb = self._hb, None
            if hb is not None:
                sent, answered, late = hb
                derived["hb_sent"] = self._wall_ns(sent)
                derived["hb_rtt_ms"] = round(max(0.0, answered - sent), 3)
                if late is not None:
                    derived["hb_late_ms"] = round(max(0.0, late), 3)
        kind = PARTITION_FIELDS.get(event)
        if kind is not None:
            partitions = frozenset(fields.get("partitions", ()))
            if kind == "assigned":
                self._owned = self._owned | partitions
            else:
                self._owned = self._owned - partitions
            derived["owned"] = self._owned
        lease_field = _LEASE_FIELDS.get(event)
        if lease_field is not None:
            deadline = fields.get(lease_field)
            if isinstance(deadline, int | float):
                derived["lease_deadline"] = self._wall_ns(deadline)
        elif event in _LEASE_AFTER:
            deadline = self._valid_until()
            if deadline is not None:
                derived["lease_deadline"] = self._wall_ns(deadline)
        return derived

    def _wall_ns(self, at_ms: float) -> int:
        """A time on the member's clock (ms) as wall time (ns since the epoch)."""
        return time.time_ns() + int((at_ms - self._now_ms()) * 1_000_000)

    def _put(
        self,
        event: str,
        fields: Mapping[str, Any],
        derived: Mapping[str, Any] | None,
        *,
        force: bool = False,
    ) -> None:
        with self._lock:
            record = Record(time.time_ns(), self.context, event, fields, derived)
            for writer in self.writers:
                writer.put(record, force=force)

    # -- the end ---------------------------------------------------------------------------------

    def _stop(self, stopped: bool) -> bool:
        """Queue ``eventlog.stopped`` (last) if ``stopped``, and close the writers; False if
        done before."""
        if not self._open:
            return False
        if stopped:
            member_id, generation = self._generation()
            self._put(
                "eventlog.stopped",
                {"member_id": member_id, "generation": generation},
                {"extra": {"dropped_total": self.dropped}},
                force=True,
            )
        self._open = False
        for writer in self.writers:
            writer.close()
        return True

    async def aclose(self, *, stopped: bool = True, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Write ``eventlog.stopped`` last, flush, and wait for the writers' threads to end
        (at most ``timeout`` seconds; then they are left to finish: daemon threads).

        ``stopped=False`` (``abort()``, an abandoned member): the stream ends with the last
        event instead, which readers take for a crash at that line's time, as if the
        process had died there; it is still flushed and the threads still end."""
        if not self._stop(stopped):
            return
        results = await asyncio.gather(*(w.wait_closed(timeout) for w in self.writers))
        for writer, ended in zip(self.writers, results, strict=True):
            if not ended:
                logger.warning(
                    "eventlog.close_timed_out",
                    group=self.context.group,
                    sink=writer.name,
                    pending=writer.pending,
                )
