"""The learner's progress file: which exercises and questions they tried, and which they got.

A small local JSON file, so a learner can close JupyterLab and see tomorrow where they were.
Default ``~/.nanlab/progress.json``; set ``NANLAB_PROGRESS`` to put it elsewhere (CI points it
at a temporary file). It is written atomically (a temporary file, then ``os.replace``) so a
kernel killed mid-write never leaves half a file. A corrupt file is set aside with a warning
and progress starts fresh: losing a progress record must never stop a lab from running.

Layout::

    {"version": 1,
     "labs": {"01_numbers": {"is_finite_report": {"kind": "exercise", "answered": true,
                                                  "correct": true, "attempts": 2, ...}}}}
"""

from __future__ import annotations

import json
import os
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nanlab.atomic import atomic_write

ENV_VAR = "NANLAB_PROGRESS"
VERSION = 1

_current_lab = "unknown"


def progress_path() -> Path:
    """Where progress is kept: ``$NANLAB_PROGRESS`` or ``~/.nanlab/progress.json``.

    >>> progress_path().suffix
    '.json'
    """
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".nanlab" / "progress.json"


def set_lab(lab: str) -> None:
    """Name the lab that later checks and widgets record under (called once per notebook).

    >>> set_lab("01_numbers")  # doctest: +SKIP
    """
    global _current_lab
    if not isinstance(lab, str) or not lab.strip():
        raise ValueError(f"lab={lab!r} must be a non-empty string such as '01_numbers'")
    _current_lab = lab


def current_lab() -> str:
    """The lab named by the last ``set_lab`` call ("unknown" before any).

    >>> current_lab()  # doctest: +SKIP
    '01_numbers'
    """
    return _current_lab


def load(path: str | Path | None = None) -> dict[str, Any]:
    """Read the progress file; a missing file is empty progress, a corrupt one is set aside.

    >>> load()["version"]  # doctest: +SKIP
    1
    """
    path = Path(path) if path is not None else progress_path()
    if not path.exists():
        return _empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        _validate(data)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
            where = f"; the old file is kept as {aside}"
        except OSError:
            where = ""
        warnings.warn(
            f"progress file {path} could not be read ({err}); starting fresh{where}",
            stacklevel=2,
        )
        return _empty()
    return data


def record(
    lab: str | None,
    item: str,
    *,
    correct: bool,
    answered: bool = True,
    kind: str = "exercise",
    hints_used: int | None = None,
    path: str | Path | None = None,
) -> dict[str, Any]:
    """Add one attempt at ``item`` in ``lab`` and save; returns that item's entry.

    ``answered=False`` (a stub not filled in, an empty widget) notes that the learner got
    here without counting an attempt. A file that cannot be written gives a warning, not an
    error, so a read-only home directory never breaks a lab.

    >>> record("01_numbers", "fp16-max", correct=True)["attempts"]  # doctest: +SKIP
    1
    """
    path = Path(path) if path is not None else progress_path()
    lab = lab or current_lab()
    data = load(path)
    now = _now()
    entry = data["labs"].setdefault(lab, {}).setdefault(
        item,
        {
            "kind": kind,
            "answered": False,
            "correct": False,
            "attempts": 0,
            "hints_used": 0,
            "first_seen": now,
            "last_attempt": None,
            "solved_at": None,
        },
    )
    if answered:
        entry["answered"] = True
        entry["attempts"] += 1
        entry["last_attempt"] = now
        entry["correct"] = bool(correct)
        if correct and entry["solved_at"] is None:
            entry["solved_at"] = now
    if hints_used is not None:
        entry["hints_used"] = max(entry["hints_used"], hints_used)
    try:
        _write_atomically(path, data)
    except OSError as err:
        warnings.warn(f"could not save progress to {path} ({err}); set {ENV_VAR}", stacklevel=2)
    return entry


def summary(path: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Per lab: how many items were seen, answered and correct, and the attempts made.

    >>> summary()  # doctest: +SKIP
    {'01_numbers': {'seen': 5, 'answered': 4, 'correct': 3, 'attempts': 7}}
    """
    out: dict[str, dict[str, int]] = {}
    for lab, items in sorted(load(path)["labs"].items()):
        out[lab] = {
            "seen": len(items),
            "answered": sum(e["answered"] for e in items.values()),
            "correct": sum(e["correct"] for e in items.values()),
            "attempts": sum(e["attempts"] for e in items.values()),
        }
    return out


def show_progress(path: str | Path | None = None) -> str:
    """Print and return a per-lab summary a learner can read at a glance.

    >>> text = show_progress()  # doctest: +SKIP
    01_numbers: 3 of 5 correct (4 answered, 7 attempts)
    """
    path = Path(path) if path is not None else progress_path()
    data = load(path)
    lines = [f"Progress ({path})"]
    if not data["labs"]:
        lines.append("  nothing recorded yet: run a check cell or a practice question")
    for lab, counts in summary(path).items():
        lines.append(
            f"{lab}: {counts['correct']} of {counts['seen']} correct "
            f"({counts['answered']} answered, {counts['attempts']} attempts)"
        )
        for item, entry in sorted(data["labs"][lab].items()):
            mark = "x" if entry["correct"] else ("~" if entry["answered"] else " ")
            tries = entry["attempts"]
            lines.append(f"  [{mark}] {item} ({tries} attempt{'' if tries == 1 else 's'})")
    text = "\n".join(lines)
    print(text)
    return text


def _empty() -> dict[str, Any]:
    return {"version": VERSION, "labs": {}}


def _validate(data: Any) -> None:
    """Raise ValueError unless ``data`` has the layout this module writes."""
    if not isinstance(data, dict) or not isinstance(data.get("labs"), dict):
        raise ValueError("expected an object with a 'labs' object")
    for lab, items in data["labs"].items():
        if not isinstance(items, dict):
            raise ValueError(f"lab {lab!r} is not an object")
        for item, entry in items.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("attempts"), int):
                raise ValueError(f"entry {lab}/{item} has no integer 'attempts'")
            entry.setdefault("hints_used", 0)
            entry.setdefault("answered", False)
            entry.setdefault("correct", False)


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file in the same folder, then rename over the old file."""
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
