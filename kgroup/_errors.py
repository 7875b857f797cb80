"""kgroup's exceptions and the broker error codes it knows.

The hierarchy::

    KGroupError                      root of every error kgroup raises on purpose
    ├── ConfigError (ValueError)     invalid configuration; names the field and the rule
    ├── GroupError                   a fatal answer about this member's group membership
    │   ├── GroupAuthorizationFailed     GROUP_AUTHORIZATION_FAILED (30)
    │   ├── FencedInstanceId             FENCED_INSTANCE_ID (82): instance id taken over
    │   ├── InconsistentGroupProtocol    INCONSISTENT_GROUP_PROTOCOL (23), or a KIP-559 mismatch
    │   ├── InvalidSessionTimeout        INVALID_SESSION_TIMEOUT (26)
    │   ├── InvalidGroupId               INVALID_GROUP_ID (24)
    │   ├── GroupMaxSizeReached          GROUP_MAX_SIZE_REACHED (81)
    │   ├── UnsupportedVersion           UNSUPPORTED_VERSION (35), or no common API version
    │   ├── AssignmentError              the leader or the assignment broke the embedded protocol
    │   └── UnexpectedBrokerError        any other code the spec treats as fatal
    ├── CommitFailed                 an offset commit that cannot succeed in this generation
    ├── OffsetsError                 an offset commit or fetch the broker refused, or timed out
    ├── NoOffsetForPartition         nothing committed and auto_offset_reset="none" (consumer)
    ├── RebalanceInProgress          retry after the rebalance in progress completes
    ├── AuthenticationFailed         SASL credentials or the TLS handshake were rejected
    ├── TopicAuthorizationFailed     the principal may not read or commit for these topics
    ├── CoordinatorError             retriable coordinator/transport failure (handled inside)
    ├── ProtocolViolation            bytes that break the Kafka protocol
    │   ├── RemoteProtocolError          the broker sent something malformed
    │   └── LocalProtocolError           kgroup was about to send something malformed
    ├── ListenerError                a rebalance listener callback raised (the cause is chained)
    └── InternalError                a bug in kgroup (one of the member's tasks failed)
    UsageError (RuntimeError)        a programming mistake: wrong call order, closed member, ...

Fatal errors carry the group id, member id and generation they happened in, so a log line or a
traceback says which membership failed (httpx attaches ``.request`` the same way).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = [
    "AssignmentError",
    "AuthenticationFailed",
    "CommitFailed",
    "ConfigError",
    "CoordinatorError",
    "ErrorCode",
    "FencedInstanceId",
    "GroupAuthorizationFailed",
    "GroupError",
    "GroupMaxSizeReached",
    "InconsistentGroupProtocol",
    "InternalError",
    "InvalidGroupId",
    "InvalidSessionTimeout",
    "KGroupError",
    "ListenerError",
    "LocalProtocolError",
    "OffsetsError",
    "ProtocolViolation",
    "RebalanceInProgress",
    "RemoteProtocolError",
    "TopicAuthorizationFailed",
    "UnexpectedBrokerError",
    "UnsupportedVersion",
    "UsageError",
    "error_for_code",
]


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes that the group protocol names (spec appendix A)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128

    @classmethod
    def describe(cls, code: int) -> str:
        """``NAME (code)`` for a known code, ``error code N`` otherwise (the number is kept)."""
        try:
            return f"{cls(code).name} ({code})"
        except ValueError:
            return f"error code {code}"


class KGroupError(Exception):
    """Root of every exception kgroup raises on purpose."""


class UsageError(RuntimeError):
    """A programming mistake: a call made in the wrong order or on a closed member."""


class ConfigError(KGroupError, ValueError):
    """A configuration value is invalid. ``field`` names it; the message states the rule."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class GroupError(KGroupError):
    """A fatal answer about this member's group membership, raised from ``poll()``.

    Attributes say where it happened: ``group_id``, ``member_id``, ``generation_id`` and the
    broker ``error_code`` (``None`` when the error was detected locally) and ``api`` (the
    request that got it).
    """

    default_code: int | None = None

    def __init__(
        self,
        message: str,
        *,
        group_id: str = "",
        member_id: str = "",
        generation_id: int = -1,
        error_code: int | None = None,
        api: str | None = None,
    ) -> None:
        super().__init__(message)
        self.group_id = group_id
        self.member_id = member_id
        self.generation_id = generation_id
        self.error_code = self.default_code if error_code is None else error_code
        self.api = api

    def __str__(self) -> str:
        where = (
            f"group={self.group_id!r} member_id={self.member_id!r} generation={self.generation_id}"
        )
        return f"{self.args[0]} [{where}]"


class GroupAuthorizationFailed(GroupError):
    """The principal may not use this group (GROUP_AUTHORIZATION_FAILED, 30)."""

    default_code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class FencedInstanceId(GroupError):
    """Another live process joined with this ``group_instance_id`` (FENCED_INSTANCE_ID, 82).

    Two processes are configured with the same static identity: shut this one down.
    """

    default_code = ErrorCode.FENCED_INSTANCE_ID


class InconsistentGroupProtocol(GroupError):
    """The group uses a protocol type or assignor this member does not share (23, KIP-559)."""

    default_code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidSessionTimeout(GroupError):
    """session_timeout is outside the broker's bounds (INVALID_SESSION_TIMEOUT, 26)."""

    default_code = ErrorCode.INVALID_SESSION_TIMEOUT


class InvalidGroupId(GroupError):
    """The broker rejected the group id (INVALID_GROUP_ID, 24)."""

    default_code = ErrorCode.INVALID_GROUP_ID


class GroupMaxSizeReached(GroupError):
    """The group is full (GROUP_MAX_SIZE_REACHED, 81)."""

    default_code = ErrorCode.GROUP_MAX_SIZE_REACHED


class UnsupportedVersion(GroupError):
    """The broker does not support a version this member needs (35, or none in common)."""

    default_code = ErrorCode.UNSUPPORTED_VERSION


class AssignmentError(GroupError):
    """The assignment broke the embedded protocol (unknown assignor, short or bad bytes)."""


class UnexpectedBrokerError(GroupError):
    """A broker error code the protocol treats as fatal for this request."""


class CommitFailed(KGroupError):
    """An offset commit cannot succeed: this member is no longer in the generation."""


class OffsetsError(KGroupError):
    """The broker rejected an offset commit or fetch for a reason retrying cannot fix
    (OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION on a fetch, an unexpected code),
    or a retriable failure outlasted the call's timeout. ``api`` and ``error_code`` (None
    for a timeout) say which."""

    def __init__(self, message: str, *, api: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.api = api
        self.error_code = error_code


class RebalanceInProgress(KGroupError):
    """The group is rebalancing: call ``poll()`` to complete the rebalance, then retry."""


class AuthenticationFailed(KGroupError):
    """The broker rejected this client's credentials (SASL) or TLS handshake. Fatal: retrying
    with the same configuration cannot succeed. The message never contains the secret."""


class TopicAuthorizationFailed(KGroupError):
    """The principal may not read (or commit for) these topics. ``topics`` lists them."""

    def __init__(self, topics: Iterable[str], message: str = "") -> None:
        self.topics = tuple(sorted(set(topics)))
        super().__init__(message or f"not authorized for topics: {', '.join(self.topics)}")


class CoordinatorError(KGroupError):
    """A retriable coordinator or transport failure. kgroup handles these itself."""


class ProtocolViolation(KGroupError):
    """Bytes that do not follow the Kafka protocol."""


class RemoteProtocolError(ProtocolViolation):
    """The broker (or a peer's metadata) sent something malformed."""


class LocalProtocolError(ProtocolViolation):
    """kgroup was about to send something malformed (a bug, or an invalid argument)."""


class ListenerError(KGroupError):
    """A rebalance listener callback raised. ``__cause__`` is the original exception.

    Membership stays consistent: the callback's partitions were released or installed
    anyway, exactly as if it had returned.
    """

    def __init__(self, callback: str, exc: BaseException) -> None:
        super().__init__(f"rebalance listener {callback} raised {type(exc).__name__}: {exc}")
        self.callback = callback


class InternalError(KGroupError):
    """A bug in kgroup: one of the member's own tasks failed. ``__cause__`` is the original
    exception; ``task`` names the task. Raised from ``poll()``, never disguised as a broker
    answer. Please report it with the traceback."""

    def __init__(self, task: str, exc: BaseException) -> None:
        super().__init__(f"kgroup task {task!r} failed: {type(exc).__name__}: {exc}")
        self.task = task


_FATAL_BY_CODE: dict[int, type[GroupError]] = {
    ErrorCode.GROUP_AUTHORIZATION_FAILED: GroupAuthorizationFailed,
    ErrorCode.FENCED_INSTANCE_ID: FencedInstanceId,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: InconsistentGroupProtocol,
    ErrorCode.INVALID_SESSION_TIMEOUT: InvalidSessionTimeout,
    ErrorCode.INVALID_GROUP_ID: InvalidGroupId,
    ErrorCode.GROUP_MAX_SIZE_REACHED: GroupMaxSizeReached,
    ErrorCode.UNSUPPORTED_VERSION: UnsupportedVersion,
}


def error_for_code(
    code: int,
    *,
    api: str,
    group_id: str,
    member_id: str,
    generation_id: int,
    message: str | None = None,
) -> GroupError:
    """The typed fatal error for a broker ``code`` answered to ``api``."""
    cls = _FATAL_BY_CODE.get(code, UnexpectedBrokerError)
    text = f"{api} failed with {ErrorCode.describe(code)}"
    if message:
        text += f": {message}"
    return cls(
        text,
        group_id=group_id,
        member_id=member_id,
        generation_id=generation_id,
        error_code=code,
        api=api,
    )
