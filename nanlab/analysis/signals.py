"""Reading a loss curve: spikes, recovery, divergence, stalls.

Small pure functions over an array of losses, shared by the plots, the tests and the
labs, so that "a spike" means the same thing everywhere. Whether a whole run is healthy
(and if not: spike, stall, divergence, non-finite, crash) is one verdict, made from these
by :func:`nanlab.analysis.judge.judge` for the fault x fix matrix, ``diagnose`` and the STAR story.

>>> import numpy as np
>>> losses = np.r_[np.linspace(3, 1, 30), 6.0, np.linspace(1, 0.5, 20)]
>>> find_spikes(losses)
[30]
"""

from __future__ import annotations

import numpy as np

SPIKE_WINDOW = 20  # steps of history a spike is measured against
SPIKE_FACTOR = 3.0  # a non-negative loss this many times its running median is a spike
SPIKE_Z = 6.0  # and the jump is this many robust deviations (1.4826 x MAD) of the window
NOISE_FLOOR = 0.01  # the deviation counts as at least 1 % of the window's level or range


def spike_bar(window, floor: float = 0.0, factor: float = SPIKE_FACTOR,
              z: float = SPIKE_Z) -> float:
    """The loss above which the next step is a spike, given the last finite losses
    (``window``) and the curve's ``floor``: 0 for a loss that never went negative (as
    cross-entropy), else the lowest loss so far (a Gaussian NLL, a flow's likelihood).

    Both bars must be passed, neither a ratio to the raw median, so any loss scale and
    sign reads the same: the jump above the window's median is ``factor - 1`` times the
    median's height above the floor, and ``z`` times the window's robust spread (1.4826
    x its median absolute deviation, at least 1 % of its level or range: its noise).

    >>> spike_bar([2.0] * 5)  # a non-negative loss: 3x its median
    6.0
    >>> round(spike_bar([-1.0, -1.1, -1.2, -1.3, -1.4], floor=-1.4), 2)  # signed
    -0.31
    """
    w = np.asarray(window, dtype=float)
    med = float(np.median(w))
    noise = max(1.4826 * float(np.median(np.abs(w - med))),
                NOISE_FLOOR * max(abs(med), float(np.ptp(w))))
    return med + max((factor - 1) * (med - min(floor, 0.0)),
                     z * noise)


def find_spikes(losses, window: int = SPIKE_WINDOW, factor: float = SPIKE_FACTOR) -> list[int]:
    """Steps whose finite loss jumps above :func:`spike_bar` of the previous ``window``
    finite losses (after 5 of them). Non-finite losses are not spikes (they are worse)
    and are skipped. Any scale and sign: a loss that falls below zero is not a spike.

    >>> find_spikes([3.0, 2.5, 2.2, 2.0, 1.9, 1.8, 9.0, 1.7, float("nan")])
    [6]
    >>> find_spikes([-1.0, -1.1, -1.2, -1.3, -1.4, -1.5, -1.45])
    []
    >>> find_spikes([2e4, 1.9e4, 1.8e4, 1.7e4, 1.6e4, 1.5e4, 9e4])
    [6]
    """
    losses = np.asarray(losses, dtype=float)
    spikes, history, lowest = [], [], 0.0
    for step, loss in enumerate(losses):
        if not np.isfinite(loss):
            continue
        if len(history) >= min(window, 5) and \
                loss > spike_bar(history[-window:], lowest, factor):
            spikes.append(step)
        history.append(loss)
        lowest = min(lowest, loss)
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


def is_stalled(losses, start_loss: float | None = None, fraction: float = 0.85,
               floor: float | None = None) -> bool:
    """True when the loss ended above ``fraction`` of the way from its ``floor`` to where
    it started: nothing learned. The floor is 0 for a loss that never went negative; for
    one that did (an NLL), the lowest loss, and then a fall within the last window's
    noise (3 robust deviations) is no fall either.

    >>> is_stalled([3.47] * 50), is_stalled([3.47, 2.0, 0.5])
    (True, False)
    >>> is_stalled([-1.0, -1.02, -0.99, -1.01] * 10), is_stalled(-np.arange(40) / 10)
    (True, False)
    """
    losses = np.asarray(losses, dtype=float)
    finite = losses[np.isfinite(losses)]
    start = start_loss if start_loss is not None else losses[0]
    end = final_loss(losses)
    if not np.isfinite(end):
        return False
    if floor is None:
        floor = min(0.0, float(finite.min()))
    if floor < 0:
        tail = finite[-SPIKE_WINDOW:]
        noise = 1.4826 * float(np.median(np.abs(tail - np.median(tail))))
        if start - end <= 3 * noise:
            return True
    return bool(end > floor + fraction * (start - floor))
