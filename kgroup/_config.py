"""GroupConfig: every knob of a group member, validated once at construction.

Defaults are Kafka's own (spec §3.1): a member configured like a Java consumer behaves like
one. Every rule violation raises :class:`~kgroup.ConfigError` naming the field and the rule.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from ._core._kip848_state import ConsumerProtocolSettings
from ._core._settings import MemberSettings
from ._errors import ConfigError

if TYPE_CHECKING:
    from ._core._assignors import Assignor

__all__ = [
    "DEFAULT_EVENT_LOG_MAX_BYTES",
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_MAX_POLL_INTERVAL_MS",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "DEFAULT_RETRY_BACKOFF_MAX_MS",
    "DEFAULT_RETRY_BACKOFF_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "GroupConfig",
]

DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
DEFAULT_RETRY_BACKOFF_MS = 100
DEFAULT_RETRY_BACKOFF_MAX_MS = 1_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CLOSE_TIMEOUT_MS = 30_000
DEFAULT_LOOP_STALL_WARN_MS = 500
DEFAULT_METADATA_MAX_AGE_MS = 300_000
DEFAULT_EVENT_LOG_MAX_BYTES = 64 * 1024 * 1024
#: Kafka's group.consumer.session.timeout.ms default (KIP-848).
DEFAULT_CONSUMER_SESSION_TIMEOUT_MS = 45_000

#: The group protocols (``group_protocol``).
GROUP_PROTOCOLS = ("classic", "consumer")

#: Settings of the classic protocol that the consumer protocol has no use for: the broker
#: owns the session and heartbeat interval and assigns partitions itself (as Kafka's
#: ConsumerConfig refuses them with group.protocol=consumer).
_CLASSIC_ONLY = {
    "session_timeout_ms": (
        DEFAULT_SESSION_TIMEOUT_MS,
        "the broker sets the session timeout (group.consumer.session.timeout.ms); give it "
        "as consumer_session_timeout_ms so the lease can use it",
    ),
    "heartbeat_interval_ms": (
        DEFAULT_HEARTBEAT_INTERVAL_MS,
        "the broker sets the heartbeat interval (group.consumer.heartbeat.interval.ms)",
    ),
    "assignors": (
        ("range",),
        "the broker assigns partitions; choose its assignor with group_remote_assignor",
    ),
}
INT32_MAX = 2**31 - 1
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def _parse_bootstrap(value: str | Sequence[str]) -> tuple[tuple[str, int], ...]:
    items = [value] if isinstance(value, str) else list(value)
    out: list[tuple[str, int]] = []
    for raw in items:
        for part in raw.split(","):
            part = part.strip()
            if not part:
                continue
            host, sep, port = part.rpartition(":")
            if (
                not sep
                or not host
                or not (port.isascii() and port.isdigit())
                or not 0 < int(port) < 65536
            ):
                raise ConfigError(
                    "bootstrap_servers", f"{part!r} is not HOST:PORT with a port in 1..65535"
                )
            out.append((host.strip("[]"), int(port)))
    if not out:
        raise ConfigError("bootstrap_servers", "at least one HOST:PORT is required")
    return tuple(out)


def check_topic_pattern(pattern: object, field_name: str = "topic_pattern") -> re.Pattern[str]:
    """The compiled pattern; ConfigError naming ``field_name`` when it is not a valid
    regular expression string."""
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(
            field_name, f"must be a non-empty regular expression string, got {pattern!r}"
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            field_name, f"{pattern!r} is not a valid regular expression: {exc}"
        ) from None


def check_topics(topics: object, field_name: str = "topics") -> tuple[str, ...]:
    """Legal, de-duplicated topic names in order; ConfigError naming ``field_name``."""
    if isinstance(topics, str):
        items: tuple[object, ...] = (topics,)
    else:
        try:
            items = tuple(topics)  # type: ignore[arg-type]
        except TypeError:
            raise ConfigError(
                field_name, f"must be a sequence of topic names, got {topics!r}"
            ) from None
    for topic in items:
        if (
            not isinstance(topic, str)
            or not 0 < len(topic) <= 249
            or not _LEGAL_NAME.fullmatch(topic)
            or topic in (".", "..")
        ):
            raise ConfigError(
                field_name, f"{topic!r} is not a legal topic name (1..249 of [a-zA-Z0-9._-])"
            )
    return tuple(dict.fromkeys(items))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class GroupConfig:
    """Configuration of one group member.

    Example::

        config = GroupConfig(bootstrap_servers="localhost:9092", group_id="billing",
                             topics=["invoices"])

    Parameters (times in milliseconds, Kafka's names in brackets):

    - ``bootstrap_servers``: "host:port" (comma-separated, or a sequence).
    - ``group_id`` [group.id]: the group to join; required, non-empty.
    - ``topics``: the topics this member subscribes to (the consumer embedded protocol).
    - ``topic_pattern``: instead of ``topics``, a regular expression (``re`` syntax, matched
      with ``fullmatch``) over the cluster's topic names; internal topics never match. The
      member re-reads the topic list every ``metadata_max_age_ms`` and rejoins when the
      set of matching topics changes. ``member.subscribe()`` changes either at runtime.
    - ``metadata_max_age_ms`` [metadata.max.age.ms] (300000): how often the member
      refreshes topic metadata: the group leader to notice a subscribed topic's partition
      count change (and rebalance), a pattern subscription to notice topics appearing or
      disappearing.
    - ``assignors`` [partition.assignment.strategy]: names ("range", "roundrobin",
      "sticky", "cooperative-sticky") or :class:`Assignor` objects, in preference order.
      Default ``("range",)``; ``["cooperative-sticky"]`` alone makes the member COOPERATIVE.
    - ``group_instance_id`` [group.instance.id]: makes the member static (KIP-345).
    - ``session_timeout_ms`` (45000), ``heartbeat_interval_ms`` (3000, must be below the
      session timeout), ``max_poll_interval_ms`` (300000, also the rebalance timeout),
      ``retry_backoff_ms`` (100), ``retry_backoff_max_ms`` (1000), ``request_timeout_ms``
      (30000), ``close_timeout_ms`` (30000).
    - ``leave_group_on_close``: ``None`` (Kafka's rule: dynamic members leave, static ones
      do not), or ``True`` / ``False`` to choose explicitly (KIP-1092).
    - ``handoff_on_close``: ``close()`` of a member that leaves the group hands its
      partitions off so the others get them at once instead of at their next heartbeat
      (docs: "Closing"): a ``cooperative-sticky`` member in one more rebalance, a
      consumer-protocol member by leaving just before the group's next heartbeat tick
      (``close()`` then waits up to one heartbeat interval). Default ``False``.
    - ``client_id`` [client.id]: sent in every request header.
    - ``rack_id`` [client.rack]: sent in the subscription (v3).
    - ``isolate_heartbeat``: run the coordinator side (heartbeat task, coordinator
      connection, join requests) on its own event loop in a background thread, so a
      handler that blocks the application's loop cannot starve heartbeats (README, "A
      heartbeat the loop cannot starve"). Default ``False``.
    - ``loop_stall_warn_ms`` (500): a heartbeat that runs this much later than it was due
      logs ``heartbeat.late`` with the lag.
    - ``security_protocol`` [security.protocol]: ``PLAINTEXT`` (default), ``SSL``,
      ``SASL_PLAINTEXT`` or ``SASL_SSL``.
    - ``ssl_context``: an :class:`ssl.SSLContext`; or ``ssl_cafile``, ``ssl_certfile``,
      ``ssl_keyfile`` and ``ssl_key_password`` to build one.
    - ``sasl_mechanism`` [sasl.mechanism]: ``PLAIN``, ``SCRAM-SHA-256`` or
      ``SCRAM-SHA-512``, with ``sasl_username`` and ``sasl_password``. Secrets never appear
      in ``repr()``, logs or error messages.
    - ``event_log``: write the member's event log (docs: "The event log"): a directory
      (created if missing; files rotated at ``event_log_max_bytes``) or a writable text
      stream. Default ``None``: no event log.
    - ``event_log_max_bytes`` (64 MiB): the size at which a directory log starts a new file.
    - ``event_log_topic``: also (or only) produce the event log's lines to this Kafka topic
      of the member's cluster. Default ``None``.
    - ``group_protocol`` [group.protocol]: ``"classic"`` (default) or ``"consumer"``
      (KIP-848: the broker assigns, members reconcile on their own). With ``"consumer"``,
      ``session_timeout_ms``, ``heartbeat_interval_ms`` and ``assignors`` are refused
      (the broker owns them), and ``topic_pattern`` is
      sent to the broker, which matches it with RE2/J against whole topic names.
    - ``group_remote_assignor`` [group.remote.assignor]: the server assignor (``"uniform"``,
      ``"range"`` or a broker plug-in); ``None`` takes the broker's default. Consumer
      protocol only.
    - ``group_protocol_fallback`` (False): with ``"consumer"``, become a classic member
      when the broker does not offer the consumer protocol, instead of failing with
      UnsupportedVersion; only before the member first joined. The classic-only settings
      are then accepted, and apply only after a fallback.
    - ``consumer_session_timeout_ms`` (45000): the longest consumer session timeout the
      lease may assume for this group. It is not sent (the broker owns the session): after
      the first heartbeat the member reads the group's ``consumer.session.timeout.ms``
      with DescribeConfigs (the broker answers its ``group.consumer.session.timeout.ms``
      when the group sets none) and bounds every assignment by the **smaller** of that
      and this value, so a setting here can only make the lease more conservative. When
      the read fails (a broker without group configs, no DESCRIBE_CONFIGS permission on
      the group), it logs ``member.session_timeout_unknown`` once and keeps this value:
      then give the broker's value here if it is shorter than Kafka's default.
    """

    bootstrap_servers: str | Sequence[str]
    group_id: str
    topics: Sequence[str] = ()
    topic_pattern: str | None = None
    assignors: Sequence[str | Assignor] = ("range",)
    group_instance_id: str | None = None
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    close_timeout_ms: int = DEFAULT_CLOSE_TIMEOUT_MS
    leave_group_on_close: bool | None = None
    handoff_on_close: bool = False
    client_id: str = "kgroup"
    rack_id: str | None = None
    isolate_heartbeat: bool = False
    loop_stall_warn_ms: int = DEFAULT_LOOP_STALL_WARN_MS
    metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    event_log: str | os.PathLike[str] | TextIO | None = field(default=None, compare=False)
    event_log_max_bytes: int = DEFAULT_EVENT_LOG_MAX_BYTES
    event_log_topic: str | None = None
    group_protocol: str = "classic"
    group_remote_assignor: str | None = None
    group_protocol_fallback: bool = False
    consumer_session_timeout_ms: int = DEFAULT_CONSUMER_SESSION_TIMEOUT_MS
    brokers: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "brokers", _parse_bootstrap(self.bootstrap_servers))
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigError("group_id", "must be a non-empty string")
        topics = check_topics(self.topics)
        object.__setattr__(self, "topics", topics)
        if self.topic_pattern is not None:
            check_topic_pattern(self.topic_pattern)
            if topics:
                raise ConfigError("topic_pattern", "give either topics or topic_pattern, not both")
        assignors = (self.assignors,) if isinstance(self.assignors, str) else tuple(self.assignors)
        if not assignors:
            raise ConfigError("assignors", "at least one assignor is required")
        from ._core._assignors import Assignor, get_builtin_assignor, select_rebalance_protocol

        resolved = []
        for assignor in assignors:
            if isinstance(assignor, str):
                resolved.append(get_builtin_assignor(assignor))  # ConfigError on unknown names
            elif isinstance(assignor, Assignor):
                resolved.append(assignor)
            else:
                raise ConfigError(
                    "assignors",
                    f"{assignor!r} is neither an assignor name nor an Assignor "
                    "(name, supported_protocols, user_data, assign, on_assignment)",
                )
        select_rebalance_protocol(resolved)  # ConfigError: duplicates, no common protocol
        object.__setattr__(self, "assignors", assignors)
        if self.group_instance_id is not None:
            gid = self.group_instance_id
            if (
                not isinstance(gid, str)
                or not gid
                or len(gid) > 249
                or not _LEGAL_NAME.fullmatch(gid)
            ):
                raise ConfigError(
                    "group_instance_id",
                    f"{gid!r} must be 1..249 characters of [a-zA-Z0-9._-]",
                )
        for name in (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "max_poll_interval_ms",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "request_timeout_ms",
            "close_timeout_ms",
            "loop_stall_warn_ms",
            "metadata_max_age_ms",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(name, f"must be an integer number of milliseconds, got {value!r}")
            if not 0 < value <= INT32_MAX:
                raise ConfigError(name, f"must be in 1..{INT32_MAX}, got {value}")
        # With the consumer protocol (no fallback) both are refused below, naming the field
        # and saying why, unless they are the defaults: their relation is no concern then.
        classic_timers = self.group_protocol != "consumer" or self.group_protocol_fallback
        if classic_timers and self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                "heartbeat_interval_ms",
                f"must be below session_timeout_ms ({self.heartbeat_interval_ms} >= "
                f"{self.session_timeout_ms}); one third of it or less is recommended",
            )
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError(
                "retry_backoff_max_ms",
                f"must be at least retry_backoff_ms ({self.retry_backoff_max_ms} < "
                f"{self.retry_backoff_ms})",
            )
        if not isinstance(self.client_id, str):
            raise ConfigError("client_id", "must be a string")
        if self.leave_group_on_close not in (None, True, False):
            raise ConfigError("leave_group_on_close", "must be None, True or False")
        if not isinstance(self.handoff_on_close, bool):
            raise ConfigError("handoff_on_close", "must be True or False")
        if not isinstance(self.isolate_heartbeat, bool):
            raise ConfigError("isolate_heartbeat", "must be True or False")
        self._check_security()
        self._check_event_log()
        self._check_group_protocol()

    def _check_group_protocol(self) -> None:
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise ConfigError(
                "group_protocol",
                f"{self.group_protocol!r} is not one of {', '.join(GROUP_PROTOCOLS)}",
            )
        if not isinstance(self.group_protocol_fallback, bool):
            raise ConfigError("group_protocol_fallback", "must be True or False")
        if self.group_protocol == "classic":
            if self.group_remote_assignor is not None:
                raise ConfigError(
                    "group_remote_assignor",
                    'server assignors need group_protocol="consumer"; the classic protocol '
                    "assigns on the client (assignors)",
                )
            return
        for name, (default, why) in _CLASSIC_ONLY.items():
            if getattr(self, name) != default and not self.group_protocol_fallback:
                raise ConfigError(name, f'not used with group_protocol="consumer": {why}')
        assignor = self.group_remote_assignor
        if assignor is not None and (not isinstance(assignor, str) or not assignor):
            raise ConfigError("group_remote_assignor", "must be a non-empty string or None")
        timeout = self.consumer_session_timeout_ms
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int)
            or not 0 < timeout <= INT32_MAX
        ):
            raise ConfigError(
                "consumer_session_timeout_ms", f"must be in 1..{INT32_MAX}, got {timeout!r}"
            )

    def _check_event_log(self) -> None:
        target = self.event_log
        if target is not None:
            if isinstance(target, str | os.PathLike):
                if not os.fspath(target):
                    raise ConfigError("event_log", "must be a non-empty directory path")
            elif not callable(getattr(target, "write", None)):
                raise ConfigError(
                    "event_log",
                    f"must be a directory path or a writable text stream, got {target!r}",
                )
        size = self.event_log_max_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size < 1024:
            raise ConfigError(
                "event_log_max_bytes", f"must be an integer of at least 1024 bytes, got {size!r}"
            )
        if self.event_log_topic is not None:
            check_topics([self.event_log_topic], "event_log_topic")

    def _check_security(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "security_protocol",
                f"{self.security_protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}",
            )
        if self.ssl_context is not None and not isinstance(self.ssl_context, ssl.SSLContext):
            raise ConfigError("ssl_context", "must be an ssl.SSLContext")
        for name in (
            "ssl_cafile",
            "ssl_certfile",
            "ssl_keyfile",
            "ssl_key_password",
            "sasl_username",
            "sasl_password",
        ):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                # never echo the value: it may be a secret
                raise ConfigError(name, "must be a non-empty string or None")
        uses_ssl = self.security_protocol in ("SSL", "SASL_SSL")
        ssl_files = (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password)
        if not uses_ssl and (self.ssl_context is not None or any(ssl_files)):
            raise ConfigError(
                "security_protocol",
                f"SSL settings are given but security_protocol is {self.security_protocol}; "
                "use SSL or SASL_SSL",
            )
        if self.ssl_context is not None and any(ssl_files):
            raise ConfigError("ssl_context", "give either ssl_context or the ssl_* files, not both")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigError("ssl_keyfile", "needs ssl_certfile")
        if self.ssl_key_password is not None and self.ssl_certfile is None:
            raise ConfigError(
                "ssl_key_password", "needs ssl_certfile (and ssl_keyfile if the key is apart)"
            )
        uses_sasl = self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    "sasl_mechanism",
                    f"{self.sasl_mechanism!r} is not one of {', '.join(SASL_MECHANISMS)} "
                    f"(required by security_protocol {self.security_protocol})",
                )
            if self.sasl_username is None or self.sasl_password is None:
                raise ConfigError(
                    "sasl_username" if self.sasl_username is None else "sasl_password",
                    f"SASL {self.sasl_mechanism} needs sasl_username and sasl_password",
                )
        elif self.sasl_mechanism is not None or self.sasl_username or self.sasl_password:
            raise ConfigError(
                "security_protocol",
                f"SASL settings are given but security_protocol is {self.security_protocol}; "
                "use SASL_PLAINTEXT or SASL_SSL",
            )

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def leaves_on_close(self) -> bool:
        """Whether close() sends LeaveGroup (Kafka: dynamic members only; KIP-1092 override)."""
        if self.leave_group_on_close is None:
            return not self.is_static
        return self.leave_group_on_close

    def member_settings(self) -> MemberSettings:
        """The narrow settings value the membership core reads (no addresses, TLS or
        credentials)."""
        return MemberSettings(
            group_id=self.group_id,
            group_instance_id=self.group_instance_id,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            max_poll_interval_ms=self.max_poll_interval_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            request_timeout_ms=self.request_timeout_ms,
            leaves_on_close=self.leaves_on_close,
        )

    def consumer_protocol_settings(self, member_id: str) -> ConsumerProtocolSettings:
        """The settings the consumer-protocol core reads, for the client-generated
        ``member_id``. The leave on close follows KIP-1092 as Kafka 4.4.0's client does:
        -1 when ``leave_group_on_close`` is True or the member is dynamic; -2 (leaving for
        now) for a static member; nothing for a dynamic member told to stay."""
        leave_epoch: int | None
        if self.leave_group_on_close is True:
            leave_epoch = -1
        elif self.is_static:
            leave_epoch = -2
        else:
            leave_epoch = None if self.leave_group_on_close is False else -1
        return ConsumerProtocolSettings(
            group_id=self.group_id,
            member_id=member_id,
            instance_id=self.group_instance_id,
            topics=tuple(self.topics),
            topic_regex=self.topic_pattern,
            server_assignor=self.group_remote_assignor,
            rack_id=self.rack_id,
            max_poll_interval_ms=self.max_poll_interval_ms,
            session_timeout_ms=self.consumer_session_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            request_timeout_ms=self.request_timeout_ms,
            leave_epoch_on_close=leave_epoch,
        )

    @property
    def join_timeout_ms(self) -> int:
        """JoinGroup request timeout: rebalance timeout + 5 s, never below request_timeout_ms
        (spec §3.1), computed without int32 overflow."""
        return max(self.request_timeout_ms, self.max_poll_interval_ms + 5_000)
