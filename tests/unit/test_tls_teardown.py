"""A TLS connection kgroup lets go of leaves no socket behind, even when the broker never
answers the TLS close_notify (a CI run once saw a SASL_SSL socket outlive its test's
event loop: a graceful TLS close waits for the broker's answer, and the loop was gone).

The broker here is a local TLS server that completes the handshake, answers what it is
scripted to, then stops reading: it never sees, so never answers, the client's
close_notify. Each scenario runs on its own event loop, which is closed right after, as
pytest-asyncio does after a test; a socket still open then is reported by the garbage
collector as a ResourceWarning.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import struct
import subprocess
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kgroup._errors import CoordinatorError
from kgroup._runtime._connection import BrokerConnection


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            "-keyout", "key.pem", "-out", "cert.pem",
        ],
        cwd=d, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return d / "cert.pem", d / "key.pem"


def _api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 answer offering ApiVersions v0 and FindCoordinator v0-v1."""
    body = struct.pack(">ihi", correlation_id, 0, 2) + struct.pack(">hhhhhh", 18, 0, 0, 10, 0, 1)
    return struct.pack(">i", len(body)) + body


Answer = Callable[[int], bytes]


async def _cancel_the_rest() -> None:
    """Cancel the server's handlers, as pytest-asyncio cancels what a test left."""
    pending = asyncio.all_tasks() - {asyncio.current_task()}
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


Client = Callable[[Callable[[], Awaitable[BrokerConnection]], asyncio.Event], Awaitable[None]]


def _run(certificate: tuple[Path, Path], answer: Answer | None, client: Client) -> list[str]:
    """Serve TLS on a fresh loop, run ``client(open_connection, asked)`` (``asked`` is set
    once the server has read the ApiVersions request), close the loop, and return the
    ResourceWarnings about sockets of the client's port."""
    cert, key = certificate
    client_ports: list[int] = []

    async def scenario() -> list[asyncio.StreamWriter]:
        served: list[asyncio.StreamWriter] = []
        asked = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            served.append(writer)
            client_ports.append(writer.get_extra_info("peername")[1])
            size = int.from_bytes(await reader.readexactly(4), "big")
            header = await reader.readexactly(size)
            asked.set()
            if answer is not None:
                writer.write(answer(int.from_bytes(header[4:8], "big")))
            writer.transport.pause_reading()  # type: ignore[attr-defined]  # never sees the close_notify

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        trust = ssl.create_default_context(cafile=str(cert))

        def open_connection() -> Awaitable[BrokerConnection]:
            return BrokerConnection.open(
                "localhost",
                port,
                client_id="tls-teardown",
                timeout_ms=5_000,
                security={"security_protocol": "SSL", "ssl_context": trust},
            )

        await client(open_connection, asked)
        server.close()
        return served

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        loop = asyncio.new_event_loop()
        try:
            served = loop.run_until_complete(scenario())
            # The server's side is not under test: abort it, before the loop closes.
            for writer in served:
                writer.transport.abort()
            loop.run_until_complete(_cancel_the_rest())
        finally:
            loop.close()
        del served
        gc.collect()
    assert client_ports, "the client never reached the server"
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning)
        and any(f"'127.0.0.1', {p})" in str(w.message) for p in client_ports)
    ]


def test_an_open_cancelled_during_the_handshake_leaves_no_socket(
    certificate: tuple[Path, Path],
) -> None:
    """The member is closed while its connection waits for ApiVersions."""

    async def client(
        open_connection: Callable[[], Awaitable[BrokerConnection]], asked: asyncio.Event
    ) -> None:
        opening = asyncio.ensure_future(open_connection())
        async with asyncio.timeout(10):
            await asked.wait()  # the ApiVersions request is out; no answer is coming
        assert not opening.done()
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening

    assert _run(certificate, None, client) == []


def test_an_open_that_fails_leaves_no_socket(certificate: tuple[Path, Path]) -> None:
    """The broker answers ApiVersions with a malformed frame."""

    def malformed(correlation_id: int) -> bytes:
        return struct.pack(">i", 2) + b"\x00\x00"  # too short for a response header

    async def client(
        open_connection: Callable[[], Awaitable[BrokerConnection]], asked: asyncio.Event
    ) -> None:
        with pytest.raises(CoordinatorError, match="cannot connect"):
            await open_connection()

    assert _run(certificate, malformed, client) == []


def test_a_closed_connection_leaves_no_socket(certificate: tuple[Path, Path]) -> None:
    """An open connection is closed; the broker never answers the close_notify, so aclose
    gives up waiting after 5 s and aborts."""

    async def client(
        open_connection: Callable[[], Awaitable[BrokerConnection]], asked: asyncio.Event
    ) -> None:
        conn = await open_connection()
        assert conn.api_versions == {18: (0, 0), 10: (0, 1)}
        transport = conn._conn.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        await conn.aclose()
        await asyncio.sleep(0)  # an aborted transport closes its socket in the next step
        assert sock.fileno() == -1, "the socket is still open after aclose"

    assert _run(certificate, _api_versions_v0, client) == []
