"""Griffe extension: read kgroup's reStructuredText-flavoured docstrings as Markdown.

kgroup's docstrings are written for ``help()`` and Sphinx habits: ``:class:`~kgroup.X```
roles, ``Example::`` literal blocks and bullet lists right under a line of text. The API
reference renders Markdown, so before rendering this extension turns

- a role (``:class:``, ``:meth:``, ``:attr:``, ``:func:``, ``:data:``, ``:mod:``,
  ``:exc:``) into inline code (``~`` keeps the last name only, as in Sphinx);
- a paragraph ending in ``::`` followed by an indented block into a Python code fence;
- a bullet list directly under a line of text into a list Markdown recognises (a blank line
  before it).

The docstrings themselves are not changed.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|attr|func|data|mod|exc|obj):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1) == "~":
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdownify(text: str) -> str:
    text = _ROLE.sub(_role, text)
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.strip().startswith(("-", "*", "|")):
            # A literal block: the paragraph keeps one colon, the block becomes a fence.
            head = line.rstrip()[:-1]
            out.append(head if head.strip() != ":" else "")
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            indent = len(lines[i]) - len(lines[i].lstrip())
            block: list[str] = []
            while j < len(lines) and (
                not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
            ):
                block.append(lines[j])
                j += 1
            while block and not block[-1].strip():
                block.pop()
            if block:
                out += ["", "```python", textwrap.dedent("\n".join(block)), "```", ""]
                i = j
                continue
            i += 1
            continue
        starts_list = re.match(r"\s*[-*] ", line) is not None
        if starts_list and out and out[-1].strip() and not re.match(r"\s*[-*] |\s{2,}", out[-1]):
            out.append("")
        out.append(line)
        i += 1
    return "\n".join(out)


class RstToMarkdown(griffe.Extension):
    """Rewrite every docstring griffe loads (see the module docstring)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdownify(obj.docstring.value)
