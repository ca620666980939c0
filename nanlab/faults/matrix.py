"""The fault x fix matrix: every fault run against every fix, measured.

Each cell is a real run of the toy model (same seed, same number of steps) with one
fault and one fix, judged by :func:`nanlab.analysis.judge.judge` against the clean run. Its outcome:

- ``cured``: no crash, no non-finite step, no spike, no stall, and the final loss is
  close to the clean run's (at most 3x it + 0.25);
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
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from nanlab.analysis.judge import STREAK, judge
from nanlab.analysis.signals import final_loss
from nanlab.errors import check_range
from nanlab.faults import fixes as fixes_mod
from nanlab.faults.catalogue import FAULTS, get_fault
from nanlab.faults.run import build_fault_trainer, fault_config, run_fault
from nanlab.train.trainer import stop_early

MATRIX_STEPS = 200
SPIKE_FAMILIES = ("learning_rate", "deep_explosion")  # what the adaptive cures are for
NONFINITE_STREAK = STREAK  # stop a run after this many non-finite steps in a row (the
# judge's "every step non-finite": nothing after that can be a cure)


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
    acted: int = 0  # steps on which an adaptive cure changed something ("cure" events)
    seconds: float = 0.0  # wall time of the cell's run (0 for n/a: decided without training)


def spike_and_lr_faults() -> list[str]:
    """The faults the adaptive cures (``fixes.ADAPTIVE_CURES``) are made for, read from
    the catalogue: every learning-rate fault and the deep stack whose gradients explode.

    >>> spike_and_lr_faults()
    ['high_lr', 'high_lr_adam', 'lr_jump', 'no_warmup', 'deep_explosion']
    """
    return [name for name, f in FAULTS.items() if f.family in SPIKE_FAMILIES]


def _measure(fault: str | None, fixes: list[str], steps: int, seed: int):
    import torch

    torch.set_num_threads(1)  # one process per core
    return run_fault(fault, fixes=fixes, steps=steps, seed=seed,
                                callbacks=[("on_step_end",
                                            stop_early(nonfinite_streak=NONFINITE_STREAK))])


def run_cell(fault: str, fix: str | None, steps: int, seed: int, clean_final: float) -> Cell:
    """Measure one cell: the fault with one fix (or none), judged against the clean run.

    >>> run_cell("nan_input", "validate_data", steps=60, seed=0,
    ...          clean_final=0.03).outcome  # doctest: +SKIP
    'cured'
    """
    if fix is not None and not fixes_mod.get_fix(fix).applies(
            fault_config(fault), build=lambda c: build_fault_trainer(fault, c, {})):
        return Cell(fault, fix, "n/a", "the fix changes nothing in this run")
    began = time.perf_counter()
    try:
        run = _measure(fault, [fix] if fix else [], steps, seed)
    except fixes_mod.NotApplicable as e:  # found only once the run was built
        return Cell(fault, fix, "n/a", f"refused once built: {e}")
    seconds = time.perf_counter() - began
    verdict = judge(run, clean=clean_final)
    outcome, evidence = verdict.outcome, verdict.reason
    end = final_loss(run.record.losses())
    acted = sum(e["kind"] == "cure" for e in run.record.events)
    return Cell(fault, fix, outcome, evidence, run.first_bad_step,
                round(end, 4) if np.isfinite(end) else None, len(run.record.steps), acted,
                round(seconds, 2))


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
    faults = list(faults or FAULTS)
    fixes = list(fixes or fixes_mod.FIXES)
    for name in faults:
        get_fault(name)
    for name in fixes:
        fixes_mod.get_fix(name)
    clean_final = final_loss(_measure(None, [], steps, seed).record.losses())
    jobs = [(f, x, steps, seed, clean_final) for f in faults for x in [None, *fixes]]
    if workers is not None:
        check_range("workers", workers, 1, integer=True)
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
