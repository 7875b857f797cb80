"""GroupConsumer argument checks and usage errors (no broker needed: nothing connects)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import structlog

from kgroup import ConfigError, GroupConfig, GroupConsumer, TopicPartition, UsageError


def cfg(**overrides: Any) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": "127.0.0.1:1",
        "group_id": "g",
        "topics": ["t"],
    }
    values.update(overrides)
    return GroupConfig(**values)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"auto_offset_reset": "smallest"}, "auto_offset_reset"),
        ({"auto_commit_interval_ms": 0}, "auto_commit_interval_ms"),
        ({"auto_commit_interval_ms": 1.5}, "auto_commit_interval_ms"),
        ({"isolation_level": "serializable"}, "isolation_level"),
        ({"enable_auto_commit": "yes"}, "enable_auto_commit"),
        ({"value_deserializer": 42}, "value_deserializer"),
        ({"max_poll_records": 0}, "max_poll_records"),
        ({"fetch_max_wait_ms": -1}, "fetch_max_wait_ms"),
        ({"max_partition_fetch_bytes": 0}, "max_partition_fetch_bytes"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        GroupConsumer(cfg(), **kwargs)
    assert info.value.field == field


def test_config_must_be_a_group_config_with_topics() -> None:
    with pytest.raises(UsageError, match="GroupConfig"):
        GroupConsumer({"group_id": "g"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="topics"):
        GroupConsumer(cfg(topics=[]))


async def test_calls_before_start_are_usage_errors() -> None:
    consumer = GroupConsumer(cfg())
    tp = TopicPartition("t", 0)
    with pytest.raises(UsageError, match="not started"):
        await consumer.getmany()
    with pytest.raises(UsageError, match="not started"):
        await consumer.commit({tp: 1})
    with pytest.raises(UsageError, match="not assigned"):
        consumer.seek(tp, 0)
    assert consumer.assignment == frozenset()
    assert consumer.paused() == frozenset()
    assert consumer.stats().records_delivered == 0
    await consumer.close()  # closing an unstarted consumer is fine, and idempotent
    await consumer.close()


# -- the batch in hand (kgroup/_runtime/_consumer_drain.py) -----------------------------------


class _Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


async def _fetcher_with_a_batch(
    consumer: GroupConsumer, then: str
) -> tuple[asyncio.Task[None], asyncio.Event]:
    """A task that makes a fetch call, gets offsets 10-12 of t-0 and 5 of t-1, and on
    ``go`` comes back for more (``back``), ends (``end``) or raises (``raise``)."""
    go = asyncio.Event()
    handed = asyncio.Event()

    async def fetcher() -> None:
        consumer._fetch_call()
        batch = {TP0: [_Record(10), _Record(11), _Record(12)], TP1: [_Record(5)]}
        consumer._positions.update({TP0: 13, TP1: 6})
        consumer._handed_out(batch)
        handed.set()
        await go.wait()
        if then == "back":
            consumer._fetch_call()
            await asyncio.Event().wait()  # stays alive (back) until cancelled
        elif then == "raise":
            raise RuntimeError("the processing failed")

    task = asyncio.create_task(fetcher())
    await handed.wait()
    return task, go


@pytest.mark.parametrize("then", ["back", "end"])
async def test_a_batch_is_processed_once_its_task_is_back_or_ended(then: str) -> None:
    consumer = GroupConsumer(cfg())
    consumer._batch_wait = 30.0
    task, go = await _fetcher_with_a_batch(consumer, then)
    waiting = asyncio.create_task(consumer._wait_for_batch({TP0, TP1}))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # it waits for the fetcher
    go.set()
    await asyncio.wait_for(waiting, timeout=10)
    assert consumer._positions == {TP0: 13, TP1: 6}
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("then", ["stuck", "raise"])
async def test_a_batch_not_processed_is_committed_from_its_first_records(then: str) -> None:
    consumer = GroupConsumer(cfg())
    consumer._batch_wait = 0.05
    task, go = await _fetcher_with_a_batch(consumer, then)
    if then == "raise":
        go.set()
        with contextlib.suppress(RuntimeError):
            await task
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(consumer._wait_for_batch({TP0}), timeout=10)
    assert consumer._positions == {TP0: 10, TP1: 6}  # only the released partition moves
    assert [e["event"] for e in logs] == ["consumer.batch_unfinished"]
    assert logs[0]["partitions"] == ["t-0"]
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, RuntimeError):
        await task


async def test_a_batch_in_the_releasing_task_itself_is_processed() -> None:
    consumer = GroupConsumer(cfg())
    consumer._fetch_call()
    consumer._positions[TP0] = 13
    consumer._handed_out({TP0: [_Record(10)]})
    await consumer._wait_for_batch({TP0})  # in this task: no wait
    assert consumer._positions == {TP0: 13}
