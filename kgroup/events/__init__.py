"""kgroup's membership event log: one JSON object per line (schema v1), for the record of
what a group did, and for ``kgroup report``.

Turn it on with ``GroupConfig(event_log="/var/log/kgroup")`` (a directory, files rotated
by size) or ``event_log=stream`` (any writable text stream), and/or ``event_log_topic=``
(a Kafka topic). Applications that route kgroup's structlog events themselves can add an
:class:`EventLogProcessor` instead. The schema ships as ``kgroup/events/schema.json``
(JSON Schema draft 2020-12; :func:`load_schema`); the guide is docs/guide/event-log.md.

Modules:

- :mod:`._record`: the record and its mapping onto the schema (pure);
- :mod:`._sinks`: a directory with size rotation, or a stream;
- :mod:`._writer`: the bounded queue and the thread that writes, counts and tells drops;
- :mod:`._topic`: the Kafka topic sink (a producer on a thread of its own);
- :mod:`._recorder`: one member's records (its context, heartbeat times, owned set, lease);
- :mod:`._processor`: the structlog processor.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ._processor import EventLogProcessor
from ._record import SCHEMA_VERSION
from ._sinks import DEFAULT_MAX_BYTES
from ._writer import DEFAULT_CAPACITY

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_MAX_BYTES",
    "SCHEMA_VERSION",
    "EventLogProcessor",
    "load_schema",
]

EventLogProcessor.__module__ = "kgroup.events"


def load_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one line of the event log, version 1."""
    text = resources.files(__name__).joinpath("schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
