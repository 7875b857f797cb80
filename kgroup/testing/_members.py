"""Run kgroup members in tests: a poll loop per member, recorded listener events, and waits
on conditions that wake on every membership change (no fixed sleeps).

    async with MemberGroup() as group:
        a = await group.start(config_a)
        b = await group.start(config_b)
        await group.wait_until(lambda: covered([a, b], topic, 6), timeout=30)
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._config import GroupConfig
from .._core._consumer_protocol import TopicPartition
from .._core._group_protocol import GroupProtocol
from .._core._state import MemberState
from .._listener import RebalanceListener
from .._runtime._member import GroupMember
from ._invariants import OwnershipLog

__all__ = ["ListenerEvent", "MemberGroup", "MemberRunner", "covered"]

Hook = Callable[[frozenset[TopicPartition]], Awaitable[None] | None]


@dataclass(frozen=True)
class ListenerEvent:
    at: float  # time.monotonic()
    callback: str  # "on_partitions_assigned" / "_revoked" / "_lost"
    partitions: frozenset[TopicPartition]
    generation: int


class _RecordingListener(RebalanceListener):
    def __init__(self, runner: MemberRunner) -> None:
        self._runner = runner

    async def _record(self, callback: str, partitions: frozenset[TopicPartition]) -> None:
        runner = self._runner
        generation = runner.member.generation.generation_id
        now = time.monotonic()
        runner.events.append(ListenerEvent(now, callback, partitions, generation))
        ownership = runner.group.ownership
        if callback == "on_partitions_assigned":
            ownership.assigned(runner.name, partitions, generation, now)
        elif callback == "on_partitions_lost":
            ownership.lost(runner.name, partitions, now)
        runner.group.notify()
        try:
            for target in (runner.hooks.get(callback), getattr(runner.listener, callback, None)):
                if target is not None:
                    result = target(partitions)
                    if inspect.isawaitable(result):
                        await result
        finally:
            if callback == "on_partitions_revoked":
                ownership.revoked(runner.name, partitions, time.monotonic())

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await self._record("on_partitions_assigned", partitions)

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self._record("on_partitions_revoked", partitions)

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        await self._record("on_partitions_lost", partitions)


class MemberRunner:
    """One GroupMember and the task that polls it (``poll(timeout=poll_timeout)`` in a loop).

    ``errors`` collects every exception ``poll()`` raised (the loop keeps polling after a
    GroupError, as an application that catches and retries would, unless
    ``stop_on_error``). ``hooks`` maps a callback name to a function run inside it.
    ``protocol``: a :class:`~kgroup.GroupProtocol` for a group that is not a consumer group
    (the ownership log then records its items).
    """

    def __init__(
        self,
        group: MemberGroup,
        config: GroupConfig,
        *,
        name: str,
        poll_timeout: float = 0.5,
        stop_on_error: bool = False,
        hooks: dict[str, Hook] | None = None,
        listener: RebalanceListener | None = None,
        protocol: GroupProtocol | None = None,
    ) -> None:
        self.group = group
        self.name = name
        self.config = config
        self.poll_timeout = poll_timeout
        self.stop_on_error = stop_on_error
        self.hooks: dict[str, Hook] = dict(hooks or {})
        #: The application's own RebalanceListener (any subset of its methods, sync or
        #: async); called after the recording, inside the same callback.
        self.listener = listener
        self.events: list[ListenerEvent] = []
        self.errors: list[BaseException] = []
        self.member = GroupMember(config, listener=_RecordingListener(self), protocol=protocol)
        self.member.add_event_hook(self._on_member_event)
        self._task: asyncio.Task[None] | None = None

    @property
    def assignment(self) -> frozenset[Any]:
        return self.member.assignment

    @property
    def stable(self) -> bool:
        return not self.member.closed and self.member.state is MemberState.STABLE

    async def start(self) -> MemberRunner:
        await self.member.start()
        self.resume()
        return self

    def resume(self) -> None:
        """(Re)start the poll loop."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._poll_loop(), name=f"poll-{self.name}"
            )

    async def pause(self) -> None:
        """Stop polling (the heartbeat task goes on): simulates a slow application."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _poll_loop(self) -> None:
        while not self.member.closed:
            try:
                await self.member.poll(timeout=self.poll_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors.append(exc)
                self.group.notify()
                if self.stop_on_error:
                    return
            self.group.notify()

    async def close(self) -> None:
        await self.pause()
        await self.member.close()
        self.group.ownership.died(self.name, time.monotonic())
        self.group.notify()

    async def crash(self) -> None:
        """Die without a word: no callbacks, no LeaveGroup."""
        await self.pause()
        self.group.ownership.died(self.name, time.monotonic())
        await self.member.abort()
        self.group.notify()

    def _on_member_event(self, event: str, fields: Mapping[str, Any]) -> None:
        if event == "member.lease_expired":
            # The core's clock is the event loop's, in ms; time.monotonic() is the same clock.
            deadline_ms = fields.get("deadline")
            if isinstance(deadline_ms, int | float):
                self.group.ownership.lease_expired(self.name, float(deadline_ms) / 1000.0)
            self.group.notify()


class MemberGroup:
    """Owns MemberRunners; closes all of them on exit. ``wait_until`` re-checks its
    condition whenever any member reports progress (and at least every 50 ms).

    On a clean exit it also checks :attr:`ownership`: no partition may have been held by
    two members at the same time (``check_ownership=False`` turns that off)."""

    def __init__(self, *, check_ownership: bool = True) -> None:
        self.check_ownership = check_ownership
        self.runners: list[MemberRunner] = []
        #: Every member's holds of every partition; ``ownership.check()`` asserts that no
        #: partition was held by two members at once.
        self.ownership = OwnershipLog()
        self._changed = asyncio.Event()
        self._count = 0

    def notify(self) -> None:
        self._changed.set()

    async def start(self, config: GroupConfig, **kwargs: Any) -> MemberRunner:
        self._count += 1
        kwargs.setdefault("name", f"m{self._count}")
        runner = MemberRunner(self, config, **kwargs)
        self.runners.append(runner)
        return await runner.start()

    async def wait_until(
        self, condition: Callable[[], bool], *, timeout: float, what: str = "condition"
    ) -> float:
        """Wait until ``condition()`` holds; returns the seconds it took. Raises
        TimeoutError naming ``what`` and each member's state after ``timeout``."""
        start = time.monotonic()
        while not condition():
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                states = ", ".join(
                    f"{r.name}: {r.member.state.name} gen={r.member.generation.generation_id} "
                    f"{sorted(str(tp) for tp in r.assignment)} errors={r.errors!r}"
                    for r in self.runners
                )
                raise TimeoutError(f"{what} not reached within {timeout:.0f} s ({states})")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.05))
            except TimeoutError:
                pass
        return time.monotonic() - start

    @property
    def live(self) -> list[MemberRunner]:
        """The runners whose member is neither closed nor crashed."""
        return [r for r in self.runners if not r.member.closed]

    async def wait_stable(
        self,
        topic: str,
        partitions: int,
        *,
        members: Iterable[MemberRunner] | None = None,
        timeout: float = 60.0,
    ) -> float:
        """Wait until ``members`` (default: every live member) are all STABLE and together
        hold each of the ``partitions`` partitions of ``topic`` exactly once; returns the
        seconds it took."""
        chosen = None if members is None else list(members)

        def condition() -> bool:
            return covered(self.live if chosen is None else chosen, topic, partitions)

        names = "all live members" if chosen is None else ", ".join(r.name for r in chosen)
        return await self.wait_until(
            condition, timeout=timeout, what=f"{names} stable on {topic} ({partitions} partitions)"
        )

    async def aclose(self) -> None:
        for runner in self.runners:
            await runner.close()

    async def __aenter__(self) -> MemberGroup:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        await self.aclose()
        if exc_type is None and self.check_ownership:
            self.ownership.check()


def covered(runners: Iterable[MemberRunner], topic: str, partitions: int) -> bool:
    """All ``runners`` (at least one) are STABLE and their assignments are disjoint and
    cover every partition of ``topic``."""
    seen: list[TopicPartition] = []
    chosen = list(runners)
    if not chosen:
        return False
    for runner in chosen:
        if not runner.stable:
            return False
        seen.extend(runner.assignment)
    expected = {TopicPartition(topic, p) for p in range(partitions)}
    return len(seen) == len(set(seen)) and set(seen) == expected
