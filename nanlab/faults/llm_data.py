"""LLM data faults: a token id past the vocabulary, and a shard of repeated-token garbage.

Both live in the token stream, where a float check sees nothing wrong:

- ``oov_token``: a token id at or past the embedding's ``num_embeddings`` (a special
  token added to the tokenizer, ``tokenizer.add_special_tokens``, without resizing the
  model's embedding). Plain PyTorch is loud: ``nn.Embedding`` raises "index out of range
  in self" on the CPU, a device-side assert on CUDA;
- ``oov_token_masked``: the same ids in a model split over the vocabulary as Megatron-LM
  splits it (:mod:`nanlab.toy.vocab_parallel`): every rank masks the id, so it embeds as a
  zero vector and its target gets a finite loss; the run spikes without an error;
- ``repeated_token_shard``: a run of batches in which some sequences are one token
  repeated (a broken dedup, a corrupted shard): legal ids, finite numbers, a spike.

The cures: ``validate_data`` (its batch check reads the legal id range from the model's
``nn.Embedding`` modules) and ``quality_filter`` (:func:`degenerate_rows`), a repetition
filter in the spirit of Gopher's (Rae et al. 2021, arXiv 2112.11446, Table A1: drop a
document whose most common 2-gram covers more than 20 % of its characters; the thresholds
as huggingface/datatrove's gopher_repetition_filter.py quotes them).

>>> from nanlab.faults import get_fault
>>> get_fault("oov_token").signature, get_fault("repeated_token_shard").cure
('error', 'quality_filter')
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.batch_check import label_range
from nanlab.faults.catalogue import Fault, Param, needs_batch, register
from nanlab.faults.fixes import FIXES, Fix
from nanlab.faults.levers import Injection
from nanlab.toy.data import IGNORE_INDEX, step_generator
from nanlab.train.batches import map_tensors, named_tensors, replace_tensor, tensor_paths
from nanlab.train.trainer import Trainer

MAX_TOKEN_SHARE = 0.5  # a sequence whose most common token is more than half of it is junk
MIN_TOKENS = 8  # a shorter sequence (after padding is left out) is too short to judge
ROW_SEED = 1_000_003  # the rows and positions a data fault hits: a pure function of the step


# -- the token ids of a batch, on any model --------------------------------------------
def token_paths(batch: Any, labels: str | None = None) -> tuple[tuple, tuple | None]:
    """(path of the token ids, path of the labels or None) in a batch: the first integer
    tensor of at least two dimensions (``tokens``, ``input_ids``) and ``labels`` when
    named, else the last other integer tensor of the same shape whose name does not say
    "mask" (an attention mask is not a label).

    >>> token_paths({"input_ids": torch.zeros(2, 3).long(), "attention_mask":
    ...              torch.ones(2, 3).long(), "labels": torch.zeros(2, 3).long()})
    (('input_ids',), ('labels',))
    """
    ints = [(p, t) for p, t in tensor_paths(batch)
            if not t.is_floating_point() and t.dtype != torch.bool and t.dim() >= 2]
    if not ints:
        raise NanlabError(f"this fault needs token ids (an integer tensor of shape (batch, "
                          f"sequence)) in the batch; got {type(batch).__name__}")
    tokens_path, tokens = ints[0]
    if labels is not None:
        return tokens_path, (labels,)
    others = [p for p, t in ints[1:] if t.shape == tokens.shape
              and "mask" not in str(p[-1]).lower()]
    return tokens_path, (others[-1] if others else None)


def label_shift(tokens: torch.Tensor, labels: torch.Tensor) -> int | None:
    """1 when the labels are the tokens shifted left by one (the toy's targets), 0 when
    they are the tokens themselves (Hugging Face's ``labels``, shifted inside the model),
    None when neither: then a fault leaves the labels alone.

    >>> t = torch.tensor([[1, 2, 3, 4]])
    >>> label_shift(t, torch.tensor([[-100, 3, 4, 5]])), label_shift(t, t.clone())
    (1, 0)
    """
    for shift in (0, 1):
        a, b = tokens[:, shift:], labels[:, :labels.shape[1] - shift]
        keep = b != IGNORE_INDEX
        if keep.any() and torch.equal(a[keep], b[keep]):
            return shift
    return None


def input_embedding(model: nn.Module) -> nn.Embedding:
    """The embedding that reads the token ids: Hugging Face's ``get_input_embeddings()``,
    else the model's first ``nn.Embedding``.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> input_embedding(GPT(GPTConfig())).num_embeddings
    32
    """
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    emb = emb if isinstance(emb, nn.Embedding) else next(
        (m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    if emb is None:
        raise NanlabError(f"{type(model).__name__} has no nn.Embedding: an id past the "
                          "vocabulary needs an embedding table to be past")
    return emb


def _edit_tokens(inj: Injection, p: dict, edit) -> None:
    """Apply ``edit(tokens, labels, shift, rows, g)`` to the batches of steps
    [at_step, at_step + length), on copies; rows are the sequences hit."""
    def apply(batch, step):
        tpath, lpath = token_paths(batch, inj.labels)
        found = dict(tensor_paths(batch))
        tokens = found[tpath].clone()
        labels = found[lpath].clone() if lpath else None
        shift = label_shift(tokens, labels) if labels is not None else None
        g = step_generator(ROW_SEED, step)
        n = max(1, round(p["fraction"] * tokens.shape[0]))
        rows = torch.randperm(tokens.shape[0], generator=g)[:n].sort().values
        edit(tokens, labels, shift, rows, g)
        batch = replace_tensor(batch, tpath, tokens)
        return replace_tensor(batch, lpath, labels) if labels is not None else batch
    for step in range(p["at_step"], p["at_step"] + p["length"]):
        inj.on_batch(step, lambda batch, step=step: apply(batch, step))


def _install_oov(inj: Injection, p: dict) -> None:
    inj._need("model", inj.model)
    bad = input_embedding(inj.model).num_embeddings + p["past_end"]

    def edit(tokens, labels, shift, rows, g):
        T = tokens.shape[1]
        for _ in range(p["per_sequence"]):
            at = torch.randint(1, T, (len(rows),), generator=g)  # where the new token sits
            tokens[rows, at] = bad
            if shift is not None:  # the same id in the labels, where the pipeline put it
                held = labels[rows, at - shift]
                labels[rows, at - shift] = torch.where(held == IGNORE_INDEX, held, bad)
    _edit_tokens(inj, p, edit)


def _install_repeats(inj: Injection, p: dict) -> None:
    def edit(tokens, labels, shift, rows, g):
        first = tokens[rows, :1]  # each junk sequence repeats its own first token
        tokens[rows] = first.expand(-1, tokens.shape[1])
        if labels is not None:
            held = labels[rows]
            labels[rows] = torch.where(held == IGNORE_INDEX, held, first)
    _edit_tokens(inj, p, edit)


def _shard(at: int, length: int, fraction: float) -> dict[str, Param]:
    return {"at_step": Param(at, 0, 100_000, help="the first batch of the bad shard"),
            "length": Param(length, 1, 100_000, help="how many batches in a row it lasts"),
            "fraction": Param(fraction, 0.001, 1.0, help="the share of each batch's "
                                                          "sequences it hits (at least one)")}


PAST_END = Param(0, 0, 10**6, help="how far past the last embedding row the id is (0: the "
                                   "first id a tokenizer adds, num_embeddings)")
PER_SEQUENCE = Param(1, 1, 10**6, help="how many times the id sits in each sequence hit")

register(Fault(
    name="oov_token", family="llm_data",
    summary="a token id past the embedding (a tokenizer grown by a special token, the model "
            "not resized), in every sequence of one batch",
    mechanism="nn.Embedding indexes its weight by the id; PyTorch checks the range and stops "
              "with 'index out of range in self' on the CPU (a device-side assert on CUDA); "
              "the cross-entropy checks its targets the same way",
    needs="a tokenizer whose vocabulary is larger than the model's embedding "
          "(add_special_tokens without resize_token_embeddings); a plain nn.Embedding",
    reveals="data", cure="validate_data", signature="error",
    params={**_shard(40, 1, 1.0), "past_end": PAST_END, "per_sequence": PER_SEQUENCE},
    install=_install_oov, foreign=lambda inj, p: None,
))

register(Fault(
    name="oov_token_masked", family="llm_data",
    summary="the same id past the vocabulary in a model split over the vocabulary "
            "(Megatron-LM's tensor parallelism): no error, a spike",
    mechanism="every vocabulary slice masks an id it does not own, so an id no slice owns "
              "embeds as a zero vector (VocabParallelEmbedding) and, as a target, gets a "
              "predicted logit of 0 after the max is subtracted, a finite loss of log Z - max "
              "(vocab_parallel_cross_entropy); the sequences lose the token they counted "
              "from, the next predictions miss and the loss spikes, then recovers",
    needs="an embedding and a cross-entropy split over the vocabulary that mask ids outside "
          "each slice (GPTConfig.vocab_partitions = 2), and a shard of 5 batches from step "
          "150 in which every sequence holds the unknown id once",
    reveals="data", cure="validate_data", signature="spike",
    params={**_shard(150, 5, 1.0), "past_end": PAST_END, "per_sequence": PER_SEQUENCE},
    conditions=lambda p: {"model": {"vocab_partitions": 2}},
    install=_install_oov,
    refusal="it needs an embedding and a cross-entropy split over the vocabulary that mask "
            "ids outside each slice (Megatron-LM's tensor parallelism); on one device use "
            "oov_token, which crashes as a plain nn.Embedding does",
))

register(Fault(
    name="repeated_token_shard", family="llm_data",
    summary="a shard of 5 batches in which a quarter of the sequences are one token "
            "repeated (a broken dedup, a corrupted shard)",
    mechanism="every id is legal and every number finite, so no batch check fires; the model "
              "has learned to count, so on 'a a a a ...' it predicts the next count with "
              "confidence and pays a large cross-entropy on every junk position: the batch "
              "loss spikes, and the updates that fit the junk raise the loss of the clean "
              "sequences for a while after the shard",
    needs="junk sequences in the data (no repetition filter) arriving after the model has "
          "learned, here from step 150",
    reveals="data", cure="quality_filter", signature="spike",
    params=_shard(150, 5, 0.25),
    install=_install_repeats, foreign=lambda inj, p: None,
    check=needs_batch(want_float=False),
))


# -- the cure: a repetition filter -----------------------------------------------------
def degenerate_rows(tokens: torch.Tensor, labels: torch.Tensor | None = None,
                    max_share: float = MAX_TOKEN_SHARE) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows to drop, each row's top-token share): the share of a sequence's tokens that
    are its most common token, counted over the positions whose label is not masked
    (padding is not junk), against ``max_share``; a sequence with fewer than
    ``MIN_TOKENS`` such positions is too short to judge and is kept.

    A token-level cousin of Gopher's "top n-gram character fraction" filter (Rae et al.
    2021, Table A1): the toy's clean sequences count in strides, so their most common
    token is at most 4 of 32 (stride 4); one token repeated is 32 of 32.

    >>> tokens = torch.tensor([[5] * 8, [1, 2, 3, 4] * 2, [6] * 8])
    >>> labels = tokens.clone()
    >>> labels[2, 4:] = IGNORE_INDEX       # the last row: 4 tokens, then padding
    >>> junk, share = degenerate_rows(tokens, labels)
    >>> junk.tolist(), share.tolist()      # the last is too short to judge
    ([True, False, False], [1.0, 0.25, 1.0])
    """
    keep = labels != IGNORE_INDEX if labels is not None and labels.shape == tokens.shape \
        else torch.ones_like(tokens, dtype=torch.bool)
    shares, counted = [], []
    for row, k in zip(tokens, keep, strict=True):
        kept = row[k] if k.any() else row
        shares.append(float(torch.unique(kept, return_counts=True)[1].max()) / len(kept))
        counted.append(len(kept))
    share = torch.tensor(shares)
    return (share > max_share) & (torch.tensor(counted) >= MIN_TOKENS), share


def _rows(batch, keep: torch.Tensor):
    """The batch with only the rows ``keep`` of every tensor whose first dimension is the
    batch size (other tensors, e.g. positions, unchanged)."""
    B = len(keep)
    return map_tensors(batch, lambda t: t[keep] if t.dim() and t.shape[0] == B else t)


def _quality_filter(trainer: Trainer) -> None:
    """Drop the junk sequences of every batch before the model sees it; a batch with
    nothing left is skipped, as validate_data skips a bad one."""
    source = trainer.batches

    def filtered(index: int):
        for _ in range(100):
            batch = source(index)
            tpath, lpath = token_paths(batch)
            found = dict(tensor_paths(batch))
            junk, share = degenerate_rows(found[tpath], found[lpath] if lpath else None)
            if not junk.any():
                return batch
            keep = ~junk
            trainer.record.log_event("filtered", trainer.step, batch=index,
                                     dropped=int(junk.sum()), of=len(junk),
                                     top_token_share=round(float(share.max()), 3))
            if keep.any():
                return _rows(batch, keep)
            trainer.skip_batches.add(index)
            trainer.data_position = index + 1
            index = trainer.next_batch_index()
        raise NanlabError(f"quality_filter: 100 batches in a row up to batch {index} hold "
                          "nothing but junk sequences: the data source itself is broken")
    trainer.batches = filtered


FIXES["quality_filter"] = Fix(
    "quality_filter", f"drop every sequence whose most common token is more than "
    f"{MAX_TOKEN_SHARE:.0%} of it (a repetition filter, as Gopher's)", lambda c: {},
    _quality_filter, sop_step="data")


def oov_ids(trainer: Trainer, batch) -> list[tuple[str, int, tuple, int]]:
    """(tensor name, id, its position, the embedding's num_embeddings) of the first id at
    or past an embedding in each id tensor of ``batch``, read from the model's
    ``nn.Embedding`` modules (:func:`nanlab.faults.batch_check.label_range`).

    >>> from nanlab.train.config import TrainConfig
    >>> trainer = Trainer(TrainConfig(progress=False))
    >>> batch = trainer.batches(0)
    >>> batch.tokens[3, 5] = 40                 # an id the 32-row embedding does not have
    >>> oov_ids(trainer, batch)
    [('tokens', 40, (3, 5), 32)]
    """
    ranges = label_range(trainer, batch)
    named = dict(named_tensors(batch, "batch" if isinstance(batch, torch.Tensor) else ""))
    found = []
    for name, limit in ranges.ids.items():
        t = named.get(name)
        bad = (t >= limit) if t is not None else None
        if bad is not None and bad.any():
            at = tuple(int(i) for i in bad.nonzero()[0])
            found.append((name, int(t[at]), at, limit))
    return found


__all__ = ["MAX_TOKEN_SHARE", "MIN_TOKENS", "degenerate_rows", "input_embedding", "label_shift",
           "oov_ids", "token_paths"]
