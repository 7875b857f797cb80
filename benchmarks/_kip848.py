"""The KIP-848 ``consumer`` group protocol in ``membership.py``: its configurations.

A label ``CLIENT-848`` (``kgroup-848``, ``java-848``, ``confluent-848``) is ``CLIENT`` with
``group.protocol=consumer``: the child gets ``--group-protocol consumer`` and no assignor
(the broker assigns with its default ``uniform`` assignor; kgroup, the Java client and
librdkafka all refuse a client-side assignor, session timeout or heartbeat interval under
that protocol). Its rebalance callbacks are incremental, like cooperative ones.

The broker owns a consumer group's session and heartbeat interval (Kafka's defaults: 45 s
and 5 s). So that the comparison with the classic configurations is fair, every ``-848``
group gets the classic members' ``--session-ms`` / ``--heartbeat-ms`` as its own
``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` before its first
member starts (:func:`kgroup.testing.set_consumer_group_timeouts`, Kafka 4.x group
configs); kgroup's members get the same session as ``consumer_session_timeout_ms``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

__all__ = [
    "CLIENTS_848",
    "SUFFIX",
    "give_group_timings",
    "is_848",
    "split_label",
    "unavailable_848",
]

SUFFIX = "-848"
#: The clients that speak the consumer protocol (aiokafka and kafka-python do not).
CLIENTS_848 = ("kgroup" + SUFFIX, "java" + SUFFIX, "confluent" + SUFFIX)
#: What the table shows in the assignor column: the broker's default server assignor.
SERVER_ASSIGNOR = "uniform (broker)"


def is_848(label: str) -> bool:
    return label.endswith(SUFFIX)


def split_label(label: str) -> tuple[str, list[str]]:
    """``kgroup-848`` → (``kgroup``, ``["--group-protocol", "consumer"]``); any other label
    is its own client, with no extra arguments."""
    if is_848(label):
        return label[: -len(SUFFIX)], ["--group-protocol", "consumer"]
    return label, []


def unavailable_848(label: str, broker: str) -> str | None:
    """Why a ``-848`` configuration cannot run on ``broker`` (None: it can)."""
    if not is_848(label):
        return None
    if label not in CLIENTS_848:
        return f"{label[: -len(SUFFIX)]} has no KIP-848 consumer protocol"
    if broker != "kafka":
        return f"{broker} has no ConsumerGroupHeartbeat (KIP-848): Apache Kafka 4.x only"
    return None


def give_group_timings(
    bootstrap: str | Sequence[str], group: str, session_ms: int, heartbeat_ms: int
) -> None:
    """Set ``group``'s consumer-protocol session and heartbeat interval on the broker (a
    blocking call: the orchestrator is synchronous)."""
    from kgroup.testing import set_consumer_group_timeouts

    asyncio.run(
        set_consumer_group_timeouts(
            bootstrap, group, session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms
        )
    )
