"""The backward-NaN family: a forward pass that is finite and a gradient that is NaN.

``torch.where(p > 0, torch.log(p), 0)`` is finite wherever p >= 0, but autograd still
differentiates the branch it did not select: at p = 0 the log's backward is its incoming
gradient (0, the where gave the unselected branch nothing) divided by p = 0, and
0 / 0 = NaN. PyTorch's ``torch.where`` documentation does not warn of it; the reports
are pytorch/pytorch#52248 ("torch.where gives NaN gradient ... the other branch") and
the "double where" answer (mask the input of the log too, so the unselected branch never
sees 0): ``torch.where(p > 0, torch.log(torch.where(p > 0, p, 1)), 0)``. A hand-written
L2 norm, ``(x ** 2).sum(-1).sqrt()``, does the same at a zero vector: sqrt's backward is
g / (2 * sqrt(0)), and the square's 2 * x * inf is 0 * inf = NaN (tests/test_backward_nan.py
measures both, and that torch.linalg.vector_norm's own backward gives 0 there).

``where_log_grad`` puts the single-where log where a real run has it: an attention-entropy
term (Zhai et al. 2023, "Stabilizing Transformer Training by Preventing Attention Entropy
Collapse", track the attention entropy; a regulariser on it is the step after) switched
on at step 40, computed as -sum(p * log p) with the "safe" log. A causal mask makes
every attention row hold exact zeros, so the first step with the term is NaN in every
gradient while its loss is finite. The loss is the lever: the trainer's loss gains the
term (:class:`EntropyTerm`), the config does not change. ``diagnose`` reads it from
locate's report: every forward value finite, the first non-finite value in the backward
pass (:mod:`nanlab.debug.backward_nan_checks`).

>>> from nanlab.faults import get_fault
>>> get_fault("where_log_grad").cure
'double_where'
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from nanlab.faults.catalogue import Fault, Param, register
from nanlab.faults.fixes import FIXES, Fix, NotApplicable
from nanlab.faults.levers import Injection
from nanlab.train.trainer import Trainer


def single_where_log(p: torch.Tensor) -> torch.Tensor:
    """log p where p > 0, else 0: finite forward, NaN gradient at p = 0.

    >>> p = torch.tensor([0.0, 0.5], requires_grad=True)
    >>> (p * single_where_log(p)).sum().backward()
    >>> p.grad.isnan().tolist()
    [True, False]
    """
    return torch.where(p > 0, torch.log(p), 0.0)


def double_where_log(p: torch.Tensor) -> torch.Tensor:
    """log p where p > 0, else 0, with the log's input masked too (the "double where"):
    the unselected branch sees log(1) = 0 and its gradient stays finite.

    >>> p = torch.tensor([0.0, 0.5], requires_grad=True)
    >>> (p * double_where_log(p)).sum().backward()
    >>> p.grad.isfinite().tolist()
    [True, True]
    """
    ok = p > 0
    return torch.where(ok, torch.log(torch.where(ok, p, torch.ones_like(p))), 0.0)


def entropy(p: torch.Tensor, log: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Mean over rows of -sum(p * log p) along the last dim.

    >>> round(entropy(torch.tensor([[0.5, 0.5, 0.0]]), double_where_log).item(), 4)
    0.6931
    """
    return -(p * log(p)).sum(-1).mean()


class EntropyTerm:
    """A loss plus ``weight`` x the mean attention entropy of the model's softmaxes, from
    step ``start`` on (a step hook sets ``on``); ``log`` is the "safe" log it uses. The
    probabilities come from forward hooks on every attention module's ``softmax``.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> from nanlab.train.objective import lm_loss
    >>> from nanlab.toy.data import CountingTask
    >>> model = GPT(GPTConfig())
    >>> term = EntropyTerm(lm_loss, model, weight=0.01, start=0)
    >>> term.on = True
    >>> loss = term(model, CountingTask()(0))
    >>> loss.backward()
    >>> bool(loss.isfinite()), bool(model.wte.weight.grad.isnan().any())
    (True, True)
    """

    def __init__(self, loss_fn: Callable, model: nn.Module, weight: float, start: int,
                 log: Callable[[torch.Tensor], torch.Tensor] = single_where_log):
        self.loss_fn, self.weight, self.start, self.log = loss_fn, weight, start, log
        self.on, self.probs = False, []
        self.handles = [m.softmax.register_forward_hook(self._keep) for m in model.modules()
                        if isinstance(getattr(m, "softmax", None), nn.Module)]

    def _keep(self, module, args, out) -> None:
        if self.on:
            self.probs.append(out)

    def __call__(self, model: nn.Module, batch) -> torch.Tensor:
        self.probs = []
        loss = self.loss_fn(model, batch)
        probs, self.probs = self.probs, []
        if not probs:
            return loss
        bonus = torch.stack([entropy(p, self.log) for p in probs]).mean()
        return loss - self.weight * bonus  # a bonus: higher entropy, lower loss


def _entropy_term(inj: Injection, p: dict) -> None:
    """The built-in run's loss gains the attention-entropy bonus from ``at_step`` on."""
    term = EntropyTerm(inj.trainer.loss_fn, inj.model, p["weight"], p["at_step"])
    inj.handles += term.handles
    inj.trainer.loss_fn = term

    def switch(step: int) -> None:
        term.on = step >= term.start
    inj.step_hooks.append(switch)


register(Fault(
    name="where_log_grad", family="backward_nan",
    summary="an attention-entropy bonus whose 'safe' log is torch.where(p > 0, log(p), 0)",
    mechanism="the causal mask leaves exact zeros in every attention row; the where "
              "selects 0 there, so the forward pass and the loss are finite, but autograd "
              "differentiates log(p) too: its backward divides the 0 it is given by p = 0, "
              "and 0 / 0 = NaN reaches every weight (pytorch/pytorch#52248)",
    needs="a loss or a layer that takes the log of a value that can be exactly 0 (a "
          "probability, a count, a masked weight) behind a single torch.where; on the "
          "toy: an attention-entropy term switched on at step 40",
    reveals="grad_norms", cure="double_where", signature="nonfinite",
    params={"at_step": Param(40, 0, 100_000, help="the first step with the entropy term"),
            "weight": Param(0.01, 0.0, 10.0, help="the entropy bonus's weight (0 too: "
                                                  "0 x the NaN is NaN)")},
    on_toy=_entropy_term,
    refusal="the single-where log lives in your own loss or layer code, which nanlab does "
            "not rewrite; to see it, add torch.where(p > 0, torch.log(p), 0) on a tensor "
            "with exact zeros that requires grad",
))


# -- the cure: the double where -------------------------------------------------------
def _double_where(trainer: Trainer) -> list[str]:
    """The run's entropy term given the double-where log."""
    term = trainer.loss_fn
    if not isinstance(term, EntropyTerm):
        raise NotApplicable("double_where: this run's loss has no single-where log nanlab "
                            "installed; mask the log's input in your own code: "
                            "torch.where(x > 0, torch.log(torch.where(x > 0, x, 1)), 0)")
    if term.log is double_where_log:
        return []
    term.log = double_where_log
    return ["entropy term's log: torch.where(p > 0, log(p), 0) -> the double where "
            "torch.where(p > 0, log(torch.where(p > 0, p, 1)), 0)"]


FIXES["double_where"] = Fix(
    "double_where", "mask the log's input as well as its output (the double where), so the "
    "branch torch.where does not select never sees 0 and its gradient is finite",
    lambda c: None, _double_where, sop_step="grad_norms")


__all__ = ["EntropyTerm", "double_where_log", "entropy", "single_where_log"]
