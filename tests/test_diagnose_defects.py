"""Defects of the judge and of diagnose (issue 27 item 3), each a test that failed first.

Every curve and model here is general: a loss below zero, a loss in raw units, a graph
network whose node has no neighbours, an embedding with a padding index, a user's own
``_init_weights``. None assumes the toy's names or sizes.
"""

import numpy as np

from nanlab.judge import failure_point, judge
from nanlab.signals import find_spikes


# -- 1. any loss scale and sign ----------------------------------------------------------
def nll_curve(n=120, seed=0, shift=0.0, scale=1.0):
    """A Gaussian NLL falling from +1 to about -1.5 with batch noise: it crosses zero."""
    rng = np.random.default_rng(seed)
    return shift + scale * (1.0 - 2.5 * (1 - np.exp(-np.arange(n) / 25))
                            + 0.03 * rng.standard_normal(n))


def test_a_negative_loss_that_keeps_falling_has_no_spike():
    assert find_spikes([-1.0, -1.1, -1.2, -1.3, -1.4, -1.5, -1.45]) == []
    for seed in range(4):
        assert find_spikes(nll_curve(seed=seed)) == [], seed
        assert judge(nll_curve(seed=seed)).kind == "healthy", judge(nll_curve(seed=seed))


def test_a_spike_is_found_at_any_scale_and_sign():
    for shift, scale in ((0.0, 1.0), (-5.0, 1.0), (0.0, 2e4), (-3e4, 2e4), (0.0, 1e-3)):
        curve = nll_curve(shift=shift, scale=scale)
        curve[80] = curve[79] + 3.0 * scale  # a jump of the curve's own range
        assert find_spikes(curve) == [80], (shift, scale)
        assert judge(curve).kind == "spike" and judge(curve).step == 80


def test_the_cure_of_a_negative_loss_run_is_judged_healthy_against_it():
    curve = nll_curve()
    bad = np.r_[curve[:70], np.full(10, np.nan)]
    assert failure_point(bad)[0] == 70
    cured = nll_curve(seed=1)  # the same learning, other noise
    v = judge(cured, baseline=bad)
    assert v.kind == "healthy", v


def test_a_slowly_falling_run_does_not_diverge():
    slow = 3.47 - 1.48 * np.arange(200) / 199  # 3.47 -> 1.99, still falling
    v = judge(slow)
    assert v.kind != "diverge" and v.kind == "stall", v
    assert "learning too little" in v.reason
    back_up = np.r_[np.linspace(3.5, 1.0, 40), np.linspace(1.0, 1.4, 80)]
    assert judge(back_up).kind == "diverge"  # climbing back from its best still diverges
