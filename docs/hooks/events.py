"""MkDocs hook: tables generated from kgroup's own code.

A page asks for a table with a marker on a line of its own:

- ``<!-- kgroup:events -->``: every log event kgroup emits, with its level, its fields and
  what it means. The source is the event registry ``EVENTS`` in kgroup's logging module
  (name -> ``EventInfo(level, fields, summary)``). A checkout whose logging module has no
  registry yet falls back to the event list in that module's docstring (names and fields
  only; the levels there are the documented ones, "info" otherwise).
- ``<!-- kgroup:config -->``: the fields of ``kgroup.GroupConfig`` (name, type, default)
  from the dataclass itself, with the meaning and the Kafka name from ``FIELD_DOCS`` below.
  A field without an entry there (or an entry without a field) is a warning, so a strict
  build fails until the page is brought up to date.

The hook reads the kgroup package of the checkout that holds mkdocs.yml, not an installed
copy, so the docs always describe the code beside them.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger("mkdocs.hooks.kgroup")

EVENTS_MARKER = "<!-- kgroup:events -->"
CONFIG_MARKER = "<!-- kgroup:config -->"

#: GroupConfig field -> (Kafka's name, what it means). Defaults come from the dataclass.
FIELD_DOCS: dict[str, tuple[str, str]] = {
    "bootstrap_servers": (
        "bootstrap.servers",
        'Where to start: `"host:port"`, comma-separated, or a sequence of them. Required.',
    ),
    "group_id": ("group.id", "The group to join. Required, non-empty."),
    "topics": ("subscription", "The topics this member subscribes to."),
    "topic_pattern": (
        "subscribe(Pattern)",
        "A regular expression over topic names (`fullmatch`; internal topics excluded), "
        "instead of `topics`: see the member guide's subscriptions.",
    ),
    "assignors": (
        "partition.assignment.strategy",
        'Assignor names (`"range"`, `"roundrobin"`, `"sticky"`, `"cooperative-sticky"`) or '
        '`Assignor` objects, in order of preference. `["cooperative-sticky"]` alone makes '
        "the member cooperative. Kafka's default is `[range, cooperative-sticky]` (eager).",
    ),
    "group_instance_id": (
        "group.instance.id",
        "Makes the member static (KIP-345): see the member guide.",
    ),
    "session_timeout_ms": (
        "session.timeout.ms",
        "How long the coordinator waits for a heartbeat before it evicts the member.",
    ),
    "heartbeat_interval_ms": (
        "heartbeat.interval.ms",
        "Time between heartbeats. Must be below `session_timeout_ms`.",
    ),
    "max_poll_interval_ms": (
        "max.poll.interval.ms",
        "The longest gap allowed between two `poll()` calls; also the rebalance timeout.",
    ),
    "retry_backoff_ms": (
        "retry.backoff.ms",
        "First retry delay; it doubles per failure, with ±20 % jitter.",
    ),
    "retry_backoff_max_ms": ("retry.backoff.max.ms", "The ceiling of the retry delay."),
    "request_timeout_ms": (
        "request.timeout.ms",
        "Deadline of one request. JoinGroup gets the rebalance timeout plus 5 s instead.",
    ),
    "close_timeout_ms": (
        "close timeout",
        "Budget of `close()` (bounded by `request_timeout_ms` too).",
    ),
    "leave_group_on_close": (
        "KIP-1092",
        "`None`: dynamic members send LeaveGroup on close, static ones do not. "
        "`True` / `False` choose explicitly.",
    ),
    "handoff_on_close": (
        "(kgroup)",
        "`close()` of a `cooperative-sticky` member that leaves first hands its partitions "
        "off in one more rebalance ([closing](../guide/member.md#closing)).",
    ),
    "client_id": ("client.id", "Sent in every request header."),
    "rack_id": ("client.rack", "Sent in the subscription (version 3)."),
    "isolate_heartbeat": (
        "(kgroup)",
        "Run the coordinator side on its own loop and thread: see "
        "[isolated mode](../guide/isolated.md).",
    ),
    "metadata_max_age_ms": (
        "metadata.max.age.ms",
        "How often topic metadata is refreshed: pattern subscriptions, and the leader's "
        "watch for partition count changes.",
    ),
    "loop_stall_warn_ms": (
        "(kgroup)",
        "A heartbeat that runs this much later than it was due logs `heartbeat.late`.",
    ),
    "security_protocol": (
        "security.protocol",
        "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.",
    ),
    "ssl_context": (
        "(kgroup)",
        "Your own `ssl.SSLContext`, instead of the `ssl_*` files.",
    ),
    "ssl_cafile": ("ssl.cafile", "CA bundle (PEM) that verifies the broker."),
    "ssl_certfile": ("ssl.certfile", "Client certificate (PEM), for mutual TLS."),
    "ssl_keyfile": ("ssl.keyfile", "The client certificate's private key (PEM)."),
    "ssl_key_password": (
        "ssl.key.password",
        "Password of the private key. Never shown in `repr()`, logs or errors.",
    ),
    "sasl_mechanism": (
        "sasl.mechanism",
        "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.",
    ),
    "sasl_username": ("sasl.username", "SASL user."),
    "event_log": (
        "(kgroup)",
        "Write the member's [event log](../guide/event-log.md): a directory (files rotated "
        "by size) or a writable text stream. `None`: no event log.",
    ),
    "event_log_max_bytes": (
        "(kgroup)",
        "A directory event log starts a new file before one would grow past this.",
    ),
    "event_log_topic": (
        "(kgroup)",
        "Also produce the event log's lines to this Kafka topic "
        "([the Kafka sink](../guide/event-log.md#the-kafka-sink)).",
    ),
    "group_protocol": (
        "group.protocol",
        '`"classic"` or `"consumer"` ([KIP-848](../guide/consumer-protocol.md)); with '
        '`"consumer"` the classic-only settings are refused.',
    ),
    "group_remote_assignor": (
        "group.remote.assignor",
        "The broker's assignor for a consumer-protocol group (`uniform`, `range`, a "
        "plug-in); `None`: the broker's default.",
    ),
    "group_protocol_fallback": (
        "(kgroup)",
        "With the consumer protocol: fall back to classic when the broker does not offer "
        "it (before the first join), instead of failing.",
    ),
    "consumer_session_timeout_ms": (
        "(kgroup)",
        "The longest consumer session timeout the lease may assume (not sent). The member "
        "reads the group's from the broker (DescribeConfigs) and uses the smaller of the "
        "two; this value stays when it cannot.",
    ),
    "sasl_password": (
        "sasl.password",
        "SASL password. Never shown in `repr()`, logs or errors.",
    ),
}

_root: Path | None = None


def on_config(config: Any, **kwargs: Any) -> Any:
    """Put the checkout beside mkdocs.yml first on the import path."""
    global _root
    _root = Path(config.config_file_path).resolve().parent
    if str(_root) not in sys.path:
        sys.path.insert(0, str(_root))
    return config


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if EVENTS_MARKER in markdown:
        markdown = markdown.replace(EVENTS_MARKER, render_events(_log_module()))
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, render_config())
    return markdown


# -- log events ---------------------------------------------------------------------------------


def _log_module() -> ModuleType:
    return importlib.import_module("kgroup._log")


def events_from_module(module: ModuleType) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name, level, fields, summary) per event, from the registry or, failing that, from
    the module docstring."""
    registry = getattr(module, "EVENTS", None)
    if isinstance(registry, Mapping):
        return [
            (str(name), str(info.level), tuple(info.fields), str(info.summary))
            for name, info in registry.items()
        ]
    log.info("kgroup's logging module has no EVENTS registry: reading its docstring")
    return events_from_docstring(module.__doc__ or "")


_NAME = re.compile(r"``([a-z_]*(?:\.[a-z_]+)?)``")
_LEVELS = {"debug", "info", "warning", "error"}


def events_from_docstring(doc: str) -> list[tuple[str, str, tuple[str, ...], str]]:
    """Parse the event list of the older docstring format.

    Each bullet names events in double backquotes; names joined by ``/`` share the
    parenthesised note that follows them; a name starting with ``_`` replaces the last
    ``_suffix`` of the name before it (``member.partitions_revoked`` / ``_assigned``).
    A note that is one level name (``(debug)``) is the level; a note made only of
    identifiers is the field list; any other note is the summary.
    """
    body = "\n".join(line.strip() for line in doc.splitlines())
    bullets = re.findall(r"^- (.*?)(?=^- |^\s*$|\Z)", body, re.S | re.M)
    out: list[tuple[str, str, tuple[str, ...], str]] = []
    for bullet in bullets:
        text = " ".join(bullet.split())
        group: list[str] = []
        pos = 0
        while True:
            m = _NAME.search(text, pos)
            if m is None:
                break
            name = m.group(1)
            if name.startswith("_") and group:
                name = group[-1].rsplit("_", 1)[0] + name
            elif "." not in name:
                pos = m.end()
                continue
            group.append(name)
            pos = m.end()
            rest = text[pos:]
            note = re.match(r"\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", rest)
            joined = re.match(r"\s*/\s*``", rest)
            if joined:
                continue
            level, fields, summary = "info", (), ""
            if note:
                pos += note.end()
                items = [item.strip() for item in note.group(1).split(",")]
                if len(items) == 1 and items[0] in _LEVELS:
                    level = items[0]
                elif all(re.fullmatch(r"[a-z_]+", item) for item in items):
                    fields = tuple(items)
                else:
                    summary = note.group(1)
            for each in group:
                out.append((each, level, fields, summary))
            group = []
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_events(module: ModuleType) -> str:
    events = events_from_module(module)
    if not events:
        log.warning("no log events found in kgroup's logging module")
        return "*No events found.*"
    rows = ["| event | level | fields | meaning |", "|---|---|---|---|"]
    for name, level, fields, summary in events:
        shown = ", ".join(f"`{f}`" for f in fields) or "\u2013"
        rows.append(f"| `{name}` | {level} | {shown} | {_cell(summary)} |")
    return "\n".join(rows)


# -- GroupConfig --------------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return str(text).replace("ssl.SSLContext", "SSLContext")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"`{value:_}`"
    return f"`{value!r}`"


def config_fields() -> Iterable[dataclasses.Field[Any]]:
    kgroup = importlib.import_module("kgroup")
    return [f for f in dataclasses.fields(kgroup.GroupConfig) if f.init]


def render_config() -> str:
    fields = list(config_fields())
    names = {f.name for f in fields}
    for f in fields:
        if f.name not in FIELD_DOCS:
            log.warning("GroupConfig.%s is not described in docs/hooks/events.py", f.name)
    for name in FIELD_DOCS.keys() - names:
        log.warning("docs/hooks/events.py describes %s, which GroupConfig does not have", name)
    rows = ["| field | type | default | Kafka name | meaning |", "|---|---|---|---|---|"]
    for f in fields:
        kafka, meaning = FIELD_DOCS.get(f.name, ("", ""))
        rows.append(
            f"| `{f.name}` | `{_type_name(f.type)}` | {_default(f)} "
            f"| {_cell(kafka)} | {_cell(meaning)} |"
        )
    return "\n".join(rows)
