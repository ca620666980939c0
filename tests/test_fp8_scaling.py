"""The low-precision scaling family (issue 31): FP8 fake quant on the CPU, an amax of 0
with no floor, a stale delayed amax; the casts as this torch does them, the toy runs,
the cures and wrong fixes, and refusals in one line."""

import math

import pytest
import torch
import torch.nn as nn

from nanlab import faults
from nanlab.errors import NanlabError
from nanlab.faults.fixes import NotApplicable
from nanlab.layers.fake_fp8 import AmaxScaler, FakeFp8Linear, amax_to_scale, fake_quant, fp8_max

STEPS = 60


def run(name, fixes=(), steps=STEPS, **kw):
    return faults.run_fault(name, steps=steps, fixes=list(fixes), stop_when_poisoned=True, **kw)


# -- the casts and the scale, on plain tensors (torch 2.13, CPU) -------------------------
def test_what_the_float8_casts_do_past_the_max_and_with_inf_or_nan():
    x = torch.tensor([500.0, 1e5, math.inf, -math.inf, math.nan])
    e4m3 = x.to(torch.float8_e4m3fn).float().tolist()
    assert e4m3[:4] == [448.0, 448.0, 448.0, -448.0] and math.isnan(e4m3[4])  # saturates
    e5m2 = x.to(torch.float8_e5m2).float().tolist()
    assert e5m2[1:4] == [math.inf, math.inf, -math.inf] and math.isnan(e5m2[4])  # no saturation
    assert (fp8_max("e4m3"), fp8_max("e5m2")) == (448.0, 57344.0)
    # e5m2 rounds up to 61440 onto its max; from there on the cast is inf
    big = torch.tensor([61439.0, 61440.0])
    assert big.to(torch.float8_e5m2).float().tolist() == [57344.0, math.inf]


def test_fake_quant_round_trips_within_e4m3_precision():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g) * 3
    scale = amax_to_scale(x.abs().max(), "e4m3")
    y = fake_quant(x, scale, "e4m3")
    normal = x.abs() * scale >= 2.0 ** -6  # e4m3's smallest normal, in scaled units
    rel = ((y - x).abs() / x.abs())[normal]
    assert float(rel.max()) <= 2.0 ** -4  # 3 mantissa bits: half an ulp is 2^-4
    assert float(rel.max()) > 0  # and it did round
    assert float(y.abs().max()) == pytest.approx(float(x.abs().max()), rel=2 ** -4)


def test_an_amax_of_zero_is_nan_without_a_floor_and_zero_with_one():
    zero = torch.zeros(3)
    bare = amax_to_scale(zero.abs().max(), "e4m3", floor=None)
    assert bare.isinf()
    assert fake_quant(zero, bare, "e4m3").isnan().all()  # 0 * inf
    floored = amax_to_scale(zero.abs().max(), "e4m3")  # torchao's EPS = 1e-12
    assert math.isfinite(floored) and fake_quant(zero, floored, "e4m3").eq(0).all()


def test_a_stale_delayed_scale_sends_a_grown_gradient_to_inf_or_clips_it_when_saturating():
    for saturate, want in ((False, math.inf), (True, 1.0)):
        s = AmaxScaler("e5m2", "delayed", history_len=1, saturate=saturate)
        s.cast(torch.ones(4))
        assert s.cast(torch.full((4,), 1.2)).tolist() == [want] * 4
    cur = AmaxScaler("e5m2", "current")
    cur.cast(torch.ones(4))
    assert cur.cast(torch.full((4,), 1.2)).tolist() == pytest.approx([1.2] * 4)  # on the max
    assert cur.stats["overflow"] == 0


def test_the_fp8_linear_shares_its_weights_and_passes_gradients_straight_through():
    torch.manual_seed(0)
    lin = nn.Linear(8, 4)
    fp8 = FakeFp8Linear.from_linear(lin, recipe="current")
    assert fp8.weight is lin.weight and set(fp8.state_dict()) >= {"weight", "bias"}
    x = torch.randn(5, 8, requires_grad=True)
    fp8(x).sum().backward()
    g_fp8 = x.grad.clone()
    x.grad = None
    lin(x).sum().backward()
    assert torch.allclose(g_fp8, x.grad, rtol=0.1, atol=0.02)  # not flushed to 0 by the cast


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(NanlabError, match="rowwise=True needs recipe='current'") as err:
        AmaxScaler("e4m3", "delayed", rowwise=True)
    assert "\n" not in str(err.value)
    with pytest.raises(NanlabError, match="no nn.Linear") as err:
        faults.inject("fp8_stale_amax", model=nn.Sequential(nn.ReLU()))
    assert "\n" not in str(err.value)


# -- on the toy run ------------------------------------------------------------------------
def test_fp8_amax_zero_is_nan_at_once_in_the_backward_and_the_floor_cures_it():
    bad = run("fp8_amax_zero").record
    assert bad.first_nonfinite_step is not None and bad.first_nonfinite_step <= 2
    assert math.isfinite(bad.steps[0]["loss"]) and math.isnan(bad.steps[0]["grad_norm"])
    event = next(e for e in bad.events if e["kind"] == "fp8")
    assert (event["layer"], event["operand"]) == ("lm_head", "grad")  # the masked targets
    assert event["inf_scale"] > 0 and event["zero_amax"] == event["inf_scale"]
    cured = run("fp8_amax_zero", ["fp8_amax_floor"]).record
    assert cured.first_nonfinite_step is None
    clean = run(None).record
    # measured: 0.89 against the fp32 run's 0.90 (mean of the last 10 of 60 steps)
    assert cured.losses()[-10:].mean() < 1.2 * clean.losses()[-10:].mean()


def test_fp8_stale_amax_overflows_e5m2_early_and_current_scaling_cures_it():
    bad = run("fp8_stale_amax").record
    assert bad.first_nonfinite_step is not None and 1 <= bad.first_nonfinite_step <= 5
    event = next(e for e in bad.events if e["kind"] == "fp8")
    assert event["operand"] == "grad" and event["overflow"] > 0 and event["peak"] > 1.07
    cured = run("fp8_stale_amax", ["fp8_current_scaling"]).record
    assert cured.first_nonfinite_step is None
    assert cured.losses()[-10:].mean() < 1.2 * run(None).record.losses()[-10:].mean()
    # a margin of 1 (2x headroom) only delays it (measured: step 20)
    later = run("fp8_stale_amax", margin=1).record.first_nonfinite_step
    assert later is not None and later > bad.first_nonfinite_step + 5


@pytest.mark.parametrize(("fault", "fix"), [("fp8_amax_zero", "lr_div10"),
                                            ("fp8_amax_zero", "grad_clip"),
                                            ("fp8_stale_amax", "grad_clip"),
                                            ("fp8_stale_amax", "lr_div10")])
def test_wrong_fixes_do_not_cure_a_bad_fp8_scale(fault, fix):
    """A smaller LR or a clip acts after the cast: an amax of 0 is still 0, and gradients
    still outgrow last step's amax early in training."""
    assert run(fault, [fix], steps=20).record.first_nonfinite_step is not None


def test_each_cure_is_not_applicable_to_the_other_fault():
    with pytest.raises(NotApplicable, match="fix 'fp8_amax_floor' changes nothing"):
        run("fp8_stale_amax", ["fp8_amax_floor"], steps=5)
    with pytest.raises(NotApplicable, match="fix 'fp8_current_scaling' changes nothing"):
        run("fp8_amax_zero", ["fp8_current_scaling"], steps=5)
    with pytest.raises(NotApplicable, match="no FP8 layer"):
        run("nan_input", ["fp8_amax_floor"], steps=5)


def test_a_saturating_cast_clips_the_stale_amax_silently_and_the_toy_trains():
    """torchao's to_fp8_saturated clamps before the cast: the grown gradient is clipped to
    the max instead of inf, so the same delayed recipe trains (no NaN, no spike)."""
    from nanlab.layers.fake_fp8 import fp8_layers, swap_linears
    from nanlab.train import TrainConfig, Trainer

    trainer = Trainer(TrainConfig(steps=STEPS, progress=False))
    swap_linears(trainer.model, recipe="delayed", history_len=1, saturate=True)
    clipped = []
    trainer.add_callback("on_after_backward", lambda tr, info: clipped.append(max(
        s.stats["peak"] for m in fp8_layers(tr.model).values() for s in m.scalers().values())))
    record = trainer.run()
    assert record.first_nonfinite_step is None
    assert max(clipped) > 1.07  # values past e5m2's max were there, and were clipped
    assert record.losses()[-10:].mean() < 1.2 * run(None).record.losses()[-10:].mean()


def test_locate_reads_the_float8_casts_and_names_the_op_that_made_the_inf():
    """isfinite has no float8 kernel: locate's tracer reads a float8 tensor in fp32, so the
    replay's headline is the op that made the first inf, not an unreadable float8 cast."""
    from nanlab.debug.locate import locate

    bad = faults.run_fault("fp8_stale_amax", steps=STEPS, checkpoint_every=1,
                           stop_when_poisoned=True)
    loc = locate(bad.trainer)
    assert loc.found and loc.first_op is not None and loc.first_op.numel > 0, loc.report()
    assert loc.first_op.has_inf or loc.first_op.has_nan, loc.report()
    assert "of ?" not in loc.report() and "(None)" not in loc.report(), loc.report()
