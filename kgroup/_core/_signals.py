"""What the runtime must do after a core call, as a value.

The core never wakes a task or touches a connection itself. Whenever one of its calls
changes something another part of the runtime waits on, it raises a flag; the runtime takes
the flags after every core call (:meth:`MemberCore.take_signals`) and applies them in one
place. Log events are observation only: no control flow hangs off them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_SIGNALS", "SignalFlags", "Signals"]


@dataclass(frozen=True, slots=True)
class Signals:
    """The flags raised by one or more core calls.

    - ``wake_poll``: ``poll()`` has something new to do or report (a rejoin was requested,
      the state changed, a fatal error was recorded, the lease ran out or was renewed).
    - ``wake_heartbeat``: the heartbeat task must recompute its wait (heartbeats were
      enabled, a coordinator was found, a heartbeat is due now, an assignment was installed
      or a rebalance completed, so the lease deadline may have moved).
    - ``drop_coordinator``: the core forgot the coordinator: close the connection to it so
      that every request in flight on it fails at once (spec §4.0.3).
    """

    wake_poll: bool = False
    wake_heartbeat: bool = False
    drop_coordinator: bool = False

    def __bool__(self) -> bool:
        return self.wake_poll or self.wake_heartbeat or self.drop_coordinator


NO_SIGNALS = Signals()


class SignalFlags:
    """The core's mutable accumulator behind :class:`Signals`."""

    __slots__ = ("drop_coordinator", "wake_heartbeat", "wake_poll")

    def __init__(self) -> None:
        self.wake_poll = False
        self.wake_heartbeat = False
        self.drop_coordinator = False

    def take(self) -> Signals:
        if not (self.wake_poll or self.wake_heartbeat or self.drop_coordinator):
            return NO_SIGNALS
        taken = Signals(self.wake_poll, self.wake_heartbeat, self.drop_coordinator)
        self.wake_poll = self.wake_heartbeat = self.drop_coordinator = False
        return taken
