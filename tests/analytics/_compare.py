"""Comparing the job's tables with the reference: rows sorted, floats to 1e-9."""

from __future__ import annotations

import math
from typing import Any

from kgroup.analytics import TABLES

__all__ = ["assert_tables_equal", "key"]


def _norm(v: Any) -> Any:
    return (0, "") if v is None else (1, v)


def key(row: dict[str, Any], columns: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(_norm(round(row[c], 6) if isinstance(row[c], float) else row[c]) for c in columns)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def assert_tables_equal(
    got: dict[str, list[dict[str, Any]]],
    want: dict[str, list[dict[str, Any]]],
    skip: tuple[str, ...] = ("summary",),
) -> None:
    """Every table of ``want`` (but ``skip``) equals ``got``'s, row for row after sorting."""
    for name, columns in TABLES.items():
        if name in skip:
            continue
        g = sorted(got[name], key=lambda r: key(r, columns))
        w = sorted(want[name], key=lambda r: key(r, columns))
        assert len(g) == len(w), f"{name}: {len(g)} rows, reference {len(w)}"
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            bad = [c for c in columns if not _same(a[c], b[c])]
            assert not bad, f"{name} row {i}: {bad}\n job: {a}\n ref: {b}"
