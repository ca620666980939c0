"""One judge of a run: is its loss curve healthy, and if not, what went wrong, in words.

The fault x fix matrix ("is this fault cured by this fix?"), ``diagnose`` ("is this
replay healthy?") and the STAR story ("did the fixed run work?") all ask the same
question of a run, so they all ask :func:`judge`. It reads the recorded steps (loss,
finiteness, whether a non-finite step's update was skipped) and a crash if there was
one, and returns a :class:`Verdict`: a kind and a sentence with the numbers.

The kinds, checked in this order (the first that fits is the verdict):

- ``error``:     the run crashed (an illegal label, an assert);
- ``nonfinite``: a non-finite loss or gradient reached the update (or the last
  ``STREAK`` steps were all non-finite, even if skipped: nothing is learning any more);
- ``spike``:     a finite loss that jumps above its running median by twice the median's
  height above the loss's floor and by 6 robust deviations (:func:`find_spikes`), after
  the first ``SPIKE_GRACE`` steps;
- ``stall``:     the loss ended above 85 % of the way from its floor to its start
  (:func:`is_stalled`): it hardly moved;
- ``diverge``:   finite, but the final loss (mean of the last 10) is above the limit: it
  rose above its start, gave back what it learned, or learns far too little (the
  reason says which: "climbing back" or "learning too little");
- ``contained``: non-finite steps happened, every one skipped before it reached the
  weights, and the loss is fine otherwise (the symptom is handled, the cause is not);
- ``healthy``:   none of the above.

A finite run that ends 10 % above where it started, or gives back more than half of
what it had learned (``RISE_FRACTION``), diverged; one that ends above 85 % of its start
(``STALL_FRACTION``) stalled. Heights are measured from the loss's floor
(:func:`loss_floor`): 0, or the lowest loss of one that goes negative (a Gaussian NLL, a
flow), so any scale and sign reads the same.

How well it must have learned has three reference points, named in the verdict:

- ``clean``: a **clean run** is known (``clean=``: its final loss, its losses or the run):
  the final loss must stay within ``CLEAN_FACTOR`` x the clean one + ``CLEAN_MARGIN``
  (the fault x fix matrix);
- ``bad run``: the replay of a bad run that had learned for ``MIN_BEFORE`` steps or more
  before its failure (``baseline=``, the bad run; :func:`failure_point`): at that
  step the replay must be at least as far as the bad run was (within ``BEHIND_FACTOR``),
  and then keep learning (below ``LEARN_FRACTION`` of its start, or below the bad run's
  loss at its failure when that is higher: a slow learner). A bad run that stayed
  finite (its failure is its whole curve) is beaten by ending below ``BETTER_FACTOR`` of
  its final loss; one that failed before it learned (at step 0) only asks the replay to
  learn (below ``LEARN_FRACTION`` of its start). This is how diagnose proves a fix on
  any model, whatever its loss scale and learning speed;
- ``start``: neither: the final loss must come down to ``START_FRACTION`` of the
  first (the toy starts near 3.5 and a clean run reaches about 7 % of that in 120
  steps). Only this rule can tell a slow learner from a healthy one, so it is the
  fallback, never the first choice.

>>> import numpy as np
>>> fall = 3.5 * np.exp(-np.arange(100) / 20)
>>> judge(fall).kind, judge(fall, clean=0.03).kind
('healthy', 'healthy')
>>> print(judge(np.r_[fall[:50], np.full(50, np.nan)]).reason)
non-finite at step 50
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nanlab.analysis.signals import final_loss, find_spikes, is_stalled, recovery_steps
from nanlab.errors import NanlabError

FAILURES = ("nonfinite", "error", "spike", "diverge", "stall")  # what a bad run shows
VERDICTS = ("healthy", "contained", *FAILURES)
SPIKE_GRACE = 10  # spikes in the first 10 steps are a fresh model's noise, not a verdict
STREAK = 10  # this many non-finite steps in a row at the end: the run has stopped learning
CLEAN_FACTOR, CLEAN_MARGIN = 3.0, 0.25  # against a clean run: final <= 3 x clean + 0.25
START_FRACTION = 0.3  # with no reference at all: final <= 30 % of the first loss
MIN_BEFORE = 10  # a bad run that learned this many steps before failing is a reference
BEHIND_FACTOR = 1.1  # at the bad run's failure step the replay is within 10 % of it
LEARN_FRACTION = 0.7  # against the bad run: the replay ends below 70 % of its start
BETTER_FACTOR = 0.7  # and below 70 % of where a finite bad run ended
RISE_FRACTION = 0.5  # a run that gave back more than half of what it learned diverged
RISE_ABOVE_START = 0.1  # or one that ended 10 % above where it started
CLIMB_FRACTION = 0.1  # above its limit and 10 % of its learning back up: it diverges
STALL_FRACTION = 0.85  # signals.is_stalled's bar: ended above 85 % of the start
SMOOTH = 5  # losses are compared as running means of 5 steps


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` concluded about one run: a kind (one of ``VERDICTS``), a
    sentence with the numbers, and the numbers themselves.

    ``step`` is where it showed (the crash, the first non-finite step, the spike);
    ``limit`` the final loss the run was held to and ``reference`` what that limit
    was measured from ("clean" or "start").

    >>> v = Verdict("spike", "a spike at step 30 to 6.00", step=30, start=3.0, end=0.5)
    >>> v.healthy, v.outcome, str(v)
    (False, 'not cured', 'spike at step 30: a spike at step 30 to 6.00')
    """

    kind: str
    reason: str
    step: int | None = None
    start: float = math.nan  # the first finite loss
    end: float = math.nan  # the final loss (mean of the last 10 finite losses)
    limit: float = math.nan
    reference: str = "start"
    first_nonfinite: int | None = None  # the first non-finite step, skipped or not

    @property
    def healthy(self) -> bool:
        """True only for a run with nothing wrong at all (not even a skipped step)."""
        return self.kind == "healthy"

    @property
    def outcome(self) -> str:
        """The fault x fix matrix's word for it: "cured", "contained" or "not cured"."""
        return {"healthy": "cured", "contained": "contained"}.get(self.kind, "not cured")

    def __str__(self) -> str:
        where = f" at step {self.step}" if self.step is not None else ""
        return f"{self.kind}{where}: {self.reason}"


def loss_limit(start: float, clean: float | None = None, floor: float = 0.0
               ) -> tuple[float, str]:
    """The final loss a run is held to, and which reference point it comes from.

    Against a clean run's final loss when it is known, otherwise against the start;
    every fraction is of the height above ``floor`` (:func:`loss_floor`: 0 for a
    non-negative loss), so a loss below zero is held to the same bar.

    >>> loss_limit(2.0)
    (0.6, 'start')
    >>> loss_limit(2.0, clean=0.25)
    (1.0, 'clean')
    >>> loss_limit(1.0, floor=-2.0)  # an NLL from 1.0 whose lowest was -2.0
    (-1.1, 'start')
    """
    if clean is not None and math.isfinite(clean):
        return _above(floor, CLEAN_FACTOR, clean) + CLEAN_MARGIN, "clean"
    return _above(floor, START_FRACTION, start), "start"


def loss_floor(*curves: Any) -> float:
    """What a loss is measured from: 0 when no finite loss of ``curves`` is negative
    (cross-entropy, MSE), else the lowest (a Gaussian NLL or a flow has no floor at 0).

    >>> loss_floor([3.0, 1.0]), loss_floor([1.0, -2.0], [0.5, -1.0])
    (0.0, -2.0)
    """
    lowest = 0.0
    for curve in curves:
        if curve is None or isinstance(curve, (int, float, np.floating)):
            values = np.asarray([] if curve is None else [curve], dtype=float)
        else:
            values = _read(curve)[1]
        values = values[np.isfinite(values)]
        if len(values):
            lowest = min(lowest, float(values.min()))
    return lowest


def _above(floor: float, fraction: float, ref: float) -> float:
    """``fraction`` of the way from ``floor`` to ``ref`` (``fraction x ref`` for floor 0)."""
    return floor + fraction * (ref - floor)


def judge(run: Any, *, clean: Any = None, baseline: Any = None,
          watch: tuple[str, ...] = FAILURES) -> Verdict:
    """Judge a run's loss curve: healthy, or which failure, with a reason in words.

    ``run`` is anything with recorded steps: a :class:`nanlab.faults.FaultRun` or a
    :class:`nanlab.train.Trainer` (their crash and weights are read too), a
    :class:`nanlab.runs.record.RunRecord`, or a plain sequence of losses (a NaN is a
    non-finite step, never skipped). ``clean`` is the clean run to compare with: its
    final loss, its losses, or the run itself (None: judged against the start).
    ``watch`` names the failures looked for; a curve's spike or stall that is not
    watched is passed over (the final-loss limit still applies). ``baseline`` is the
    bad run a replay is compared with (see the module's reference points).

    >>> import numpy as np
    >>> fall = 3.5 * np.exp(-np.arange(100) / 20)
    >>> judge(np.r_[fall[:60], 8.0, fall[60:]]).kind
    'spike'
    >>> print(judge(np.linspace(3.5, 1.5, 100)).reason)
    finite, but learning too little: the loss went 3.5 -> 1.59, above 1.05 (30 % of the start)
    >>> print(judge(fall, clean=0.03).reason)
    finite and learning: loss 3.50 -> 0.0314 (clean 0.03)
    """
    rows, losses, error, error_step = _read(run)
    clean_final = _clean_final(clean)
    if error:
        return _verdict("error", f"crashed at step {error_step}: {error}", error_step,
                        rows, losses, clean_final)
    if not rows:
        raise NanlabError("this run has no steps to judge")
    bad = [r for r in rows if not r.get("finite", True)]
    poisoned = [r for r in bad if not r.get("skipped")]
    if poisoned:
        weights = _weights_finite(run)
        # A NaN loss need not poison the weights: with every target masked the loss is
        # 0 / 0 but the gradient is 0, so the update is finite.
        where = {None: "", True: ", the weights stayed finite",
                 False: ", reached the weights"}[weights]
        step = poisoned[0]["step"]
        return _verdict("nonfinite", f"non-finite at step {step}{where}", step, rows, losses,
                        clean_final)
    if len(bad) >= STREAK and not any(r.get("finite", True) for r in rows[-STREAK:]):
        return _verdict("nonfinite", f"every step non-finite from step {bad[0]['step']} "
                        "(all skipped)", bad[0]["step"], rows, losses, clean_final)
    start, end = _start(losses), final_loss(losses)
    floor = loss_floor(losses, baseline, clean_final)
    limit, reference = _limit(start, clean_final, baseline, floor)
    behind = None
    point = failure_point(baseline) if reference == "bad run" else None
    if point is not None:  # the replay is held to the bad run, not to an absolute bar
        at, level = point
        mine = _smoothed_at(losses, at)
        # within 10 % of its height above 0; for a signed loss, of what the bad run learned
        slack = (BEHIND_FACTOR - 1) * (level - floor if floor == 0 else _start(
            _read(baseline)[1]) - level)
        if math.isfinite(mine) and mine > level + slack:
            behind = (f"behind the bad run: loss {mine:.3g} at step {at}, where the bad "
                      f"run had {level:.3g} before it failed")
    but = "finite, but " if not bad else f"{len(bad)} non-finite step(s) skipped, but "
    spikes = [s for s in find_spikes(losses) if s >= SPIKE_GRACE] if "spike" in watch else []
    if spikes:
        s = spikes[0]
        back = recovery_steps(losses, s)
        return _verdict("spike", f"{but}a spike at step {s} to {losses[s]:.2f}"
                        + (f" (back in {back} steps)" if back else ""), s, rows, losses,
                        clean_final)
    rise = _rise(losses, start, end, floor)
    if rise:
        return _verdict("diverge", f"{but}{rise}", None, rows, losses, clean_final, baseline)
    if "stall" in watch and is_stalled(losses, start_loss=start, fraction=STALL_FRACTION,
                                       floor=floor):
        return _verdict("stall", f"{but}stalled: loss {start:.2f} -> {end:.3g}", None, rows,
                        losses, clean_final, baseline)
    if behind:
        return _verdict("stall", f"{but}{behind}", None, rows, losses, clean_final, baseline)
    if end > limit:  # far above where it should be: climbing back, or learning too little
        against = _against(reference, clean_final)
        climbing = _climbing(losses, start, end)
        return _verdict("diverge",
                        f"{but}{climbing or 'learning too little: '}the loss went "
                        f"{start:.3g} -> {end:.3g}, above {limit:.3g} ({against})", None, rows,
                        losses, clean_final, baseline)
    versus = ""
    if reference == "clean":
        versus = f" (clean {clean_final:.3g})"
    elif reference == "bad run" and failure_point(baseline):
        at, level = failure_point(baseline)
        versus = f" (the bad run: running mean {level:.3g} at step {at}, then it failed)"
    elif reference == "bad run" and _finite_end(baseline) is not None:
        versus = f" (the bad run ended at {_finite_end(baseline):.3g})"
    elif reference == "bad run":
        versus = " (the bad run failed before it learned)"
    if bad:
        return _verdict("contained", f"{len(bad)} non-finite step(s) from step "
                        f"{bad[0]['step']}, all skipped; final loss {end:.3g}{versus}",
                        bad[0]["step"], rows, losses, clean_final, baseline)
    return _verdict("healthy", f"finite and learning: loss {start:.2f} -> {end:.3g}{versus}",
                    None, rows, losses, clean_final, baseline)


def _limit(start: float, clean_final: float | None, baseline: Any, floor: float = 0.0
           ) -> tuple[float, str]:
    """The highest final loss that still counts as learning, and its reference point."""
    limit, reference = loss_limit(start, clean_final, floor)
    if reference != "start" or baseline is None:
        return limit, reference
    learn = _above(floor, LEARN_FRACTION, start)
    worse, point = _finite_end(baseline), failure_point(baseline)
    if worse is not None and point is None:  # a finite bad run: beat it
        return min(learn, _above(floor, BETTER_FACTOR, worse)), "bad run"
    if point is not None:  # learned, then failed: end below where it failed (a slow learner
        return max(learn, point[1]), "bad run"  # may not reach 70 % of its start by then)
    return learn, "bad run"  # failed before it learned


def _against(reference: str, clean_final: float | None) -> str:
    if reference == "clean":
        return f"{CLEAN_FACTOR:g} x clean {clean_final:.3g} + {CLEAN_MARGIN:g}"
    if reference == "bad run":
        return (f"{LEARN_FRACTION * 100:g} % of the start, and {BETTER_FACTOR * 100:g} % of a "
                "finite bad run's end")
    return f"{START_FRACTION * 100:g} % of the start"


def _finite_end(bad: Any) -> float | None:
    """The final loss of a bad run that stayed finite and never crashed (its failure is
    its whole curve), else None."""
    rows, losses, error, _ = _read(bad)
    if error or any(not r.get("finite", True) for r in rows) or not len(losses):
        return None
    end = final_loss(losses)
    return end if math.isfinite(end) else None


def failure_point(bad: Any) -> tuple[int, float] | None:
    """(step, loss) where a bad run failed after learning: the step before its first
    non-finite step, its crash or its first spike, or the bottom of a divergence (the
    loss rose from there); its loss there as a running mean. None when it failed within
    ``MIN_BEFORE`` steps or had not learned by then (its loss above 85 % of its start):
    then there is nothing to be as good as.

    >>> import numpy as np
    >>> fall = 3.5 * np.exp(-np.arange(60) / 20)
    >>> failure_point(np.r_[fall[:40], np.full(10, np.nan)])[0]
    40
    >>> print(failure_point(np.r_[fall[:5], np.full(10, np.nan)]))
    None
    """
    rows, losses, error, error_step = _read(bad)
    steps = [r["step"] for r in rows if not r.get("finite", True)]
    spikes = [s for s in find_spikes(losses) if s >= SPIKE_GRACE]
    candidates = [s for s in (steps[:1] + spikes[:1] + ([error_step] if error else []))
                  if s is not None]
    if candidates:
        at = min(candidates)
    else:
        start, end = _start(losses), final_loss(losses)
        if not _rise(losses, start, end, loss_floor(losses)):
            return None  # a slow or flat curve: no step where it was better than now
        at = int(np.nanargmin(_running_mean(losses))) + SMOOTH
    if at < MIN_BEFORE:
        return None
    level, start = _smoothed_at(losses, at), _start(losses)
    if not (math.isfinite(level) and level <= _above(loss_floor(losses), STALL_FRACTION,
                                                     start)):
        return None  # it had not learned before it failed: nothing to be as good as
    return at, level


def gives_reference(bad: Any) -> bool:
    """Whether a bad run sets a bar of its own for a replay: it learned before it failed
    (:func:`failure_point`), or it stayed finite and ended low enough that beating its
    end asks more than learning at all (one that diverged far above its start does not).
    When it sets none, a replay only has to learn at all, a weak proof: diagnose then
    keeps looking for a cause whose fix learns further.

    >>> import numpy as np
    >>> gives_reference(np.r_[np.full(40, 3.5), np.full(10, np.nan)])
    False
    """
    if failure_point(bad) is not None:
        return True
    _, losses, _, _ = _read(bad)
    start, floor = _start(losses), loss_floor(losses)
    limit, _ = _limit(start, None, bad, floor)
    return limit < _above(floor, LEARN_FRACTION, start)  # a finite bad run that ended low


def _running_mean(losses: np.ndarray) -> np.ndarray:
    """The mean of each window of ``SMOOTH`` losses (NaN where one is not finite)."""
    if len(losses) < SMOOTH:
        return np.array([np.nan])
    return np.convolve(losses, np.ones(SMOOTH) / SMOOTH, mode="valid")


def _smoothed_at(losses: np.ndarray, step: int) -> float:
    """The mean of the finite losses of the ``SMOOTH`` steps before ``step``."""
    window = losses[max(0, step - SMOOTH):step]
    window = window[np.isfinite(window)]
    return float(window.mean()) if len(window) else math.nan


def _rise(losses: np.ndarray, start: float, end: float, floor: float = 0.0) -> str | None:
    """A sentence when a finite curve went back up: above its start, or more than half of
    what it had learned given back; None otherwise (a curve still falling, however
    slowly, is not diverging). Heights are measured from ``floor``."""
    if not (math.isfinite(start) and math.isfinite(end)):
        return None
    if end > start + RISE_ABOVE_START * (start - floor if floor < 0 else abs(start)):
        return f"the loss rose: {start:.3g} -> {end:.3g} (above where it started)"
    finite = losses[np.isfinite(losses)]
    means = _running_mean(finite)
    if not np.isfinite(means).any():
        return None
    best = float(np.nanmin(means))
    height = start - floor if floor < 0 else abs(start)
    learned = start - best > (1 - STALL_FRACTION) * height  # more than a stall's worth
    if learned and end > best + RISE_FRACTION * (start - best):
        at = int(np.nanargmin(means)) + SMOOTH - 1
        return (f"the loss went {start:.3g} -> {best:.3g} (step {at}) -> {end:.3g}: it gave "
                "back more than half of what it had learned")
    return None


def _climbing(losses: np.ndarray, start: float, end: float) -> str:
    """'climbing back: ' when the curve ends above its best (running mean) by more than
    ``CLIMB_FRACTION`` of what it had learned, else '' (still falling, or flat)."""
    finite = losses[np.isfinite(losses)]
    means = _running_mean(finite)
    if not np.isfinite(means).any():
        return ""
    best = float(np.nanmin(means))
    return "climbing back: " if end > best + CLIMB_FRACTION * (start - best) else ""


# -- reading what was passed -----------------------------------------------------------
def _read(run: Any) -> tuple[list[dict], np.ndarray, str | None, int | None]:
    """(step rows, losses, crash message, crash step) of a run, a record or a curve."""
    record = getattr(run, "record", run)
    if hasattr(record, "steps") and hasattr(record, "losses"):
        rows = list(record.steps)
        losses = np.asarray(record.losses(), dtype=float)
    else:
        losses = np.asarray(run, dtype=float).reshape(-1)
        rows = [{"step": i, "loss": float(x), "finite": bool(np.isfinite(x)),
                 "skipped": False} for i, x in enumerate(losses)]
    if hasattr(run, "error"):  # a FaultRun says whether it crashed
        return rows, losses, run.error, run.error_step
    crash = getattr(record, "crash", (None, None))  # a Trainer or a record: its error event
    return rows, losses, *crash


def _clean_final(clean: Any) -> float | None:
    if clean is None:
        return None
    if isinstance(clean, (int, float, np.floating)):
        return float(clean)
    return final_loss(_read(clean)[1])


def _weights_finite(run: Any) -> bool | None:
    model = getattr(getattr(run, "trainer", run), "model", None)
    if model is None or not hasattr(model, "parameters"):
        return None
    return all(bool(p.isfinite().all()) for p in model.parameters())


def _start(losses: np.ndarray) -> float:
    finite = losses[np.isfinite(losses)]
    return float(finite[0]) if len(finite) else math.nan


def _verdict(kind, reason, step, rows, losses, clean_final, baseline=None) -> Verdict:
    start, end = _start(losses), final_loss(losses)
    limit, reference = _limit(start, clean_final, baseline,
                              loss_floor(losses, baseline, clean_final))
    first = next((r["step"] for r in rows if not r.get("finite", True)), None)
    return Verdict(kind, reason, step, start, end, limit, reference, first)


__all__ = ["BEHIND_FACTOR", "BETTER_FACTOR", "CLEAN_FACTOR", "CLEAN_MARGIN", "FAILURES",
           "LEARN_FRACTION", "MIN_BEFORE", "RISE_FRACTION", "SPIKE_GRACE", "START_FRACTION",
           "STREAK",
           "VERDICTS", "Verdict", "failure_point", "judge", "loss_floor", "loss_limit"]
