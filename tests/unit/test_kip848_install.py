"""Two consumer-protocol edges the simulation found once its applications committed
offsets (which moved its schedules): a reconciliation whose revoke callback outlives the
member's lease installs nothing new (consumer seed 12477: the member was fenced by its
lease while its revoke callback ran, then installed two partitions another member held);
and a member preparing to leave long after its last poll does not spin (seed 6180)."""

from __future__ import annotations

from kgroup._core._kip848_actions import HeartbeatWait, Reconcile, ReleaseLost
from kgroup._core._kip848_state import ConsumerState as S
from tests.unit.test_scenarios_kip848 import T1, Harness, assignment, tp


def reconciling() -> tuple[Harness, Reconcile]:
    """Epoch 5 with t1-0 and t1-1; the target moves t1-1 away and adds t1-2."""
    h = Harness(settings={"max_poll_interval_ms": 300_000})
    h.answer(h.joined(assigned=((T1, (0, 1)),)), epoch=5)
    h.at(5_000)
    h.m.polled(h.now)
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (0, 2))))
    action = h.m.poll_action(h.now)
    assert isinstance(action, Reconcile)
    assert action.revoked == tp("t1", 1) and action.assigned == tp("t1", 2)
    return h, action


def test_a_member_whose_lease_ended_during_the_revoke_installs_nothing() -> None:
    h, action = reconciling()
    h.at(h.now + 60_000)  # the revoke callback outlives the session (45 s): no answers
    assert not h.m.may_install(action, h.now)
    lost = h.m.poll_action(h.now)
    assert isinstance(lost, ReleaseLost) and lost.partitions == tp("t1", 0)


def test_a_member_still_in_its_lease_installs() -> None:
    h, action = reconciling()
    h.at(h.now + 10)
    assert h.m.may_install(action, h.now)


def test_a_member_preparing_to_leave_after_its_poll_deadline_does_not_spin() -> None:
    """close() long after the application's last poll (a paused process): the member
    prepares to leave with an epoch, its poll deadline past. The heartbeat task waits for
    the next heartbeat, not for that deadline, which would wake it at once, forever
    (simulation consumer seed 6180: 100,000 wake-ups at one instant)."""
    h = Harness(settings={"max_poll_interval_ms": 20_000})
    h.answer(h.joined(assigned=()), epoch=5)  # holding nothing: no lease bounds the wait
    h.at(h.now + 1_000)
    assert h.m.leave(h.now)
    assert h.state() is S.PREPARE_LEAVING
    h.m._poll_deadline = h.now - 1  # the last poll was over max.poll.interval.ms ago
    action = h.hb()
    assert isinstance(action, HeartbeatWait) and action.until > h.now
