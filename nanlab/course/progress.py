"""The learner's progress file: which exercises and questions they tried, and which they got.

A small local JSON file, so a learner can close JupyterLab and see tomorrow where they were.
Default ``~/.nanlab/progress.json``; set ``NANLAB_PROGRESS`` to put it elsewhere (CI points it
at a temporary file). It is written atomically (a temporary file, then ``os.replace``) so a
kernel killed mid-write never leaves half a file.

Losing a progress record must never stop a lab from running, and a learner's record is
never thrown away. The recovery rule, for a file that cannot be read whole (not UTF-8, not
JSON, not a JSON object, a lab or an entry that is not an object, a field missing or of
the wrong type):

- ``load`` never raises: it keeps every lab and entry it can read, repairs a bad field to
  its default (an entry without a usable ``attempts`` counts 0), drops what is not an
  object, and warns once, naming the file and the first thing wrong;
- the next save first copies the original bytes to ``<name>.bad-<UTC time>`` next to it
  (renames the file there if it cannot even be read), then writes the repaired record; a
  backup that cannot be made means the new record is not saved, so nothing is lost;
- ``NANLAB_PROGRESS`` naming a folder, or a path under a file, is one warning: progress is
  not saved, and that folder or file is never renamed, written or removed.

Layout::

    {"version": 1,
     "labs": {"01_numbers": {"is_finite_report": {"kind": "exercise", "answered": true,
                                                  "correct": true, "attempts": 2, ...}}}}

``answer_shown`` notes that the learner asked for the answer (a question's **Show answer**,
an exercise's ``solution(name)``); ``solved_after_answer`` that the first right answer came
after that, so a check passed after reading the reference solution is told apart, in
``summary`` and ``show_progress``, from one passed alone.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanlab.runs.atomic import atomic_write

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
    """Read the progress file; never raises. A missing file is empty progress; from an
    unreadable or damaged one, what can be read (one warning says what was wrong).

    >>> load()["version"]  # doctest: +SKIP
    1
    """
    path = Path(path) if path is not None else progress_path()
    state = _read(path)
    _warn(state)
    return state.data


def record(
    lab: str | None,
    item: str,
    *,
    correct: bool,
    answered: bool = True,
    kind: str = "exercise",
    hints_used: int | None = None,
    answer_shown: bool = False,
    prediction: Any = None,
    path: str | Path | None = None,
) -> dict[str, Any]:
    """Add one attempt at ``item`` in ``lab`` and save; returns that item's entry; never raises.

    ``answered=False`` (a stub not filled in, an empty widget) notes that the learner got
    here without counting an attempt. ``answer_shown`` notes that the learner asked for
    the answer (or the reference solution); a first right answer after that is marked
    ``solved_after_answer``. ``prediction`` (a JSON value) stores a committed prediction,
    once: the first one stays. A file that cannot be written gives a warning, not an
    error, so a read-only home directory never breaks a lab. A damaged file is backed up
    as ``<name>.bad-<time>`` before the repaired record replaces it.

    >>> record("01_numbers", "fp16-max", correct=True)["attempts"]  # doctest: +SKIP
    1
    """
    path = Path(path) if path is not None else progress_path()
    lab = lab or current_lab()
    state = _read(path)
    _warn(state)
    data = state.data
    now = _now()
    entry = data["labs"].setdefault(lab, {}).setdefault(item, _new_entry(kind, now))
    if answered:
        entry["answered"] = True
        entry["attempts"] += 1
        entry["last_attempt"] = now
        entry["correct"] = bool(correct)
        if correct and entry["solved_at"] is None:
            entry["solved_at"] = now
            entry["solved_after_answer"] = entry.get("answer_shown", False)
    if isinstance(hints_used, int):
        entry["hints_used"] = max(entry["hints_used"], hints_used)
    if answer_shown:
        entry["answer_shown"] = True
    if prediction is not None and "prediction" not in entry:
        entry["prediction"] = prediction
    if not state.writable:
        return entry  # the warning above said why; the folder or file there is left alone
    try:
        if state.problems:
            _back_up(path, state.raw)
        _write_atomically(path, data)
    except OSError as err:
        warnings.warn(f"could not save progress to {path} ({err}); set {ENV_VAR}", stacklevel=2)
    return entry


def entry(lab: str | None, item: str, path: str | Path | None = None) -> dict[str, Any] | None:
    """The record of ``item`` in ``lab`` (None if there is none); never raises or writes.

    >>> entry("no-such-lab", "no-such-item") is None  # doctest: +SKIP
    True
    """
    state = _read(Path(path) if path is not None else progress_path())
    return state.data["labs"].get(lab or current_lab(), {}).get(item)


def summary(path: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Per lab: how many items were seen, answered and correct, the attempts made, and how
    many of the correct ones were first solved after the answer or solution was shown.

    >>> summary()  # doctest: +SKIP
    {'01_numbers': {'seen': 5, 'answered': 4, 'correct': 3, 'attempts': 7, 'after_answer': 1}}
    """
    return _summary(load(path))


def show_progress(path: str | Path | None = None) -> str:
    """Print and return a per-lab summary a learner can read at a glance; never raises.

    >>> text = show_progress()  # doctest: +SKIP
    01_numbers: 3 of 5 correct (4 answered, 7 attempts)
    """
    path = Path(path) if path is not None else progress_path()
    state = _read(path)
    _warn(state)
    data = state.data
    lines = [f"Progress ({path})"]
    if state.problems and not state.writable:
        lines.append(f"  (not saved: {state.problems[0]})")
    elif state.problems:
        lines.append(f"  (damaged: {state.problems[0]}; showing what could be read)")
    if not data["labs"]:
        lines.append("  nothing recorded yet: run a check cell or a practice question")
    for lab, counts in _summary(data).items():
        after = counts["after_answer"]
        lines.append(
            f"{lab}: {counts['correct']} of {counts['seen']} correct "
            f"({counts['answered']} answered, {counts['attempts']} attempts)"
            + (f"; {after} of them after seeing the answer" if after else "")
        )
        for item, entry in sorted(data["labs"][lab].items()):
            mark = "x" if entry["correct"] else ("~" if entry["answered"] else " ")
            tries = entry["attempts"]
            note = f"{tries} attempt{'' if tries == 1 else 's'}"
            if entry["correct"] and entry.get("solved_after_answer"):
                shown = "solution" if entry["kind"] == "exercise" else "answer"
                note += f", solved after seeing the {shown}"
            elif entry.get("answer_shown"):
                note += f", {'solution' if entry['kind'] == 'exercise' else 'answer'} seen"
            lines.append(f"  [{mark}] {item} ({note})")
    text = "\n".join(lines)
    print(text)
    return text


def _empty() -> dict[str, Any]:
    return {"version": VERSION, "labs": {}}


def _new_entry(kind: str, now: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "answered": False,
        "correct": False,
        "attempts": 0,
        "hints_used": 0,
        "first_seen": now,
        "last_attempt": None,
        "solved_at": None,
    }


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# Field -> (accepts, default). Files written before ``hints_used`` existed lack the first
# three fields: those are filled in silently; any other missing or bad field is a problem.
_FIELDS: dict[str, tuple[Any, Any]] = {
    "hints_used": (_count, 0),
    "answered": (lambda v: isinstance(v, bool), False),
    "correct": (lambda v: isinstance(v, bool), False),
    "attempts": (_count, 0),
    "kind": (lambda v: isinstance(v, str), "exercise"),
    "first_seen": (lambda v: v is None or isinstance(v, str), None),
    "last_attempt": (lambda v: v is None or isinstance(v, str), None),
    "solved_at": (lambda v: v is None or isinstance(v, str), None),
}
_SILENT = ("hints_used", "answered", "correct")
# Written only once they are True (an entry without them reads False); a bad value is a
# problem, repaired to False.
_FLAGS = ("answer_shown", "solved_after_answer")


@dataclass
class _State:
    """What reading the progress file found."""

    path: Path
    data: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    raw: bytes | None = None  # the file's bytes, when they could be read
    writable: bool = True  # False: the path is a folder, under a file, or not a plain file


def _read(path: Path) -> _State:
    """Read and repair ``path``; never raises, never changes anything on disk."""
    try:
        if path.is_dir():
            return _State(path, _empty(), [f"it is a folder, not a file; set {ENV_VAR} to a "
                                           "file path such as ~/.nanlab/progress.json"],
                          writable=False)
        if not path.exists():
            parent = next((p for p in path.parents if p.exists()), None)
            if parent is not None and not parent.is_dir():
                return _State(path, _empty(), [f"{parent} is a file, not a folder; set "
                                               f"{ENV_VAR} to a file path in a folder"],
                              writable=False)
            return _State(path, _empty())
        if not path.is_file():
            return _State(path, _empty(), ["it is not a plain file"], writable=False)
        raw = path.read_bytes()
    except OSError as err:
        return _State(path, _empty(), [f"it could not be read ({_reason(err)})"])
    state = _State(path, _empty(), raw=raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        state.problems.append(f"it is not UTF-8 text ({err.reason} at byte {err.start})")
        text = raw.decode("utf-8-sig", errors="replace")
    try:
        loaded = json.loads(text)
    except (ValueError, RecursionError) as err:
        state.problems.append(f"it is not JSON ({_reason(err)})")
        return state
    _repair(loaded, state)
    return state


def _repair(loaded: Any, state: _State) -> None:
    """Copy into ``state.data`` every lab and entry of ``loaded`` that can be used."""
    problems = state.problems
    if not isinstance(loaded, dict):
        problems.append(f"it holds a JSON {type(loaded).__name__}, not an object")
        return
    labs = loaded.get("labs")
    if not isinstance(labs, dict):
        problems.append("it has no 'labs' object" if labs is None else
                        f"'labs' is a {type(labs).__name__}, not an object")
        labs = {}
    version = loaded.get("version", VERSION)
    if version != VERSION:
        problems.append(f"'version' is {_brief(version)}; this nanlab reads version {VERSION}")
    for key, value in loaded.items():
        if key not in ("labs", "version"):
            state.data[key] = value  # something a newer nanlab wrote: kept as it is
    for lab, items in labs.items():
        if not isinstance(items, dict):
            problems.append(f"lab {lab!r} is not an object (dropped)")
            continue
        kept: dict[str, Any] = {}
        for item, entry in items.items():
            if not isinstance(entry, dict):
                problems.append(f"entry {lab}/{item} is not an object (dropped)")
                continue
            for name, (ok, default) in _FIELDS.items():
                if name not in entry:
                    if name not in _SILENT:
                        problems.append(f"entry {lab}/{item}: {name!r} is missing")
                    entry[name] = default
                elif not ok(entry[name]):
                    problems.append(f"entry {lab}/{item}: {name!r} is not valid "
                                    f"({_brief(entry[name])})")
                    entry[name] = default
            for name in _FLAGS:
                if name in entry and not isinstance(entry[name], bool):
                    problems.append(f"entry {lab}/{item}: {name!r} is not valid "
                                    f"({_brief(entry[name])})")
                    entry[name] = False
            kept[item] = entry
        if kept or not items:
            state.data["labs"][lab] = kept


def _warn(state: _State) -> None:
    if not state.problems:
        return
    more = len(state.problems) - 1
    also = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    if not state.writable:
        then = "progress is not saved"
    else:
        kept = "kept what could be read" if state.data["labs"] else "starting fresh"
        how = "moved to" if state.raw is None else "kept as"
        then = (f"{kept}; the original is {how} {state.path.name}.bad-<time> when progress "
                "is next saved")
    warnings.warn(f"progress file {state.path}: {state.problems[0]}{also}; {then}",
                  stacklevel=3)


def _back_up(path: Path, raw: bytes | None) -> Path:
    """Keep the damaged file as ``<name>.bad-<UTC time>`` (never over an existing file)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        backup = path.with_name(f"{path.name}.bad-{stamp}" + (f"-{n}" if n else ""))
        try:
            if raw is None:  # it could not be read: move it aside instead of copying it
                if backup.exists():
                    continue
                os.rename(path, backup)
            else:
                with open(backup, "xb") as f:
                    f.write(raw)
                    f.flush()
                    os.fsync(f.fileno())
            return backup
        except FileExistsError:
            continue
    raise OSError(f"no free backup name for {path}")


def _summary(data: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for lab, items in sorted(data["labs"].items()):
        out[lab] = {
            "seen": len(items),
            "answered": sum(e["answered"] for e in items.values()),
            "correct": sum(e["correct"] for e in items.values()),
            "attempts": sum(e["attempts"] for e in items.values()),
            "after_answer": sum(bool(e["correct"] and e.get("solved_after_answer"))
                                for e in items.values()),
        }
    return out


def _brief(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file in the same folder, then rename over the old file."""
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
