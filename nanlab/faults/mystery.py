"""Mystery runs: a fault drawn at random, its name sealed, for a learner to find with the SOP.

An instructor makes one run folder per student (or per exam question) from a seed; the
student gets the folder, reads its record and plots, and runs ``nanlab diagnose`` /
``nanlab locate`` or their own replays; the instructor reveals or grades the answer from
the same folder. The fault's name is *sealed* in the manifest (encoded, so a glance at
``manifest.json`` does not give it away, and so that ``diagnose`` can still replay the
run); it is not encrypted: a student who decodes it has learnt base64, not the SOP.
For graded work keep the seeds and grade with :func:`reveal`.

The configuration stays visible (precision, learning rate, depth...), as it would in a real
incident: reading it is part of the SOP. Nothing else in the folder names the fault: the
manifest keeps no mystery seed (``draw(seed)`` would name it), no fault parameters in the
clear. A learner gets ``MAX_ATTEMPTS`` graded answers (each recorded in the folder's
``answers.jsonl``), and :func:`run_hints` reads its hints from the run's own record (the
first bad step, the grad-norm history before it, the loss scale), so they hold for any
seed.

>>> draw(7) in POOL
True
>>> unseal(seal({"name": "nan_input", "params": {}}))["name"]
'nan_input'
"""

from __future__ import annotations

import base64
import json
import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from nanlab.errors import NanlabError, StorageError, check_range
from nanlab.faults import FAULTS, SOP_STEPS, get_fault, run_fault
from nanlab.runs.atomic import open_append, read_capped
from nanlab.runs.record import RunRecord, holds_run, read_manifest

SLOW = ("deep_explosion", "sigmoid_chain")  # minutes on a CPU: not for a quick exercise
# A one-off device fault cannot be replayed from a folder: the rebuilt run is a new
# process whose simulated device flips the bit again (nanlab.faults.hardware).
ONE_OFF = ("bit_flip",)
# A run config field that spells out the bug itself (``resume_skips=("optimizer",)``):
# the manifest keeps the config in the clear, so a mystery of such a fault would name it.
# Those faults stay out of the pool. (Most faults act through a lever on the built run
# and leave the config clean: nanlab.faults.catalogue.Fault.on_toy.)
NAMES_THE_BUG = ("resume_skips",)


def _config_names_the_bug(name: str) -> bool:
    fault = FAULTS[name]
    return bool(set(fault.conditions(fault.resolve())) & set(NAMES_THE_BUG))


# The pool, in a fixed order: a seed draws by position, so the order is part of the course
# (mystery 3 is the same fault on every machine and after any change to the registry).
DRAW_ORDER = ("nan_input", "illegal_label", "all_masked", "zero_std", "high_lr",
              "high_lr_adam", "lr_jump", "no_warmup", "fp16_overflow", "bad_init", "tiny_eps",
              "softmax_overflow", "position_overflow", "adam_eps_fp16", "dead_relu",
              "oov_token", "oov_token_masked", "repeated_token_shard")
POOL: tuple[str, ...] = tuple(name for name in DRAW_ORDER if name not in SLOW + ONE_OFF
                              and not _config_names_the_bug(name))
SEAL_PREFIX = "sealed:v1:"
MAX_ATTEMPTS = 3
"""Graded answers a learner gets per mystery folder; each is recorded in ``answers.jsonl``."""
ANSWERS = "answers.jsonl"
ANSWERS_CAP = 1 << 20  # three graded answers take far less; a bigger file is not ours


def draw(seed: int, pool: Sequence[str] = POOL) -> str:
    """The fault of mystery number ``seed``: the same seed always draws the same fault.

    >>> draw(3) == draw(3)
    True
    """
    check_range("seed", seed, 0, integer=True)
    if not pool:
        raise NanlabError("pool is empty; give fault names, e.g. mystery.POOL")
    for name in pool:
        get_fault(name)  # a clear error for an unknown name
    return random.Random(seed).choice(list(pool))


def seal(fault: dict) -> str:
    """Encode a manifest's fault entry so that it is not readable at a glance.

    >>> seal({"name": "nan_input"}).startswith(SEAL_PREFIX)
    True
    """
    raw = json.dumps(fault, sort_keys=True).encode()[::-1]
    return SEAL_PREFIX + base64.b64encode(raw).decode()


def unseal(token: str) -> dict:
    """The fault entry a :func:`seal` token holds.

    >>> unseal(seal({"name": "tiny_eps", "params": {"eps": 0.0}}))
    {'name': 'tiny_eps', 'params': {'eps': 0.0}}
    """
    if not isinstance(token, str) or not token.startswith(SEAL_PREFIX):
        raise NanlabError(f"{str(token)[:40]!r} is not a sealed fault (it must start with "
                          f"{SEAL_PREFIX!r})")
    try:
        fault = json.loads(base64.b64decode(token[len(SEAL_PREFIX):], validate=True)[::-1])
    except (ValueError, RecursionError):  # binascii.Error, UnicodeDecodeError, JSONDecodeError
        fault = None
    if not isinstance(fault, dict) or not isinstance(fault.get("name"), str) \
            or not isinstance(fault.get("params", {}), dict):
        raise NanlabError(f"{token[:40]!r}... is a damaged sealed fault (not one that seal() "
                          "wrote); make the mystery again from its seed")
    return fault


def make(seed: int, out_dir: str | Path, *, pool: Sequence[str] = POOL, steps: int = 200,
         checkpoint_every: int = 10) -> Path:
    """Run mystery number ``seed`` into ``out_dir`` and seal its fault; returns the folder.

    The run stops once a non-finite update reaches the weights (the morning after: the
    record, the checkpoints, nothing to train on). ``nanlab diagnose`` and ``nanlab
    locate`` work on the folder as on any run folder.

    >>> folder = make(7, "runs/mystery-7")  # doctest: +SKIP
    >>> reveal(folder)["name"]  # doctest: +SKIP
    'high_lr_adam'
    """
    out_dir = Path(out_dir)
    if holds_run(out_dir):
        raise NanlabError(f"{str(out_dir)!r} already holds a run; give a new folder")
    name = draw(seed, pool)
    record = run_fault(name, steps=steps, out_dir=str(out_dir),
                       checkpoint_every=checkpoint_every, stop_when_poisoned=True).record
    record.manifest["fault"] = {"sealed": seal(record.manifest["fault"])}
    record.write_manifest()  # no mystery seed in it: draw(seed) would name the fault
    return out_dir


def reveal(run_dir: str | Path) -> dict:
    """The answer of a mystery run folder: the fault, its SOP step, its cure.

    >>> reveal("runs/mystery-7")  # doctest: +SKIP
    {'name': 'high_lr_adam', 'params': {...}, 'summary': ..., 'sop_step': '3. divide ...', ...}
    """
    path = Path(run_dir) / "manifest.json"
    fault = read_manifest(run_dir).get("fault") or {}  # checked: one line if it is not
    if not isinstance(fault, dict):
        raise NanlabError(f"{path}: 'fault' must be an object, got {fault!r:.40}")
    try:
        if "sealed" in fault:
            fault = unseal(fault["sealed"])
        if not fault.get("name"):
            raise NanlabError("has no fault: it is a clean run")
        info = get_fault(fault["name"])
    except NanlabError as e:
        raise NanlabError(f"{path}: {e}") from None
    return {"name": info.name, "params": fault.get("params", {}), "summary": info.summary,
            "sop_step": SOP_STEPS[info.reveals], "cure": info.cure}


def grade(run_dir: str | Path, answer: str) -> str:
    """Feedback on a learner's answer (a fault name or an SOP step key such as ``"lr"``),
    compared case-insensitively, spaces around it trimmed.

    Each graded answer is appended to the folder's ``answers.jsonl``; after
    ``MAX_ATTEMPTS`` of them, or once one was right, no more are graded (an SOP is not a
    guessing game). An empty answer is not an attempt.

    >>> grade("runs/mystery-7", "lr")  # doctest: +SKIP
    'right (attempt 1 of 3): the SOP step that names it is 3. divide the learning rate by 10'
    """
    truth = reveal(run_dir)
    step_key = get_fault(truth["name"]).reveals
    answer = (answer or "").strip().lower()  # " LR " is "lr", "NaN_Input" is "nan_input"
    if not answer:
        return "no answer given: name the fault, or the SOP step that reveals it " \
               f"({', '.join(SOP_STEPS)})"
    past = attempts(run_dir)
    if any(a["verdict"] == "right" for a in past):
        return "already answered right; nothing more to grade"
    if len(past) >= MAX_ATTEMPTS:
        return (f"no attempts left: {MAX_ATTEMPTS} answers are recorded in {ANSWERS}; "
                "ask your instructor to reveal the fault")
    names = {n.lower(): n for n in FAULTS}
    if answer == truth["name"].lower() or answer == step_key.lower():
        verdict, text = "right", f"the SOP step that names it is {truth['sop_step']}"
    elif answer in names and get_fault(names[answer]).reveals == step_key:
        verdict, text = "close", "right SOP step, but a different fault of it"
    else:
        verdict, text = "wrong", "go through the SOP again, in order, and replay each step"
    _record_answer(run_dir, answer, verdict)
    n = len(past) + 1
    return f"{verdict} (attempt {n} of {MAX_ATTEMPTS}): {text}"


def attempts(run_dir: str | Path) -> list[dict]:
    """The graded answers recorded in a mystery folder, oldest first.

    >>> attempts("runs/mystery-7")  # doctest: +SKIP
    [{'time': '...', 'answer': 'lr', 'verdict': 'right'}]
    """
    path = Path(run_dir) / ANSWERS
    if not path.exists() and not path.is_symlink():
        return []
    try:
        text = read_capped(path, ANSWERS_CAP).decode("utf-8", errors="replace")
    except StorageError as e:
        raise NanlabError(str(e)) from None
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a damaged line is not an attempt
        if isinstance(row, dict) and isinstance(row.get("verdict"), str):
            rows.append(row)
    return rows


def _record_answer(run_dir: str | Path, answer: str, verdict: str) -> None:
    row = {"time": datetime.now(UTC).isoformat(timespec="seconds"),
           "answer": answer, "verdict": verdict}
    try:
        with open_append(Path(run_dir) / ANSWERS) as f:
            f.write(json.dumps(row) + "\n")
    except OSError as e:  # a StorageError, or one torch / the OS named some other way
        raise NanlabError(f"the answer cannot be recorded, so it is not graded: {e}") from None


def run_hints(record: RunRecord, error: str | None = None,
              error_step: int | None = None) -> list[str]:
    """Three hints read from a run's own record, concept first: where it broke, what the
    gradients did before, then where to look next. They hold for any fault and seed.

    ``error``/``error_step``: a crash (``FaultRun.error``), when the run raised.

    >>> run_hints(RunRecord.load("runs/mystery-7"))[0]  # doctest: +SKIP
    'The first non-finite loss is at step 7 of 200 recorded: ...'
    """
    bad = record.first_nonfinite_step
    n = len(record.steps)
    if bad is None and error_step is not None:
        bad = error_step
        first = (f"The run crashed at step {bad} ({str(error).split(':')[0] or 'an error'}), "
                 "with finite losses before it: a crash names its step exactly; the cause "
                 "is in what that step computed.")
    elif bad is None:
        losses = record.losses()
        low = int(np.argmin(losses))
        first = (f"All {n} recorded losses are finite: the loss went from {losses[0]:.2f} "
                 f"to {losses[-1]:.2f} (lowest {losses[low]:.2f}, at step {low}): a run "
                 "that fails to learn or diverges, not a NaN; judge the whole curve.")
    elif bad == 0:
        first = ("The loss is non-finite at step 0, before any optimizer update: the "
                 "learning rate cannot have caused it; the data, the precision or the "
                 "init acted in that first forward pass.")
    else:
        first = (f"The first non-finite loss is at step {bad} of {n} recorded: the cause "
                 "acts at or before it; everything after it is consequence.")
    return [first, _grad_hint(record, bad), _where_hint(record, bad)]


def grad_decades(record: RunRecord, until: int | None) -> float | None:
    """Orders of magnitude the global grad norm grew before step ``until`` (None: too
    little finite history, under 5 steps).

    >>> grad_decades(RunRecord.load("runs/mystery-7"), 40)  # doctest: +SKIP
    0.4
    """
    g = record.column("grad_norm")[:until]
    g = g[np.isfinite(g) & (g > 0)]
    if len(g) < 5:
        return None
    return float(math.log10(g.max() / g[:max(5, len(g) // 10)].min()))


def _grad_hint(record: RunRecord, bad: int | None) -> str:
    decades = grad_decades(record, bad)
    before = f"before step {bad}" if bad is not None else "over the run"
    if decades is None:
        return (f"There is almost no grad-norm history {before}: the SOP steps that need "
                "none come first (the batch, the precision, the init and eps).")
    if decades >= 3:
        trend = "an explosion that built up over many steps, not one bad batch"
    elif decades >= 1:
        trend = "growth, but less than the 3 orders of an explosion"
    else:
        trend = "calm: the failure did not build up in the gradients"
    return f"The global grad norm grew {decades:.1f} orders of magnitude {before}: {trend}."


def _where_hint(record: RunRecord, bad: int | None) -> str:
    scales = record.column("loss_scale")[: bad]
    scales = scales[np.isfinite(scales)] if scales.dtype.kind == "f" else np.array([])
    if bad is None:
        where = ("no step to locate: replay the run with one change at a time (`nanlab "
                 "diagnose RUN_DIR` does it in SOP order) and compare the curves")
    else:
        where = (f"`nanlab locate RUN_DIR --step {bad}` replays that step and names the "
                 "first op that made a non-finite value; `nanlab diagnose RUN_DIR` runs "
                 "the SOP")
    if len(scales):
        return (f"fp16 with a GradScaler: the loss scale went from {scales[0]:g} to "
                f"{scales[-1]:g} before the failure. {where}.")
    return f"{where}."


def hints(run_dir: str | Path) -> list[str]:
    """:func:`run_hints` for a mystery run folder (``nanlab mystery hint``).

    >>> hints("runs/mystery-7")[1]  # doctest: +SKIP
    'The global grad norm grew 1.3 orders of magnitude over the run: ...'
    """
    record = RunRecord.load(run_dir)
    error, error_step = record.crash
    return run_hints(record, error, error_step)


# ---------------------------------------------------------------------------------------
# The final exam (Lab 15): one fault per family, none named by its config or a crash
# ---------------------------------------------------------------------------------------
# Every exam fault, in a fixed order (a seed draws by position, as DRAW_ORDER). A fault of
# the registry is either here or in EXAM_LEFT_OUT with the reason (tests/test_exam.py).
EXAM_ORDER = ("nan_input", "all_masked", "zero_std",                      # dirty_data
              "high_lr", "high_lr_adam", "lr_jump", "no_warmup",          # learning_rate
              "fp16_overflow", "position_overflow", "softmax_overflow",
              "adam_eps_fp16", "bad_init", "dead_relu",                   # ..., myth
              "adam_unfreeze_spike",                                      # optimizer_state
              "accum_mean_of_means", "accum_masked_micro_batch",          # grad_accum
              "oov_token_masked", "repeated_token_shard",                 # llm_data
              # hardware: a replay does not flip the bit again (the exam's replays run
              # without it, as a real transient fault does not repeat), so the unchanged
              # replay and locate's exact replay of the step decide it honestly
              "bit_flip")
EXAM_LEFT_OUT = {
    "deep_explosion": "slow (minutes on a CPU), and its family has no other fault",
    "sigmoid_chain": "slow (minutes on a CPU); dead_relu stands for the myth family",
    "tiny_eps": "its config diff reads norm_eps: 0.0, the bug itself; no other fault of "
                "its family",
    "illegal_label": "it crashes with 'Target ... is out of bounds': the message names it",
    "oov_token": "it crashes with 'index out of range in self' in the embedding: the "
                 "message names the id",
    "scaler_update_micro_batch": "it crashes with the GradScaler's own assertion at step "
                                 "0: the message names the scaler",
    "resume_fresh_optimizer": "its config holds resume_skips, which names the bug",
    "resume_reset_schedule": "its config holds resume_skips, which names the bug",
    # issue 31's family came after Lab 15's exams were drawn and stored: a new family
    # changes every seed's draw (EXAM_FAMILIES), as a new fault in DRAW_ORDER would change
    # Lab 07's mysteries, so it is in neither
    "left_padding_inf_mask": "a family added after Lab 15's stored exams: drawing it would "
                             "change every seed's draw",
    "empty_sequence": "a family added after Lab 15's stored exams: drawing it would change "
                      "every seed's draw",
    # the backward-NaN family came later still, for the same reason
    "where_log_grad": "a family added after Lab 15's stored exams: drawing it would change "
                      "every seed's draw",
    # and the MoE router family after that
    "router_low_precision": "a family added after Lab 15's stored exams: drawing it would "
                            "change every seed's draw",
    # and the FP8 scaling family after that
    "fp8_amax_zero": "a family added after Lab 15's stored exams: drawing it would change "
                     "every seed's draw",
    "fp8_stale_amax": "a family added after Lab 15's stored exams: drawing it would change "
                      "every seed's draw",
}
EXAM_FAMILIES: tuple[str, ...] = tuple(sorted({FAULTS[n].family for n in EXAM_ORDER}))
"""The answers of the exam: the ``family`` of a fault (``FAULTS[name].family``)."""
EXAM_SIZE = 6
# A run length per fault (the rest: the first 120 steps of the 200-step schedule, as Lab 07):
# the late faults (the LLM-data shards at step 150, the mean of means from step 140) spike
# on a model that has learned (about 0.09 by then). Moved earlier, the mean of means spikes
# on a model still learning, where diagnose's per-sample check blames the data instead.
EXAM_RUN = {"steps": 120, "decay_steps": 200}
EXAM_RUNS = {"oov_token_masked": {"steps": 170}, "repeated_token_shard": {"steps": 170},
             "accum_mean_of_means": {"steps": 170}}
# Faults on which a replay the SOP runs is finite but does not learn, so "finite" alone
# misleads, and a replay decides: high_lr (fp16): AMP off finite, stalling; LR / 10
# healthy. fp16_overflow: LR / 10 finite, learning too little; AMP off healthy. bit_flip:
# LR / 10 finite, learning too little; the unchanged replay is clean. Every exam draws one.
EXAM_TRAPS = ("high_lr", "fp16_overflow", "bit_flip")
NO_NAN = ("spike", "diverge", "stall")  # signatures of a run that stays finite


def exam_run(name: str) -> dict:
    """The ``run_fault`` arguments of an exam fault (run length and fault parameters).

    >>> exam_run("accum_mean_of_means")
    {'steps': 170, 'decay_steps': 200}
    """
    if name not in EXAM_ORDER:
        raise NanlabError(f"{name!r} is not an exam fault; exam faults: "
                          f"{', '.join(EXAM_ORDER)}")
    return {**EXAM_RUN, **EXAM_RUNS.get(name, {})}


def exam_draw(seed: int, size: int = EXAM_SIZE) -> tuple[str, ...]:
    """The faults of exam number ``seed``: ``size`` families drawn without repeats, one
    fault of each (the same seed, the same faults, in the same order). Every draw holds a
    fault of ``EXAM_TRAPS`` and one whose run stays finite (a spike, a divergence or a
    stall), so the exam grades the replay and the whole curve, not only a NaN.

    >>> exam_draw(3) == exam_draw(3)
    True
    >>> len({FAULTS[n].family for n in exam_draw(3)})
    6
    """
    check_range("seed", seed, 0, integer=True)
    check_range("size", size, 2, len(EXAM_FAMILIES), integer=True)
    members = {f: [n for n in EXAM_ORDER if FAULTS[n].family == f] for f in EXAM_FAMILIES}
    rng = random.Random(seed)
    while True:  # a draw that misses a trap or a finite run is drawn again, same generator
        names = tuple(rng.choice(members[f]) for f in rng.sample(EXAM_FAMILIES, size))
        if set(names) & set(EXAM_TRAPS) \
                and any(FAULTS[n].signature in NO_NAN for n in names):
            return names
