"""Fault injection on librdkafka's mock cluster: how kgroup reacts to each coordinator error.

Spec §4.1-§4.5 (error reactions) and §12 scenarios A6-A10, B14-B16, C20-C25, E30-E31.
Every test asserts the *specific* reaction (which request went where and when, which member
id the next JoinGroup carried, which listener callbacks fired, whether the Generation was
kept), not just that the group ends stable:

* request tracking (broker id, API key, receive time) shows what kgroup sent;
* kgroup's structlog events (``kgroup/_log.py``, captured with a receive time) show how the
  member decided; ``member.join_sent`` carries the member id the JoinGroup was sent with;
* the listener events that :class:`MemberRunner` records show what the application saw.

Mock-cluster behaviour these tests rely on (librdkafka 2.16, ``rdkafka_mock_cgrp.c``):

* a pushed error (``push_request_errors``) answers the next request of that API from any
  client; the real request is not processed, so the member is not marked active;
* a rebalance of a non-empty group waits ``session_timeout_ms - 1000`` (5 s here) for the
  members, whoever triggered it; only the first one of an *empty* group uses
  ``group.initial.rebalance.delay.ms``;
* a member that gets UNKNOWN_MEMBER_ID *injected* is not gone on the mock: its old id stays
  in the group (a ghost, possibly elected leader, possibly given partitions) until the mock's
  session timer (checked every second) drops it, which costs one more rebalance;
* heartbeats to a broker that is no longer the coordinator get NOT_COORDINATOR by
  themselves; a broker set down refuses connections (its port stays bound).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import pytest
import structlog

from kgroup import GroupAuthorizationFailed, GroupConfig, GroupMember, MemberState
from kgroup.testing import MockCluster, MockRequest
from kgroup.testing._members import MemberGroup, MemberRunner, covered
from tests.integration.conftest import HEARTBEAT_MS, SESSION_MS, group_config

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
COORDINATOR_APIS = (JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP)

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
GROUP_AUTHORIZATION_FAILED = 30

NAMES = {
    COORDINATOR_LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    NOT_COORDINATOR: "NOT_COORDINATOR",
    ILLEGAL_GENERATION: "ILLEGAL_GENERATION",
    UNKNOWN_MEMBER_ID: "UNKNOWN_MEMBER_ID",
    REBALANCE_IN_PROGRESS: "REBALANCE_IN_PROGRESS",
}

# Join/sync tests: every case costs one or two mock rebalances of SESSION_MS - 1000 each
# and nothing in them depends on the session length, so they use a shorter session.
REJOIN_SESSION_MS = 3_000
# Join/sync tests: a backoff long enough that "retried after retry_backoff_ms" and
# "retried at once" cannot be confused on a loaded machine.
SLOW_BACKOFF_MS = 1_000
# A rebalance on the mock waits SESSION_MS - 1000; the ghost cases add a session expiry
# and a second rebalance. Deadlines are generous multiples of that.
DEADLINE = 60.0


# --- what kgroup logged --------------------------------------------------------------------


def _stamp(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event_dict["at"] = time.monotonic()
    return event_dict


@dataclass
class Logs:
    """kgroup's structlog events, each with ``at`` (time.monotonic() when logged)."""

    entries: list[MutableMapping[str, Any]]

    def find(
        self, event: str, *, since: float = 0.0, **fields: Any
    ) -> list[MutableMapping[str, Any]]:
        return [
            e
            for e in self.entries
            if e["event"] == event
            and e["at"] >= since
            and all(e.get(key) == value for key, value in fields.items())
        ]

    def has(self, event: str, *, since: float = 0.0, **fields: Any) -> bool:
        return bool(self.find(event, since=since, **fields))


@pytest.fixture
def logs() -> Iterator[Logs]:
    with structlog.testing.capture_logs(processors=[_stamp]) as entries:
        yield Logs(entries)


# --- what the mock cluster received --------------------------------------------------------


def coordinator_broker(cluster: MockCluster, since_us: int = 0) -> int:
    """The broker id the group's coordinator requests (JoinGroup, SyncGroup, Heartbeat)
    went to most recently: the coordinator, when the group is stable. Needs request
    tracking on and one group per test."""
    requests = [r for r in cluster.requests(COORDINATOR_APIS) if r.timestamp_us >= since_us]
    assert requests, "no coordinator request tracked yet"
    return requests[-1].broker_id


def now_us() -> int:
    """The clock of MockRequest.timestamp_us (librdkafka's rd_clock: CLOCK_MONOTONIC, µs)."""
    return time.monotonic_ns() // 1_000


def tracked(cluster: MockCluster, *api_keys: int, since_us: int = 0) -> list[MockRequest]:
    return [r for r in cluster.requests(api_keys) if r.timestamp_us >= since_us]


# --- groups -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    generation: int
    member_id: str
    assignment: frozenset[Any]
    events: int
    rebalances: int


def snapshot(runner: MemberRunner) -> Snapshot:
    member = runner.member
    return Snapshot(
        member.generation.generation_id,
        member.member_id,
        member.assignment,
        len(runner.events),
        member.stats().rebalances,
    )


async def stable_group(
    group: MemberGroup, cluster: MockCluster, cfg: GroupConfig, topic: str, partitions: int, n: int
) -> list[MemberRunner]:
    """``n`` members that joined one generation together and cover ``topic``."""
    if n > 1:
        # The first member of an empty group waits this long for the others (else the
        # second one's join costs a full 5 s mock rebalance).
        cluster.set_group_initial_rebalance_delay_ms(1_000)
    runners = [await group.start(cfg) for _ in range(n)]
    await group.wait_until(
        lambda: covered(runners, topic, partitions), timeout=DEADLINE, what=f"{n} stable"
    )
    assert all(r.assignment for r in runners)
    for runner in runners:
        # The mock's quirk (brokers.md): a follower whose SyncGroup arrives after the
        # leader's (a loaded machine) gets INVALID_REQUEST, raised once from poll(); the
        # member then rejoins. Only while the group forms; any other error stays.
        runner.errors[:] = [e for e in runner.errors if MOCK_LATE_SYNC not in str(e)]
    return runners


#: The error a late follower SyncGroup gets from the mock cluster (brokers.md).
MOCK_LATE_SYNC = "SyncGroup failed with INVALID_REQUEST (42)"


def errors_beside_late_syncs(runners: list[MemberRunner]) -> list[list[BaseException]]:
    """Each runner's errors, less the mock's late-SyncGroup quirk: any rebalance of two
    members can end that way on a loaded machine (the follower then rejoins), and Kafka
    answers such a SyncGroup with the assignment. Empty lists when nothing else went wrong."""
    found = [[e for e in r.errors if MOCK_LATE_SYNC not in str(e)] for r in runners]
    return found if any(found) else []


def by_member_id(runners: list[MemberRunner], before: dict[str, Snapshot], member_id: str) -> int:
    """Index of the runner whose member id was ``member_id`` when ``before`` was taken."""
    (index,) = [i for i, r in enumerate(runners) if before[r.name].member_id == member_id]
    return index


def callbacks(runner: MemberRunner, since: int) -> list[str]:
    return [e.callback for e in runner.events[since:]]


# --- 1. E30: coordinator moves while STABLE ------------------------------------------------


async def test_coordinator_move_while_stable_keeps_the_generation(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, logs: Logs
) -> None:
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        runners = await stable_group(group, mock_cluster, cfg, topic, 4, 2)
        old = coordinator_broker(mock_cluster)
        assert all(e["node_id"] == old for e in logs.find("member.coordinator_found"))
        new = next(b for b in mock_cluster.broker_ids if b != old)
        before = {r.name: snapshot(r) for r in runners}
        ids = {before[r.name].member_id for r in runners}

        moved_at, moved_us = time.monotonic(), now_us()
        mock_cluster.set_coordinator(unique_group, new)

        def followed(runner: MemberRunner) -> bool:
            member_id = before[runner.name].member_id
            found = logs.find("member.coordinator_found", since=moved_at, member_id=member_id)
            return bool(found) and any(
                e["at"] > found[-1]["at"]
                for e in logs.find("member.heartbeat_ok", since=moved_at, member_id=member_id)
            )

        await group.wait_until(
            lambda: (
                all(followed(r) for r in runners)
                and len(tracked(mock_cluster, HEARTBEAT, since_us=moved_us)) >= 8
            ),
            timeout=DEADLINE,
            what="both members heartbeating to the new coordinator",
        )

        # The old coordinator answered one heartbeat of each member NOT_COORDINATOR by
        # itself; each member rediscovered once and heartbeats only to the new one since.
        for member_id in ids:
            failed = logs.find("member.heartbeat_failed", since=moved_at, member_id=member_id)
            assert [e["error"] for e in failed] == ["NOT_COORDINATOR (16)"]
            found = logs.find("member.coordinator_found", since=moved_at, member_id=member_id)
            assert [e["node_id"] for e in found] == [new]
        heartbeats = tracked(mock_cluster, HEARTBEAT, since_us=moved_us)
        assert len([r for r in heartbeats if r.broker_id == old]) == len(ids)
        assert {r.broker_id for r in heartbeats} == {old, new}
        assert heartbeats[-1].broker_id == new
        assert len(tracked(mock_cluster, FIND_COORDINATOR, since_us=moved_us)) == len(ids)
        # No rebalance: no JoinGroup/SyncGroup, same Generation and member id, no callback.
        assert tracked(mock_cluster, JOIN_GROUP, SYNC_GROUP, since_us=moved_us) == []
        assert not logs.has("member.join_sent", since=moved_at)
        assert {r.name: snapshot(r) for r in runners} == before
        assert all(r.stable for r in runners)
        assert coordinator_broker(mock_cluster) == new
        assert not errors_beside_late_syncs(runners)


# --- 2. Heartbeat errors (C20, C21, §4.4) --------------------------------------------------


async def inject_heartbeat_error(
    group: MemberGroup,
    cluster: MockCluster,
    logs: Logs,
    runners: list[MemberRunner],
    code: int,
) -> tuple[int, dict[str, Snapshot], float, int]:
    """Push ``code`` for the next Heartbeat; return the index of the member that got it,
    the snapshots from before, and when (monotonic s, tracking µs) it was pushed."""
    before = {r.name: snapshot(r) for r in runners}
    mark, mark_us = time.monotonic(), now_us()
    cluster.push_request_errors(HEARTBEAT, code)
    name = NAMES[code]
    if code == REBALANCE_IN_PROGRESS:
        # Not a failure (§4.4): the first rejoin request after the push is the victim's.
        def hit() -> list[MutableMapping[str, Any]]:
            return logs.find(
                "member.rejoin_requested", since=mark, reason="group is already rebalancing"
            )
    else:

        def hit() -> list[MutableMapping[str, Any]]:
            return [
                e
                for e in logs.find("member.heartbeat_failed", since=mark)
                if e["error"].startswith(name)
            ]

    await group.wait_until(lambda: bool(hit()), timeout=30, what=f"a heartbeat answered {name}")
    victim = by_member_id(runners, before, hit()[0]["member_id"])
    return victim, before, mark, mark_us


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE], ids=NAMES.get)
async def test_heartbeat_coordinator_error_rediscovers_without_rebalance(
    code: int,
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    logs: Logs,
) -> None:
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        runners = await stable_group(group, mock_cluster, cfg, topic, 4, 2)
        coordinator = coordinator_broker(mock_cluster)
        victim, before, mark, mark_us = await inject_heartbeat_error(
            group, mock_cluster, logs, runners, code
        )
        member_id = before[runners[victim].name].member_id
        # Coordinator marked unknown, rediscovered (the same broker: it did not move), and
        # heartbeats resume in the same Generation.
        await group.wait_until(
            lambda: (
                logs.has("member.coordinator_found", since=mark, member_id=member_id)
                and any(
                    e["at"] > logs.find("member.coordinator_found", since=mark)[-1]["at"]
                    for e in logs.find("member.heartbeat_ok", since=mark, member_id=member_id)
                )
            ),
            timeout=30,
            what="rediscovered and heartbeating",
        )
        assert logs.has("member.coordinator_lost", since=mark, member_id=member_id)
        assert tracked(mock_cluster, FIND_COORDINATOR, since_us=mark_us)
        assert {r.broker_id for r in tracked(mock_cluster, HEARTBEAT, since_us=mark_us)} == {
            coordinator
        }
        assert tracked(mock_cluster, JOIN_GROUP, SYNC_GROUP, since_us=mark_us) == []
        assert not logs.has("member.join_sent", since=mark)
        assert not logs.has("member.rejoin_requested", since=mark)
        assert {r.name: snapshot(r) for r in runners} == before
        assert all(r.stable for r in runners)
        assert not errors_beside_late_syncs(runners)


async def test_heartbeat_rebalance_in_progress_rejoins_with_the_same_member_id(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, logs: Logs
) -> None:
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        runners = await stable_group(group, mock_cluster, cfg, topic, 4, 2)
        victim, before, mark, mark_us = await inject_heartbeat_error(
            group, mock_cluster, logs, runners, REBALANCE_IN_PROGRESS
        )
        runner = runners[victim]
        old = before[runner.name]
        await group.wait_until(
            lambda: (
                covered(runners, topic, 4)
                and all(r.member.generation.generation_id > old.generation for r in runners)
            ),
            timeout=DEADLINE,
            what="a new generation, covered",
        )
        # C20: the next JoinGroup comes from the victim, with its member id and the reason.
        joins = logs.find("member.join_sent", since=mark)
        assert joins[0]["member_id"] == old.member_id
        assert joins[0]["reason"] == "group is already rebalancing"
        assert tracked(mock_cluster, JOIN_GROUP, since_us=mark_us)
        assert not any(
            e["error"].startswith("REBALANCE") for e in logs.find("member.heartbeat_failed")
        ), "REBALANCE_IN_PROGRESS counts as a successful heartbeat"
        # Not a reset: the Generation was kept until the rejoin; eager revoke, no lost. The
        # one UNJOINED allowed is the mock's late-SyncGroup quirk (a loaded machine), which
        # makes the follower rejoin and so adds whole revoke/assign rounds.
        unjoined = logs.find("member.state_changed", since=mark, new="UNJOINED")
        assert all(MOCK_LATE_SYNC in e["reason"] for e in unjoined), unjoined
        for r in runners:
            assert r.member.member_id == before[r.name].member_id
            seen = callbacks(r, before[r.name].events)
            rounds = max(1, len(seen) // 2) if unjoined else 1
            assert seen == ["on_partitions_revoked", "on_partitions_assigned"] * rounds, seen
            assert r.events[before[r.name].events].partitions == before[r.name].assignment
        assert not errors_beside_late_syncs(runners)


@pytest.mark.parametrize("code", [ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID], ids=NAMES.get)
async def test_heartbeat_generation_error_reports_lost_and_rejoins(
    code: int,
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    logs: Logs,
) -> None:
    """C21 (and its UNKNOWN_MEMBER_ID twin): the Generation is reset, the owned partitions
    are reported *lost* (not revoked) and the member rejoins, keeping its member id only
    for ILLEGAL_GENERATION."""
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        runners = await stable_group(group, mock_cluster, cfg, topic, 4, 2)
        victim, before, mark, mark_us = await inject_heartbeat_error(
            group, mock_cluster, logs, runners, code
        )
        runner, other = runners[victim], runners[1 - victim]
        old = before[runner.name]
        keeps_id = code == ILLEGAL_GENERATION
        reset = logs.find("member.state_changed", since=mark, new="UNJOINED")
        assert reset and reset[0]["reason"] == f"encountered {NAMES[code]} from Heartbeat response"
        assert reset[0]["member_id"] == (old.member_id if keeps_id else "")
        await group.wait_until(
            lambda: (
                covered(runners, topic, 4)
                and all(r.member.generation.generation_id > old.generation for r in runners)
            ),
            timeout=DEADLINE,
            what="rejoined, covered",
        )
        # The victim: lost (all it owned), then a JoinGroup with the old id or "".
        assert callbacks(runner, old.events)[:2] == [
            "on_partitions_lost",
            "on_partitions_assigned",
        ]
        assert runner.events[old.events].partitions == old.assignment
        joins = [
            e
            for e in logs.find("member.join_sent", since=mark)
            if e["member_id"] in (old.member_id, "")
        ]
        assert joins[0]["member_id"] == (old.member_id if keeps_id else "")
        if keeps_id:
            assert runner.member.member_id == old.member_id
        else:
            assert runner.member.member_id not in ("", old.member_id)
        # The other member only saw a rebalance: revoked (eager), never lost.
        assert "on_partitions_lost" not in callbacks(other, before[other.name].events)
        assert other.member.member_id == before[other.name].member_id
        assert tracked(mock_cluster, JOIN_GROUP, since_us=mark_us)
        assert not errors_beside_late_syncs(runners)


# --- 3. JoinGroup errors (A7-A9, §4.2) -----------------------------------------------------


@dataclass(frozen=True)
class JoinReaction:
    same_member_id: bool  # the retry carries the old member id (else "")
    rediscovers: bool  # coordinator marked unknown, FindCoordinator before the retry
    backs_off: bool  # the retry waits retry_backoff_ms


JOIN_REACTIONS = {
    COORDINATOR_LOAD_IN_PROGRESS: JoinReaction(True, False, True),  # A7
    NOT_COORDINATOR: JoinReaction(True, True, True),  # A8
    COORDINATOR_NOT_AVAILABLE: JoinReaction(True, True, True),  # A8
    REBALANCE_IN_PROGRESS: JoinReaction(True, False, False),
    UNKNOWN_MEMBER_ID: JoinReaction(False, False, False),  # A9
}


@pytest.mark.parametrize("code", list(JOIN_REACTIONS), ids=NAMES.get)
async def test_join_group_error_on_rejoin(
    code: int,
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    logs: Logs,
) -> None:
    """A stable member is told to rejoin (heartbeat REBALANCE_IN_PROGRESS) and its
    JoinGroup, sent with its member id, gets ``code``."""
    expected = JOIN_REACTIONS[code]
    topic = make_topic(3)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(
            mock_cluster,
            unique_group,
            topic,
            session_timeout_ms=REJOIN_SESSION_MS,
            retry_backoff_ms=SLOW_BACKOFF_MS,
            retry_backoff_max_ms=2 * SLOW_BACKOFF_MS,
        )
        (runner,) = await stable_group(group, mock_cluster, cfg, topic, 3, 1)
        old = snapshot(runner)
        mark, mark_us = time.monotonic(), now_us()
        mock_cluster.push_request_errors(JOIN_GROUP, code)
        mock_cluster.push_request_errors(HEARTBEAT, REBALANCE_IN_PROGRESS)
        await group.wait_until(
            lambda: (
                covered([runner], topic, 3)
                and runner.member.generation.generation_id > old.generation
            ),
            timeout=DEADLINE,
            what="rejoined, covered",
        )
        joins = logs.find("member.join_sent", since=mark)
        assert [e["member_id"] for e in joins[:2]] == [
            old.member_id,
            old.member_id if expected.same_member_id else "",
        ]
        requests = tracked(mock_cluster, JOIN_GROUP, FIND_COORDINATOR, since_us=mark_us)
        join_at = [i for i, r in enumerate(requests) if r.api_key == JOIN_GROUP]
        first, second = requests[join_at[0]], requests[join_at[1]]
        between = requests[join_at[0] + 1 : join_at[1]]
        lost_coordinator = logs.has("member.coordinator_lost", since=mark)
        assert lost_coordinator is expected.rediscovers
        assert any(r.api_key == FIND_COORDINATOR for r in between) is expected.rediscovers
        gap_ms = (second.timestamp_us - first.timestamp_us) / 1000
        if expected.backs_off:
            assert gap_ms >= 0.9 * SLOW_BACKOFF_MS, f"retried after {gap_ms:.0f} ms"
        else:
            assert gap_ms < 0.5 * SLOW_BACKOFF_MS, f"retried after {gap_ms:.0f} ms"
        # Eager: the rejoin revoked everything once; the failed JoinGroup changed nothing
        # the application sees.
        assert callbacks(runner, old.events) == ["on_partitions_revoked", "on_partitions_assigned"]
        if expected.same_member_id:
            assert runner.member.member_id == old.member_id
        else:
            assert runner.member.member_id not in ("", old.member_id)
        assert runner.errors == []


# --- 4. SyncGroup errors (B14, B15, §4.3) --------------------------------------------------


@dataclass(frozen=True)
class SyncReaction:
    same_member_id: bool  # the next JoinGroup carries the member id (else "")
    resets: bool  # the Generation is reset (state UNJOINED)
    rediscovers: bool
    backs_off: bool


SYNC_REACTIONS = {
    REBALANCE_IN_PROGRESS: SyncReaction(True, False, False, False),  # B14
    ILLEGAL_GENERATION: SyncReaction(True, True, False, False),  # B15
    UNKNOWN_MEMBER_ID: SyncReaction(False, True, False, False),  # B15
    NOT_COORDINATOR: SyncReaction(True, False, True, True),
}


@pytest.mark.parametrize("code", list(SYNC_REACTIONS), ids=NAMES.get)
async def test_sync_group_error_restarts_from_join_group(
    code: int,
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    logs: Logs,
) -> None:
    """The first SyncGroup of a new member gets ``code``; the member restarts from
    JoinGroup and ends stable without the application seeing anything but one assign."""
    expected = SYNC_REACTIONS[code]
    topic = make_topic(3)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(SYNC_GROUP, code)
    async with MemberGroup() as group:
        cfg = group_config(
            mock_cluster,
            unique_group,
            topic,
            session_timeout_ms=REJOIN_SESSION_MS,
            retry_backoff_ms=SLOW_BACKOFF_MS,
            retry_backoff_max_ms=2 * SLOW_BACKOFF_MS,
        )
        runner = await group.start(cfg)
        await group.wait_until(lambda: covered([runner], topic, 3), timeout=DEADLINE, what="stable")
        joined = logs.find("member.joined")
        first_id = joined[0]["member_id"]
        assert first_id
        joins = logs.find("member.join_sent")
        assert [e["member_id"] for e in joins[:2]] == [
            "",
            first_id if expected.same_member_id else "",
        ]
        resets = [e for e in logs.find("member.state_changed") if e["new"] == "UNJOINED"]
        assert bool(resets) is expected.resets
        if expected.resets:
            assert resets[0]["reason"] == f"SyncGroup: {NAMES[code]}"
        assert logs.has("member.coordinator_lost") is expected.rediscovers
        # After the failed SyncGroup the member restarts from JoinGroup, never SyncGroup.
        requests = tracked(mock_cluster, FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP)
        sync_at = next(i for i, r in enumerate(requests) if r.api_key == SYNC_GROUP)
        after = [r for r in requests[sync_at + 1 :] if r.api_key != FIND_COORDINATOR]
        assert after[0].api_key == JOIN_GROUP
        between = requests[sync_at + 1 : requests.index(after[0])]
        assert any(r.api_key == FIND_COORDINATOR for r in between) is expected.rediscovers
        gap_ms = (after[0].timestamp_us - requests[sync_at].timestamp_us) / 1000
        if expected.backs_off:
            assert gap_ms >= 0.9 * SLOW_BACKOFF_MS, f"rejoined after {gap_ms:.0f} ms"
        else:
            assert gap_ms < 0.5 * SLOW_BACKOFF_MS, f"rejoined after {gap_ms:.0f} ms"
        assert [e.callback for e in runner.events] == ["on_partitions_assigned"]
        if expected.same_member_id:
            assert runner.member.member_id == first_id
        else:
            assert runner.member.member_id not in ("", first_id)
        assert runner.errors == []


# --- 5. GROUP_AUTHORIZATION_FAILED (A6, A10) -----------------------------------------------


async def test_join_group_authorization_failure_is_raised_from_poll(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(JOIN_GROUP, GROUP_AUTHORIZATION_FAILED)
    async with GroupMember(group_config(mock_cluster, unique_group, topic)) as member:
        with pytest.raises(GroupAuthorizationFailed) as raised:
            await member.poll(timeout=30)
        assert raised.value.api == "JoinGroup"
        assert member.state is MemberState.UNJOINED
        assert len(tracked(mock_cluster, JOIN_GROUP)) == 1
        # A10: nothing more is sent until the application polls again.
        await asyncio.sleep(0.3)
        assert len(tracked(mock_cluster, JOIN_GROUP)) == 1
        assignment = await member.poll(timeout=30)  # the pushed error is used up
        assert member.state is MemberState.STABLE  # type: ignore[comparison-overlap]
        assert len(assignment) == 2


async def test_find_coordinator_authorization_failure_is_raised_without_join(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(FIND_COORDINATOR, GROUP_AUTHORIZATION_FAILED)
    async with GroupMember(group_config(mock_cluster, unique_group, topic)) as member:
        with pytest.raises(GroupAuthorizationFailed) as raised:
            await member.poll(timeout=30)
        assert raised.value.api == "FindCoordinator"
        await asyncio.sleep(0.3)
        # A6: no JoinGroup attempt (nor any other coordinator request).
        assert len(tracked(mock_cluster, FIND_COORDINATOR)) == 1
        assert tracked(mock_cluster, *COORDINATOR_APIS) == []
        assert member.state is MemberState.UNJOINED
        assert len(await member.poll(timeout=30)) == 2  # polling again recovers
        assert member.state is MemberState.STABLE  # type: ignore[comparison-overlap]


# --- 6. The coordinator broker goes down and comes back (C24, C25, E31-ish, E32) ----------


async def test_short_coordinator_outage_keeps_the_generation(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, logs: Logs
) -> None:
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        runners = await stable_group(group, mock_cluster, cfg, topic, 4, 2)
        coordinator = coordinator_broker(mock_cluster)
        before = {r.name: snapshot(r) for r in runners}
        ids = [before[r.name].member_id for r in runners]
        down_at = time.monotonic()
        mock_cluster.broker_down(coordinator)
        # Down until every member has noticed and failed to reconnect at least twice.
        await group.wait_until(
            lambda: all(
                logs.has("member.coordinator_lost", since=down_at, member_id=m)
                and len(logs.find("member.coordinator_lookup_failed", since=down_at, member_id=m))
                >= 2
                for m in ids
            ),
            timeout=30,
            what="both members failing to reach the coordinator",
        )
        # While it is down the members keep their Generation: no reset, no callback.
        assert {r.name: snapshot(r) for r in runners} == before
        assert all(r.member.state is MemberState.STABLE for r in runners)
        up_at, up_us = time.monotonic(), now_us()
        mock_cluster.broker_up(coordinator)
        assert up_at - down_at < SESSION_MS / 1000 - 1, "the outage must stay below the session"
        await group.wait_until(
            lambda: all(logs.has("member.heartbeat_ok", since=up_at, member_id=m) for m in ids),
            timeout=30,
            what="heartbeats after the broker came back",
        )
        assert {r.broker_id for r in tracked(mock_cluster, HEARTBEAT, since_us=up_us)} == {
            coordinator
        }
        assert tracked(mock_cluster, JOIN_GROUP, SYNC_GROUP, since_us=up_us) == []
        assert not logs.has("member.join_sent", since=down_at)
        assert {r.name: snapshot(r) for r in runners} == before
        assert covered(runners, topic, 4)
        assert not errors_beside_late_syncs(runners)


async def test_coordinator_outage_longer_than_the_session_loses_and_rejoins(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, logs: Logs
) -> None:
    """Inherently slow (~20 s): the outage must outlast the 6 s session plus the mock's
    1 s eviction check, and the rejoin costs a mock rebalance."""
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        runners = await stable_group(group, mock_cluster, cfg, topic, 4, 2)
        coordinator = coordinator_broker(mock_cluster)
        before = {r.name: snapshot(r) for r in runners}
        ids = [before[r.name].member_id for r in runners]
        await group.wait_until(
            lambda: all(logs.has("member.heartbeat_ok", member_id=m) for m in ids),
            timeout=30,
            what="a heartbeat from each member",
        )
        last_ok = max(e["at"] for e in logs.find("member.heartbeat_ok"))
        down_at = time.monotonic()
        mock_cluster.broker_down(coordinator)
        # Down until the mock's session timer (1 s period) must have evicted both.
        evicted_by = last_ok + SESSION_MS / 1000 + 1.5
        await group.wait_until(
            lambda: time.monotonic() > evicted_by, timeout=30, what="outage past the session"
        )
        # kgroup's lease (README, "The lease"; a deviation from Java, which keeps the
        # partitions until the coordinator answers again): each member stopped trusting its
        # assignment no later than its last acknowledged heartbeat's send time plus the
        # session, before the mock could evict it, and reported the partitions lost. It
        # keeps its member id for the rejoin.
        await group.wait_until(
            lambda: all(callbacks(r, before[r.name].events) for r in runners),
            timeout=30,
            what="lost reported during the outage",
        )
        for r in runners:
            old = before[r.name]
            (expired,) = logs.find("member.lease_expired", since=down_at, member_id=old.member_id)
            assert expired["deadline"] / 1000 <= last_ok + SESSION_MS / 1000
            assert callbacks(r, old.events) == ["on_partitions_lost"]
            assert r.member.member_id == old.member_id and not r.assignment
        up_us = now_us()
        mock_cluster.broker_up(coordinator)
        await group.wait_until(
            lambda: covered(runners, topic, 4),
            timeout=DEADLINE,
            what="both rejoined",  # with the old member id if the mock still knew it
        )
        for r in runners:
            old = before[r.name]
            # E32: the partitions were reported lost (never revoked), then the member
            # rejoined.
            assert callbacks(r, old.events)[:2] == ["on_partitions_lost", "on_partitions_assigned"]
            assert r.events[old.events].partitions == old.assignment
        assert tracked(mock_cluster, JOIN_GROUP, since_us=up_us)
        assert not errors_beside_late_syncs(runners)


# --- 7. Heartbeats failing retriably with the coordinator known (C23, C25, E31) -------------


async def test_heartbeat_load_in_progress_backs_off_and_keeps_membership(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, logs: Logs
) -> None:
    """E31 for heartbeats, C23: a coordinator still loading answers
    COORDINATOR_LOAD_IN_PROGRESS; each failure brings the next heartbeat forward to the
    exponential backoff (100, 200, 400, 800 ms ±20 %), the coordinator stays known, and
    the first success restores the interval. No rebalance."""
    topic = make_topic(2)
    failures = 5
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        (runner,) = await stable_group(group, mock_cluster, cfg, topic, 2, 1)
        before = snapshot(runner)
        mark, mark_us = time.monotonic(), now_us()
        mock_cluster.push_request_errors(HEARTBEAT, *[COORDINATOR_LOAD_IN_PROGRESS] * failures)

        def failed() -> list[MutableMapping[str, Any]]:
            return logs.find("member.heartbeat_failed", since=mark)

        await group.wait_until(
            lambda: (
                len(failed()) == failures
                and len(logs.find("member.heartbeat_ok", since=failed()[-1]["at"])) >= 2
            ),
            timeout=30,
            what="five failed heartbeats, then two good ones",
        )
        assert all(e["error"].startswith("COORDINATOR_LOAD_IN_PROGRESS") for e in failed())
        beats = tracked(mock_cluster, HEARTBEAT, since_us=mark_us)
        gaps = [(b.timestamp_us - a.timestamp_us) / 1000 for a, b in itertools.pairwise(beats)]
        retries, interval = gaps[:failures], gaps[failures]
        assert retries[0] < 0.6 * HEARTBEAT_MS, f"first retry after {retries[0]:.0f} ms"
        assert retries[3] > retries[0] * 3, f"no exponential backoff: {retries}"
        assert max(retries) < 1_000 * 1.2, f"backoff above retry_backoff_max_ms: {retries}"
        assert interval > 0.8 * HEARTBEAT_MS, f"interval not restored: {interval:.0f} ms"
        # The coordinator stayed known: no rediscovery, no rejoin, nothing for the app.
        assert not logs.has("member.coordinator_lost", since=mark)
        assert tracked(mock_cluster, FIND_COORDINATOR, JOIN_GROUP, since_us=mark_us) == []
        assert snapshot(runner) == before
        assert runner.stable and runner.errors == []


async def test_heartbeats_failing_past_the_session_rediscover_then_lose_the_generation(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, logs: Logs
) -> None:
    """C25, then E32: every heartbeat fails retriably (COORDINATOR_LOAD_IN_PROGRESS) for
    longer than the session while the coordinator is known. The client-side session timer
    marks the coordinator unknown, not a leave: the Generation is kept. Meanwhile the mock
    evicted the member, so once heartbeats get through again the answer is
    UNKNOWN_MEMBER_ID: partitions lost, rejoin as a new member. Inherently slow (~15 s)."""
    topic = make_topic(2)
    mock_cluster.start_request_tracking()
    async with MemberGroup() as group:
        cfg = group_config(mock_cluster, unique_group, topic)
        (runner,) = await stable_group(group, mock_cluster, cfg, topic, 2, 1)
        await group.wait_until(
            lambda: logs.has("member.heartbeat_ok"), timeout=30, what="a heartbeat"
        )
        before = snapshot(runner)
        mark = time.monotonic()
        mock_cluster.push_request_errors(HEARTBEAT, *[COORDINATOR_LOAD_IN_PROGRESS] * 100)
        last_ok = max(e["at"] for e in logs.find("member.heartbeat_ok"))
        session_lost = "session timed out without receiving a heartbeat response"
        await group.wait_until(
            lambda: logs.has("member.coordinator_lost", since=mark, reason=session_lost),
            timeout=30,
            what="client-side session expiry",
        )
        expired_at = logs.find("member.coordinator_lost", since=mark, reason=session_lost)[0]
        assert expired_at["at"] - last_ok >= 0.95 * SESSION_MS / 1000
        assert [e["reason"] for e in logs.find("member.coordinator_lost", since=mark)] == [
            session_lost
        ], "the coordinator stayed known until the session timer fired"
        # C25: not a leave, not a reset of the member id. kgroup's lease (README, "The
        # lease"; Java keeps the partitions here) lapsed at the same moment: the partitions
        # are reported lost at the next poll, before the mock can evict the member.
        await group.wait_until(
            lambda: bool(callbacks(runner, before.events)), timeout=30, what="lost reported"
        )
        (expired,) = logs.find("member.lease_expired", since=mark)
        assert expired["deadline"] / 1000 <= last_ok + SESSION_MS / 1000
        assert callbacks(runner, before.events) == ["on_partitions_lost"]
        assert runner.member.member_id == before.member_id
        assert tracked(mock_cluster, LEAVE_GROUP) == []
        # Let the mock's session timer (1 s period) evict the member, then let heartbeats
        # through again.
        evicted_by = last_ok + SESSION_MS / 1000 + 1.5
        await group.wait_until(
            lambda: time.monotonic() > evicted_by, timeout=30, what="mock-side eviction"
        )
        mock_cluster.clear_request_errors(HEARTBEAT)
        await group.wait_until(
            lambda: covered([runner], topic, 2),
            timeout=DEADLINE,
            what="rejoined",  # with the old member id if the mock still knew it
        )
        assert callbacks(runner, before.events) == ["on_partitions_lost", "on_partitions_assigned"]
        assert runner.events[before.events].partitions == before.assignment
        assert runner.errors == []


# --- the first join: every retriable Join/Sync answer is retried -----------------------------


@pytest.mark.parametrize(
    ("api", "code"),
    [
        (JOIN_GROUP, COORDINATOR_LOAD_IN_PROGRESS),
        (JOIN_GROUP, NOT_COORDINATOR),
        (JOIN_GROUP, COORDINATOR_NOT_AVAILABLE),
        (JOIN_GROUP, REBALANCE_IN_PROGRESS),
        (JOIN_GROUP, UNKNOWN_MEMBER_ID),
        (SYNC_GROUP, REBALANCE_IN_PROGRESS),
        (SYNC_GROUP, ILLEGAL_GENERATION),
        (SYNC_GROUP, UNKNOWN_MEMBER_ID),
        (SYNC_GROUP, NOT_COORDINATOR),
    ],
    ids=lambda v: NAMES.get(v, {JOIN_GROUP: "JoinGroup", SYNC_GROUP: "SyncGroup"}.get(v, str(v))),
)
async def test_errors_on_the_first_join_are_retried(
    mock_cluster: MockCluster,
    make_topic: Callable[..., str],
    unique_group: str,
    api: int,
    code: int,
) -> None:
    """§4.2/§4.3, A7-A9, B14-B15 on a member's first join: the failed attempt is retried
    (rediscovering the coordinator where the error says so); poll() never sees the error."""
    topic = make_topic(4)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(api, code)
    async with MemberGroup() as group:
        (member,) = await stable_group(
            group, mock_cluster, group_config(mock_cluster, unique_group, topic), topic, 4, 1
        )
        assert len(tracked(mock_cluster, JOIN_GROUP)) >= 2  # the failed attempt + a retry
        if code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
            assert len(tracked(mock_cluster, FIND_COORDINATOR)) >= 2  # rediscovered
        assert not member.errors
