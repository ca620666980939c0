"""A flag that says "this code runs in fp32 on purpose", for emulations to respect.

:mod:`nanlab.debug.precision_bisect` runs one module of a mixed-precision step in fp32
(autocast disabled, inputs widened). Real autocast casts nothing inside such a region;
an emulation of fp16 that rounds values by hand (the ``fp16_overflow`` fault on a model
nanlab did not make) reads :func:`in_fp32_region` and rounds nothing there either.
Outside a region (every ordinary run) the flag is off and nothing changes.
"""

from __future__ import annotations

import contextlib
import threading

_STATE = threading.local()


def in_fp32_region() -> bool:
    """True inside :func:`fp32_region` (on this thread).

    >>> in_fp32_region()
    False
    """
    return getattr(_STATE, "depth", 0) > 0


def enter() -> None:
    """Open a region (for hooks that cannot use a ``with`` block); pair with :func:`leave`.

    >>> enter(); inside = in_fp32_region(); leave()
    >>> inside, in_fp32_region()
    (True, False)
    """
    _STATE.depth = getattr(_STATE, "depth", 0) + 1


def leave() -> None:
    """Close the region :func:`enter` opened.

    >>> with fp32_region():
    ...     pass
    >>> leave()  # nothing open: stays off
    >>> in_fp32_region()
    False
    """
    _STATE.depth = max(0, getattr(_STATE, "depth", 0) - 1)


@contextlib.contextmanager
def fp32_region():
    """The code inside runs in fp32 on purpose; regions nest.

    >>> with fp32_region():
    ...     in_fp32_region()
    True
    """
    enter()
    try:
        yield
    finally:
        leave()


__all__ = ["enter", "fp32_region", "in_fp32_region", "leave"]
