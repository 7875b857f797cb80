"""The session timeout the broker applies to a consumer-protocol group, for the lease.

Under KIP-848 the member sends no session timeout: the broker applies the group's
``consumer.session.timeout.ms`` (a group config, KIP-848's GroupConfig), or, when the group
does not set it, the broker's ``group.consumer.session.timeout.ms``. The member's lease
(:meth:`~kgroup._core._kip848_base.ConsumerMemberBase.valid_until`) must not outlast it, or
the member would trust partitions the broker has already given to another member.

:func:`group_session_timeout` reads it with DescribeConfigs on the GROUP resource, which
resolves the fallback itself. What Kafka 4.4.0 answers (checked on a broker):

- a group without an override: the broker's value, with the broker's source
  (``DEFAULT_CONFIG``, or ``STATIC_BROKER_CONFIG`` when ``server.properties`` sets it) and
  ``group.consumer.session.timeout.ms`` among the synonyms;
- a group with one (IncrementalAlterConfigs, ``kafka-configs.sh --entity-type groups``):
  that value, source ``GROUP_CONFIG`` (8); it may be set before the group exists;
- a group that does not exist yet: answered like a group without an override (no error);
- a principal without DESCRIBE_CONFIGS on the group (READ and DESCRIBE are not enough):
  GROUP_AUTHORIZATION_FAILED (30) for the resource, "Group authorization failed.".

:class:`SessionTimeoutLearner` runs the read for the member's runtime
(:mod:`._kip848`) in a task of its own, after the first heartbeat the broker answers
without error, and hands the value to the core, which lowers its bound at once and
raises it (never past ``consumer_session_timeout_ms``) only when two reads in a row agree
(:meth:`~kgroup._core._kip848_base.ConsumerMemberBase.learn_session_timeout`). It reads
again every :data:`REFRESH_MS`, so that a group config lowered later bounds the lease
within about a minute. A first read that fails is logged once
(``member.session_timeout_unknown``) and the configured value stays; a later one that
fails is logged and tried again a minute later.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Final

from .._core._kip848_base import ConsumerMemberBase
from .._core._messages_configs import (
    RESOURCE_GROUP,
    ConfigQuery,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from .._errors import CoordinatorError, ErrorCode, KGroupError, RemoteProtocolError
from ._connection import SupportsRequest
from ._link import CoordinatorLink
from ._shared import Lifecycle, Shared

__all__ = [
    "SESSION_TIMEOUT_KEY",
    "GroupConfigUnavailable",
    "SessionTimeoutLearner",
    "group_session_timeout",
]

#: The group config (KIP-848) that overrides ``group.consumer.session.timeout.ms``.
SESSION_TIMEOUT_KEY: Final = "consumer.session.timeout.ms"

#: Reads tried after retriable failures (transport, coordinator moved) before giving up.
_ATTEMPTS: Final = 3

#: How long a learned session timeout is trusted before it is read again (ms).
REFRESH_MS: Final = 60_000


class GroupConfigUnavailable(KGroupError):
    """The broker answered DescribeConfigs for the group with an error (``error_code``):
    GROUP_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on the group, INVALID_REQUEST from
    a broker that has no group configs."""

    def __init__(self, message: str, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


async def group_session_timeout(
    conn: SupportsRequest, group_id: str, timeout_ms: float
) -> int | None:
    """The consumer session timeout (ms) the broker applies to ``group_id``: the group's
    ``consumer.session.timeout.ms``, or the broker default it falls back to. None when the
    broker does not list the key or its value is not a positive integer.

    One DescribeConfigs request to ``conn`` (any broker answers for a group), bounded by
    ``timeout_ms``. Raises :class:`GroupConfigUnavailable` for an error answered for the
    group, and what ``conn.request`` raises: UnsupportedVersion (no DescribeConfigs v1+),
    CoordinatorError (transport), RemoteProtocolError (a malformed answer, or one about
    another resource).
    """
    request = DescribeConfigsRequest(
        resources=(
            ConfigQuery(
                resource_type=RESOURCE_GROUP, resource_name=group_id, keys=(SESSION_TIMEOUT_KEY,)
            ),
        )
    )
    response = await conn.request(request, timeout_ms)
    if not isinstance(response, DescribeConfigsResponse):
        raise RemoteProtocolError(f"DescribeConfigs answered with {type(response).__name__}")
    result = next(
        (
            r
            for r in response.results
            if r.resource_type == RESOURCE_GROUP and r.resource_name == group_id
        ),
        None,
    )
    if result is None:
        raise RemoteProtocolError(f"DescribeConfigs did not answer for group {group_id!r}")
    if result.error_code:
        detail = f": {result.error_message}" if result.error_message else ""
        raise GroupConfigUnavailable(
            f"DescribeConfigs for group {group_id!r}: "
            f"{ErrorCode.describe(result.error_code)}{detail}",
            result.error_code,
        )
    entry = result.get(SESSION_TIMEOUT_KEY)
    if entry is None or entry.value is None:
        return None
    try:
        value = int(entry.value)
    except ValueError:
        return None
    return value if value > 0 else None


class SessionTimeoutLearner:
    """Reads the group's session timeout for a consumer-protocol member, at first and then
    every :data:`REFRESH_MS`, and hands it to its core (see the module docstring).

    The heartbeat task calls :meth:`heartbeat_answered` after every answer without error;
    the first call starts the read in a task of its own (``kgroup-session-timeout``), so
    the heartbeat loop never waits for it, and the read itself is bounded by
    ``request_timeout_ms``. A retriable failure (CoordinatorError: the coordinator moved,
    the connection broke) lets a later answered heartbeat start it again, up to three
    reads; then, or at once for any other failure, ``member.session_timeout_unknown`` is
    logged and the member keeps ``consumer_session_timeout_ms``. After a successful read
    the next answered heartbeat past :data:`REFRESH_MS` starts the next read; one that fails
    three times is logged and tried again after another :data:`REFRESH_MS`.

    Until the answer arrives (one round trip after the first answered heartbeat) the lease
    runs on the configured bound; the learned one then applies to the proofs already held
    too, since ``valid_until`` is computed from them when asked.
    """

    def __init__(
        self,
        shared: Shared,
        link: CoordinatorLink,
        step: Callable[[], AbstractContextManager[ConsumerMemberBase]],
    ) -> None:
        self._shared = shared
        self._link = link
        self._step = step
        #: Written by the heartbeat task and the read's task, both on the coordinator loop.
        self._attempts = 0
        self._running = False
        #: The first read is over: learned, or given up.
        self._done = False
        #: When the next read is due (the member's clock, ms); None until a read succeeded.
        self._read_again_at: float | None = None

    def heartbeat_answered(self) -> None:
        """A heartbeat was answered without error: start a read when one is due."""
        if self._running:
            return
        if self._done and (self._read_again_at is None or self._shared.now() < self._read_again_at):
            return
        self._running = True
        self._attempts += 1
        self._shared.tasks.spawn(self._learn(), "kgroup-session-timeout")

    async def _learn(self) -> None:
        shared = self._shared
        config = shared.config
        try:
            conn = await self._link.connection()
            learned = await group_session_timeout(conn, config.group_id, config.request_timeout_ms)
        except CoordinatorError as exc:
            if self._attempts < _ATTEMPTS:
                return  # the next answered heartbeat tries again
            self._give_up(str(exc))
            return
        except KGroupError as exc:
            self._give_up(str(exc))
            return
        finally:
            self._running = False
        if learned is None:
            self._give_up(f"the broker did not list {SESSION_TIMEOUT_KEY} for the group")
            return
        self._done = True
        self._attempts = 0
        self._read_again_at = self._shared.now() + REFRESH_MS
        with self._step() as core:
            core.learn_session_timeout(learned, self._shared.now())

    def _give_up(self, problem: str) -> None:
        """This read failed for good: a first one leaves the configured bound for the
        member's lifetime; a later one keeps what was learned and is tried again later."""
        self._done = True
        self._attempts = 0
        if self._read_again_at is not None:
            self._read_again_at = self._shared.now() + REFRESH_MS
        shared = self._shared
        if shared.lifecycle is not Lifecycle.OPEN:
            return  # closing: the member no longer needs it
        with self._step() as core:
            bound = core.settings.session_timeout_ms
        shared.log(
            "member.session_timeout_unknown",
            group=shared.config.group_id,
            error=problem,
            session_timeout_ms=bound,
        )
