"""A broker connection reset by the peer leaves no unretrieved failure behind.

When a connection is reset, asyncio's stream protocol stores the ``ConnectionResetError``
in its ``_closed`` future, which nobody awaits. ``StreamReaderProtocol.__del__`` marks it
seen, but when the protocol and the future are collected in one garbage cycle the future's
finalizer can run first and log "Future exception was never retrieved" (seen in the chaos
suite, Kafka seed 224558: a member behind a proxy that reset its connections). kgroup marks
it seen as soon as it is set. The broker here is a local server that answers ApiVersions,
then resets the connection (SO_LINGER 0).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from kgroup._runtime._connection import BrokerConnection


def _api_versions_v0(correlation_id: int) -> bytes:
    body = struct.pack(">ihi", correlation_id, 0, 2) + struct.pack(">hhhhhh", 18, 0, 0, 10, 0, 1)
    return struct.pack(">i", len(body)) + body


async def test_a_reset_connection_leaves_its_failure_seen() -> None:
    reset = asyncio.Event()
    done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = int.from_bytes(await reader.readexactly(4), "big")
        header = await reader.readexactly(size)
        writer.write(_api_versions_v0(int.from_bytes(header[4:8], "big")))
        await writer.drain()
        await reset.wait()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # an RST, not a FIN
        done.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        conn = await BrokerConnection.open("127.0.0.1", port, client_id="reset", timeout_ms=5_000)
        transport = conn._conn.transport
        assert transport is not None
        closed: Any = getattr(transport.get_protocol(), "_closed")  # noqa: B009
        lost = asyncio.Event()
        closed.add_done_callback(lambda _: lost.set())  # does not look at the failure
        reset.set()
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.wait_for(lost.wait(), 5)
        # Marked seen before anything else looked: its finalizer would log nothing.
        assert closed._log_traceback is False
        assert isinstance(closed.exception(), ConnectionResetError)
        await conn.aclose()
    finally:
        server.close()
        await server.wait_closed()
