"""A heartbeat the event loop cannot starve (``isolate_heartbeat``), on Apache Kafka.

One application event loop hosts two members, each in its own group: one in isolated mode,
one in the default mode. A user handler then blocks that loop (``time.sleep``) for twice
the session timeout, well below ``max_poll_interval_ms``. Each group also has a *watcher*
member running in another thread on its own event loop (another process, in effect), which
the block does not touch.

- isolated: the coordinator thread keeps heartbeating through the block. Same member id,
  same generation, no callback on the member, and the watcher sees no rebalance.
- default: the heartbeat task cannot run; the broker evicts the member after the session
  timeout. The member reports its partitions lost and rejoins under a new generation; its
  stats and the ``heartbeat.late`` log event report the lateness.

Both outcomes come from the same block of the same loop, so the comparison is fair and the
file stays within its time budget.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from kgroup import GroupConfig, GroupMember, MemberState
from kgroup.testing import Broker
from kgroup.testing._members import MemberGroup, MemberRunner
from tests.integration.conftest import SESSION_MS, group_config

HEARTBEAT_MS = 1_000
MAX_POLL_MS = 60_000
BLOCK_S = 2 * SESSION_MS / 1000  # twice the session timeout, far below max_poll_interval

config = functools.partial(
    group_config,
    heartbeat_interval_ms=HEARTBEAT_MS,
    max_poll_interval_ms=MAX_POLL_MS,
    request_timeout_ms=5_000,
)


class Watcher:
    """A default-mode member on its own event loop in its own thread. Records every
    generation it completed and every callback it ran."""

    def __init__(self, cfg: GroupConfig) -> None:
        self.cfg = cfg
        self.callbacks: list[tuple[str, int]] = []
        self.generation = -1
        self.owned: frozenset[Any] = frozenset()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "watcher did not stop"

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the test
            self.error = exc

    async def _main(self) -> None:
        watcher = self

        class Listener:
            def on_partitions_assigned(self, partitions: frozenset[Any]) -> None:
                watcher.callbacks.append(("assigned", member.generation.generation_id))

            def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
                watcher.callbacks.append(("revoked", member.generation.generation_id))

            def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
                watcher.callbacks.append(("lost", member.generation.generation_id))

        async with GroupMember(self.cfg, listener=Listener()) as member:
            while not self._stop.is_set():
                self.owned = await member.poll(timeout=0.1)
                if member.state is MemberState.STABLE:
                    self.generation = member.generation.generation_id


async def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` (the members' poll tasks run meanwhile) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def stable_with(runner: MemberRunner, watcher: Watcher, partitions: int) -> bool:
    member = runner.member
    return (
        member.state is MemberState.STABLE
        and watcher.generation == member.generation.generation_id
        and len(runner.assignment) + len(watcher.owned) == partitions
        and bool(runner.assignment)
        and bool(watcher.owned)
    )


async def test_blocked_loop_isolated_member_keeps_membership_default_member_loses_it(
    kafka_broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topics = {"isolated": make_topic(2), "default": make_topic(2)}
    groups = {"isolated": unique_group + "-iso", "default": unique_group + "-def"}
    watchers = {mode: Watcher(config(kafka_broker, groups[mode], topics[mode])) for mode in topics}
    for watcher in watchers.values():
        watcher.start()
    try:
        await wait_for(
            lambda: all(len(w.owned) == 2 for w in watchers.values()),
            timeout=30,
            what="watchers own their topics",
        )
        async with MemberGroup(check_ownership=False) as app:
            runners = {
                mode: await app.start(
                    config(
                        kafka_broker,
                        groups[mode],
                        topics[mode],
                        isolate_heartbeat=(mode == "isolated"),
                    ),
                    name=mode,
                    poll_timeout=0.2,
                )
                for mode in topics
            }
            await app.wait_until(
                lambda: all(stable_with(runners[m], watchers[m], 2) for m in topics),
                timeout=30,
                what="both groups stable with two members",
            )
            before = {
                mode: (
                    r.member.member_id,
                    r.member.generation.generation_id,
                    len(r.events),
                    len(watchers[mode].callbacks),
                    r.member.stats().as_dict(),
                )
                for mode, r in runners.items()
            }

            with structlog.testing.capture_logs() as logs:
                time.sleep(BLOCK_S)  # noqa: ASYNC251 - the point: a handler blocks the loop
                blocked_until = time.monotonic()

                # Default mode: evicted during the block; reports the partitions lost and
                # rejoins under a new generation.
                victim = runners["default"]
                await app.wait_until(
                    lambda: (
                        any(e.callback == "on_partitions_lost" for e in victim.events)
                        and victim.member.state is MemberState.STABLE
                        and victim.member.generation.generation_id > before["default"][1]
                    ),
                    timeout=30,
                    what="default-mode member lost its partitions and rejoined",
                )
                # Isolated mode: a few more heartbeats after the block, still the same
                # membership.
                iso = runners["isolated"].member
                sent_at_unblock = iso.stats().heartbeats_acknowledged
                await wait_for(
                    lambda: iso.stats().heartbeats_acknowledged >= sent_at_unblock + 2,
                    timeout=10,
                    what="isolated member heartbeats after the block",
                )

            # -- isolated: nothing happened -------------------------------------------------
            iso_runner = runners["isolated"]
            member_id, generation, n_events, n_watcher, stats0 = before["isolated"]
            stats1 = iso.stats().as_dict()
            assert iso.member_id == member_id
            assert iso.generation.generation_id == generation
            assert iso.state is MemberState.STABLE
            assert len(iso_runner.events) == n_events, iso_runner.events[n_events:]
            assert watchers["isolated"].callbacks[n_watcher:] == []
            assert watchers["isolated"].generation == generation
            assert stats1["isolated"] is True
            # The coordinator thread went on heartbeating while the loop was blocked:
            # roughly one per interval (at least half of them, on a loaded machine).
            acknowledged = stats1["heartbeats_acknowledged"] - stats0["heartbeats_acknowledged"]
            assert acknowledged >= BLOCK_S * 1000 / HEARTBEAT_MS / 2, stats1
            assert stats1["heartbeats_failed"] == stats0["heartbeats_failed"]
            # Its heartbeats were never near the session timeout late.
            assert stats1["heartbeat_lateness_ms"]["max"] < SESSION_MS / 2, stats1
            assert stats1["lease_remaining_ms"] is not None
            assert stats1["lease_remaining_ms"] > 0
            assert iso_runner.errors == []

            # -- default: evicted, and the lateness is reported -----------------------------
            member_id, generation, n_events, n_watcher, stats0 = before["default"]
            dstats = victim.member.stats().as_dict()
            assert dstats["isolated"] is False
            assert dstats["generation"] > generation
            callbacks = [e.callback for e in victim.events[n_events:]]
            assert "on_partitions_lost" in callbacks, callbacks
            # The watcher saw the rebalance that evicted the blocked member.
            assert any(cb for cb, gen in watchers["default"].callbacks[n_watcher:])
            # At least one heartbeat ran about the whole block late.
            assert dstats["heartbeats_late"] > stats0["heartbeats_late"], dstats
            assert dstats["heartbeat_lateness_ms"]["max"] >= BLOCK_S * 1000 - 2 * HEARTBEAT_MS
            late = [
                e
                for e in logs
                if e["event"] == "heartbeat.late" and e.get("group") == groups["default"]
            ]
            assert late, "no heartbeat.late event for the blocked default-mode member"
            assert late[0]["log_level"] == "warning"
            assert late[0]["lag_ms"] >= BLOCK_S * 1000 - 2 * HEARTBEAT_MS
            assert late[0]["member_id"] == member_id
            assert late[0]["due"] < blocked_until * 1000
            assert not [
                e
                for e in logs
                if e["event"] == "heartbeat.late"
                and e.get("group") == groups["isolated"]
                and e["lag_ms"] >= SESSION_MS / 2
            ]
    finally:
        for watcher in watchers.values():
            watcher.stop()
    for mode, watcher in watchers.items():
        assert watcher.error is None, (mode, watcher.error)
    assert [t for t in threading.enumerate() if t.name.startswith("kgroup-coordinator")] == []


@pytest.mark.parametrize("isolated", [False, True], ids=["default", "isolated"])
async def test_coordinator_request_seam_and_close_leave_nothing_behind(
    kafka_broker: Broker, make_topic: Callable[..., str], unique_group: str, isolated: bool
) -> None:
    """``_coordinator_request`` (the offsets module's door) works from the application's
    loop in both modes, a cancelled request is cancelled cleanly, and close() stops the
    coordinator thread and every task."""
    from kgroup._core._messages import HeartbeatRequest

    topic = make_topic(1)
    cfg = config(kafka_broker, unique_group, topic, isolate_heartbeat=isolated)
    member = GroupMember(cfg)
    await member.start()
    try:
        deadline = time.monotonic() + 30
        while not member.assignment:
            assert time.monotonic() < deadline, "member did not join"
            await member.poll(timeout=0.2)
        generation = member.generation
        request = HeartbeatRequest(
            group_id=unique_group,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=None,
        )
        response = await member._coordinator_request(request, 5_000)
        assert response.error_code == 0
        # Cancel one mid-flight (the caller's cancellation reaches the coordinator loop).
        task = asyncio.ensure_future(member._coordinator_request(request, 5_000))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The member is unharmed: it keeps its membership.
        await member.poll(timeout=0.5)
        assert member.state is MemberState.STABLE
        assert member.generation == generation
        assert member._core_call(lambda core: core.generation) == generation
    finally:
        await member.close()
    assert [t for t in threading.enumerate() if t.name.startswith("kgroup-coordinator")] == []
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("kgroup-")] == []
