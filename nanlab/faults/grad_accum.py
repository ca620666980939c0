"""The grad_accum family: gradient accumulation written the way buggy loops write it.

Each fault is a real accumulation loop (:mod:`nanlab.train.accum`): micro-batches, each with
its own forward and backward, summed in ``p.grad``, one optimizer step. What goes wrong
is the loop's own arithmetic: how the micro-batch losses are normalised, or when the
GradScaler is updated. On the built-in run each fault swaps the trainer's loop for one
with its bug (``Trainer.accumulate``: :func:`mean_of_means`, :func:`update_per_micro_batch`);
the cures, the two fixes at the end of this module, swap the correct loop back.

>>> from nanlab.faults import FAULTS, get_fault
>>> get_fault("accum_masked_micro_batch").cure
'token_weighted'
>>> sorted(n for n, f in FAULTS.items() if f.family == "grad_accum")
['accum_masked_micro_batch', 'accum_mean_of_means', 'scaler_update_micro_batch']
"""

from __future__ import annotations

from functools import partial

import torch

from nanlab.faults.catalogue import Fault, Param, register
from nanlab.faults.fixes import FIXES, Fix
from nanlab.toy.data import IGNORE_INDEX
from nanlab.train.accum import accumulate

ACCUM = Param(4, 2, 64, help="micro-batches per optimizer step (the batch of 32 is cut "
                             "into this many)")


def _first_micro_batch_keeps(accum: int, keep: int):
    """A label edit: the first micro-batch's rows keep only their last ``keep`` targets
    (a micro-batch of prompts with one short answer); ``keep=0`` masks them all."""
    def fn(y: torch.Tensor) -> torch.Tensor:
        rows = y.tensor_split(accum)[0].shape[0]
        kept = torch.zeros_like(y, dtype=torch.bool)
        if keep:
            kept[:rows].view(-1)[-keep:] = True  # the last targets of the micro-batch
        y[:rows] = torch.where(kept[:rows], y[:rows], IGNORE_INDEX)
        return y
    return fn


def _short_micro_batches(inj, p: dict) -> None:
    for step in range(p["at_step"], p["at_step"] + p["length"]):
        inj.edit_labels(step, _first_micro_batch_keeps(p["accum_steps"], p["keep"]))


def mean_of_means(n: int, total: int, k: int) -> float:
    """The buggy weight: every micro-batch's mean loss divided by the number of
    micro-batches, ``loss / accum_steps``, whatever its target count (0 included).

    >>> mean_of_means(1, 745, 4), mean_of_means(0, 744, 4)
    (0.25, 0.25)
    """
    return 1 / k


def update_per_micro_batch(trainer, unscale: bool = False) -> None:
    """The misplaced lines, after each micro-batch's backward: ``scaler.update()``
    (and ``scaler.unscale_()`` before it, as a loop that clips or logs per micro-batch
    does); ``update`` resets the scaler's per-optimizer state, so unscale_ may run again.

    Example::

        trainer.accumulate = partial(accumulate, after_backward=update_per_micro_batch)
    """
    if trainer.scaler is not None:
        if unscale:
            trainer.scaler.unscale_(trainer.optimizer)  # the sum so far, now in true units
        trainer.scaler.update()


def _loop_with(**bug):
    """An on_toy lever: the trainer's micro-batch loop, with the bug's parts."""
    def lever(inj, p: dict) -> None:
        inj.trainer.accumulate = partial(accumulate, **{
            k: v(p) if k == "after_backward" else v for k, v in bug.items()})
    return lever


def _correct_loop(part: str):
    """A fix's install: the trainer's loop without the bug's ``part`` (its own default)."""
    def install(trainer) -> list[str]:
        loop = trainer.accumulate
        if not isinstance(loop, partial) or part not in loop.keywords:
            return []
        rest = {k: v for k, v in loop.keywords.items() if k != part}
        trainer.accumulate = partial(accumulate, **rest) if rest else accumulate
        return [{"weight": "micro-batch losses weighted by their share of the step's "
                           "targets",
                 "after_backward": "GradScaler unscale_/update once per optimizer step"}[part]]
    return install


IN_THE_LOOP = ("it is a bug in a gradient-accumulation loop, and inject() does not rewrite "
               "your loop: run it with nanlab's Trainer (accum_steps > 1), or audit your "
               "own loop with nanlab.debug.diagnose (its gradient audit replays one plain "
               "step)")

register(Fault(
    name="accum_mean_of_means", family="grad_accum",
    summary="gradient accumulation that averages the micro-batches' mean losses, meeting "
            "micro-batches with very few unmasked targets",
    mechanism="each micro-batch loss is a mean over its own unmasked targets and the step "
              "divides each by the number of micro-batches, so a target's weight is "
              "1 / (accum_steps * n_i): a micro-batch with 1 target gives that token the "
              "weight of a whole micro-batch (here 248 tokens' worth). For 20 steps the "
              "update mostly fits one token per step; Adam's normalised step moves every "
              "weight as far as for a full batch, the model is pulled off its solution and "
              "the loss climbs several times above where it was, then slowly comes back",
    needs="gradient accumulation (4 micro-batches of 8 rows) whose micro-batch losses are "
          "means (cross_entropy's default) averaged with / accum_steps, as Hugging Face "
          "transformers' Trainer did before its October 2024 fix (PR #34191; issue #37766 "
          "reports models it still misses), and micro-batches "
          "whose target counts differ a lot (padding, masked prompts)",
    reveals="data", cure="token_weighted", signature="spike",
    params={"at_step": Param(140, 0, 100_000, help="the first step with a short "
                                                    "micro-batch"),
            "length": Param(20, 1, 100_000, help="how many steps in a row have one"),
            "keep": Param(1, 1, 10_000, help="unmasked targets left in that micro-batch"),
            "accum_steps": ACCUM},
    conditions=lambda p: {"accum_steps": p["accum_steps"]},
    on_toy=_loop_with(weight=mean_of_means), install=_short_micro_batches,
    refusal=IN_THE_LOOP,
))

register(Fault(
    name="accum_masked_micro_batch", family="grad_accum",
    summary="gradient accumulation meeting one micro-batch whose targets are all masked",
    mechanism="that micro-batch's mean loss is a sum over no target divided by a count of "
              "0: 0 / 0 = NaN, and averaging it with the other micro-batches' means makes "
              "the step's loss NaN although they were fine. Its gradient depends on how "
              "the mean is written: F.cross_entropy(ignore_index=-100) sends back exactly "
              "0 for ignored targets (measured), so the weights stay finite and only the "
              "loss, every NaN check and every log that reads it, is poisoned; a hand-written "
              "sum(loss * mask) / mask.sum() sends 0 / 0 = NaN into every gradient. The "
              "batch as a whole still has targets, so a check of the step's batch passes it",
    needs="gradient accumulation whose micro-batch losses are means averaged with "
          "/ accum_steps (weighting each mean by its count, mean * n_i / N, is no better: "
          "NaN * 0 = NaN), and a micro-batch of padding or prompts only",
    reveals="data", cure="token_weighted", signature="nonfinite",
    params={"at_step": Param(40, 0, 100_000, help="the step whose first micro-batch is "
                                                   "all masked"),
            "accum_steps": ACCUM},
    conditions=lambda p: {"accum_steps": p["accum_steps"]},
    on_toy=_loop_with(weight=mean_of_means),
    install=lambda inj, p: inj.edit_labels(p["at_step"],
                                           _first_micro_batch_keeps(p["accum_steps"], 0)),
    refusal=IN_THE_LOOP,
))

register(Fault(
    name="scaler_update_micro_batch", family="grad_accum",
    summary="GradScaler.update() called after every micro-batch instead of once per "
            "optimizer step (fp16 AMP with gradient accumulation)",
    mechanism="update() consumes the overflow checks that unscale_() or step() recorded "
              "since the last update and starts afresh. Called after a micro-batch that "
              "nothing unscaled, it finds none and PyTorch stops the run at step 0 with "
              "'No inf checks were recorded prior to update.' (torch/amp/grad_scaler.py). "
              "The variant that calls unscale_() first (to clip or log per micro-batch; a "
              "second unscale_ without update raises 'unscale_() has already been called "
              "on this optimizer since the last update()') runs silently: each backward "
              "adds scaled gradients onto unscaled ones and step() unscales them all again, "
              "so the step's gradient is the last micro-batch's divided by the scale "
              "(65536) and the earlier ones are lost (see the README for its numbers)",
    needs="fp16 autocast with a GradScaler and gradient accumulation whose loop calls "
          "scaler.update() inside the micro-batch loop",
    reveals="amp", cure="scaler_update_per_step", signature="error",
    params={"accum_steps": ACCUM,
            "per_micro_batch": Param("update", choices=("update", "unscale_update"),
                                     help="what the loop calls after each micro-batch")},
    conditions=lambda p: {"precision": "fp16", "accum_steps": p["accum_steps"]},
    on_toy=_loop_with(after_backward=lambda p: partial(
        update_per_micro_batch, unscale=p["per_micro_batch"] == "unscale_update")),
    refusal=IN_THE_LOOP,
))

FIXES["token_weighted"] = Fix(
    "token_weighted", "gradient accumulation normalised by tokens: each micro-batch's mean "
    "loss weighted by its share of the step's unmasked targets (a micro-batch without any "
    "adds nothing)",
    lambda c: None, _correct_loop("weight"), sop_step="data")
FIXES["scaler_update_per_step"] = Fix(
    "scaler_update_per_step", "GradScaler unscale_, step and update once per optimizer "
    "step, after the last micro-batch",
    lambda c: None, _correct_loop("after_backward"), sop_step="amp")
