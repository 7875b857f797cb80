"""A structlog processor that writes kgroup's events to an event log, for applications
that route kgroup's structlog events themselves.

``GroupConfig.event_log`` is the first choice: the member knows itself. A processor sees
only what the structlog events carry (``group``, ``member_id``, ``generation`` and each
event's fields), so it differs in three ways (docs: "The event log"):

- one member stream (``member_uid``) per group in the process: run one member per group
  per process, or use ``GroupConfig.event_log``;
- no ``hb_sent`` / ``hb_rtt_ms`` (the structlog events do not carry them), no
  ``lease_deadline``, no ``instance_id`` / ``protocol_type``; ``client_id`` is the one
  given to the processor;
- partitions arrive as ``"topic-N"`` strings: a string that ends in ``-<digits>`` is read
  as a partition, anything else as an item of a non-consumer group.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import MutableMapping
from typing import Any, TextIO

from .._log import EVENTS
from ._record import PARTITION_FIELDS, MemberContext, Record
from ._recorder import CLOSE_TIMEOUT_S, open_sink
from ._sinks import DEFAULT_MAX_BYTES
from ._writer import DEFAULT_CAPACITY, EventLogWriter

__all__ = ["EventLogProcessor"]

#: Keys structlog's own processors add; not event fields.
_STRUCTLOG_KEYS = frozenset(
    {
        "event",
        "timestamp",
        "level",
        "log_level",
        "logger",
        "logger_name",
        "exc_info",
        "stack_info",
        "exception",
        "positional_args",
        "_record",
        "_from_structlog",
    }
)


def _parse_partition(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    topic, sep, number = value.rpartition("-")
    if sep and topic and number.isascii() and number.isdigit():
        return (topic, int(number))
    return value


class EventLogProcessor:
    """A structlog processor: kgroup's events also go to an event log (schema v1); the
    event dict is passed on unchanged.

    Example::

        processor = EventLogProcessor("/var/log/kgroup")
        structlog.configure(processors=[processor, structlog.processors.JSONRenderer()])
        ...
        processor.close()  # at exit: writes eventlog.stopped, flushes, ends the thread

    ``target``: a directory (files rotated at ``max_bytes``) or a writable text stream.
    ``client_id`` goes on every line. ``capacity``: records held while the sink is slow;
    more are dropped and counted. The writer thread starts with the first event.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | TextIO,
        *,
        client_id: str = "",
        max_bytes: int = DEFAULT_MAX_BYTES,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._client_id = client_id
        sink = open_sink(
            target, host=self._host, pid=self._pid, started_ns=time.time_ns(), max_bytes=max_bytes
        )
        self._writer = EventLogWriter(sink, capacity=capacity, label="processor")
        self._lock = threading.RLock()
        self._streams: dict[str, MemberContext] = {}
        self._owned: dict[str, frozenset[Any]] = {}
        self._closed = False

    @property
    def dropped(self) -> int:
        """Events dropped (queue full, failed writes)."""
        return self._writer.dropped

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event = event_dict.get("event")
        group = event_dict.get("group")
        if (
            isinstance(event, str)
            and event in EVENTS
            and not event.startswith("eventlog.")  # about this log itself
            and isinstance(group, str)
            and group
            and not self._closed
        ):
            try:
                self._record(event, group, event_dict)
            except Exception:  # observation only: never break the application's logging
                pass
        return event_dict

    def _record(self, event: str, group: str, event_dict: MutableMapping[str, Any]) -> None:
        fields = {k: v for k, v in event_dict.items() if k not in _STRUCTLOG_KEYS}
        derived: dict[str, Any] = {}
        kind = PARTITION_FIELDS.get(event)
        if kind is not None:
            parts = frozenset(_parse_partition(p) for p in fields.get("partitions", ()))
            fields["partitions"] = parts
        with self._lock:
            if self._closed:
                return
            context = self._streams.get(group)
            if context is None:
                context = self._open_stream(group)
            if kind is not None:
                owned = self._owned.get(group, frozenset())
                owned = owned | parts if kind == "assigned" else owned - parts
                self._owned[group] = derived["owned"] = owned
            self._writer.put(Record(time.time_ns(), context, event, fields, derived))

    def _open_stream(self, group: str) -> MemberContext:
        """Under the lock: a new member stream for ``group``, started."""
        self._writer.start()
        context = MemberContext(
            member_uid=uuid.uuid4().hex,
            group=group,
            host=self._host,
            pid=self._pid,
            client_id=self._client_id,
        )
        self._streams[group] = context
        self._writer.put(
            Record(
                time.time_ns(),
                context,
                "eventlog.started",
                {},
                {"extra": {"sinks": [self._writer.name], "source": "structlog"}},
            )
        )
        return context

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Write ``eventlog.stopped`` for every stream, flush and end the thread (blocks up
        to ``timeout`` seconds). True when the thread ended. Idempotent."""
        with self._lock:
            if self._closed:
                return not self._writer.alive
            self._closed = True
            for context in self._streams.values():
                self._writer.put(
                    Record(time.time_ns(), context, "eventlog.stopped", {}, None), force=True
                )
        self._writer.close()
        return self._writer.join(timeout)

    def __enter__(self) -> EventLogProcessor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
