"""The facts of an incident for its STAR story: every number, read from the runs or run anew."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nanlab.errors import NanlabError
from nanlab.interview.star_words import _words_for

RECOVERY_TOLERANCE = 0.10
RECOVERY_SLACK = 0.05
"""A fixed run is "back on the clean curve" from the step on which its loss stays within
``RECOVERY_TOLERANCE`` (a fraction) plus ``RECOVERY_SLACK`` (absolute) of the clean run's
loss at the same step, to the end of the run."""

JUMP_WINDOW = 20
"""Steps before the failure in which ``grad_norm_jump`` looks for a jump."""


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def grad_norm_jump(record: Any, step: int | None = None, window: int = JUMP_WINDOW) -> dict | None:
    """How the global grad norm moved in the ``window`` steps before ``step``.

    Among the finite grad norms of steps ``step - window`` .. ``step - 1``: the smallest
    (``low`` at ``low_step``), the largest at or after it (``high`` at ``high_step``) and
    ``decades = log10(high / low)``, the orders of magnitude it grew. ``at_step`` is the
    grad norm at ``step`` itself (often inf or NaN). ``step`` defaults to the first
    non-finite step (or the last step). None when fewer than two finite norms precede it
    (a run that failed on its first steps has no history).

    >>> from nanlab.runs.record import RunRecord
    >>> rec = RunRecord()
    >>> for s, g in enumerate([1.0, 0.5, 0.8, 50.0, float("inf")]):
    ...     rec.log_step({"step": s, "loss": 1.0, "grad_norm": g, "finite": s < 4})
    >>> jump = grad_norm_jump(rec)
    >>> jump["low_step"], jump["high_step"], round(jump["decades"], 2), jump["at_step"]
    (1, 3, 2.0, inf)
    """
    rows = {r["step"]: r for r in record.steps}
    if step is None:
        step = record.first_nonfinite_step
        if step is None:
            step = max(rows) if rows else 0
    points = []
    for s in range(max(0, step - window), step):
        g = rows.get(s, {}).get("grad_norm")
        if _finite(g) and g > 0:
            points.append((s, float(g)))
    if len(points) < 2:
        return None
    low_step, low = min(points, key=lambda p: p[1])
    high_step, high = max((p for p in points if p[0] >= low_step), key=lambda p: p[1])
    at = rows.get(step, {}).get("grad_norm")
    return {
        "step": step,
        "window": window,
        "low_step": low_step,
        "low": low,
        "high_step": high_step,
        "high": high,
        "decades": math.log10(high / low),
        "steps": high_step - low_step,
        "at_step": None if at is None else float(at),
    }


def _loss_at(record: Any, step: int | None) -> float | None:
    if step is None:
        return None
    for r in record.steps:
        if r["step"] == step:
            return None if r.get("loss") is None else float(r["loss"])
    return None


def _last_finite_before(record: Any, step: int) -> tuple[int, float] | None:
    best = None
    for r in record.steps:
        if r["step"] < step and _finite(r.get("loss")):
            best = (r["step"], float(r["loss"]))
    return best


def _run_summary(run: Any, clean: Any = None) -> dict:
    """What a fixed or clean run did: steps, losses, non-finite steps, spikes, skips, and
    the judge's verdict on it (against the clean run when there is one)."""
    from nanlab.analysis.judge import judge
    from nanlab.analysis.signals import find_spikes

    rec = run.record
    losses = rec.losses()
    last = rec.steps[-1]["step"] if rec.steps else None
    nonfinite = [r["step"] for r in rec.steps if not r.get("finite", True)]
    bad_batches = [e.get("batch") for e in rec.events if e.get("kind") == "bad_batch"]
    skipped = [r["step"] for r in rec.steps if r.get("skipped")]
    return {
        "fixes": list(getattr(run, "fixes", []) or []),
        "steps_run": len(rec.steps),
        "last_step": last,
        "start_loss": float(losses[0]) if len(losses) else None,
        "final_loss": _loss_at(rec, last),
        "nonfinite_steps": nonfinite,
        "spikes": [int(s) for s in find_spikes(losses) if s >= 10],
        "bad_batches_skipped": bad_batches,
        "steps_skipped": skipped,
        "error": getattr(run, "error", None),
        "verdict": (verdict := judge(run, clean=clean)).kind,
        "verdict_step": verdict.step,
        "verdict_reason": verdict.reason,
    }


def _rebuild(run: Any, fixes: Sequence[str]) -> Any:
    """The same run (fault, parameters, config, seed) again, with ``fixes``, to the end."""
    from nanlab import faults as faults_mod

    config = run.trainer.config.replace(out_dir=None, progress=False)
    return faults_mod.run_fault(run.fault, fixes=list(fixes), base=config, **run.params)


def _clean_run(run: Any) -> Any:
    """The clean baseline with the run's length, seed, batch size and device."""
    from nanlab import faults as faults_mod

    c = run.trainer.config
    return faults_mod.run_fault(None, steps=c.steps, seed=c.seed, batch_size=c.batch_size,
                                device=c.device)


def _locate_quietly(run: Any) -> Any:
    try:
        from nanlab.debug.locate import locate

        loc = locate(run.trainer)
    except (RuntimeError, IndexError, ValueError):  # NanlabError is a ValueError
        return None
    return loc if loc.found else None


def incident_facts(
    fault_run: Any,
    diagnosis: Any = None,
    *,
    clean: Any = None,
    fixed: Any = None,
    location: Any = None,
) -> dict:
    """Every number a STAR story of ``fault_run`` needs, as a plain dict.

    Runs what is missing: the SOP (``diagnose``), ``locate`` on the first bad step, the
    same run with the diagnosed fix (``fixed``) and the clean baseline (``clean``), each
    with the original run's seed and length. The keys are documented by
    :func:`star_story`; ``facts["fixed"]`` and ``facts["clean"]`` summarise those runs.

    >>> from nanlab import faults
    >>> facts = incident_facts(faults.run_fault("nan_input"))  # doctest: +SKIP
    >>> facts["first_bad_step"]  # doctest: +SKIP
    40
    """
    from nanlab import faults as faults_mod
    from nanlab.analysis.signals import final_loss
    from nanlab.faults import fixes as fixes_mod

    if diagnosis is None:
        from nanlab.debug.diagnose import diagnose

        diagnosis = diagnose(fault_run)
    if diagnosis.symptom == "healthy":
        raise NanlabError("this run is healthy: there is no incident to tell a story about; "
                          "run a fault first, e.g. faults.run_fault('nan_input')")
    trainer = fault_run.trainer
    config = trainer.config
    manifest = fault_run.record.manifest
    name = getattr(fault_run, "fault", None)
    family = faults_mod.FAULTS[name].family if name in faults_mod.FAULTS else None
    key, _ = _words_for(diagnosis, family)
    rec = fault_run.record
    step = diagnosis.symptom_step
    bad_row = next((r for r in rec.steps if r["step"] == step), None) if step is not None else None
    before = _last_finite_before(rec, step) if step is not None else None
    losses = rec.losses()
    start = next((float(x) for x in losses if math.isfinite(x)), None)
    m = config.model
    facts: dict[str, Any] = {
        "fault": name,
        "fault_params": dict(getattr(fault_run, "params", {}) or {}),
        "family": family,
        "cause_key": key,
        "model": {
            "num_params": manifest.get("num_params"),
            "n_layer": m.n_layer,
            "n_head": m.n_head,
            "d_model": m.n_embd,
            "vocab_size": m.vocab_size,
            "block_size": m.block_size,
            "use_norms": m.use_norms,
            "class": manifest.get("model_class"),
        },
        "task": "counting" if str(manifest.get("model_class", "")).endswith("nanlab.toy.model.GPT")
        else None,
        "precision": config.precision,
        "grad_scaler": bool(trainer.scaler),
        "optimizer": config.optimizer,
        "lr": config.lr,
        "warmup_steps": config.warmup_steps,
        "schedule": config.schedule,
        "adam_eps": config.adam_eps,
        "grad_clip": config.grad_clip,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "steps_planned": config.steps,
        "device": manifest.get("device"),
        "symptom": diagnosis.symptom,
        "symptom_step": step,
        "first_bad_step": fault_run.first_bad_step,
        "steps_run": len(rec.steps),
        "error": getattr(fault_run, "error", None),
        "loss_at_symptom": None if bad_row is None else bad_row.get("loss"),
        "grad_norm_at_symptom": None if bad_row is None else bad_row.get("grad_norm"),
        "last_good_step": before[0] if before else None,
        "last_good_loss": before[1] if before else None,
        "start_loss": start,
        "end_loss": final_loss(losses) if start is not None else None,
        "grad_jump": grad_norm_jump(rec, step) if step is not None else None,
        "location": None,
        "rollback_step": None,
        "recovered_by_itself_in": None,
        "steps_after_symptom": None if step is None else sum(r["step"] > step
                                                             for r in rec.steps),
        "later_spikes": [],
        "last_loss": float(losses[-1]) if len(losses) else None,
        "cause": diagnosis.cause,
        "detail": diagnosis.detail,
        "fix": diagnosis.fix,
        "fix_summary": fixes_mod.FIXES[diagnosis.fix].summary
        if diagnosis.fix in fixes_mod.FIXES else None,
        "fix_verified": diagnosis.fix_verified,
        "fix_evidence": diagnosis.fix_evidence,
        "sop": [
            {"step": f.step, "verdict": f.verdict, "text": f.text}
            for f in diagnosis.findings if f.verdict != "hint"
        ],
        "ruled_out": [
            {"step": f.step, "text": f.text} for f in diagnosis.findings if f.verdict == "ruled out"
        ],
        "fixed": None,
        "clean": None,
        "loss_fixed_at_step": None,
        "loss_clean_at_step": None,
        "compare_step": None,
        "batches_after_fix": None,
        "back_on_clean_curve_at": None,
    }
    # where the first non-finite value was made, and the checkpoint to roll back to
    if diagnosis.symptom in ("nonfinite", "error") and step is not None:
        if location is None:  # diagnose() already replayed the bad step: reuse its report
            location = getattr(diagnosis, "location", None) or _locate_quietly(fault_run)
            location = location if location is not None and location.found else None
        if location is not None:
            facts["location"] = {
                "step": location.step,
                "checkpoint": location.checkpoint,
                "pass": location.pass_name,
                "module": location.module,
                "module_type": location.module_type,
                "tensor": location.tensor,
                "counts": location.counts,
                "inf_before_nan": location.inf_before_nan,
                "error": location.error,
            }
        kept = [s for s in trainer.checkpoints.steps() if s <= step]
        if location is not None:
            facts["rollback_step"] = location.checkpoint
        elif kept:
            facts["rollback_step"] = max(kept)
    if diagnosis.symptom == "spike" and step is not None:
        from nanlab.analysis.signals import find_spikes, recovery_steps

        facts["recovered_by_itself_in"] = recovery_steps(losses, step)
        facts["later_spikes"] = [int(x) for x in find_spikes(losses) if x > step]
    # the fixed run and the clean baseline, same seed and length
    if fixed is None and diagnosis.fix and name is not None:
        fixed = _rebuild(fault_run, [*getattr(fault_run, "fixes", []), diagnosis.fix])
    if clean is None and name is not None:
        clean = _clean_run(fault_run)
    compare = step if step is not None else (config.steps - 1)
    facts["compare_step"] = compare
    if fixed is not None:
        facts["fixed"] = _run_summary(fixed, clean=clean)
        facts["loss_fixed_at_step"] = _loss_at(fixed.record, compare)
        if step is not None:
            facts["batches_after_fix"] = sum(r["step"] > step for r in fixed.record.steps)
    if clean is not None:
        facts["clean"] = _run_summary(clean)
        facts["loss_clean_at_step"] = _loss_at(clean.record, compare)
    if fixed is not None and clean is not None:
        facts["back_on_clean_curve_at"] = _back_on_curve(fixed.record, clean.record, compare)
    return facts


def _back_on_curve(fixed: Any, clean: Any, start: int) -> int | None:
    """The first step >= ``start`` from which the fixed run's loss stays within
    ``RECOVERY_TOLERANCE`` (or ``RECOVERY_SLACK`` absolute) of the clean run's, to the end."""
    clean_loss = {r["step"]: r["loss"] for r in clean.steps}
    pairs = [(r["step"], r["loss"], clean_loss.get(r["step"])) for r in fixed.steps
             if r["step"] >= start and r["step"] in clean_loss]
    back = None
    for s, got, want in pairs:
        close = _finite(got) and _finite(want) and \
            got <= want * (1 + RECOVERY_TOLERANCE) + RECOVERY_SLACK
        if not close:
            back = None
        elif back is None:
            back = s
    return back
