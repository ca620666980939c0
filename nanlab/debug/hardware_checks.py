"""Does the failure reproduce? A transient fault (silent data corruption) does not.

A clean batch that failed, replayed exactly (the checkpoint before it, the same
batches, RNG and callbacks: :func:`nanlab.debug.locate.locate`): if every step before
it comes back bit for bit and the failing step itself comes back clean, nothing in the
data, the model or the optimizer state made the failure. What is left is the device:
a bit flipped once (see :mod:`nanlab.faults.hardware`). Dirty data fails again on every
replay, so the two are told apart, as Megatron-LM's ``RerunStateMachine`` does
(``megatron/core/rerun_state_machine.py``: TRANSIENT_ERROR, "the result could not be
reproduced on the same GPU").
"""

from __future__ import annotations

import math

from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.errors import NanlabError

SPIKE_RATIO = 2.0  # a recorded spike at least this many times the replay's loss is gone


def check_transient(run, step: int | None, symptom: str, loc=None) -> str | None:
    """The evidence, in words, when the failing step does not reproduce, else None.

    ``loc`` is a locate() of ``step`` already made (diagnose makes one for a NaN); a
    spike is replayed here. None also when the replay proves nothing: no checkpoint,
    or a step before the failure that does not come back bit for bit.

    >>> check_transient(None, None, "nonfinite") is None
    True
    """
    from nanlab.debug.locate import locate

    if step is None or symptom not in ("nonfinite", "spike"):
        return None
    if loc is None or loc.step != step:
        if not run.trainer.checkpoints.steps():
            return None
        try:
            loc = locate(run.trainer, step, ops=False)
        except (NanlabError, RuntimeError, IndexError):
            return None
    earlier = [m for m in loc.mismatches if not m.startswith(f"step {step}:")]
    if loc.step != step or earlier or loc.error or loc.found or loc.loss is None \
            or not math.isfinite(loc.loss):
        return None
    row = next((r for r in run.record.steps if r["step"] == step), None)
    if row is None:
        return None
    recorded = row["loss"]
    if math.isfinite(recorded) and row.get("finite", True) \
            and recorded < SPIKE_RATIO * loc.loss:
        return None  # the spike came back: not transient
    return (f"replayed from checkpoint {loc.checkpoint} (same weights, batch {loc.batch}, "
            f"RNG): the {loc.replayed_steps} step(s) before step {step} reproduce bit for "
            f"bit, step {step} does not (loss {recorded:.4g} in the run, {loc.loss:.4g} in "
            "the replay): a transient fault, silent data corruption on the device; dirty "
            "data would fail again")


@register_check("data", "hardware", rank=60)
def _check(case: Case) -> Outcome | None:
    """A clean batch whose step does not fail again when replayed exactly: the device."""
    text = check_transient(case.run, case.step, case.symptom, case.loc)
    return Outcome("cause", text, cause="hardware", detail="bit_flip") if text else None


__all__ = ["SPIKE_RATIO", "check_transient"]
