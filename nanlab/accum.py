"""Gradient accumulation: one optimizer step over several micro-batches, done right.

A step's batch is cut into ``TrainConfig.accum_steps`` micro-batches along the first
dimension; each gets its own forward and backward pass, and the gradients add up in
``p.grad`` before the one optimizer step. Two things must hold for that sum to be the
gradient of the whole batch:

- **Normalisation.** The step's loss is the sum over every unmasked target of every
  micro-batch divided by their total count. A loss that is a mean over a micro-batch's
  own targets is therefore weighted by ``n_i / N`` (its count over the step's count), not
  by ``1 / accum_steps``: averaging the micro-batches' means lets a short micro-batch's
  tokens weigh more. This was Hugging Face transformers' Trainer bug of 2024
  (huggingface/transformers PR #34191 "Fix Gradient Accumulation issue"; the HF blog
  "Fixing Gradient Accumulation", huggingface/blog PR #2414; Unsloth's write-up
  https://unsloth.ai/blog/gradient). A micro-batch with no unmasked target adds 0 to the
  sum: it is left out, because its own mean is 0 / 0 = NaN and NaN * 0 is still NaN.
- **One GradScaler step per optimizer step.** Gradients stay scaled, and the scale stays
  the same, until every micro-batch has been added; then unscale_, step and update run
  once ("Gradient accumulation" in PyTorch's "Automatic Mixed Precision examples",
  docs/source/notes/amp_examples.rst: "If grads are unscaled (or the scale factor
  changes) before accumulation is complete, the next backward pass will add scaled grads
  to unscaled grads").

``accum_norm="mean_of_means"`` and ``scaler_update`` other than "step" are the bugs,
written as real training loops write them (the ``grad_accum`` fault family).

>>> from nanlab.train import TrainConfig, Trainer
>>> trainer = Trainer(TrainConfig(accum_steps=4, progress=False))
>>> batch = trainer.batches(0)
>>> [tuple(m.tokens.shape) for m in split_batch(batch, 4)]
[(8, 32), (8, 32), (8, 32), (8, 32)]
>>> [target_count(m) for m in split_batch(batch, 4)]   # 8 rows x 31 unmasked targets
[248, 248, 248, 248]
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from nanlab.batches import map_tensors, tensor_paths
from nanlab.data import IGNORE_INDEX
from nanlab.errors import NanlabError


class StepParts(Protocol):
    """What accumulation needs of a trainer (nanlab.train.Trainer has them all); named
    here so this module sits below the trainer that calls it.

    Example::

        accumulate(trainer, batch, trainer.loss_fn)   # any object with these parts
    """

    config: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any
    device: torch.device

    def autocast(self) -> Any: ...


def _rows(batch: Any) -> int:
    sizes = [t.shape[0] for _, t in tensor_paths(batch) if t.dim() >= 1]
    if not sizes:
        raise NanlabError("accum_steps > 1 needs a batch with at least one tensor that has "
                          f"a batch dimension; got {type(batch).__name__}")
    return sizes[0]


def split_batch(batch: Any, n: int) -> list[Any]:
    """``n`` micro-batches: every tensor whose first dimension is the batch's is cut along
    it (as ``torch.tensor_split``), any other value is shared.

    >>> [m[0].tolist() for m in split_batch((torch.arange(5), 7), 2)]
    [[0, 1, 2], [3, 4]]
    """
    rows = _rows(batch)
    if n > rows:
        raise NanlabError(f"accum_steps={n} is more than the batch's {rows} rows; allowed: "
                          f"1 to {rows}")
    return [map_tensors(batch, lambda t, i=i: t.tensor_split(n)[i]
                        if t.dim() >= 1 and t.shape[0] == rows else t) for i in range(n)]


def target_count(batch: Any) -> int:
    """How many targets a mean loss over this batch averages: the entries of its label
    tensor (the last integer tensor, as ``nanlab.faults.inject`` finds labels) that are
    not ``IGNORE_INDEX``; a batch without integer labels: its number of rows.

    >>> target_count((torch.ones(3, 2), torch.tensor([1, -100, 2])))
    2
    >>> target_count(torch.ones(4, 2))
    4
    """
    labels = [t for _, t in tensor_paths(batch)
              if not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool]
    if not labels:
        return _rows(batch)
    return int((labels[-1] != IGNORE_INDEX).sum())


def accumulate(trainer: StepParts, batch: Any, loss_fn) -> torch.Tensor:
    """Forward and backward over ``config.accum_steps`` micro-batches into ``p.grad``;
    returns the step's loss (detached). The caller unscales, clips and steps once.

    The default weights each micro-batch's mean loss by ``n_i / N``; with
    ``accum_norm="mean_of_means"`` every weight is ``1 / accum_steps``. With
    ``scaler_update="micro_batch"`` the scaler is updated after every micro-batch (a
    misplaced line); with ``"unscale_micro_batch"`` each micro-batch is unscaled first,
    as a loop does that clips or logs per micro-batch (a second ``unscale_`` before
    ``update()`` raises "unscale_() has already been called on this optimizer since the
    last update()", torch/amp/grad_scaler.py).

    >>> from nanlab.train import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(accum_steps=2, progress=False))
    >>> round(accumulate(trainer, trainer.batches(0), trainer.loss_fn).item(), 1)
    3.5
    """
    c, scaler = trainer.config, trainer.scaler
    micro = split_batch(batch, c.accum_steps)
    counts = [target_count(m) for m in micro]
    total = sum(counts)
    by_tokens = c.accum_norm == "tokens" and total > 0  # no target at all: 0 / 0 stays NaN
    trainer.optimizer.zero_grad(set_to_none=True)
    step_loss = torch.zeros((), device=trainer.device)
    for m, n in zip(micro, counts, strict=True):
        if by_tokens and n == 0:
            continue  # a sum over no target: adds exactly 0
        weight = n / total if by_tokens else 1 / c.accum_steps
        with trainer.autocast():
            loss = loss_fn(trainer.model, m) * weight
        (scaler.scale(loss) if scaler else loss).backward()
        step_loss = step_loss + loss.detach().float()
        if scaler and c.scaler_update != "step":
            if c.scaler_update == "unscale_micro_batch":
                scaler.unscale_(trainer.optimizer)  # the sum so far, now in true units
            scaler.update()  # resets the scaler's per-optimizer state: unscale_ may run again
    return step_loss
