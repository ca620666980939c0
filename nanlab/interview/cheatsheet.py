"""The cheat sheet: the one-page SOP, kept as Markdown in ``cheat_sheet.md`` (package data)."""

from __future__ import annotations

from importlib import resources


def cheat_sheet() -> str:
    """The one-page SOP for the night before, as Markdown (English with Chinese terms).

    >>> "data -> AMP off -> LR / 10" in cheat_sheet()
    True
    """
    return resources.files("nanlab.interview").joinpath("cheat_sheet.md").read_text(
        encoding="utf-8")
