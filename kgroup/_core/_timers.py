"""Deadlines and backoff for the membership core (spec §3.1). No clock is read here.

Every method takes ``now`` in milliseconds from whatever monotonic clock the caller uses;
the runtime passes ``loop.time() * 1000`` and tests pass plain numbers.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable

__all__ = [
    "ExponentialBackoff",
    "HeartbeatStats",
    "HeartbeatTimers",
    "Lease",
    "SampleWindow",
    "Timer",
]


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
        "session_reset_by",
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
        #: The send time of the heartbeat whose answer last reset the session timer (None:
        #: the last reset was a discovery, an enable, or an answer that proves nothing).
        self.session_reset_by: float | None = None

    def sent(self, now: float) -> None:
        self.heartbeat.reset(now, self._interval)
        self.in_flight = True
        self.last_heartbeat_sent = now

    def received(self, now: float, sent_at: float | None = None) -> None:
        """A heartbeat succeeded (or answered REBALANCE_IN_PROGRESS, which counts as alive);
        ``sent_at``: its send time, when its answer proves the session (the lease)."""
        self.in_flight = False
        self.session.reset(now, self._session)
        self.session_reset_by = sent_at
        self.attempts = 0
        self.last_heartbeat_received = now

    def failed(self, now: float) -> None:
        self.in_flight = False
        self.heartbeat.reset(now, self._backoff.backoff(self.attempts))
        self.attempts += 1

    def reset_session(self, now: float) -> None:
        self.session.reset(now, self._session)
        self.session_reset_by = None

    def reset_all(self, now: float) -> None:
        """Enable: heartbeat, session and poll timers all start afresh (after JoinGroup)."""
        self.heartbeat.reset(now, self._interval)
        self.session.reset(now, self._session)
        self.session_reset_by = None
        self.poll.reset(now, self._max_poll)
        self.in_flight = False

    def polled(self, now: float) -> None:
        self.poll.reset(now, self._max_poll)


class Lease:
    """The proofs that bound how long a member may trust its assignment (kgroup's lease).

    With the classic protocol, a member cut off from the coordinator still believes in its
    assignment while the coordinator may already have handed the partitions to another
    member. The coordinator can do that only after one of these (GroupMetadataManager):

    - the member's session expired: nothing restarted its session timer for
      ``session_timeout``;
    - a rebalance started and the member did not rejoin within the rebalance timeout (the
      group's is the maximum over its members, so never shorter than ours);
    - the member left: a dynamic member's poll timer expired (the heartbeat driver sends
      LeaveGroup then).

    Each bound is computed from the SEND time of a request whose successful answer proves
    something: the broker received the request after we sent it, so its own deadline is no
    earlier than ours. ``session_proof`` is the send time of the latest request whose answer
    proves the broker restarted the member's session timer after it was sent (Heartbeat
    NONE or REBALANCE_IN_PROGRESS under the current Generation; JoinGroup NONE, counted
    from the first JoinGroup sent with the same member id and metadata). A SyncGroup
    answer proves nothing about the session: a STABLE group answers it without restarting
    the timer. ``rebalance_proof`` is the send time of the latest request proving no
    rebalance had started when it arrived (Heartbeat NONE sent while STABLE, SyncGroup
    success). Proofs only move forward. The rules live in :mod:`kgroup._core._lease`.
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


class SampleWindow:
    """The last ``size`` samples of a duration (ms) and their p50, p99 and max.

    Percentiles use the nearest-rank method over the samples held: ``p`` is the smallest
    sample with at least ``p`` percent of the samples at or below it. An empty window
    reports ``None`` for each.
    """

    __slots__ = ("_samples",)

    def __init__(self, size: int = 1024) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self._samples: deque[float] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, value: float) -> None:
        self._samples.append(value)

    def summary(self) -> dict[str, float | None]:
        if not self._samples:
            return {"p50": None, "p99": None, "max": None}
        ordered = sorted(self._samples)

        def rank(p: float) -> float:
            return ordered[max(0, math.ceil(p / 100.0 * len(ordered)) - 1)]

        return {"p50": rank(50), "p99": rank(99), "max": ordered[-1]}


class HeartbeatStats:
    """What the heartbeat driver did, and how late it woke: counters, lateness, round trips.

    Lateness is how long after the heartbeat timer expired the driver actually ran. It is
    sampled only after the driver waited *for that timer* (:meth:`waiting`, with a deadline
    still in the future), on its first run at or after the deadline (:meth:`woke`),
    whatever the driver then decides (send, or notice the session expired). So it measures
    the delay of the driver's own wake-up: an event loop blocked by application code (or a
    starved thread) shows as lateness; a slow broker does not (that shows in the round
    trip), nor do periods without heartbeats (rebalance, coordinator unknown:
    :meth:`idle`). No clock is read here: every ``now`` comes from the caller.
    """

    __slots__ = (
        "_due",
        "acknowledged",
        "failed",
        "last_lateness_ms",
        "late",
        "lateness",
        "rtt",
        "sent",
        "stall_warn_ms",
    )

    def __init__(self, *, stall_warn_ms: float, window: int = 1024) -> None:
        self.stall_warn_ms = stall_warn_ms
        self.sent = 0
        self.acknowledged = 0
        self.failed = 0
        self.late = 0
        self.last_lateness_ms: float | None = None
        self.lateness = SampleWindow(window)
        self.rtt = SampleWindow(window)
        self._due: float | None = None

    @property
    def due(self) -> float | None:
        """When the heartbeat the driver waits for is due (ms), if it waits for one."""
        return self._due

    def waiting(self, due: float, now: float) -> None:
        """The driver waits, and the next heartbeat is due at ``due``."""
        self._due = due if due > now else None

    def idle(self) -> None:
        """The driver does not wait for the heartbeat timer (disabled, coordinator unknown,
        sending)."""
        self._due = None

    def woke(self, now: float) -> float | None:
        """The driver runs at ``now``. Returns the lateness (ms) when a heartbeat it waited
        for was due by then (and records it), else None."""
        due = self._due
        if due is None or now < due:
            return None
        self._due = None
        lateness = now - due
        self.last_lateness_ms = lateness
        self.lateness.add(lateness)
        if lateness > self.stall_warn_ms:
            self.late += 1
        return lateness

    def is_late(self, lateness_ms: float) -> bool:
        """Whether ``lateness_ms`` is past the warning threshold."""
        return lateness_ms > self.stall_warn_ms

    def sending(self) -> None:
        self.sent += 1
        self._due = None

    def answered(self, sent_at: float, now: float, *, ok: bool) -> None:
        """The coordinator answered the heartbeat sent at ``sent_at``; ``ok`` when the answer
        kept the session alive (no error, or REBALANCE_IN_PROGRESS)."""
        self.rtt.add(max(0.0, now - sent_at))
        if ok:
            self.acknowledged += 1
        else:
            self.failed += 1

    def lost(self) -> None:
        """The heartbeat got no answer (disconnect, timeout, local error)."""
        self.failed += 1
