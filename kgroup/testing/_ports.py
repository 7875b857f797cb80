"""Shared plumbing for the test brokers: loopback ports, child processes, errors.

The plumbing itself is the product's (:mod:`kgroup._broker_process`, which ``kgroup demo``'s
embedded tansu uses too); it is re-exported here for the test brokers, the benchmarks and
the tests. What is the toolkit's own is :class:`Broker`, the common face of
:class:`~kgroup.testing.KafkaBroker` and :class:`~kgroup.testing.TansuBroker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .._broker_process import (
    LOOPBACK,
    BrokerStartError,
    BrokerUnavailable,
    ManagedProcess,
    ProcessBroker,
    admin_create_topic,
    free_port,
    kill_with_parent_prefix,
    log_tail,
    owned_temp_dir,
    port_is_open,
    register_child,
    run_blocking,
    unregister_child,
    wait_for_port,
)

__all__ = [
    "LOOPBACK",
    "Broker",
    "BrokerStartError",
    "BrokerUnavailable",
    "ManagedProcess",
    "ProcessBroker",
    "admin_create_topic",
    "free_port",
    "kill_with_parent_prefix",
    "log_tail",
    "owned_temp_dir",
    "port_is_open",
    "register_child",
    "run_blocking",
    "unregister_child",
    "wait_for_port",
]


class Broker(Protocol):
    """What :class:`~kgroup.testing.KafkaBroker` and :class:`~kgroup.testing.TansuBroker`
    have in common (the ``broker`` fixture yields either)."""

    kind: str

    @property
    def bootstrap(self) -> str: ...

    @property
    def port(self) -> int: ...

    def restart(self) -> None: ...

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None: ...

    async def create_topic_async(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None: ...
