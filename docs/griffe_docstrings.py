"""A griffe extension for the API reference (``mkdocs.yml``: mkdocstrings' ``extensions``).

nanlab's docstrings are written for ``help()`` and doctest: ``>>>`` examples, ``::``
literal blocks, ``:class:`x``` roles. Markdown reads a doctest line as prose (and
``x[0]["reason"]`` as a reference link), so each doctest block becomes a fenced ``pycon``
block, a literal block's ``::`` a ``:``, and a role its name in code.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj):`~?([^`]+)`")


def markdown_of(text: str) -> str:
    """The docstring ``text`` with its doctest blocks fenced and its roles as code."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip():  # a doctest block ends at a blank line
                block.append(lines[i][len(indent):] if lines[i].startswith(indent)
                             else lines[i].lstrip())
                i += 1
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"]
            continue
        out.append(re.sub(r"::$", ":", ROLE.sub(r"`\1`", line)))
        i += 1
    return "\n".join(out)


class DoctestToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
