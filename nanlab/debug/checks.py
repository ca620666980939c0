"""The SOP's checks, registered in SOP order: :func:`nanlab.debug.diagnose` asks each in
turn and stops at the first that names a cause.

A check is ``fn(case) -> Outcome | None`` for one fault family at one SOP step. It
registers itself (:func:`register_check`) in the module that knows its evidence, so a
new family is one registered function, and ``diagnose`` holds no family names. The
order is the article's: the steps of ``nanlab.faults.SOP_STEPS``, then ``rank`` within a
step (cheap reads of the run's own log before replays).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nanlab.faults.catalogue import SOP_STEPS

# the modules whose checks are built in, imported on first use (each registers itself)
BUILTIN = ("nanlab.debug.sop_checks", "nanlab.debug.llm_data_checks",
           "nanlab.debug.grad_accum_checks", "nanlab.debug.restart_checks",
           "nanlab.debug.hardware_checks", "nanlab.debug.user_code",
           "nanlab.debug.masked_attention_checks", "nanlab.debug.backward_nan_checks",
           "nanlab.debug.moe_router_checks", "nanlab.debug.fp8_scaling_checks")


@dataclass
class Outcome:
    """What one check concluded: a verdict ("cause", "ruled out", "hint", "skipped") with
    the evidence in words, and for a cause the family, its detail and the fix to prove
    (default: the catalogue's cure). ``weak``: a cause whose proof is weak (an LR cut on
    a run that never learned): later checks still run and a stronger one wins.

    >>> Outcome("ruled out", "the batch is clean").cause is None
    True
    """

    verdict: str
    text: str
    step: str | None = None  # the SOP step of the finding (default: the check's)
    cause: str | None = None
    detail: str | None = None
    fix: str | None = None
    weak: bool = False
    no_fix: str | None = None  # why no fix is needed or named, when there is none


@dataclass
class Case:
    """What every check may read: the bad run, its symptom and step, locate's report,
    the replayer and what earlier checks left (``notes``).

    Example::

        @register_check("data", "my_family")
        def my_check(case: Case) -> Outcome | None:
            if case.symptom != "nonfinite":
                return None            # not this check's business
            ...                        # read case.run.record, replay with case.replay
    """

    run: Any
    build: Callable
    symptom: str
    step: int | None
    loc: Any = None
    replay: Any = None
    config: Any = None
    notes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """One registered check: its SOP step, family, function and rank in the step.

    >>> [c.step for c in registered()][0]
    'data'
    """

    step: str
    family: str
    fn: Callable[[Case], Outcome | None]
    rank: float
    healthy: bool = False  # also asked of a run whose curve looks healthy (a silent bug)


CHECKS: list[Check] = []


def register_check(step: str, family: str, fn: Callable | None = None, *, rank: float = 50,
                   healthy: bool = False):
    """Register ``fn`` as the check of ``family`` at SOP ``step`` (a key of SOP_STEPS);
    usable as a decorator. Re-registering the same function replaces it.

    >>> @register_check("init_eps", "example", rank=99)
    ... def never(case):
    ...     return None
    >>> [c.family for c in registered()][-1]
    'example'
    >>> unregister(never)
    """
    if step not in SOP_STEPS:
        raise ValueError(f"step must be one of {list(SOP_STEPS)}; got {step!r}")

    def add(f: Callable) -> Callable:
        unregister(f)
        CHECKS.append(Check(step, family, f, rank, healthy))
        return f
    return add(fn) if fn is not None else add


def unregister(fn: Callable) -> None:
    """Take a check out of the SOP (a test's own, or a family's to replace it).

    >>> unregister(lambda case: None)   # a function never registered: nothing happens
    """
    CHECKS[:] = [c for c in CHECKS if c.fn is not fn]


def registered() -> list[Check]:
    """Every check, built-in ones imported, in SOP order.

    >>> sorted({c.step for c in registered()}) == sorted(SOP_STEPS)
    True
    """
    for name in BUILTIN:
        importlib.import_module(name)
    order = list(SOP_STEPS)
    return sorted(CHECKS, key=lambda c: (order.index(c.step), c.rank))


__all__ = ["CHECKS", "Case", "Check", "Outcome", "register_check", "registered",
           "unregister"]
