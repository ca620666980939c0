"""One judge of a run (nanlab.analysis.judge): curves made by hand, each with its verdict."""

import math

import numpy as np
import pytest

from nanlab.analysis.judge import FAILURES, STREAK, VERDICTS, judge, loss_limit
from nanlab.errors import NanlabError
from nanlab.runs.record import RunRecord

FALL = 3.5 * np.exp(-np.arange(120) / 20)  # a healthy run: 3.5 -> ~0.01


def record(losses, skipped=()):
    rec = RunRecord()
    for i, loss in enumerate(losses):
        rec.log_step({"step": i, "loss": float(loss), "finite": bool(np.isfinite(loss)),
                      "skipped": i in skipped})
    return rec


class Crashed:
    """What a FaultRun of a crashed run looks like to the judge."""

    def __init__(self, losses, step):
        self.record, self.error, self.error_step = record(losses), "IndexError: out", step


def test_a_healthy_fall_is_healthy_against_the_start_and_against_a_clean_run():
    for v in (judge(FALL), judge(FALL, clean=0.02), judge(record(FALL), clean=FALL)):
        assert v.kind == "healthy" and v.healthy and v.outcome == "cured", v
        assert v.step is None and v.first_nonfinite is None
        assert "finite and learning" in v.reason and "3.50" in v.reason
    assert judge(FALL).reference == "start"
    assert judge(FALL, clean=0.02).reference == "clean"


def test_a_spike_that_recovers_is_a_spike_with_its_step_and_recovery():
    losses = np.r_[FALL[:60], 9.0, FALL[60:]]
    v = judge(losses)
    assert v.kind == "spike" and v.step == 60 and not v.healthy
    assert "spike at step 60 to 9.00" in v.reason and "back in 1 steps" in v.reason
    assert v.outcome == "not cured"
    assert judge(losses, watch=("nonfinite", "error")).kind == "healthy"


def test_a_spike_in_the_first_steps_is_noise():
    losses = np.r_[FALL[:5], 40.0, FALL[5:]]
    assert judge(losses).kind == "healthy"


def test_a_divergence_is_judged_against_the_named_reference_point():
    climb = np.r_[np.linspace(3.5, 1.0, 40), np.linspace(1.0, 1.4, 80)]  # finite, no spike
    v = judge(climb)
    assert v.kind == "diverge" and v.reference == "start"
    assert math.isclose(v.limit, 0.3 * 3.5) and v.end > v.limit
    assert "above 1.05 (30 % of the start)" in v.reason
    # ends at 0.5: healthy against its own start (< 1.05), not against a clean 0.02
    low = np.r_[np.linspace(3.5, 0.5, 60), np.full(60, 0.5)]
    assert judge(low).kind == "healthy"
    v = judge(low, clean=0.02)  # flat at 0.5, far above the clean run: learned too little
    assert v.kind == "diverge" and v.reference == "clean" and math.isclose(v.limit, 0.31)
    assert "learning too little" in v.reason
    assert "3 x clean 0.02 + 0.25" in v.reason


def test_a_stall_is_a_stall():
    flat = np.full(100, 3.47) + 0.01 * np.sin(np.arange(100))
    v = judge(flat)
    assert v.kind == "stall" and "stalled: loss 3.47" in v.reason


def test_a_nan_is_nonfinite_at_its_step():
    losses = np.r_[FALL[:40], np.nan, np.full(20, np.nan)]
    v = judge(losses)
    assert v.kind == "nonfinite" and v.step == 40 and v.first_nonfinite == 40
    assert v.reason == "non-finite at step 40"


def test_skipped_nonfinite_steps_are_contained_until_nothing_is_finite_any_more():
    losses = FALL.copy()
    losses[40] = np.nan
    v = judge(record(losses, skipped={40}), clean=0.02)
    assert v.kind == "contained" and v.outcome == "contained" and v.step == 40
    assert "1 non-finite step(s) from step 40, all skipped" in v.reason
    tail = np.r_[FALL[:50], np.full(STREAK, np.nan)]
    v = judge(record(tail, skipped=set(range(50, 50 + STREAK))))
    assert v.kind == "nonfinite" and "every step non-finite from step 50" in v.reason


def test_a_crash_is_an_error_at_its_step():
    v = judge(Crashed(FALL[:40], 40))
    assert v.kind == "error" and v.step == 40 and "crashed at step 40" in v.reason


def test_the_vocabulary_and_the_limits():
    assert set(FAILURES) <= set(VERDICTS) and {"healthy", "contained"} <= set(VERDICTS)
    from nanlab.faults import SIGNATURES

    assert SIGNATURES == FAILURES  # a fault's signature is a judge's verdict
    assert loss_limit(2.0) == (0.6, "start") and loss_limit(2.0, clean=0.25) == (1.0, "clean")
    with pytest.raises(NanlabError, match="no steps"):
        judge([])
