"""The consumer-protocol lease uses the session timeout Kafka 4.4.0 applies to the group.

The session timeout of a KIP-848 group is the broker's: the group's
``consumer.session.timeout.ms`` (set here with IncrementalAlterConfigs through
kafka-python's admin client; the test brokers allow 1000-60000 ms) or the broker's
``group.consumer.session.timeout.ms`` (45000 on the test brokers). kgroup reads it with
DescribeConfigs on the GROUP resource after the first heartbeat and bounds the lease by the
smaller of it and ``consumer_session_timeout_ms``. These tests pin down what the broker
answers (override, default, a group that does not exist, a principal without
DESCRIBE_CONFIGS) and that a real member's ``valid_until`` follows the broker's value.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from kgroup import GroupConfig, GroupMember
from kgroup._core._messages_configs import (
    CONFIG_SOURCE_GROUP,
    CONFIG_SOURCE_STATIC_BROKER,
    RESOURCE_GROUP,
    ConfigQuery,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kgroup._runtime import _group_configs as group_configs
from kgroup._runtime._connection import BrokerConnection
from kgroup._runtime._group_configs import SESSION_TIMEOUT_KEY, group_session_timeout
from kgroup._runtime._kip848 import ConsumerProtocolRuntime
from kgroup.testing import KafkaBroker
from kgroup.testing._kafka_secure import SecureKafkaBroker

BROKER_DEFAULT_MS = 45_000  # group.consumer.session.timeout.ms on the test brokers


def _runtime_848(member: GroupMember) -> ConsumerProtocolRuntime:
    """The member's consumer-protocol runtime (its ``MembershipRuntime``)."""
    runtime = member._runtime
    assert isinstance(runtime, ConsumerProtocolRuntime)
    return runtime


def set_group_session_timeout(bootstrap: str, group: str, timeout_ms: int) -> None:
    """IncrementalAlterConfigs SET consumer.session.timeout.ms on ``group`` (which need not
    exist yet). kafka-python: aiokafka has no IncrementalAlterConfigs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kgroup-test-configs")
        try:
            result = admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.GROUP,
                        group,
                        configs={SESSION_TIMEOUT_KEY: str(timeout_ms)},
                    )
                ]
            )
        finally:
            admin.close()
    assert result == {"group": {group: "OK"}}, result


async def describe(bootstrap: str, group: str) -> DescribeConfigsResponse:
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection.open(host, int(port), client_id="t", timeout_ms=10_000)
    try:
        request = DescribeConfigsRequest(
            resources=(
                ConfigQuery(
                    resource_type=RESOURCE_GROUP, resource_name=group, keys=(SESSION_TIMEOUT_KEY,)
                ),
            ),
            include_synonyms=True,
        )
        response: DescribeConfigsResponse = await conn.request(request, 10_000)
        assert await group_session_timeout(conn, group, 10_000) == int(
            response.results[0].configs[0].value or 0
        )
        return response
    finally:
        await conn.aclose()


def consumer_config(bootstrap: str, group: str, topic: str, **overrides: Any) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "topics": [topic],
        "group_protocol": "consumer",
        # Kafka's default: the poll deadline (which also bounds the lease) stays far beyond
        # every session timeout here.
        "max_poll_interval_ms": 300_000,
        "request_timeout_ms": 10_000,
    }
    values.update(overrides)
    return GroupConfig(**values)


async def owning_and_learned(config: GroupConfig) -> tuple[GroupMember, list[Mapping[str, Any]]]:
    """A started member that owns partitions and has read (or given up reading) the
    session timeout, with the member.session_timeout_learned events it emitted."""
    member = GroupMember(config)
    learned: list[Mapping[str, Any]] = []

    def hook(event: str, fields: Mapping[str, Any]) -> None:
        if event == "member.session_timeout_learned":
            learned.append(dict(fields))

    member.add_event_hook(hook)
    await member.start()
    try:
        async with asyncio.timeout(60):
            while not member.assignment or not _runtime_848(member)._session_timeout._done:
                await member.poll(timeout=0.1)
    except BaseException:
        await member.close()
        raise
    return member, learned


def lease_bound(member: GroupMember) -> float:
    """valid_until minus the proof it rests on (ms): the session bound the lease uses."""
    core = _runtime_848(member).core
    proof = core._session_proof
    until = core.valid_until
    assert proof is not None and until is not None
    return float(until - proof)


async def test_what_describe_configs_answers_for_a_group(
    kafka_broker: KafkaBroker, unique_group: str
) -> None:
    """No override (the group need not exist): the broker's value, from server.properties;
    with an override (set before the group exists): the group's, source GROUP_CONFIG."""
    (plain,) = (await describe(kafka_broker.bootstrap, unique_group)).results
    assert plain.error_code == 0
    (entry,) = plain.configs
    assert (entry.name, entry.value, entry.source) == (
        SESSION_TIMEOUT_KEY,
        str(BROKER_DEFAULT_MS),
        CONFIG_SOURCE_STATIC_BROKER,
    )
    assert entry.synonyms[0].name == "group.consumer.session.timeout.ms"

    set_group_session_timeout(kafka_broker.bootstrap, unique_group, 7_000)
    (entry,) = (await describe(kafka_broker.bootstrap, unique_group)).results[0].configs
    assert (entry.value, entry.source) == ("7000", CONFIG_SOURCE_GROUP)
    assert [s.name for s in entry.synonyms] == [
        SESSION_TIMEOUT_KEY,
        "group.consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
    ]


async def test_a_group_override_bounds_the_lease(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """The group's 6 s, not the configured default 45 s: valid_until is the last answered
    heartbeat's send time plus 6 s."""
    topic = make_topic(2)
    set_group_session_timeout(kafka_broker.bootstrap, unique_group, 6_000)
    member, learned = await owning_and_learned(
        consumer_config(kafka_broker.bootstrap, unique_group, topic)
    )
    try:
        assert member._config.consumer_session_timeout_ms == 45_000
        assert learned and learned[0]["broker_ms"] == 6_000
        assert learned[0]["session_timeout_ms"] == 6_000
        assert lease_bound(member) == 6_000
        valid_until = member.valid_until
        assert valid_until is not None
        # And heartbeats keep renewing it (the interval, 500 ms on the test broker, is < 6 s).
        async with asyncio.timeout(30):
            while member.valid_until == valid_until:
                await member.poll(timeout=0.2)
        assert lease_bound(member) == 6_000
        assert len(member.assignment) == 2
    finally:
        await member.close()


async def test_a_group_config_lowered_later_is_read_again(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    unique_group: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session timeout is read again every REFRESH_MS (a minute; 300 ms here): a group
    override set after the member learned the broker's 45 s bounds its lease from the next
    read on; raised again, it lengthens the lease once two reads agree, from the next
    answered heartbeat on."""
    monkeypatch.setattr(group_configs, "REFRESH_MS", 300)
    topic = make_topic(1)
    member, learned = await owning_and_learned(
        consumer_config(kafka_broker.bootstrap, unique_group, topic)
    )
    try:
        assert learned[0]["broker_ms"] == BROKER_DEFAULT_MS
        assert lease_bound(member) == BROKER_DEFAULT_MS
        set_group_session_timeout(kafka_broker.bootstrap, unique_group, 6_000)
        async with asyncio.timeout(30):
            while lease_bound(member) != 6_000:
                await member.poll(timeout=0.1)
        assert (learned[-1]["broker_ms"], learned[-1]["session_timeout_ms"]) == (6_000, 6_000)
        set_group_session_timeout(kafka_broker.bootstrap, unique_group, 20_000)
        async with asyncio.timeout(30):
            while learned[-1]["broker_ms"] != 20_000:
                await member.poll(timeout=0.1)
        first = learned[-1]
        async with asyncio.timeout(30):
            while lease_bound(member) != 20_000:
                await member.poll(timeout=0.1)
        raised = [f for f in learned if f["session_timeout_ms"] == 20_000]
        # One read of the raise changed nothing; the next one did.
        assert first["session_timeout_ms"] == 6_000
        assert raised and learned.index(raised[0]) > learned.index(first)
        assert len(member.assignment) == 1
    finally:
        await member.close()


async def test_without_override_the_broker_value_and_a_shorter_setting_wins(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(1)
    member, learned = await owning_and_learned(
        consumer_config(kafka_broker.bootstrap, unique_group, topic)
    )
    try:
        assert learned[0]["broker_ms"] == BROKER_DEFAULT_MS
        assert lease_bound(member) == BROKER_DEFAULT_MS
    finally:
        await member.close()
    cautious, learned = await owning_and_learned(
        consumer_config(
            kafka_broker.bootstrap, unique_group, topic, consumer_session_timeout_ms=10_000
        )
    )
    try:
        assert learned[0]["broker_ms"] == BROKER_DEFAULT_MS
        assert learned[0]["session_timeout_ms"] == 10_000
        assert lease_bound(cautious) == 10_000
    finally:
        await cautious.close()


async def test_without_describe_configs_permission_the_configured_value_stays(
    secure_kafka_broker: SecureKafkaBroker, make_topic: Callable[..., str]
) -> None:
    """READ and DESCRIBE on the group let a member in, but DescribeConfigs on the group
    needs DESCRIBE_CONFIGS: Kafka answers GROUP_AUTHORIZATION_FAILED for the resource, the
    member warns once and keeps consumer_session_timeout_ms."""
    broker = secure_kafka_broker
    broker.allow("alice", group_prefix="kgsto-g-", topic_prefix="kgsto-t-")
    topic = make_topic(1, broker=broker, name=f"kgsto-t-{uuid.uuid4().hex[:10]}")
    group = f"kgsto-g-{uuid.uuid4().hex[:10]}"
    set_group_session_timeout(broker.bootstrap, group, 6_000)  # invisible to alice
    config = consumer_config(
        broker.sasl_bootstrap,
        group,
        topic,
        security_protocol="SASL_SSL",
        ssl_cafile=str(broker.ca_file),
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=broker.passwords["alice"],
        consumer_session_timeout_ms=20_000,
    )
    with capture_logs() as logs:
        member, learned = await owning_and_learned(config)
        try:
            assert learned == []
            assert lease_bound(member) == 20_000
        finally:
            await member.close()
    (warning,) = [x for x in logs if x["event"] == "member.session_timeout_unknown"]
    assert "GROUP_AUTHORIZATION_FAILED (30)" in warning["error"]
    assert warning["session_timeout_ms"] == 20_000
    assert warning["log_level"] == "warning"
