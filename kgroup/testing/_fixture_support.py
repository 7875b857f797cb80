"""What the plugin's fixture modules share: skipping when a broker cannot run, and the
list of broker logs the terminal summary points at.

:mod:`kgroup.testing.plugin` and :mod:`kgroup.testing._proxy_fixtures` both import from
here (and the plugin imports the proxy fixtures), so the imports form a DAG.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from ._ports import BrokerUnavailable

__all__ = ["on_ci", "start_or_skip", "started_logs", "unavailable"]

_T = TypeVar("_T")

#: ``(fixture name, log path)`` of every broker a fixture started; after failures the
#: plugin's terminal summary says where they are (they outlive the session).
started_logs: list[tuple[str, Path]] = []


def on_ci() -> bool:
    """Whether the ``CI`` environment variable is set to something true."""
    value = os.environ.get("CI", "").strip().lower()
    return value not in ("", "0", "false", "no")


def unavailable(exc: BrokerUnavailable) -> NoReturn:
    """Skip (or, under CI, fail) because a broker cannot run on this machine."""
    if on_ci():
        pytest.fail(f"broker unavailable under CI: {exc}", pytrace=False)
    pytest.skip(str(exc))


def start_or_skip(start: Callable[[], _T]) -> _T:
    """``start()``, turning :class:`BrokerUnavailable` into a skip (a failure under CI)."""
    try:
        return start()
    except BrokerUnavailable as exc:
        problem = exc
    unavailable(problem)  # outside the except block: no chained traceback in the report
