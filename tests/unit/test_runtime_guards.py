"""Runtime guards that need no broker: asyncio only, lifecycle misuse."""

from __future__ import annotations

import anyio
import pytest

from kgroup import GroupConfig, GroupMember, UsageError

CONFIG = GroupConfig(bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"])


def test_trio_fails_at_once_with_a_clear_error() -> None:
    pytest.importorskip("trio")

    async def main() -> None:
        async with GroupMember(CONFIG):
            pass  # pragma: no cover - never reached

    with pytest.raises(UsageError, match="asyncio only"):
        anyio.run(main, backend="trio")


def test_anyio_asyncio_backend_opens_and_closes() -> None:
    async def main() -> bool:
        async with GroupMember(CONFIG) as member:
            return member.closed

    assert anyio.run(main, backend="asyncio") is False


async def test_poll_before_start_and_after_close_is_a_usage_error() -> None:
    member = GroupMember(CONFIG)
    with pytest.raises(UsageError, match="start"):
        await member.poll(timeout=0)
    await member.start()
    await member.close()
    with pytest.raises(UsageError, match="closed"):
        await member.poll(timeout=0)
    with pytest.raises(UsageError, match="cannot be started"):
        await member.start()
    await member.close()  # idempotent


def test_config_must_be_a_group_config() -> None:
    with pytest.raises(UsageError, match="GroupConfig"):
        GroupMember({"group_id": "g"})  # type: ignore[arg-type]
