"""Fixtures every test directory shares."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog


@pytest.fixture(autouse=True)
def _structlog_config() -> Iterator[None]:
    """structlog's configuration as each test found it: code under test may configure it
    for the process (``kgroup demo`` filters below WARNING), and a later test in the same
    worker that captures info events would then see none."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """Everything the running event loop's exception handler would have printed (for
    example "Task exception was never retrieved"), collected instead."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
    finally:
        loop.set_exception_handler(previous)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``make test`` runs the chaos suite beside the unit tests and the simulation on
    pytest-xdist workers (``--dist loadgroup``): the chaos schedules, which start private
    brokers and member processes and mostly wait on them, go one after another in two
    groups, ``chaos-0`` and ``chaos-1`` (alternate schedules), each on one worker."""
    chaos = 0
    for item in items:
        if "chaos" in item.path.parts and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"chaos-{chaos % 2}"))
            chaos += 1
    # The simulation's parts first among single tests (xdist hands out groups, largest
    # first, then single tests in this order): each is long, on niced processes.
    items.sort(key=lambda item: getattr(item, "originalname", "") != "test_schedules")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Under pytest-xdist the chaos schedules ran in a worker, and tests/chaos/conftest.py
    is not loaded in the controller: print their summary here, from the totals each worker
    wrote (``chaos-totals.json`` in its base temp directory)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or hasattr(config, "workerinput") or config.getoption("dist", "no") == "no":
        return
    from tests.chaos._cases import merged_totals, write_summary

    write_summary(
        terminalreporter, merged_totals(sorted(factory.getbasetemp().glob("*/chaos-totals.json")))
    )
