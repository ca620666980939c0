"""Did a restart or a quiet period leave the optimizer in a state that makes a spike?

Read from the run's own log: the "restart" events the trainer writes (what the resumed
state held, measured on the optimizer and the scheduler: see :mod:`nanlab.train.resume`) and
the per-layer grad-norm history (layers whose gradients were exactly 0, then woke up).
:func:`nanlab.debug.diagnose` calls these after the data check; each returns the
evidence in words.
"""

from __future__ import annotations

import math

import numpy as np

from nanlab.debug.checks import Case, Outcome, register_check

RESTART_WINDOW = 50  # a restart at most this many steps before the symptom is suspect


def check_restarts(run, step: int | None) -> tuple[str | None, str | None, str | None]:
    """A restart of the job shortly before the symptom, read from the "restart" events
    the trainer logs (what the resumed state held, measured on the optimizer and the
    scheduler themselves) and from the checkpoint it resumed from: an optimizer with no
    state after k steps of training (Adam's step count 0) is a fresh one, a schedule
    whose step differs from the run's started again. Returns (the fault, the SOP step that
    finds it, the evidence in words), or three Nones when no restart explains the symptom.

    >>> from types import SimpleNamespace
    >>> run = SimpleNamespace(record=SimpleNamespace(events=[]))
    >>> check_restarts(run, 40)
    (None, None, None)
    """
    for e in run.record.events:
        if e.get("kind") != "restart" or "optimizer_steps" not in e:
            continue
        at = int(e["step"])
        if at <= 0 or (step is not None and not 0 <= step - at <= RESTART_WINDOW):
            continue
        follows = f"; the symptom follows at step {step}" if step is not None else ""
        if e["optimizer_steps"] == 0:
            saved = saved_optimizer_steps(run.trainer, int(e.get("checkpoint", at)))
            held = f" (its checkpoint holds Adam's state at step {saved})" if saved else ""
            return "resume_fresh_optimizer", "grad_norms", (
                f"the run restarted at step {at} with an empty optimizer state{held}: Adam "
                f"counts from step 0 again, so its first update is about lr * sign(grad) on "
                f"every weight (LR {e.get('lr', math.nan):.3g}){follows}")
        if e["schedule_step"] != at:
            lr = run.record.column("lr")
            before = f"{lr[at - 1]:.3g} -> " if 0 < at <= len(lr) else ""
            peak = f", back to {np.nanmax(lr[at:]):.3g} later" if at < len(lr) else ""
            return "resume_reset_schedule", "lr", (
                f"the run restarted at step {at} with its LR schedule at step "
                f"{e['schedule_step']} (LR {before}{e.get('lr', math.nan):.3g}{peak}): "
                f"the schedule started again{follows}")
    return None, None, None


def check_woken_layers(run, step: int | None) -> str | None:
    """Layers that woke up shortly before the symptom, read from the per-layer grad-norm
    history: a grad norm of exactly 0 at every recorded step, then not. Adam stepped them
    with m = v = 0 all along, so its step count ran on while v stayed empty; with a b2
    near 1 the bias correction 1 - b2^t is far below 1 and v_hat lags far behind g^2 for
    tens of steps once real gradients arrive: updates of several times the LR. None when
    no layer woke up in the window or the optimizer keeps no second moment.

    >>> from types import SimpleNamespace
    >>> check_woken_layers(SimpleNamespace(record=SimpleNamespace(layers=[])), 40) is None
    True
    """
    if step is None or not run.record.layers:
        return None
    betas = run.trainer.optimizer.param_groups[0].get("betas")
    if not betas:
        return None
    names, steps, grid = run.record.layer_matrix("grad_norm")
    woke = []
    for name, row in zip(names, grid, strict=True):
        seen = np.isfinite(row)
        nonzero = np.flatnonzero(seen & (row > 0))
        if not len(nonzero) or nonzero[0] == 0:
            continue
        first = int(nonzero[0])
        at = int(steps[first])
        if np.all(row[:first][seen[:first]] == 0) and 0 <= step - at <= RESTART_WINDOW:
            woke.append((name, at, float(row[first])))
    if not woke:
        return None
    b2, at = float(betas[1]), min(w[1] for w in woke)
    listed = ", ".join(w[0] for w in woke[:2]) + (f" and {len(woke) - 2} more"
                                                   if len(woke) > 2 else "")
    return (f"{len(woke)} layer(s) ({listed}) had a grad norm of exactly 0 at every "
            f"recorded step before step {at}, then {woke[0][2]:.3g}: Adam stepped them "
            f"with m = v = 0, and with b2 = {b2:g} the bias correction 1 - b2^{at} = "
            f"{1 - b2 ** at:.2f} leaves v_hat far below g^2 once they wake up; the "
            f"symptom follows at step {step}")


def saved_optimizer_steps(trainer, step: int) -> int | None:
    """Adam's step count in the checkpoint of ``step`` (None: not kept, or no count).

    >>> from nanlab.train.trainer import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(steps=3, progress=False))
    >>> _ = trainer.run()
    >>> saved_optimizer_steps(trainer, 0), saved_optimizer_steps(trainer, 99)
    (None, None)
    """
    if step not in trainer.checkpoints.steps():
        return None
    state = trainer.checkpoints.load(step).get("optimizer", {}).get("state", {})
    counts = [int(s["step"]) for s in state.values() if isinstance(s, dict) and "step" in s]
    return min(counts) if counts else None


@register_check("data", "optimizer_state", rank=40)
def _check_restart(case: Case) -> Outcome | None:
    kind, sop_step, text = check_restarts(case.run, case.step)
    return Outcome("cause", text, step=sop_step, cause="optimizer_state", detail=kind) \
        if kind else None


@register_check("data", "optimizer_state", rank=50)
def _check_woken(case: Case) -> Outcome | None:
    text = check_woken_layers(case.run, case.step) if case.symptom == "spike" else None
    return Outcome("cause", text, step="grad_norms", cause="optimizer_state",
                   detail="adam_unfreeze_spike") if text else None
