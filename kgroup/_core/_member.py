"""The classic group member as a sans-I/O state machine (spec §2-§6).

Theory of operation
-------------------
:class:`MemberCore` owns every variable of spec §1.2 and nothing else: no socket, no task,
no clock. Two drivers call it, each with ``now`` in milliseconds:

- the **join driver** (the application's ``poll()``) asks :meth:`next_join_action` what to do
  next and reports what happened: :meth:`on_join_response`, :meth:`on_sync_response`,
  :meth:`assignment_computed`, :meth:`on_join_failed`, :meth:`join_completed`, ...
- the **heartbeat driver** asks :meth:`heartbeat_action` and reports
  :meth:`on_heartbeat_response` / :meth:`on_heartbeat_failed`.

Coordinator discovery is shared: either driver may run it and report
:meth:`on_find_coordinator_response`. Whenever the core forgets the coordinator
(:attr:`coordinator` becomes ``None`` or a new :class:`Coordinator`), the runtime must close
the connection it holds for the old one: that fails every request in flight on it (§4.0.3).

Every response handler judges a generation-dependent error against the Generation captured
when the request was sent (the stale-response rule of §2.5, applied once in the reaction
table of :mod:`kgroup._core._reactions`), because the other driver may have moved the member
on while the request was in flight.

The core knows nothing of partitions or topics: the embedded protocol (``protocol_type`` and
the ``protocols`` callable) supplies JoinGroup metadata, and assignments pass through as
bytes. Fatal errors are stored and handed to the join driver as :class:`RaiseFatal`.

The parts
---------
:class:`MemberCore` is composed of one class per concept, each in its own module, over the
shared state of :class:`~kgroup._core._base.MemberBase` (``_base.py``: state table,
rejoin, reset, fatal errors, leaving):

- :mod:`kgroup._core._lease`: the lease (kgroup's deviation from the Java client), which
  bounds how long the member trusts its assignment;
- :mod:`kgroup._core._discovery`: FindCoordinator;
- :mod:`kgroup._core._heartbeat`: the heartbeat driver and the poll timer;
- :mod:`kgroup._core._rebalance`: the Join->Sync chain with its phase table;
- :mod:`kgroup._core._reactions`: the table of reactions to error codes;
- :mod:`kgroup._core._actions`: the actions the drivers are asked to run.
"""

from __future__ import annotations

from ._actions import (
    AwaitJoin,
    AwaitLeaseProof,
    ChainAction,
    CompleteJoin,
    ComputeAssignment,
    FindCoordinator,
    HeartbeatAction,
    HeartbeatDisabled,
    HeartbeatFindCoordinator,
    HeartbeatWait,
    Idle,
    JoinAction,
    PollTimeoutLeave,
    PrepareJoin,
    RaiseFatal,
    SendHeartbeat,
    SendJoinGroup,
    SendSyncGroup,
    Sleep,
)
from ._base import HasMemberSettings, Observer
from ._discovery import Discovery
from ._heartbeat import HeartbeatDriver
from ._rebalance import RebalanceChain

__all__ = [
    "AwaitJoin",
    "AwaitLeaseProof",
    "ChainAction",
    "CompleteJoin",
    "ComputeAssignment",
    "FindCoordinator",
    "HasMemberSettings",
    "HeartbeatAction",
    "HeartbeatDisabled",
    "HeartbeatFindCoordinator",
    "HeartbeatWait",
    "Idle",
    "JoinAction",
    "MemberCore",
    "Observer",
    "PollTimeoutLeave",
    "PrepareJoin",
    "RaiseFatal",
    "SendHeartbeat",
    "SendJoinGroup",
    "SendSyncGroup",
    "Sleep",
]


class MemberCore(RebalanceChain, HeartbeatDriver, Discovery):
    """The membership state machine of one classic group member. See the module docstring;
    the fields and their writers are listed on :class:`~kgroup._core._base.MemberBase`.

    ``settings`` is a :class:`~kgroup._core._settings.MemberSettings`, or an object with a
    ``member_settings()`` method (``GroupConfig``) that produces one.
    """
