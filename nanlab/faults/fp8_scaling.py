"""The low-precision scaling family: FP8 training whose scale, not its data, makes the NaN.

FP8 matmuls multiply each operand by ``fp8_max / amax`` before the 8-bit cast
(:mod:`nanlab.layers.fake_fp8`, fake quant through PyTorch's float8 dtypes). Two ways the
scale itself breaks a run that trains fine in bf16 or fp32:

``fp8_amax_zero``: rowwise (per-token) scaling with no floor under the amax. A row that
is exactly 0 has amax 0, the scale 448 / 0 = inf, and 0 * inf = NaN. On the toy the
rows are the gradient of the LM head at the targets the loss masks (the first position
of every sequence, ``IGNORE_INDEX``): dL/dlogits is exactly 0 there, so the NaN comes at
step 0 in the backward pass, the loss finite. pytorch/ao#3356 (rowwise Float8Tensor
training gave NaN losses until ``activation_value_lb=1e-12`` was set) is this bug; torchao's
training path clamps the amax at ``EPS = 1e-12`` in ``amax_to_scale``
(torchao/float8/float8_utils.py). Cure: ``fp8_amax_floor``.

``fp8_stale_amax``: delayed scaling (Transformer Engine's ``DelayedScaling``) with
Megatron-LM's old defaults, ``fp8_amax_history_len=1`` and ``most_recent`` (the argument
dump in NVIDIA/Megatron-LM#516): the scale of step t comes from step t-1's amax. Early in
training the gradients grow from one step to the next; a gradient above the stale amax
by more than e5m2's rounding headroom (61440 / 57344, about 7%) is past e5m2's max, and
PyTorch's cast to ``float8_e5m2`` does not saturate: inf, then inf - inf = NaN. Measured on
the toy: the NaN at step 1 (a 16-step history is no better: at step 1 it holds one
amax); a margin of 1 (2x headroom) moves it to step 20; a saturating cast (torchao's
``to_fp8_saturated``, whose comment names this very case) clips the outlier instead and
the toy trains (final loss 0.019 against 0.023 in fp32: the clipping is silent). Cure:
``fp8_current_scaling`` (TE's ``Float8CurrentScaling``: the amax of the tensor now).

Reported in the wild as NaNs that bf16 does not have: pytorch/torchtitan#865 (float8
rowwise, NaN near step 80, the bf16 control clean) and NVIDIA/Megatron-LM PR #442 (FP8
runs diverging after ~1000 steps until the amax history was reduced over the right group).

>>> from nanlab.faults import get_fault
>>> get_fault("fp8_amax_zero").cure, get_fault("fp8_stale_amax").cure
('fp8_amax_floor', 'fp8_current_scaling')
"""

from __future__ import annotations

import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import Fault, Param, register
from nanlab.faults.fixes import FIXES, Fix, NotApplicable
from nanlab.faults.levers import Injection
from nanlab.layers.fake_fp8 import EPS, fp8_layers, swap_linears
from nanlab.train.trainer import Trainer

FAMILY = "low_precision_scaling"
EVENT = "fp8"  # the record event the layers' casts leave when a scale misbehaves


def notable(stats: dict) -> bool:
    """Whether a cast's stats this step show a scale gone wrong (an amax of 0 scaled to
    inf, or a value cast to inf).

    >>> notable({"zero_amax": 2, "inf_scale": 2, "peak": 0.0, "overflow": 0})
    True
    """
    return stats["inf_scale"] > 0 or stats["overflow"] > 0


def take_stats(model: nn.Module) -> list[dict]:
    """What every FP8 cast of ``model`` saw since the last call, as event rows (only the
    notable ones), and reset the counters.

    >>> import torch
    >>> from nanlab.layers.fake_fp8 import swap_linears
    >>> net = nn.Sequential(nn.Linear(2, 2))
    >>> _ = swap_linears(net, rowwise=True, floor=None)
    >>> _ = net(torch.zeros(1, 2))
    >>> take_stats(net)[0]["operand"], take_stats(net)
    ('input', [])
    """
    rows = []
    for name, layer in fp8_layers(model).items():
        for operand, scaler in layer.scalers().items():
            if notable(scaler.stats):
                rows.append({"layer": name, "operand": operand, "recipe": scaler.recipe,
                             "rowwise": scaler.rowwise, **scaler.stats})
            scaler.stats = scaler.fresh_stats()
    return rows


def _settings(p: dict) -> dict:
    return {k: p[k] for k in ("recipe", "rowwise", "history_len", "margin") if k in p} | \
        {"floor": EPS if p.get("floor", True) else None}


def _swap(inj: Injection, p: dict) -> list[str]:
    if inj.model is None:
        raise NanlabError(f"{inj.fault}: this fault needs model=...; pass it to inject()")
    names = swap_linears(inj.model, **_settings(p))
    if not names:
        raise NanlabError(f"{inj.fault}: this model has no nn.Linear to train in FP8 (the "
                          "fault swaps each nn.Linear for a fake-quant FP8 one)")
    return names


def _on_toy(inj: Injection, p: dict) -> None:
    """The built-in run's Linears train in fake FP8; what the casts see goes to the record."""
    _swap(inj, p)

    def log(trainer: Trainer, info) -> None:
        for row in take_stats(trainer.model):
            trainer.record.log_event(EVENT, info.step, **row)
    inj.trainer.add_callback("on_after_backward", log)


def _foreign(inj: Injection, p: dict) -> None:
    """Any model's nn.Linears in fake FP8, with a warning when no scale misbehaves in the
    first 40 forward passes (the model has no zero row, or its values never outgrow the
    window)."""
    _swap(inj, p)
    model = inj.model
    inj.watch(lambda: f"{inj.fault}: no FP8 scale went wrong in 40 steps (no amax of 0, "
                          "no value past the format's max): this model's tensors never meet "
                          "the condition", steps=40, modules=[model],
                  seen=lambda m, args: bool(take_stats(model)))


register(Fault(
    name="fp8_amax_zero", family=FAMILY,
    summary="rowwise FP8 scaling with no floor under the amax, meeting a row of zeros",
    mechanism="scale = fp8_max / amax; a row that is exactly 0 (the loss's masked targets "
              "give the LM head's gradient such rows) has amax 0, the scale is 448 / 0 = inf "
              "and 0 * inf = NaN in the backward pass, the loss finite (pytorch/ao#3356)",
    needs="FP8 training with per-row (or per-block) scales and no lower bound on the amax, "
          "and a row of zeros: a masked or padded token's gradient, a zeroed feature row",
    reveals="amp", cure="fp8_amax_floor", signature="nonfinite",
    params={"rowwise": Param(True, choices=(True, False), help="one scale per row"),
            "recipe": Param("current", choices=("current", "delayed"),
                            help="current: this tensor's amax; delayed: a history's")},
    on_toy=lambda inj, p: _on_toy(inj, p | {"floor": False}),
    foreign=lambda inj, p: _foreign(inj, p | {"floor": False}),
))

register(Fault(
    name="fp8_stale_amax", family=FAMILY,
    summary="delayed FP8 scaling from last step's amax, and gradients that outgrow it",
    mechanism="the scale of step t comes from the amaxes of earlier steps; a gradient that "
              "grew past the stale amax by more than e5m2's rounding headroom casts to inf "
              "(PyTorch's float8_e5m2 cast does not saturate), and inf - inf = NaN",
    needs="FP8 training with delayed scaling (a short amax history, no margin) and a cast "
          "that does not saturate; tensors that grow between steps (early training)",
    reveals="amp", cure="fp8_current_scaling", signature="nonfinite",
    params={"history_len": Param(1, 1, 100_000, help="steps of amax history (Megatron-LM's "
                                                     "old default: 1)"),
            "margin": Param(0, 0, 16, help="the scale divided by 2^margin (headroom)"),
            "recipe": Param("delayed", choices=("delayed",), help="delayed scaling")},
    on_toy=_on_toy, foreign=_foreign,
))


# -- the cures -------------------------------------------------------------------------
def _scalers(trainer: Trainer, fix: str):
    layers = fp8_layers(trainer.model)
    if not layers:
        raise NotApplicable(f"{fix}: this run has no FP8 layer nanlab installed; in your "
                            "own FP8 stack set the option yourself (see the faults guide)")
    return [s for layer in layers.values() for s in layer.scalers().values()]


def _amax_floor(trainer: Trainer) -> list[str]:
    """Every FP8 scale's amax clamped at EPS (torchao's 1e-12) before the division."""
    bare = [s for s in _scalers(trainer, "fp8_amax_floor") if s.floor is None]
    for s in bare:
        s.floor = EPS
    return [f"{len(bare)} FP8 scales: amax clamped at {EPS:g} before fp8_max / amax"] \
        if bare else []


def _current_scaling(trainer: Trainer) -> list[str]:
    """Every delayed FP8 scale switched to current scaling (this tensor's own amax)."""
    stale = [s for s in _scalers(trainer, "fp8_current_scaling") if s.recipe == "delayed"]
    for s in stale:
        s.recipe = "current"
    return [f"{len(stale)} FP8 scales: delayed (amax history) -> current scaling"] \
        if stale else []


FIXES["fp8_amax_floor"] = Fix(
    "fp8_amax_floor", "clamp every FP8 amax at 1e-12 before fp8_max / amax (torchao's EPS), "
    "so an all-zero row gets a finite scale and stays 0", lambda c: None, _amax_floor,
    sop_step="amp")
FIXES["fp8_current_scaling"] = Fix(
    "fp8_current_scaling", "scale each FP8 tensor by its own amax now (current scaling) "
    "instead of an amax history, so nothing is past the format's max", lambda c: None,
    _current_scaling, sop_step="amp")


__all__ = ["notable", "take_stats"]
