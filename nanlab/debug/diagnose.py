"""diagnose: the SOP, automated, in the article's order, each step a controlled replay.

The order goes from cheap to expensive, from likely to rare (claim M2):

1. **data**: the batch at the first bad step: non-finite inputs, illegal labels, fully
   masked targets (a zero std shows up as non-finite standardised inputs);
2. **AMP off** (and bf16): the same run, same seed, in fp32 and in bf16;
3. **LR / 10**: the same run at a tenth of the learning rate (and the recorded LR
   column, which shows a schedule glitch without any replay);
4. **grad norms**: the global grad-norm history before the failure: how many orders
   of magnitude it grew, in how many steps;
5. **init / eps**: the weights' scale at step 0, every norm's eps, dead or saturating
   activations.

A replay that makes the NaN go away is not yet the cause. With AMP off a run at a far
too high LR stops producing NaN and still diverges (FINDINGS: fp16 only made the
divergence loud), so each replay is judged on its loss curve by :func:`nanlab.judge.judge`
against the bad run itself: finite, no spike, no stall, as far along at the step where
the bad run failed as the bad run was, and still learning after it (any loss scale, any
learning speed). The first step whose replay is healthy names the cause; the fix that
the fault catalogue declares for it (:func:`nanlab.faults.catalogue.cure_for`) is then
run once more to prove it. The LR step tries / 10, then / 100. When the bad run failed
before it had learned anything, an LR cut that merely learns proves little (a smaller
LR also slows an explosion), so the later steps still run, and a cause whose fix learns
further wins.

A curve that looks healthy can still hide a loop that computes the wrong gradient. For
a run that accumulates or uses a GradScaler, the recorded grad norm at the first
checkpoint is compared with one plain replay of the loss (fp32, the whole batch); a
disagreement is the symptom ``silent`` (:func:`nanlab.debug.grad_accum_checks.audit_gradient`).

The fault's name in a run's manifest is used only to rebuild the same run (the same
data, the same model); the decision never reads it. A run made by your own code is
diagnosed the same way if you pass ``build(config) -> Trainer``, a function that
makes your trainer (model, data, loss, and whatever is wrong with them) from a config.

>>> from nanlab import faults
>>> d = diagnose(faults.run_fault("all_masked", steps=60, checkpoint_every=10))  # doctest: +SKIP
>>> d.cause, d.fix  # doctest: +SKIP
('dirty_data', 'validate_data')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch.nn as nn

from nanlab import faults as faults_mod
from nanlab.debug.grad_accum_checks import audit_gradient, check_accumulation
from nanlab.debug.hardware_checks import check_transient
from nanlab.debug.llm_data_checks import check_llm_data
from nanlab.debug.restart_checks import check_restarts, check_woken_layers
from nanlab.debug.runs import load_run
from nanlab.errors import NanlabError
from nanlab.faults import fixes as fixes_mod
from nanlab.faults.catalogue import cure_for
from nanlab.judge import STREAK, gives_reference, judge
from nanlab.norms import norm_modules
from nanlab.record import RunRecord
from nanlab.train import TrainConfig, Trainer, stop_early

RELU_TYPES = (nn.ReLU, nn.ReLU6, nn.Threshold)  # units that can die (output exactly 0)
EXPLOSION_DECADES = 3.0  # grad norm growth (orders of magnitude) that counts as explosion
LR_CUTS = ((10, "lr_div10"), (100, "lr_div100"))  # tried in turn before the LR is ruled out
MIN_REPLAY_STEPS = 100  # long enough for the toy to learn to ~0.4 from ~3.5

Builder = Callable[[TrainConfig], Trainer]


@dataclass
class Finding:
    """What one SOP step looked at and what it concluded.

    >>> f = Finding("data", "cause", "the batch of step 40 holds 1 NaN in features")
    >>> f.verdict
    'cause'
    """

    step: str  # a key of nanlab.faults.SOP_STEPS
    verdict: str  # "cause", "ruled out", "hint" or "skipped"
    text: str


@dataclass
class Diagnosis:
    """The root cause of a bad run, the evidence for it, and the fix that was proven.

    :func:`diagnose` returns one; ``print(d)`` shows the report.

    >>> d = Diagnosis("nonfinite", 40, "dirty_data", None, "validate_data", True,
    ...               "the replay with validate_data is finite",
    ...               [Finding("data", "cause", "NaN in the features of step 40")])
    >>> print(d.report())  # doctest: +ELLIPSIS
    symptom: nonfinite at step 40
      [cause    ] 1. check the batch (...): NaN in the features of step 40
    root cause: dirty_data
    fix: validate_data (proven: the replay with validate_data is finite)
    >>> d.evidence
    ['NaN in the features of step 40']
    """

    symptom: str  # nonfinite | error | spike | diverge | stall | silent | healthy
    symptom_step: int | None
    cause: str | None  # a fault family (see nanlab.faults), or None
    detail: str | None  # the specific kind, e.g. "softmax_overflow", when it can be told
    fix: str | None  # a fix name (nanlab.faults.fixes)
    fix_verified: bool
    fix_evidence: str
    findings: list[Finding] = field(default_factory=list)
    # locate's report of the first bad step, kept so a STAR story need not replay it again
    location: object = field(default=None, repr=False, compare=False)

    @property
    def evidence(self) -> list[str]:
        return [f.text for f in self.findings if f.verdict in ("cause", "hint")]

    @property
    def ruled_out(self) -> list[str]:
        return [f.text for f in self.findings if f.verdict == "ruled out"]

    def report(self) -> str:
        where = f" at step {self.symptom_step}" if self.symptom_step is not None else ""
        lines = [f"symptom: {self.symptom}{where}"]
        for f in self.findings:
            if f.verdict == "hint":
                lines.append(f"  [where    ] {f.text}")
            else:
                lines.append(f"  [{f.verdict:9}] {faults_mod.SOP_STEPS[f.step]}: {f.text}")
        cause = self.cause or "not found"
        if self.detail and self.detail != self.cause:
            cause += f" ({self.detail})"
        lines.append(f"root cause: {cause}")
        if self.fix:
            proof = "proven" if self.fix_verified else "NOT proven"
            lines.append(f"fix: {self.fix} ({proof}: {self.fix_evidence})")
        return "\n".join(lines)

    __str__ = report

    def to_dict(self) -> dict:
        d = asdict(replace(self, location=None))
        d.pop("location")
        d["evidence"], d["ruled_out"] = self.evidence, self.ruled_out
        return d


# -- reading a run -----------------------------------------------------------------
def symptom_of(run: faults_mod.FaultRun) -> tuple[str, int | None]:
    """What the run shows: a crash, a non-finite step, a spike, a stall or a divergence
    (:func:`nanlab.judge.judge` against its own start), and at which step.

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


def health(run: faults_mod.FaultRun, baseline=None) -> tuple[bool, str]:
    """Is a replay healthy? Judged on the whole loss curve (:func:`nanlab.judge.judge`),
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


class _Replayer:
    """Runs the same run again with fixes applied, stopping once the verdict is clear."""

    def __init__(self, build: Builder, config: TrainConfig, horizon: int):
        self.build = build
        self.config = config.replace(out_dir=None, progress=False)
        self.horizon = horizon
        self.cache: dict[tuple, faults_mod.FaultRun] = {}

    def __call__(self, *fixes: str) -> faults_mod.FaultRun | None:
        if fixes in self.cache:
            return self.cache[fixes]
        try:
            trainer = fixes_mod.build_with_fixes(self.build, self.config, fixes)
        except fixes_mod.NotApplicable:
            return None  # it would change nothing in this run
        trainer.add_callback("on_step_end",
                             stop_early(nonfinite_streak=STREAK, until_step=self.horizon))
        run = faults_mod.execute(trainer, fixes=list(fixes))
        self.cache[fixes] = run
        return run


# -- the SOP steps -------------------------------------------------------------------
def _check_data(run, step: int | None) -> Finding:
    if step is None:
        return Finding("data", "skipped", "no failing step, so no batch to inspect")
    row = next((r for r in run.record.steps if r["step"] == step), None) \
        if step < len(run.record.steps) else None
    index = row.get("batch", step) if row else run.trainer.data_position
    index = index if isinstance(index, int) and not isinstance(index, bool) else step
    batch = run.trainer.batches(index)
    problems = fixes_mod.batch_problems(batch, fixes_mod.label_range(run.trainer, batch))
    if problems:
        return Finding("data", "cause", f"batch {index} of step {step}: " + "; ".join(problems))
    return Finding("data", "ruled out", f"batch {index} of step {step} is clean "
                                        "(finite inputs, legal labels, unmasked targets)")


def _locate(run):
    """Where the first non-finite value was made (None when it cannot be replayed)."""
    if not run.trainer.checkpoints.steps():
        return None
    from nanlab.debug.locate import locate

    try:
        return locate(run.trainer)
    except (NanlabError, RuntimeError, IndexError):
        return None


CAST_OPS = ("_to_copy", "to", "copy_", "_to_dtype")
SOFTMAX_OPS = ("exp", "softmax", "_softmax", "log_softmax", "_log_softmax")


def _precision_cause(loc) -> tuple[str, str]:
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
    # an exp (or its sum) inside the loss: a hand-written cross-entropy, not the model's
    # softmax; it falls through to fp16_overflow below
    if op in CAST_OPS:  # finite in fp32, past 65504 once cast (positions, raw amounts)
        return "fp16_overflow", "fp16_cast_overflow"
    return "fp16_overflow", "fp16_overflow"


def _grad_history(record: RunRecord, until: int | None, overflow_counts: bool = True
                  ) -> tuple[float, int, int] | None:
    """(decades of growth, from step, to step) of the global grad norm before ``until``;
    a grad norm that overflowed at ``until`` counts as growth to fp32's limit when
    ``overflow_counts``."""
    norms = record.column("grad_norm")
    # a crashed step has no row: only a recorded step can have overflowed
    overflowed = overflow_counts and until is not None and until < len(norms) \
        and not np.isfinite(norms[until])
    end = len(norms) if until is None else until + 1
    norms = norms[:end]
    finite = np.isfinite(norms) & (norms > 0)
    if finite.sum() < 5:
        return None
    idx = np.flatnonzero(finite)
    early = idx[: max(5, len(idx) // 10)]
    base_step = int(early[np.argmin(norms[early])])
    later = idx[idx > base_step]
    if not len(later):
        return None
    peak_step = int(later[np.argmax(norms[later])])
    decades = math.log10(norms[peak_step] / norms[base_step])
    if overflowed:
        decades = max(decades, math.log10(3.4e38 / norms[base_step]))
        peak_step = until
    return decades, base_step, peak_step


def _lr_jump(record: RunRecord, near: int | None) -> str | None:
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


def _init_and_eps(run) -> tuple[str | None, str | None, str]:
    """Look at the model itself: weight scale at step 0, norm eps, dead activations.

    Returns (fault family, the fault within it when it can be told, the evidence)."""
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
    stds = {k: float(v.float().std()) for k, v in weights.items() if v.numel() > 1}
    big = {k: std for k, std in stds.items() if std * math.sqrt(weights[k].shape[-1]) > 3.0}
    has_norms = bool(norms)
    if eps and min(eps) < 1e-6:
        return "tiny_eps", None, (f"a norm has eps = {min(eps):g}: a row with zero variance "
                            "gives 0 / sqrt(0 + eps) = 0 / 0")
    if big:
        name, std = max(big.items(), key=lambda kv: kv[1])
        note = "" if has_norms else " and there is no LayerNorm to rescale the activations"
        return "bad_init", None, (f"{len(big)} weight matrices start with std * sqrt(fan_in) > 3 "
                            f"(largest: {name}, std {std:.3g}){note}")
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


# -- the procedure -------------------------------------------------------------------
def diagnose(source, *, build: Builder | None = None) -> Diagnosis:
    """Run the SOP on a bad run and return the root cause, the evidence and a proven fix.

    ``source`` is a :class:`nanlab.faults.FaultRun`, a run folder written by the
    trainer, or a finished :class:`Trainer` (then ``build`` is required).

    >>> diagnose(faults_mod.run_fault("tiny_eps", steps=20)).cause  # doctest: +SKIP
    'tiny_eps'
    """
    run, build = _resolve(source, build)
    symptom, step = symptom_of(run)
    if symptom == "healthy":  # a curve that learns; the loop's gradient may still be wrong
        detail, text = audit_gradient(run, build)
        if text is None:
            return Diagnosis("healthy", None, None, None, None, False, "nothing to fix",
                             [Finding("data", "skipped", "the run is healthy")])
        if detail is None:
            return Diagnosis("silent", None, None, None, None, False, "no fix known",
                             [Finding("grad_norms", "hint", text)])
        fix = cure_for("grad_accum", detail)
        replay = _Replayer(build, run.trainer.config, run.trainer.config.steps)
        verified, proof = _prove(replay, fix, run)
        return Diagnosis("silent", None, "grad_accum", detail, fix, verified, proof,
                         [Finding(faults_mod.get_fault(detail).reveals, "cause", text)])
    # A replay runs at least MIN_REPLAY_STEPS steps, so that "is it learning?" has an
    # answer even for a short run; it stops 30 steps after the original failure.
    config = run.trainer.config
    config = config.replace(steps=max(config.steps, MIN_REPLAY_STEPS))
    horizon = config.steps if step is None else min(config.steps,
                                                    max(MIN_REPLAY_STEPS, step + 30))
    replay = _Replayer(build, config, horizon)
    findings: list[Finding] = []
    cause = detail = fix = None
    loc = _locate(run) if symptom in ("nonfinite", "error") else None
    if loc is not None and loc.found:
        where = f"locate, replaying step {loc.step}: first non-finite value in {loc.pass_name}"
        if loc.module:
            where += f", {loc.module} ({loc.module_type})"
        c = loc.counts or {}
        counts = (f"{c.get('nan', 0)} NaN, {c.get('posinf', 0) + c.get('neginf', 0)} inf "
                  f"of {c.get('numel', '?')}")
        order = {True: "yes", False: "no", None: "together"}[loc.inf_before_nan]
        findings.append(Finding("data", "hint", f"{where}, {loc.tensor}: {counts}; "
                                                f"inf before NaN: {order}"))
    elif symptom in ("nonfinite", "error") and not run.trainer.checkpoints.steps():
        findings.append(Finding("data", "hint", "locate skipped: the run kept no checkpoint "
                                "to replay from (train with checkpoint_every > 0, e.g. 10)"))

    # 1. data
    f = _check_data(run, step)
    findings.append(f)
    if f.verdict == "cause":
        cause = "dirty_data"
        fix = cure_for(cause)
    kind, text = check_llm_data(run, step, symptom)  # an id past the vocabulary; junk samples
    if kind is not None:
        findings[-1] = Finding("data", "cause", text)
        cause, detail, fix = "llm_data", kind, cure_for("llm_data", kind)

    if cause is None:  # the micro-batches of a gradient accumulation step, or its scaler
        detail, text = check_accumulation(run, step)
        if detail is None:  # the loop's gradient against the loss's, one plain replay
            detail, text = audit_gradient(run, build)
        if detail is not None:
            findings.append(Finding(faults_mod.get_fault(detail).reveals, "cause", text))
            cause, fix = "grad_accum", cure_for("grad_accum", detail)
        elif text is not None:
            findings.append(Finding("grad_norms", "hint", text))

    # A restart just before the symptom (the run's own log): what the resume left fresh;
    # or layers whose gradients were exactly 0 and woke up just before a spike
    if cause is None:
        kind, sop_step, text = check_restarts(run, step)
        if kind is not None:
            findings.append(Finding(sop_step, "cause", text))
            cause, detail = "optimizer_state", kind
            fix = cure_for(cause, detail)
    if cause is None and symptom == "spike":
        if text := check_woken_layers(run, step):
            findings.append(Finding("grad_norms", "cause", text))
            cause, detail = "optimizer_state", "adam_unfreeze_spike"
            fix = cure_for(cause, detail)

    # A clean batch whose step does not fail again when replayed exactly: the device
    if cause is None and (text := check_transient(run, step, symptom, loc)):
        findings.append(Finding("data", "cause", text))
        cause, detail = "hardware", "bit_flip"
        fix = cure_for(cause, detail)

    # 2. AMP off / bf16
    if cause is None:
        if config.precision == "fp32":
            findings.append(Finding("amp", "skipped", "the run is fp32 already"))
        else:
            fp32 = replay("amp_off")
            ok, why = health(fp32, run)
            if ok:  # only then does it matter whether bf16 is enough
                bf16 = replay("bf16")
                ok16, why16 = health(bf16, run) if bf16 is not None else (False, "n/a")
                cause, detail = _precision_cause(loc)
                fix = cure_for(cause, detail)
                if not {"amp_off": ok, "bf16": ok16}.get(fix, True):
                    fix = "amp_off"  # the declared cure was replayed and failed; fp32 passed
                findings.append(Finding("amp", "cause", f"fp32 replay: {why}; bf16 replay: "
                                                        f"{why16}"))
            else:
                gone = "nonfinite" != symptom_of(fp32)[0] and symptom == "nonfinite"
                note = " - the NaN is gone but the run is still bad, so fp16 only made " \
                       "the problem loud" if gone else ""
                findings.append(Finding("amp", "ruled out", f"fp32 replay: {why}{note}"))

    # 3. LR / 10 (and the LR column itself)
    if cause is None:
        jump = _lr_jump(run.record, step)
        if jump:
            cause, detail = "learning_rate", "lr_jump"
            fix = cure_for(cause, detail)  # none declared: the loss recovers by itself
            findings.append(Finding("lr", "cause", jump + f"; the symptom follows at step {step}"))
        else:
            lr = run.trainer.base_lr
            tried = []
            for divisor, name in LR_CUTS:  # / 10, then / 100 before the LR is ruled out
                tried.append((divisor, name, *health(replay(name), run)))
                if tried[-1][2]:
                    break
            divisor, name, ok, why = tried[-1]
            if ok:
                cause = "learning_rate"
                fix = cure_for(cause) if divisor == LR_CUTS[0][0] else name
                warmup = cure_for(cause, "no_warmup")
                if config.warmup_steps == 0 and warmup:
                    warm = replay(warmup)
                    if warm is not None and health(warm, run)[0]:
                        detail, fix = "no_warmup", warmup
                findings.append(Finding("lr", "cause", f"LR {lr:g} / {divisor} replay: {why}"
                                        + (" (and warmup alone cures it: warmup was 0)"
                                           if detail == "no_warmup" else "")))
            else:
                findings.append(Finding("lr", "ruled out", f"LR {lr:g} / 10 and / 100 "
                                        f"replays: {why}"))

    # A bad run that never learned before it failed sets no bar of its own, so an LR cut
    # that merely learns is a weak proof: a smaller LR also slows an explosion or hides a
    # bad init. Look on; a later cause whose fix learns further wins (see _weigh_lr).
    weak_lr = None
    if cause == "learning_rate" and detail != "lr_jump" and not gives_reference(run):
        weak_lr = (cause, detail, fix, len(findings) - 1)
        cause = detail = fix = None

    # 4. grad norms
    if cause is None:
        # An overflow makes inf first; a NaN with no inf before it is 0 / 0, not growth.
        zero_by_zero = loc is not None and loc.found and loc.inf_before_nan is False
        hist = _grad_history(run.record, step, overflow_counts=not zero_by_zero)
        if hist and hist[0] >= EXPLOSION_DECADES:
            decades, a, b = hist
            cause = "deep_explosion"
            fix = cure_for(cause)
            findings.append(Finding("grad_norms", "cause",
                                    f"the global grad norm grew {decades:.1f} orders of "
                                    f"magnitude from step {a} to step {b}"))
        else:
            text = "no grad-norm history before the failure" if not hist else \
                f"grad norm grew {hist[0]:.1f} orders of magnitude at most"
            findings.append(Finding("grad_norms", "ruled out", text))

    # 5. init / eps
    if cause is None:
        kind, kind_detail, text = _init_and_eps(run)
        if kind:
            cause, detail = kind, kind_detail
            fix = cure_for(kind, kind_detail)
            if kind == "myth" and symptom != "stall":
                cause = detail = None
        findings.append(Finding("init_eps", "cause" if cause else "ruled out", text))

    if weak_lr is not None:
        cause, detail, fix = _weigh_lr(weak_lr, (cause, detail, fix), findings, replay, run)

    # prove the fix
    verified, proof = _prove(replay, fix, run)
    if not fix and cause == "learning_rate" and detail == "lr_jump":
        proof = "a one-off LR glitch: fix the schedule; the loss recovers on its own"
    return Diagnosis(symptom, step, cause, detail or cause, fix, verified, proof, findings,
                     location=loc)


def _prove(replay: _Replayer, fix: str | None, run) -> tuple[bool, str]:
    """(proven, why): the run replayed with ``fix`` applied, judged against the bad run."""
    if not fix:
        return False, "no fix to try"
    fixed = replay(fix)
    if fixed is None:
        return False, f"{fix} changes nothing in this run"
    return health(fixed, run)


def _weigh_lr(lr_result, later, findings: list[Finding], replay: _Replayer, run):
    """An LR cut cured a run that never learned; a later step named another cause. Keep
    the later one only if its fix is healthy and ends lower than the LR replay did (the
    LR cut then only slowed the failure); otherwise the LR is the cause after all."""
    cause, detail, fix, at = lr_result
    later_cause, _, later_fix = later
    if later_cause is None or not later_fix:
        return cause, detail, fix
    lr_end = judge(replay(fix), baseline=run).end
    other = replay(later_fix)
    verdict = judge(other, baseline=run) if other is not None else None
    if verdict is not None and verdict.healthy and verdict.end < lr_end:
        f = findings[at]
        findings[at] = Finding(f.step, "ruled out", f"{f.text}; but the {later_fix} replay "
                               f"learns further ({verdict.end:.3g} against {lr_end:.3g}): "
                               "a smaller LR only slowed the failure")
        return later
    why = verdict.reason if verdict is not None else "it changes nothing in this run"
    for i in range(at + 1, len(findings)):
        if findings[i].verdict == "cause":
            findings[i] = Finding(findings[i].step, "ruled out",
                                  f"{findings[i].text}; but the {later_fix} replay does "
                                  f"no better than the LR cut ({why})")
    return cause, detail, fix


def _resolve(source, build: Builder | None):
    """A FaultRun to read and a builder to replay it, from what the user passed."""
    if isinstance(source, faults_mod.FaultRun):
        if build is None:
            name, params = source.fault, source.params
            build = lambda config: faults_mod.build_fault_trainer(name, config, params)  # noqa: E731
        return source, build
    if isinstance(source, Trainer):
        if build is None:
            raise NanlabError("diagnose(trainer) needs build=..., a function that makes the "
                              "same trainer from a TrainConfig, so that the SOP can replay it")
        error, step = source.record.crash  # Trainer.run logs a crash before it raises
        return faults_mod.FaultRun(None, {}, [], source.record, source, error, step), build
    if isinstance(source, (str, Path)):
        return _resolve(load_run(source), build)
    raise NanlabError(f"diagnose() takes a FaultRun, a run folder or a Trainer; got "
                      f"{type(source).__name__}")



__all__ = ["Diagnosis", "Finding", "diagnose", "health", "load_run", "symptom_of"]
