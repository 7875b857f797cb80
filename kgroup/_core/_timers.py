"""Deadlines and backoff for the membership core (spec §3.1). No clock is read here.

Every method takes ``now`` in milliseconds from whatever monotonic clock the caller uses;
the runtime passes ``loop.time() * 1000`` and tests pass plain numbers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

__all__ = ["ExponentialBackoff", "HeartbeatTimers", "Lease", "Timer"]


class Timer:
    """A deadline: reset to ``now + duration``, expired once ``now`` reaches it."""

    __slots__ = ("deadline",)

    def __init__(self, now: float = 0.0, duration: float = 0.0) -> None:
        self.deadline = now + duration

    def reset(self, now: float, duration: float) -> None:
        self.deadline = now + duration

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def remaining(self, now: float) -> float:
        return max(0.0, self.deadline - now)


class ExponentialBackoff:
    """``min(max, base * 2**min(n, log2(max/base)) * U(1-jitter, 1+jitter))`` (KIP-580).

    Attempts 0, 1, 2, 3 give about 100, 200, 400, 800 ms with Kafka's defaults, then values
    in [800, 1000]. When ``base >= max`` the backoff is the constant ``max`` without jitter.
    ``uniform`` is injectable so tests are deterministic.
    """

    __slots__ = ("_base", "_exp_max", "_jitter", "_max", "_uniform")

    def __init__(
        self,
        base_ms: float,
        max_ms: float,
        *,
        jitter: float = 0.2,
        uniform: Callable[[float, float], float] | None = None,
    ) -> None:
        self._base = base_ms
        self._max = max_ms
        self._jitter = jitter
        self._exp_max = math.log2(max_ms / base_ms) if max_ms > base_ms else 0.0
        self._uniform = uniform or random.uniform

    def backoff(self, attempts: int) -> float:
        if self._base >= self._max:
            return self._max
        exp = min(float(attempts), self._exp_max)
        term = self._base * 2.0**exp
        factor = self._uniform(1 - self._jitter, 1 + self._jitter) if self._jitter else 1.0
        return float(min(term * factor, self._max))


class HeartbeatTimers:
    """The heartbeat, session and poll timers and the failure counter (Java's ``Heartbeat``).

    - heartbeat timer: the next heartbeat is due when it expires. Reset to the full interval
      when a heartbeat is *sent*, to ``backoff(attempts)`` when one fails.
    - session timer: expires when no heartbeat succeeded for ``session_timeout``: the
      coordinator is then presumed lost (the member is not reset).
    - poll timer: expires when the application has not polled for ``max_poll_interval``.
    """

    __slots__ = (
        "_backoff",
        "_interval",
        "_max_poll",
        "_session",
        "attempts",
        "heartbeat",
        "in_flight",
        "last_heartbeat_received",
        "last_heartbeat_sent",
        "poll",
        "session",
    )

    def __init__(
        self,
        *,
        now: float,
        heartbeat_interval_ms: float,
        session_timeout_ms: float,
        max_poll_interval_ms: float,
        backoff: ExponentialBackoff,
    ) -> None:
        self._interval = heartbeat_interval_ms
        self._session = session_timeout_ms
        self._max_poll = max_poll_interval_ms
        self._backoff = backoff
        self.heartbeat = Timer(now, heartbeat_interval_ms)
        self.session = Timer(now, session_timeout_ms)
        self.poll = Timer(now, max_poll_interval_ms)
        self.attempts = 0
        self.in_flight = False
        self.last_heartbeat_sent: float | None = None
        self.last_heartbeat_received: float | None = None

    def sent(self, now: float) -> None:
        self.heartbeat.reset(now, self._interval)
        self.in_flight = True
        self.last_heartbeat_sent = now

    def received(self, now: float) -> None:
        """A heartbeat succeeded (or answered REBALANCE_IN_PROGRESS, which counts as alive)."""
        self.in_flight = False
        self.session.reset(now, self._session)
        self.attempts = 0
        self.last_heartbeat_received = now

    def failed(self, now: float) -> None:
        self.in_flight = False
        self.heartbeat.reset(now, self._backoff.backoff(self.attempts))
        self.attempts += 1

    def reset_session(self, now: float) -> None:
        self.session.reset(now, self._session)

    def reset_all(self, now: float) -> None:
        """Enable: heartbeat, session and poll timers all start afresh (after JoinGroup)."""
        self.heartbeat.reset(now, self._interval)
        self.session.reset(now, self._session)
        self.poll.reset(now, self._max_poll)
        self.in_flight = False

    def polled(self, now: float) -> None:
        self.poll.reset(now, self._max_poll)


class Lease:
    """The proofs that bound how long a member may trust its assignment (kgroup's lease).

    With the classic protocol, a member cut off from the coordinator still believes in its
    assignment while the coordinator may already have handed the partitions to another
    member. The coordinator can do that only after one of these (GroupMetadataManager):

    - the member's session expired: no heartbeat, JoinGroup or SyncGroup refreshed it for
      ``session_timeout``;
    - a rebalance started and the member did not rejoin within the rebalance timeout (the
      group's is the maximum over its members, so never shorter than ours);
    - the member left: a dynamic member's poll timer expired (the heartbeat driver sends
      LeaveGroup then).

    Each bound is computed from the SEND time of a request whose successful answer proves
    something: the broker received the request after we sent it, so its own deadline is no
    earlier than ours. ``session_proof`` is the send time of the latest request whose answer
    proves the broker refreshed the member's session (Heartbeat NONE or
    REBALANCE_IN_PROGRESS, SyncGroup success); ``rebalance_proof`` the send time of the
    latest one proving no rebalance had started when it arrived (Heartbeat NONE sent while
    STABLE, SyncGroup success). Proofs only move forward.
    """

    __slots__ = ("rebalance_proof", "rebalance_timeout_ms", "session_proof", "session_timeout_ms")

    def __init__(self, *, session_timeout_ms: float, rebalance_timeout_ms: float) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_proof: float | None = None
        self.rebalance_proof: float | None = None

    def prove_session(self, sent_at: float) -> None:
        if self.session_proof is None or sent_at > self.session_proof:
            self.session_proof = sent_at

    def prove_no_rebalance(self, sent_at: float) -> None:
        if self.rebalance_proof is None or sent_at > self.rebalance_proof:
            self.rebalance_proof = sent_at

    def session_deadline(self, default: float) -> float:
        proof = self.session_proof
        return default if proof is None else proof + self.session_timeout_ms

    def rebalance_deadline(self, default: float) -> float:
        proof = self.rebalance_proof
        return default if proof is None else proof + self.rebalance_timeout_ms
