"""The SOP's mixed-precision step for FP8: a scale that is inf, or a cast past the max.

A run whose Linears train in FP8 (:mod:`nanlab.layers.fake_fp8`) logs an ``fp8`` event
for each step where a cast's scale misbehaved (:func:`nanlab.faults.fp8_scaling.take_stats`).
At the failing step, an infinite scale from an amax of 0 names ``fp8_amax_zero`` (floor
the amax); values a delayed scale sent past e5m2's max, to inf, name ``fp8_stale_amax``
(current scaling). Asked before the fp16 check of the same step: the config says fp32,
so "turn AMP off" has nothing to turn off, yet the matmuls ran in 8 bits.
"""

from __future__ import annotations

from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.faults.fp8_scaling import EVENT, FAMILY
from nanlab.layers.fake_fp8 import fp8_layers


def fp8_evidence(run, step: int | None) -> tuple[str | None, str | None]:
    """(the fault, the evidence in words) from the run's ``fp8`` events up to ``step``, or
    (None, None) when no FP8 scale misbehaved.

    >>> from nanlab.faults import run_fault
    >>> run = run_fault("fp8_amax_zero", steps=3)
    >>> fp8_evidence(run, 0)[0]
    'fp8_amax_zero'
    """
    if step is None:
        return None, None
    events = run.record.events_of(EVENT, until_step=step)
    if not events:
        return None, None
    first = min(e["step"] for e in events)
    at = [e for e in events if e["step"] == first]
    zero = [e for e in at if e["inf_scale"] > 0]
    if zero:
        e = zero[0]
        rows = "rows" if e["rowwise"] else "tensors"
        return "fp8_amax_zero", (
            f"step {first}: the FP8 cast of {e['layer']}'s {e['operand']} met {e['zero_amax']} "
            f"{rows} with amax 0 and no floor: scale = fp8_max / 0 = inf, and 0 * inf = NaN "
            f"({len(zero)} cast(s) alike at that step)")
    e = max(at, key=lambda r: r["overflow"])
    return "fp8_stale_amax", (
        f"step {first}: the FP8 cast of {e['layer']}'s {e['operand']} ({e['recipe']} scaling) "
        f"turned {e['overflow']} values into inf: the tensor reached {e['peak']:.2f}x the "
        "format's max under a scale from an earlier step's amax")


__all__ = ["fp8_evidence"]


@register_check("amp", FAMILY, rank=5)
def _check(case: Case) -> Outcome | None:
    if case.symptom not in ("nonfinite", "spike", "diverged"):
        return None
    if not fp8_layers(case.run.trainer.model):
        return None
    kind, text = fp8_evidence(case.run, case.step)
    if kind is None and case.replay is not None:  # locate's replay of the step cut its
        again = case.replay()                      # events from the record: run it again
        kind, text = fp8_evidence(again, case.step) if again is not None else (None, None)
    return Outcome("cause", text, cause=FAMILY, detail=kind) if kind else None
