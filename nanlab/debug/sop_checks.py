"""diagnose's own SOP checks: the batch, AMP off / bf16, LR / 10, grad norms, init / eps.

Each registers itself (:mod:`nanlab.debug.checks`); the replays are judged on the whole
loss curve against the bad run (:func:`health`).
"""

from __future__ import annotations

import math

import numpy as np
import torch.nn as nn

from nanlab import faults as faults_mod
from nanlab.analysis.judge import judge
from nanlab.analysis.signals import is_stalled
from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.debug.user_code import grad_growth, user_op
from nanlab.errors import NanlabError
from nanlab.faults import fixes as fixes_mod
from nanlab.faults.catalogue import cure_for
from nanlab.layers.norms import norm_modules
from nanlab.runs.record import RunRecord

RELU_TYPES = (nn.ReLU, nn.ReLU6, nn.Threshold)  # units that can die (output exactly 0)
EXPLOSION_DECADES = 3.0  # grad norm growth (orders of magnitude) that counts as explosion
LR_CUTS = ((10, "lr_div10"), (100, "lr_div100"))  # tried in turn before the LR is ruled out
CAST_OPS = ("_to_copy", "to", "copy_", "_to_dtype")
SOFTMAX_OPS = ("exp", "softmax", "_softmax", "log_softmax", "_log_softmax")
ONE_HOT = (nn.Embedding, nn.EmbeddingBag)  # a row looked up by one id: fan-in 1


def health(run: faults_mod.FaultRun, baseline=None) -> tuple[bool, str]:
    """Is a replay healthy? Judged on the whole loss curve (:func:`nanlab.analysis.judge.judge`),
    not only on finiteness, and against ``baseline``, the bad run it replays: at the
    step the bad run failed it must be as far as the bad run was, then keep learning.

    Returns (healthy, a sentence saying why).

    >>> ok, why = health(faults_mod.run_fault("nan_input", steps=60))  # doctest: +SKIP
    >>> ok  # doctest: +SKIP
    False
    """
    if not run.error and not len(run.record.steps):
        return False, "the replay made no steps (nothing to judge)"
    verdict = judge(run, baseline=baseline)
    return verdict.healthy, verdict.reason


def symptom_of(run: faults_mod.FaultRun) -> tuple[str, int | None]:
    """What the run shows: a crash, a non-finite step, a spike, a stall or a divergence
    (:func:`nanlab.analysis.judge.judge` against its own start), and at which step.

    >>> run = faults_mod.run_fault("nan_input", steps=60)  # doctest: +SKIP
    >>> symptom_of(run)  # doctest: +SKIP
    ('nonfinite', 40)
    """
    if not run.error and not len(run.record.losses()):
        raise NanlabError("this run has no steps to diagnose")
    verdict = judge(run)
    if verdict.kind != "error" and verdict.first_nonfinite is not None:
        return "nonfinite", verdict.first_nonfinite  # even if a guard skipped it
    return verdict.kind, verdict.step if verdict.kind in ("error", "spike") else None


# -- 1. data -------------------------------------------------------------------------
@register_check("data", "dirty_data", rank=20)
def check_batch(case: Case) -> Outcome:
    run, step = case.run, case.step
    if step is None:
        return Outcome("skipped", "no failing step, so no batch to inspect")
    row = next((r for r in run.record.steps if r["step"] == step), None) \
        if step < len(run.record.steps) else None
    index = row.get("batch", step) if row else run.trainer.data_position
    index = index if isinstance(index, int) and not isinstance(index, bool) else step
    batch = run.trainer.batches(index)
    problems = fixes_mod.batch_problems(batch, fixes_mod.label_range(run.trainer, batch))
    if problems:
        return Outcome("cause", f"batch {index} of step {step}: " + "; ".join(problems),
                       cause="dirty_data")
    return Outcome("ruled out", f"batch {index} of step {step} is clean (finite inputs, "
                   "legal labels, unmasked targets, no row of padding only)")


# -- 2. AMP off / bf16 ---------------------------------------------------------------
def precision_cause(loc) -> tuple[str, str]:
    """(family, detail) of an fp16 failure, from what locate saw: the pass and the aten
    op that made the first non-finite value (never from module names, which are the
    model's own): the optimizer pass is Adam's eps, an exp in the forward pass a softmax,
    a cast a value past 65504 (positions, raw amounts), anything else (a matmul output, an
    exp or a sum in the loss) an fp16 overflow."""
    if loc is None:
        return "fp16_overflow", "fp16_overflow"
    if loc.pass_name == "optimizer":
        return "adam_eps_fp16", "adam_eps_fp16"  # the update itself: eps underflowed
    op = ((loc.first_op.op or "") if loc.first_op is not None else "").removeprefix("aten.")
    if op in SOFTMAX_OPS and loc.pass_name != "loss":
        return "softmax_overflow", "softmax_overflow"  # exp of a score past ~11.1
    if op in CAST_OPS:  # finite in fp32, past 65504 once cast (positions, raw amounts)
        return "fp16_overflow", "fp16_cast_overflow"
    return "fp16_overflow", "fp16_overflow"


@register_check("amp", "precision", rank=10)
def check_precision(case: Case) -> Outcome:
    if case.config.precision == "fp32":
        return Outcome("skipped", "the run is fp32 already")
    fp32 = case.replay("amp_off")
    ok, why = health(fp32, case.run)
    if not ok:
        gone = "nonfinite" != symptom_of(fp32)[0] and case.symptom == "nonfinite"
        note = " - the NaN is gone but the run is still bad, so fp16 only made the " \
               "problem loud" if gone else ""
        return Outcome("ruled out", f"fp32 replay: {why}{note}")
    bf16 = case.replay("bf16")  # only now does it matter whether bf16 is enough
    ok16, why16 = health(bf16, case.run) if bf16 is not None else (False, "n/a")
    cause, detail = precision_cause(case.loc)
    fix = cure_for(cause, detail)
    if not {"amp_off": ok, "bf16": ok16}.get(fix, True):
        fix = "amp_off"  # the declared cure was replayed and failed; fp32 passed
    return Outcome("cause", f"fp32 replay: {why}; bf16 replay: {why16}{_bisected(case)}",
                   cause=cause, detail=detail, fix=fix)


def _bisected(case: Case) -> str:
    """The per-module answer (:mod:`nanlab.debug.precision_bisect`), "; fp32 in <module>
    alone makes step N finite (k replays)", for a non-finite step of an autocast run
    with a checkpoint to replay it from, else "". It adds words only:
    the cause and the fix stay those of the replays above. The answer is kept in
    ``case.notes["precision_bisect"]``."""
    from nanlab.debug.precision_bisect import bisect_precision

    trainer = case.run.trainer
    if case.symptom != "nonfinite" or case.config.precision not in ("fp16", "bf16") \
            or not trainer.checkpoints.steps():
        return ""
    try:
        found = bisect_precision(trainer)
    except (NanlabError, RuntimeError) as e:
        return f"; per-module bisection skipped: {str(e).splitlines()[0]}"
    case.notes["precision_bisect"] = found
    return f"; {found.line()}"


# -- 3. LR / 10 (and the LR column itself) -------------------------------------------
def lr_jump(record: RunRecord, near: int | None) -> str | None:
    lr = record.column("lr")
    if len(lr) < 2:
        return None
    ratio = lr[1:] / np.maximum(lr[:-1], 1e-30)
    jumps = np.flatnonzero(ratio > 2.0) + 1
    if near is not None:
        jumps = jumps[np.abs(jumps - near) <= 5]
    if not len(jumps):
        return None
    j = int(jumps[0])
    return f"the recorded LR jumps {ratio[j - 1]:.0f}x at step {j} ({lr[j-1]:.3g} -> {lr[j]:.3g})"


@register_check("lr", "learning_rate", rank=10)
def check_lr(case: Case) -> Outcome:
    from nanlab.analysis.judge import gives_reference

    jump = lr_jump(case.run.record, case.step)
    if jump:
        return Outcome("cause", jump + f"; the symptom follows at step {case.step}",
                       cause="learning_rate", detail="lr_jump",
                       fix=cure_for("learning_rate", "lr_jump"),
                       no_fix="a one-off LR glitch: fix the schedule; the loss recovers "
                              "on its own")
    made = user_op(case)
    if made is not None:  # an LR cut would only delay a 0 / 0 of the user's code
        name, kind, op, _ = made
        return Outcome("ruled out", f"not replayed: {op} made the first non-finite value "
                       f"in your code ({name or kind}) from finite inputs, after modest "
                       "grad norms; a smaller LR would only delay it")
    lr, tried = case.run.trainer.base_lr, []
    for divisor, name in LR_CUTS:  # / 10, then / 100 before the LR is ruled out
        tried.append((divisor, name, *health(case.replay(name), case.run)))
        if tried[-1][2]:
            break
    divisor, name, ok, why = tried[-1]
    if not ok:
        return Outcome("ruled out", f"LR {lr:g} / 10 and / 100 replays: {why}")
    weak = not gives_reference(case.run)
    if weak and name != LR_CUTS[-1][1]:  # no bar from the bad run: does a smaller LR
        divisor, name, why = _learns_further(case, divisor, name, why)  # learn further?
    detail, fix = None, cure_for("learning_rate") if divisor == LR_CUTS[0][0] else name
    warmup = cure_for("learning_rate", "no_warmup")
    if case.config.warmup_steps == 0 and warmup:
        warm = case.replay(warmup)
        if warm is not None and health(warm, case.run)[0]:
            detail, fix = "no_warmup", warmup
    # A bad run that never learned before it failed sets no bar of its own: an LR cut
    # that merely learns is a weak proof (a smaller LR also slows an explosion or hides
    # a bad init), so later steps still run and a cause whose fix learns further wins.
    return Outcome("cause", f"LR {lr:g} / {divisor} replay: {why}"
                   + (" (and warmup alone cures it: warmup was 0)"
                      if detail == "no_warmup" else ""), cause="learning_rate",
                   detail=detail, fix=fix, weak=weak)


def _learns_further(case: Case, divisor: int, name: str, why: str) -> tuple[int, str, str]:
    """The next LR cut instead of ``name`` when the first ended on a plateau (its last
    third stalled) and the next is healthy and ends clearly lower (by a tenth of what the
    first learned): a contrastive loss collapsing to log N learns nothing, yet falls from
    its start; a first cut still falling at its end is kept."""
    replayed = case.replay(name)
    first = judge(replayed, baseline=case.run)
    tail = replayed.record.losses()[-len(replayed.record.losses()) // 3:]
    if not is_stalled(tail):  # still learning at its end: slower, not stuck
        return divisor, name, why
    for d, n in LR_CUTS[[c[1] for c in LR_CUTS].index(name) + 1:]:
        run = case.replay(n)
        v = judge(run, baseline=case.run) if run is not None else None
        if v is not None and v.healthy and v.end < first.end - 0.1 * (first.start - first.end):
            return d, n, (f"{v.reason}; / {divisor} only reached {first.end:.3g}: a smaller "
                          "LR learns further")
    return divisor, name, why


# -- 4. grad norms -------------------------------------------------------------------
@register_check("grad_norms", "deep_explosion", rank=10)
def check_grad_norms(case: Case) -> Outcome:
    hist = grad_growth(case.run.record, case.step)  # finite steps before the failure only
    if hist and hist[0] >= EXPLOSION_DECADES:
        decades, a, b = hist
        return Outcome("cause", f"the global grad norm grew {decades:.1f} orders of "
                       f"magnitude from step {a} to step {b}", cause="deep_explosion")
    text = "no grad-norm history before the failure" if not hist else \
        f"grad norm grew {hist[0]:.1f} orders of magnitude at most"
    return Outcome("ruled out", text)


# -- 5. init / eps -------------------------------------------------------------------
def fan_in(module: nn.Module | None, weight) -> int:
    """The inputs each output of a 2-D weight sums over: 1 for an embedding (a row
    looked up by one id), the rows of a transposed Conv1D (GPT-2's), else the columns.

    >>> emb = nn.Embedding(10, 64)
    >>> fan_in(emb, emb.weight), fan_in(None, nn.Linear(3, 8).weight)
    (1, 3)
    """
    if isinstance(module, ONE_HOT):
        return 1
    if type(module).__name__ == "Conv1D" and getattr(module, "nf", None) == weight.shape[-1]:
        return int(weight.shape[0])
    return int(weight.shape[-1])


def init_and_eps(run) -> tuple[str | None, str | None, str]:
    """Look at the model itself: weight scale at step 0, norm eps, dead activations.

    Returns (fault family, the fault within it when it can be told, the evidence).

    Example::

        family, detail, evidence = init_and_eps(run)   # run: a FaultRun or a loaded folder
    """
    trainer = run.trainer
    model = trainer.model
    notes = []
    norms = norm_modules(model)
    eps = [getattr(m, field) for _, m, field in norms]
    if 0 in trainer.checkpoints.steps():
        from nanlab.debug.locate import _check_state

        state = trainer.checkpoints.load(0)
        _check_state(trainer, 0, state)  # a checkpoint of this run, or one NanlabError line
        state = state["model"]
        weights = {k: v for k, v in state.items() if k.endswith("weight") and v.dim() == 2}
    else:
        weights = {n: p.detach() for n, p in model.named_parameters()
                   if n.endswith("weight") and p.dim() == 2}
    modules = dict(model.named_modules())
    stds = {k: float(v.float().std()) for k, v in weights.items() if v.numel() > 1}
    big = {k: std for k, std in stds.items()
           if std * math.sqrt(fan_in(modules.get(k.rpartition(".")[0]), weights[k])) > 3.0}
    has_norms = bool(norms)
    if eps and min(eps) < 1e-6:
        return "tiny_eps", None, (f"a norm has eps = {min(eps):g}: a row with zero variance "
                                  "gives 0 / sqrt(0 + eps) = 0 / 0")
    if big:
        name, std = max(big.items(), key=lambda kv: kv[1])
        note = "" if has_norms else " and there is no LayerNorm to rescale the activations"
        return "bad_init", None, (f"{len(big)} weight matrices start with std * sqrt(fan_in) "
                                  f"> 3 (largest: {name}, std {std:.3g}){note}")
    acts = {type(m).__name__ for m in model.modules()}
    if "Sigmoid" in acts:
        notes.append("sigmoid activations (slope <= 1/4: gradients shrink at every layer)")
    names, steps, grid = run.record.layer_matrix("act_absmax") if run.record.layers \
        else ([], [], None)
    relus = {n for n, m in model.named_modules() if isinstance(m, RELU_TYPES)}
    dead = [n for i, n in enumerate(names) if n in relus
            and np.nanmax(grid[i]) == 0.0] if grid is not None else []
    if dead:
        notes.append(f"{len(dead)} ReLU layers output exactly 0 at every recorded step (dead)")
    if not has_norms:
        notes.append("no LayerNorm anywhere")
    if notes:  # dead units come from their init (the bias); a sigmoid chain from its block
        kind = "dead_relu" if dead else "sigmoid_chain" if "Sigmoid" in acts else None
        return "myth", kind, "; ".join(notes)
    return None, None, f"init scale normal, norm eps >= {min(eps) if eps else 'n/a'}"


@register_check("init_eps", "init_eps", rank=10)
def check_init_eps(case: Case) -> Outcome:
    kind, detail, text = init_and_eps(case.run)
    if kind == "myth" and case.symptom != "stall":
        kind = None  # a sigmoid chain or no LayerNorm slows learning; it makes no NaN
    if not kind:
        return Outcome("ruled out", text)
    return Outcome("cause", text, cause=kind, detail=detail, fix=cure_for(kind, detail))


__all__ = ["EXPLOSION_DECADES", "LR_CUTS", "fan_in", "health", "init_and_eps", "symptom_of"]
