"""diagnose's check of a gradient accumulation step (the grad_accum family, SOP step 1).

A run that accumulates (``TrainConfig.accum_steps > 1``) trains on micro-batches, so the
data check must look at them, not only at the step's whole batch: a batch with targets
can hold a micro-batch without any. Two kinds of evidence, both read from the run:

- the micro-batches of the steps up to the symptom, rebuilt from the batch source: how
  many unmasked targets each holds, against the loop's normalisation, asked of the loop
  itself by one pass (a mean of means lets a short micro-batch's tokens weigh more; an
  empty one is 0 / 0);
- the crash: PyTorch's own GradScaler assertions name an update() or unscale_() in the
  wrong place (torch/amp/grad_scaler.py).

A loop can also be wrong without a crash or a bad curve: :func:`audit_gradient` checks
that the gradient the loop recorded is the gradient of its loss, by one plain replay.
"""

from __future__ import annotations

import math

import torch

from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.train.accum import split_batch, target_count
from nanlab.train.batches import to_device
from nanlab.train.objective import global_grad_norm

WINDOW = 30  # the steps before the symptom whose micro-batches are read
SHORT = 0.1  # a micro-batch with under 10 % of the largest one's targets is short
AGREE = 2.0  # rounding moves a gradient's norm by far less; any loop bug by more
SCALE_LEFT = 100.0  # a norm 100x too small under a GradScaler: the scale is still in it
LOOP_AGREE = 0.01  # a loop's loss within 1 % of the whole batch's: it weighs by targets
SCALER_ERRORS = ("No inf checks were recorded prior to update",
                 "unscale_() has already been called on this optimizer since the last update")


def micro_batch_counts(run, until: int) -> dict[int, list[int]]:
    """The unmasked-target count of each micro-batch, for the steps of the last WINDOW
    recorded steps up to ``until``: {step: [n_1, ..., n_k]}.

    >>> from nanlab import faults
    >>> run = faults.run_fault("accum_masked_micro_batch", at_step=3, steps=4)
    >>> micro_batch_counts(run, 3)[3]
    [0, 248, 248, 248]
    """
    k = run.trainer.config.accum_steps
    rows = [r for r in run.record.steps if until - WINDOW <= r["step"] <= until]
    return {r["step"]: [target_count(m) for m in split_batch(run.trainer.batches(r["batch"]), k)]
            for r in rows}


def averages_means(run, build, batch_index: int) -> bool:
    """Does the run's micro-batch loop average the micro-batches' means? Asked of the loop
    itself, not of a setting: a fresh trainer (``build``, the run's levers in) runs its
    loop once on that step's batch and once as one plain pass over the whole batch; a
    loop that weighs each micro-batch by its targets gives the whole batch's mean loss
    (up to rounding), a mean of means does not where the micro-batches' counts differ.
    Without ``build`` the run's own trainer is asked.

    Example::

        run = faults.run_fault("accum_masked_micro_batch", at_step=3, steps=4)
        averages_means(run, lambda c: faults.build_fault_trainer(
            "accum_masked_micro_batch", c, {"at_step": 3}), 3)   # True: 0 / 0 in the loop
    """
    fresh = build(run.trainer.config.replace(out_dir=None, progress=False)) \
        if build is not None else run.trainer
    batch = to_device(fresh.batches(batch_index), fresh.device, fresh.input_dtype)
    looped = float(fresh.accumulate(fresh, batch, fresh.loss_fn))
    with torch.no_grad(), fresh.autocast():
        whole = float(fresh.loss_fn(fresh.model, batch))
    fresh.optimizer.zero_grad(set_to_none=True)
    if not math.isfinite(whole):
        return False  # the whole batch has no target either: nothing to tell them apart
    return not math.isfinite(looped) or abs(looped - whole) > LOOP_AGREE * abs(whole)


def check_accumulation(run, step: int | None, build=None):
    """(the fault the evidence points to, the evidence in words), or (None, None) when the
    run does not accumulate or nothing in its micro-batches or its crash explains it.
    ``build`` makes a fresh trainer of the run (:func:`averages_means`).

    >>> from nanlab import faults
    >>> run = faults.run_fault("accum_masked_micro_batch", at_step=3, steps=4)
    >>> check_accumulation(run, 3)[0]
    'accum_masked_micro_batch'
    """
    config = run.trainer.config
    if config.accum_steps < 2:
        return None, None
    if run.error and any(text in run.error for text in SCALER_ERRORS):
        return "scaler_update_micro_batch", (
            f"the run accumulates {config.accum_steps} micro-batches per "
            f"step and crashed in the GradScaler at step {run.error_step}: {run.error} "
            "(update() or unscale_() inside the micro-batch loop)")
    if not run.record.steps:
        return None, None
    until = step if step is not None else run.record.steps[-1]["step"]
    counts = micro_batch_counts(run, until)
    empty = [s for s, c in counts.items() if min(c) == 0 and max(c) > 0]
    short = [s for s, c in counts.items() if max(c) and min(c) < SHORT * max(c)]
    batch_of = {r["step"]: r["batch"] for r in run.record.steps}
    uneven = step if step in empty else (short[0] if short else None)
    if uneven is None or not averages_means(run, build, batch_of[uneven]):
        return None, None  # the loop weighs by targets: uneven micro-batches do no harm
    if step in empty:
        return "accum_masked_micro_batch", (
            f"step {step}'s micro-batches hold {counts[step]} unmasked "
            "targets: one holds none, its mean loss is 0 / 0, and the loop averages the "
            "micro-batches' means")
    if short:
        c = counts[short[0]]
        return "accum_mean_of_means", (
            f"{len(short)} of the {len(counts)} steps up to step {until} "
            f"have a micro-batch with under {SHORT:.0%} of the others' targets (step "
            f"{short[0]}: {c}), and the loop averages the micro-batches' means: a target "
            f"of the shortest weighs {max(c) / max(min(c), 1):.0f}x one of the longest")
    return None, None


def audit_gradient(run, build, until: int | None = None) -> tuple[str | None, str | None]:
    """Is the gradient the loop recorded the gradient of the loss it trains on?

    Only a loop that accumulates or scales has arithmetic of its own between the loss
    and ``p.grad``. From the run's first checkpoint, a fresh trainer (``build``) takes
    that step's whole batch once: fp32, no scaler, one backward, frozen weights left
    out as the loop leaves them out. Its global norm must match the recorded one within
    a factor AGREE. Only checkpoints up to ``until`` (the failing step) are audited:
    after a failure a collapsed loss scale records 0, which is no loop bug. Returns (the
    fault it points to or None, the evidence) when they disagree, (None, None) when they
    agree or nothing can be replayed.

    >>> from nanlab import faults
    >>> ok = faults.run_fault(None, accum_steps=4, steps=3)
    >>> audit_gradient(ok, lambda c: faults.build_fault_trainer(None, c, {}))
    (None, None)
    """
    trainer, config = run.trainer, run.trainer.config
    if config.accum_steps < 2 and trainer.scaler is None:
        return None, None  # one backward of the loss: nothing of the loop's own to audit
    rows = {r["step"]: r for r in run.record.steps}
    start = next((s for s in trainer.checkpoints.steps()
                  if (until is None or s <= until)
                  and math.isfinite(rows.get(s, {}).get("grad_norm", math.nan))), None)
    if start is None:
        return None, None
    fresh = build(config.replace(out_dir=None, progress=False))
    fresh.load_state_dict(trainer.checkpoints.load(start))
    batch = to_device(fresh.batches(rows[start]["batch"]), fresh.device)
    fresh.optimizer.zero_grad(set_to_none=True)
    fresh.loss_fn(fresh.model, batch).float().backward()
    reference = global_grad_norm(fresh.params).item()  # a fault's freeze hook zeroed its own
    recorded = rows[start]["grad_norm"]
    if not reference or 1 / AGREE <= recorded / reference <= AGREE:
        return None, None
    text = (f"step {start} replayed from its checkpoint in one plain pass (fp32, no scaler, "
            f"the whole batch): grad norm {reference:.3g}; the loop recorded "
            f"{recorded:.3g}, {recorded / reference:.2g}x the loss's gradient")
    scale = trainer.scaler.get_scale() if trainer.scaler else None
    if scale and recorded * SCALE_LEFT < reference:
        return "scaler_update_micro_batch", (
            f"{text}: the GradScaler's scale (now {scale:g}) is still divided into it, "
            f"unscaled twice: unscale_() and update() inside the loop over the "
            f"{config.accum_steps} micro-batches, each backward adding scaled gradients "
            "onto unscaled ones")
    return None, text


@register_check("data", "grad_accum", rank=30, healthy=True)
def _check(case: Case) -> Outcome | None:
    """The micro-batches and the scaler's crash; then the loop's gradient against the
    loss's (also on a run that looks healthy: a silent loop bug)."""
    from nanlab.faults.catalogue import get_fault

    detail = text = None
    if case.symptom != "healthy":
        detail, text = check_accumulation(case.run, case.step, case.build)
    if detail is None:
        detail, text = audit_gradient(case.run, case.build, case.step)
    if detail is not None:
        return Outcome("cause", text, step=get_fault(detail).reveals, cause="grad_accum",
                       detail=detail)
    return Outcome("hint", text, step="grad_norms") if text is not None else None
