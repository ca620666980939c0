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
- ``spike``:     a finite loss more than 3x its running median (:func:`find_spikes`),
  after the first ``SPIKE_GRACE`` steps;
- ``stall``:     the loss ended above 85 % of where it started (:func:`is_stalled`);
- ``diverge``:   finite, but the final loss (mean of the last 10) is above the limit;
- ``contained``: non-finite steps happened, every one skipped before it reached the
  weights, and the loss is fine otherwise (the symptom is handled, the cause is not);
- ``healthy``:   none of the above.

The final-loss limit has two reference points, named: against a **clean run** when one
is known (``clean=``: its final loss, its losses or the run), the final loss must stay
within ``CLEAN_FACTOR`` x the clean final loss + ``CLEAN_MARGIN``; without one, it
must come down to ``START_FRACTION`` of the first loss (the toy starts near 3.5 and a
clean run reaches about 7 % of that in 120 steps).

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

from nanlab.errors import NanlabError
from nanlab.signals import final_loss, find_spikes, is_stalled, recovery_steps

FAILURES = ("nonfinite", "error", "spike", "diverge", "stall")  # what a bad run shows
VERDICTS = ("healthy", "contained", *FAILURES)
SPIKE_GRACE = 10  # spikes in the first 10 steps are a fresh model's noise, not a verdict
STREAK = 10  # this many non-finite steps in a row at the end: the run has stopped learning
CLEAN_FACTOR, CLEAN_MARGIN = 3.0, 0.25  # against a clean run: final <= 3 x clean + 0.25
START_FRACTION = 0.3  # without one: final <= 30 % of the first loss


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


def loss_limit(start: float, clean: float | None = None) -> tuple[float, str]:
    """The final loss a run is held to, and which reference point it comes from.

    Against a clean run's final loss when it is known, otherwise against the start.

    >>> loss_limit(2.0)
    (0.6, 'start')
    >>> loss_limit(2.0, clean=0.25)
    (1.0, 'clean')
    """
    if clean is not None and math.isfinite(clean):
        return CLEAN_FACTOR * clean + CLEAN_MARGIN, "clean"
    return START_FRACTION * start, "start"


def judge(run: Any, *, clean: Any = None, watch: tuple[str, ...] = FAILURES) -> Verdict:
    """Judge a run's loss curve: healthy, or which failure, with a reason in words.

    ``run`` is anything with recorded steps: a :class:`nanlab.faults.FaultRun` or a
    :class:`nanlab.train.Trainer` (their crash and weights are read too), a
    :class:`nanlab.record.RunRecord`, or a plain sequence of losses (a NaN is a
    non-finite step, never skipped). ``clean`` is the clean run to compare with: its
    final loss, its losses, or the run itself (None: judged against the start).
    ``watch`` names the failures looked for; a curve's spike or stall that is not
    watched is passed over (the final-loss limit still applies).

    >>> import numpy as np
    >>> fall = 3.5 * np.exp(-np.arange(100) / 20)
    >>> judge(np.r_[fall[:60], 8.0, fall[60:]]).kind
    'spike'
    >>> print(judge(np.linspace(3.5, 1.5, 100)).reason)
    finite, but the loss went 3.50 -> 1.59, above 1.05 (30 % of the start)
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
    limit, reference = loss_limit(start, clean_final)
    but = "finite, but " if not bad else f"{len(bad)} non-finite step(s) skipped, but "
    spikes = [s for s in find_spikes(losses) if s >= SPIKE_GRACE] if "spike" in watch else []
    if spikes:
        s = spikes[0]
        back = recovery_steps(losses, s)
        return _verdict("spike", f"{but}a spike at step {s} to {losses[s]:.2f}"
                        + (f" (back in {back} steps)" if back else ""), s, rows, losses,
                        clean_final)
    if "stall" in watch and is_stalled(losses, start_loss=start):
        return _verdict("stall", f"{but}stalled: loss {start:.2f} -> {end:.3g}", None, rows,
                        losses, clean_final)
    if end > limit:
        against = (f"{CLEAN_FACTOR:g} x clean {clean_final:.3g} + {CLEAN_MARGIN:g}"
                   if reference == "clean" else f"{START_FRACTION * 100:g} % of the start")
        return _verdict("diverge", f"{but}the loss went {start:.2f} -> {end:.3g}, above "
                        f"{limit:.3g} ({against})", None, rows, losses, clean_final)
    versus = f" (clean {clean_final:.3g})" if reference == "clean" else ""
    if bad:
        return _verdict("contained", f"{len(bad)} non-finite step(s) from step "
                        f"{bad[0]['step']}, all skipped; final loss {end:.3g}{versus}",
                        bad[0]["step"], rows, losses, clean_final)
    return _verdict("healthy", f"finite and learning: loss {start:.2f} -> {end:.3g}{versus}",
                    None, rows, losses, clean_final)


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
    return rows, losses, getattr(run, "error", None), getattr(run, "error_step", None)


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


def _verdict(kind, reason, step, rows, losses, clean_final) -> Verdict:
    start, end = _start(losses), final_loss(losses)
    limit, reference = loss_limit(start, clean_final)
    first = next((r["step"] for r in rows if not r.get("finite", True)), None)
    return Verdict(kind, reason, step, start, end, limit, reference, first)


__all__ = ["CLEAN_FACTOR", "CLEAN_MARGIN", "FAILURES", "SPIKE_GRACE", "START_FRACTION",
           "STREAK", "VERDICTS", "Verdict", "judge", "loss_limit"]
