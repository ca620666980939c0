"""SOP step 1, the batch check: what is wrong with a batch, in words, on any model.

Every float tensor finite; integer tensors are labels or token ids, checked against the
range the model itself can take (its ``nn.Embedding`` sizes, its output's classes:
:func:`label_range`); a row made only of padding, or an attention mask row that hides
every key, is a 0 / 0 waiting to happen. ``validate_data`` (:mod:`nanlab.faults.fixes`)
skips a batch this check rejects; diagnose's data step reads it.

>>> batch_problems({"x": torch.tensor([[1.0, float("nan")]])})
['x: 1 non-finite value(s) (1 NaN, 0 inf) of 2']
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from nanlab.toy.data import IGNORE_INDEX
from nanlab.train.batches import map_tensors, named_tensors
from nanlab.train.trainer import Trainer, to_device


@dataclass(frozen=True)
class LabelRange:
    """The legal values of a batch's integer tensors, read from the model itself.

    ``ids`` maps the name of each batch tensor an embedding reads (token ids) to that
    embedding's size: its values must be below it. ``classes`` is the last dimension of
    the model's output (the logits), when it scores at least two classes; any other
    integer tensor shaped like the output without that dimension (``label_shape``) is a
    label and must be below ``classes``. -100 (``IGNORE_INDEX``) is always legal.

    >>> r = LabelRange(classes=5, label_shape=(4,), ids={"tokens": 20})
    >>> r.limit("y", torch.zeros(4).long()), r.limit("tokens", torch.zeros(4).long())
    (5, 20)
    """

    classes: int | None
    label_shape: tuple[int, ...] | None
    ids: dict[str, int] = field(default_factory=dict)
    pads: dict[str, int] = field(default_factory=dict)  # tensor -> its embedding's padding_idx

    def limit(self, name: str, t: torch.Tensor) -> int | None:
        if name in self.ids:
            return self.ids[name]
        if self.classes is not None and tuple(t.shape) == self.label_shape:
            return self.classes
        return None


_RANGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def label_range(trainer: Trainer, batch) -> LabelRange:
    """The legal label and id range of ``trainer``'s model (:class:`LabelRange`), measured
    once per model by one forward pass without gradients.

    The pass runs on a harmless copy of ``batch`` (integers 0, floats 0), so a batch
    with illegal labels cannot crash it (on CUDA that would be a device-side assert), and
    the RNG and every module's train / eval mode are left as they were.

    >>> from nanlab.train import TrainConfig
    >>> trainer = Trainer(TrainConfig(progress=False))
    >>> label_range(trainer, trainer.batches(0)).classes
    32
    """
    model = trainer.model
    if model in _RANGES:
        return _RANGES[model]
    seen: list = []
    embedded: dict[int, int] = {}  # data_ptr of an embedding's input -> its size
    padded: dict[int, int] = {}  # data_ptr of an embedding's input -> its padding_idx

    def read_ids(module, args):
        if args and isinstance(args[0], torch.Tensor):
            embedded[args[0].data_ptr()] = module.num_embeddings
            if getattr(module, "padding_idx", None) is not None:
                padded[args[0].data_ptr()] = int(module.padding_idx) % module.num_embeddings
    handles = [model.register_forward_hook(lambda module, args, output: seen.append(output))]
    handles += [m.register_forward_pre_hook(read_ids) for m in model.modules()
                if isinstance(m, nn.Embedding)]
    modes = [(m, m.training) for m in model.modules()]
    harmless = to_device(map_tensors(batch, lambda t: t if t.dtype == torch.bool
                                     else torch.zeros_like(t)),
                         trainer.device, trainer.input_dtype)
    devices = [trainer.device] if trainer.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad(), trainer.autocast():
            model.eval()
            trainer.loss_fn(model, harmless)
    except Exception:  # noqa: BLE001 - the forward may have run; only its output matters
        pass
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes:
            m.train(mode)
    prefix = "batch" if isinstance(batch, torch.Tensor) else ""
    ids = {name: embedded[t.data_ptr()] for name, t in named_tensors(harmless, prefix)
           if not t.is_floating_point() and t.numel() and t.data_ptr() in embedded}
    pads = {name: padded[t.data_ptr()] for name, t in named_tensors(harmless, prefix)
            if name in ids and t.data_ptr() in padded}
    out = _logits(seen[0]) if seen else None
    if out is None or out.dim() < 2 or out.shape[-1] < 2:
        found = LabelRange(None, None, ids, pads)
    else:
        found = LabelRange(int(out.shape[-1]), tuple(out.shape[:-1]), ids, pads)
    _RANGES[model] = found
    return found


def _logits(output) -> torch.Tensor | None:
    """The scores in a model's output: a tensor, ``.logits`` (Hugging Face), or the first
    tensor of a tuple or dict."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, dict) and isinstance(output.get("logits"), torch.Tensor):
        return output["logits"]
    return next((t for _, t in named_tensors(output)), None)


def batch_problems(batch, vocab_size: int | LabelRange | None = None) -> list[str]:
    """What is wrong with a batch, in words; [] for a clean one (SOP step 1).

    Every float tensor must be finite; integer tensors are labels or ids: no negative
    value other than IGNORE_INDEX (-100), not all masked (a mean over nothing is
    0 / 0), and below the model's range: ``vocab_size`` for every integer tensor when it
    is a number, or per tensor from a :class:`LabelRange` (:func:`label_range`).

    >>> from nanlab.toy.data import CountingTask
    >>> batch_problems(CountingTask()(0), vocab_size=32)
    []
    >>> batch_problems((torch.zeros(3, 2), torch.tensor([0, 7, 1])),
    ...                LabelRange(classes=5, label_shape=(3,)))
    ['[1]: 1 illegal label(s) [7] (legal: 0 to 4, or -100)']
    >>> ids = LabelRange(None, None, {"ids": 32})   # an embedding of 32 rows reads "ids"
    >>> found = batch_problems({"ids": torch.tensor([[3, 32]])}, ids)
    >>> print(*found)  # doctest: +NORMALIZE_WHITESPACE
    ids: token id 32 at position [0, 1] is outside the embedding (num_embeddings 32;
    legal ids: 0 to 31); 1 such id(s)
    """
    problems = []
    for name, t in named_tensors(batch, "batch" if isinstance(batch, torch.Tensor) else ""):
        if "mask" in name.lower() and t.dim() >= 2:  # an attention or padding mask
            problems += mask_problems(name, t)
            continue
        if t.is_floating_point() or t.is_complex():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                nan = int(torch.isnan(t).sum())
                problems.append(f"{name}: {bad} non-finite value(s) ({nan} NaN, "
                                f"{bad - nan} inf) of {t.numel()}")
            continue
        if t.dtype == torch.bool:
            continue
        limit = vocab_size.limit(name, t) if isinstance(vocab_size, LabelRange) else vocab_size
        if isinstance(vocab_size, LabelRange) and name in vocab_size.ids:  # ids an embedding reads
            illegal = (t < 0) | (t >= limit)  # -100 is no id: an embedding cannot look it up
            if illegal.any():
                at = tuple(int(i) for i in illegal.nonzero()[0])
                problems.append(f"{name}: token id {int(t[at])} at position {list(at)} is "
                                f"outside the embedding (num_embeddings {limit}; legal ids: 0 "
                                f"to {limit - 1}); {int(illegal.sum())} such id(s)")
            pad, rows = padding_rows(t, vocab_size.pads.get(name))
            if rows:
                problems.append(f"{name}: {len(rows)} row(s) {rows[:5]} hold only padding "
                                f"(id {pad}): nothing to attend to or average over, 0 / 0")
            continue
        valid = t != IGNORE_INDEX
        if t.numel() and not valid.any():
            problems.append(f"{name}: every target is masked ({IGNORE_INDEX}): "
                            "the mean loss is 0 / 0")
        illegal = valid & (t < 0)
        if limit is not None:
            illegal |= valid & (t >= limit)
        if illegal.any():
            values = sorted(set(t[illegal].tolist()))[:5]
            legal = f"0 to {limit - 1}, or {IGNORE_INDEX}" if limit is not None else \
                f"0 or more, or {IGNORE_INDEX}"
            problems.append(f"{name}: {int(illegal.sum())} illegal label(s) {values} "
                            f"(legal: {legal})")
    return problems


def mask_problems(name: str, mask: torch.Tensor) -> list[str]:
    """The rows of an attention mask that let a query attend to no key: the softmax over
    all -inf is 0 / 0, NaN (pytorch/pytorch#103749). Read in each library's convention: a
    float mask is additive (-inf masks), a tensor named ``attention_mask`` is Hugging
    Face's (1 attends, 0 is masked), any other bool mask PyTorch's ``key_padding_mask`` /
    ``attn_mask`` (True may not attend). A NaN in a float mask is a problem too.

    >>> mask_problems("src_key_padding_mask", torch.tensor([[False, True], [True, True]]))
    ['src_key_padding_mask: 1 row(s) [1] mask every key: a softmax over nothing is 0 / 0, NaN']
    >>> mask_problems("attention_mask", torch.tensor([[1, 1], [0, 1]]))  # left padding: fine
    []
    """
    rows = mask.reshape(-1, mask.shape[-1])
    if mask.is_floating_point():
        if torch.isnan(rows).any():
            return [f"{name}: {int(torch.isnan(rows).sum())} NaN value(s) in a float mask"]
        dead = (rows == float("-inf")).all(-1)
    elif name.lower().split(".")[-1].endswith("attention_mask"):
        dead = (rows == 0).all(-1)
    elif mask.dtype == torch.bool:
        dead = rows.all(-1)
    else:
        return []
    found = [int(i) for i in dead.nonzero().flatten()]
    if not found:
        return []
    return [f"{name}: {len(found)} row(s) {found[:5]} mask every key: a softmax over nothing "
            "is 0 / 0, NaN"]


def padding_rows(ids: torch.Tensor, pad: int | None = None) -> tuple[int | None, list[int]]:
    """(the padding id, the rows made only of it) of a batch of token ids (rows x
    positions). ``pad`` is the embedding's ``padding_idx``; without one, the padding is
    read from the batch: an id that, in every row, only ever closes it as a trailing run,
    two or more long in some row that also holds other ids.

    >>> src = torch.tensor([[5, 3, 0, 0], [7, 2, 4, 0], [0, 0, 0, 0]])
    >>> padding_rows(src), padding_rows(src[:2])
    ((0, [2]), (0, []))
    >>> padding_rows(torch.tensor([[1, 2, 3], [4, 4, 4]]))  # a repeated token: no padding
    (None, [])
    """
    if ids.dim() != 2 or ids.shape[1] < 2 or ids.is_floating_point():
        return None, []
    if pad is None:
        for p in torch.unique(ids[:, -1]).tolist():
            is_p = ids == p
            after = is_p.int().cummax(1).values.bool()  # from the first p on
            padded = (is_p.sum(1) >= 2) & ~is_p.all(1)
            if not (after & ~is_p).any() and padded.any():
                pad = int(p)
                break
    if pad is None:
        return None, []
    return pad, [int(i) for i in (ids == pad).all(1).nonzero().flatten()]
