"""Per-sample loss attribution: which sequences of a spiking batch carry the spike.

A batch loss is a mean; when it spikes, the question is whether every sample got worse
(the model moved: an LR, an optimizer state) or a few samples are far worse than the
rest (the data: a junk document, a corrupted shard). :func:`per_sample_loss` answers it
by running the run's own loss function on each sample alone, so it works for any model
and loss that take a batch-first batch, and ranks the samples with what their tokens
look like (the share of the most common token: one token repeated is 1.0).

>>> from nanlab.toy.model import GPT, GPTConfig
>>> from nanlab.toy.data import CountingTask
>>> import torch
>>> torch.manual_seed(0) and None
>>> batch = CountingTask(batch_size=4)(0)
>>> batch.tokens[2] = 7                      # one junk sequence
>>> a = per_sample_loss(GPT(GPTConfig()), batch)
>>> len(a.samples), a.by_index[2].top_share
(4, 1.0)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from nanlab.faults.llm_data import MAX_TOKEN_SHARE, degenerate_rows, token_paths
from nanlab.train.batches import map_tensors, tensor_paths, to_device
from nanlab.train.objective import lm_loss

CULPRIT_FACTOR = 3.0  # a sample whose loss is above 3x the batch's median carries the spike


@dataclass(frozen=True)
class SampleLoss:
    """One sample of a batch: its loss alone, its most common token and that token's share.

    >>> SampleLoss(index=2, loss=4.1, top_token=7, top_share=1.0).top_share
    1.0
    """

    index: int
    loss: float
    top_token: int | None
    top_share: float | None


@dataclass
class Attribution:
    """The samples of one batch, highest loss first, and who carries the loss.

    >>> a = Attribution([SampleLoss(1, 9.0, 7, 1.0), SampleLoss(0, 0.1, 3, 0.1),
    ...                  SampleLoss(2, 0.1, 4, 0.1)])
    >>> [s.index for s in a.culprits()], a.pattern()
    ([1], 'one token repeated (its most common token is 100% of it)')
    """

    samples: list[SampleLoss]  # ranked by loss, highest first (NaN last)

    @property
    def by_index(self) -> dict[int, SampleLoss]:
        return {s.index: s for s in self.samples}

    @property
    def median(self) -> float:
        finite = [s.loss for s in self.samples if math.isfinite(s.loss)]
        return float(np.median(finite)) if finite else math.nan

    def culprits(self, factor: float = CULPRIT_FACTOR) -> list[SampleLoss]:
        """The samples whose loss is above ``factor`` x the median: they carry the spike."""
        return [s for s in self.samples if math.isfinite(s.loss) and s.loss > factor * self.median]

    def share(self, samples: list[SampleLoss] | None = None) -> float:
        """The culprits' (or ``samples``') part of the batch's summed loss."""
        total = sum(s.loss for s in self.samples if math.isfinite(s.loss))
        part = sum(s.loss for s in (self.culprits() if samples is None else samples))
        return part / total if total > 0 else math.nan

    def pattern(self, max_share: float = MAX_TOKEN_SHARE) -> str | None:
        """What every culprit has and no other sample has, in words; None when nothing
        sets them apart (then the model, not the data, is the likelier suspect)."""
        bad = self.culprits()
        rest = [s for s in self.samples if s not in bad]
        if not bad or any(s.top_share is None for s in self.samples):
            return None
        if all(s.top_share > max_share for s in bad) and \
                all(s.top_share <= max_share for s in rest):
            low = min(s.top_share for s in bad)
            what = "one token repeated" if low == 1.0 else "mostly one token"
            return f"{what} (its most common token is {low:.0%} of it)"
        return None

    def report(self, top: int = 5) -> str:
        lines = [f"{len(self.samples)} samples, median loss {self.median:.3g}; "
                 f"{len(self.culprits())} above {CULPRIT_FACTOR:g}x the median carry "
                 f"{self.share():.0%} of the batch's loss"]
        for s in self.samples[:top]:
            token = f", token {s.top_token} is {s.top_share:.0%} of it" \
                if s.top_share is not None else ""
            lines.append(f"  sample {s.index}: loss {s.loss:.3g}{token}")
        return "\n".join(lines)

    __str__ = report


def per_sample_loss(model: nn.Module, batch: Any,
                    loss_fn: Callable[[nn.Module, Any], torch.Tensor] = lm_loss, *,
                    state: dict | None = None) -> Attribution:
    """Each sample's loss alone (``loss_fn`` on a batch of one), ranked, with its tokens'
    pattern (:func:`nanlab.faults.llm_data.degenerate_rows`).

    Every tensor whose first dimension is the batch size is sliced; the model runs in eval
    mode without gradients and is left as it was. ``state`` (a ``state_dict``, e.g. a
    checkpoint's "model") scores a copy of the model with those weights instead: the
    model as it was when the batch arrived.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> from nanlab.toy.data import CountingTask
    >>> a = per_sample_loss(GPT(GPTConfig()), CountingTask(batch_size=3)(0))
    >>> [s.index for s in a.samples] == sorted(range(3), key=lambda i: -a.by_index[i].loss)
    True
    """
    if state is not None:
        model = copy.deepcopy(model)
        model.load_state_dict(state)
    first = next((t for _, t in tensor_paths(batch) if t.dim()), None)
    if first is None:
        return Attribution([])
    B = first.shape[0]
    try:
        tpath, lpath = token_paths(batch)
        found = dict(tensor_paths(batch))
        _, shares = degenerate_rows(found[tpath], found[lpath] if lpath else None)
        tops = [int(torch.mode(row).values) for row in found[tpath]]
    except Exception:  # noqa: BLE001 - no token ids (a classifier's features): losses only
        shares, tops = None, None
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    losses = []
    try:
        with torch.no_grad():
            for i in range(B):
                one = map_tensors(batch, lambda t, i=i: t[i:i + 1]
                                  if t.dim() and t.shape[0] == B else t)
                losses.append(float(loss_fn(model, to_device(one, device))))
    finally:
        for m, mode in modes:
            m.train(mode)
    samples = [SampleLoss(i, losses[i], tops[i] if tops else None,
                          float(shares[i]) if shares is not None else None) for i in range(B)]
    samples.sort(key=lambda s: -s.loss if math.isfinite(s.loss) else math.inf)
    return Attribution(samples)


__all__ = ["CULPRIT_FACTOR", "Attribution", "SampleLoss", "per_sample_loss"]
