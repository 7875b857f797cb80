"""The opt-in fallback from the consumer protocol to the classic one
(``GroupConfig.group_protocol_fallback``).

A member configured with ``group_protocol="consumer"`` whose broker does not offer the
protocol (no ConsumerGroupHeartbeat v1, or the broker answers UNSUPPORTED_VERSION because
the protocol is not enabled) fails with :class:`~kgroup.UnsupportedVersion`. With the
fallback on, and only if the member never joined under the consumer protocol, it becomes a
classic member instead: the consumer-protocol heartbeat task stops, a
:class:`~._classic.ClassicRuntime` takes the place of the member's
:class:`~._kip848.ConsumerProtocolRuntime` (with the classic defaults for the settings the
consumer protocol refuses), and its heartbeat task and metadata watch start. The switch is
logged as ``member.protocol_fallback``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from .._errors import UnsupportedVersion
from ._classic import ClassicRuntime
from ._kip848 import ConsumerProtocolRuntime

if TYPE_CHECKING:
    from ._member import GroupMember

__all__ = ["fall_back_to_classic", "may_fall_back"]


def may_fall_back(member: GroupMember, error: BaseException) -> bool:
    """Whether ``error`` from a consumer-protocol ``poll()`` makes the member fall back."""
    runtime = member._runtime
    return (
        isinstance(error, UnsupportedVersion)
        and member.config.group_protocol_fallback
        and isinstance(runtime, ConsumerProtocolRuntime)
        and not runtime.joined_once
    )


async def fall_back_to_classic(member: GroupMember, error: UnsupportedVersion) -> None:
    """Turn ``member`` into a classic member (see the module docstring)."""
    shared = member._shared
    runtime = member._runtime
    assert isinstance(runtime, ConsumerProtocolRuntime) and shared.seam is not None
    runtime.stop()
    classic = dataclasses.replace(
        member.config, group_protocol="classic", group_remote_assignor=None
    )
    member._config = classic
    shared.config = classic
    shared.observe("member.protocol_fallback", group=classic.group_id, reason=str(error))
    replacement = ClassicRuntime(shared, member._link, member._rebalance)
    with shared.lock:
        replacement.open()
    member._runtime = replacement
    thread = shared.seam.thread
    if thread is None:
        member._spawn_coordinator_tasks()
    else:
        await asyncio.wrap_future(thread.call(member._spawn_coordinator_tasks))
