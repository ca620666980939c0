"""The precision family: fp16's range (max 65504, smallest subnormal 6e-8) met by
arithmetic that a wider type would survive: an exp or a position past the range, Adam's
eps below it.

SOP step 2 (turn mixed precision off, try bf16) reveals them. On a model nanlab did not
make, ``fp16_overflow`` runs it the way CUDA fp16 autocast does (its matmul layers in
fp16) and ``adam_eps_fp16`` makes it a pure-fp16 run; the two hand-written variants
(a softmax, a sinusoidal position) live in the model's own code and are refused.

On the built-in run each fault acts through a lever, never a config switch: the
hand-written softmax is a module swapped in for the model's (:class:`NaiveSoftmax`),
the hand-written loss wraps the objective (:func:`naive_cross_entropy`), and the
absolute positions come from a forward pre-hook on the position encoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import Fault, Param, register
from nanlab.layers.fp32_region import in_fp32_region
from nanlab.toy.data import IGNORE_INDEX
from nanlab.train.batches import map_tensors

if TYPE_CHECKING:
    from nanlab.faults.levers import Injection

FP16_MAX = 65504.0
WATCH_STEPS = 20  # forward passes in which a foreign run's trigger must show, else a warning

# CUDA fp16 autocast runs these layers' ops in fp16: "CUDA Ops that can autocast to
# float16" (linear, conv1d/2d/3d, conv_transpose*, prelu, GRUCell, LSTMCell, RNNCell,
# matmul, mm, bmm, addmm...) in PyTorch's "Automatic Mixed Precision package - torch.amp",
# Autocast Op Reference, https://pytorch.org/docs/stable/amp.html. Exp, softmax, the norms
# and the losses are on its float32 list, so they stay in fp32 here too.
AUTOCAST_FP16 = (nn.Linear, nn.modules.conv._ConvNd, nn.MultiheadAttention, nn.RNNCellBase,
                 nn.PReLU)


def autocast_layers(model: nn.Module) -> list[nn.Module]:
    """The modules CUDA fp16 autocast would run in fp16, Hugging Face's Conv1D (addmm) too.

    >>> len(autocast_layers(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2), nn.Conv1d(2, 2, 1))))
    2
    """
    return [m for m in model.modules()
            if isinstance(m, AUTOCAST_FP16) or type(m).__name__ == "Conv1D"]


def to_fp16(x):
    """``x`` rounded to fp16 and back to its dtype (tuples walked): a value past 65504 is
    inf, as autocast's fp16 cast of an input or its fp16 result would make it.

    >>> to_fp16(torch.tensor([1e5, 1.0 + 2**-12]))
    tensor([inf, 1.])
    """
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float16:
        return x.to(torch.float16).to(x.dtype)
    if isinstance(x, tuple):
        return tuple(to_fp16(v) for v in x)
    return x


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x] if x.is_floating_point() else []
    return [t for v in x for t in _tensors(v)] if isinstance(x, tuple) else []


def _fp16_autocast(inj: Injection, p: dict) -> None:
    """Forward hooks that do to every autocast-fp16 layer what CUDA fp16 autocast does:
    its float inputs cast to fp16 (positional ones; masks passed by keyword are left as
    they are), its product accumulated in fp32 and rounded to fp16 once (cublasGemmEx
    with an fp32 compute type: see nanlab.layers.half_matmul). So a value past 65504 becomes
    inf in the run's arithmetic and flows on. The weights keep fp32 (their fp16 rounding
    changes low bits, never the range), the gradient through each rounding is rounded to
    fp16 as autocast's backward would make it, and there is no GradScaler: a GradScaler
    would skip those steps, the forward's inf is the same. Values inside
    nn.MultiheadAttention between its projections are not rounded (its q @ k runs fused).
    Inside a region nanlab runs in fp32 on purpose (:mod:`nanlab.layers.fp32_region`, the
    precision bisection's autocast-disabled module) nothing is rounded, as autocast casts
    nothing there."""
    layers = autocast_layers(inj.model)
    largest = [0.0]

    def warning() -> str:
        return (f"fp16_overflow: no input or output of a layer fp16 autocast runs in fp16 "
                f"passed 65504 in the first {WATCH_STEPS} forward passes (largest "
                f"|value| {largest[0]:.4g}); fp16 overflows only where values grow past "
                "its range (inputs or targets in raw units, a large init, a growing "
                "residual stream)")
    watch = inj.watch(warning, WATCH_STEPS)

    def look(x) -> None:
        if watch.active:
            for t in _tensors(x):
                big = float(t.detach().abs().nan_to_num(0.0, 0.0, 0.0).max()) if t.numel() else 0.0
                largest[0] = max(largest[0], big)
                if big > FP16_MAX:
                    watch.saw()

    def inputs(module, args):
        if in_fp32_region():  # autocast casts nothing where it is disabled
            return None
        look(args)
        return to_fp16(args)

    def output(module, args, out):
        if in_fp32_region():
            return None
        look(out)
        return to_fp16(out)
    for m in layers:
        inj.hook(m.register_forward_pre_hook(inputs))
        inj.hook(m.register_forward_hook(output))


class NaiveSoftmax(nn.Module):
    """exp(x) / sum(exp(x)) without subtracting the max, kept out of autocast without
    ``x.float()``: every op runs in the scores' own dtype (fp16 stays fp16 on the CPU
    and on CUDA alike), so it overflows once a score passes ~88.7 in fp32, ~11.1 in fp16.

    >>> NaiveSoftmax()(torch.tensor([1000.0, 0.0]))   # exp(1000) = inf, inf / inf
    tensor([nan, 0.])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            e = torch.exp(x)
            return e / e.sum(-1, keepdim=True)  # inf / inf = NaN


def naive_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log(exp(l_y) / sum(exp(l))) written by hand, as custom label-smoothing or
    distillation losses often are: no max subtracted, and out of autocast without
    ``logits.float()``, so fp16 logits stay fp16 on any device (exp(11.1) is inf there).

    >>> logits = torch.tensor([[12.0, 0.0]]).half()
    >>> naive_cross_entropy(logits, torch.tensor([1])).item()   # -log(1 / inf)
    inf
    """
    keep = targets != IGNORE_INDEX
    with torch.autocast(logits.device.type, enabled=False):
        e = torch.exp(logits[keep])
        p = e.gather(1, targets[keep, None]) / e.sum(-1, keepdim=True)  # x / inf = 0
        return -torch.log(p).mean()


def swap_softmaxes(model: nn.Module, make: type[nn.Module], replace: tuple[type, ...]) -> int:
    """Put ``make()`` in place of every module of a ``replace`` type; returns how many.

    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Softmax(dim=-1))
    >>> swap_softmaxes(net, NaiveSoftmax, (nn.Softmax,)), type(net[1]).__name__
    (1, 'NaiveSoftmax')
    """
    found = [(parent, name) for parent in model.modules()
             for name, child in parent.named_children() if isinstance(child, replace)]
    for parent, name in found:
        setattr(parent, name, make())
    return len(found)


def _naive_softmax(inj: Injection, p: dict) -> None:
    """The built-in model's softmaxes swapped for the hand-written one."""
    from nanlab.toy.model import Softmax

    swap_softmaxes(inj.model, NaiveSoftmax, (Softmax,))


def _naive_loss(inj: Injection, p: dict) -> None:
    """The built-in run's loss computed by the hand-written cross-entropy."""
    from functools import partial

    inj.trainer.loss_fn = partial(inj.trainer.loss_fn, cross_entropy=naive_cross_entropy)


def _absolute_positions(inj: Injection, p: dict) -> None:
    """Positions that keep counting from ``offset``: a forward pre-hook on the model's
    sinusoidal encoding adds it to the position ids it is given."""
    from nanlab.toy.model import SinusoidalPositions

    for m in inj.model.modules():
        if isinstance(m, SinusoidalPositions):
            inj.hook(m.register_forward_pre_hook(
                lambda module, args: (args[0] + p["offset"], *args[1:])))


def _has_autocast_layers(inj: Injection, p: dict) -> None:
    inj._need("model", inj.model)
    if not autocast_layers(inj.model):
        raise NanlabError("fp16_overflow: this model has no layer that fp16 autocast runs "
                          "in fp16 (Linear, Conv, MultiheadAttention, an RNN cell, PReLU); "
                          "nothing of it would be computed in fp16")


register(Fault(
    name="fp16_overflow", family="fp16_overflow",
    summary="a hand-written softmax cross-entropy on the fp16 logits, under fp16 autocast",
    mechanism="the loss is computed by hand in an autocast-disabled region on the fp16 logits "
              "of the lm_head matmul, without a cast to fp32, so exp and sum run in fp16 on "
              "any device, and without subtracting the max; once the model grows confident "
              "and the softmax denominator sum(exp(logits)) passes 65504 (log-sum-exp past "
              "11.09), it is inf: the loss is -log(x / inf) = inf and the backward pass makes "
              "NaN. In fp32 and bf16 (max 3.4e38) exp only overflows past 88.7. On your "
              "model: its Linear / Conv / attention layers run as CUDA fp16 autocast runs "
              "them (inputs cast to fp16, fp32 accumulate, one rounding to fp16), so any "
              "input or activation past 65504 becomes inf and flows on",
    needs="fp16 autocast and a loss written by hand and kept out of autocast (as custom "
          "label-smoothing or distillation losses often are) without logits.float(); it "
          "strikes late, when the model has learned. Inside autocast the same loss would "
          "fire on the CPU only: CUDA autocast runs exp and sum in fp32, CPU autocast in "
          "fp16. On your model: values past 65504 (raw units, a large init); it warns "
          "when none shows",
    reveals="amp", cure="bf16", signature="nonfinite",
    conditions=lambda p: {"precision": "fp16"}, on_toy=_naive_loss,
    foreign=_fp16_autocast, check=_has_autocast_layers,
))

register(Fault(
    name="softmax_overflow", family="softmax_overflow",
    summary="a hand-written softmax, exp(x) / sum(exp(x)), on fp16 scores, under fp16 autocast",
    mechanism="the softmax runs in an autocast-disabled region on the fp16 scores of the "
              "q @ k matmul, without a cast to fp32, so exp runs in fp16 on any device; it "
              "overflows once an attention score passes ~11.09 (fp32: ~88.7) and inf / inf = "
              "NaN. Subtracting the row max first makes every exp <= 1",
    needs="a naive softmax kept out of autocast, fp16 autocast, and attention that sharpens "
          "as the model learns (LR 0.01). Inside autocast the same softmax would fire on the "
          "CPU only: CUDA autocast runs exp and sum in fp32, CPU autocast in fp16",
    reveals="amp", cure="stable_softmax", signature="nonfinite",
    params={"lr": Param(0.01, 1e-6, 10.0)},
    conditions=lambda p: {"precision": "fp16", "lr": p["lr"]}, on_toy=_naive_softmax,
    refusal="it is a softmax written by hand, exp(x) / exp(x).sum() on fp16 scores, in the "
            "model's own code, and nanlab does not rewrite your model (torch's softmax and "
            "scaled_dot_product_attention subtract the max first): write that softmax into "
            "your attention to see it, or inject fp16_overflow for fp16's range on any model",
))

register(Fault(
    name="position_overflow", family="fp16_overflow",
    summary="absolute positions past 65504 fed to a sinusoidal encoding in pure fp16",
    mechanism="the position id is cast to fp16 before the multiply; 70000 does not fit "
              "(max 65504) and becomes inf, and sin(inf) is NaN",
    needs="a sinusoidal encoding computed in the model's dtype, a pure-fp16 model, and "
          "a stream that keeps counting positions across windows; the bf16 cure works "
          "because bf16 autocast computes the encoding in fp32 (amp_off would too): in a "
          "pure-bf16 model 70000..70031 all round to 70144, no NaN but no position either",
    reveals="amp", cure="bf16", signature="nonfinite",
    params={"offset": Param(70_000, 0, 10**9)},
    conditions=lambda p: {"precision": "fp16-pure", "model": {"pos_encoding": "sinusoidal"}},
    on_toy=_absolute_positions,
    refusal="it needs a sinusoidal position encoding computed in fp16 from absolute position "
            "ids, in the model's own code, and nanlab cannot add one to your model: feed "
            "positions past 65504 to such an encoding in a model.half() run to see it",
))


def _needs_eps(inj: Injection, p: dict) -> None:
    inj._need("model", inj.model)
    inj._need("optimizer", inj.optimizer)
    if any("eps" not in g for g in inj.optimizer.param_groups):
        raise NanlabError(f"adam_eps_fp16: {type(inj.optimizer).__name__} has no eps; the "
                          "fault is an optimizer eps (Adam, AdamW, RMSprop, Adagrad) below "
                          "fp16's smallest subnormal: pass such an optimizer")


def _pure_fp16(inj: Injection, p: dict) -> None:
    """A real pure-fp16 run: the model, the optimizer's state and the float inputs in fp16,
    no fp32 master weights; the optimizer's eps set to ``eps`` (1e-8 rounds to 0)."""
    inj.model.half()  # parameters converted in place: the optimizer still holds them
    for group in inj.optimizer.param_groups:
        group["eps"] = p["eps"]
    for state in inj.optimizer.state.values():
        for k, v in state.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0:
                state[k] = v.half()  # moments; Adam's step count stays as it is
    if inj.source is not None:
        inj.map_batches(lambda b: map_tensors(
            b, lambda t: t.half() if t.is_floating_point() else t))


register(Fault(
    name="adam_eps_fp16", family="adam_eps_fp16",
    summary="AdamW with eps = 1e-8 and its state kept in pure fp16",
    mechanism="1e-8 is below fp16's smallest subnormal (6e-8) and rounds to 0; a tiny "
              "gradient's square underflows too, so the update m / (sqrt(v) + eps) is "
              "x / 0 = inf or 0 / 0 = NaN",
    needs="model and optimizer state in fp16 (model.half()), no fp32 master weights; on "
          "your model inject() does model.half(), sets the optimizer's eps and casts the "
          "float tensors of each batch to fp16 (pass batches=)",
    reveals="amp", cure="grad_scaler", signature="nonfinite",
    params={"eps": Param(1e-8, 0.0, 1.0)},
    conditions=lambda p: {"precision": "fp16-pure", "adam_eps": p["eps"]},
    foreign=_pure_fp16, check=_needs_eps,
))
