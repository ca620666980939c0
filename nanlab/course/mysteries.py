"""Lab 07's mystery runs and Lab 15's final exam: a fault drawn from a seed, kept out of
the notebook's cells.

A :class:`Mystery` holds a run whose fault the learner must find with the SOP. The fault's
name stays in this object (the run's manifest reads ``"(hidden)"``); what the learner sees
is what an incident leaves: the record, the config, the trainer to replay. The answer is
graded ``MAX_ATTEMPTS`` times at most (each graded answer kept in ``attempts``), and the
hints are read from the run itself (``nanlab.faults.mystery.run_hints`` plus the first
non-finite op that ``locate`` finds), so they stay true for any ``MYSTERY_SEED``.

An :class:`ExamMystery` is one question of Lab 15's exam (``nanlab.faults.mystery
.exam_draw``): its answer is the fault's family, and its cause is shown (:func:`exam_report`)
only once the answer is closed, right or out of attempts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from nanlab import faults
from nanlab.debug import diagnose, locate
from nanlab.errors import NanlabError, check_range
from nanlab.faults import FaultRun, build_fault_trainer, get_fix, run_fault
from nanlab.faults.mystery import (
    EXAM_FAMILIES,
    EXAM_ORDER,
    EXAM_SIZE,
    MAX_ATTEMPTS,
    ONE_OFF,
    exam_draw,
    exam_run,
    run_hints,
)
from nanlab.train.trainer import TrainConfig

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
        self._start(random.Random(seed).sample(list(pool), 2)[index], families, run)

    def _start(self, fault: str, families: Mapping[str, str], run: Mapping[str, Any]) -> None:
        self._fault = fault
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
        """The same run (seed, data, steps) with nanlab fixes applied (none: the
        unchanged replay, the control)."""
        self._check_fixes(fixes)
        return self._hide(run_fault(self._fault, fixes=list(fixes), stop_when_poisoned=True,
                                    **self._run_args))

    def _check_fixes(self, fixes: Sequence[str]) -> None:
        for fix in fixes:
            if not get_fix(fix).applies(self.run.trainer.config, build=lambda c: (
                    build_fault_trainer(self._fault, c, {}))):
                raise ValueError(f"{fix!r} changes nothing in this run (e.g. AMP off "
                                 "on a run that is fp32 already): skip this SOP step")

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


EXAM_EVIDENCE = {
    "dirty_data": "the batch of the first bad step fails the batch checks (a NaN or inf, "
                  "a zero std, every target masked)",
    "learning_rate": "the LR / 10 replay is finite and learning (AMP off, where it applies, "
                     "is not), or the recorded LR jumps at the spike",
    "fp16_overflow": "the AMP-off replay is finite and learning; locate's first inf is in "
                     "the loss or the positions, not in attention or the optimizer",
    "softmax_overflow": "the AMP-off replay is finite and learning; locate's first inf is "
                        "the exp of the attention scores",
    "adam_eps_fp16": "pure fp16 (no fp32 copy of the weights): the first non-finite value "
                     "is made in the optimizer step, Adam's eps rounded to 0",
    "bad_init": "non-finite in fp32 at step 0, before any update: a weight matrix starts "
                "with std x sqrt(fan_in) far above 3",
    "myth": "a stall with no NaN: ReLU units that never fire (a bias far below 0) pass no "
            "gradient",
    "optimizer_state": "a finite spike where a layer that had no gradient starts to "
                       "train: Adam's second moment for it is still near 0",
    "grad_accum": "accum_steps > 1 and a clean batch: one micro-batch (empty, or with "
                  "few targets) weighs as much as the others",
    "llm_data": "a finite spike on batches with token ids past the vocabulary (masked "
                "by the vocabulary-parallel layers, so no crash) or with sequences of one "
                "token repeated (per-sample loss puts the spike on them)",
    "hardware": "a clean batch, and the step replayed exactly (locate, or the unchanged "
                "replay) is finite: the failure does not reproduce",
}
"""What decides each exam family: the finding :func:`exam_report` shows after the answer."""


class ExamMystery(Mystery):
    """Mystery ``index`` of exam ``seed`` (Lab 15): answer with its fault's family, one of
    ``EXAM_FAMILIES``. Graded ``MAX_ATTEMPTS`` times at most; a family of the right SOP step
    but not this one is "close" (the data step alone checks dirty data, LLM data,
    accumulation bugs and the device). A replay of the hardware fault runs without its
    flipped bit: a transient fault does not repeat, so the unchanged replay is the control.

    >>> m = ExamMystery(9, 2)  # doctest: +SKIP
    >>> m.grade("dirty_data"), m.closed  # doctest: +SKIP
    ('close: ...', False)
    """

    def __init__(self, seed: int, index: int, size: int = EXAM_SIZE):
        names = exam_draw(seed, size)
        check_range("index", index, 0, len(names) - 1, integer=True)
        self.number = index + 1
        self._start(names[index], {}, exam_run(names[index]))

    @property
    def _family(self) -> str:
        return faults.FAULTS[self._fault].family

    @property
    def _params(self) -> dict:
        return {k: v for k, v in self._run_args.items()
                if k not in TrainConfig.__dataclass_fields__}

    @property
    def closed(self) -> bool:
        """Answered right, or no graded attempt left: the cause may be shown."""
        return any(right for _, right in self.attempts) or len(self.attempts) >= MAX_ATTEMPTS

    def replay(self, *fixes: str) -> FaultRun:
        """The same run with nanlab fixes applied (none: the unchanged replay)."""
        if self._fault not in ONE_OFF:
            return super().replay(*fixes)
        self._check_fixes(fixes)  # the device does not flip the bit again
        train = {k: v for k, v in self._run_args.items() if k not in self._params}
        return self._hide(run_fault(None, fixes=list(fixes), stop_when_poisoned=True,
                                    **train))

    def diagnose(self):
        """nanlab's automated SOP on this run (check yourself after answering)."""
        return diagnose(self.run, build=lambda config: build_fault_trainer(
            self._fault, config, self._params))

    def grade(self, answer: Any) -> str | None:
        """None when right; else what is wrong, never the family. At most
        ``MAX_ATTEMPTS`` graded answers: one that is not a family, or a wrong one given
        before, is not an attempt (an answer sheet checked again costs nothing)."""
        family = answer.strip().lower() if isinstance(answer, str) else answer
        if family not in EXAM_FAMILIES:
            return f"answer with one of {list(EXAM_FAMILIES)}; got {answer!r}"
        if any(right for _, right in self.attempts):
            return None if family == self._family else "already answered right before"
        earlier = [a for a, _ in self.attempts]
        if family in earlier:  # a sheet checked again with this answer unchanged
            return (f"already graded: {family!r} was attempt {earlier.index(family) + 1}, "
                    "not right; it is not graded again")
        if len(self.attempts) >= MAX_ATTEMPTS:
            return (f"no attempts left ({MAX_ATTEMPTS} graded): exam_report() shows the "
                    "cause and what decides it")
        right = family == self._family
        self.attempts.append((family, right))
        if right:
            return None
        left = MAX_ATTEMPTS - len(self.attempts)
        step = faults.FAULTS[self._fault].reveals
        if any(faults.FAULTS[n].family == family and faults.FAULTS[n].reveals == step
               for n in EXAM_ORDER):
            return (f"close ({left} attempt(s) left): a family of the right SOP step, but "
                    "not this one: which finding tells the families of that step apart?")
        return f"not this run's family ({left} attempt(s) left): go through the SOP again"

    def reveal(self) -> dict:
        """The answer, once closed: the fault, its family, signature, SOP step, the
        finding that decides it and the cure; before that, a NanlabError."""
        if not self.closed:
            raise NanlabError(f"mystery {self.number} is not answered yet: its cause stays "
                              "hidden until it is answered right or out of attempts")
        fault = faults.FAULTS[self._fault]
        return {"fault": fault.name, "family": fault.family, "signature": fault.signature,
                "sop_step": faults.SOP_STEPS[fault.reveals],
                "decided_by": EXAM_EVIDENCE[fault.family], "cure": fault.cure,
                "answers": [a for a, _ in self.attempts],
                "right": any(right for _, right in self.attempts)}

    def __repr__(self) -> str:
        return f"ExamMystery({self.number}, fault hidden, {len(self.run.record.steps)} " \
               "steps recorded)"


def exam_report(mysteries: Sequence[ExamMystery]) -> str:
    """One block per exam mystery: its cause and what decides it once closed, else a line
    saying it is still hidden; then the score (right answers, right at the first try).

    >>> print(exam_report(exam))  # doctest: +SKIP
    mystery 1: right at attempt 1 (llm_data) ...
    """
    lines, right, first = [], 0, 0
    for m in mysteries:
        if not m.closed:
            lines.append(f"mystery {m.number}: not answered yet (its cause stays hidden)")
            continue
        r = m.reveal()
        right += r["right"]
        first += bool(m.attempts) and m.attempts[0][1]
        verdict = (f"right at attempt {len(r['answers'])}" if r["right"]
                   else f"not found in {MAX_ATTEMPTS} attempts ({', '.join(r['answers'])})")
        lines += [f"mystery {m.number}: {verdict}; the cause: {r['fault']} "
                  f"({r['family']}), a {r['signature']} run",
                  f"  decided by: {r['decided_by']}",
                  f"  SOP step: {r['sop_step']}; cure: {r['cure'] or 'none needed'}"]
    lines.append(f"score: {right} of {len(mysteries)} right, {first} at the first attempt")
    return "\n".join(lines)
