"""One event as it is queued, and how it becomes one line of the event log (schema v1).

The recorder (on the member's loop) builds a :class:`Record` and queues it; the writer's
thread turns it into the line's JSON object with :func:`to_line`. Everything here is pure:
no clock (the timestamps are in the record), no I/O, so the mapping is tested on its own.

The mapping from an event's fields to the schema (``kgroup/events/schema.json``; the table
in ``docs/guide/event-log.md``):

- ``group``, ``member_id``, ``generation``: as they are; the recorder fills in the member's
  own when an event has none.
- ``old`` / ``new`` of ``member.state_changed``: ``state_before`` / ``state_after``.
- ``partitions`` of ``member.partitions_assigned`` / ``_revoked`` / ``_lost``: ``assigned``
  / ``revoked`` / ``lost`` as ``{"topic", "partition"}`` objects; a group that is not a
  consumer group has items (names), written as ``{"topic": item, "partition": -1}``.
- ``reason``, ``leader``, ``error``, ``error_code``: as they are; an ``error`` that names a
  Kafka error (``NOT_COORDINATOR (16)``, ``UNKNOWN_MEMBER_ID``) also gives ``error_code``.
- ``lag_ms`` of ``heartbeat.late``: ``hb_late_ms``.
- every other field goes to ``extra``, made JSON-safe.

Schema fields the recorder computes (``hb_sent``, ``hb_rtt_ms``, ``hb_late_ms``,
``lease_deadline``, ``owned``, ``dropped``) arrive in :attr:`Record.derived`.
"""

from __future__ import annotations

import enum
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .._errors import ErrorCode

__all__ = [
    "SCHEMA_VERSION",
    "MemberContext",
    "Record",
    "format_ts",
    "partition_items",
    "to_line",
]

#: The version written in every line's ``v``.
SCHEMA_VERSION = 1

#: The event of each partition callback, and the schema field its partitions go to.
PARTITION_FIELDS: Mapping[str, str] = {
    "member.partitions_assigned": "assigned",
    "member.partitions_revoked": "revoked",
    "member.partitions_lost": "lost",
}

#: Fields that map onto a schema field of the same name.
_DIRECT = {"reason": str, "leader": str, "error": str}

_ERROR_WITH_CODE = re.compile(r"([A-Z][A-Z0-9_]*) \((-?\d+)\)")
_ERROR_NUMBER = re.compile(r"error code (-?\d+)")


class MemberContext(NamedTuple):
    """What every line of one member stream carries (fixed for the member's life)."""

    member_uid: str
    group: str
    host: str
    pid: int
    client_id: str
    instance_id: str | None = None
    protocol_type: str | None = None


class Record(NamedTuple):
    """One event, queued for the writer. ``fields`` are the event's own (never changed
    after it is queued); ``derived`` are schema fields the recorder computed."""

    ts_ns: int
    context: MemberContext
    event: str
    fields: Mapping[str, Any]
    derived: Mapping[str, Any] | None = None


def format_ts(ns: int) -> str:
    """RFC 3339 UTC with microseconds and ``Z``: ``2026-11-26T07:01:02.123456Z``."""
    seconds, rest = divmod(ns, 1_000_000_000)
    t = time.gmtime(seconds)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{rest // 1000:06d}Z"
    )


def _item(value: Any) -> dict[str, Any]:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):
        return {"topic": str(value[0]), "partition": int(value[1])}  # a TopicPartition
    return {"topic": str(value), "partition": -1}  # an item of a GroupProtocol group


def partition_items(values: Iterable[Any]) -> list[dict[str, Any]]:
    """TopicPartitions (or GroupProtocol item names) as sorted schema objects."""
    items = [_item(v) for v in values]
    items.sort(key=lambda i: (i["topic"], i["partition"]))
    return items


def error_code_of(error: str) -> int | None:
    """The Kafka error code an ``error`` field names, if it names one."""
    match = _ERROR_WITH_CODE.fullmatch(error)
    if match is not None:
        return int(match.group(2))
    match = _ERROR_NUMBER.fullmatch(error)
    if match is not None:
        return int(match.group(1))
    member = ErrorCode.__members__.get(error)
    return None if member is None else int(member)


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON values: containers become lists and objects (string keys), enums
    their names, non-finite floats null, anything else its ``str()``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return value.name
    if depth > 8:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        items = [jsonable(v, depth + 1) for v in value]
        try:
            items.sort()
        except TypeError:
            items.sort(key=str)
        return items
    if isinstance(value, list | tuple):
        return [jsonable(v, depth + 1) for v in value]
    return str(value)


def to_line(record: Record, seq: int) -> dict[str, Any]:
    """The JSON object of ``record``'s line (see the module docstring)."""
    ctx = record.context
    fields = record.fields
    event = record.event
    line: dict[str, Any] = {
        "v": SCHEMA_VERSION,
        "ts": format_ts(record.ts_ns),
        "seq": seq,
        "member_uid": ctx.member_uid,
        "event": event,
        "group": ctx.group,
        "host": ctx.host,
        "pid": ctx.pid,
        "client_id": ctx.client_id,
        "member_id": None,
        "instance_id": ctx.instance_id,
        "protocol_type": ctx.protocol_type,
        "generation": None,
    }
    extra: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "group":
            if isinstance(value, str) and value:
                line["group"] = value
        elif key == "member_id":
            line["member_id"] = None if value is None else str(value)
        elif key == "generation":
            line["generation"] = value if isinstance(value, int) and value >= -1 else None
        elif key in ("old", "new") and event == "member.state_changed":
            line["state_before" if key == "old" else "state_after"] = str(value)
        elif key == "partitions" and event in PARTITION_FIELDS:
            line[PARTITION_FIELDS[event]] = partition_items(value)
        elif key == "lag_ms" and event == "heartbeat.late":
            line["hb_late_ms"] = max(0.0, float(value))
        elif key == "error_code" and isinstance(value, int) and not isinstance(value, bool):
            line["error_code"] = int(value)
        elif key in _DIRECT and value is not None:
            line[key] = str(value)
        else:
            extra[key] = jsonable(value)
    error = line.get("error")
    if error is not None and "error_code" not in line:
        code = error_code_of(error)
        if code is not None:
            line["error_code"] = code
    derived = record.derived
    if derived:
        for key, value in derived.items():
            if key in ("hb_sent", "lease_deadline"):
                line[key] = format_ts(value)
            elif key == "owned":
                line[key] = partition_items(value)
            elif key in ("member_id", "generation"):
                if line[key] is None:
                    line[key] = value
            elif key == "extra":
                extra.update(jsonable(value))
            else:
                line[key] = value
    if extra:
        line["extra"] = extra
    return line
