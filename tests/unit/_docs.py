"""Run the code the docs print: the first ``python`` block after a heading."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_doc_example(page: str, heading: str) -> dict[str, object]:
    """Execute the first ```python block after ``heading`` in ``docs/<page>``; its names."""
    text = (ROOT / "docs" / page).read_text()
    section = text.split(heading, 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, f"no python block after {heading!r} in {page}"
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), page, "exec"), namespace)
    return namespace
