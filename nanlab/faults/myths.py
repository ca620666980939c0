"""Myth checks: failures people blame for NaN that only stall a run (dead ReLUs, a deep
chain of sigmoids). Nothing overflows; the loss stops falling. Both are architectures,
so on a model nanlab did not make they are refused with what to build instead.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

import torch.nn as nn

from nanlab.faults.catalogue import Fault, Param, register

if TYPE_CHECKING:
    from nanlab.faults.levers import Injection


def relu_feeders(model: nn.Module) -> list[nn.Module]:
    """The Linear / Conv layers with a bias whose output goes straight into a ReLU: the
    layer registered just before an ``nn.ReLU`` in the same parent (an MLP's first
    Linear, a Sequential's layer before its ReLU).

    >>> mlp = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> relu_feeders(mlp) == [mlp[0]]
    True
    """
    found = []
    for parent in model.modules():
        children = list(parent.children())
        for before, child in pairwise(children):
            if isinstance(child, nn.ReLU) and isinstance(
                    before, (nn.Linear, nn.modules.conv._ConvNd)) and before.bias is not None:
                found.append(before)
    return found


def _dead_biases(inj: Injection, p: dict) -> None:
    """Every bias feeding a ReLU set to ``bias`` after the model's own init."""
    for layer in relu_feeders(inj.model):
        nn.init.constant_(layer.bias, p["bias"])

register(Fault(
    name="dead_relu", family="myth",
    summary="myth check: ReLU units that are all dead from the start",
    mechanism="a large negative bias puts every pre-activation below 0; ReLU passes no "
              "signal and no gradient, so those layers stop learning. Nothing overflows "
              "and nothing divides by zero: the loss stalls, it does not become NaN",
    needs="ReLU with a bias of -10 and a plain stack (no residual), so nothing bypasses it",
    reveals="grad_norms", cure="sane_init", signature="stall",
    params={"bias": Param(-10.0, -1e3, 0.0)},
    conditions=lambda p: {"model": {"activation": "relu", "residual": False}},
    on_toy=_dead_biases,
    refusal="dead ReLUs are a property of the architecture: ReLUs behind layers whose bias "
            "is -10, with no residual path around them, and nanlab cannot tell which layer "
            "feeds which ReLU in your model: set those biases yourself "
            "(nn.init.constant_(layer.bias, -10)) to see the stall",
))

register(Fault(
    name="sigmoid_chain", family="myth",
    summary="myth check: a deep chain of sigmoids without residual connections",
    mechanism="sigmoid's slope is at most 1/4, so the gradient shrinks at every layer and "
              "vanishes; the early layers barely move. It stalls; it does not overflow",
    needs="sigmoid activations, a deep plain stack (no residual, no LayerNorm), Xavier init",
    reveals="grad_norms", cure="modern_block", signature="stall",
    params={"n_layer": Param(8, 2, 64)},
    conditions=lambda p: {"model": {"activation": "sigmoid", "n_layer": p["n_layer"],
                                    "residual": False, "use_norms": False,
                                    "init": "xavier"}},
    refusal="a deep chain of sigmoids without residual connections or norms is an "
            "architecture, and nanlab does not rebuild your model: build the stack so "
            "(sigmoid activations, no residual, no norms) to see the stall",
))
