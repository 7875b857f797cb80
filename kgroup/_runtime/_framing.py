"""kgroup's reader of broker responses: aiokafka's connection with the frames read by kgroup,
which checks each one's size, correlation id and schema and fails its request otherwise."""

# aiokafka's reader trusts the stream; this one trusts nothing in it:
#
# - a size prefix below 4 (no room for the correlation id, or negative) or above
#   :data:`MAX_RESPONSE_BYTES` fails the connection at once, before anything is allocated or
#   awaited (aiokafka would wait for 2 GiB to arrive, or raise a ``ValueError`` inside its
#   reader task);
# - a response header that cannot be decoded, a correlation id other than the oldest
#   pending request's, or a body that cannot be decoded (by kgroup's strict structs, see
#   ``kgroup._protocol._schemas``) fails that request with :class:`RemoteProtocolError`;
# - the broker closing the connection part-way through a frame fails the pending requests
#   with :class:`CoordinatorError` saying how many bytes of how many arrived.
#
# Each of these closes the connection: after a framing error nothing later on the stream
# can be trusted. A protocol violation is logged once, at error level, as
# ``connection.protocol_error`` (``broker``, ``api``, ``error``). Every message names the
# request (``"Heartbeat v4"``), the broker (``host:port``) and what was wrong.

from __future__ import annotations

import asyncio
import struct
import time
import weakref
from collections.abc import Callable
from io import BytesIO
from typing import Any, Final

from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.admin import ApiVersionRequest

from .._errors import CoordinatorError, ErrorCode, KGroupError, RemoteProtocolError
from .._log import logger
from .._protocol._direct import DirectRequest, request_header
from .._protocol._primitives import parse_response_header
from .._protocol._versions import API_NAMES

__all__ = [
    "MAX_RESPONSE_BYTES",
    "StrictConnection",
    "log_protocol_error",
    "request_label",
    "retrieved",
]

#: The largest response frame kgroup reads (Kafka's own ``socket.request.max.bytes`` default,
#: 100 MiB). A group or metadata answer is far smaller; a larger size prefix is corruption.
MAX_RESPONSE_BYTES: Final = 100 * 1024 * 1024

# A response frame starts with the int32 correlation id.
_MIN_FRAME_BYTES: Final = 4

_SIZE: Final = struct.Struct(">i").pack

_OTHER_API_NAMES: Final = {3: "Metadata", 18: "ApiVersions"}


def request_label(request: Any) -> str:
    """``"Heartbeat v4"``: the API and version of a request struct."""
    api_key = getattr(request, "API_KEY", None)
    version = getattr(request, "API_VERSION", "?")
    if not isinstance(api_key, int):
        return "request"
    name = API_NAMES.get(api_key) or _OTHER_API_NAMES.get(api_key) or f"API {api_key}"
    return f"{name} v{version}"


def log_protocol_error(broker: str, api: str, error: str) -> None:
    logger.error("connection.protocol_error", broker=broker, api=api, error=error)


class StrictConnection(AIOKafkaConnection):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's connection, with kgroup's reader: frame sizes are checked before they are
    awaited, and every malformed frame fails its request with a kgroup error naming the
    request, the broker and the problem, then closes the connection.

    Overrides three private hooks of aiokafka 0.14 (pinned below 0.15): ``_read`` (the
    reader task's loop), ``_handle_frame`` (one complete frame) and ``_do_version_lookup``
    (the ApiVersions exchange of ``connect``).
    """

    def __init__(self, host: str, port: int, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self.where = f"{host}:{port}"
        #: The size of the frame being received, while its body is incomplete.
        self.announced: int | None = None
        #: Set once the TCP connection is up and ApiVersions was sent (``connect``).
        self.version_lookup_sent = False
        #: The transport ``connect`` made, kept after aiokafka's ``close`` lets go of it,
        #: so that a failed or cancelled open can abort it.
        self.transport: asyncio.Transport | None = None
        #: Called in the reader's own step right after a response future gets its result
        #: (``BrokerConnection.watch``): no extra event-loop step before the answer is used.
        self.on_answer: dict[asyncio.Future[Any], Callable[[], None]] = {}

    # -- the reader task -----------------------------------------------------------------------

    @staticmethod
    async def _read(self_ref: weakref.ref[StrictConnection]) -> None:
        # Holds the connection only between awaits (as aiokafka does), so that an abandoned
        # connection can still be collected and warn.
        conn = self_ref()
        if conn is None:
            return
        reader = conn._reader
        del conn
        while True:
            try:
                header = await reader.readexactly(4)
            except (asyncio.IncompleteReadError, OSError) as exc:
                _connection_lost(self_ref, exc, None)
                return
            size = int.from_bytes(header, "big", signed=True)
            conn = self_ref()
            if conn is None:
                return
            if not _MIN_FRAME_BYTES <= size <= MAX_RESPONSE_BYTES:
                conn._violation(_bad_size(size))
                return
            conn.announced = size
            del conn
            try:
                frame = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, OSError) as exc:
                _connection_lost(self_ref, exc, size)
                return
            conn = self_ref()
            if conn is None:
                return
            conn.announced = None
            conn._handle_frame(frame)
            del conn

    def _handle_frame(self, resp: bytes) -> None:
        if not self._requests:
            self._violation("", text=f"{self.where} sent an unsolicited {len(resp)}-byte frame")
            return
        correlation_id, request, fut = self._requests[0]
        if correlation_id is None:  # a SASL token (kgroup does not use SASL yet)
            super()._handle_frame(resp)
            return
        buffer = BytesIO(resp)
        try:
            received = parse_response_header(
                buffer, flexible=bool(getattr(request, "FLEXIBLE_VERSION", False))
            )
        except RemoteProtocolError as exc:
            self._violation(f"has an {exc}")
            return
        if received != correlation_id:
            self._violation(
                f"has correlation id {received}, but the request it answers (the oldest "
                f"pending one) was sent with {correlation_id}"
            )
            return
        hook = None
        if not fut.done():
            decode_answer = getattr(request, "decode_answer", None)  # the direct path's
            response = None if decode_answer is None else decode_answer(resp, buffer.tell())
            try:
                if response is None:
                    response = request.RESPONSE_TYPE.decode(buffer)
            except RemoteProtocolError as exc:
                # kgroup's structs: the message names the API, version and field.
                self._violation("", text=f"{exc} (from {self.where})")
                return
            except Exception as exc:  # aiokafka's structs (ApiVersions, Metadata)
                self._violation(f"cannot be decoded: {exc!r}")
                return
            fut.set_result(response)
            hook = self.on_answer.pop(fut, None)
        self._last_action = time.monotonic()
        self._requests.popleft()
        if hook is not None:
            hook()  # contains its own failures

    async def _do_version_lookup(self) -> None:
        """ApiVersions, as aiokafka's, but a malformed answer is a RemoteProtocolError
        (aiokafka asserts, ignores the error code and accepts negative versions)."""
        self.version_lookup_sent = True
        self.transport = self._writer.transport
        _retrieve_on_close(self.transport)
        response = await self.send(ApiVersionRequest())
        label = request_label(response)
        problem = None
        versions: dict[int, tuple[int, int]] = {}
        if response.error_code != ErrorCode.NONE:
            problem = f"an error: {ErrorCode.describe(response.error_code)}"
        elif not response.api_versions:
            problem = "no API versions"
        else:
            for api_key, low, high in response.api_versions:
                if not 0 <= low <= high:
                    problem = f"API key {api_key} has an invalid version range v{low}-v{high}"
                    break
                versions[api_key] = (low, high)
        if problem is not None:
            text = f"{label} response from {self.where} has {problem}; connection closed"
            log_protocol_error(self.where, label, text)
            raise RemoteProtocolError(text)
        self._versions = versions

    # -- writing -------------------------------------------------------------------------------

    def send_encoded(self, request: DirectRequest, body: bytes) -> asyncio.Future[Any]:
        """Frame and write a request whose body is already encoded (``kgroup._protocol.
        _direct``), as aiokafka's ``send`` frames a struct: the same header, correlation
        and pending entry. Returns the future of its answer. Raises aiokafka's
        ``KafkaConnectionError`` when not connected, ``OSError`` when the write fails."""
        writer = self._writer
        if writer is None:
            raise KafkaConnectionError(f"No connection to broker at {self._host}:{self._port}")
        correlation_id = self._next_correlation_id()
        message = request_header(request, correlation_id, self._client_id) + body
        try:
            writer.write(_SIZE(len(message)) + message)
        except OSError:
            self.close(reason=CloseReason.CONNECTION_BROKEN)
            raise
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._requests.append((correlation_id, request, fut))
        return fut

    # -- failing the pending requests ----------------------------------------------------------

    def _fail_pending(self, head: KGroupError | None, others: Callable[[str], KGroupError]) -> None:
        """Fail the oldest pending request with ``head`` (if given), every other with
        ``others(its label)``; aiokafka's ``close`` then finds them all done, so no request
        ever fails with aiokafka's bare "Connection at ... closed"."""
        for index, (_correlation_id, request, fut) in enumerate(self._requests):
            if not fut.done():
                error = head if index == 0 and head is not None else others(request_label(request))
                fut.set_exception(error)

    def abandon(self, reason: str) -> None:
        """kgroup closes this connection: every pending request fails with a
        CoordinatorError saying ``reason``."""
        self._fail_pending(
            None, lambda label: CoordinatorError(f"{label} to {self.where} failed: {reason}")
        )
        self.announced = None

    def _violation(self, problem: str, *, text: str = "") -> None:
        """The broker broke the framing or the schema: fail, log, close. The message is
        ``text`` or "<request> response from <broker> <problem>"."""
        head = request_label(self._requests[0][1]) if self._requests else "unsolicited"
        text = (text or f"{head} response from {self.where} {problem}") + "; connection closed"
        log_protocol_error(self.where, head, text)
        self._fail_pending(
            RemoteProtocolError(text),
            lambda other: CoordinatorError(
                f"{other} to {self.where} failed: the connection was closed after a "
                f"malformed {head} response"
            ),
        )
        self.announced = None
        self.close(reason=CloseReason.OUT_OF_SYNC)


def _retrieve_on_close(transport: asyncio.BaseTransport) -> None:
    """Mark the failure the stream's protocol records when the connection is lost (its
    ``_closed`` future: a reset is a ``ConnectionResetError``) as seen once it is set.
    asyncio's ``StreamReaderProtocol.__del__`` does that too, but when the protocol and the
    future are collected in one garbage cycle the future's own finalizer may run first and
    log "Future exception was never retrieved" (the chaos suite saw it on a member behind
    a proxy that reset its connections). Nobody awaits that future: aiokafka waits on its
    own."""
    closed = getattr(transport.get_protocol(), "_closed", None)
    if isinstance(closed, asyncio.Future):
        closed.add_done_callback(retrieved)


def retrieved(fut: asyncio.Future[Any]) -> None:
    """A done callback that marks a future's failure as seen: nobody may be waiting any
    more."""
    if not fut.cancelled():
        fut.exception()


def _bad_size(size: int) -> str:
    if size < 0:
        return f"announced a frame of {size} bytes (a negative size)"
    if size < _MIN_FRAME_BYTES:
        return f"announced a frame of {size} bytes, too short for a correlation id"
    return (
        f"announced a frame of {size} bytes, over the {MAX_RESPONSE_BYTES}-byte limit: "
        "nothing was allocated or awaited"
    )


def _connection_lost(
    self_ref: weakref.ref[StrictConnection], exc: BaseException, announced: int | None
) -> None:
    """The reader hit end of stream or a socket error: say where in a frame it happened."""
    conn = self_ref()
    if conn is None:
        return
    if isinstance(exc, asyncio.IncompleteReadError):
        received = len(exc.partial)
        if announced is not None:
            problem = (
                f"the broker closed the connection after {received} of the {announced} "
                "bytes of the response"
            )
        elif received:
            problem = f"the broker closed the connection inside a frame size ({received} of 4)"
        else:
            problem = "the broker closed the connection"
    else:
        problem = f"the connection broke: {exc!r}"
    conn.abandon(problem)
    conn.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)
