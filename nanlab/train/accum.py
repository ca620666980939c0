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

The bugs, a mean of the means and a scaler updated inside the loop, are written as real
training loops write them in the ``grad_accum`` fault family (nanlab.faults.grad_accum),
which hands this loop its own ``weight`` and ``after_backward``.

>>> from nanlab.train.trainer import TrainConfig, Trainer
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

from nanlab.errors import NanlabError
from nanlab.toy.data import IGNORE_INDEX
from nanlab.train.batches import map_tensors, tensor_paths


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


def token_weight(n: int, total: int, k: int) -> float | None:
    """A micro-batch's weight: its share ``n / total`` of the step's unmasked targets;
    None (left out) for one with no target, which would add 0 / 0. A step with no
    target at all weighs each by ``1 / k``, so its loss stays the NaN it is.

    >>> token_weight(62, 248, 4), token_weight(0, 248, 4), token_weight(0, 0, 4)
    (0.25, None, 0.25)
    """
    if total == 0:
        return 1 / k
    return n / total if n else None


def accumulate(trainer: StepParts, batch: Any, loss_fn, weight=token_weight,
               after_backward=None) -> torch.Tensor:
    """Forward and backward over ``config.accum_steps`` micro-batches into ``p.grad``;
    returns the step's loss (detached). The caller unscales, clips and steps once.

    ``weight(n, total, k)`` weighs each micro-batch's mean loss (default:
    :func:`token_weight`); ``after_backward(trainer)``, if given, runs after each
    micro-batch's backward pass. A loop with bugs passes its own (nanlab.faults.grad_accum).

    >>> from nanlab.train.trainer import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(accum_steps=2, progress=False))
    >>> round(accumulate(trainer, trainer.batches(0), trainer.loss_fn).item(), 1)
    3.5
    """
    k, scaler = trainer.config.accum_steps, trainer.scaler
    micro = split_batch(batch, k)
    counts = [target_count(m) for m in micro]
    total = sum(counts)
    trainer.optimizer.zero_grad(set_to_none=True)
    step_loss = torch.zeros((), device=trainer.device)
    for m, n in zip(micro, counts, strict=True):
        w = weight(n, total, k)
        if w is None:
            continue  # a sum over no target: adds exactly 0
        with trainer.autocast():
            loss = loss_fn(trainer.model, m) * w
        (scaler.scale(loss) if scaler else loss).backward()
        step_loss = step_loss + loss.detach().float()
        if after_backward is not None:
            after_backward(trainer)
    return step_loss
