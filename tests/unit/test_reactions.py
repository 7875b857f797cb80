"""The table of error reactions (``kgroup._core._reactions``), walked row by row.

Every row of every API, its stale variant (§2.5) and a code without a row (the API's
default) are fed to the real handler on a :class:`MemberCore`; the handler must carry the
reaction out (no LocalProtocolError) with the effect the reaction names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kgroup._core._member import PrepareJoin, SendHeartbeat, SendJoinGroup, Sleep
from kgroup._core._messages import FetchedOffset, OffsetCommitResponse, OffsetFetchResponse
from kgroup._core._offsets import (
    Done,
    Fail,
    Retry,
    commit_request,
    on_commit_response,
    on_fetch_response,
)
from kgroup._core._reactions import DEFAULTS, REACTIONS, Api, Reaction, reaction_for
from kgroup._core._state import ChainPhase, Generation
from kgroup._errors import ErrorCode, FencedInstanceId, LocalProtocolError

E = ErrorCode
R = Reaction
UNLISTED = 9999  # a code no table lists: the API's default


def cases() -> Iterator[tuple[Api, int, bool]]:
    for api, rows in REACTIONS.items():
        for code, row in rows.items():
            yield api, int(code), False
            if row.stale is not None:
                yield api, int(code), True
        yield api, UNLISTED, False


def expected(api: Api, code: int, stale: bool) -> Reaction:
    row = REACTIONS[api].get(code)
    if row is None:
        return DEFAULTS[api]
    return row.stale if stale and row.stale is not None else row.reaction


def test_lookup_applies_the_stale_rule_once() -> None:
    g1, g2 = Generation(1, "m", "range"), Generation(2, "m", "range")
    hb = Api.HEARTBEAT
    assert reaction_for(hb, E.ILLEGAL_GENERATION, sent=g1, current=g1) is R.RESET_GENERATION_KEEP_ID
    assert reaction_for(hb, E.ILLEGAL_GENERATION, sent=g1, current=g2) is R.STALE
    # A reaction that does not depend on the Generation has no stale variant.
    assert reaction_for(hb, E.NOT_COORDINATOR, sent=g1, current=g2) is R.COORDINATOR_MOVED
    assert reaction_for(Api.JOIN_GROUP, E.FENCED_INSTANCE_ID, sent=g1, current=g2) is R.FATAL
    assert reaction_for(hb, UNLISTED, sent=g1, current=g1) is DEFAULTS[hb]


def test_every_row_has_the_reactions_of_its_spec_table() -> None:
    for api, rows in REACTIONS.items():
        assert rows[E.NONE].reaction is R.OK, api
        for row in rows.values():
            if row.stale is not None:
                assert row.reaction in (
                    R.RESET_GENERATION,
                    R.RESET_GENERATION_KEEP_ID,
                    R.FENCED,
                    R.REBALANCING,
                ), (api, row)


# -- driving each handler ------------------------------------------------------------------------


def _stable(make_harness: Callable[..., Any]) -> Any:
    h = make_harness(group_instance_id="static-1")
    h.stable("m-1", generation=1, owned=h.tps("t", 0, 1))
    return h


def _send_heartbeat(h: Any) -> SendHeartbeat:
    for _ in range(10):
        action = h.hb()
        if isinstance(action, SendHeartbeat):
            return action
        h.at(max(h.now, action.until))
    raise AssertionError("no heartbeat became due")


def _rejoin(h: Any) -> None:
    h.core.request_rejoin("test")
    action = h.action()
    if isinstance(action, PrepareJoin):
        h.embedding.prepare(lost=action.lost)
        action = h.action()
    assert isinstance(action, SendJoinGroup), action
    assert h.core.phase is ChainPhase.JOINING


def _joined(h: Any, generation: int = 2) -> None:
    sync = h.join_response(
        generation=generation,
        member_id="m-1",
        leader="leader-0",
        protocol_name="range",
        protocol_type="consumer",
    )
    assert sync is not None and h.core.phase is ChainPhase.SYNCING


def _make_stale(h: Any) -> None:
    """Move the member to another Generation while a chain request is in flight: a heartbeat
    sent before answers ILLEGAL_GENERATION (current for it) and resets the member."""
    hb = h._pending_hb
    h.hb_respond(hb, E.ILLEGAL_GENERATION)
    assert h.core.generation.generation_id == -1


def run_find(h: Any, code: int, stale: bool) -> dict[str, Any]:
    h.poll()
    h.action()
    h.lookup(error=code)
    return {}


def run_join(h: Any, code: int, stale: bool) -> dict[str, Any]:
    h.stable("m-1", generation=1, owned=h.tps("t", 0, 1))
    h._pending_hb = _send_heartbeat(h)
    _rejoin(h)
    if stale:
        _make_stale(h)
    before = h.core.generation
    if code == E.NONE:
        _joined(h)
    else:
        h.join_response(code, member_id="m-new" if code == E.MEMBER_ID_REQUIRED else "")
    return {"before": before}


def run_sync(h: Any, code: int, stale: bool) -> dict[str, Any]:
    h.stable("m-1", generation=1, owned=h.tps("t", 0, 1))
    _rejoin(h)
    _joined(h)
    h._pending_hb = _send_heartbeat(h)
    if stale:
        _make_stale(h)
    before = h.core.generation
    h.sync_response(code, protocol_type="consumer", protocol_name="range")
    return {"before": before}


def run_heartbeat(h: Any, code: int, stale: bool) -> dict[str, Any]:
    h.stable("m-1", generation=1, owned=h.tps("t", 0, 1))
    hb = _send_heartbeat(h)
    if stale:
        _rejoin(h)
        _joined(h)
    before = h.core.generation
    h.hb_respond(hb, code)
    return {"before": before}


def run_commit(h: Any, code: int, stale: bool) -> dict[str, Any]:
    h.stable("m-1", generation=1, owned=h.tps("t", 0, 1))
    (tp,) = h.tps("t", 0)
    commit_request(h.core, {tp: 1})
    before = h.core.generation
    sent = Generation(0, "m-0", "range") if stale else before
    verdict = on_commit_response(h.core, sent, OffsetCommitResponse(results=(("t", 0, code),)))
    return {"before": before, "verdict": verdict}


def run_fetch(h: Any, code: int, stale: bool, *, partition: bool = False) -> dict[str, Any]:
    h.stable("m-1", generation=1, owned=h.tps("t", 0, 1))
    before = h.core.generation
    response = OffsetFetchResponse(
        error_code=0 if partition else code,
        partitions=(
            FetchedOffset(
                topic="t", partition=0, offset=5, metadata="", error_code=code if partition else 0
            ),
        ),
    )
    verdict, _ = on_fetch_response(h.core, response)
    return {"before": before, "verdict": verdict}


RUNNERS: dict[Api, Callable[[Any, int, bool], dict[str, Any]]] = {
    Api.FIND_COORDINATOR: run_find,
    Api.JOIN_GROUP: run_join,
    Api.SYNC_GROUP: run_sync,
    Api.HEARTBEAT: run_heartbeat,
    Api.OFFSET_COMMIT: run_commit,
    Api.OFFSET_FETCH: run_fetch,
    Api.OFFSET_FETCH_PARTITION: lambda h, c, s: run_fetch(h, c, s, partition=True),
}

CHAIN = (Api.JOIN_GROUP, Api.SYNC_GROUP)
OFFSETS = (Api.OFFSET_COMMIT, Api.OFFSET_FETCH, Api.OFFSET_FETCH_PARTITION)


@pytest.mark.parametrize(
    ("api", "code", "stale"),
    list(cases()),
    ids=[f"{a.name}-{ErrorCode.describe(c)}{'-stale' if s else ''}" for a, c, s in cases()],
)
def test_every_row_is_carried_out_by_its_handler(make_harness, api, code, stale) -> None:
    h = make_harness(group_instance_id="static-1")
    try:
        seen = RUNNERS[api](h, code, stale)
    except LocalProtocolError as exc:  # pragma: no cover - the failure being tested for
        pytest.fail(f"{api.name} {ErrorCode.describe(code)}: {exc}")
    core = h.core
    reaction = expected(api, code, stale)
    verdict = seen.get("verdict")
    before = seen.get("before")
    if reaction in (R.FATAL, R.UNAUTHORIZED):
        assert core.fatal is not None
        if api in OFFSETS:
            assert isinstance(verdict, Fail)
    elif reaction is R.FENCED:
        assert isinstance(core.fatal, FencedInstanceId)
    else:
        assert core.fatal is None
    if reaction is R.COORDINATOR_MOVED:
        assert core.coordinator is None
        if api in OFFSETS:
            assert isinstance(verdict, Retry) and verdict.coordinator_lost
    elif reaction not in (R.FATAL, R.UNAUTHORIZED) and (
        api is not Api.FIND_COORDINATOR or reaction is R.OK
    ):
        assert core.coordinator is not None
    if reaction is R.RETRY_BACKOFF:
        if api in OFFSETS:
            assert isinstance(verdict, Retry) and not verdict.coordinator_lost
        elif api in CHAIN:
            assert core.phase is ChainPhase.IDLE and isinstance(h.action(), Sleep)
        elif api is Api.FIND_COORDINATOR:
            assert core.find_coordinator_retry_at() > h.now
    if reaction is R.RETRY_NOW:
        assert core.phase is ChainPhase.IDLE and core.rejoin_needed
        assert isinstance(h.action(), SendJoinGroup)
    if reaction is R.RESET_GENERATION:
        assert core.generation.is_reset and core.generation.member_id == ""
    if reaction is R.RESET_GENERATION_KEEP_ID:
        assert before is not None
        assert core.generation == Generation(-1, before.member_id, None)
    if reaction in (R.STALE, R.IGNORE, R.REBALANCING, R.OK, R.FAIL, R.RETRY_BACKOFF):
        if api is not Api.JOIN_GROUP or reaction is not R.OK:
            assert before is None or core.generation == before
    if reaction is R.STALE and api in CHAIN:
        assert core.phase is ChainPhase.IDLE and core.rejoin_needed
    if reaction is R.ADOPT_MEMBER_ID:
        assert core.generation.member_id == "m-new"
    if reaction is R.OK and api in OFFSETS:
        assert isinstance(verdict, Done)
    if reaction is R.FAIL:
        assert isinstance(verdict, Fail)
    if reaction is R.REBALANCING:
        assert core.rejoin_needed


# -- protocol decisions the runtime asks the core about ------------------------------------------


def test_rebalance_pending_and_close_release(make_harness) -> None:
    h = make_harness()
    assert h.core.rebalance_pending() and h.core.close_releases_lost()
    h.stable("m-1", generation=1, owned=h.tps("t", 0))
    assert not h.core.rebalance_pending() and not h.core.close_releases_lost()
    h.core.request_rejoin("test")
    assert h.core.rebalance_pending() and not h.core.close_releases_lost()
    h.core.reset_generation(keep_member_id=True, reason="test")
    assert h.core.rebalance_pending() and h.core.close_releases_lost()


def test_invalid_assignment_ends_the_completion_and_rejoins(make_harness) -> None:
    h = make_harness()
    h.stable("m-1", generation=1, owned=h.tps("t", 0))
    h.core.request_rejoin("test")
    _rejoin(h)
    _joined(h)
    h.sync_response(assignment=b"\xff", protocol_type="consumer", protocol_name="range")
    h.action()  # CompleteJoin
    assert h.core.phase is ChainPhase.COMPLETING
    h.core.on_invalid_assignment(h.now)
    assert h.core.phase is ChainPhase.IDLE  # type: ignore[comparison-overlap]
    assert h.core.rejoin_needed and h.core.rejoin_reason == "invalid assignment"
