"""The backward-NaN family (issue 31): a finite forward pass and a NaN gradient; the
mechanism on plain tensors, the fault on the toy run, its cure, wrong fixes, the
refusal on models nanlab did not make, and diagnose / locate naming it."""

import math

import pytest
import torch
import torch.nn.functional as F
from foreign_models import FOREIGN, plain_loop
from shared_runs import DIAGNOSED, shared_diagnosis, shared_run

from nanlab import faults
from nanlab.debug.diagnose import diagnose
from nanlab.debug.locate import locate
from nanlab.errors import NanlabError
from nanlab.faults.backward_nan import EntropyTerm, double_where_log, single_where_log
from nanlab.toy.data import CountingTask
from nanlab.toy.model import GPT, GPTConfig
from nanlab.train.objective import lm_loss

STEPS = 60  # the fault strikes at step 40


def run(name, fixes=(), steps=STEPS, **kw):
    return faults.run_fault(name, steps=steps, fixes=list(fixes), stop_when_poisoned=True, **kw)


# -- the mechanism, on plain tensors (torch 2.13, CPU) ----------------------------------
def test_a_single_where_log_is_finite_forward_and_nan_backward_at_zero():
    x = torch.tensor([0.0, 2.0], requires_grad=True)
    y = torch.where(x > 0, torch.log(x), 0.0)
    assert y.isfinite().all()
    y.sum().backward()
    assert x.grad.isnan().tolist() == [True, False]  # 0 (unselected) / 0 (log's backward)
    x = torch.tensor([0.0, 2.0], requires_grad=True)
    y = torch.where(x > 0, torch.log(torch.where(x > 0, x, 1.0)), 0.0)  # the double where
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.5]
    # the library's "p log p" helpers do not help at p = 0 either
    p = torch.tensor([0.0, 0.5], requires_grad=True)
    torch.special.xlogy(p, p).sum().backward()
    assert math.isnan(p.grad[0])
    p = torch.tensor([0.0, 0.5], requires_grad=True)
    torch.special.entr(p).sum().backward()
    assert p.grad[0] == math.inf


def test_sqrt_at_zero_and_a_hand_written_norm_of_a_zero_vector():
    x = torch.zeros(3, requires_grad=True)
    torch.sqrt(x).sum().backward()
    assert x.grad.isinf().all()  # 1 / (2 * sqrt(0)): inf, and inf * 0 later is NaN
    x = torch.zeros(1, 3, requires_grad=True)
    n = (x ** 2).sum(-1, keepdim=True).sqrt()  # hand-written L2 norm
    y = x / (n + 1e-6)  # "safe": the forward is 0 / 1e-6 = 0
    assert y.isfinite().all()
    y.sum().backward()
    assert x.grad.isnan().all()  # sqrt's inf times the square's 2 * x = 0
    # torch's own norms give the subgradient 0 at 0 (pytorch/pytorch#2421, fixed by #2775)
    for norm in (torch.norm, torch.linalg.vector_norm):
        x = torch.zeros(3, requires_grad=True)
        norm(x).backward()
        assert x.grad.tolist() == [0.0, 0.0, 0.0]
    # x / x.norm() of a zero row is NaN already in the forward pass: not backward-only
    x = torch.zeros(1, 3, requires_grad=True)
    assert (x / x.norm(dim=-1, keepdim=True)).isnan().all()
    # F.normalize divides by max(norm, eps): forward 0, a finite gradient of 1 / eps
    x = torch.zeros(1, 3, requires_grad=True)
    y = F.normalize(x, dim=-1)
    y.sum().backward()
    assert y.eq(0).all() and x.grad.isfinite().all() and float(x.grad[0, 0]) == pytest.approx(1e12)


def test_padding_idx_drops_the_nan_gradient_of_a_zero_embedding_row():
    """A hand-written L2 normalisation of an embedding row that is exactly 0: with
    padding_idx the embedding's backward skips that row, and its NaN with it; a row
    zeroed by hand without padding_idx gets the NaN."""
    ids = torch.tensor([[0, 3, 5]])
    for padding_idx, nan in ((0, False), (None, True)):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(8, 4, padding_idx=padding_idx)
        with torch.no_grad():
            emb.weight[0] = 0.0
        h = emb(ids)
        y = h / ((h ** 2).sum(-1, keepdim=True).sqrt() + 1e-6)
        assert y.isfinite().all()
        y.sum().backward()
        assert bool(emb.weight.grad[0].isnan().all()) is nan
        assert emb.weight.grad[1:].isfinite().all()


def test_the_entropy_term_is_nan_backward_even_at_weight_zero_and_detect_anomaly_finds_it():
    torch.manual_seed(0)
    model = GPT(GPTConfig())
    batch = CountingTask()(0)
    for weight in (0.01, 0.0):  # 0 * NaN = NaN: a term switched off by its weight still fails
        model.zero_grad()
        term = EntropyTerm(lm_loss, model, weight=weight, start=0)
        term.on = True
        loss = term(model, batch)
        loss.backward()
        assert loss.isfinite() and model.wte.weight.grad.isnan().any(), weight
        for h in term.handles:
            h.remove()
    term = EntropyTerm(lm_loss, model, weight=0.01, start=0, log=double_where_log)
    term.on = True
    model.zero_grad()
    term(model, batch).backward()
    assert all(p.grad.isfinite().all() for p in model.parameters() if p.grad is not None)
    for h in term.handles:
        h.remove()
    term = EntropyTerm(lm_loss, model, weight=0.01, start=0, log=single_where_log)
    term.on = True
    with pytest.raises(RuntimeError, match="LogBackward0"), \
            pytest.warns(UserWarning), torch.autograd.detect_anomaly():
        term(model, batch).backward()


# -- on the toy run --------------------------------------------------------------------
def test_where_log_grad_fails_at_its_step_with_a_finite_loss_and_double_where_cures_it():
    bad = run("where_log_grad").record
    assert bad.first_nonfinite_step == 40
    assert bad.losses()[:40].tolist() == run(None).record.losses()[:40].tolist()
    assert math.isfinite(bad.steps[40]["loss"]) and math.isnan(bad.steps[40]["grad_norm"])
    cured = run("where_log_grad", ["double_where"], steps=100).record
    assert cured.first_nonfinite_step is None
    # measured: 0.483 against the clean run's 0.509 (mean of the last 10 of 100 steps)
    assert cured.losses()[-10:].mean() < 1.2 * run(None, steps=100).record.losses()[-10:].mean()


@pytest.mark.parametrize("fix", ["grad_clip", "lr_div10"])
def test_wrong_fixes_do_not_cure_a_backward_nan(fix):
    """Clipping a NaN grad norm scales by NaN; a smaller LR multiplies a NaN gradient."""
    assert run("where_log_grad", [fix]).record.first_nonfinite_step == 40


def test_amp_off_has_nothing_to_change():
    with pytest.raises(NanlabError, match="changes nothing in this run"):
        run("where_log_grad", ["amp_off"])


def test_locate_names_the_backward_op_and_diagnose_proves_double_where():
    bad = shared_run("where_log_grad", **DIAGNOSED)  # test_diagnose's run and diagnosis
    loc = locate(bad.trainer)
    assert (loc.step, loc.pass_name, loc.backward_only) == (40, "backward", True)
    assert (loc.first_op.op, loc.first_op.node, loc.first_op.node_of()) == (
        "aten.div", "LogBackward0", "log")
    assert "backward only: every forward value and the loss were finite" in loc.report()
    d = shared_diagnosis("where_log_grad")
    assert (d.cause, d.detail, d.fix, d.fix_verified) == (
        "backward_nan", "where_log_grad", "double_where", True), d.report()
    assert "the derivative of log" in d.report()


def test_a_forward_nan_is_not_backward_only():
    bad = faults.run_fault("nan_input", steps=45, checkpoint_every=10, stop_when_poisoned=True)
    assert not locate(bad.trainer).backward_only


# -- on models nanlab did not make -----------------------------------------------------
@pytest.mark.parametrize("name", list(FOREIGN))
def test_where_log_grad_refuses_a_foreign_model_in_one_line(name):
    with pytest.raises(NanlabError, match="single-where log lives in your own") as err:
        plain_loop(FOREIGN[name], "where_log_grad")
    assert "\n" not in str(err.value)


def test_diagnose_names_a_hand_written_norm_on_your_own_model():
    """A regressor whose loss adds a hand-written L2 norm of its hidden features: at step
    20 a batch of zero readings makes a zero hidden row (no bias), the norm's backward is
    NaN, the loss finite; diagnose names the family, with no catalogue fix to prove."""
    import torch.nn as nn

    from nanlab.train import TrainConfig, Trainer

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden, self.out = nn.Linear(4, 8, bias=False), nn.Linear(8, 1)

        def forward(self, x):
            h = self.hidden(x)
            n = (h ** 2).sum(-1, keepdim=True).sqrt()
            return self.out(h / (n + 1e-6))

    def batches(step):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 4, generator=g)
        if step == 20:
            x[3] = 0.0  # a sensor that read nothing
        return x, x.sum(-1, keepdim=True)

    def build(config):
        torch.manual_seed(config.seed)
        return Trainer(config, model=Net(), batches=batches,
                       loss_fn=lambda m, b: F.mse_loss(m(b[0]), b[1]))
    trainer = build(TrainConfig(steps=30, lr=3e-3, checkpoint_every=10, progress=False))
    trainer.run()
    assert trainer.record.first_nonfinite_step == 20
    d = diagnose(trainer, build=build)
    assert (d.cause, d.detail) == ("backward_nan", "sqrt"), d.report()
    assert "derivative of sqrt" in d.report()
