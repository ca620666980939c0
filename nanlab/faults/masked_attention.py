"""The masked-attention family: a query that may attend to no key at all.

A padding mask hides keys from the softmax. When it hides every key of a query row, a
mask filled with -inf leaves the softmax nothing: the row max is -inf, -inf - (-inf) is
NaN (0 / 0 without the max subtracted). The NaN row is then a value that other queries
weight by exactly 0, and 0 * NaN is NaN: the next layer spreads it to real tokens.
pytorch/pytorch#103749 ("SDPA produces NaN with padding mask") shows it for a padded
row, and that ``torch.finfo(dtype).min`` as the fill gives a finite result. Two ways in:

- ``left_padding_inf_mask``: left padding (a tokenizer's ``padding_side="left"``) under
  a causal mask: the first positions of a padded row are queries whose only keys are
  padding. Legal data; the cure is the fill: Hugging Face masks with
  ``torch.finfo(dtype).min`` (``transformers/masking_utils.py``, ``eager_mask``), which
  leaves such a row finite (:data:`FIXES` ``finite_mask``);
- ``empty_sequence``: an example with no token at all (an empty line of a corpus), so its
  key-padding mask hides every key of the row: broken data, which the batch check names
  (:func:`nanlab.faults.batch_check.mask_problems`) and ``validate_data`` skips.

What this torch (2.13, CPU) and transformers (5.25) do, measured
(tests/test_masked_attention.py): ``F.scaled_dot_product_attention`` returns 0 for a fully
masked row (PyTorch's ``_safe_softmax``, pytorch/pytorch#131863 and #133882, which list
#103749 among the reports of NaN before it), and ``nn.TransformerEncoder`` in training
uses it: no NaN. ``nn.MultiheadAttention`` with
``need_weights=True`` (its default) computes the softmax itself and returns NaN; so does
``nn.TransformerEncoder`` in eval mode. GPT-2 and Llama, eager or SDPA, fp32 or bf16,
stay finite with an empty row or left padding: their masks are finfo.min.

On the built-in run the faults act through levers, never a config switch: a left-padding
pipeline (:class:`PaddedBatch`, the loss passing its ``attention_mask`` to the model)
and the model's score module swapped for one that fills with -inf (:class:`InfMaskScores`).

>>> from nanlab.faults import get_fault
>>> get_fault("empty_sequence").cure, get_fault("left_padding_inf_mask").cure
('validate_data', 'finite_mask')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import AT_STEP, Fault, Param, register
from nanlab.faults.fixes import FIXES, Fix
from nanlab.faults.levers import Injection
from nanlab.toy.data import IGNORE_INDEX, Batch, step_generator
from nanlab.toy.model import AttentionScores
from nanlab.train.batches import named_tensors, replace_tensor, tensor_paths
from nanlab.train.trainer import Trainer

PAD_ID = 0  # the toy's padding token: any id will do, its keys are hidden and targets ignored
ROW_SEED = 2_000_003  # the pad lengths of a left-padded batch: a pure function of the step


@dataclass
class PaddedBatch(Batch):
    """A toy batch with Hugging Face's ``attention_mask`` (B, T): 1 at a token, 0 at padding.

    >>> from nanlab.toy.data import CountingTask
    >>> padded = with_mask(CountingTask()(0))
    >>> padded.attention_mask.shape, int(padded.attention_mask.min())
    (torch.Size([32, 32]), 1)
    """

    attention_mask: torch.Tensor | None = None


def with_mask(batch: Batch) -> PaddedBatch:
    """The batch with an all-ones attention mask (no padding yet).

    >>> from nanlab.toy.data import CountingTask
    >>> with_mask(CountingTask()(0)).attention_mask.sum().item()
    1024
    """
    if isinstance(batch, PaddedBatch):
        return batch
    return PaddedBatch(batch.tokens, batch.targets, batch.features,
                       torch.ones_like(batch.tokens))


def left_pad(batch: Batch, step: int, max_pad: int) -> PaddedBatch:
    """Each row shifted right by 0 to ``max_pad`` positions (drawn from the step) and
    padded on the left, as a tokenizer with ``padding_side="left"`` pads: pad tokens, zero
    features, ignored targets, and 0 in the attention mask. The row's last tokens fall off
    the end, so the shape stays (B, T).

    >>> from nanlab.toy.data import CountingTask
    >>> padded = left_pad(CountingTask()(0), 0, max_pad=4)
    >>> pads = (padded.attention_mask == 0).sum(1)      # padding positions per row
    >>> int(pads.min()), int(pads.max()), bool((padded.targets[pads > 0, 0] == -100).all())
    (0, 4, True)
    """
    b = with_mask(batch)
    B, T = b.tokens.shape
    shift = torch.randint(0, max_pad + 1, (B,), generator=step_generator(ROW_SEED, step))
    src = (torch.arange(T)[None, :] - shift[:, None])  # where each position reads from
    pad = src < 0
    take = src.clamp(min=0)
    tokens = b.tokens.gather(1, take).masked_fill(pad, PAD_ID)
    targets = b.targets.gather(1, take).masked_fill(pad, IGNORE_INDEX)
    features = b.features.gather(1, take[..., None].expand_as(b.features))
    features = features.masked_fill(pad[..., None], 0.0)
    return PaddedBatch(tokens, targets, features, (~pad).long())


def empty_row(batch: Any, row: int) -> Any:
    """``row`` made an empty example: every key-padding mask of the batch hides its whole
    row (:func:`padding_masks`); in a toy :class:`PaddedBatch` its tokens are padding and
    its targets ignored too. Returns a copy.

    >>> b = empty_row({"x": torch.ones(2, 3), "key_padding_mask": torch.zeros(2, 3).bool()}, 1)
    >>> b["key_padding_mask"].tolist()
    [[False, False, False], [True, True, True]]
    """
    if isinstance(batch, PaddedBatch):
        tokens, targets = batch.tokens.clone(), batch.targets.clone()
        features = batch.features.clone()
        tokens[row], targets[row], features[row] = PAD_ID, IGNORE_INDEX, 0.0
        batch = PaddedBatch(tokens, targets, features, batch.attention_mask)
    for path, name, mask in padding_masks(batch):
        hidden = mask.clone()
        hidden[row] = _hidden_value(name, mask)
        batch = replace_tensor(batch, path, hidden)
    return batch


def _hidden_value(name: str, mask: torch.Tensor):
    """What hides a key in this mask's convention: Hugging Face's attention_mask 0,
    PyTorch's bool True, an additive float mask -inf (nanlab.faults.batch_check.mask_problems)."""
    if mask.is_floating_point():
        return float("-inf")
    if name.lower().endswith("attention_mask"):
        return 0
    return True


def padding_masks(batch: Any) -> list[tuple[tuple, str, torch.Tensor]]:
    """(path, name, tensor) of the batch's key-padding masks: 2-D tensors (batch, keys)
    named like one (``key_padding_mask``, ``src_key_padding_mask``, ``attention_mask``).
    A square causal ``attn_mask`` / ``tgt_mask`` is not per row and is left out.

    >>> [n for _, n, _ in padding_masks({"ids": torch.zeros(2, 3).long(),
    ...                                  "attention_mask": torch.ones(2, 3).long()})]
    ['attention_mask']
    """
    names = dict(zip([p for p, _ in tensor_paths(batch)],
                     [n for n, _ in named_tensors(batch)], strict=True))
    found = []
    for path, t in tensor_paths(batch):
        name = names[path].lower()
        if t.dim() == 2 and ("padding_mask" in name or name.endswith("attention_mask")):
            found.append((path, names[path], t))
    return found


class InfMaskScores(AttentionScores):
    """The toy's attention scores with padded keys filled with -inf instead of
    ``torch.finfo(dtype).min``, as a hand-written attention (or nn.MultiheadAttention
    computing its weights) fills them: a row whose every key is padding is all -inf, and
    the softmax makes it -inf - (-inf) = NaN.

    >>> q = torch.ones(1, 1, 2, 4)
    >>> hidden = torch.tensor([True, True])[None, None, None, :]
    >>> InfMaskScores()(q, q, hidden).flatten().tolist()
    [-inf, -inf, -inf, -inf]
    """

    def forward(self, q: torch.Tensor, k: torch.Tensor,
                hidden: torch.Tensor | None = None) -> torch.Tensor:
        att = super().forward(q, k)
        return att if hidden is None else att.masked_fill(hidden, float("-inf"))


def swap_scores(model: nn.Module, make) -> int:
    """Put ``make(softcap)`` in place of every AttentionScores module whose type is not
    already ``make``, keeping its soft-cap; returns how many.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> swap_scores(GPT(GPTConfig()), InfMaskScores)
    2
    """
    found = [(parent, name, child) for parent in model.modules()
             for name, child in parent.named_children()
             if isinstance(child, AttentionScores) and type(child) is not make]
    for parent, name, child in found:
        setattr(parent, name, make(child.attn_logit_softcapping))
    return len(found)


def _padding_pipeline(inj: Injection, pad_from: int | None, max_pad: int) -> None:
    """The toy run's batches carry an attention mask (left-padded from step ``pad_from``;
    None: never; the loss passes it to the model) and its scores fill padding with -inf."""
    source = inj.source

    def padded(i: int):
        batch = source(i)
        return left_pad(batch, i, max_pad) if pad_from is not None and i >= pad_from \
            else with_mask(batch)
    inj.source = padded
    swap_scores(inj.model, InfMaskScores)


def _warn_if_finite(inj: Injection, p: dict) -> None:
    """On a model that was passed, warn once when its output at the fault's step (the
    ``at_step + 1``-th forward pass) is finite: its attention gives a row with no key a
    finite result, so the run goes on clean (measured: SDPA, Hugging Face's masks)."""
    if inj.model is None:
        return
    holder = []

    def look(module, args, out):
        if holder and holder[0].active and any(
                t.is_floating_point() and not bool(torch.isfinite(t).all())
                for _, t in named_tensors(out)):
            holder[0].saw()
    inj.hook(inj.model.register_forward_hook(look))  # before the watch's count: runs first
    holder.append(inj.watch(lambda: (
        f"{inj.fault}: the model's output stayed finite at step {p['at_step']}, whose batch "
        f"hides every key of row {p['row']}: its attention gives a row with no key a finite "
        "result (scaled_dot_product_attention returns 0 there, a torch.finfo(dtype).min "
        "mask a uniform row), so nothing fails"), p["at_step"] + 1))


def _needs_mask(inj: Injection, p: dict) -> None:
    """Refuse, in one line, a batch that carries no key-padding mask, or a row past it."""
    batch = inj.preview(p["at_step"])
    masks = padding_masks(batch)
    if not masks:
        held = ", ".join(n for n, _ in named_tensors(batch)) or "none"
        raise NanlabError(f"{inj.fault}: the batch of step {p['at_step']} carries no "
                          f"key-padding mask (a 2-D tensor named key_padding_mask, "
                          f"src_key_padding_mask or attention_mask; its tensors: {held}); a "
                          "model that builds its mask from pad ids inside forward needs a "
                          "row of pad ids instead")
    rows = masks[0][2].shape[0]
    if p["row"] >= rows:
        raise NanlabError(f"{inj.fault}.row={p['row']} is out of range; allowed: 0 to "
                          f"{rows - 1} (the batch of step {p['at_step']} has {rows} rows)")


register(Fault(
    name="left_padding_inf_mask", family="masked_attention",
    summary="left-padded batches under a causal mask, with padded keys filled with -inf",
    mechanism="the first positions of a left-padded row are queries whose keys, under the "
              "causal mask, are all padding; filled with -inf, their scores are a row of "
              "-inf and the softmax gives -inf - (-inf) = NaN; the NaN rows are values the "
              "next layer weights by exactly 0, and 0 * NaN = NaN reaches the real tokens",
    needs="a causal model fed left-padded batches (a tokenizer's padding_side='left', "
          "here from step 40 on) with their attention mask, and a hand-written attention "
          "that masks with -inf rather than torch.finfo(dtype).min",
    reveals="data", cure="finite_mask", signature="nonfinite",
    params={"at_step": Param(40, 0, 100_000, help="the first left-padded batch"),
            "max_pad": Param(8, 1, 31, help="the most padding positions of a row")},
    on_toy=lambda inj, p: _padding_pipeline(inj, p["at_step"], p["max_pad"]),
    refusal="the -inf fill lives in the model's own attention code and nanlab does not "
            "rewrite your model (Hugging Face's masks use torch.finfo(dtype).min and "
            "torch's scaled_dot_product_attention returns 0 for a row with no key): to see "
            "it, left-pad a batch for a hand-written attention that fills with -inf",
))

register(Fault(
    name="empty_sequence", family="masked_attention",
    summary="one example of a batch is empty: its key-padding mask hides every key of "
            "the row",
    mechanism="every query of the row has no key to attend to; with a -inf fill the "
              "softmax over a row of -inf is -inf - (-inf) = NaN (pytorch/pytorch#103749), "
              "and the NaN reaches the weights through the backward pass even where the "
              "row's targets are ignored",
    needs="an empty example (an empty line of a corpus, a filter that dropped every token) "
          "and an attention whose softmax sees the -inf (nn.MultiheadAttention with "
          "need_weights=True, a hand-written one; on the toy its scores fill with -inf); "
          "on your model: a batch that carries the key-padding mask; it warns when the "
          "model's output at its step is finite",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP,
            "row": Param(0, 0, 100_000, help="the row of the batch that is empty")},
    on_toy=lambda inj, p: _padding_pipeline(inj, None, 0),
    install=lambda inj, p: inj.on_batch(p["at_step"], lambda b: empty_row(b, p["row"])),
    foreign=_warn_if_finite, check=_needs_mask,
))


# -- the cure for legal padding: a finite fill ---------------------------------------
def _finite_mask(trainer: Trainer) -> list[str]:
    """Every -inf-filling score module of the toy swapped back for the one that fills
    with torch.finfo(dtype).min."""
    n = swap_scores(trainer.model, AttentionScores)  # only its subclasses are swapped
    return [f"{n} attention mask fill{'s' if n > 1 else ''} -inf -> torch.finfo(dtype).min"] \
        if n else []


FIXES["finite_mask"] = Fix(
    "finite_mask", "mask padded keys with torch.finfo(dtype).min instead of -inf (Hugging "
    "Face's fill): a query with no key left gets a finite softmax", lambda c: None,
    _finite_mask, sop_step="data")


__all__ = ["InfMaskScores", "PAD_ID", "PaddedBatch", "empty_row", "left_pad", "padding_masks",
           "swap_scores", "with_mask"]
