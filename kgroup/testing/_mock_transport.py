"""In-memory transports: drive the real ``GroupMember`` with no broker and no socket.

- :class:`MockTransport` answers every request with ``handler(request)`` (httpx's
  ``MockTransport`` is the model): script any answer, error code, delay or failure.
- :class:`InMemoryCoordinator` is a small classic group coordinator (join barrier, leader
  assignment, sync, heartbeats, leave) that many members share; ``transport()`` gives each
  member its own :class:`MockTransport` onto it. It is scriptable: ``fail_next(api, code)``
  answers the next requests of an API with an error, ``expire(member_id)`` drops a member as
  a session timeout would, ``disconnect(transport)`` fails a member's connections.

Messages are kgroup's request/response values (``kgroup.testing.messages``). A handler
reports a transport failure by raising ``kgroup.CoordinatorError``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import CoordinatorError, ErrorCode
from . import messages as m

__all__ = ["Handler", "InMemoryCoordinator", "MockConnection", "MockTransport"]

#: ``handler(request) -> response`` (or an awaitable of it); raise CoordinatorError to fail.
Handler = Callable[[Any], Any]


class MockConnection:
    """One in-memory connection: requests go to the handler; closing fails those in flight."""

    def __init__(self, transport: MockTransport, host: str, port: int) -> None:
        self._transport = transport
        self.where = f"{host}:{port}"
        self._closed = False
        self._pending: set[asyncio.Future[Any]] = set()

    @property
    def connected(self) -> bool:
        return not self._closed

    def start(self, message: Any, timeout_ms: float) -> tuple[Any, asyncio.Future[Any], float]:
        """Hand ``message`` to the transport now; :meth:`finish` waits for the answer."""
        if self._closed:
            raise CoordinatorError(f"connection to {self.where} is closed")
        answer = asyncio.ensure_future(self._transport.answer(message))
        answer.add_done_callback(_retrieved)  # the caller may never wait for it
        self._pending.add(answer)
        return message, answer, timeout_ms

    async def finish(self, pending: tuple[Any, asyncio.Future[Any], float]) -> Any:
        message, answer, timeout_ms = pending
        try:
            async with asyncio.timeout(timeout_ms / 1000.0):
                return await answer
        except TimeoutError:
            self.close(f"request timed out after {timeout_ms:.0f} ms")
            raise CoordinatorError(
                f"{type(message).__name__} to {self.where} timed out after {timeout_ms:.0f} ms"
            ) from None
        except asyncio.CancelledError:
            if self._closed and not _cancelling():
                raise CoordinatorError(f"connection to {self.where} closed") from None
            raise
        finally:
            self._pending.discard(answer)

    async def request(self, message: Any, timeout_ms: float) -> Any:
        return await self.finish(self.start(message, timeout_ms))

    def close(self, reason: str = "closed") -> asyncio.Future[Any]:
        if not self._closed:
            self._closed = True
            for fut in list(self._pending):
                fut.cancel()
            self._transport._connections.discard(self)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def aclose(self) -> None:
        await self.close()


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class MockTransport:
    """A transport whose answers come from ``handler`` (see the module docstring).

    ``coordinator``: the ``(node_id, host, port)`` FindCoordinator names when the handler
    leaves FindCoordinator to the transport (returns None for it). ``partitions``: topic
    partition counts for the leader's assignment. ``requests`` records every request sent.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        partitions: Mapping[str, int] | None = None,
        coordinator: tuple[int, str, int] = (1, "in-memory", 9092),
    ) -> None:
        self._handler = handler
        self.partitions = dict(partitions or {})
        self.coordinator = coordinator
        self.requests: list[Any] = []
        self._connections: set[MockConnection] = set()
        self.closed = False

    async def answer(self, message: Any) -> Any:
        self.requests.append(message)
        result = self._handler(message)
        if inspect.isawaitable(result):
            result = await result
        if result is None and isinstance(message, m.FindCoordinatorRequest):
            node, host, port = self.coordinator
            return m.FindCoordinatorResponse(
                error_code=ErrorCode.NONE, node_id=node, host=host, port=port
            )
        if result is None:
            raise AssertionError(f"MockTransport handler gave no answer to {message!r}")
        return result

    async def connect(self, host: str, port: int) -> MockConnection:
        if self.closed:
            raise CoordinatorError("transport closed")
        conn = MockConnection(self, host, port)
        self._connections.add(conn)
        return conn

    async def find_coordinator(self, request: Any) -> Any:
        if self.closed:
            raise CoordinatorError("transport closed")
        return await self.answer(request)

    async def partitions_for(self, topics: Sequence[str]) -> dict[str, int]:
        if self.closed:
            raise CoordinatorError("transport closed")
        return {t: self.partitions[t] for t in topics if t in self.partitions}

    async def list_topics(self) -> dict[str, int]:
        """Every topic of :attr:`partitions` (change that dict to grow or add topics)."""
        if self.closed:
            raise CoordinatorError("transport closed")
        return dict(self.partitions)

    def disconnect(self) -> None:
        """Fail every open connection, as a network cut would."""
        for conn in list(self._connections):
            conn.close("disconnected by the test")

    async def aclose(self) -> None:
        self.closed = True
        self.disconnect()


class InMemoryCoordinator:
    """A small classic group coordinator in memory (see the module docstring).

    What it models: member ids handed out on the first JoinGroup (MEMBER_ID_REQUIRED, as
    Kafka does), a join barrier that completes once every known member has rejoined (or
    ``join_window_ms`` after the first join of an empty group), the leader's assignment
    handed out on SyncGroup, heartbeats answered REBALANCE_IN_PROGRESS while rebalancing,
    ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID for stale members, and LeaveGroup. What it does
    not: session and rebalance timeouts on its own (call :meth:`expire`), static members'
    fencing, offsets (OffsetCommit/OffsetFetch answer NONE and "nothing committed").
    """

    def __init__(
        self, partitions: Mapping[str, int] | None = None, *, join_window_ms: float = 50.0
    ) -> None:
        self.partitions = dict(partitions or {})
        self.join_window_ms = join_window_ms
        self.generation = 0
        self.state = "Empty"
        self.leader = ""
        self.protocol = ""
        self.protocol_type = "consumer"
        self.members: dict[str, tuple[tuple[str, bytes], ...]] = {}
        self._joining: dict[str, asyncio.Future[m.JoinGroupResponse]] = {}
        self._syncing: dict[str, asyncio.Future[m.SyncGroupResponse]] = {}
        self._assignments: dict[str, bytes] = {}
        self._ids = itertools.count(1)
        self._barrier: asyncio.TimerHandle | None = None
        self._failures: dict[type[Any], list[int]] = {}
        self.transports: list[MockTransport] = []

    # -- scripting -------------------------------------------------------------------------------

    def transport(self) -> MockTransport:
        """A transport for one more member. Its metadata is :attr:`partitions` itself:
        change that dict to add topics or partitions for every member at once."""
        transport = MockTransport(self.handle)
        transport.partitions = self.partitions
        self.transports.append(transport)
        return transport

    def fail_next(self, request_type: type[Any], error_code: int, times: int = 1) -> None:
        """Answer the next ``times`` requests of ``request_type`` with ``error_code``."""
        self._failures.setdefault(request_type, []).extend([error_code] * times)

    def expire(self, member_id: str) -> None:
        """Drop ``member_id`` as a session timeout would, and rebalance the others."""
        if self.members.pop(member_id, None) is not None:
            self._rebalance()

    # -- the protocol ----------------------------------------------------------------------------

    async def handle(self, request: Any) -> Any:
        failures = self._failures.get(type(request))
        if failures:
            return _error_answer(request, failures.pop(0))
        match request:
            case m.FindCoordinatorRequest():
                return None  # the transport's coordinator
            case m.JoinGroupRequest():
                return await self._join(request)
            case m.SyncGroupRequest():
                return await self._sync(request)
            case m.HeartbeatRequest():
                return m.HeartbeatResponse(
                    error_code=self._check(request.member_id, request.generation_id)
                )
            case m.LeaveGroupRequest():
                if self.members.pop(request.member_id, None) is not None:
                    self._rebalance()
                return m.LeaveGroupResponse(error_code=ErrorCode.NONE)
            case m.OffsetCommitRequest():
                code = self._check(request.member_id, request.generation_id)
                results = tuple((p.topic, p.partition, code) for p in request.partitions)
                return m.OffsetCommitResponse(results=results)
            case m.OffsetFetchRequest():
                wanted = request.partitions or ()
                return m.OffsetFetchResponse(
                    partitions=tuple(
                        m.FetchedOffset(topic=t, partition=p, offset=-1) for t, p in wanted
                    )
                )
        raise AssertionError(f"InMemoryCoordinator cannot answer {request!r}")

    def _check(self, member_id: str, generation_id: int) -> int:
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self.state in ("PreparingRebalance",):
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def _rebalance(self) -> None:
        if self.state != "PreparingRebalance":
            self.state = "PreparingRebalance"
            for fut in self._syncing.values():
                if not fut.done():
                    fut.set_result(m.SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
            self._syncing.clear()
        self._maybe_complete_join()

    async def _join(self, request: m.JoinGroupRequest) -> m.JoinGroupResponse:
        self.protocol_type = request.protocol_type  # the group's (every member sends one)
        if request.member_id == "":
            new_id = f"member-{next(self._ids)}"
            return m.JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
        if request.member_id not in self.members or (
            self.members[request.member_id] != request.protocols
        ):
            self.members[request.member_id] = request.protocols
            self._rebalance()
        elif self.state in ("Stable", "CompletingRebalance"):
            self._rebalance()
        previous = self._joining.pop(request.member_id, None)
        if previous is not None and not previous.done():
            previous.cancel()
        fut: asyncio.Future[m.JoinGroupResponse] = asyncio.get_running_loop().create_future()
        self._joining[request.member_id] = fut
        self._maybe_complete_join()
        return await fut

    def _maybe_complete_join(self) -> None:
        if self.state != "PreparingRebalance":
            return
        if not self.members:
            self.state = "Empty"
            return
        if set(self.members) - set(self._joining):
            return  # the barrier waits for every known member
        if self._barrier is None:
            loop = asyncio.get_running_loop()
            self._barrier = loop.call_later(self.join_window_ms / 1000.0, self._complete_join)

    def _complete_join(self) -> None:
        self._barrier = None
        joining = {k: f for k, f in self._joining.items() if k in self.members and not f.done()}
        if set(self.members) - set(joining):
            return
        self._joining.clear()
        self.generation += 1
        self.state = "CompletingRebalance"
        self._assignments.clear()
        ordered = sorted(joining)
        self.leader = ordered[0]
        first = self.members[self.leader][0][0]
        self.protocol = first
        everyone = tuple(
            m.JoinGroupMember(
                member_id=mid,
                group_instance_id=None,
                metadata=dict(self.members[mid]).get(first, b""),
            )
            for mid in ordered
        )
        for mid, fut in joining.items():
            fut.set_result(
                m.JoinGroupResponse(
                    error_code=ErrorCode.NONE,
                    generation_id=self.generation,
                    protocol_type=self.protocol_type,
                    protocol_name=first,
                    leader=self.leader,
                    member_id=mid,
                    members=everyone if mid == self.leader else (),
                )
            )

    async def _sync(self, request: m.SyncGroupRequest) -> m.SyncGroupResponse:
        code = self._check(request.member_id, request.generation_id)
        if code != ErrorCode.NONE:
            return m.SyncGroupResponse(error_code=code)
        if self.state == "Stable":
            return self._synced(request.member_id)
        if request.member_id == self.leader:
            self._assignments = dict(request.assignments)
            self.state = "Stable"
            for mid, waiting in self._syncing.items():
                if not waiting.done():
                    waiting.set_result(self._synced(mid))
            self._syncing.clear()
            return self._synced(request.member_id)
        fut: asyncio.Future[m.SyncGroupResponse] = asyncio.get_running_loop().create_future()
        self._syncing[request.member_id] = fut
        return await fut

    def _synced(self, member_id: str) -> m.SyncGroupResponse:
        return m.SyncGroupResponse(
            error_code=ErrorCode.NONE,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol,
            assignment=self._assignments.get(member_id, b""),
        )


def _error_answer(request: Any, code: int) -> Any:
    answers: dict[type[Any], Callable[[int], Any]] = {
        m.FindCoordinatorRequest: lambda c: m.FindCoordinatorResponse(error_code=c),
        m.JoinGroupRequest: lambda c: m.JoinGroupResponse(error_code=c),
        m.SyncGroupRequest: lambda c: m.SyncGroupResponse(error_code=c),
        m.HeartbeatRequest: lambda c: m.HeartbeatResponse(error_code=c),
        m.LeaveGroupRequest: lambda c: m.LeaveGroupResponse(error_code=c),
    }
    make = answers.get(type(request))
    if make is None:
        raise AssertionError(f"fail_next does not cover {type(request).__name__}")
    return make(code)
