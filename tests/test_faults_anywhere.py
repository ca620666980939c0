"""Every registered fault on models nanlab did not make, in the README's plain loop.

Each fault either refuses at ``inject()`` time with one line, or fires: its signature
(a crash, a non-finite loss, a loss far above the clean run's, or what nanlab.judge calls
a spike or a divergence against the clean run) shows within 40 steps.
A fault that can neither (its trigger absent from this model) must say so with a
warning. The table below is what was measured; a change in any cell fails.
"""

import math

import pytest
from foreign_models import FOREIGN, outcome, plain_loop

from nanlab import faults

STEPS = 40
F, R, S = "fires", "refused", "silent"  # S: the fault's trigger is absent; it must warn
ALL = tuple(FOREIGN)  # encoder_lm, vae, seq2seq, conv_regressor, price_mlp


def row(*kinds):
    return dict(zip(ALL, kinds, strict=True))


# The families of issue 27 item 2 (dirty_data, precision, init_eps, myths): exact outcomes,
# and for a refusal a word its one line must hold.
EXPECTED = {
    "nan_input": (row(F, F, R, F, F), "integer ids cannot hold NaN"),
    "illegal_label": (row(F, R, F, R, R), "integer label"),
    "all_masked": (row(F, R, F, R, R), "integer label"),
    "zero_std": (row(R, R, R, R, R), "raw_hooks"),
    "fp16_overflow": (row(S, S, S, F, F), ""),
    "softmax_overflow": (row(R, R, R, R, R), "written by hand"),
    "position_overflow": (row(R, R, R, R, R), "sinusoidal"),
    "adam_eps_fp16": (row(F, F, F, F, F), ""),
    "bad_init": (row(F, F, F, F, F), ""),
    "deep_explosion": (row(R, R, R, R, R), "without norms"),
    "tiny_eps": (row(S, F, F, R, R), "no normalisation module"),
    "dead_relu": (row(R, R, R, R, R), "architecture"),
    "sigmoid_chain": (row(R, R, R, R, R), "architecture"),
}

# Faults of the families other engineers are making travel now: only "fires or refuses at
# inject" is asserted. These cells did neither when measured (xfail, not strict: when a
# fault learns to travel its cell passes).
STILL_SILENT = {
    ("bit_flip", m): "bit_flip's default flip does not overflow this model's first Linear"
    for m in ("vae", "seq2seq", "conv_regressor", "price_mlp")
} | {
    ("repeated_token_shard", m): "a repeated shard does not spike this small model in 40 steps"
    for m in ("encoder_lm", "seq2seq")
} | {
    (f, m): f"{f} does not yet show on this model in {STEPS} steps"
    for f in ("high_lr", "high_lr_adam", "lr_jump", "resume_fresh_optimizer") for m in ALL
    if (f, m) not in {("high_lr", "conv_regressor"), ("high_lr_adam", "encoder_lm")}
}


def params_for(name: str) -> dict:
    """The fault's step moved to 10 (when it has one), so it lands inside the short loop."""
    return {"at_step": 10} if "at_step" in faults.get_fault(name).params else {}


@pytest.fixture(scope="module")
def clean():
    return {m: plain_loop(spec, None, STEPS)[0] for m, spec in FOREIGN.items()}


def test_the_foreign_models_are_healthy(clean):
    for m, losses in clean.items():
        assert all(math.isfinite(v) for v in losses), m
        assert min(losses[-5:]) < losses[0], m  # it learns


CELLS = [(f, m) for f in sorted(faults.FAULTS) for m in ALL]


@pytest.mark.parametrize(("fault", "model"), CELLS)
def test_each_fault_fires_or_refuses_at_inject(fault, model, clean, request):
    got = outcome(FOREIGN[model], fault, clean[model], STEPS, **params_for(fault))
    if fault in EXPECTED:
        kinds, word = EXPECTED[fault]
        assert got.kind == kinds[model], got.cell()
        if got.kind == R:
            assert "\n" not in got.detail and word in got.detail, got.detail
        if got.kind == S:  # the trigger is absent: the fault must say so, not run quietly
            assert got.warnings and got.warnings[0].startswith(fault), got.cell()
        return
    if (fault, model) in STILL_SILENT:
        request.applymarker(pytest.mark.xfail(reason=STILL_SILENT[fault, model], strict=False))
    assert got.kind in (F, R), got.cell()
    if got.kind == R:
        assert "\n" not in got.detail, got.detail


def test_each_documented_fault_fires_on_two_models_or_refuses():
    for fault, (kinds, _) in EXPECTED.items():
        fired = [m for m, k in kinds.items() if k == F]
        assert len(fired) >= 2 or set(kinds.values()) == {R}, fault


def test_the_table_covers_every_fault_of_the_families():
    mine = {"dirty_data", "fp16_overflow", "softmax_overflow", "adam_eps_fp16", "bad_init",
            "deep_explosion", "tiny_eps", "myth"}
    assert {n for n, f in faults.FAULTS.items() if f.family in mine} == set(EXPECTED)


def test_a_fault_of_another_loop_or_layout_refuses_at_inject_in_one_line():
    """No refusal falls back to 'the built-in model's switches': each says what it needs."""
    for name, fault in faults.FAULTS.items():
        if fault.foreign is None:
            assert fault.refusal, f"{name}: a foreign refusal must say what the user must build"
