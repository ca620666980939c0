"""The dirty-data family: a bad batch (a NaN reading, a label out of range, every target
masked, a constant column standardised by its std of 0) and the arithmetic it sets off.

SOP step 1 (check the batch) reveals every one; the cure is ``validate_data``. On a run
nanlab did not make, each reads the batch of its step once at inject time (sources are
pure functions of the step) and refuses there a batch with nothing to corrupt: integer
ids where a NaN must go, no integer labels.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import AT_STEP, Fault, Param, needs_batch, register
from nanlab.toy.data import IGNORE_INDEX

if TYPE_CHECKING:
    from nanlab.faults.levers import Injection

def _poison_inputs(kind: str):
    value = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[kind]

    def fn(x: torch.Tensor) -> torch.Tensor:
        # One missing / overflowed reading in one example, as a CSV with an empty cell
        # or a sensor that reported inf would deliver it.
        x.view(-1)[0] = value
        return x
    return fn


register(Fault(
    name="nan_input", family="dirty_data",
    summary="one NaN (or inf) reading in a float input of one batch",
    mechanism="the bad value passes the input projection, attention mixes it into every "
              "later position, the loss is NaN; the backward pass makes the gradients "
              "NaN and the optimizer writes NaN into every weight it touches",
    needs="a float input path (here the standardised numeric channel); no input check",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP, "value": Param("nan", choices=("nan", "inf", "-inf"))},
    install=lambda inj, p: inj.edit_inputs(p["at_step"], _poison_inputs(p["value"])),
    foreign=lambda inj, p: None, check=needs_batch(want_float=True),
))


def _illegal(label: int):
    def fn(y: torch.Tensor) -> torch.Tensor:
        y.view(-1)[-1] = label  # one corrupt label in the batch
        return y
    return fn


register(Fault(
    name="illegal_label", family="dirty_data",
    summary="a label outside [0, num_classes) in one batch",
    mechanism="cross-entropy indexes the log-probabilities by the label; PyTorch checks "
              "the range and stops with 'Target ... is out of bounds' on the CPU (a "
              "device-side assert on CUDA, which kills the process); -100 is the one "
              "negative value it accepts, as 'ignore this position'",
    needs="integer class labels fed to F.cross_entropy",
    reveals="data", cure="validate_data", signature="error",
    params={"at_step": AT_STEP, "label": Param(-1, -10**9, 10**9,
                                                help="the bad label (not -100)")},
    install=lambda inj, p: inj.edit_labels(p["at_step"], _illegal(p["label"])),
    foreign=lambda inj, p: None, check=needs_batch(want_float=False),
))


def _mask_all(y: torch.Tensor) -> torch.Tensor:
    return torch.full_like(y, IGNORE_INDEX)  # every position is padding / prompt


register(Fault(
    name="all_masked", family="dirty_data",
    summary="a batch in which every target is masked (ignore_index)",
    mechanism="the mean over unmasked targets divides a sum of nothing by a count of "
              "zero: 0 / 0 = NaN in the loss, and NaN gradients from it",
    needs="a masked mean loss (cross_entropy with ignore_index, or sum / mask.sum())",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP},
    install=lambda inj, p: inj.edit_labels(p["at_step"], _mask_all),
    foreign=lambda inj, p: None, check=needs_batch(want_float=False),
))


def _needs_raw_hooks(inj: Injection, p: dict) -> None:
    if getattr(inj.source, "raw_hooks", None) is None:
        raise NanlabError("zero_std: the batch source must standardise each batch itself and "
                          "expose raw_hooks (like nanlab.toy.data.CountingTask); a batch that "
                          "arrives standardised has no std left to be 0: standardise a "
                          "constant column by its batch std in your own pipeline to see it")


def _stuck_sensor(inj: Injection, p: dict) -> None:
    _needs_raw_hooks(inj, p)

    def hook(step, raw):
        if step == p["at_step"]:
            raw.raw_features = torch.full_like(raw.raw_features, p["value"])  # stuck reading
        return raw
    inj.source.raw_hooks.append(hook)


register(Fault(
    name="zero_std", family="dirty_data",
    summary="a batch whose numeric column is constant, standardised by its std of 0",
    mechanism="(x - mean) / std with every x equal is 0 / 0 = NaN for the whole column",
    needs="per-batch standardisation without a floor on the std",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP, "value": Param(7.0, -1e6, 1e6, help="the stuck reading")},
    install=_stuck_sensor, foreign=lambda inj, p: None, check=_needs_raw_hooks,
))
