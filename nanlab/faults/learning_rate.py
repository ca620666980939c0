"""The learning-rate family: an LR too high for the run, a one-step burst, no warmup.

SOP step 3 (divide the learning rate by 10) reveals them. On any run the LR is changed
through one lever (:mod:`nanlab.optim.lr_lever`): a factor on whatever LR the optimizer and
its schedule give at each step, so a ``LambdaLR``, a cosine or ``ReduceLROnPlateau`` keeps
its own LR and the factor still holds on every step. A too-high LR is a factor of the
run's own LR (an absolute 0.2 is huge for a toy and tiny for a regressor in raw units).
On the built-in run the factor is written into its config instead (``factor`` times the
default LR), so its manifest shows the LR the run had, as a real incident's would.

Why 40x (``high_lr``) and 20x (``high_lr_adam``) are "too high" on any run: Adam moves
every weight by about the LR each step, whatever the gradient's size, so a tuned run (the
largest LR that trains well, a sweep's best) sits within a few x of its edge, and 20x
to 40x of it puts every step past the edge. Measured on five models nanlab did not make
at their sweep's best LR with warmup + cosine (``tests/foreign_models.py``, TUNED):
40x fires on 5 of 5, 20x on 4 of 5 (a post-norm encoder stalls at chance instead). The
factor is relative to the run, so a run trained 10x below its best LR has a 10x margin:
there 20x only takes it to twice its best and may train better (that encoder at 3e-3
ends at 0.014, its clean run at 0.078). Tune first, or raise ``factor``.

>>> from nanlab.faults.catalogue import get_fault
>>> [get_fault(n).conditions(get_fault(n).resolve())["lr"]
...  for n in ("high_lr", "high_lr_adam", "no_warmup")]          # the toy's LRs, as before
[0.2, 0.1, 0.02]
"""

from __future__ import annotations

import math

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import Fault, Param, register
from nanlab.optim.lr_lever import set_lr_factor
from nanlab.train.config import TrainConfig

TOY_LR = TrainConfig.lr  # the built-in run's LR (5e-3): the factors' base there
ABSOLUTE_LR = Param(0.0, 0.0, 1e4, help="an absolute LR instead of the factor (the "
                                        "course's older runs); 0: the run's LR x factor")


def _toy_lr(p: dict) -> float:
    return p["lr"] or TOY_LR * p["factor"]


def _raise_lr(inj, p: dict) -> None:
    """On a foreign run: the run's own LR (as its schedule gives it) times the factor."""
    if p["lr"]:
        inj.set_lr(p["lr"])
    else:
        inj.set_lr_factor(p["factor"])


register(Fault(
    name="high_lr", family="learning_rate",
    summary="AdamW at a learning rate 40x too high, in fp16 mixed precision",
    mechanism="the oversized updates grow the attention weights until q.k passes fp16's "
              "65504: the scores overflow to inf and the softmax makes NaN. With AMP off "
              "the same run stays finite but diverges: fp16 only made the LR's damage loud",
    needs="fp16 autocast (with its GradScaler) and no clipping; in fp32 see high_lr_adam. "
          "On your own run: the LR its optimizer and schedule give, times the factor "
          "(past the edge of a tuned run; a run 10x below its best LR has that margin)",
    reveals="lr", cure="lr_div10", signature="nonfinite",
    params={"factor": Param(40.0, 1.0, 1e6, help="times the run's own LR"),
            "lr": ABSOLUTE_LR},
    conditions=lambda p: {"lr": _toy_lr(p), "precision": "fp16"},
    foreign=_raise_lr,
))

register(Fault(
    name="high_lr_adam", family="learning_rate",
    summary="AdamW at a learning rate 20x too high: diverges, yet stays finite in fp32",
    mechanism="Adam's update is about lr * sign(grad), so the weights jump by about the LR "
              "every step; LayerNorm keeps the activations in range, so the loss climbs "
              "and stays high without ever overflowing",
    needs="AdamW in fp32 (under fp16 the same run turns into NaN: see the matrix). On your "
          "own run: the LR its optimizer and schedule give, times the factor (past the "
          "edge of a tuned run; a run 10x below its best LR has that margin)",
    reveals="lr", cure="lr_div10", signature="diverge",
    params={"factor": Param(20.0, 1.0, 1e6, help="times the run's own LR"),
            "lr": ABSOLUTE_LR},
    conditions=lambda p: {"lr": _toy_lr(p)},
    foreign=_raise_lr,
))

register(Fault(
    name="lr_jump", family="learning_rate",
    summary="the LR jumps 10x for one step mid-run (a scheduler glitch), then returns",
    mechanism="a burst of oversized updates knocks the model off its solution: the loss "
              "spikes; once the LR is back, the same optimizer brings it down again",
    needs="a trained model hit by a short LR burst; no clipping. On your own run: "
          "at_step once it has learned, at its tuned LR; a run with wide margins (a "
          "classifier at loss 1e-4) or a noisy loss (a VAE) absorbs one step at 10x: "
          "raise length= or factor=",
    reveals="lr", cure=None, signature="spike",
    params={"at_step": Param(100, 0, 100_000), "factor": Param(10.0, 1.0, 1e6),
            "length": Param(1, 1, 100_000)},
    install=lambda inj, p: inj.set_lr_factor(p["factor"], p["at_step"],
                                             p["at_step"] + p["length"]),
    foreign=lambda inj, p: None,
))


def _skip_warmup(inj, p: dict) -> None:
    """On a foreign run: while the schedule's LR is still rising (its warmup), every step
    runs at the schedule's peak (``max_lr`` of a OneCycleLR, else the LR the optimizer was
    given), times the factor; from the first step the LR does not rise, the schedule's
    own LR times the factor. It needs the scheduler, to check there is a warmup at all."""
    inj._need("optimizer", inj.optimizer)
    if inj.scheduler is None:
        raise NanlabError("no_warmup needs scheduler=...: pass the LR scheduler whose "
                          "warmup it removes to inject()")
    group = inj.optimizer.param_groups[0]
    peak = group.get("max_lr") or group.get("initial_lr", group["lr"])
    if group["lr"] >= peak:
        raise NanlabError(f"no_warmup: {type(inj.scheduler).__name__} starts at its peak "
                          f"LR ({peak:g}); there is no warmup to remove")
    factor = p["lr"] / peak if p["lr"] else p["factor"]
    seen = {"step": None, "lr": math.inf, "warm": False}
    name = f"no_warmup-{id(inj)}"

    def hook(step: int) -> None:
        lr = group["lr"]  # the schedule's LR of this step (the lever restored it)
        if step != seen["step"]:  # a second call for the same step (a rerun) changes nothing
            seen["warm"] = seen["warm"] or (seen["step"] is not None and lr <= seen["lr"])
            seen.update(step=step, lr=lr)
        set_lr_factor(inj.optimizer, name, factor * (1.0 if seen["warm"] else peak / lr))
    inj.step_hooks.append(hook)


register(Fault(
    name="no_warmup", family="learning_rate",
    summary="a high LR that needs warmup, applied at full size from step 0",
    mechanism="the first Adam steps are full-size while the second-moment estimate is "
              "still noise: the fresh weights are thrown far off and the loss spikes",
    needs="AdamW at a LR that trains well with warmup (here 4x the toy's, 0.02) but no "
          "warmup. On your own run: scheduler= is needed; while its LR is still rising, "
          "every step runs at the peak (times the factor)",
    reveals="lr", cure="warmup_cosine", signature="diverge",
    params={"factor": Param(4.0, 1.0, 1e6, help="times the run's own LR"),
            "lr": ABSOLUTE_LR},
    conditions=lambda p: {"lr": _toy_lr(p), "warmup_steps": 0, "beta2": 0.99},
    foreign=_skip_warmup,
))
