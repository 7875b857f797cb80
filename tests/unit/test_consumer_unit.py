"""GroupConsumer argument checks and usage errors (no broker needed: nothing connects)."""

from __future__ import annotations

from typing import Any

import pytest

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
