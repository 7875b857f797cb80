"""The opt-in fallback from the consumer protocol to the classic one
(``GroupConfig.group_protocol_fallback``).

A member configured with ``group_protocol="consumer"`` whose broker does not offer the
protocol (no ConsumerGroupHeartbeat v1, or the broker answers UNSUPPORTED_VERSION because
the protocol is not enabled) fails with :class:`~kgroup.UnsupportedVersion`. With the
fallback on, and only if the member never joined under the consumer protocol, it becomes a
classic member instead: the consumer-protocol heartbeat task stops, a classic core takes
its place (with the classic defaults for the settings the consumer protocol refuses), and
the classic heartbeat task and metadata watch start. The switch is logged as
``member.protocol_fallback``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from .._core._member import MemberCore
from .._errors import UnsupportedVersion
from ._shared import Shared

if TYPE_CHECKING:
    from ._member import GroupMember

__all__ = ["classic_core", "fall_back_to_classic"]


def classic_core(shared: Shared) -> MemberCore:
    """A classic core for the member's configuration and embedding."""
    embedding = shared.embedding
    return MemberCore(
        shared.config.member_settings(),
        protocol_type=embedding.protocol_type,
        protocols=embedding.metadata,
        now=shared.now(),
        observer=shared.observe,
        holds_assignment=lambda: bool(embedding.owned or shared.releasing),
    )


def may_fall_back(member: GroupMember, error: BaseException) -> bool:
    """Whether ``error`` from a consumer-protocol ``poll()`` makes the member fall back."""
    runtime = member._kip848
    return (
        isinstance(error, UnsupportedVersion)
        and member.config.group_protocol_fallback
        and runtime is not None
        and not runtime.joined_once
    )


async def fall_back_to_classic(member: GroupMember, error: UnsupportedVersion) -> None:
    """Turn ``member`` into a classic member (see the module docstring)."""
    shared = member._shared
    runtime = member._kip848
    assert runtime is not None and shared.seam is not None
    runtime.stop()
    classic = dataclasses.replace(
        member.config, group_protocol="classic", group_remote_assignor=None
    )
    member._config = classic
    shared.config = classic
    shared.observe("member.protocol_fallback", group=classic.group_id, reason=str(error))
    with shared.lock:
        shared.core = classic_core(shared)
    member._kip848 = None
    thread = shared.seam.thread
    if thread is None:
        member._spawn_coordinator_tasks()
    else:
        await asyncio.wrap_future(thread.call(member._spawn_coordinator_tasks))
