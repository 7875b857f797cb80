"""TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on Apache Kafka with ACLs enforced.

One session-scoped :class:`~kgroup.testing.SecureKafkaBroker` (``secure_kafka_broker``):
an SSL listener (principal ANONYMOUS, a super user), a SASL_SSL listener with PLAIN and
both SCRAM hashes, ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``.
``alice`` may READ groups starting with ``g-allowed`` and READ/DESCRIBE topics starting
with ``sec-``; ``bob`` has no group ACL.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog

from kgroup import AuthenticationFailed, GroupAuthorizationFailed, GroupConfig, GroupMember
from kgroup._config import DEFAULT_MAX_POLL_INTERVAL_MS
from kgroup._core._messages import JoinGroupRequest
from kgroup._runtime._connection import BrokerConnection
from kgroup.testing._kafka_secure import SecureKafkaBroker
from kgroup.testing._members import MemberGroup, covered
from tests.integration.conftest import group_config


@pytest.fixture(scope="module")
def secure(secure_kafka_broker: SecureKafkaBroker) -> SecureKafkaBroker:
    """The secure broker with alice's ACLs in place."""
    secure_kafka_broker.allow("alice", group_prefix="g-allowed", topic_prefix="sec-")
    return secure_kafka_broker


@pytest.fixture
def topic(secure: SecureKafkaBroker, make_topic: Callable[..., str]) -> str:
    return make_topic(2, broker=secure, name=f"sec-{uuid.uuid4().hex[:10]}")


def group_name() -> str:
    return f"g-allowed-{uuid.uuid4().hex[:10]}"


def ssl_config(broker: SecureKafkaBroker, group: str, topic: str, **extra: Any) -> GroupConfig:
    return group_config(
        broker.ssl_bootstrap,
        group,
        topic,
        max_poll_interval_ms=DEFAULT_MAX_POLL_INTERVAL_MS,
        security_protocol="SSL",
        ssl_cafile=str(broker.ca_file),
        **extra,
    )


def sasl_config(
    broker: SecureKafkaBroker,
    group: str,
    topic: str,
    mechanism: str,
    user: str,
    password: str | None = None,
) -> GroupConfig:
    return group_config(
        broker.sasl_bootstrap,
        group,
        topic,
        max_poll_interval_ms=DEFAULT_MAX_POLL_INTERVAL_MS,
        security_protocol="SASL_SSL",
        ssl_cafile=str(broker.ca_file),
        sasl_mechanism=mechanism,
        sasl_username=user,
        sasl_password=broker.passwords[user] if password is None else password,
    )


@pytest.fixture
def sent_requests(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every kgroup message handed to a BrokerConnection (what reaches the socket)."""
    sent: list[Any] = []
    original = BrokerConnection.request

    async def recording(self: BrokerConnection, message: Any, timeout_ms: float) -> Any:
        sent.append(message)
        return await original(self, message, timeout_ms)

    monkeypatch.setattr(BrokerConnection, "request", recording)
    return sent


async def first_error(member: GroupMember, within: float) -> BaseException:
    """Poll until poll() raises; fail if it does not within ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            try:
                await member.poll(timeout=1.0)
            except Exception as exc:
                return exc


async def test_ssl_member_joins(secure: SecureKafkaBroker, topic: str) -> None:
    async with MemberGroup() as group:
        runner = await group.start(ssl_config(secure, group_name(), topic))
        await group.wait_until(lambda: covered([runner], topic, 2), timeout=60, what="ssl join")
        assert not runner.errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_members_join_and_rebalance(
    secure: SecureKafkaBroker, topic: str, mechanism: str
) -> None:
    cfg = sasl_config(secure, group_name(), topic, mechanism, "alice")
    async with MemberGroup() as group:
        first = await group.start(cfg)
        await group.wait_until(lambda: covered([first], topic, 2), timeout=60, what="one member")
        second = await group.start(cfg)
        await group.wait_until(
            lambda: covered([first, second], topic, 2) and len(second.assignment) == 1,
            timeout=60,
            what="two members share the topic",
        )
        assert len(first.assignment) == 1
        assert first.member.generation.generation_id >= 2
        assert not first.errors and not second.errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_password_fails_fast(
    secure: SecureKafkaBroker, topic: str, mechanism: str, sent_requests: list[Any]
) -> None:
    wrong = f"not-{secure.passwords['alice']}"
    cfg = sasl_config(secure, group_name(), topic, mechanism, "alice", password=wrong)
    member = GroupMember(cfg)
    await member.start()
    try:
        t0 = time.monotonic()
        error = await first_error(member, within=10)
        took = time.monotonic() - t0
        assert isinstance(error, AuthenticationFailed), repr(error)
        text = str(error)
        assert secure.sasl_bootstrap in text and mechanism in text, text
        assert wrong not in text and wrong not in repr(error)
        assert took < 10
        # Fatal: the next poll raises again at once, nothing is retried or sent.
        with pytest.raises(AuthenticationFailed):
            async with asyncio.timeout(5):
                await member.poll(timeout=1.0)
        assert not sent_requests
    finally:
        await member.close()


async def test_untrusted_broker_certificate_fails_fast(
    secure: SecureKafkaBroker, topic: str, sent_requests: list[Any]
) -> None:
    # No ssl_cafile: the system's CAs do not trust the fixture's CA.
    cfg = GroupConfig(
        bootstrap_servers=secure.ssl_bootstrap,
        group_id=group_name(),
        topics=[topic],
        security_protocol="SSL",
    )
    member = GroupMember(cfg)
    await member.start()
    try:
        error = await first_error(member, within=10)
        assert isinstance(error, AuthenticationFailed), repr(error)
        assert "TLS handshake" in str(error) and secure.ssl_bootstrap in str(error), str(error)
        assert not sent_requests
    finally:
        await member.close()


@pytest.mark.parametrize(
    ("user", "group"),
    [("bob", "g-allowed-bob"), ("alice", "g-other-alice")],
    ids=["bob-no-group-acl", "alice-group-outside-prefix"],
)
async def test_group_without_acl_fails_before_join(
    secure: SecureKafkaBroker, topic: str, sent_requests: list[Any], user: str, group: str
) -> None:
    secure.allow(user, topic_prefix=topic)  # topic rights, but no ACL on this group
    cfg = sasl_config(secure, f"{group}-{uuid.uuid4().hex[:8]}", topic, "SCRAM-SHA-512", user)
    member = GroupMember(cfg)
    await member.start()
    try:
        error = await first_error(member, within=30)
        assert isinstance(error, GroupAuthorizationFailed), repr(error)
        assert sent_requests, "no request reached the broker at all"
        assert not [m for m in sent_requests if isinstance(m, JoinGroupRequest)]
    finally:
        await member.close()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def stdlib_records() -> Iterator[list[logging.LogRecord]]:
    handler = _Records()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


async def test_secrets_never_reach_logs_errors_or_reprs(
    secure: SecureKafkaBroker, topic: str, stdlib_records: list[logging.LogRecord]
) -> None:
    key_password = f"keypass-{uuid.uuid4().hex}"
    wrong = f"wrong-{uuid.uuid4().hex}"
    secrets = [secure.passwords["alice"], secure.passwords["bob"], key_password, wrong]
    texts: list[str] = []
    with structlog.testing.capture_logs() as events:
        cfg = sasl_config(secure, group_name(), topic, "SCRAM-SHA-512", "alice")
        async with MemberGroup() as group:
            a = await group.start(cfg)
            await group.wait_until(lambda: covered([a], topic, 2), timeout=60, what="a joined")
            b = await group.start(sasl_config(secure, cfg.group_id, topic, "PLAIN", "alice"))
            await group.wait_until(
                lambda: covered([a, b], topic, 2) and len(b.assignment) == 1,
                timeout=60,
                what="rebalanced",
            )
            texts += [repr(cfg), str(cfg), repr(a.member), repr(b.member)]
        # failures: wrong password, no group ACL
        for bad in (
            sasl_config(secure, group_name(), topic, "PLAIN", "alice", password=wrong),
            sasl_config(secure, group_name(), topic, "SCRAM-SHA-512", "bob"),
        ):
            member = GroupMember(bad)
            texts += [repr(bad), repr(member)]
            await member.start()
            try:
                error = await first_error(member, within=30)
                texts += [str(error), repr(error), str(error.__cause__), str(error.__context__)]
            finally:
                await member.close()
        # a config holding a key password (never used to connect)
        keyed = GroupConfig(
            bootstrap_servers=secure.ssl_bootstrap,
            group_id="g-allowed-x",
            security_protocol="SSL",
            ssl_certfile="/nonexistent/cert.pem",
            ssl_keyfile="/nonexistent/key.pem",
            ssl_key_password=key_password,
        )
        texts += [repr(keyed), str(keyed)]
    assert any(e.get("event") == "member.joined" for e in events), "capture saw no join"
    texts += [repr(event) for event in events]
    for record in stdlib_records:
        texts += [record.getMessage(), repr(record.args), repr(record.__dict__)]
        if record.exc_info and record.exc_info[1] is not None:
            texts.append(repr(record.exc_info[1]))
    blob = "\n".join(texts)
    assert len(events) > 10
    for secret in secrets:
        assert secret not in blob
