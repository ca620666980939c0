"""Errors written for people: what was wrong, the value given, and what is allowed."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from typing import Any


class NanlabError(ValueError):
    """A bad value from the user. The message alone says how to fix it.

    A ``ValueError``, so ``except ValueError`` catches it too.

    >>> try:
    ...     check_range("steps", -3, 1, integer=True)
    ... except NanlabError as err:
    ...     print(err)
    steps=-3 is out of range; allowed: an integer >= 1
    """


class Terminated(SystemExit):
    """Raised by ``Trainer.run`` after a SIGTERM, once the run is saved: a ``SystemExit``
    with status 143 (128 + SIGTERM, the shell's convention), so a script under a
    scheduler ends quietly as it was asked to, its final checkpoint written.

    >>> err = Terminated("terminated (SIGTERM) at step 7; resume it")
    >>> err.code, str(err)
    (143, 'terminated (SIGTERM) at step 7; resume it')
    """

    def __init__(self, message: str = "terminated (SIGTERM)"):
        super().__init__(TERMINATED_STATUS)
        self.message = message

    def __str__(self) -> str:
        return self.message


TERMINATED_STATUS = 143  # 128 + SIGTERM (15)


class StorageError(OSError):
    """A file nanlab had to write or read could not be: the disk is full, the folder is
    not writable, or the path is not a regular file inside the folder. Not a training
    failure and not a bad value: the message says which, where, and what to do.

    >>> err = StorageError("no space left on device", "runs/a/ckpt.pt", "free some space")
    >>> err.reason, str(err)
    ('no space left on device', 'runs/a/ckpt.pt: no space left on device; free some space')
    """

    def __init__(self, reason: str, path: object, todo: str):
        super().__init__(f"{path}: {reason}; {todo}")
        self.reason, self.path, self.todo = reason, str(path), todo

    def __str__(self) -> str:
        return self.args[0]


def check_choice(name: str, value, allowed: Iterable) -> None:
    """Raise unless ``value`` is one of ``allowed``.

    >>> check_choice("precision", "fp16", ["fp32", "fp16", "bf16"])
    """
    allowed = list(allowed)
    if value not in allowed:
        options = ", ".join(repr(a) for a in allowed)
        raise NanlabError(f"{name}={value!r} is not allowed; choose one of {options}")


def check_range(name: str, value, low=None, high=None, *, integer: bool = False) -> None:
    """Raise unless ``low <= value <= high`` (either bound may be None).

    >>> check_range("steps", 200, 1, integer=True)
    """
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise NanlabError(f"{name}={value!r} must be {kind}{_bounds(low, high)}")
    if value != value or (low is not None and value < low) or (high is not None and value > high):
        raise NanlabError(f"{name}={value!r} is out of range; allowed: {kind}{_bounds(low, high)}")


def _bounds(low, high) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""


def error_line(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message.

    >>> error_line(IndexError("Target 40 is out of bounds.\\nmore"))
    'IndexError: Target 40 is out of bounds.'
    """
    return (f"{type(e).__name__}: {e}".splitlines() or [type(e).__name__])[0]


def require_installed(package: str, extra: str) -> None:
    """Refuse in one line, as :func:`require` does, when an optional package is missing,
    without importing it (importing nbformat loads jsonschema's format checkers: over a
    second at the top of every lab, for a package only the notebook tools use).

    >>> require_installed("math", "course")
    """
    if importlib.util.find_spec(package) is None:
        raise _missing(package, extra)


def require(package: str, extra: str) -> Any:
    """Import an optional package, or raise one line naming the nanlab extra that installs it.

    >>> require("math", "hf").pi > 3
    True
    """
    try:
        return importlib.import_module(package)
    except ImportError:
        raise _missing(package, extra) from None


def _missing(package: str, extra: str) -> NanlabError:
    return NanlabError(f"this needs the optional package {package!r}, which is not "
                       f"installed; install it with: pip install 'nanlab[{extra}]'")
