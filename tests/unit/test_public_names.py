"""Users are never told to import a private module: the README, the docs and the examples use only
kgroup's public names (``kgroup``, ``kgroup.testing``, ``kgroup.fastapi``)."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

import kgroup

ROOT = pathlib.Path(__file__).parents[2]
PRIVATE = re.compile(r"\bkgroup(?:\.[a-z_]+)*\._[a-z]\w*")
USER_FACING = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "examples").glob("*.py")),
]


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: p.name)
def test_no_private_module_in_user_facing_text(path: pathlib.Path) -> None:
    text = path.read_text()
    code = (
        "\n".join(re.findall(r"```python\n(.*?)```", text, re.S)) if path.suffix == ".md" else text
    )
    assert PRIVATE.findall(code) == []


def test_every_error_class_is_exported_and_in_the_tree() -> None:
    errors = [
        name
        for name in kgroup.__all__
        if isinstance(getattr(kgroup, name), type) and issubclass(getattr(kgroup, name), Exception)
    ]
    tree = kgroup.KGroupError.__module__
    doc = __import__("kgroup._errors", fromlist=["_"]).__doc__ or ""
    assert tree == "kgroup"
    missing = [name for name in errors if name not in doc]
    assert missing == []
    assert {"InternalError", "OffsetsError", "AuthenticationFailed"} <= set(errors)


def _fixture_functions() -> list[tuple[str, Any]]:
    from kgroup.testing import _proxy_fixtures, plugin

    found = []
    for module in (plugin, _proxy_fixtures):
        for name, obj in vars(module).items():
            function = getattr(obj, "_fixture_function", None)
            if function is not None and not name.startswith("_"):
                found.append((name, function))
    return found


@pytest.mark.parametrize(
    "name,function",
    _fixture_functions(),
    # Stable ids (no object addresses): pytest-xdist workers must collect the same names.
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__module__", "?").rpartition(".")[2],
)
def test_public_fixtures_hand_out_public_types(name: str, function: Any) -> None:
    """What kgroup.testing's fixtures give a test is a type the test can import from
    kgroup.testing (or kgroup) by its public name."""
    import kgroup.testing

    public = set(kgroup.testing.__all__) | set(kgroup.__all__)
    annotation = str(function.__annotations__.get("return", ""))
    named = set(re.findall(r"\b([A-Z][A-Za-z]+)\b", annotation))
    generic = {"Iterator", "AsyncIterator", "Callable", "Any", "None"}
    assert named - generic <= public, f"{name} -> {annotation}"
