"""Observing never changes what a member does, and a kgroup bug is never a broker error.

- an event hook that raises is contained: counted, logged once per hook, membership goes on;
- a task of the member that fails raises InternalError from poll() (with the cause), and
  asyncio never reports an unretrieved task exception;
- the log-event registry and the names kgroup logs agree.

No broker: the member bootstraps from a closed port, so its coordinator lookup fails over
and over (each failure is a logged event).
"""

from __future__ import annotations

import asyncio
import pathlib
import re
from collections.abc import Mapping
from typing import Any, get_args

import pytest
import structlog
from structlog.testing import capture_logs

from kgroup import GroupConfig, GroupMember, InternalError, UnexpectedBrokerError
from kgroup._log import EVENTS, EventName

CLOSED = "127.0.0.1:9"


def config(**overrides: Any) -> GroupConfig:
    settings: dict[str, Any] = {
        "bootstrap_servers": CLOSED,
        "group_id": "g",
        "topics": ["t"],
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 20,
        "request_timeout_ms": 1_000,
    }
    settings.update(overrides)
    return GroupConfig(**settings)


async def lookup_failures(member: GroupMember, at_least: int) -> None:
    """Poll until the coordinator lookup has failed ``at_least`` times (events seen)."""
    failures: list[str] = []

    def count(name: str, fields: Mapping[str, Any]) -> None:
        if name == "member.coordinator_lookup_failed":
            failures.append(name)

    member.add_event_hook(count)
    try:
        async with asyncio.timeout(30):
            while len(failures) < at_least:
                await member.poll(timeout=0.05)
    finally:
        member.remove_event_hook(count)


async def test_a_raising_event_hook_is_counted_logged_once_and_changes_nothing() -> None:
    calls: list[str] = []

    def broken(name: str, fields: Mapping[str, Any]) -> None:
        calls.append(name)
        raise RuntimeError("the hook's sink is gone")

    with capture_logs() as logs:
        async with GroupMember(config()) as member:
            member.add_event_hook(broken)
            await lookup_failures(member, 5)  # poll() never sees the hook's failure
            stats = member.stats()
            called = len(calls)
    failed = [e for e in logs if e["event"] == "member.event_hook_failed"]
    assert len(failed) == 1, failed
    assert "RuntimeError" in failed[0]["error"]
    assert stats.event_hook_failures == called >= 5
    assert stats.state == "UNJOINED"


async def test_a_failing_log_sink_costs_no_task(loop_errors: list[dict[str, Any]]) -> None:
    """structlog's logger raises BrokenPipeError on every event (stdout is a closed pipe):
    the lookup task keeps running and retrying, nothing escapes to asyncio."""

    class ClosedPipe:
        def msg(self, message: str) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        log = debug = info = warning = warn = error = exception = critical = msg

    saved = structlog.get_config()
    structlog.configure(logger_factory=lambda *args: ClosedPipe(), cache_logger_on_first_use=False)
    try:
        async with GroupMember(config()) as member:
            before = member.stats().log_sink_failures
            await lookup_failures(member, 5)
            assert member.stats().log_sink_failures >= before + 5
    finally:
        structlog.configure(**saved)
    await asyncio.sleep(0)
    assert loop_errors == []


async def test_a_crashed_task_is_an_internal_error_not_a_broker_error(
    loop_errors: list[dict[str, Any]],
) -> None:
    async with GroupMember(config()) as member:

        async def crash(*args: Any, **kwargs: Any) -> Any:
            raise ZeroDivisionError("a bug in kgroup")

        member._link.transport.find_coordinator = crash  # type: ignore[method-assign]
        with pytest.raises(InternalError) as raised:
            async with asyncio.timeout(30):
                while True:
                    await member.poll(timeout=0.05)
        assert not isinstance(raised.value, UnexpectedBrokerError)
        assert isinstance(raised.value.__cause__, ZeroDivisionError)
        assert raised.value.task == "kgroup-find-coordinator"
    assert loop_errors == []


def test_every_logged_name_is_registered_and_every_registered_name_is_logged() -> None:
    names = set(get_args(EventName))
    assert names == set(EVENTS)
    source = pathlib.Path(__file__).parents[2] / "kgroup"
    text = "\n".join(p.read_text() for p in source.rglob("*.py") if p.name != "_log.py")
    used = set(
        re.findall(
            r'"((?:member|heartbeat|offsets|consumer|connection|fastapi|eventlog)\.[a-z_]+)"', text
        )
    )
    assert names - used == set(), "registered but never logged"
