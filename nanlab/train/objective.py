"""What a training step optimises and at what rate: the loss, the LR schedule, the grad norm.

Kept apart from the trainer so that a lab, a replay or a foreign loop computes the same
numbers as :class:`nanlab.train.Trainer` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanlab.errors import NanlabError
from nanlab.toy.data import IGNORE_INDEX
from nanlab.toy.vocab_parallel import vocab_parallel_cross_entropy
from nanlab.train.config import TrainConfig


def lm_loss(model: nn.Module, batch, z_loss: float = 0.0, vocab_partitions: int = 1,
            cross_entropy: Callable | None = None) -> torch.Tensor:
    """Next-token cross-entropy, averaged over the targets that are not masked. A batch
    with an ``attention_mask`` (a padded one) passes it to the model.

    A batch whose targets are all masked has nothing to average over: the mean is
    0 / 0 = NaN, exactly as in PyTorch's own ``ignore_index`` handling.

    ``cross_entropy(logits, targets)`` replaces torch's (a loss written by hand, as the
    fp16_overflow fault's is; masked targets are IGNORE_INDEX). ``z_loss`` adds ``z_loss
    * log(Z)^2`` (Z = the softmax normaliser, PaLM's auxiliary loss): it pulls the
    output logits' scale back towards zero, so they cannot drift up.
    ``vocab_partitions`` > 1 computes the cross-entropy split over the vocabulary as
    Megatron-LM does (:mod:`nanlab.toy.vocab_parallel`), with the masked targets left out by
    a loss mask, as Megatron's ``loss_mask`` does.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> from nanlab.train.trainer import TrainConfig, default_task
    >>> batch = default_task(TrainConfig())(0)
    >>> model = GPT(GPTConfig())
    >>> abs(lm_loss(model, batch).item() - math.log(32)) < 0.1   # a fresh model: ln(vocab)
    True
    >>> batch.targets[:] = IGNORE_INDEX                             # every target masked
    >>> lm_loss(model, batch).isnan().item()                       # 0 / 0
    True
    """
    if not all(hasattr(batch, f) for f in ("tokens", "features", "targets")):
        raise NanlabError(f"the default loss (nanlab.train.objective.lm_loss) reads the toy task's "
                          f"batch (.tokens, .features, .targets); got {type(batch).__name__}; "
                          "for your own batches pass Trainer(loss_fn=lambda model, batch: ...)")
    mask = getattr(batch, "attention_mask", None)  # a padded batch: 1 = token, 0 = padding
    logits = (model(batch.tokens, batch.features) if mask is None else
              model(batch.tokens, batch.features, attention_mask=mask)).flatten(0, 1)  # (B*T, V)
    targets = batch.targets.flatten()
    if cross_entropy is not None:
        loss = cross_entropy(logits, targets)
    elif vocab_partitions > 1:
        loss_mask = (targets != IGNORE_INDEX).float()
        losses = vocab_parallel_cross_entropy(logits, targets, vocab_partitions)
        loss = (losses * loss_mask).sum() / loss_mask.sum()
    else:
        loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    if z_loss:
        keep = targets != IGNORE_INDEX
        log_z = torch.logsumexp(logits.float()[keep], dim=-1)
        loss = loss + z_loss * (log_z**2).mean()
    return loss


def lr_factor(step: int, config: TrainConfig) -> float:
    """The LR multiplier at ``step``: linear warmup, then cosine decay (or constant).

    step < warmup:  (step + 1) / warmup        ramps 1/warmup ... 1
    after warmup:   min + (1 - min) * (1 + cos(pi * progress)) / 2, progress 0 -> 1

    >>> from nanlab.train.config import TrainConfig
    >>> config = TrainConfig(steps=100, warmup_steps=20, min_lr_ratio=0.1)
    >>> [round(lr_factor(s, config), 3) for s in (0, 19, 20, 99)]
    [0.05, 1.0, 1.0, 0.1]
    """
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    total = config.decay_steps or config.steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, total - config.warmup_steps))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))  # 1 -> 0
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine


def global_grad_norm(params: list[nn.Parameter]) -> torch.Tensor:
    """The L2 norm of all gradients together, as a tensor (no host sync).

    >>> net = nn.Linear(2, 1)
    >>> net(torch.ones(1, 2)).sum().backward()      # grads: weight [1, 1], bias [1]
    >>> global_grad_norm(list(net.parameters()))    # sqrt(3)
    tensor(1.7321)
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norms = torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])
    return torch.linalg.vector_norm(norms)
