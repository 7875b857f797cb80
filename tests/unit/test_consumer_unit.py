"""GroupConsumer argument checks and usage errors (no broker needed: nothing connects)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import pytest
import structlog
from aiokafka.errors import (
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka.structs import TopicPartition as AioTopicPartition

from kgroup import (
    ConfigError,
    GroupConfig,
    GroupConsumer,
    OffsetsError,
    TopicAuthorizationFailed,
    TopicPartition,
    UsageError,
)
from kgroup._runtime._list_offsets import lookup, partition_arg, timestamps_arg


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
    with pytest.raises(UsageError, match="not started"):
        await consumer.end_offsets([tp])
    with pytest.raises(UsageError, match="not started"):
        await consumer.offsets_for_times({tp: 0})
    with pytest.raises(UsageError, match="not started"):
        await consumer.seek_to_end(tp)
    with pytest.raises(UsageError, match="highwater: partition t-0 is not assigned"):
        consumer.highwater(tp)
    await consumer.close()  # closing an unstarted consumer is fine, and idempotent
    await consumer.close()


async def test_calls_while_start_runs_are_usage_errors_that_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entered = asyncio.Event()

    async def slow_start(self: object) -> None:
        entered.set()
        await asyncio.Event().wait()  # the bootstrap brokers take their time

    monkeypatch.setattr("aiokafka.AIOKafkaConsumer.start", slow_start)
    consumer = GroupConsumer(cfg())
    starting = asyncio.create_task(consumer.start())
    await entered.wait()
    tp = TopicPartition("t", 0)
    with pytest.raises(UsageError, match="is starting"):
        await consumer.getmany()
    with pytest.raises(UsageError, match="is starting"):
        await consumer.commit({tp: 1})
    with pytest.raises(UsageError, match="is starting"):
        await consumer.end_offsets([tp])
    starting.cancel()  # start() cleans up after itself
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert consumer.closed


# -- offset lookups (kgroup/_runtime/_list_offsets.py) ----------------------------------------


@pytest.mark.parametrize(
    ("arg", "error", "message"),
    [
        ("t", TypeError, "expected a TopicPartition, got 't'"),
        (("t", 0, 1), TypeError, "expected a TopicPartition"),
        (("", 0), TypeError, "a topic must be a non-empty str"),
        ((b"t", 0), TypeError, "a topic must be a non-empty str"),
        (("t", -1), ValueError, "a partition must be an int >= 0, got -1"),
        (("t", True), ValueError, "a partition must be an int >= 0, got True"),
    ],
)
def test_a_bad_partition_is_named(arg: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(f"end_offsets: {message}")):
        partition_arg(arg, "end_offsets")


@pytest.mark.parametrize(
    ("arg", "error", "message"),
    [
        ([("t", 0)], TypeError, "expected a mapping"),
        ({("t", 0): -5}, ValueError, "the time for t-0 must be an int >= 0"),
        ({("t", 0): 1.5}, ValueError, "the time for t-0 must be an int >= 0"),
        ({("t", 0): None}, ValueError, "the time for t-0 must be an int >= 0"),
        ({"t": 0}, TypeError, "expected a TopicPartition"),
    ],
)
def test_bad_times_are_named(arg: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(f"offsets_for_times: {message}")):
        timestamps_arg(arg, "offsets_for_times")


async def _raising(exc: BaseException) -> dict[Any, int]:
    raise exc


async def test_lookup_failures_become_kgroup_errors_naming_the_partitions() -> None:
    asked = [TP0, TopicPartition("u", 3)]
    with pytest.raises(OffsetsError, match=r"end_offsets: no offsets for t-0, u-3 within") as info:
        await lookup(_raising(KafkaTimeoutError()), asked, what="end_offsets", timeout_ms=2000)
    assert (info.value.api, info.value.error_code) == ("ListOffsets", None)
    with pytest.raises(TopicAuthorizationFailed) as denied:
        await lookup(
            _raising(TopicAuthorizationFailedError()), asked, what="end_offsets", timeout_ms=1
        )
    assert denied.value.topics == ("t", "u")
    with pytest.raises(OffsetsError, match="refused the lookup of t-0, u-3") as refused:
        await lookup(_raising(UnknownTopicOrPartitionError()), asked, what="x", timeout_ms=1)
    assert refused.value.error_code == UnknownTopicOrPartitionError.errno
    # A kgroup bug (not a broker answer) is not disguised as one.
    with pytest.raises(KeyError):
        await lookup(_raising(KeyError("bug")), asked, what="x", timeout_ms=1)


async def test_lookup_answers_are_keyed_by_kgroup_partitions() -> None:
    async def answer() -> dict[Any, int]:
        return {AioTopicPartition("t", 0): 7}

    found = await lookup(answer(), [TP0], what="end_offsets", timeout_ms=1)
    assert found == {TP0: 7}
    assert type(next(iter(found))) is TopicPartition


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
