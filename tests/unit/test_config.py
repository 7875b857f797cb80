"""GroupConfig validation: every error names the field and the rule (spec §3.1 defaults)."""

from __future__ import annotations

from typing import Any

import pytest

from kgroup._config import GroupConfig
from kgroup._errors import ConfigError

INT32_MAX = 2**31 - 1
TIMEOUT_FIELDS = [
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "retry_backoff_ms",
    "retry_backoff_max_ms",
    "request_timeout_ms",
    "close_timeout_ms",
]


def config(**overrides: Any) -> GroupConfig:
    fields: dict[str, Any] = {"bootstrap_servers": "b0:9092", "group_id": "g", "topics": ["t"]}
    fields.update(overrides)
    return GroupConfig(**fields)


def config_error(**overrides: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config(**overrides)
    return info.value


def test_kafka_defaults() -> None:
    cfg = config()
    assert cfg.session_timeout_ms == 45_000
    assert cfg.heartbeat_interval_ms == 3_000
    assert cfg.max_poll_interval_ms == 300_000
    assert cfg.retry_backoff_ms == 100
    assert cfg.retry_backoff_max_ms == 1_000
    assert cfg.request_timeout_ms == 30_000
    assert cfg.group_instance_id is None
    assert not cfg.is_static
    assert cfg.leaves_on_close


def test_config_error_is_a_value_error_naming_the_field() -> None:
    err = config_error(group_id="")
    assert isinstance(err, ValueError)
    assert err.field == "group_id"
    assert str(err).startswith("group_id: ")


@pytest.mark.parametrize(("heartbeat", "session"), [(45_000, 45_000), (50_000, 45_000)])
def test_heartbeat_must_be_below_session(heartbeat: int, session: int) -> None:
    err = config_error(heartbeat_interval_ms=heartbeat, session_timeout_ms=session)
    assert err.field == "heartbeat_interval_ms"
    assert "session_timeout_ms" in str(err)
    assert "below" in str(err)


def test_heartbeat_just_below_session_is_accepted() -> None:
    assert config(heartbeat_interval_ms=44_999).heartbeat_interval_ms == 44_999


@pytest.mark.parametrize(
    "bootstrap",
    [
        "localhost",
        "host:",
        ":9092",
        "host:0",
        "host:65536",
        "host:abc",
        "",
        " , ",
        [],
        ["a:1", "b"],
    ],
)
def test_bad_bootstrap(bootstrap: Any) -> None:
    err = config_error(bootstrap_servers=bootstrap)
    assert err.field == "bootstrap_servers"
    assert "HOST:PORT" in str(err)


@pytest.mark.parametrize(
    ("bootstrap", "brokers"),
    [
        ("a:1", (("a", 1),)),
        ("a:1, b:2", (("a", 1), ("b", 2))),
        (["a:1", "b:65535"], (("a", 1), ("b", 65535))),
        ("[::1]:9092", (("::1", 9092),)),
    ],
)
def test_good_bootstrap(bootstrap: Any, brokers: tuple[tuple[str, int], ...]) -> None:
    assert config(bootstrap_servers=bootstrap).brokers == brokers


@pytest.mark.parametrize("instance", ["", "a b", "x" * 250, "é", "a/b", "a:b"])
def test_bad_instance_id(instance: str) -> None:
    err = config_error(group_instance_id=instance)
    assert err.field == "group_instance_id"
    assert "249" in str(err) and "[a-zA-Z0-9._-]" in str(err)


@pytest.mark.parametrize("instance", ["i1", "x" * 249, "A.b_c-9"])
def test_good_instance_id(instance: str) -> None:
    cfg = config(group_instance_id=instance)
    assert cfg.is_static
    assert not cfg.leaves_on_close


@pytest.mark.parametrize("name", TIMEOUT_FIELDS)
@pytest.mark.parametrize("value", [1.5, 3000.0, "3000", True, None])
def test_non_int_timeouts(name: str, value: Any) -> None:
    err = config_error(**{name: value})
    assert err.field == name
    assert "integer" in str(err)


@pytest.mark.parametrize("name", TIMEOUT_FIELDS)
@pytest.mark.parametrize("value", [0, -1, INT32_MAX + 1])
def test_out_of_range_timeouts(name: str, value: int) -> None:
    err = config_error(**{name: value})
    assert err.field == name
    assert f"1..{INT32_MAX}" in str(err)


def test_backoff_max_below_base() -> None:
    err = config_error(retry_backoff_ms=500, retry_backoff_max_ms=100)
    assert err.field == "retry_backoff_max_ms"
    assert "retry_backoff_ms" in str(err)


def test_bad_topic_and_assignors() -> None:
    assert config_error(topics=["ok", "not ok"]).field == "topics"
    assert config_error(assignors=[]).field == "assignors"


@pytest.mark.parametrize(
    ("max_poll", "request_timeout", "expected"),
    [
        (300_000, 30_000, 305_000),
        (60_000, 30_000, 65_000),
        (10_000, 30_000, 30_000),
        (25_000, 30_000, 30_000),
        (25_001, 30_000, 30_001),
    ],
)
def test_join_timeout(max_poll: int, request_timeout: int, expected: int) -> None:
    """JoinGroup timeout = max(request timeout, max_poll + 5000) (spec §3.1)."""
    cfg = config(max_poll_interval_ms=max_poll, request_timeout_ms=request_timeout)
    assert cfg.join_timeout_ms == expected


def test_join_timeout_does_not_overflow() -> None:
    """max.poll.interval.ms = 2^31-1: the timeout must not wrap around (Java guards the int
    addition; kgroup must never come out below the rebalance timeout)."""
    cfg = config(max_poll_interval_ms=INT32_MAX)
    assert cfg.join_timeout_ms >= INT32_MAX
    assert cfg.join_timeout_ms >= cfg.request_timeout_ms
    cfg = config(max_poll_interval_ms=INT32_MAX, request_timeout_ms=INT32_MAX)
    assert cfg.join_timeout_ms >= INT32_MAX


@pytest.mark.parametrize("field", ["group_instance_id", "topics"])
def test_trailing_newline_is_not_a_legal_name(field: str) -> None:
    value: Any = "i1\n" if field == "group_instance_id" else ["t\n"]
    assert config_error(**{field: value}).field == field


def test_non_ascii_digit_port_is_a_config_error() -> None:
    assert config_error(bootstrap_servers="host:²").field == "bootstrap_servers"


# -- the consumer group protocol (KIP-848) ----------------------------------------------------


def _consumer(**kw: object) -> GroupConfig:
    return GroupConfig(
        bootstrap_servers="b:9092",
        group_id="g",
        topics=["t"],
        group_protocol="consumer",
        **kw,  # type: ignore[arg-type]
    )


def test_group_protocol_defaults_to_classic_and_rejects_others() -> None:
    assert GroupConfig(bootstrap_servers="b:9092", group_id="g").group_protocol == "classic"
    with pytest.raises(ConfigError, match="group_protocol: 'share' is not one of"):
        GroupConfig(bootstrap_servers="b:9092", group_id="g", group_protocol="share")


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("session_timeout_ms", 10_000, "consumer_session_timeout_ms"),
        # Not told instead that the default heartbeat (3 s) must be below it.
        ("session_timeout_ms", 3_000, "consumer_session_timeout_ms"),
        ("heartbeat_interval_ms", 1_000, "group.consumer.heartbeat.interval.ms"),
        ("heartbeat_interval_ms", 60_000, "group.consumer.heartbeat.interval.ms"),
        ("assignors", ["cooperative-sticky"], "group_remote_assignor"),
    ],
)
def test_classic_only_settings_are_refused_with_the_consumer_protocol(
    name: str, value: object, why: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{name}: not used with .*{why}") as err:
        _consumer(**{name: value})
    assert err.value.field == name


def test_a_handoff_on_close_is_accepted_with_the_consumer_protocol() -> None:
    assert _consumer(handoff_on_close=True).handoff_on_close is True
    with pytest.raises(ConfigError, match="handoff_on_close: must be True or False"):
        _consumer(handoff_on_close=1)


def test_classic_only_settings_are_accepted_for_a_fallback() -> None:
    config = _consumer(session_timeout_ms=6_000, group_protocol_fallback=True)
    assert config.session_timeout_ms == 6_000
    with pytest.raises(ConfigError, match="group_protocol_fallback: must be True or False"):
        _consumer(group_protocol_fallback="yes")


def test_remote_assignor_needs_the_consumer_protocol() -> None:
    with pytest.raises(ConfigError, match="group_remote_assignor: server assignors need"):
        GroupConfig(bootstrap_servers="b:9092", group_id="g", group_remote_assignor="uniform")
    assert _consumer(group_remote_assignor="range").group_remote_assignor == "range"
    with pytest.raises(ConfigError, match="group_remote_assignor: must be a non-empty"):
        _consumer(group_remote_assignor="")
    with pytest.raises(ConfigError, match="consumer_session_timeout_ms: must be in"):
        _consumer(consumer_session_timeout_ms=0)


@pytest.mark.parametrize(
    ("instance", "leave", "epoch"),
    [(None, None, -1), (None, True, -1), (None, False, None), ("i", None, -2), ("i", True, -1),
     ("i", False, -2)],
)  # fmt: skip
def test_consumer_protocol_settings_follow_kip_1092(
    instance: str | None, leave: bool | None, epoch: int | None
) -> None:
    config = _consumer(
        group_instance_id=instance,
        leave_group_on_close=leave,
        topic_pattern=None,
        rack_id="r1",
        consumer_session_timeout_ms=50_000,
    )
    st = config.consumer_protocol_settings("m-1")
    assert st.leave_epoch_on_close == epoch
    assert (st.member_id, st.instance_id, st.rack_id, st.session_timeout_ms) == (
        "m-1",
        instance,
        "r1",
        50_000,
    )
    assert st.topics == ("t",) and st.rebalance_timeout_ms == config.max_poll_interval_ms


def test_a_group_protocol_member_needs_the_classic_protocol() -> None:
    from kgroup import GroupMember, LeaderElection

    config = GroupConfig(bootstrap_servers="b:9092", group_id="g", group_protocol="consumer")
    with pytest.raises(ConfigError, match="group_protocol: a GroupProtocol member needs"):
        GroupMember(config, protocol=LeaderElection())
