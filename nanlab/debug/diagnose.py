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
divergence loud), so each replay is judged on its loss curve by :func:`nanlab.analysis.judge.judge`
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

Each step's checks are registered functions (:mod:`nanlab.debug.checks`), asked in SOP
order; the last, ``user_code``, names a NaN made in your own code (a division, log or
root of finite inputs in your module or loss, after modest grad norms): no catalogue
fix is named for it, the report says what to clamp where.

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

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from nanlab import faults as faults_mod
from nanlab.analysis.judge import STREAK, judge
from nanlab.debug.checks import Case, Outcome, registered
from nanlab.debug.runs import load_run
from nanlab.debug.sop_checks import EXPLOSION_DECADES, LR_CUTS, health, symptom_of
from nanlab.errors import NanlabError
from nanlab.faults import fixes as fixes_mod
from nanlab.faults.catalogue import cure_for
from nanlab.train.trainer import TrainConfig, Trainer, stop_early

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
    cause: str | None  # a fault family (see nanlab.faults), "user_code", or None
    # the specific kind, e.g. "softmax_overflow", when it can be told; for "user_code"
    # the module's qualified name (as in model.named_modules(); "" is the model itself)
    detail: str | None
    fix: str | None  # a fix name (nanlab.faults.fixes)
    fix_verified: bool
    fix_evidence: str
    findings: list[Finding] = field(default_factory=list)
    # locate's report of the first bad step, kept so a STAR story need not replay it again
    location: object = field(default=None, repr=False, compare=False)
    # where precision decides, when the precision step bisected the model: a module path
    # (fp32 there alone makes the step finite), "a + b" (only together), "the model's own
    # forward code" or "the loss"; None when no bisection ran or it found nothing
    precision_layer: str | None = None

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
        elif self.cause == "user_code":  # the cure is a clamp in the user's own code
            lines.append(f"fix: none from the catalogue; {self.fix_evidence}")
        return "\n".join(lines)

    __str__ = report

    def to_dict(self) -> dict:
        d = asdict(replace(self, location=None))
        d.pop("location")
        d["evidence"], d["ruled_out"] = self.evidence, self.ruled_out
        return d


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


def _locate(run):
    """Where the first non-finite value was made (None when it cannot be replayed)."""
    if not run.trainer.checkpoints.steps():
        return None
    from nanlab.debug.locate import locate

    try:
        return locate(run.trainer)
    except (NanlabError, RuntimeError, IndexError):
        return None


def _where(loc, symptom: str, run) -> Finding | None:
    """locate's headline as a hint, or why it was skipped."""
    if loc is not None and loc.found:
        where = f"locate, replaying step {loc.step}: first non-finite value in {loc.pass_name}"
        if loc.module:
            where += f", {loc.module} ({loc.module_type})"
        c = loc.counts or {}
        counts = (f"{c.get('nan', 0)} NaN, {c.get('posinf', 0) + c.get('neginf', 0)} inf "
                  f"of {c.get('numel', '?')}")
        order = {True: "yes", False: "no", None: "together"}[loc.inf_before_nan]
        op = f", made by {loc.first_op.op}" if loc.first_op is not None else ""
        return Finding("data", "hint", f"{where}, {loc.tensor}: {counts}{op}; "
                                       f"inf before NaN: {order}")
    if symptom in ("nonfinite", "error") and not run.trainer.checkpoints.steps():
        return Finding("data", "hint", "locate skipped: the run kept no checkpoint to "
                       "replay from (train with checkpoint_every > 0, e.g. 10)")
    return None


# -- the procedure -------------------------------------------------------------------
def _refuse_storage_failure(run) -> None:
    """A run that stopped because its folder could not be written (a full disk, no
    permission) has no training cause: any replay would "prove" some unrelated fix."""
    record = run.record
    event = next((e for e in record.events if e.get("kind") == "error" and e.get("storage")),
                 None)
    if event is None and record.manifest.get("status") != "storage":
        return
    reason = (event or {}).get("storage") or "a storage failure"
    raise NanlabError(f"the run stopped at step {(event or {}).get('step', '?')} on {reason}, "
                      "not on a training failure: there is no training cause to find; free "
                      "space or fix the folder, then resume the run (nanlab run --resume)")


def diagnose(source, *, build: Builder | None = None) -> Diagnosis:
    """Run the SOP on a bad run and return the root cause, the evidence and a proven fix.

    ``source`` is a :class:`nanlab.faults.FaultRun`, a run folder written by the
    trainer, or a finished :class:`Trainer` (then ``build`` is required). The checks
    are those registered in SOP order (:mod:`nanlab.debug.checks`); the first that names
    a cause ends the search (a weak one lets later checks try to beat it).

    >>> diagnose(faults_mod.run_fault("tiny_eps", steps=20)).cause  # doctest: +SKIP
    'tiny_eps'
    """
    run, build = _resolve(source, build)
    _refuse_storage_failure(run)
    symptom, step = symptom_of(run)
    config = run.trainer.config
    if symptom == "healthy":  # a curve that learns; the loop's gradient may still be wrong
        case = Case(run, build, symptom, None, config=config,
                    replay=_Replayer(build, config, config.steps))
        for check in (c for c in registered() if c.healthy):
            out = check.fn(case)
            if out is not None and out.verdict in ("cause", "hint"):
                found = _cause_of(check, out)
                verified, proof = _prove(case.replay, found[2], run) if found[0] \
                    else (False, "no fix known")
                return Diagnosis("silent", None, *found, verified, proof,
                                 [_finding(check, out)])
        return Diagnosis("healthy", None, None, None, None, False, "nothing to fix",
                         [Finding("data", "skipped", "the run is healthy")])
    # A replay runs at least MIN_REPLAY_STEPS steps, so that "is it learning?" has an
    # answer even for a short run; it stops 30 steps after the original failure.
    config = config.replace(steps=max(config.steps, MIN_REPLAY_STEPS))
    horizon = config.steps if step is None else min(config.steps,
                                                    max(MIN_REPLAY_STEPS, step + 30))
    loc = _locate(run) if symptom in ("nonfinite", "error") else None
    case = Case(run, build, symptom, step, loc, _Replayer(build, config, horizon), config)
    findings = [f for f in [_where(loc, symptom, run)] if f is not None]
    found, weak, no_fix = (None, None, None), None, None
    for check in registered():
        out = check.fn(case)
        if out is None:
            continue
        findings.append(_finding(check, out))
        if out.verdict != "cause":
            continue
        if out.weak and weak is None:  # keep looking; a later cause may learn further
            weak = (_cause_of(check, out), len(findings) - 1, out.no_fix)
            continue
        found, no_fix = _cause_of(check, out), out.no_fix
        break
    if weak is not None:
        found = _weigh(weak[:2], found, findings, case.replay, run)
        no_fix = weak[2] if found == weak[0] else no_fix
    cause, detail, fix = found
    if cause is None:
        fix = None  # no cause, no fix to name
    verified, proof = _prove(case.replay, fix, run)
    if not fix and cause is not None and no_fix:
        proof = no_fix
    return Diagnosis(symptom, step, cause, detail if detail is not None else cause, fix,
                     verified, proof, findings, location=loc,
                     precision_layer=getattr(case.notes.get("precision_bisect"), "where", None))


def _cause_of(check, out: Outcome) -> tuple[str | None, str | None, str | None]:
    """(cause, detail, fix) of a check's outcome; the fix defaults to the catalogue's."""
    if out.verdict != "cause":
        return None, None, None
    cause = out.cause or check.family
    fix = out.fix if out.fix is not None or out.no_fix else cure_for(cause, out.detail)
    return cause, out.detail, fix


def _finding(check, out: Outcome) -> Finding:
    return Finding(out.step or check.step, out.verdict, out.text)


def _prove(replay: _Replayer, fix: str | None, run) -> tuple[bool, str]:
    """(proven, why): the run replayed with ``fix`` applied, judged against the bad run."""
    if not fix:
        return False, "no fix to try"
    fixed = replay(fix)
    if fixed is None:
        return False, f"{fix} changes nothing in this run"
    return health(fixed, run)


def _weigh(weak, later, findings: list[Finding], replay: _Replayer, run):
    """A weak cause (an LR cut that cured a run that never learned) met a later one. Keep
    the later one only if its fix is healthy and ends lower than the weak fix's replay
    did (the LR cut then only slowed the failure); otherwise the weak cause stands."""
    (cause, detail, fix), at = weak
    later_cause, _, later_fix = later
    if later_cause is None or not later_fix:
        return cause, detail, fix
    first = replay(fix)
    end = judge(first, baseline=run).end if first is not None else float("inf")
    other = replay(later_fix)
    verdict = judge(other, baseline=run) if other is not None else None
    if verdict is not None and verdict.healthy and verdict.end < end:
        f = findings[at]
        findings[at] = Finding(f.step, "ruled out", f"{f.text}; but the {later_fix} replay "
                               f"learns further ({verdict.end:.3g} against {end:.3g}): "
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



__all__ = ["EXPLOSION_DECADES", "LR_CUTS", "Diagnosis", "Finding", "diagnose", "health",
           "load_run", "symptom_of"]
