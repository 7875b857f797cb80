"""Offset lookups (ListOffsets) for :class:`~kgroup.GroupConsumer`: where a partition's log
begins and ends, and which offset a time falls at.

They go through the consumer's aiokafka fetcher (which finds each partition's leader and
retries what is retriable up to ``request_timeout_ms``); aiokafka's errors are translated
here into kgroup's, naming the partitions asked about.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from aiokafka.structs import TopicPartition as AioTopicPartition

from .._config import GroupConfig
from .._core._consumer_protocol import TopicPartition
from .._errors import OffsetsError, TopicAuthorizationFailed

__all__ = [
    "OffsetAndTimestamp",
    "as_partition",
    "log_offsets",
    "lookup",
    "partition_arg",
    "time_offsets",
    "timestamps_arg",
]

_T = TypeVar("_T")

_API = "ListOffsets"


class OffsetAndTimestamp(NamedTuple):
    """What :meth:`GroupConsumer.offsets_for_times` found in a partition: the offset of the
    first record whose timestamp is at or after the time asked for, and that record's
    timestamp (milliseconds since the epoch)."""

    offset: int
    timestamp: int


def as_partition(tp: object, what: str) -> TopicPartition:
    """Any ``(topic, partition)`` pair (kgroup's, aiokafka's or a plain tuple) as kgroup's
    :class:`TopicPartition`; TypeError naming the call for anything else."""
    if not isinstance(tp, tuple) or len(tp) != 2:
        raise TypeError(f"{what}: expected a TopicPartition, got {tp!r}")
    return TopicPartition(tp[0], tp[1])


def partition_arg(tp: object, what: str) -> TopicPartition:
    """``tp`` as a :class:`TopicPartition` with a non-empty str topic and a partition
    number, or TypeError/ValueError naming the call."""
    topic, partition = as_partition(tp, what)
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"{what}: a topic must be a non-empty str, got {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"{what}: a partition must be an int >= 0, got {partition!r}")
    return TopicPartition(topic, partition)


def timestamps_arg(timestamps: object, what: str) -> dict[TopicPartition, int]:
    """``timestamps`` (partition -> ms since the epoch) checked, or TypeError/ValueError."""
    if not isinstance(timestamps, Mapping):
        raise TypeError(f"{what}: expected a mapping of TopicPartition to ms, got {timestamps!r}")
    out: dict[TopicPartition, int] = {}
    for tp, ms in timestamps.items():
        part = partition_arg(tp, what)
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError(
                f"{what}: the time for {part} must be an int >= 0 (ms since the epoch), got {ms!r}"
            )
        out[part] = ms
    return out


def aio(tp: TopicPartition) -> AioTopicPartition:
    return AioTopicPartition(tp.topic, tp.partition)


async def lookup(
    call: Awaitable[Mapping[Any, _T]],
    partitions: Iterable[TopicPartition],
    *,
    what: str,
    timeout_ms: int,
) -> dict[TopicPartition, _T]:
    """Await aiokafka's lookup ``call`` for ``partitions``; its answer keyed by kgroup's
    TopicPartition. aiokafka's errors become :class:`OffsetsError` (api ``ListOffsets``) or
    :class:`TopicAuthorizationFailed`."""
    names = ", ".join(sorted(str(tp) for tp in partitions))
    try:
        found = await call
    except KafkaTimeoutError:
        raise OffsetsError(
            f"{what}: no offsets for {names} within request_timeout_ms ({timeout_ms} ms): "
            "a partition that does not exist, or its leader did not answer",
            api=_API,
        ) from None
    except TopicAuthorizationFailedError as exc:
        topics = sorted({tp.topic for tp in partitions})
        raise TopicAuthorizationFailed(
            topics, f"{what}: not authorized to describe {', '.join(topics)}"
        ) from exc
    except KafkaError as exc:
        code = getattr(exc, "errno", None)
        raise OffsetsError(
            f"{what}: the broker refused the lookup of {names}: {type(exc).__name__}",
            api=_API,
            error_code=code if isinstance(code, int) else None,
        ) from exc
    return {TopicPartition(tp.topic, tp.partition): value for tp, value in found.items()}


async def log_offsets(
    kafka: AIOKafkaConsumer,
    partitions: Iterable[object],
    *,
    end: bool,
    what: str,
    config: GroupConfig,
) -> dict[TopicPartition, int]:
    """Where the logs of ``partitions`` begin (``end`` False) or end, through ``kafka``."""
    if isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str):
        raise TypeError(f"{what}: expected an iterable of TopicPartition, got {partitions!r}")
    parts = sorted({partition_arg(tp, what) for tp in partitions})
    if not parts:
        return {}
    ask = [aio(tp) for tp in parts]
    call = kafka.end_offsets(ask) if end else kafka.beginning_offsets(ask)
    found = await lookup(call, parts, what=what, timeout_ms=config.request_timeout_ms)
    return {tp: int(offset) for tp, offset in found.items()}


async def time_offsets(
    kafka: AIOKafkaConsumer, timestamps: object, *, config: GroupConfig
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Per partition, the first record at or after its time (None if there is none)."""
    what = "offsets_for_times"
    wanted = timestamps_arg(timestamps, what)
    if not wanted:
        return {}
    call = kafka.offsets_for_times({aio(tp): ms for tp, ms in wanted.items()})
    found = await lookup(call, wanted, what=what, timeout_ms=config.request_timeout_ms)
    return {
        tp: None if hit is None else OffsetAndTimestamp(int(hit.offset), int(hit.timestamp))
        for tp, hit in ((tp, found.get(tp)) for tp in wanted)
    }
