"""Lab 07's mystery runs: a fault drawn from a seed, kept out of the notebook's cells.

A :class:`Mystery` holds a run whose fault the learner must find with the SOP. The fault's
name stays in this object (the run's manifest reads ``"(hidden)"``); what the learner sees
is what an incident leaves: the record, the config, the trainer to replay. The answer is
graded ``MAX_ATTEMPTS`` times at most (each graded answer kept in ``attempts``), and the
hints are read from the run itself (``nanlab.faults.mystery.run_hints`` plus the first
non-finite op that ``locate`` finds), so they stay true for any ``MYSTERY_SEED``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from nanlab import faults
from nanlab.debug import diagnose, locate
from nanlab.faults import FaultRun, build_fault_trainer, get_fix, run_fault
from nanlab.faults.mystery import MAX_ATTEMPTS, run_hints

EVIDENCE = {"data": "the batch of the first bad step fails the batch checks",
            "amp": "the fp32 replay is finite and learning",
            "lr": "the LR / 10 replay is finite and learning",
            "grad_norms": "the grad norm grew 3+ orders of magnitude before the failure",
            "init_eps": "a weight matrix starts too large, or a norm eps is below 1e-6",
            "decoy": "the first loss is about ln(32) = 3.47, as in the clean run"}
"""One SOP finding per step (and a decoy): the evidence a mystery's widget offers."""


class Mystery:
    """A run with a hidden fault: what you have the morning after an incident.

    ``families`` maps an SOP step key (``"data"``, ``"amp"``, ...) to the family name a
    learner answers with. ``run`` holds the run arguments of ``faults.run_fault``.

    >>> m = Mystery(26, 0, ["nan_input", "tiny_eps"], {"data": "dirty data",
    ...             "init_eps": "init / eps"}, {"steps": 45})  # doctest: +SKIP
    >>> m.grade("dirty data"), m.hints()[0]  # doctest: +SKIP
    """

    def __init__(self, seed: int, index: int, pool: Sequence[str],
                 families: Mapping[str, str], run: Mapping[str, Any]):
        self._fault = random.Random(seed).sample(list(pool), 2)[index]
        self._families = dict(families)
        self._run_args = dict(run)
        self._hints: list[str] | None = None
        self.attempts: list[tuple[Any, bool]] = []
        self.run = self._hide(run_fault(self._fault, stop_when_poisoned=True, **self._run_args))

    @property
    def _family(self) -> str:
        return self._families[faults.FAULTS[self._fault].reveals]

    @staticmethod
    def _hide(fault_run: FaultRun) -> FaultRun:
        fault_run.record.manifest["fault"] = "(hidden)"
        return FaultRun(None, {}, fault_run.fixes, fault_run.record, fault_run.trainer,
                        fault_run.error, fault_run.error_step)

    def replay(self, *fixes: str) -> FaultRun:
        """The same run (seed, data, steps) with nanlab fixes applied."""
        for fix in fixes:
            if not get_fix(fix).applies(self.run.trainer.config, build=lambda c: (
                    build_fault_trainer(self._fault, c, {}))):
                raise ValueError(f"{fix!r} changes nothing in this run (e.g. AMP off "
                                 "on a run that is fp32 already): skip this SOP step")
        return self._hide(run_fault(self._fault, fixes=list(fixes), stop_when_poisoned=True,
                                    **self._run_args))

    def diagnose(self):
        """nanlab's automated SOP on this run (check yourself after answering)."""
        return diagnose(self.run, build=lambda config: build_fault_trainer(
            self._fault, config, {}))

    def grade(self, answer: Any) -> str | None:
        """None when right; else what is wrong. At most ``MAX_ATTEMPTS`` answers are graded
        (a malformed one is not an attempt); the family is never named here."""
        families = list(self._families.values())
        if answer not in families:
            return f"answer with one of {families}; got {answer!r}"
        if any(right for _, right in self.attempts):
            return None if answer == self._family else "already answered right before"
        if len(self.attempts) >= MAX_ATTEMPTS:
            return (f"no attempts left ({MAX_ATTEMPTS} graded): run m.diagnose() and read "
                    "what it found")
        right = answer == self._family
        self.attempts.append((answer, right))
        if right:
            return None
        left = MAX_ATTEMPTS - len(self.attempts)
        return f"not the family of this run's fault ({left} attempt(s) left): go through " \
               "the SOP again"

    def hints(self) -> list[str]:
        """Three hints computed from this run: where it broke, the gradients before, where
        the first non-finite value was made (``locate``'s replay). Computed once."""
        if self._hints is None:
            run = self.run
            hints = run_hints(run.record, run.error, run.error_step)
            hints[-1] = self._locate_hint(hints[-1])
            self._hints = hints
        return list(self._hints)

    def _locate_hint(self, fallback: str) -> str:
        bad = self.run.first_bad_step
        if bad is None:
            return ("No non-finite step: compare replays with one change each, e.g. "
                    "outcome(m.replay('lr_div10')), against the clean run.")
        try:
            loc = locate(self.run.trainer, bad)
        except Exception:  # a replay that cannot run is no reason to lose the hint
            return fallback
        if loc.error:
            what = f"the step raised {loc.error.split(':')[0]} in the {loc.error_pass} pass"
        elif loc.first_op is not None:
            op = loc.first_op
            what = (f"the first non-finite value is made by {op.op} in the {op.pass_name} "
                    f"pass" + (f" (module {op.module})" if op.module else ""))
        elif loc.first is not None:
            what = (f"the first non-finite value is {loc.first.tensor} in the "
                    f"{loc.first.pass_name} pass")
        else:
            what = "the replay found no non-finite value"
        return f"locate(m.run.trainer, {bad}) replays step {bad}: {what}."

    def question(self, qid: str):
        """The widget: the family, then the SOP finding that names it."""
        from nanlab.course.widgets import RootCause

        reveals = faults.FAULTS[self._fault].reveals
        return RootCause(
            qid, "Pick the family of this mystery run's fault, then tick the SOP finding "
            "that names it (the first one, in SOP order, that explains the failure).",
            list(self._families.values()), answer=self._family,
            evidence=list(EVIDENCE.values()), supporting=[EVIDENCE[reveals]],
            explanation=f"The SOP step that names it: {faults.SOP_STEPS[reveals]}. "
            "m.diagnose() shows the full report.", hints=self.hints())

    def __repr__(self) -> str:
        return f"Mystery(fault hidden, {len(self.run.record.steps)} steps recorded)"
