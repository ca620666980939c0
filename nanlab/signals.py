"""Reading a loss curve: spikes, recovery, divergence, stalls.

Small pure functions over an array of losses, shared by the plots, the tests and the
labs, so that "a spike" means the same thing everywhere. Whether a whole run is healthy
(and if not: spike, stall, divergence, non-finite, crash) is one verdict, made from these
by :func:`nanlab.judge.judge` for the fault x fix matrix, ``diagnose`` and the STAR story.

>>> import numpy as np
>>> losses = np.r_[np.linspace(3, 1, 30), 6.0, np.linspace(1, 0.5, 20)]
>>> find_spikes(losses)
[30]
"""

from __future__ import annotations

import numpy as np

SPIKE_WINDOW = 20  # steps of history a spike is measured against
SPIKE_FACTOR = 3.0  # a loss this many times the running median is a spike


def find_spikes(losses, window: int = SPIKE_WINDOW, factor: float = SPIKE_FACTOR) -> list[int]:
    """Steps whose finite loss exceeds ``factor`` x the median of the previous ``window``
    finite losses. Non-finite losses are not spikes (they are worse) and are skipped.

    >>> find_spikes([3.0, 2.5, 2.2, 2.0, 1.9, 1.8, 9.0, 1.7, float("nan")])
    [6]
    """
    losses = np.asarray(losses, dtype=float)
    spikes, history = [], []
    for step, loss in enumerate(losses):
        if not np.isfinite(loss):
            continue
        if len(history) >= min(window, 5) and loss > factor * np.median(history[-window:]):
            spikes.append(step)
        history.append(loss)
    return spikes


def recovery_steps(losses, spike: int, window: int = SPIKE_WINDOW) -> int | None:
    """Steps after ``spike`` until the loss is back at or below its level before the
    spike (the median of the ``window`` steps before it); None if it never returns.

    >>> recovery_steps([2.0, 2.0, 2.0, 9.0, 4.0, 2.5, 1.9], spike=3)
    3
    """
    losses = np.asarray(losses, dtype=float)
    before = losses[max(0, spike - window):spike]
    before = before[np.isfinite(before)]
    if not len(before):
        return None
    level = np.median(before)
    for k in range(spike + 1, len(losses)):
        if np.isfinite(losses[k]) and losses[k] <= level:
            return k - spike
    return None


def final_loss(losses, last: int = 10) -> float:
    """Mean of the last ``last`` finite losses (NaN if there are none).

    >>> final_loss([3.0, 1.0, 0.5, float("nan")], last=2)
    0.75
    """
    losses = np.asarray(losses, dtype=float)
    finite = losses[np.isfinite(losses)]
    return float(finite[-last:].mean()) if len(finite) else float("nan")


def is_stalled(losses, start_loss: float | None = None, fraction: float = 0.85) -> bool:
    """True when the loss ended above ``fraction`` of where it started: nothing learned.

    >>> is_stalled([3.47] * 50), is_stalled([3.47, 2.0, 0.5])
    (True, False)
    """
    losses = np.asarray(losses, dtype=float)
    start = start_loss if start_loss is not None else losses[0]
    end = final_loss(losses)
    return bool(np.isfinite(end) and end > fraction * start)
