"""The fault x fix matrix: every fault run against every fix, measured.

Each cell is a real run of the toy model (same seed, same number of steps) with one
fault and one fix. Its outcome:

- ``cured``: no crash, no non-finite step, no spike, and the final loss is close to
  the clean run's;
- ``contained``: non-finite steps happened, but every one was skipped before it
  reached the weights, and the run ended close to the clean one (the symptom is
  handled, the cause is still there);
- ``not cured``: a crash, a non-finite update, a spike, or a final loss far from the
  clean run's, with the numbers that show it;
- ``n/a``: the fix would change nothing in this run (AMP off in an fp32 run).

To keep the whole matrix within a few minutes on two cores, a run stops as soon as a
non-finite update has reached the weights (nothing after that can be a cure) or after
10 non-finite steps in a row, and the cells run in parallel processes.

>>> m = fault_fix_matrix(faults=["nan_input"], fixes=["validate_data", "lr_div10"],
...                      workers=1, progress=False)  # doctest: +SKIP
>>> m.outcome("nan_input", "validate_data"), m.outcome("nan_input", "lr_div10")  # doctest: +SKIP
('cured', 'not cured')
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from nanlab import faults as faults_mod
from nanlab.faults import fixes as fixes_mod
from nanlab.signals import final_loss, find_spikes, is_stalled, recovery_steps

MATRIX_STEPS = 200
NONFINITE_STREAK = 10  # stop a run after this many non-finite steps in a row


@dataclass
class Cell:
    """One measured cell: a fault with one fix (``None``: no fix), its outcome and why.

    ``outcome`` is "cured", "contained" (non-finite steps, all skipped), "not cured" or
    "n/a" (the fix changes nothing in this run).

    >>> Cell("nan_input", "lr_div10", "not cured", "non-finite at step 40").outcome
    'not cured'
    """

    fault: str
    fix: str | None
    outcome: str
    evidence: str
    first_bad_step: int | None = None
    final_loss: float | None = None
    steps_run: int = 0


def judge(run: faults_mod.FaultRun, clean_final: float, signature: str) -> tuple[str, str]:
    """Outcome and evidence of one run, against the clean run's final loss.

    >>> run = faults_mod.run_fault("nan_input", steps=60)  # doctest: +SKIP
    >>> judge(run, clean_final=0.03, signature="nonfinite")  # doctest: +SKIP
    ('not cured', 'non-finite at step 40, reached the weights')
    """
    if run.error:
        return "not cured", f"crashed at step {run.error_step}: {run.error}"
    steps = run.record.steps
    losses = run.record.losses()
    bad = [r for r in steps if not r["finite"]]
    poisoned = [r for r in bad if not r["skipped"]]
    if poisoned:
        weights_finite = all(bool(p.isfinite().all()) for p in run.trainer.model.parameters())
        # A NaN loss need not poison the weights: with every target masked the loss is
        # 0 / 0 but the gradient is 0, so the update is finite.
        where = "the weights stayed finite" if weights_finite else "reached the weights"
        return "not cured", f"non-finite at step {poisoned[0]['step']}, {where}"
    end = final_loss(losses)
    if len(bad) >= NONFINITE_STREAK and all(not r["finite"] for r in steps[-NONFINITE_STREAK:]):
        return "not cured", f"every step non-finite from step {bad[0]['step']} (all skipped)"
    tolerance = 3 * clean_final + 0.25
    if signature == "stall" and is_stalled(losses):
        return "not cured", f"stalled: loss {losses[0]:.2f} -> {end:.2f}"
    if end > tolerance:
        return "not cured", f"finite, but final loss {end:.3g} vs clean {clean_final:.3g}"
    spikes = [s for s in find_spikes(losses) if s >= 10]
    if signature == "spike" and spikes:
        back = recovery_steps(losses, spikes[0])
        return "not cured", (f"spike at step {spikes[0]} to {losses[spikes[0]]:.2f}"
                             + (f", back in {back} steps" if back else ""))
    if bad:
        return "contained", (f"{len(bad)} non-finite step(s) from step {bad[0]['step']}, "
                             f"all skipped; final loss {end:.3g}")
    return "cured", f"final loss {end:.3g} (clean {clean_final:.3g})"


def _stop_on_streak(trainer, info) -> None:
    rows = trainer.record.steps[-NONFINITE_STREAK:]
    if len(rows) == NONFINITE_STREAK and not any(r["finite"] for r in rows):
        trainer.stop_requested = True
        trainer.stop_reason = f"{NONFINITE_STREAK} non-finite steps in a row"


def _measure(fault: str | None, fixes: list[str], steps: int, seed: int):
    import torch

    torch.set_num_threads(1)  # one process per core
    return faults_mod.run_fault(fault, fixes=fixes, steps=steps, seed=seed,
                                stop_when_poisoned=True,
                                callbacks=[("on_step_end", _stop_on_streak)])


def run_cell(fault: str, fix: str | None, steps: int, seed: int, clean_final: float) -> Cell:
    """Measure one cell: the fault with one fix (or none), judged against the clean run.

    >>> run_cell("nan_input", "validate_data", steps=60, seed=0,
    ...          clean_final=0.03).outcome  # doctest: +SKIP
    'cured'
    """
    if fix is not None and not fixes_mod.get_fix(fix).applies(faults_mod.fault_config(fault)):
        return Cell(fault, fix, "n/a", "the fix changes nothing in this run")
    run = _measure(fault, [fix] if fix else [], steps, seed)
    outcome, evidence = judge(run, clean_final, faults_mod.get_fault(fault).signature)
    end = final_loss(run.record.losses())
    return Cell(fault, fix, outcome, evidence, run.first_bad_step,
                round(end, 4) if np.isfinite(end) else None, len(run.record.steps))


class Matrix:
    """The measured cells, by (fault, fix).

    :func:`fault_fix_matrix` returns one; it can be built from cells too:

    >>> m = Matrix([Cell("nan_input", None, "not cured", "non-finite at step 40"),
    ...             Cell("nan_input", "validate_data", "cured", "final loss 0.03")],
    ...            clean_final=0.03, steps=200, seed=0)
    >>> m.outcome("nan_input", None), m.outcome("nan_input", "validate_data")
    ('not cured', 'cured')
    >>> print(m.table())  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    fault \\ fix  (none)  validate_data
    nan_input    -       cured
    ...
    """

    def __init__(self, cells: list[Cell], clean_final: float, steps: int, seed: int):
        self.cells = {(c.fault, c.fix): c for c in cells}
        self.faults = list(dict.fromkeys(c.fault for c in cells))
        self.fixes = list(dict.fromkeys(c.fix for c in cells if c.fix is not None))
        self.clean_final, self.steps, self.seed = clean_final, steps, seed

    def outcome(self, fault: str, fix: str | None) -> str:
        return self.cells[(fault, fix)].outcome

    def table(self) -> str:
        """The matrix as a text table: one row per fault, one column per fix."""
        short = {"cured": "cured", "contained": "contain", "not cured": "-", "n/a": "n/a"}
        head = ["fault \\ fix", "(none)", *self.fixes]
        rows = [head]
        for f in self.faults:
            rows.append([f, short[self.outcome(f, None)],
                         *(short[self.outcome(f, x)] for x in self.fixes)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        legend = (f"cured / contain(ed: non-finite steps skipped) / - (not cured) / n/a; "
                  f"{self.steps} steps, seed {self.seed}, clean final loss "
                  f"{self.clean_final:.3g}")
        return "\n".join([*lines, "", legend])

    def evidence(self) -> str:
        """One line per cell: the numbers behind the table."""
        return "\n".join(f"{c.fault:18s} {c.fix or '(none)':15s} {c.outcome:10s} {c.evidence}"
                         for c in self.cells.values())

    def to_dict(self) -> dict:
        return {"steps": self.steps, "seed": self.seed, "clean_final_loss": self.clean_final,
                "cells": [asdict(c) for c in self.cells.values()]}


def _cell_job(args) -> Cell:
    return run_cell(*args)


def fault_fix_matrix(faults=None, fixes=None, *, steps: int = MATRIX_STEPS, seed: int = 0,
                     workers: int | None = None, progress: bool = True) -> Matrix:
    """Measure every fault (default: all) against no fix and every fix (default: all).

    The whole matrix takes minutes; one fault against two fixes, seconds:

    >>> m = fault_fix_matrix(faults=["nan_input"], fixes=["validate_data", "lr_div10"],
    ...                      workers=1, progress=False)  # doctest: +SKIP
    >>> print(m.table())  # doctest: +SKIP
    """
    faults = list(faults or faults_mod.FAULTS)
    fixes = list(fixes or fixes_mod.FIXES)
    for name in faults:
        faults_mod.get_fault(name)
    for name in fixes:
        fixes_mod.get_fix(name)
    clean_final = final_loss(_measure(None, [], steps, seed).record.losses())
    jobs = [(f, x, steps, seed, clean_final) for f in faults for x in [None, *fixes]]
    workers = workers or min(4, os.cpu_count() or 1)
    bar = tqdm(total=len(jobs), desc="matrix", unit="run", disable=not progress)
    cells = []
    if workers == 1:
        for job in jobs:
            cells.append(_cell_job(job))
            bar.update(1)
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            for cell in pool.map(_cell_job, jobs):
                cells.append(cell)
                bar.update(1)
    bar.close()
    return Matrix(cells, clean_final, steps, seed)
