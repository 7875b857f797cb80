"""What the integration suites share: the config every member of a test group starts from.

Test modules import it as ``from tests.integration.conftest import group_config`` (``tests`` is
a namespace package; pytest's ``pythonpath`` puts the checkout on ``sys.path``).
"""

from __future__ import annotations

from typing import Any, Protocol

from kgroup import GroupConfig

# The integration members' timings: a session short enough that an expiry costs seconds, and
# heartbeats well inside it. Tests that assert on elapsed time read these.
SESSION_MS = 6_000
HEARTBEAT_MS = 500


class HasBootstrap(Protocol):
    """A broker, cluster, proxy or fake broker: anything with a ``bootstrap`` address."""

    @property
    def bootstrap(self) -> str: ...


def group_config(
    broker: str | HasBootstrap, group: str, topic: str, **overrides: Any
) -> GroupConfig:
    """A :class:`GroupConfig` for one member of ``group`` subscribed to ``topic``.

    ``broker`` is a bootstrap address or anything with a ``bootstrap`` attribute. The defaults
    are a 6 s session, 500 ms heartbeats, a 30 s max poll interval and a 10 s request timeout;
    ``overrides`` replaces any field (``functools.partial`` binds a module's own defaults).
    """
    values: dict[str, Any] = {
        "bootstrap_servers": broker if isinstance(broker, str) else broker.bootstrap,
        "group_id": group,
        "topics": [topic],
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "max_poll_interval_ms": 30_000,
        "request_timeout_ms": 10_000,
    }
    values.update(overrides)
    return GroupConfig(**values)
