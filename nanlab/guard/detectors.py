"""Spike rules from the big training systems, and nanlab's, behind one interface.

Each rule watches the per-step loss and global grad norm (before clipping) and answers one
question per step: is this step an alarm? A rule is written from its source file (named in
``source``, read at the commit cited) with the same constants, the same warm-up, the same
one- or two-sidedness and the same treatment of NaN, so that the table in
:mod:`nanlab.faults.corpus` measures the rule as shipped, not a paraphrase of it.

=================  ===============================================================
``megatron``       loss >= 10x the max |loss| of the first 100 finite losses
``lightning``      loss not lower than the last one and >= 3x the running mean of 10
``llm_foundry``    loss >= 2x the mean of the last 100, five steps in a row
``olmo_core``      loss or grad norm > mean + 6 std of the last 128, after 64 steps
``zclip``          EMA z-score of the grad norm > 2.5 (alpha 0.97), after 25 steps
``nanlab``         the guard's default: z > 6 over 20 finite losses and > 1.5x the mean
=================  ===============================================================

and two variants with rolling statistics that survive a NaN (a non-finite value never
enters the window): ``olmo_core_finite`` and ``zclip_finite``; ``nanlab_grad`` also
watches the grad norm.

>>> rule = make_detector("megatron")
>>> [rule.observe(x, 1.0) for x in [2.0] * 100 + [19.0, 20.0, float("nan")]][-3:]
[False, True, False]
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from nanlab.errors import check_choice
from nanlab.guard.spikes import SpikeWatch


def _finite(x: float) -> bool:
    return math.isfinite(x)


class Detector:
    """One spike rule: ``observe(loss, grad_norm)`` is called once per step, in order,
    and says whether that step raises an alarm. ``name`` and ``source`` say which rule it
    is and where it was read; ``nan_safe`` whether a NaN in its history is harmless.

    >>> class Above(Detector):
    ...     def observe(self, loss, grad_norm):
    ...         return loss > 4.0
    >>> alarms(Above(), [1.0, 5.0], [1.0, 1.0])
    [False, True]"""

    name = "detector"
    source = ""
    summary = ""
    nan_safe = False

    def observe(self, loss: float, grad_norm: float) -> bool:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Megatron(Detector):
    """Megatron-LM ``--check-for-spiky-loss``: ``RerunStateMachine.is_unexpectedly_large``
    with ``threshold=SPIKY_LOSS_FACTOR`` (10) and ``num_samples=100``. The max |loss| of
    the first 100 finite losses is fixed once and for all; after that, a loss at least 10x
    that max is an alarm. NaN and inf are ignored ("They should be checked separately":
    the NaN check is a different rule, fatal by default). In validate-results mode the
    very first iteration is not validated; that shifts the sample by one step only.

    >>> alarms(Megatron(), [1.0] * 100 + [9.0, 10.0], [1.0] * 102)[-2:]
    [False, True]"""

    name = "megatron"
    source = ("NVIDIA/Megatron-LM megatron/core/rerun_state_machine.py "
              "(is_unexpectedly_large); pretrain_gpt.py (SPIKY_LOSS_FACTOR = 10)")
    summary = "loss >= 10x the max of the first 100 losses"
    nan_safe = True

    def __init__(self, threshold: float = 10.0, num_samples: int = 100):
        self.threshold, self.num_samples = threshold, num_samples
        self.count, self.max_value = 0, 0.0

    def observe(self, loss, grad_norm):
        value = math.fabs(loss)
        if math.isnan(value) or math.isinf(value):
            return False
        if self.count < self.num_samples:
            self.count += 1
            self.max_value = max(self.max_value, value)
            return False
        return value >= self.max_value * self.threshold


class Lightning(Detector):
    """Lightning ``SpikeDetection`` (mode "min", window 10, warmup 1, atol None, rtol 2.0,
    finite_only True). From batch ``warmup`` on, a loss is a spike unless it is no higher
    than the last value kept (``_is_better``) and when ``|loss - mean| >= rtol * mean``
    over the running mean of the last 10 kept values: for a positive loss, >= 3x the mean.
    A spike raises and is not kept. With ``finite_only=True`` a non-finite loss *is* a
    spike (the code returns True before the tolerance test), but during the warm-up it is
    kept and poisons the mean. ``last_val`` starts at 0.0.

    >>> alarms(Lightning(), [1.0] * 10 + [3.0, 0.5], [1.0] * 12)[-2:]
    [True, False]"""

    name = "lightning"
    source = "Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/spike.py"
    summary = "loss not improving and >= 3x the running mean of 10"

    def __init__(self, window: int = 10, warmup: int = 1, atol: float | None = None,
                 rtol: float | None = 2.0, finite_only: bool = True):
        self.values: deque[float] = deque(maxlen=window)
        self.warmup, self.atol, self.rtol, self.finite_only = warmup, atol, rtol, finite_only
        self.last_val, self.batch_idx = 0.0, 0

    def _is_spike(self, loss: float) -> bool:
        running = sum(self.values) / len(self.values) if self.values else math.nan
        if self.finite_only and not _finite(loss):
            return True
        if loss - self.last_val <= 0.0:  # an improvement (mode "min")
            return False
        atol_ok = self.atol is None or abs(loss - running) >= abs(self.atol)
        rtol_ok = self.rtol is None or abs(loss - running) >= abs(self.rtol * running)
        return atol_ok and rtol_ok

    def observe(self, loss, grad_norm):
        spike = self.batch_idx >= self.warmup and self._is_spike(loss)
        self.batch_idx += 1
        if not spike and (self.finite_only or _finite(loss)):
            self.values.append(loss)  # _update_stats: also a NaN, while warming up
            self.last_val = loss
        return spike


class LLMFoundry(Detector):
    """llm-foundry ``KillLossSpike`` (patience 4, outlier_multiplier 2, window_size 100,
    loss_cap 10). Once 100 losses are in the window, a loss >= 2x their mean is an
    outlier; the fifth outlier in a row is an alarm (and every one after it while the
    streak lasts); a normal loss resets the streak. Else, after 200 steps, half the
    window above the loss cap is an alarm too. Every loss enters the window, NaN included:
    the mean is then NaN, no comparison holds, and the rule is blind for 100 steps.

    >>> alarms(LLMFoundry(), [1.0] * 100 + [10.0] * 5, [1.0] * 105)[-2:]
    [False, True]"""

    name = "llm_foundry"
    source = "mosaicml/llm-foundry llmfoundry/callbacks/kill_loss_spike_callback.py"
    summary = "loss >= 2x the mean of the last 100, five steps in a row"

    def __init__(self, patience: int = 4, outlier_multiplier: float = 2.0,
                 window_size: int = 100, loss_cap: float = 10.0):
        self.patience, self.multiplier = patience, outlier_multiplier
        self.window_size, self.loss_cap = window_size, loss_cap
        self.window: deque[float] = deque(maxlen=window_size)
        self.outliers, self.step = 0, 0

    def _spike(self, loss: float, mean: float) -> bool:
        if loss >= mean * self.multiplier:
            self.outliers += 1
            return self.outliers > self.patience
        if self.outliers > 0:
            self.outliers = 0
        return False

    def _high(self) -> bool:
        high = sum(1 for x in self.window if x > self.loss_cap)
        return self.step >= self.window_size * 2 and high >= self.window_size / 2

    def observe(self, loss, grad_norm):
        alarm = False
        if len(self.window) == self.window_size:
            mean = sum(self.window) / len(self.window)  # np.mean: NaN if one is NaN
            alarm = self._spike(loss, mean) or self._high()
        self.window.append(loss)
        self.step += 1
        return alarm


def _std_mean(values: list[float]) -> tuple[float, float]:
    """torch.std_mean: the unbiased std (n - 1) and the mean; NaN in, NaN out."""
    a = np.asarray(values, dtype=np.float64)
    if not np.isfinite(a).all():
        return math.nan, math.nan
    return float(a.std(ddof=1)), float(a.mean())


class OlmoCore(Detector):
    """OLMo-core ``SkipStepOptimizer.get_step_factor`` (rolling_interval_length 128,
    sigma_factor 6): the step is skipped unless ``loss - mean <= 6 * std`` and
    ``grad_norm - mean <= 6 * std``, each against the previous (up to) 128 values, with
    ``torch.std_mean`` (unbiased std). One-sided: only a value above the mean is skipped.
    It decides only once 64 losses (``max(2, 128 // 2)``, the current one included) are
    kept. Every value is kept, NaN included: a NaN makes the mean and std NaN, every
    comparison False, and *every* step is skipped until the NaN leaves the window, 128
    steps later. ``finite=True`` is nanlab's variant: non-finite values are never kept.
    The grad norm is watched when the trainer sets it (OLMo-core does when clipping).

    >>> wobble = [1.0, 1.1] * 40
    >>> alarms(OlmoCore(), wobble + [9.0, 0.0], wobble + [1.0, 1.0])[-2:]
    [True, False]"""

    name = "olmo_core"
    source = ("allenai/OLMo-core src/olmo_core/optim/skip_step_optimizer.py "
              "(commit fa6c501, get_step_factor)")
    summary = "loss or grad norm > mean + 6 std of the last 128, after 64"

    def __init__(self, window: int = 128, sigma: float = 6.0, watch_grad_norm: bool = True,
                 finite: bool = False):
        self.window, self.sigma = window, sigma
        self.watch_grad_norm, self.finite = watch_grad_norm, finite
        self.losses: list[float] = []
        self.norms: list[float] = []
        if finite:
            self.name, self.nan_safe = "olmo_core_finite", True
            self.summary = "olmo_core with non-finite values kept out of its window"

    def _keep(self, series: list[float], x: float) -> None:
        series.append(x)
        while len(series) > self.window + 1:
            series.pop(0)

    def _ok(self, series: list[float], x: float) -> bool:
        std, mean = _std_mean(series)
        return (x - mean) <= self.sigma * std

    def observe(self, loss, grad_norm):
        self._keep(self.losses, loss)
        if self.watch_grad_norm:
            self._keep(self.norms, grad_norm)
        if len(self.losses) < max(2, self.window // 2):
            alarm = False
        else:
            ok = self._ok(self.losses[:-1], loss)
            if self.watch_grad_norm:
                ok = ok and self._ok(self.norms[:-1], grad_norm)
            alarm = not ok
        if self.finite:  # nanlab's variant: what is not finite never stays in the window
            if not _finite(loss):
                self.losses.pop()
            if self.watch_grad_norm and not _finite(grad_norm):
                self.norms.pop()
        return alarm


class ZClip(Detector):
    """ZClip (Kumar et al. 2025, arXiv 2504.02507), mode "zscore", adaptive_scaling:
    the first 25 grad norms give the mean and the (population) variance; then
    ``z = (g - mean) / (std + 1e-6)`` and ``z > 2.5`` clips, the alarm here. The EMA
    (alpha 0.97) is then updated with the clipped value (mean + 2.5 std / (z / 2.5)) or
    with g. A NaN norm compares False (no alarm), then enters the EMA: mean and var are
    NaN for ever after, and the rule never fires again. ``finite=True`` keeps
    non-finite norms out (nanlab's variant). It watches the grad norm only.

    >>> wobble = [1.0, 1.1] * 15
    >>> alarms(ZClip(), [1.0] * 31, wobble + [9.0])[-1]
    True"""

    name = "zclip"
    source = "bluorion-com/ZClip zclip/zclip.py (commit 584ce4f, ZClip.step)"
    summary = "EMA z-score of the grad norm > 2.5 (alpha 0.97), after 25 steps"

    def __init__(self, alpha: float = 0.97, z_thresh: float = 2.5, eps: float = 1e-6,
                 warmup_steps: int = 25, finite: bool = False):
        self.alpha, self.z_thresh, self.eps = alpha, z_thresh, eps
        self.warmup_steps, self.finite = warmup_steps, finite
        self.buffer: list[float] = []
        self.mean = self.var = math.nan
        self.initialized = False
        if finite:
            self.name, self.nan_safe = "zclip_finite", True
            self.summary = "zclip with non-finite grad norms kept out of its EMA"

    def observe(self, loss, grad_norm):
        g = grad_norm
        if self.finite and not _finite(g):
            return False
        if not self.initialized:
            self.buffer.append(g)
            if len(self.buffer) >= self.warmup_steps:
                self.mean = sum(self.buffer) / len(self.buffer)
                self.var = sum((x - self.mean) ** 2 for x in self.buffer) / len(self.buffer)
                self.initialized, self.buffer = True, []
            return False
        std = self.var ** 0.5
        z = (g - self.mean) / (std + self.eps)
        clip = None
        if z > self.z_thresh:
            clip = self.mean + (self.z_thresh * std) / (z / self.z_thresh)
        value = clip if clip is not None else g
        self.mean = self.alpha * self.mean + (1 - self.alpha) * value
        self.var = self.alpha * self.var + (1 - self.alpha) * (value - self.mean) ** 2
        return clip is not None


class Nanlab(Detector):
    """nanlab's guard (:class:`~nanlab.guard.spikes.SpikeWatch`, its defaults): a loss more
    than ``z`` std above the mean of the last ``window`` finite losses and at least
    ``(1 + rtol)`` times that mean, after ``warmup`` finite values; with
    ``watch_grad_norm`` the grad norm too. One-sided; non-finite values never enter the
    window, as in the guard (which handles a NaN with its own check).

    >>> alarms(Nanlab(), [1.0, 1.1] * 15 + [float("nan"), 9.0], [1.0] * 32)[-2:]
    [False, True]"""

    name = "nanlab"
    source = "nanlab nanlab/guard/spikes.py (SpikeWatch, as the Guard uses it)"
    nan_safe = True

    def __init__(self, watch_grad_norm: bool = False, **settings):
        self.watch = SpikeWatch(watch_grad_norm=watch_grad_norm, **settings)
        d = self.watch.loss
        self.summary = (f"z > {d.z:g} over {d.window} finite losses and > "
                        f"{1 + d.rtol:g}x their mean" + (", or the grad norm alike"
                                                           if watch_grad_norm else ""))
        if watch_grad_norm:
            self.name = "nanlab_grad"
        if settings:
            self.name += "(" + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")"

    def observe(self, loss, grad_norm):
        finite = _finite(loss) and _finite(grad_norm)  # as Guard.check: a finite step only
        spike = finite and self.watch.test(loss, grad_norm)[1]
        if finite:
            self.watch.observe(loss, grad_norm)
        return spike


RULES: dict[str, Callable[[], Detector]] = {
    "megatron": Megatron,
    "lightning": Lightning,
    "llm_foundry": LLMFoundry,
    "olmo_core": OlmoCore,
    "olmo_core_finite": lambda: OlmoCore(finite=True),
    "zclip": ZClip,
    "zclip_finite": lambda: ZClip(finite=True),
    "nanlab": Nanlab,
    "nanlab_grad": lambda: Nanlab(watch_grad_norm=True),
}
DEFAULT = "nanlab"  # the guard's spike detector with its default settings


def make_detector(name: str) -> Detector:
    """A fresh detector of the rule ``name`` (one of :data:`RULES`).

    >>> make_detector("olmo_core").source.split()[0]
    'allenai/OLMo-core'
    """
    check_choice("rule", name, tuple(RULES))
    return RULES[name]()


def alarms(detector: Detector, losses, grad_norms) -> list[bool]:
    """Replay a series through a fresh detector: one alarm flag per step.

    >>> alarms(make_detector("nanlab"), [1.0] * 25 + [9.0], [1.0] * 26)[-1]
    True
    """
    pairs = zip(losses, grad_norms, strict=True)
    return [bool(detector.observe(float(x), float(g))) for x, g in pairs]
