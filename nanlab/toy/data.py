"""The synthetic task: counting in steps, modulo the vocabulary size.

Each sequence starts at a random token ``a`` and counts in a random stride ``c``:
``a, a+c, a+2c, ...`` (mod ``vocab_size``). The model predicts the next token. After
two tokens the stride is known, so a small Transformer drives the loss near zero
within a couple of hundred steps: a clean baseline against which every fault shows.

The first target of each sequence cannot be predicted from one token (the stride is
still unknown), so the pipeline masks it out of the loss with ``IGNORE_INDEX``, as a
real pipeline masks prompt or padding tokens.

A real pipeline also carries numbers, not only token ids. Here every token comes
with one float feature, its numeric reading (think "a sensor value beside each
event"), which the pipeline standardises per batch, ``(x - mean) / std``, before it
enters the model through a linear layer. That float path is where NaN / inf inputs
and a zero std can enter, as they do in real data.

A batch is a pure function of ``(seed, step)``: any step's batch can be rebuilt
exactly, which is what replay and diagnosis need.

>>> task = CountingTask(seed=0)
>>> batch = task(7)          # the batch of step 7, always the same
>>> batch.tokens.shape, batch.features.shape
(torch.Size([32, 32]), torch.Size([32, 32, 1]))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from nanlab.errors import NanlabError, check_range

IGNORE_INDEX = -100  # a target with this value is masked out of the loss (PyTorch's default)


@dataclass
class Batch:
    """One training batch. ``targets == IGNORE_INDEX`` marks positions left out of the loss.

    >>> b = CountingTask(seed=0)(0)          # the batch of step 0
    >>> tuple(b.tokens.shape), tuple(b.features.shape)
    ((32, 32), (32, 32, 1))
    >>> bool((b.targets[:, 0] == IGNORE_INDEX).all())   # the first target is masked
    True
    """

    tokens: torch.Tensor  # (B, T) long
    targets: torch.Tensor  # (B, T) long
    features: torch.Tensor  # (B, T, F) float, standardised


def step_generator(seed: int, step: int) -> torch.Generator:
    """A torch.Generator seeded from (seed, step) alone, so batches do not depend on history.

    >>> a = torch.rand(3, generator=step_generator(0, 40))
    >>> torch.equal(a, torch.rand(3, generator=step_generator(0, 40)))
    True
    """
    state = np.random.SeedSequence([seed, step]).generate_state(2, dtype=np.uint64)
    return torch.Generator().manual_seed(int(state[0] >> np.uint64(1)))


def standardize(x: torch.Tensor, dim: tuple[int, ...] = (0, 1)) -> torch.Tensor:
    """Per-batch z-score, as a streaming pipeline would do it.

    No guard on purpose: a column that is constant across the batch has std 0, and
    (x - mean) / std is then 0 / 0 = NaN. ``nanlab`` teaches the guard
    (``std.clamp_min(eps)``); the pipeline does not have it yet.

    >>> standardize(torch.tensor([[[1.0], [3.0]]])).flatten().tolist()
    [-1.0, 1.0]
    >>> standardize(torch.full((1, 2, 1), 5.0)).flatten().tolist()   # std 0: 0 / 0
    [nan, nan]
    """
    mean = x.mean(dim, keepdim=True)
    std = x.std(dim, keepdim=True, unbiased=False)
    return (x - mean) / std


@dataclass
class RawBatch:
    """A batch before standardisation: the place where data faults can strike.

    >>> raw = CountingTask(seed=0).raw(0)
    >>> raw.raw_features[0, :4, 0].tolist() == raw.tokens[0, :4].float().tolist()
    True
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    raw_features: torch.Tensor  # (B, T, F) float, unscaled


RawHook = Callable[[int, RawBatch], RawBatch]


class CountingTask:
    """Batches of the counting task, a pure function of (seed, step).

    ``raw_hooks`` run on each raw batch before standardisation (``hook(step, raw)``):
    that is how ``nanlab.faults`` corrupts data the way a broken upstream job would.

    >>> task = CountingTask(seed=0)
    >>> torch.equal(task(40).tokens, CountingTask(seed=0)(40).tokens)   # same (seed, step)
    True
    >>> def nan_at_40(step, raw):
    ...     if step == 40:
    ...         raw.raw_features[0, 5, 0] = float("nan")
    ...     return raw
    >>> task.raw_hooks.append(nan_at_40)
    >>> bool(task(40).features.isnan().any()), bool(task(39).features.isnan().any())
    (True, False)
    """

    def __init__(
        self,
        seed: int = 0,
        batch_size: int = 32,
        seq_len: int = 32,
        vocab_size: int = 32,
        max_stride: int = 7,
        pad_id: int | None = None,
        pad_prob: float = 0.0,
    ):
        check_range("seed", seed, 0, integer=True)
        check_range("batch_size", batch_size, 2, integer=True)
        check_range("seq_len", seq_len, 2, integer=True)
        check_range("vocab_size", vocab_size, 4, integer=True)
        check_range("max_stride", max_stride, 1, vocab_size - 1, integer=True)
        self.seed, self.batch_size, self.seq_len = seed, batch_size, seq_len
        self.vocab_size, self.max_stride = vocab_size, max_stride
        check_range("pad_prob", pad_prob, 0.0, 1.0)
        if pad_prob and pad_id is None:
            raise NanlabError(f"pad_prob={pad_prob} needs a pad_id (a token id for padding)")
        self.pad_id, self.pad_prob = pad_id, pad_prob
        self.raw_hooks: list[RawHook] = []

    n_features = 1

    def raw(self, step: int) -> RawBatch:
        g = step_generator(self.seed, step)
        B, T, V = self.batch_size, self.seq_len, self.vocab_size
        start = torch.randint(0, V, (B, 1), generator=g)
        stride = torch.randint(1, self.max_stride + 1, (B, 1), generator=g)
        seq = (start + stride * torch.arange(T + 1)) % V  # (B, T+1)
        tokens, targets = seq[:, :-1], seq[:, 1:].clone()  # (B, T) each
        targets[:, 0] = IGNORE_INDEX  # unpredictable before the stride is known
        if self.pad_prob:  # short sequences, padded at the end and masked out of the loss
            short = torch.rand(B, generator=g) < self.pad_prob
            length = torch.randint(2, T, (B,), generator=g)
            pad = short[:, None] & (torch.arange(T)[None, :] >= length[:, None])  # (B, T)
            tokens = tokens.masked_fill(pad, self.pad_id)
            targets = targets.masked_fill(pad, IGNORE_INDEX)
        features = tokens.float()[:, :, None]  # (B, T, 1) the numeric reading of each token
        return RawBatch(tokens=tokens, targets=targets, raw_features=features)

    def __call__(self, step: int) -> Batch:
        check_range("step", step, 0, integer=True)
        raw = self.raw(step)
        for hook in self.raw_hooks:
            raw = hook(step, raw)
        return Batch(raw.tokens, raw.targets, standardize(raw.raw_features))
