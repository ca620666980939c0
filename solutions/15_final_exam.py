# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["solution-only"]
# **Source notebook (solution version).** This pair (`solutions/15_final_exam.py`,
# `.ipynb`) is the single source of `labs/15_final_exam.ipynb`, answers filled in.
# Edit either (JupyterLab syncs the other on save), then run
# `nanlab course execute solutions/15_final_exam.py` (syncs the pair, stores the
# outputs the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 15 · The final exam: six mystery runs, every fault family
#
# Lab 07's two mysteries were a warm-up; this is the exam. Six runs, each with one
# hidden fault, drawn one per family from the families of the whole course, the new
# ones of Labs 13 and 14 included. No run's config names its bug, and none crashes (a
# crash's message names the op). Some end in a NaN, some spike, diverge or stall with
# every loss finite, and at least one is decided only by a replay.
#
# **The rules.**
# - Your answer for a mystery is its **fault family** (the table below).
# - Each mystery is graded **3 times at most**; an answer you already had graded is not
#   graded again. "Close" means a family of the right SOP step, but not this one.
# - A mystery's cause is shown only once it is closed: answered right, or out of tries.
# - Replays are yours: `m.replay("amp_off")`, `m.replay("lr_div10")`, any fix of
#   `nanlab.faults.fixes`, and `m.replay()` with no fix, the unchanged replay.
#   `m.diagnose()` is for checking yourself **after** answering.
#
# CPU is enough; plan an hour or more. The runs take about a minute.

# %% [markdown]
# The answers, the eleven families:
#
# | answer | the family | where you met it |
# |---|---|---|
# | `dirty_data` | a NaN or inf in a float input, a zero std, every target masked | Lab 02 |
# | `learning_rate` | an LR too high, no warmup, a jump in the schedule | Labs 03, 11 |
# | `fp16_overflow` | a value past fp16's 65504 in the loss or the positions | Labs 04, 06 |
# | `softmax_overflow` | an attention softmax written without subtracting the max | Lab 06 |
# | `adam_eps_fp16` | Adam's state in fp16: its eps rounds to 0 | Lab 04 |
# | `bad_init` | weights that start too large | Lab 05 |
# | `myth` | units that never fire: a stall, no NaN | Lab 05 |
# | `optimizer_state` | Adam's state that does not match the layer it updates | Lab 13 |
# | `grad_accum` | an accumulation loop that weighs micro-batches wrongly | Lab 14 |
# | `llm_data` | token ids past the vocabulary, junk sequences | Lab 14 |
# | `hardware` | one bit flipped once on the device | Lab 14 |
#
# Two families stay out: the deep-stack explosion (minutes per run on a CPU) and the
# tiny norm eps (its config diff reads `norm_eps: 0.0`, the bug itself).

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

from nanlab.analysis.judge import judge
from nanlab.course import check, hint, predict, solution, start_lab  # noqa: F401
from nanlab.course.mysteries import ExamMystery, exam_report
from nanlab.debug import locate
from nanlab.debug.attribution import per_sample_loss
from nanlab.faults import SOP_STEPS, batch_problems, run_fault
from nanlab.faults.mystery import EXAM_FAMILIES, EXAM_RUN, EXAM_SIZE
from nanlab.train import TrainConfig
from nanlab.train.accum import split_batch, target_count
from nanlab.viz import plot_grad_heatmap  # noqa: F401  (for your investigation)

start_lab("15_final_exam")
EXAM_SEED = 9
exam = [ExamMystery(EXAM_SEED, i) for i in range(EXAM_SIZE)]
clean = run_fault(None, **EXAM_RUN)  # the yardstick: the toy's first 120 of 200 steps
print(*exam, sep="\n")

# %% tags=["nbval-check-output"]
print(f"{len(exam)} mysteries; answer each with one of {len(EXAM_FAMILIES)} families:")
print(", ".join(EXAM_FAMILIES))

# %% [markdown]
# ## 1. The symptoms
# What each run shows: its loss curve, whether it went non-finite or crashed, its
# precision and its config diff from the clean baseline.

# %%
def config_changes(fault_run):
    """The config fields of a run that differ from the clean baseline's (Lab 07)."""
    base, mine = TrainConfig(progress=False).to_dict(), fault_run.trainer.config.to_dict()
    changes = {k: v for k, v in mine.items() if k != "model" and v != base[k]}
    changes.update({f"model.{k}": v for k, v in mine["model"].items()
                    if v != base["model"][k]})
    for key in EXAM_RUN:  # the run length is the exam's, not the fault's
        changes.pop(key, None)
    return changes


fig, axes = plt.subplots(2, 3, figsize=(11, 5), layout="constrained")
for m, ax in zip(exam, axes.flat, strict=True):
    losses = m.run.record.losses()
    ax.plot(np.where(np.isfinite(losses), losses, np.nan), marker="." if len(losses) < 5
            else None)
    bad = m.run.first_bad_step
    if bad is not None:
        ax.axvline(bad, color="C3", ls=":", label=f"first bad step {bad}")
        ax.legend(fontsize=7)
    if np.isfinite(losses).any():  # a run that is non-finite from step 0 has no curve
        ax.set_yscale("log")
    ax.set_title(f"mystery {m.number}", fontsize=9)
for m in exam:
    print(f"mystery {m.number}: {len(m.run.record.steps)} steps, first bad step "
          f"{m.run.first_bad_step}, crashed: {m.run.error is not None}, "
          f"changed: {config_changes(m.run)}")

# %% [markdown]
# **Exercise 1 · first look.** Before any replay: from the symptoms alone, which SOP
# step (a key of `SOP_STEPS`: `"data"`, `"amp"`, `"lr"`, `"grad_norms"`, `"init_eps"`)
# do you expect to decide each mystery? Return `{mystery number: step}`. It is graded
# after the reveal, against the step that does.

# %%
def my_predictions():
    """{1: "data", 2: ..., ...}: the SOP step you expect to decide each mystery."""
    ### BEGIN SOLUTION
    return {1: "data", 2: "grad_norms", 3: "data", 4: "data", 5: "init_eps", 6: "lr"}
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before you investigate: the first one you commit is the one
# graded.

# %%
predict("exam_first_look", my_predictions)


# %% [markdown]
# ## 2. Your tools
# The SOP of Lab 07, written out once. `outcome` is Lab 07's: a replay counts only if
# finite **and** learning. The others read the run's own record and checkpoints.

# %%
def outcome(fault_run):
    """{'finite': no NaN, inf or crash; 'learning': what nanlab.analysis.judge calls healthy}."""
    verdict = judge(fault_run)
    finite = verdict.kind != "error" and verdict.first_nonfinite is None
    return {"finite": bool(finite), "learning": verdict.healthy}


def init_gains(trainer, limit=3.0):
    """Weight matrices whose std x sqrt(fan_in) at step 0 is above `limit` (Lab 05)."""
    gains = {name: float(w.float().std()) * math.sqrt(w.shape[1])
             for name, w in trainer.checkpoints.load(0)["model"].items()
             if name.endswith("weight") and w.dim() == 2}
    return {name: round(g, 1) for name, g in gains.items() if g > limit}


def silent_layers(record, until=None):
    """Layers whose recorded grad norm is 0 at every recorded step before `until`."""
    names, steps, norms = record.layer_matrix("grad_norm")
    before = steps < (until if until is not None else steps[-1] + 1)
    return [n for n, row in zip(names, norms, strict=True) if np.all(row[before] == 0)]


def micro_batch_targets(trainer, step):
    """The target count of each micro-batch of a step's batch (Lab 14)."""
    batch = trainer.batches(step)
    return [target_count(mb) for mb in split_batch(batch, trainer.config.accum_steps)]


def carriers(trainer, step):
    """Per-sample loss at `step`, with the weights the model had then (Lab 14)."""
    kept = [s for s in trainer.checkpoints.steps() if s <= step]
    return per_sample_loss(trainer.model, trainer.batches(step), trainer.loss_fn,
                           state=trainer.checkpoints.load(kept[-1])["model"])


# %% [markdown]
# Also: `judge(m.run)` (its `kind` and `step`), `m.run.record.column("lr")`,
# `batch_problems(trainer.batches(step), vocab)`, `locate(m.run.trainer, step)` (the
# exact replay of one step: which op, pass and module made the first non-finite value,
# or none), `plot_grad_heatmap(m.run.record)`, `m.hints()`.
#
# Two traps. A finite replay is not a cure: one that does not learn has only postponed
# the failure or stopped training. And a replay shows a cause only if the unchanged
# replay still fails: a fault that does not reproduce is gone from every replay,
# whatever the replay changed.
#
# **Exercise 2.** Write `replay_decides(unchanged, replay)`: given the `outcome` of the
# unchanged replay (the control) and of a replay with one change, return `True` when
# that change shows the cause.

# %%
def replay_decides(unchanged, replay):
    """True when the one change turned a failing run into a finite, learning one."""
    ### BEGIN SOLUTION
    still_fails = not (unchanged["finite"] and unchanged["learning"])
    return still_fails and replay["finite"] and replay["learning"]
    ### END SOLUTION


# %% tags=["nbval-check-output"]
HEALTHY, NOT_LEARNING, NAN = ({"finite": True, "learning": True},
                              {"finite": True, "learning": False},
                              {"finite": False, "learning": False})
check("replay_decides", replay_decides, [True, False, False, False, True], cases={
    "unchanged NaN again, the change healthy": (NAN, HEALTHY),
    "unchanged NaN again, the change finite but not learning": (NAN, NOT_LEARNING),
    "unchanged healthy (the fault did not come back), the change healthy": (HEALTHY,
                                                                            HEALTHY),
    "unchanged NaN again, the change NaN too": (NAN, NAN),
    "unchanged diverges again (finite), the change healthy": (NOT_LEARNING, HEALTHY),
}, hints=[
    "A change shows the cause only when it turned a run that still fails into a healthy "
    "one: two conditions, one on each replay.",
    "Healthy means finite and learning, both. A control that is healthy too means the "
    "failure did not come back, so no change can take the credit for it.",
    "Read the two outcome dicts by their finite and learning keys: the control must not "
    "be both, the changed replay must be both; combine them with and, or and not.",
], solution="""\
still_fails = not (unchanged["finite"] and unchanged["learning"])
return still_fails and replay["finite"] and replay["learning"]""")

# %% [markdown]
# ## 3. The investigation
# `m = exam[0]` is mystery 1, and so on. Work through them in any order, cheapest step
# first; each replay takes a few seconds.

# %%
# Your investigation:

# %% [markdown] tags=["solution-only"]
# The solution's investigation: the SOP on each mystery, with the finding that tells
# the families of one step apart, stopping at the first that decides.

# %% tags=["solution-only"]
def investigate(m):
    """The family of a mystery's fault, and the finding that decided it."""
    run, trainer = m.run, m.run.trainer
    config, verdict, bad = trainer.config, judge(m.run), m.run.first_bad_step
    vocab = config.model.vocab_size
    if bad is not None:  # a NaN or inf: the SOP in order
        if batch_problems(trainer.batches(bad), vocab):
            return "dirty_data", "the batch fails the checks"
        if config.accum_steps > 1 and 0 in micro_batch_targets(trainer, bad):
            return "grad_accum", "a clean batch with an empty micro-batch"
        loc = locate(trainer, bad)
        if not loc.found and outcome(m.replay())["finite"]:
            return "hardware", "the step does not reproduce, nor does the run"
        if config.precision != "fp32":
            amp_off = outcome(m.replay("amp_off"))
            if amp_off["finite"] and amp_off["learning"]:
                if loc.pass_name == "optimizer":
                    return "adam_eps_fp16", "AMP off cures it; inf made in the optimizer"
                if "softmax" in (loc.module or ""):
                    return "softmax_overflow", "AMP off cures it; inf made in the softmax"
                return "fp16_overflow", f"AMP off cures it; inf made in {loc.pass_name}"
            print(f"  mystery {m.number}: AMP off {amp_off}")
        if bad > 0:
            lr_div10 = outcome(m.replay("lr_div10"))
            if lr_div10["finite"] and lr_div10["learning"]:
                return "learning_rate", "LR / 10 is finite and learning"
        gains = init_gains(trainer)
        if gains:
            return "bad_init", f"{len(gains)} matrices start with a gain up to " \
                               f"{max(gains.values())}"
        return "not found", ""
    step = verdict.step  # a finite run: a spike, a divergence or a stall
    if verdict.kind == "stall" and silent_layers(run.record):
        return "myth", f"{len(silent_layers(run.record))} layers never get a gradient"
    if verdict.kind == "spike":
        lr = run.record.column("lr")
        if lr[step - 1] > 3 * lr[step - 2] or lr[step] > 3 * lr[step - 1]:
            return "learning_rate", "the recorded LR jumps at the spike"
        if batch_problems(trainer.batches(step), vocab):
            return "llm_data", "token ids past the vocabulary, and no crash"
        if silent_layers(run.record, step - 5):
            return "optimizer_state", "a layer with no gradient before starts to train"
        if config.accum_steps > 1:
            return "grad_accum", f"micro-batch targets {micro_batch_targets(trainer, step)}"
        if carriers(trainer, step).pattern():
            return "llm_data", carriers(trainer, step).pattern()
    lr_div10 = outcome(m.replay("lr_div10"))
    if lr_div10["finite"] and lr_div10["learning"]:
        return "learning_rate", "LR / 10 is finite and learning"
    return "not found", ""


found = {}
for m in exam:
    found[m.number], why = investigate(m)
    print(f"mystery {m.number}: {found[m.number]} ({why})")


# %% [markdown]
# **Exercise 3 · your answers.** Return `{mystery number: family}`; leave a mystery out
# (or `None`) until you have an answer for it. Rerun the check after each change: a
# right answer stays right, and an answer already graded is not graded again.

# %%
def my_answers():
    """{1: "dirty_data", ...}: the family of each mystery's fault, one of EXAM_FAMILIES."""
    ### BEGIN SOLUTION
    return found
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def answer_of(number):
    answer = my_answers().get(number)
    if answer is None:
        raise NotImplementedError  # no answer yet: not graded
    return answer


for m in exam:
    check(f"exam-mystery-{m.number}", lambda m=m: answer_of(m.number), test=m.grade,
          hints=m.hints())

# %% [markdown]
# ## 4. The reveal
# Each closed mystery: its fault, the finding that decides it, the SOP step and the
# cure. An open one stays hidden.

# %% tags=["nbval-check-output"]
print(exam_report(exam))

# %% [markdown]
# Your first look, graded now against the step that decided each mystery:

# %% tags=["nbval-check-output"]
def first_look(predicted):
    predicted = {int(n): step for n, step in predicted.items()}  # JSON keys are text
    truth = {m.number: m.reveal()["sop_step"] for m in exam}
    wrong = [f"mystery {n} (you: {predicted.get(n)!r}; it was {step!r})"
             for n, step in truth.items() if SOP_STEPS.get(predicted.get(n)) != step]
    return None if not wrong else f"{len(wrong)} of {len(truth)} off: " + "; ".join(wrong)


if all(m.closed for m in exam):
    check("exam_first_look", my_predictions, locked=True, test=first_look)
else:
    print("not done yet: exam_first_look: close every mystery first")

# %% [markdown]
# Now run `m.diagnose()` on each mystery (a few seconds each) and compare its report
# with your investigation: what did it rule out that you did not? Then set `EXAM_SEED`
# to another number and sit a new exam.
#
# ## Summary
# - The symptom names no family: a NaN and a spike each have causes in several.
# - The SOP decides, cheapest step first; within one step a second finding tells the
#   families apart (the op `locate` names, a silent layer, a micro-batch's targets).
# - A replay counts when it is finite **and** learning, and only against an unchanged
#   replay that still fails.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
