"""The one interface between :class:`~kgroup.GroupMember` and a group protocol's runtime.

:class:`~._member.GroupMember` keeps what both protocols share: the configuration, the
lifecycle, the public API, the event hooks, the offsets surface, isolated mode and the
order of close(). What differs between the group protocols it asks of a
:class:`MembershipRuntime`, chosen once, when the member is built:

- :class:`~._classic.ClassicRuntime`: the classic protocol (JoinGroup, SyncGroup,
  Heartbeat; the core is :class:`~kgroup._core._member.MemberCore`);
- :class:`~._kip848.ConsumerProtocolRuntime`: the KIP-848 ``consumer`` protocol
  (ConsumerGroupHeartbeat; the core is
  :class:`~kgroup._core._kip848_member.ConsumerProtocolMember`).

A member configured with the ``consumer`` protocol and ``group_protocol_fallback`` may
swap its runtime for a classic one once (:mod:`._fallback`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .._core._assignors import RebalanceProtocol
from .._core._state import MemberState
from .._errors import ListenerError

__all__ = ["MembershipRuntime"]


class MembershipRuntime(Protocol):
    """What :class:`~kgroup.GroupMember` asks of a group protocol's runtime:

    - ``state``: the member's state, as the classic :class:`MemberState` names it;
    - ``assignment``: what the application holds now (``GroupMember.assignment``);
    - ``subscription``: the topics subscribed to now (``GroupMember.subscription``);
    - ``rebalance_protocol``: how the member gives up what it owns, EAGER or COOPERATIVE;
    - ``open()``: in start(), build the sans-I/O core and install it as ``Shared.core``;
    - ``spawn_tasks(abandoned)``: on the coordinator loop, start the protocol's tasks;
    - ``resolve_subscription()``: at the end of start(), resolve what the first join needs;
    - ``subscribe(topics, pattern)``: change the subscription (``GroupMember.subscribe``);
    - ``enforce_rebalance(reason)``: ask for a rebalance (``GroupMember.enforce_rebalance``);
    - ``poll(timeout)``: the poll path (``GroupMember.poll``);
    - ``close(errors, handoff=, deadline=)``: close()'s part: release, then leave.

    The member is open (``Shared.check_open``) when ``subscribe``, ``enforce_rebalance``
    and ``close`` are called; the properties are read at any time, before start() too.
    """

    @property
    def state(self) -> MemberState: ...

    @property
    def assignment(self) -> frozenset[Any]: ...

    @property
    def subscription(self) -> tuple[str, ...]: ...

    @property
    def rebalance_protocol(self) -> RebalanceProtocol: ...

    def open(self) -> None: ...

    def spawn_tasks(self, abandoned: Callable[[], bool]) -> None: ...

    async def resolve_subscription(self) -> None: ...

    async def subscribe(self, topics: Iterable[str] | None, pattern: str | None) -> None: ...

    def enforce_rebalance(self, reason: str) -> None: ...

    async def poll(self, timeout: float | None) -> frozenset[Any]: ...

    async def close(
        self, errors: list[ListenerError], *, handoff: bool, deadline: float
    ) -> None: ...
