"""Spike rules measured on a labelled corpus of runs: recall, precision, false alarms, lead.

The corpus is made by the package, deterministically: clean runs over seeds and LRs,
noisy but healthy runs (small batches), finite spikes that recover (an LR burst), spikes
that end in a NaN, a NaN the guard skipped (the run goes on, healthy), and every built-in
fault. Each run's loss and grad-norm series are recorded once; every rule then replays
them, so the table costs one corpus.

**Ground truth, from how each run was made.** A run has at most one *incident*: the
window of steps ``[start, end)`` in which something is wrong.

- clean and noisy runs: no incident, every step healthy;
- a fault injected at step k (a bad batch, an LR burst): ``start = k``; a fault that is
  part of the run's set-up (an LR, a precision, an init): ``start = 0``;
- ``end``: the first non-finite (or crashed) step; for a spike that stays finite,
  ``k + length + RECOVERY`` (the LR burst and the steps the loss needs to come back);
  for a divergence that stays finite, the end of the run;
- the two myth faults (dead ReLU, sigmoid chain) stall; no spike rule is meant to see a
  stall, so their steps are not scored; nor are those of a fault meant to end in a NaN
  that did not fire in this run (a fault on the edge, on some CPU).

**Scoring, one step at a time.** Non-finite steps are never scored: every system checks
for NaN with a rule of its own (Megatron-LM's ``check_for_nan_in_loss_and_grad``, nanlab's
guard ``mode``); a spike rule earns its keep *before* the NaN, or on a spike that never
becomes one. On the finite steps:

- a **true alarm** is an alarm inside an incident window; a **false alarm** one on a
  healthy step (before an incident, after a recovered spike, after a skipped NaN, or
  anywhere in a clean run); steps after a run died are not scored;
- an incident is **detected** when at least one true alarm falls in its window, and
  **missed** otherwise; one whose window holds no finite step (the NaN comes with the
  bad batch itself) cannot be detected by any spike rule and is counted apart as
  *instant*;
- **recall** = detected / detectable incidents; **precision** = true alarms / all scored
  alarms; **false alarms per 1,000 healthy steps**; **lead** = first non-finite step minus
  the first true alarm, for the detected incidents that end in a non-finite step.

**The best rule** is the one with the highest recall among those with at most
:data:`MAX_FALSE_ALARMS` false alarms per 1,000 healthy steps (a false alarm costs a
rollback), ties broken by the longer median lead, then by fewer false alarms.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nanlab.errors import check_choice
from nanlab.faults.catalogue import FAULTS, get_fault
from nanlab.faults.levers import Injection
from nanlab.faults.run import build_fault_trainer, execute
from nanlab.guard.detectors import RULES, Detector, alarms
from nanlab.guard.guard import Guard
from nanlab.train.trainer import TrainConfig, stop_early

RECOVERY = 20  # steps a recovering spike may take to come back (measured: lr_jump ~20)
MAX_FALSE_ALARMS = 1.0  # per 1,000 healthy steps: the bar for "best"
NONFINITE_STREAK = 5  # a run is ended after this many non-finite steps in a row
SIZES = ("quick", "full")


@dataclass
class RunSpec:
    """How a run of the corpus is made: a fault (None = clean), its parameters, the
    TrainConfig fields changed, and optionally a NaN batch the guard skips.

    >>> RunSpec("lr_jump x10 at 70", "spike", "lr_jump", {"at_step": 70}).fault
    'lr_jump'
    """

    label: str
    kind: str  # clean | noisy | spike | spike_nan | skipped_nan | fault
    fault: str | None = None
    params: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    skipped_nan_at: int | None = None  # a NaN input at this step, skipped by Guard("skip")


@dataclass
class Run:
    """One run of the corpus: its series and its ground truth.

    >>> import numpy as np
    >>> run = Run("to nan", "fault", np.array([1.0, 2.0, np.nan]), np.ones(3), (1, 2), True, 2)
    >>> run.step_labels().tolist()   # healthy, incident, not scored
    [0, 1, -1]
    """

    label: str
    kind: str
    losses: np.ndarray
    grad_norms: np.ndarray
    incident: tuple[int, int] | None  # [start, end) or None (healthy)
    scored: bool = True
    first_bad: int | None = None  # first non-finite (or crashed) step

    def step_labels(self) -> np.ndarray:
        """Per step: 1 incident, 0 healthy, -1 not scored (non-finite, dead, unscored)."""
        n = len(self.losses)
        out = np.zeros(n, dtype=np.int8)
        if not self.scored:
            return out - 1
        if self.incident is not None:
            out[self.incident[0]:self.incident[1]] = 1
        finite = np.isfinite(self.losses) & np.isfinite(self.grad_norms)
        out[~finite] = -1
        if self.first_bad is not None and not (self.kind == "skipped_nan"):
            out[self.first_bad:] = -1  # a dead run has nothing left to detect
        return out


def _spec_list(size: str) -> list[RunSpec]:
    check_choice("size", size, SIZES)
    if size == "quick":  # 5 runs, 120 steps: one of each kind that matters, in fp32
        return [RunSpec("clean seed=0", "clean"),
                RunSpec("noisy batch=4", "noisy", config={"batch_size": 4}),
                RunSpec("lr_jump x10 at 70", "spike", "lr_jump", {"at_step": 70}),
                RunSpec("nan at 30 skipped, lr_jump at 80", "skipped_nan", "lr_jump",
                        {"at_step": 80}, skipped_nan_at=30),
                RunSpec("deep_explosion lr=0.05", "spike_nan", "deep_explosion",
                        {"lr": 0.05})]
    specs = [RunSpec(f"clean seed={s}", "clean", config={"seed": s}) for s in (0, 1, 2)]
    specs += [RunSpec(f"clean lr={lr:g}", "clean", config={"lr": lr}) for lr in (2e-3, 1e-2)]
    specs += [RunSpec(f"noisy batch={b} seed={s}", "noisy", config={"batch_size": b, "seed": s})
              for b, s in ((4, 0), (4, 1), (8, 2))]
    specs += [RunSpec(f"lr_jump x{f:g} len {n} at {k} seed={s}", "spike", "lr_jump",
                      {"at_step": k, "factor": f, "length": n}, {"seed": s})
              for k, f, n, s in ((60, 10.0, 1, 0), (100, 10.0, 1, 1), (140, 20.0, 1, 2),
                                 (80, 10.0, 3, 0))]
    specs += [RunSpec("deep_explosion lr=0.05", "spike_nan", "deep_explosion", {"lr": 0.05}),
              RunSpec("nan at 40 skipped, lr_jump at 120", "skipped_nan", "lr_jump",
                      {"at_step": 120}, skipped_nan_at=40),
              RunSpec("nan at 60 skipped", "skipped_nan", None, skipped_nan_at=60)]
    specs += [RunSpec(name, "fault", name) for name in FAULTS if name != "lr_jump"]
    return specs


def _incident(spec: RunSpec, n: int, first_bad: int | None) -> tuple[int, int] | None:
    if spec.fault is None:
        return None
    fault = get_fault(spec.fault)
    p = fault.resolve(**spec.params)
    start = p.get("at_step", 0)
    if first_bad is not None and first_bad >= start:
        return start, first_bad
    if fault.signature == "spike":
        return start, min(n, start + p.get("length", 1) + RECOVERY)
    return start, n


def make_run(spec: RunSpec, steps: int = 200) -> Run:
    """Train one run of the corpus and label it (see the module docstring).

    >>> run = make_run(RunSpec("lr_jump x10 at 70", "spike", "lr_jump", {"at_step": 70}),
    ...                steps=120)  # doctest: +SKIP
    >>> run.incident  # doctest: +SKIP
    (70, 91)
    """
    fault = get_fault(spec.fault) if spec.fault else None
    base = TrainConfig(steps=steps, progress=False, record_every=0, checkpoint_every=0)
    config = base.replace(**spec.config)
    p = fault.resolve(**spec.params) if fault else {}
    if fault:
        config = config.replace(**fault.conditions(p))
    trainer = build_fault_trainer(spec.fault, config, p)
    if spec.skipped_nan_at is not None:  # a second fault: a NaN batch the guard skips
        extra = Injection(trainer.model, trainer.optimizer, trainer.batches,
                          inputs="features", labels="targets", scheduler=trainer.scheduler)
        get_fault("nan_input").install(extra, {"at_step": spec.skipped_nan_at, "value": "nan"})
        trainer.batches = extra.batches
        Guard("skip").attach(trainer)
    trainer.add_callback("on_step_end", stop_early(nonfinite_streak=NONFINITE_STREAK))
    run = execute(trainer, spec.fault, p)
    losses = run.record.column("loss").astype(np.float64)
    norms = run.record.column("grad_norm").astype(np.float64)
    first_bad = run.first_bad_step if spec.skipped_nan_at is None else None
    if spec.skipped_nan_at is not None:
        incident = None if spec.fault is None else _incident(spec, len(losses), None)
    else:
        incident = _incident(spec, len(losses), first_bad)
    # a stall is not a spike; a fault meant to end in a NaN that did not here never fired;
    # a crash before the first loss left nothing for a detector to read
    scored = fault is None or not (fault.signature == "stall" or not len(losses) or (
        fault.signature == "nonfinite" and first_bad is None and spec.skipped_nan_at is None))
    return Run(spec.label, spec.kind, losses, norms, incident, scored, first_bad)


STEPS = {"quick": 120, "full": 200}


def make_corpus(size: str = "full", progress: Callable[[str], None] | None = None
                ) -> list[Run]:
    """Every run of the ``size`` corpus ("quick": 5 runs of 120 steps; "full": 41 runs of
    200 steps: every built-in fault among them), each made once.

    >>> runs = make_corpus("quick")  # doctest: +SKIP
    >>> [r.kind for r in runs]  # doctest: +SKIP
    ['clean', 'noisy', 'spike', 'skipped_nan', 'spike_nan']
    """
    runs = []
    check_choice("size", size, SIZES)
    for spec in _spec_list(size):
        if progress:
            progress(spec.label)
        runs.append(make_run(spec, STEPS[size]))
    return runs


@dataclass
class Score:
    """One rule's line of the table (:func:`score` makes it).

    >>> Score("r", "", "", 1, 2, 3, 1, 500, [4]).false_per_1000
    2.0
    """

    rule: str
    summary: str
    source: str
    detected: int
    detectable: int
    true_alarms: int
    false_alarms: int
    healthy_steps: int
    leads: list[int]

    @property
    def recall(self) -> float:
        return self.detected / self.detectable if self.detectable else math.nan

    @property
    def precision(self) -> float:
        n = self.true_alarms + self.false_alarms
        return self.true_alarms / n if n else math.nan

    @property
    def false_per_1000(self) -> float:
        return 1000.0 * self.false_alarms / self.healthy_steps if self.healthy_steps else math.nan

    @property
    def median_lead(self) -> float:
        return float(statistics.median(self.leads)) if self.leads else math.nan

    def row(self) -> dict:
        return {"rule": self.rule, "recall": self.recall, "precision": self.precision,
                "false_alarms_per_1000_healthy_steps": self.false_per_1000,
                "median_lead_steps": self.median_lead, "detected": self.detected,
                "detectable": self.detectable, "true_alarms": self.true_alarms,
                "false_alarms": self.false_alarms, "summary": self.summary,
                "source": self.source}


def score(make: Callable[[], Detector], runs: Sequence[Run]) -> Score:
    """Replay every run through a fresh detector from ``make`` and score its alarms.

    >>> import numpy as np
    >>> from nanlab.guard.detectors import Megatron
    >>> healthy = Run("clean", "clean", np.ones(150), np.ones(150), None)
    >>> score(Megatron, [healthy]).false_alarms
    0
    """
    probe = make()
    detected = detectable = true = false = healthy = 0
    leads: list[int] = []
    for run in runs:
        flags = np.array(alarms(make(), run.losses, run.grad_norms), dtype=bool)
        labels = run.step_labels()
        true += int((flags & (labels == 1)).sum())
        false += int((flags & (labels == 0)).sum())
        healthy += int((labels == 0).sum())
        if run.incident is None or not run.scored or not (labels == 1).any():
            continue
        detectable += 1
        hits = np.flatnonzero(flags & (labels == 1))
        if len(hits):
            detected += 1
            if run.first_bad is not None:
                leads.append(int(run.first_bad - hits[0]))
    return Score(probe.name, probe.summary, probe.source, detected, detectable, true, false,
                 healthy, leads)


def best(scores: Sequence[Score], max_false: float = MAX_FALSE_ALARMS) -> Score | None:
    """The highest recall at most ``max_false`` false alarms per 1,000 healthy steps; ties
    go to the longer median lead, then to fewer false alarms.

    >>> a, b = Score("a", "", "", 1, 2, 1, 0, 1000, []), Score("b", "", "", 2, 2, 2, 5, 1000, [])
    >>> best([a, b]).rule   # b catches more, but raises 5 false alarms per 1,000 steps
    'a'
    """
    ok = _eligible(scores, max_false)
    return max(ok, key=_rank) if ok else None


def _eligible(scores: Sequence[Score], max_false: float) -> list[Score]:
    """The rules under the false-alarm bar that had an incident to catch."""
    return [s for s in scores if s.false_per_1000 <= max_false and s.detectable]


def _rank(s: Score) -> tuple[float, float, float]:
    lead = s.median_lead if not math.isnan(s.median_lead) else -1.0
    return (s.recall, lead, -s.false_per_1000)


def tied_best(scores: Sequence[Score], max_false: float = MAX_FALSE_ALARMS) -> list[str]:
    """Every rule as good as :func:`best` on recall, lead and false alarms (the table
    names them all: a tie has no winner).

    >>> a, b = Score("a", "", "", 1, 2, 1, 0, 1000, []), Score("b", "", "", 1, 2, 1, 0, 1000, [])
    >>> tied_best([a, b])
    ['a', 'b']
    """
    top = best(scores, max_false)
    return [] if top is None else [s.rule for s in _eligible(scores, max_false)
                                   if _rank(s) == _rank(top)]


@dataclass
class Table:
    """The detector table: one :class:`Score` per rule, the corpus it was measured on.

    >>> import numpy as np
    >>> healthy = Run("clean", "clean", np.ones(150), np.ones(150), None)
    >>> detector_table([healthy]).to_dict()["corpus"]["healthy_steps"]
    150
    """

    scores: list[Score]
    runs: int
    steps: int
    incidents: int
    instant: int
    healthy_steps: int
    size: str
    seconds_corpus: float
    seconds_replay: float
    made: bool = True  # the corpus was made here (else given, and not timed)

    @property
    def best(self) -> Score | None:
        return best(self.scores)

    def to_dict(self) -> dict:
        b = self.best
        return {"corpus": {"size": self.size, "runs": self.runs, "steps": self.steps,
                           "incidents": self.incidents, "instant_incidents": self.instant,
                           "healthy_steps": self.healthy_steps},
                "seconds": {"corpus": round(self.seconds_corpus, 1) if self.made else None,
                            "replay": round(self.seconds_replay, 2)},
                "best": b.rule if b else None, "best_tied": tied_best(self.scores),
                "max_false_alarms_per_1000": MAX_FALSE_ALARMS,
                "rules": [s.row() for s in self.scores]}

    def text(self) -> str:
        head = (f"{'rule':<17}{'recall':>8}{'precision':>11}{'false/1k':>10}"
                f"{'lead':>7}  rule as shipped")
        lines = [head, "-" * len(head)]

        def fmt(x: float, spec: str) -> str:
            return "-" if math.isnan(x) else format(x, spec)
        for s in self.scores:
            lines.append(f"{s.rule:<17}{fmt(s.recall, '.2f'):>8}{fmt(s.precision, '.2f'):>11}"
                         f"{fmt(s.false_per_1000, '.1f'):>10}{fmt(s.median_lead, '.0f'):>7}"
                         f"  {s.summary}")
        tied = tied_best(self.scores)
        lines += ["",
                  f"corpus ({self.size}): {self.runs} runs, {self.steps} steps, "
                  f"{self.incidents} incidents scored (+{self.instant} instant: NaN with the "
                  f"bad batch), {self.healthy_steps} healthy steps",
                  (f"time: corpus {self.seconds_corpus:.1f} s, " if self.made else "time: ")
                  + f"replay of every rule {self.seconds_replay:.2f} s",
                  f"best (highest recall at <= {MAX_FALSE_ALARMS:g} false alarms per 1,000 "
                  f"healthy steps): {', '.join(tied) or 'none'}"
                  + (" (tied)" if len(tied) > 1 else "")]
        return "\n".join(lines)


def detector_table(runs: Sequence[Run] | None = None, size: str = "full",
                   rules: dict[str, Callable[[], Detector]] | None = None,
                   progress: Callable[[str], None] | None = None) -> Table:
    """Make the corpus (unless ``runs`` is given) and score every rule on it.

    >>> table = detector_table(size="quick")  # doctest: +SKIP
    >>> print(table.text())  # doctest: +SKIP
    """
    t0 = time.perf_counter()
    made = runs is None
    if made:
        runs = make_corpus(size, progress=progress)
    t1 = time.perf_counter()
    scores = [score(make, runs) for make in (rules or RULES).values()]
    t2 = time.perf_counter()
    labels = [r.step_labels() for r in runs]
    incidents = sum(1 for r, lab in zip(runs, labels, strict=True)
                    if r.incident is not None and r.scored and (lab == 1).any())
    instant = sum(1 for r, lab in zip(runs, labels, strict=True)
                  if r.incident is not None and r.scored and not (lab == 1).any())
    return Table(scores, len(runs), sum(len(r.losses) for r in runs), incidents, instant,
                 sum(int((lab == 0).sum()) for lab in labels), size, t1 - t0, t2 - t1, made)
