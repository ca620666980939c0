"""The init, norm and depth family: weights too large for the depth, a deep stack without
norms, a norm whose eps is 0 meeting a zero-variance row.

SOP step 5 (check init scale and norm eps) reveals the first and the last; the per-layer
grad-norm history (step 4) shows a stack that explodes while it trains. On a model nanlab
did not make, the init is set relative to each layer's fan-in and eps 0 goes on every
norm, with a warning where the trigger is missing (norms that undo the init, no
zero-variance row); the deep stack without norms is an architecture, refused.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import Fault, Param, register
from nanlab.faults.precision import WATCH_STEPS
from nanlab.layers.norms import norm_modules
from nanlab.toy.model import GPTConfig

if TYPE_CHECKING:
    from nanlab.faults.levers import Injection

# The built-in run's width: its init_std s gives its layers a gain s * sqrt(64) (8 at 1.0).
TOY_FAN_IN = GPTConfig().n_embd


def _large_init(inj: Injection, p: dict) -> None:
    """Each matmul weight rescaled so its std x sqrt(fan_in) is init_std x sqrt(64): the
    per-layer gain the built-in run's init_std gives its own layers (8 at 1.0, against
    about 0.16 for GPT-2's 0.02 and 0.58 for torch's default), so the same init_std is as
    bad on any width and any init. An absolute std would mean nothing across widths, and
    a factor on the layer's current std would make an already large init larger still.
    Only the layer types the cure (sane_init's reinit) re-initialises are touched, so the
    fault's own fix undoes all of it (Hugging Face's Conv1D and nn.MultiheadAttention's
    packed input projection are outside both)."""
    from nanlab.faults.fixes import INIT_LAYERS  # the cure's layer list (fixes imports much)

    inj._need("model", inj.model)
    inj.set_gain(p["init_std"] * math.sqrt(TOY_FAN_IN), only=INIT_LAYERS)
    n = len(norm_modules(inj.model))
    if n:
        warnings.warn(f"bad_init: this model has {n} normalisation modules; each rescales "
                      "the activations the large init grows, so the run may only train "
                      "worse: the overflow needs a stack without norms between its layers",
                      RuntimeWarning, stacklevel=3)

register(Fault(
    name="bad_init", family="bad_init",
    summary="init std 1.0 (50x GPT-2's 0.02) in a deep stack without LayerNorm",
    mechanism="each layer multiplies the activations by about std * sqrt(fan_in); by the "
              "last blocks an attention score q @ k overflows fp32 to inf, and the softmax's "
              "inf - inf makes the loss NaN at step 0, in the first forward pass",
    needs="no normalisation between layers (a plain deep stack); fp32 is enough",
    reveals="init_eps", cure="sane_init", signature="nonfinite",
    params={"init_std": Param(1.0, 0.0, 100.0), "n_layer": Param(6, 1, 64)},
    conditions=lambda p: {"model": {"init_std": p["init_std"], "n_layer": p["n_layer"],
                                    "use_norms": False}},
    foreign=_large_init,
))

register(Fault(
    name="deep_explosion", family="deep_explosion",
    summary="a deep stack without LayerNorm whose gradients explode during training",
    mechanism="without norms every block adds to a residual stream that grows with each "
              "update; the per-layer grad norms climb by orders of magnitude over tens of "
              "steps until the arithmetic overflows. Adam's b2 = 0.99 makes its second "
              "moment slow to follow the growing gradients, so each update stays large",
    needs="a deep stack (6 blocks) without LayerNorm, AdamW at a constant 0.015 with "
          "b2 = 0.99, no clipping. Under a cosine decay at 0.02 and b2 = 0.95 the same "
          "stack explodes to a loss of about 1e3 but stays finite on some CPUs: a run "
          "on the edge depends on the summation order",
    reveals="grad_norms", cure="modern_block", signature="nonfinite",
    params={"n_layer": Param(6, 2, 64), "lr": Param(0.015, 1e-6, 10.0),
            "beta2": Param(0.99, 0.0, 0.9999, help="Adam's second-moment decay")},
    conditions=lambda p: {"lr": p["lr"], "beta2": p["beta2"], "schedule": "constant",
                          "model": {"n_layer": p["n_layer"], "use_norms": False}},
    refusal="deep_explosion is a property of an architecture without norms, trained at a "
            "high constant LR: build your stack without norms to see it (nanlab does not "
            "take layers out of your model); bad_init or high_lr inject the explosion",
))

register(Fault(
    name="tiny_eps", family="tiny_eps",
    summary="LayerNorm eps = 0 meeting a zero-variance row (a padding token)",
    mechanism="a padding token's embedding row is all zeros; the embedding LayerNorm "
              "computes (x - mean) / sqrt(var + eps) = 0 / sqrt(0 + 0) = 0 / 0 = NaN; the "
              "NaN reaches real positions through attention, because 0 * NaN is NaN",
    needs="a norm that sees the raw embedding (BLOOM's embedding LayerNorm, or a model "
          "without absolute positions) and padded batches; fp32 is enough",
    reveals="init_eps", cure="norm_eps", signature="nonfinite",
    params={"eps": Param(0.0, 0.0, 1.0), "pad_prob": Param(0.25, 0.0, 1.0)},
    conditions=lambda p: {"pad_prob": p["pad_prob"],
                          "model": {"norm_eps": p["eps"], "embed_norm": True,
                                    "vocab_size": 33, "pad_id": 32}},
    foreign=lambda inj, p: _eps_zero(inj, p), check=lambda inj, p: _has_norms(inj),
))


def _has_norms(inj: Injection) -> None:
    inj._need("model", inj.model)
    if not norm_modules(inj.model):
        raise NanlabError("tiny_eps: this model has no normalisation module (a LayerNorm, "
                          "RMSNorm, GroupNorm, BatchNorm or a *Norm* class with an eps "
                          "field); eps 0 has nothing to act on")


def zero_variance_row(module: nn.Module, args: tuple) -> bool:
    """Does a norm's input hold a row its eps-0 arithmetic divides 0 by 0 on: a constant
    row (variance exactly 0; LayerNorm, GroupNorm's group, BatchNorm's channel), or for
    an RMS norm an all-zero one?

    >>> zero_variance_row(nn.LayerNorm(3), (torch.tensor([[1., 2., 3.], [5., 5., 5.]]),))
    True
    >>> zero_variance_row(nn.RMSNorm(3), (torch.tensor([[5., 5., 5.]]),))
    False
    """
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None or not x.is_floating_point() or x.numel() == 0 or x.dim() == 0:
        return False
    x = x.detach()
    if isinstance(module, nn.GroupNorm):
        rows = x.reshape(x.shape[0] * module.num_groups, -1)
    elif isinstance(module, nn.modules.batchnorm._NormBase):
        rows = x.transpose(0, 1).reshape(x.shape[1], -1) if x.dim() > 1 else x[None]
    else:
        n = len(getattr(module, "normalized_shape", (0,)))
        rows = x.reshape(-1, math.prod(x.shape[-n:]))
    if "rms" in type(module).__name__.lower():
        return bool((rows.abs().amax(-1) == 0).any())
    return bool((rows.amax(-1) == rows.amin(-1)).any())


def _eps_zero(inj: Injection, p: dict) -> None:
    """eps set on every norm, and a watch on their inputs: eps 0 only fails on a row of
    zero variance, so a run whose first passes show none is told so."""
    inj.set_norm_eps(p["eps"])
    inj.watch(lambda: f"tiny_eps: no input row of any norm had zero variance in the first "
                      f"{WATCH_STEPS} forward passes; eps {p['eps']:g} only fails on such a "
                      "row (a padding embedding, a constant input, a masked position set "
                      "to 0), so this run trains as before",
              WATCH_STEPS, [m for _, m, _ in norm_modules(inj.model)], zero_variance_row)
