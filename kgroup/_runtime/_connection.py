"""Broker connections with kgroup's own per-request timeouts and error mapping
(:class:`BrokerConnection`), and the member's view of the cluster (:class:`Cluster`)."""

# aiokafka's ``AIOKafkaConnection`` has one timeout for every request; a JoinGroup may be
# held by the coordinator for the whole rebalance timeout, so kgroup opens its connections
# with a large aiokafka timeout and bounds each request itself (spec §3.1, §11.6). A request
# that times out closes its connection: every other request in flight on it fails promptly
# with a disconnect, and nothing is left orphaned. The frames are read by kgroup's
# :class:`~kgroup._runtime._framing.StrictConnection`, which fails a request with a
# malformed answer.
#
# An answer whose error code kgroup does not know is logged as
# ``connection.unknown_error_code`` and handed on (the core reacts as the spec says for "any
# other error").
#
# aiokafka's exceptions never escape this module: transport failures become
# :class:`CoordinatorError` (retriable, chained ``from`` the cause), malformed answers
# :class:`RemoteProtocolError`; both are handled by the member as retriable transport
# failures (the coordinator is marked unknown, the connection dropped, the request retried
# after backoff).

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from aiokafka import errors as aiokafka_errors
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from .. import _protocol
from .._core._messages import FindCoordinatorResponse, HeartbeatResponse, LeaveGroupResponse
from .._core._racks import TopicLayout
from .._errors import (
    AuthenticationFailed,
    CoordinatorError,
    ErrorCode,
    KGroupError,
    RemoteProtocolError,
)
from .._log import logger
from .._protocol._direct import encode_direct
from ._framing import StrictConnection, log_protocol_error, request_label, retrieved

__all__ = ["BrokerConnection", "Cluster", "SupportsRequest"]

# aiokafka's own per-connection timeout: larger than any request kgroup sends, so that
# kgroup's per-request deadlines are the ones that fire.
_AIOKAFKA_TIMEOUT_MS = 2**31 - 1

_KNOWN_ERROR_CODES: Final = frozenset(int(code) for code in ErrorCode)


class _Prepared:
    """A request struct whose version is already chosen, in the shape of an aiokafka
    ``Request`` builder (``AIOKafkaConnection.send`` calls ``prepare``)."""

    def __init__(self, request: Any) -> None:
        self.request = request

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> Any:
        return self.request


class Pending:
    """A request written to a connection, waiting for its answer (see ``finish``)."""

    __slots__ = ("answer", "decode", "label", "timeout_ms", "topic_names")

    def __init__(
        self, answer: asyncio.Future[Any], label: str, timeout_ms: float, decode: bool
    ) -> None:
        self.answer = answer
        self.label = label
        self.timeout_ms = timeout_ms
        self.decode = decode
        #: The request's topic names by id, for an answer that names topics by id.
        self.topic_names: dict[uuid.UUID, str] | None = None


class _RedactSaslTokens(logging.Filter):
    """aiokafka logs every request it sends at debug level, SaslAuthenticate included, and a
    PLAIN token is ``user NUL user NUL password``: this filter (on the ``aiokafka.conn``
    logger, so it covers every aiokafka connection in the process) replaces the logged SASL
    request by its name before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(_is_sasl_token(arg) for arg in args):
            record.args = tuple(
                f"{type(arg).__name__}(<redacted>)" if _is_sasl_token(arg) else arg for arg in args
            )
        return True


def _is_sasl_token(value: object) -> bool:
    return getattr(value, "API_KEY", None) == _SASL_AUTHENTICATE_KEY or isinstance(
        value, bytes | bytearray
    )


_SASL_AUTHENTICATE_KEY: Final = 36
_SASL_REDACTION: Final = _RedactSaslTokens("kgroup.redact_sasl")
if not any(isinstance(f, _RedactSaslTokens) for f in logging.getLogger("aiokafka.conn").filters):
    logging.getLogger("aiokafka.conn").addFilter(_SASL_REDACTION)


# What a broker that rejects this client's identity makes aiokafka raise: a SASL failure
# (wrong password, unknown user, mechanism not enabled) or a failed TLS handshake.
_AUTH_ERRORS: Final = (
    aiokafka_errors.SaslAuthenticationFailed,
    aiokafka_errors.UnsupportedSaslMechanismError,
    aiokafka_errors.IllegalSaslStateError,
    aiokafka_errors.AuthenticationFailedError,
    ssl.SSLError,
)


def _authentication_failed(
    where: str, security: Mapping[str, Any] | None, exc: BaseException
) -> AuthenticationFailed:
    """A fatal error naming the broker, the protocol and mechanism and the broker's reason.
    aiokafka's messages carry the broker's error message, never the client's secret."""
    options = security or {}
    how = str(options.get("security_protocol", "PLAINTEXT"))
    if options.get("sasl_mechanism"):
        how += f" {options['sasl_mechanism']} as {options.get('sasl_plain_username')!r}"
    kind = "TLS handshake" if isinstance(exc, ssl.SSLError) else "authentication"
    reason = str(exc) or type(exc).__name__
    secret = options.get("sasl_plain_password")
    if isinstance(secret, str) and secret:
        reason = reason.replace(secret, "***")  # defensive: never echo the secret
    return AuthenticationFailed(f"{kind} with {where} ({how}) failed: {reason}")


class SupportsRequest(Protocol):
    async def request(self, message: Any, timeout_ms: float) -> Any: ...


class BrokerConnection:
    """One TCP connection to one broker, requests bounded by per-request timeouts."""

    def __init__(self, conn: StrictConnection, host: str, port: int) -> None:
        self._conn = conn
        self.host = host
        self.port = port
        self._closed = False

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str,
        timeout_ms: float,
        security: Mapping[str, Any] | None = None,
    ) -> BrokerConnection:
        """Connect, exchange ApiVersions and (``security``: aiokafka's TLS/SASL arguments,
        from ``kgroup._runtime._security.connection_kwargs``) authenticate.

        Raises AuthenticationFailed (fatal) when the broker rejects the credentials or the
        TLS handshake fails, and CoordinatorError (retriable), chained from the cause, for
        every other failure: refused, timed out, broken or malformed."""
        where = f"{host}:{port}"
        conn = StrictConnection(
            host,
            port,
            client_id=client_id,
            request_timeout_ms=_AIOKAFKA_TIMEOUT_MS,
            **(security or {}),
        )
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await conn.connect()
        except TimeoutError as exc:
            if conn.version_lookup_sent:
                announced = conn.announced
                phase = "the broker accepted the connection but did not answer ApiVersions" + (
                    "" if announced is None else f" (a {announced}-byte answer never completed)"
                )
            else:
                phase = "no TCP connection"
            await _discard(conn)
            raise CoordinatorError(
                f"cannot connect to {where}: {phase} within {timeout_ms:.0f} ms"
            ) from exc
        except _AUTH_ERRORS as exc:
            await _discard(conn)
            raise _authentication_failed(where, security, exc) from None
        except (KGroupError, OSError, KafkaError, OverflowError, ValueError) as exc:
            # OverflowError/ValueError: the socket layer rejecting the address itself (a
            # port outside 0-65535, a NUL in the host).
            await _discard(conn)
            detail = str(exc) if isinstance(exc, KGroupError) else repr(exc)
            raise CoordinatorError(f"cannot connect to {where}: {detail}") from exc
        except BaseException:
            # Cancelled mid-handshake (the member is closing): aiokafka closes gracefully,
            # and a TLS close waits for the broker's close_notify, which may come after the
            # event loop is gone, leaving the socket open. Abort it now instead.
            _abort(conn)
            raise
        return cls(conn, host, port)

    @property
    def connected(self) -> bool:
        return not self._closed and bool(self._conn.connected())

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        versions: dict[int, tuple[int, int]] = self._conn._versions
        return versions

    def start(self, message: Any, timeout_ms: float) -> Pending:
        """Write a kgroup message (from ``kgroup._core._messages``) to the socket now, before
        returning, so it leaves in the caller's loop step; :meth:`finish` waits for its
        answer, at most ``timeout_ms``. Raises CoordinatorError when the connection is
        closed or the write fails, UnsupportedVersion or LocalProtocolError."""
        if self._closed:
            raise CoordinatorError(f"connection to {self.where} is closed")
        versions = self.api_versions
        direct = encode_direct(message, versions)
        if direct is not None:
            request, body = direct
            return self._write(request, timeout_ms, decode=True, body=body)
        struct = _protocol.to_wire(message).prepare(versions)
        pending = self._write(struct, timeout_ms, decode=True)
        pending.topic_names = _protocol.topic_names(message)
        return pending

    async def finish(self, pending: Pending) -> Any:
        """The answer to a request :meth:`start` wrote, decoded. Raises CoordinatorError on
        transport failure or timeout, RemoteProtocolError on a malformed answer (the
        connection is closed in both cases)."""
        response = await self._await(pending)
        if not pending.decode:
            return response
        return self._decoded(pending, response)

    def watch(self, pending: Pending, callback: Callable[[Any], None]) -> None:
        """Hand the answer to a request :meth:`start` wrote to ``callback``, without a task:
        the decoded response, or the kgroup error :meth:`finish` would raise (the
        connection is closed then, as there). A response is handed over in the reader's
        own step, as soon as its frame is read; failures and the timeout
        (``pending.timeout_ms``) from a callback of the loop. ``callback`` is called exactly
        once and must not raise."""
        answer = pending.answer
        settled = False

        def settle(timed_out: bool = False) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            timer.cancel()
            self._conn.on_answer.pop(answer, None)
            outcome: Any
            if timed_out:
                outcome = self._timed_out(pending)
            elif answer.cancelled():
                self.close()
                outcome = CoordinatorError(f"{pending.label} to {self.where} was cancelled")
            elif (exc := answer.exception()) is not None:
                outcome = self._failed(pending, exc)
            else:
                try:
                    outcome = self._decoded(pending, answer.result())
                except RemoteProtocolError as error:
                    outcome = error
            callback(outcome)

        timer = answer.get_loop().call_later(pending.timeout_ms / 1000, settle, True)
        self._conn.on_answer[answer] = settle
        answer.add_done_callback(lambda _: settle())  # failures; a no-op once settled

    def _decoded(self, pending: Pending, response: Any) -> Any:
        if isinstance(response, HeartbeatResponse):  # decoded directly by the reader
            value: Any = response
        else:
            try:
                value = _protocol.from_wire(response, pending.topic_names)
            except RemoteProtocolError as exc:
                text = f"{exc} (from {self.where}); connection closed"
                log_protocol_error(self.where, pending.label, text)
                self.close()
                raise RemoteProtocolError(text) from exc
        self._check_error_codes(pending.label, value)
        return value

    async def request(self, message: Any, timeout_ms: float) -> Any:
        """:meth:`start`, then :meth:`finish`: the decoded response value."""
        return await self.finish(self.start(message, timeout_ms))

    async def raw_request(self, request: Any, timeout_ms: float) -> Any:
        """Send an aiokafka ``Request`` builder as is (metadata); same error mapping."""
        if self._closed:
            raise CoordinatorError(f"connection to {self.where} is closed")
        try:
            struct = request.prepare(self.api_versions)
        except (KafkaError, NotImplementedError) as exc:
            raise CoordinatorError(
                f"{type(request).__name__} to {self.where}: no usable version: {exc!r}"
            ) from exc
        return await self.finish(self._write(struct, timeout_ms, decode=False))

    def _write(
        self, request: Any, timeout_ms: float, *, decode: bool, body: bytes | None = None
    ) -> Pending:
        """Write ``request``: a struct, framed by aiokafka; or, with ``body``, a
        ``DirectRequest`` whose body is already encoded (``kgroup._protocol._direct``)."""
        label = request_label(request)
        answer: asyncio.Future[Any]
        try:
            if body is not None:
                answer = self._conn.send_encoded(request, body)
            else:
                # aiokafka writes the frame before send() returns; what it returns is only
                # its own wait for the answer, replaced here by the response future itself
                # (its timeout is kgroup's, in _await).
                waiting = self._conn.send(_Prepared(request))
                waiting.close()
                answer = self._conn._requests[-1][2]
        except (KafkaError, OSError, ValueError) as exc:
            self.close()
            raise CoordinatorError(f"{label} to {self.where} failed: {_describe(exc)}") from exc
        answer.add_done_callback(retrieved)  # the caller may be cancelled before awaiting
        return Pending(answer, label, timeout_ms, decode)

    async def _await(self, pending: Pending) -> Any:
        """The response struct; every failure closes the connection and is raised as a
        kgroup error naming the request and the broker."""
        try:
            async with asyncio.timeout(pending.timeout_ms / 1000):
                return await pending.answer
        except TimeoutError as exc:
            raise self._timed_out(pending) from exc
        except (CoordinatorError, RemoteProtocolError):
            self.close()  # the reader already closed it; mark it closed here too
            raise
        except (KafkaError, OSError, ValueError) as exc:
            raise self._failed(pending, exc) from exc

    def _timed_out(self, pending: Pending) -> CoordinatorError:
        """``pending`` timed out: close the connection; the error to report."""
        label = pending.label
        announced = self._conn.announced
        partial = (
            ""
            if announced is None
            else f" (a {announced}-byte response was announced and never completed)"
        )
        self.close(f"the connection was closed when {label} timed out on it")
        return CoordinatorError(
            f"{label} to {self.where} timed out after {pending.timeout_ms:.0f} ms{partial}; "
            "connection closed"
        )

    def _failed(self, pending: Pending, exc: BaseException) -> KGroupError:
        """``pending``'s answer failed with ``exc``: close the connection; the error to
        report (kgroup's own errors as they are, aiokafka's and the socket's translated).
        Anything else is a kgroup bug and is raised."""
        self.close()  # the reader may have closed it already; mark it closed here too
        if isinstance(exc, CoordinatorError | RemoteProtocolError):
            return exc
        if isinstance(exc, KafkaError | OSError | ValueError):
            error = CoordinatorError(f"{pending.label} to {self.where} failed: {_describe(exc)}")
            error.__cause__ = exc
            return error
        raise exc

    def _check_error_codes(self, label: str, value: Any) -> None:
        """Log (once, with the broker) an answer carrying an error code kgroup does not
        know; the member then reacts as the spec says for "any other error"."""
        codes = [getattr(value, "error_code", 0)]
        if isinstance(value, LeaveGroupResponse):
            codes.extend(member.error_code for member in value.members)
        for code in codes:
            if code not in _KNOWN_ERROR_CODES:
                logger.warning(
                    "connection.unknown_error_code",
                    broker=self.where,
                    api=label,
                    error_code=code,
                    error=f"{label} response from {self.where} carries error code {code}, "
                    "which kgroup does not know",
                )

    def close(self, reason: str = "kgroup closed the connection") -> asyncio.Future[Any]:
        """Close at once; in-flight requests fail with a CoordinatorError saying ``reason``.
        Returns a future that resolves when the socket is gone."""
        self._closed = True
        self._conn.abandon(reason)
        fut: asyncio.Future[Any] = self._conn.close(reason=None)
        return fut

    async def aclose(self) -> None:
        """Close, and wait (at most 5 s) until the socket is gone; a TLS connection whose
        broker has not answered close_notify by then (or a cancelled wait) is aborted."""
        fut = self.close()
        try:
            with contextlib.suppress(TimeoutError, Exception):  # socket teardown only
                await asyncio.wait_for(asyncio.shield(fut), 5)
        finally:
            if not fut.done() and self._conn.transport is not None:
                self._conn.transport.abort()


async def _discard(conn: StrictConnection) -> None:
    """Drop a connection that failed to open: abort its transport (no TLS close_notify
    exchange with a broker that just rejected us, which can take the TLS shutdown timeout)
    and wait, briefly, until the socket is gone, so that no socket outlives the failure."""
    fut = _abort(conn)
    if fut is None:
        return
    with contextlib.suppress(TimeoutError, Exception):  # socket teardown only
        await asyncio.wait_for(asyncio.shield(fut), 1)


def _abort(conn: StrictConnection) -> asyncio.Future[Any] | None:
    """Close ``conn`` and abort its transport: the socket is closed in the event loop's
    next step, without a TLS close_notify exchange. Returns the future that resolves once
    it is gone, or None when no transport was ever made."""
    transport = conn.transport
    fut: asyncio.Future[Any] = conn.close()
    if transport is None:
        return None
    transport.abort()
    return fut


def _describe(exc: BaseException) -> str:
    """What went wrong, from an aiokafka transport error and its cause."""
    cause = exc.__cause__
    if cause is not None and cause is not exc:
        return f"{exc} ({cause!r})"
    return repr(exc) if not str(exc) else str(exc)


def _replica_racks(partitions: Sequence[Any], node_racks: Mapping[int, str]) -> list[list[str]]:
    """Per partition id, the racks of its replicas' brokers (a Metadata partition is
    ``(error, partition, leader, replicas, isr, ...)``); brokers without a rack, or absent
    from the response, add none. The count is the number of partitions listed, as before
    racks were read; an id outside it gets no racks."""
    result: list[list[str]] = [[] for _ in partitions]
    for partition in partitions:
        index = int(partition[1])
        racks = [node_racks[int(n)] for n in partition[3] if int(n) in node_racks]
        if 0 <= index < len(result):
            result[index] = racks
    return result


class Cluster:
    """The member's view of the cluster: one bootstrap connection (reopened on failure),
    metadata on demand, and FindCoordinator.

    The brokers it knows (from every Metadata answer) are tried after the bootstrap ones
    when a connection must be opened. The first FindCoordinator, and every one after a
    lookup that failed or was answered with an error, is preceded by a Metadata request
    for no topics (spec §4.1: a retry follows a metadata refresh; a refresh that fails
    fails the lookup): so a member learns the cluster's brokers before it needs them, and
    finds its coordinator through any of them once every bootstrap broker is gone."""

    def __init__(
        self,
        brokers: Sequence[tuple[str, int]],
        *,
        client_id: str,
        request_timeout_ms: int,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        self._seeds = list(brokers)
        self._security = dict(security or {})
        self._client_id = client_id
        self._timeout_ms = request_timeout_ms
        self._known: dict[int, tuple[str, int]] = {}
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()
        self._rr = itertools.count(random.randrange(1 << 16))
        self._closed = False
        self._refresh_brokers = True  # before the next FindCoordinator

    def _candidates(self) -> list[tuple[str, int]]:
        addresses = list(dict.fromkeys([*self._seeds, *self._known.values()]))
        start = next(self._rr) % len(addresses)
        return addresses[start:] + addresses[:start]

    async def connection(self) -> BrokerConnection:
        """A live connection to some broker (the least-loaded one, in the Java client's
        words; here: the current one, else the next reachable address)."""
        async with self._lock:
            if self._closed:
                raise CoordinatorError("cluster connection closed")
            if self._conn is not None and self._conn.connected:
                return self._conn
            if self._conn is not None:
                await self._conn.aclose()
                self._conn = None
            errors: list[str] = []
            for host, port in self._candidates():
                try:
                    self._conn = await BrokerConnection.open(
                        host,
                        port,
                        client_id=self._client_id,
                        timeout_ms=self._timeout_ms,
                        security=self._security,
                    )
                    return self._conn
                except CoordinatorError as exc:
                    errors.append(str(exc))
            raise CoordinatorError("no broker reachable: " + "; ".join(errors))

    async def find_coordinator(self, message: Any) -> FindCoordinatorResponse:
        refresh, self._refresh_brokers = self._refresh_brokers, True  # until a clean answer
        if refresh:
            await self._metadata([])  # a failure fails this lookup (retried after backoff)
        conn = await self.connection()
        response: FindCoordinatorResponse = await conn.request(message, self._timeout_ms)
        self._refresh_brokers = response.error_code != 0
        return response

    async def partitions_for(self, topics: Sequence[str]) -> TopicLayout:
        """Partition counts of ``topics``, with their replicas' racks, from a fresh Metadata
        request. Topics that do not exist (or answer an error) are left out, as the
        assignors expect (§6.3)."""
        if not topics:
            return TopicLayout({})
        return await self._metadata(list(topics))

    async def list_topics(self) -> TopicLayout:
        """Partition counts of every topic in the cluster, internal topics left out."""
        return await self._metadata(None)

    async def _metadata(self, topics: list[str] | None) -> TopicLayout:
        conn = await self.connection()
        resp = await conn.raw_request(
            MetadataRequest(topics, allow_auto_topic_creation=False), self._timeout_ms
        )
        label = request_label(resp)
        try:
            node_racks: dict[int, str] = {}
            for broker in resp.brokers:
                node_id, host, port = broker[0], broker[1], broker[2]
                self._known[int(node_id)] = (str(host), int(port))
                if len(broker) > 3 and broker[3] is not None:  # v1+: rack (nullable)
                    node_racks[int(node_id)] = str(broker[3])
            racks: dict[str, list[list[str]]] = {}
            for topic in resp.topics:
                error_code, name, partitions = topic[0], topic[1], topic[-1]
                # v1+: (error, name, is_internal, ..., partitions)
                internal = len(topic) > 3 and topic[2] is True
                if error_code == 0 and not (topics is None and internal):
                    racks[str(name)] = _replica_racks(partitions, node_racks)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            text = f"{label} response from {conn.where} is malformed: {exc!r}; connection closed"
            log_protocol_error(conn.where, label, text)
            conn.close()
            raise RemoteProtocolError(text) from exc
        return TopicLayout(racks)

    async def aclose(self) -> None:
        async with self._lock:
            self._closed = True
            if self._conn is not None:
                await self._conn.aclose()
                self._conn = None
