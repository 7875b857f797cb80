"""A failing log sink never costs a member its membership (on Apache Kafka).

Members whose every log call raises (stdout a closed pipe; a full disk) go through a
rebalance and a broker outage (one member black-holed by the fault proxy past its session
timeout, so it is evicted, reports its partitions lost and rejoins): the group converges as
it does with a working sink, no partition is held twice (MemberGroup checks on exit), and
nothing escapes to asyncio's exception handler.

And as a service would meet it: a member process whose stdout is a closed pipe, with
structlog's default printer, keeps retrying its coordinator lookup and closes cleanly; the
failure is reported once on stderr, never "Task exception was never retrieved".
"""

from __future__ import annotations

import errno
import functools
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from kgroup.testing import KafkaBroker, MemberGroup, ProxiedBroker, covered
from tests.integration.conftest import SESSION_MS, group_config

# Behind a proxy, a member gives up on a request after 3 s and backs off at most 0.5 s.
member_config = functools.partial(group_config, request_timeout_ms=3_000, retry_backoff_max_ms=500)


class _FailingSink:
    """A structlog logger whose every call raises ``error``."""

    def __init__(self, error: OSError) -> None:
        self._error = error
        self.calls = 0

    def msg(self, message: str) -> None:
        self.calls += 1
        raise self._error

    log = debug = info = warning = warn = error = exception = critical = msg


SINK_ERRORS = {
    "closed_pipe": BrokenPipeError(errno.EPIPE, "Broken pipe"),
    "full_disk": OSError(errno.ENOSPC, "No space left on device"),
}


@pytest.mark.kafka
@pytest.mark.parametrize("failure", sorted(SINK_ERRORS))
async def test_members_with_a_failing_log_sink_rebalance_and_survive_an_outage(
    failure: str,
    proxied_kafka: ProxiedBroker[KafkaBroker],
    make_topic: Callable[..., str],
    unique_group: str,
    loop_errors: list[dict[str, Any]],
) -> None:
    proxy = proxied_kafka.proxy
    topic = make_topic(6, broker=proxied_kafka.broker)
    sink = _FailingSink(SINK_ERRORS[failure])
    saved = structlog.get_config()
    structlog.configure(logger_factory=lambda *args: sink, cache_logger_on_first_use=False)
    try:
        async with MemberGroup() as group:
            direct = await group.start(
                member_config(proxied_kafka.direct_bootstrap, unique_group, topic), name="direct"
            )
            await group.wait_until(lambda: covered([direct], topic, 6), timeout=60, what="one")
            # A rebalance: the second member joins.
            behind = await group.start(
                member_config(proxied_kafka.bootstrap, unique_group, topic), name="behind-proxy"
            )
            both = [direct, behind]

            def shared() -> bool:
                return covered(both, topic, 6) and all(r.assignment for r in both)

            await group.wait_until(shared, timeout=60, what="both stable")
            generation = behind.member.generation.generation_id
            before = behind.member.stats().log_sink_failures

            # An outage for one member, past its session timeout: evicted, lost, rejoined.
            proxy.black_hole()
            await group.wait_until(
                lambda: covered([direct], topic, 6),
                timeout=SESSION_MS / 1000 + 30,
                what="takeover",
            )
            proxy.heal()
            await group.wait_until(shared, timeout=60, what="rejoined")
            assert behind.member.generation.generation_id > generation
            assert any(e.callback == "on_partitions_lost" for e in behind.events)
            assert behind.member.stats().log_sink_failures > before
            assert not behind.errors and not direct.errors
    finally:
        structlog.configure(**saved)
    assert sink.calls > 0
    assert loop_errors == []


_CLOSED_STDOUT_MEMBER = textwrap.dedent(
    """
    import asyncio, os, sys

    from kgroup import GroupConfig, GroupMember

    async def main() -> None:
        config = GroupConfig(
            bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"],
            retry_backoff_ms=10, retry_backoff_max_ms=20, request_timeout_ms=1000,
        )
        failures = []
        async with GroupMember(config) as member:
            member.add_event_hook(
                lambda name, fields: failures.append(name)
                if name == "member.coordinator_lookup_failed" else None
            )
            while len(failures) < 20:
                await member.poll(timeout=0.05)
            sys.stderr.write(f"lookups failed: {len(failures)}; "
                             f"sink failures: {member.stats().log_sink_failures}\\n")

    asyncio.run(main())
    os._exit(0)  # the interpreter's own flush of the closed stdout at exit is not ours
    """
)


def test_a_member_whose_stdout_is_a_closed_pipe_keeps_working() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLOSED_STDOUT_MEMBER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the log shipper died
    try:
        err = proc.stderr.read()
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.stderr.close()
    assert code == 0, err
    assert "Task exception was never retrieved" not in err, err
    assert err.count("kgroup: a log sink raised") == 1, err
    found = re.search(r"lookups failed: (\d+); sink failures: (\d+)", err)
    assert found is not None, err
    assert int(found[1]) >= 20 and int(found[2]) >= 20, err
