"""Tensor parallelism over the vocabulary, simulated in one process: what it does to a bad id.

Megatron-LM splits the token embedding and the output layer over the tensor-parallel
ranks by vocabulary: rank r holds the rows [r * V / n, (r + 1) * V / n). Each rank
looks up only the ids in its own slice and masks the others, then the ranks add their
results (an all-reduce). The masking is what makes an id outside the vocabulary silent:

- ``VocabParallelEmbedding.forward`` (megatron/core/tensor_parallel/layers.py) builds
  ``input_mask = (input_ < vocab_start_index) | (input_ >= vocab_end_index)``, looks
  up row 0 for masked ids and sets their output to 0.0 before the reduce. An id that
  no rank owns comes out as a zero vector, with no error;
- ``vocab_parallel_cross_entropy`` (megatron/core/tensor_parallel/cross_entropy.py)
  subtracts the global max logit, builds ``target_mask`` the same way, sets the
  predicted logit of a masked target to 0 and sums over the ranks; the loss is
  ``log(sum_exp_logits) - predicted_logits``. A target that no rank owns gets a
  predicted logit of 0 (the max, once the max is subtracted): its loss is
  ``log Z - max``, finite, and its gradient is the softmax alone (no -1 at the target).

Here the n ranks are n slices of one weight, so the arithmetic is Megatron's, in order,
and the sum over slices stands for the all-reduce.

>>> emb = VocabParallelEmbedding(8, 4, partitions=2)
>>> emb(torch.tensor([3, 9])).abs().sum(-1).gt(0).tolist()   # 9 is owned by no rank
[True, False]
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanlab.errors import NanlabError


def vocab_ranges(vocab_size: int, partitions: int) -> list[tuple[int, int]]:
    """[start, end) of each rank's slice (Megatron's VocabUtility: V / n rows each).

    >>> vocab_ranges(32, 2)
    [(0, 16), (16, 32)]
    """
    if partitions < 1 or vocab_size % partitions:
        raise NanlabError(f"vocab_size={vocab_size} cannot be split into {partitions} equal "
                          "vocabulary partitions; allowed: a divisor of vocab_size")
    per = vocab_size // partitions
    return [(r * per, (r + 1) * per) for r in range(partitions)]


class VocabParallelEmbedding(nn.Embedding):
    """An embedding split into ``partitions`` vocabulary slices, each masking the ids it
    does not own (Megatron-LM's VocabParallelEmbedding with its all-reduce as a sum).

    It is an ``nn.Embedding`` with the full table, so ``num_embeddings`` still says
    which ids are legal (what a batch check reads); only the lookup differs.

    >>> emb = VocabParallelEmbedding(8, 2, partitions=2)
    >>> ids = torch.tensor([0, 5, 7])
    >>> torch.equal(emb(ids), F.embedding(ids, emb.weight))   # legal ids: the same rows
    True
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, partitions: int = 2,
                 **kwargs):
        super().__init__(num_embeddings, embedding_dim, **kwargs)
        self.ranges = vocab_ranges(num_embeddings, partitions)

    def forward(self, input_: torch.Tensor) -> torch.Tensor:
        out = 0
        for start, end in self.ranges:  # one tensor-parallel rank each
            input_mask = (input_ < start) | (input_ >= end)
            masked_input = input_.clone() - start
            masked_input[input_mask] = 0
            pad = self.padding_idx
            own_pad = pad - start if pad is not None and start <= pad < end else None
            output_parallel = F.embedding(masked_input, self.weight[start:end], own_pad)
            output_parallel = output_parallel.masked_fill(input_mask[..., None], 0.0)
            out = out + output_parallel  # the all-reduce over the ranks
        return out


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                                 partitions: int) -> torch.Tensor:
    """Per-token loss ``log(sum_exp_logits) - predicted_logits`` with the logits' last
    dimension split into ``partitions`` slices, as Megatron-LM computes it.

    The max is the global one and held constant (Megatron's backward is softmax minus
    the one-hot of an owned target: the same gradient as autograd with the max detached).

    >>> logits = torch.tensor([[2.0, 0.0, 1.0, -1.0]])
    >>> ce = vocab_parallel_cross_entropy(logits, torch.tensor([2]), 2)
    >>> torch.allclose(ce, F.cross_entropy(logits, torch.tensor([2]), reduction="none"))
    True
    >>> oov = vocab_parallel_cross_entropy(logits, torch.tensor([4]), 2)   # no rank owns 4
    >>> torch.allclose(oov, torch.logsumexp(logits, -1) - logits.max())    # log Z - max
    True
    """
    logits = logits.float()
    logits_max = logits.max(dim=-1).values.detach()  # the all-reduce MAX over the ranks
    predicted_logits = 0
    sum_exp_logits = 0
    for start, end in vocab_ranges(logits.shape[-1], partitions):
        part = logits[..., start:end] - logits_max.unsqueeze(-1)
        target_mask = (target < start) | (target >= end)
        masked_target = target.clone() - start
        masked_target[target_mask] = 0
        predicted = part.gather(-1, masked_target.unsqueeze(-1)).squeeze(-1)
        predicted_logits = predicted_logits + predicted.masked_fill(target_mask, 0.0)
        sum_exp_logits = sum_exp_logits + torch.exp(part).sum(dim=-1)  # all-reduce SUM
    return torch.log(sum_exp_logits) - predicted_logits


__all__ = ["VocabParallelEmbedding", "vocab_parallel_cross_entropy", "vocab_ranges"]
