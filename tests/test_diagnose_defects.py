"""Defects of the judge and of diagnose (issue 27 item 3), each a test that failed first.

Every curve and model here is general: a loss below zero, a loss in raw units, a graph
network whose node has no neighbours, an embedding with a padding index, a user's own
``_init_weights``. None assumes the toy's names or sizes.
"""

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from nanlab.analysis.judge import failure_point, judge
from nanlab.analysis.signals import find_spikes
from nanlab.debug import diagnose
from nanlab.debug.sop_checks import fan_in, init_and_eps
from nanlab.debug.user_code import grad_growth
from nanlab.faults.batch_check import LabelRange, batch_problems
from nanlab.faults.fixes import is_hf_model, reinit
from nanlab.runs.record import RunRecord
from nanlab.train import TrainConfig, Trainer


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


def test_a_slowly_falling_run_is_told_apart_from_one_climbing_back():
    """Both end far above the limit, so both are the course's finite divergence (Lab 03:
    "the loss stays far above the clean run's, finite"); the reason says which kind."""
    slow = 3.47 - 1.48 * np.arange(200) / 199  # 3.47 -> 1.99, still falling
    v = judge(slow)
    assert v.kind == "diverge", v
    assert "learning too little" in v.reason and "climbing back" not in v.reason
    back_up = np.r_[np.linspace(3.5, 1.0, 40), np.linspace(1.0, 1.4, 80)]
    assert "climbing back" in judge(back_up).reason


# -- shared by the diagnose defects: small foreign models, built from a config ------------
def _sensors(step, n=32):
    g = torch.Generator().manual_seed(step)
    x = 1.0 + torch.randn(n, 8, generator=g)
    return x, x[:, :2].sum(1, keepdim=True)


def _mse(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


class Ratio(nn.Module):
    """A user's layer that averages the positive readings, with no floor on their count:
    0 / 0 for a row with none ("div"), or x / 0 = -inf then -inf x 0 ("mul")."""

    def __init__(self, mode="div"):
        super().__init__()
        self.lin, self.mode = nn.Linear(8, 16), mode

    def forward(self, x):
        pos = (x > 0).float()
        count = pos.sum(1, keepdim=True)
        if self.mode == "div":
            mean = (x * pos).sum(1, keepdim=True) / count
        else:
            mean = x.sum(1, keepdim=True) / count * (count > 0).float()
        return self.lin(x) * mean


def ratio_net(config, at=30, mode="div"):
    torch.manual_seed(config.seed)
    model = nn.Sequential(Ratio(mode), nn.ReLU(), nn.Linear(16, 1))

    def batches(step):
        x, y = _sensors(step)
        if step == at:
            x[3] = -x[3].abs()  # legal data: a row with no positive reading
        return x, y
    return Trainer(config, model=model, batches=batches, loss_fn=_mse)


def zero_times_inf(config):
    return ratio_net(config, mode="mul")


# -- 2. a one-step 0 x inf is not gradient growth -----------------------------------------
def test_an_overflow_in_the_failing_step_is_not_growth():
    rec = RunRecord()
    for i, g in enumerate([0.05, 0.4, 0.1, 0.2, 0.3, 0.1, 0.2, float("inf")]):
        rec.log_step({"step": i, "loss": 1.0, "grad_norm": g})
    decades, _, peak = grad_growth(rec, 7)
    assert decades < 1.0 and peak < 7


def test_a_zero_by_inf_in_user_code_is_not_an_explosion():
    config = TrainConfig(steps=60, lr=1e-3, progress=False, checkpoint_every=10)
    trainer = zero_times_inf(config)
    trainer.run()
    d = diagnose(trainer, build=zero_times_inf)
    assert d.symptom_step == 30 and d.cause != "deep_explosion", d.report()
    assert "orders of magnitude from step" not in d.report(), d.report()
    assert d.cause == "user_code" and d.detail == "0", d.report()


# -- 3. padding rows and an embedding's fan-in ---------------------------------------------
def test_a_row_of_padding_only_is_dirty_data():
    src = torch.tensor([[5, 3, 0, 0], [7, 2, 4, 0], [0, 0, 0, 0]])
    found = batch_problems({"src": src}, LabelRange(None, None, {"src": 8}))
    assert found and "row(s) [2] hold only padding (id 0)" in found[0]
    pad = torch.tensor([[5, 3, 1, 1], [1, 1, 1, 1]])  # an embedding's padding_idx 1
    found = batch_problems({"ids": pad}, LabelRange(None, None, {"ids": 8}, {"ids": 1}))
    assert found and "[1]" in found[0]
    assert batch_problems({"ids": torch.tensor([[1, 2, 3], [4, 4, 4]])},
                          LabelRange(None, None, {"ids": 8})) == []  # a repeated token


def test_a_mask_row_that_hides_every_key_is_dirty_data():
    """A key-padding mask passed in the batch, not read from pad ids: its all-True row
    makes the attention NaN (the mechanism, run here), and the batch check names it in
    PyTorch's convention, Hugging Face's and an additive float mask's; a causal mask and
    left padding stay clean."""
    attention = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 4, 8)
    mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    out, _ = attention(x, x, x, key_padding_mask=mask)
    assert out[1].isnan().all() and out[0].isfinite().all()  # the mechanism, real
    assert "row(s) [1] mask every key" in batch_problems({"x": x, "key_padding_mask": mask})[0]
    hf = {"input_ids": torch.tensor([[5, 6, 7], [0, 0, 0]]),
          "attention_mask": torch.tensor([[1, 1, 1], [0, 0, 0]])}
    assert any("attention_mask: 1 row(s) [1]" in p for p in batch_problems(hf))
    additive = torch.zeros(2, 3).masked_fill(torch.tensor([[0, 1, 1], [1, 1, 1]]).bool(),
                                             float("-inf"))
    assert batch_problems({"attn_mask": additive}) and not batch_problems(
        {"attn_mask": additive[:1]})  # -inf alone is how an additive mask masks, not dirt
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    left_padded = {"input_ids": torch.tensor([[0, 5, 6], [7, 8, 9]]),
                   "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]])}
    assert batch_problems({"tgt_mask": causal}) == [] and batch_problems(left_padded) == []


def test_pytorch_default_embedding_init_is_not_bad_init():
    for width in (10, 64, 512):
        emb = nn.Embedding(100, width)  # N(0, 1): each row is looked up by one id
        assert fan_in(emb, emb.weight) == 1
        lin = nn.Linear(width, 4)
        assert fan_in(lin, lin.weight) == width

    def build(config):
        torch.manual_seed(config.seed)
        model = nn.Sequential(nn.Embedding(50, 64), nn.Flatten(), nn.Linear(64 * 4, 1))
        return Trainer(config, model=model, batches=lambda s: (
            torch.randint(0, 50, (16, 4), generator=torch.Generator().manual_seed(s)),
            torch.zeros(16, 1)), loss_fn=_mse)
    trainer = build(TrainConfig(steps=3, progress=False, checkpoint_every=1))
    trainer.run()
    kind, _, text = init_and_eps(SimpleNamespace(trainer=trainer, record=trainer.record))
    assert kind != "bad_init", text


# -- 4. reinit: only a real Hugging Face model's _init_weights ------------------------------
def test_reinit_does_not_call_a_users_own_init_weights():
    class NanoGPTLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32)
            self.apply(self._init_weights)

        def _init_weights(self, module):  # the user's own (buggy) init
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=10.0)

    model = NanoGPTLike()
    done = reinit(model)
    assert float(model.fc.weight.std()) < 1.0, done
    assert "Hugging Face" not in " ".join(done)
    assert not is_hf_model(model)


# -- 5. no cause, no fix -----------------------------------------------------------------
def test_a_report_without_a_cause_names_no_fix():
    config = TrainConfig(steps=60, lr=1e-3, progress=False, checkpoint_every=0)
    trainer = ratio_net(config)  # no checkpoint: locate cannot say where, nothing found
    trainer.run()
    d = diagnose(trainer, build=ratio_net)
    assert d.cause is None and d.fix is None, d.report()
    assert "root cause: not found" in d.report() and "fix:" not in d.report()
    assert "orders of magnitude from step" not in d.report()  # 2.: the NaN is no growth


# -- 6. a NaN made in the user's own code ------------------------------------------------
def test_a_zero_by_zero_in_the_users_module_is_user_code():
    config = TrainConfig(steps=60, lr=1e-3, progress=False, checkpoint_every=10)
    trainer = ratio_net(config)
    trainer.run()
    d = diagnose(trainer, build=ratio_net)
    assert (d.cause, d.detail, d.fix, d.fix_verified) == ("user_code", "0", None, False), \
        d.report()
    report = d.report()
    assert "module 0 (Ratio)" in report and "aten.div" in report and "floor" in report
    assert "floor on the divisor" in d.fix_evidence


def test_an_lr_cut_that_delays_a_users_zero_by_zero_does_not_win():
    config = TrainConfig(steps=60, lr=1e-3, progress=False, checkpoint_every=10)
    trainer = ratio_net(config)
    trainer.run()
    d = diagnose(trainer, build=ratio_net)
    lr = next(f for f in d.findings if f.step == "lr")
    assert lr.verdict == "ruled out" and "only delay" in lr.text
