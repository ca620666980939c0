"""bisect_precision names the module whose precision decides a non-finite fp16 step."""

import re
import warnings

import pytest
import torch
from foreign_models import FOREIGN
from shared_runs import failed_run, stop_at_first_nonfinite
from torch import nn

from nanlab import faults
from nanlab.debug.locate import locate
from nanlab.debug.precision_bisect import MAX_REPLAYS, bisect_precision
from nanlab.errors import NanlabError
from nanlab.train import TrainConfig, Trainer

LINE = re.compile(r"^fp32 in \S+ alone makes step \d+ finite \(\d+ replays\)$")


def _hooks(model):
    names = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")
    return {name: [list(getattr(m, n)) for n in names] for name, m in model.named_modules()}


def _state(trainer):
    return ({k: v.clone() for k, v in trainer.model.state_dict().items()}, trainer.step,
            len(trainer.record.steps), torch.get_rng_state())


def _same_state(trainer, before):
    weights, step, rows, rng = before
    now = trainer.model.state_dict()
    return (all(torch.equal(weights[k], now[k]) for k in weights) and trainer.step == step
            and len(trainer.record.steps) == rows and torch.equal(torch.get_rng_state(), rng))


def test_the_softmax_that_overflowed_is_named_where_locate_saw_the_first_inf():
    run = failed_run("softmax_overflow")
    loc = locate(run.trainer)
    before = _state(run.trainer)
    b = bisect_precision(run.trainer)
    assert b.verdict == "module" and b.decided, b.line()
    assert loc.module == b.module or loc.module.startswith(b.module + "."), (loc.module, b)
    assert b.step == loc.step and b.replays <= MAX_REPLAYS and not b.budget_spent
    assert LINE.match(b.line()), b.line()
    assert _same_state(run.trainer, before)  # weights, step, record and RNG put back
    assert b.tried[0] == ([], False)  # the run's own precision: non-finite, as recorded


def test_a_loss_that_overflows_outside_the_model_is_named_as_such():
    """fp16_overflow: the hand-written loss sums exp of the fp16 logits (locate: the loss
    pass). No module's fp32 can decide while the logits reach the loss in fp16; fp32
    logits do."""
    run = failed_run("fp16_overflow")
    loc = locate(run.trainer)
    b = bisect_precision(run.trainer)
    assert loc.pass_name == "loss" and loc.module is None
    assert (b.verdict, b.output_fp32, b.decided) == ("loss", True, False), b.line()
    assert b.line().startswith("no module decides") and "output reaches the loss in fp32" \
        in b.line()


def test_no_hook_is_left_behind_and_the_users_hooks_stay():
    run = failed_run("softmax_overflow")
    model = run.trainer.model
    calls = []
    model.blocks[1].attn.register_forward_pre_hook(lambda m, a: calls.append("pre"))
    model.blocks[1].attn.softmax.register_forward_hook(lambda m, a, o: calls.append("post"))
    model.lm_head.register_full_backward_hook(lambda m, gi, go: None)
    hooks = _hooks(model)
    b = bisect_precision(run.trainer)
    assert _hooks(model) == hooks and b.model_restored
    assert calls.count("pre") >= b.replays and calls.count("post") >= b.replays
    assert "forward" not in vars(model.blocks[1].attn.softmax)


class Detour(nn.Module):
    """Up by 300 and back down: the middle (300 * 300 = 90000) does not fit fp16."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False)
        with torch.no_grad():
            self.up.weight.fill_(300.0)
            self.down.weight.fill_(1 / 300)

    def forward(self, x):
        return self.down(self.up(x))


class TwoDetours(nn.Module):
    def __init__(self):
        super().__init__()
        self.left, self.right = Detour(), Detour()

    def forward(self, x):
        return self.left(x) + self.right(x)


def test_when_two_modules_overflow_no_single_one_decides_and_it_says_so():
    trainer = Trainer(TrainConfig(steps=3, lr=1e-6, precision="fp16", checkpoint_every=1,
                                  warmup_steps=0, progress=False),
                      model=TwoDetours(), batches=lambda i: (torch.full((4, 1), 300.0),
                                                             torch.full((4, 1), 600.0)),
                      loss_fn=lambda model, b: ((model(b[0]) - b[1]) ** 2).mean())
    trainer.add_callback("on_step_end", stop_at_first_nonfinite)
    trainer.run()
    assert trainer.record.first_nonfinite_step == 0
    b = bisect_precision(trainer)
    assert (b.verdict, b.parts, b.decided) == ("together", ["left", "right"], False), b.line()
    assert b.line().startswith("no single module decides: fp32 in left, right together")


def test_a_model_nanlab_did_not_make_gets_the_layers_whose_fp16_overflowed():
    """fp16_overflow on the price regressor (raw dollars): the backward GEMMs of its
    Linear layers overflow at step 0; their fp32 together makes the step finite."""
    spec = FOREIGN["price_mlp"]
    torch.manual_seed(0)
    model = spec.make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inj = faults.inject("fp16_overflow", model=model, batches=spec.batches)
    # no GradScaler, as the fault's own loop (a GradScaler would skip those steps)
    trainer = Trainer(TrainConfig(steps=20, lr=spec.lr, precision="fp16", checkpoint_every=10,
                                  warmup_steps=0, grad_scaler=False, progress=False),
                      model=model, batches=inj.batches, loss_fn=spec.loss)
    trainer.add_callback("on_step_end", stop_at_first_nonfinite)
    trainer.run()
    b = bisect_precision(trainer)
    layers = dict(model.named_modules())
    assert b.verdict in ("module", "together"), b.line()
    named = b.parts if b.verdict == "together" else [b.module]
    assert named and all(isinstance(layers[p], nn.Linear) for p in named), b.line()
    assert b.replays <= MAX_REPLAYS and b.model_restored


def test_the_budget_bounds_the_replays_and_the_answer_says_it_was_spent():
    run = failed_run("softmax_overflow")
    b = bisect_precision(run.trainer, max_replays=4)
    assert b.replays <= 4 and b.budget_spent and "budget spent" in b.line()


def test_bad_arguments_get_one_line():
    run = failed_run("softmax_overflow")
    with pytest.raises(NanlabError, match=r"max_replays"):
        bisect_precision(run.trainer, max_replays=1)
    with pytest.raises(NanlabError, match=r"needs a nanlab Trainer"):
        bisect_precision(run.trainer.model)
    fp32 = faults.run_fault(None, steps=3, checkpoint_every=1)
    with pytest.raises(NanlabError, match=r"precision 'fp16' or 'bf16'.*'fp32'") as e:
        bisect_precision(fp32.trainer)
    assert "\n" not in str(e.value)


def test_diagnose_precision_step_carries_the_line_and_keeps_the_answer():
    from nanlab.debug.checks import Case
    from nanlab.debug.sop_checks import _bisected

    run = failed_run("softmax_overflow")
    case = Case(run, None, "nonfinite", run.first_bad_step, config=run.trainer.config)
    text = _bisected(case)
    b = case.notes["precision_bisect"]
    assert text == f"; {b.line()}" and b.verdict == "module"
    fp32 = Case(run, None, "nonfinite", 0, config=run.trainer.config.replace(precision="fp32"))
    assert _bisected(fp32) == "" and "precision_bisect" not in fp32.notes


def test_diagnose_returns_the_module_whose_precision_decides():
    """The answer is a field of the Diagnosis (and of its JSON), not only words in the
    precision step's finding: on the toy's naive softmax, the softmax module."""
    from shared_runs import shared_diagnosis

    d = shared_diagnosis("softmax_overflow")  # test_diagnose's diagnosis
    assert d.precision_layer == "blocks.1.attn.softmax", d.report()
    assert d.to_dict()["precision_layer"] == d.precision_layer
    assert shared_diagnosis("nan_input").precision_layer is None  # fp32: no bisection
