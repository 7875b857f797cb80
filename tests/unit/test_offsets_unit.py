"""Spec §12 scenarios F34-F40 and the error tables of §4.6/§4.7, on the sans-I/O core.

The core decisions (``kgroup._core._offsets``) run against a real :class:`MemberCore` in the
``Harness`` of ``conftest.py``. The retry loops of ``kgroup._runtime._offsets`` run in a real
:class:`GroupMember` (``ScriptedMember``) on the harness's core, whose coordinator is a
scripted ``MockTransport``, on the harness's virtual clock, so that deadlines and backoffs
are exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest

from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._member import AwaitJoin
from kgroup._core._messages import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchResponse,
)
from kgroup._core._offsets import (
    Done,
    Fail,
    OffsetAndMetadata,
    Retry,
    commit_request,
    fetch_request,
    on_commit_failed,
    on_commit_response,
    on_fetch_response,
)
from kgroup._core._state import Generation, MemberState
from kgroup._errors import (
    CommitFailed,
    CoordinatorError,
    ErrorCode,
    FencedInstanceId,
    GroupAuthorizationFailed,
    OffsetsError,
    RebalanceInProgress,
    TopicAuthorizationFailed,
)
from kgroup._runtime._member import GroupMember
from kgroup._runtime._seam import LoopSeam
from kgroup._runtime._shared import Lifecycle
from kgroup.testing import MockTransport
from kgroup.testing.messages import FindCoordinatorRequest

E = ErrorCode
S = MemberState
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def stable(make_harness: Callable[..., Any], generation: int = 5, **config: Any) -> Any:
    h = make_harness(**config)
    h.stable("m-1", generation=generation, owned=h.tps("t", 0, 1))
    return h


def commit(h: Any, offsets: dict[TopicPartition, int] | None = None) -> OffsetCommitRequest:
    request = commit_request(h.core, offsets or {T0: 10})
    assert isinstance(request, OffsetCommitRequest)
    return request


def answer(*codes: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(results=tuple(("t", p, code) for p, code in enumerate(codes)))


def start_rebalance(h: Any) -> None:
    """STABLE -> PREPARING_REBALANCE: the pre-join hook, then JoinGroup sent."""
    h.core.request_rejoin("test")
    h.prepare(lost=False)
    h.send_join()
    assert h.state is S.PREPARING_REBALANCE


# -- the request and its pre-checks (§4.6) ------------------------------------------------------


def test_commit_request_carries_generation_member_and_instance_id(make_harness) -> None:
    h = stable(make_harness, group_instance_id="i-1")
    request = commit(h, {T0: 10, T1: 11})
    assert (request.generation_id, request.member_id, request.group_instance_id) == (
        5,
        "m-1",
        "i-1",
    )
    assert [(p.topic, p.partition, p.offset) for p in request.partitions] == [
        ("t", 0, 10),
        ("t", 1, 11),
    ]


def test_empty_commit_completes_locally(make_harness) -> None:
    assert isinstance(commit_request(stable(make_harness).core, {}), Done)


@pytest.mark.parametrize("bad", [-1, 2**63])
def test_offset_out_of_range_is_an_argument_error(make_harness, bad: int) -> None:
    with pytest.raises(ValueError, match="offset for t-0"):
        commit_request(stable(make_harness).core, {T0: bad})


def test_commit_outside_a_generation_fails_without_sending(make_harness) -> None:
    h = make_harness()
    with pytest.raises(CommitFailed, match="not part of an active generation"):
        commit_request(h.core, {T0: 1})


def test_f35_commit_while_rebalancing_fails_locally(make_harness) -> None:
    """F35. PREPARING_REBALANCE: RebalanceInProgress, and no OffsetCommit is built."""
    h = stable(make_harness)
    start_rebalance(h)
    with pytest.raises(RebalanceInProgress, match="call poll"):
        commit_request(h.core, {T0: 1})


def test_commit_from_the_revoke_hook_uses_the_generation_still_held(make_harness) -> None:
    """§9.2: the eager pre-join hook runs while STABLE, before JoinGroup: a commit made in
    it is sent under the generation the member still holds."""
    h = stable(make_harness)
    h.core.request_rejoin("a new member joined")
    h.prepare(lost=False)  # the revoke callback runs now
    request = commit(h)
    assert h.state is S.STABLE and request.generation_id == 5


# -- the answers (§4.6 per-partition table) -----------------------------------------------------


def test_commit_success(make_harness) -> None:
    h = stable(make_harness)
    assert isinstance(on_commit_response(h.core, h.core.generation, answer(0, 0)), Done)


def test_f34_rebalance_in_progress_answer(make_harness) -> None:
    """F34. REBALANCE_IN_PROGRESS: RebalanceInProgress (not CommitFailed), rejoin needed,
    the generation kept; a commit after the next completed rebalance succeeds."""
    h = stable(make_harness)
    sent = h.core.generation
    commit(h)
    verdict = on_commit_response(h.core, sent, answer(E.REBALANCE_IN_PROGRESS))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, RebalanceInProgress)
    assert h.core.rejoin_needed and h.core.generation == sent
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=6, member_id="m-1", leader="l", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    h.complete()
    assert h.state is S.STABLE
    request = commit(h)
    assert request.generation_id == 6
    assert isinstance(on_commit_response(h.core, h.core.generation, answer(0)), Done)


def test_f36_illegal_generation_resets_keeping_the_member_id(make_harness) -> None:
    """F36. ILLEGAL_GENERATION with the generation unchanged: CommitFailed, the generation
    reset with the member id kept, and the next poll rejoins with that member id."""
    h = stable(make_harness)
    sent = h.core.generation
    verdict = on_commit_response(h.core, sent, answer(E.ILLEGAL_GENERATION))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, CommitFailed)
    assert h.core.generation == Generation(-1, "m-1", None)
    h.prepare(lost=True)
    assert h.send_join().member_id == "m-1"


def test_unknown_member_id_resets_and_forgets_the_member_id(make_harness) -> None:
    h = stable(make_harness)
    verdict = on_commit_response(h.core, h.core.generation, answer(E.UNKNOWN_MEMBER_ID))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, CommitFailed)
    assert h.core.generation.member_id == "" and h.core.generation.is_reset


def test_f37_error_for_an_earlier_generation_while_rejoining(make_harness) -> None:
    """F37. A commit sent under generation 5; a heartbeat ILLEGAL_GENERATION resets it and a
    new JoinGroup is in flight; the commit's UNKNOWN_MEMBER_ID answer gives
    RebalanceInProgress and leaves the join and its member id alone."""
    h = stable(make_harness)
    sent = h.core.generation
    commit(h)
    h.at(3_000)
    beat = h.hb_send()
    h.hb_respond(beat, E.ILLEGAL_GENERATION)
    h.prepare(lost=True)
    join = h.send_join()
    assert h.state is S.PREPARING_REBALANCE and join.member_id == "m-1"
    verdict = on_commit_response(h.core, sent, answer(E.UNKNOWN_MEMBER_ID))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, RebalanceInProgress)
    assert h.core.generation.member_id == "m-1"
    assert isinstance(h.action(), AwaitJoin)


def test_error_for_an_earlier_generation_when_stable_again_is_commit_failed(
    make_harness,
) -> None:
    """The stale rule (§2.5): an ILLEGAL_GENERATION about generation 5, arriving once the
    member is STABLE in generation 6, fails the commit but does not reset generation 6."""
    h = stable(make_harness)
    sent = h.core.generation
    h.core.request_rejoin("test")
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=6, member_id="m-1", leader="l", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    h.complete()
    verdict = on_commit_response(h.core, sent, answer(E.ILLEGAL_GENERATION))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, CommitFailed)
    assert h.core.generation.generation_id == 6 and h.state is S.STABLE


def test_f38_not_coordinator_marks_the_coordinator_unknown(make_harness) -> None:
    """F38 (core part). NOT_COORDINATOR: retriable, and the coordinator is forgotten."""
    h = stable(make_harness)
    verdict = on_commit_response(h.core, h.core.generation, answer(E.NOT_COORDINATOR))
    assert isinstance(verdict, Retry) and verdict.coordinator_lost
    assert h.core.coordinator is None
    assert h.core.generation.generation_id == 5  # membership untouched


@pytest.mark.parametrize(
    ("code", "lost"),
    [
        (E.COORDINATOR_LOAD_IN_PROGRESS, False),
        (E.UNKNOWN_TOPIC_OR_PARTITION, False),
        (E.COORDINATOR_NOT_AVAILABLE, True),
        (E.REQUEST_TIMED_OUT, True),
    ],
)
def test_retriable_commit_errors(make_harness, code: int, lost: bool) -> None:
    h = stable(make_harness)
    verdict = on_commit_response(h.core, h.core.generation, answer(0, code))
    assert isinstance(verdict, Retry) and verdict.coordinator_lost is lost
    assert (h.core.coordinator is None) is lost


def test_transport_failure_is_retriable_and_forgets_the_coordinator(make_harness) -> None:
    h = stable(make_harness)
    verdict = on_commit_failed(h.core, "connection reset")
    assert isinstance(verdict, Retry) and verdict.coordinator_lost
    assert h.core.coordinator is None


def test_group_authorization_failed_is_fatal(make_harness) -> None:
    h = stable(make_harness)
    verdict = on_commit_response(h.core, h.core.generation, answer(E.GROUP_AUTHORIZATION_FAILED))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, GroupAuthorizationFailed)
    assert h.core.fatal is verdict.error  # poll() raises it too


def test_topic_authorization_failures_are_collected(make_harness) -> None:
    h = stable(make_harness)
    response = OffsetCommitResponse(
        results=(("a", 0, 0), ("b", 0, E.TOPIC_AUTHORIZATION_FAILED), ("c", 1, 29))
    )
    verdict = on_commit_response(h.core, h.core.generation, response)
    assert isinstance(verdict, Fail) and isinstance(verdict.error, TopicAuthorizationFailed)
    assert verdict.error.topics == ("b", "c")


@pytest.mark.parametrize(
    "code", [E.OFFSET_METADATA_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE, E.UNKNOWN_SERVER_ERROR, 999]
)
def test_non_retriable_commit_errors(make_harness, code: int) -> None:
    h = stable(make_harness)
    verdict = on_commit_response(h.core, h.core.generation, answer(code))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, OffsetsError)
    assert verdict.error.error_code == code and h.core.generation.generation_id == 5


def test_fenced_instance_id_same_generation_is_fatal(make_harness) -> None:
    h = stable(make_harness, group_instance_id="i-1")
    verdict = on_commit_response(h.core, h.core.generation, answer(E.FENCED_INSTANCE_ID))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, FencedInstanceId)
    assert h.core.fatal is verdict.error


def test_fenced_instance_id_for_an_earlier_generation(make_harness) -> None:
    """Generation changed (a heartbeat reset it) and a JoinGroup is in flight: the fencing
    is about the old generation, so it is RebalanceInProgress, not fatal."""
    h = stable(make_harness, group_instance_id="i-1")
    sent = h.core.generation
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.ILLEGAL_GENERATION)
    h.prepare(lost=True)
    h.send_join()
    verdict = on_commit_response(h.core, sent, answer(E.FENCED_INSTANCE_ID))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, RebalanceInProgress)
    assert h.core.fatal is None


# -- OffsetFetch (§4.7) -------------------------------------------------------------------------


def fetched(*parts: tuple[int, int, int], error: int = 0) -> OffsetFetchResponse:
    return OffsetFetchResponse(
        error_code=error,
        partitions=tuple(
            FetchedOffset(topic="t", partition=p, offset=o, metadata="m", error_code=c)
            for p, o, c in parts
        ),
    )


def test_fetch_request_deduplicates(make_harness) -> None:
    h = stable(make_harness)
    assert fetch_request(h.core, [T0, T1, T0]).partitions == (("t", 0), ("t", 1))


def test_fetch_answer_minus_one_means_no_committed_offset(make_harness) -> None:
    h = stable(make_harness)
    verdict, result = on_fetch_response(h.core, fetched((0, 12, 0), (1, -1, 0)))
    assert isinstance(verdict, Done)
    assert result == {T0: OffsetAndMetadata(12, "m", -1), T1: None}


@pytest.mark.parametrize(
    ("code", "kind", "lost"),
    [
        (E.NOT_COORDINATOR, Retry, True),
        (E.COORDINATOR_NOT_AVAILABLE, Retry, True),
        (E.COORDINATOR_LOAD_IN_PROGRESS, Retry, False),
        (E.GROUP_AUTHORIZATION_FAILED, Fail, False),
        (E.INVALID_REQUEST, Fail, False),
    ],
)
def test_fetch_group_level_errors(make_harness, code: int, kind: type, lost: bool) -> None:
    h = stable(make_harness)
    verdict, result = on_fetch_response(h.core, fetched(error=code))
    assert isinstance(verdict, kind) and result == {}
    assert (h.core.coordinator is None) is lost
    if code == E.GROUP_AUTHORIZATION_FAILED:
        assert isinstance(verdict, Fail) and h.core.fatal is verdict.error
    elif kind is Fail:
        assert isinstance(verdict, Fail) and isinstance(verdict.error, OffsetsError)


def test_fetch_partition_errors(make_harness) -> None:
    h = stable(make_harness)
    verdict, _ = on_fetch_response(h.core, fetched((0, -1, E.UNKNOWN_TOPIC_OR_PARTITION)))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, OffsetsError)
    verdict, _ = on_fetch_response(h.core, fetched((0, -1, E.TOPIC_AUTHORIZATION_FAILED)))
    assert isinstance(verdict, Fail) and isinstance(verdict.error, TopicAuthorizationFailed)
    verdict, _ = on_fetch_response(h.core, fetched((0, -1, E.UNSTABLE_OFFSET_COMMIT)))
    assert isinstance(verdict, Retry)


# -- the runtime retry loops, on a virtual clock --------------------------------------------------


class ScriptedMember:
    """A real :class:`GroupMember` on the harness's core and clock, whose coordinator is a
    :class:`MockTransport` that answers with ``answers`` in order (an exception is raised
    as the transport's failure). ``sent`` records ``(time, request)``; ``lookups`` counts
    the FindCoordinator requests."""

    def __init__(self, h: Any, answers: list[Any]) -> None:
        self.h = h
        self.answers = answers
        self.sent: list[tuple[float, Any]] = []
        self.lookups = 0
        self.member = GroupMember(
            h.config, clock=lambda: h.now / 1000.0, transport=MockTransport(self._answer)
        )
        # Started on the harness's core (GroupMember.start would make its own), with no
        # heartbeat task: the test drives everything else by hand.
        shared = self.member._shared
        shared.core = h.core
        shared.seam = LoopSeam(asyncio.get_running_loop(), None)
        shared.lifecycle = Lifecycle.OPEN

    def _answer(self, request: Any) -> Any:
        if isinstance(request, FindCoordinatorRequest):
            self.lookups += 1
            return None  # the transport's own coordinator
        self.sent.append((self.h.now, request))
        answer = self.answers.pop(0) if self.answers else self.answers_default()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def answers_default(self) -> Any:
        raise AssertionError("no scripted answer left")


@pytest.fixture
def virtual_sleep(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], None]:
    holder: dict[str, Any] = {}
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float, *args: Any) -> None:
        if "h" in holder:
            holder["h"].advance(delay * 1000.0)
        await real_sleep(0)

    monkeypatch.setattr("kgroup._runtime._offsets.asyncio.sleep", fake_sleep)
    return lambda h: holder.__setitem__("h", h)


async def test_f38_commit_retries_after_not_coordinator_until_it_succeeds(
    make_harness, virtual_sleep
) -> None:
    """F38. NOT_COORDINATOR: the coordinator is marked unknown, rediscovered, and the
    commit is retried with exponential backoff; then it succeeds."""
    h = stable(make_harness, retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    virtual_sleep(h)
    member = ScriptedMember(
        h, [answer(E.NOT_COORDINATOR), CoordinatorError("reset"), answer(E.NOT_COORDINATOR)]
    )
    member.answers.append(answer(0))
    await member.member.commit_offsets({T0: 10})
    times = [t for t, _ in member.sent]
    assert len(times) == 4 and member.lookups == 3
    gaps = [b - a for a, b in pairwise(times)]
    assert gaps[0] < gaps[1] < gaps[2]  # exponential: ~100, ~200, ~400 ms
    assert all(r.generation_id == 5 for _, r in member.sent)


async def test_f38_commit_gives_up_at_its_deadline(make_harness, virtual_sleep) -> None:
    h = stable(make_harness, retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    virtual_sleep(h)
    member = ScriptedMember(h, [])
    member.answers_default = lambda: answer(E.COORDINATOR_NOT_AVAILABLE)  # type: ignore[method-assign]
    with pytest.raises(OffsetsError, match="did not succeed within 5000 ms"):
        await member.member.commit_offsets({T0: 10}, timeout=5.0)
    assert member.sent[-1][0] <= 5_000 and h.now <= 5_000 + 1


async def test_f39_commit_bounded_by_its_timeout_then_the_caller_proceeds(
    make_harness, virtual_sleep
) -> None:
    """F39. Every OffsetCommit answered COORDINATOR_LOAD_IN_PROGRESS: a pre-join commit given
    max_poll_interval as its timeout retries until then and fails, and the join goes on."""
    h = stable(make_harness, max_poll_interval_ms=20_000, retry_backoff_max_ms=1_000)
    virtual_sleep(h)
    member = ScriptedMember(h, [])
    member.answers_default = lambda: answer(E.COORDINATOR_LOAD_IN_PROGRESS)  # type: ignore[method-assign]
    h.core.request_rejoin("a new member joined")
    h.prepare(lost=False)
    with pytest.raises(OffsetsError):
        await member.member.commit_offsets({T0: 10}, timeout=20.0)
    assert 19_000 <= h.now <= 20_001 and len(member.sent) > 10
    h.send_join()  # the rebalance proceeds
    assert h.state is S.PREPARING_REBALANCE


async def test_f40_fetch_retries_unstable_offset_commit(make_harness, virtual_sleep) -> None:
    """F40. UNSTABLE_OFFSET_COMMIT: retried with backoff until a stable answer."""
    h = stable(make_harness)
    virtual_sleep(h)
    unstable = fetched((0, -1, E.UNSTABLE_OFFSET_COMMIT))
    member = ScriptedMember(h, [unstable, unstable, fetched((0, 77, 0))])
    got = await member.member.fetch_committed([T0])
    assert got == {T0: OffsetAndMetadata(77, "m", -1)}
    assert len(member.sent) == 3 and member.sent[-1][0] > member.sent[0][0]


async def test_f40_fetch_gives_up_at_its_deadline(make_harness, virtual_sleep) -> None:
    h = stable(make_harness)
    virtual_sleep(h)
    member = ScriptedMember(h, [])
    member.answers_default = lambda: fetched((0, -1, E.UNSTABLE_OFFSET_COMMIT))  # type: ignore[method-assign]
    with pytest.raises(OffsetsError, match="UNSTABLE_OFFSET_COMMIT"):
        await member.member.fetch_committed([T0], timeout=3.0)
    assert h.now <= 3_001


async def test_fetch_reports_partitions_the_broker_left_out(make_harness, virtual_sleep) -> None:
    h = stable(make_harness)
    member = ScriptedMember(h, [fetched((0, 5, 0))])
    with pytest.raises(OffsetsError, match="did not answer for t-1"):
        await member.member.fetch_committed([T0, T1])
