"""A FastAPI service that consumes a topic in a kgroup consumer group.

It counts records per key (``GET /stats``) and serves the member's health
(``GET /health/live``, ``GET /health/ready``). Run it with::

    KGROUP_BOOTSTRAP=localhost:9092 KGROUP_GROUP=counters KGROUP_TOPIC=events \\
        uvicorn examples.fastapi_app:app --port 8000

Environment variables (read at startup):

- ``KGROUP_BOOTSTRAP`` (default ``localhost:9092``), ``KGROUP_GROUP`` (``kgroup-fastapi``),
  ``KGROUP_TOPIC`` (required; comma-separated for several topics);
- ``KGROUP_GROUP_PROTOCOL``: ``classic`` (the default) or ``consumer`` (KIP-848: the
  broker assigns and sets the session; ``KGROUP_CONSUMER_SESSION_TIMEOUT_MS`` tells the
  lease the longest session the broker may use);
- ``KGROUP_SESSION_TIMEOUT_MS``, ``KGROUP_HEARTBEAT_INTERVAL_MS`` (classic only),
  ``KGROUP_MAX_POLL_INTERVAL_MS``, ``KGROUP_CLOSE_TIMEOUT_MS`` (GroupConfig defaults
  when unset); ``KGROUP_CLIENT_ID``;
- ``KGROUP_AUTO_OFFSET_RESET``: ``earliest`` or ``latest`` (default ``earliest``);
- ``KGROUP_FAIL_ON_VALUE``: a record whose value equals it makes the handler raise
  (a demonstration of how a processing failure shows in the health endpoints).
"""

from __future__ import annotations

import collections
import os
from typing import Any

from aiokafka.structs import ConsumerRecord
from fastapi import FastAPI

from kgroup import GroupConfig
from kgroup.fastapi import KGroupLifespan


class PoisonRecord(RuntimeError):
    """The handler refuses a record (see KGROUP_FAIL_ON_VALUE)."""


def _int_env(name: str) -> dict[str, int]:
    raw = os.environ.get(f"KGROUP_{name.upper()}")
    if raw is None or raw == "":
        return {}
    try:
        return {name: int(raw)}
    except ValueError:
        raise ValueError(f"KGROUP_{name.upper()} must be an integer, got {raw!r}") from None


def config_from_env() -> GroupConfig:
    topics = [t.strip() for t in os.environ.get("KGROUP_TOPIC", "").split(",") if t.strip()]
    if not topics:
        raise ValueError("KGROUP_TOPIC is required (comma-separated topic names)")
    values: dict[str, Any] = {
        "bootstrap_servers": os.environ.get("KGROUP_BOOTSTRAP", "localhost:9092"),
        "group_id": os.environ.get("KGROUP_GROUP", "kgroup-fastapi"),
        "topics": topics,
        "client_id": os.environ.get("KGROUP_CLIENT_ID", "kgroup-fastapi-example"),
        "group_protocol": os.environ.get("KGROUP_GROUP_PROTOCOL") or "classic",
    }
    for name in (
        "session_timeout_ms",
        "heartbeat_interval_ms",
        "consumer_session_timeout_ms",
        "max_poll_interval_ms",
        "close_timeout_ms",
    ):
        values.update(_int_env(name))
    return GroupConfig(**values)


counts: collections.Counter[str] = collections.Counter()


async def handle(records: list[ConsumerRecord[Any, Any]]) -> None:
    poison = os.environ.get("KGROUP_FAIL_ON_VALUE")
    for record in records:
        value = record.value
        if poison and isinstance(value, bytes) and value.decode(errors="replace") == poison:
            raise PoisonRecord(
                f"refusing record {record.topic}-{record.partition}@{record.offset} "
                f"with value {poison!r}"
            )
        key = record.key.decode(errors="replace") if isinstance(record.key, bytes) else "<none>"
        counts[key] += 1


kg = KGroupLifespan(
    config_from_env,
    process=handle,
    consumer_options={
        "auto_offset_reset": os.environ.get("KGROUP_AUTO_OFFSET_RESET", "earliest"),
    },
)
app = FastAPI(title="kgroup example", lifespan=kg.lifespan)
app.include_router(kg.health_router(prefix="/health"))


@app.get("/stats")
async def stats() -> dict[str, Any]:
    """Records counted per key, and what the processing loop has done."""
    health = kg.health()
    return {
        "counts": dict(counts),
        "records": health["records"],
        "batches": health["batches"],
        "assignment": health.get("assignment", []),
    }
