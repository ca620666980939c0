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
# **Source notebook (solution version).** This pair, `solutions/07_sop_mystery.py` and
# `solutions/07_sop_mystery.ipynb`, is the single source of `labs/07_sop_mystery.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/07_sop_mystery.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 07 · The SOP (排查流程): by hand, with `diagnose`, then mystery runs
#
# Labs 02 to 04 each met one cause of a NaN and knew in advance which one it was. A
# real incident does not come labelled. What you have is a record, a config and a
# loss curve that went wrong; what you need is a **procedure** that goes from cheap
# and common causes to expensive and rare ones, where every step is a controlled
# experiment (对照实验) and not a guess. In this lab:
#
# 1. **the SOP by hand** on one NaN run: read the manifest, find the first bad
#    step, replay it exactly, then the five checks in order: **data → AMP off →
#    LR ÷ 10 → grad norms → init / eps**; and why "the NaN is gone" is not yet a
#    cure;
# 2. **the same with `diagnose`**, which runs those checks as replays and writes
#    the root cause (根因), what it ruled out and the fix it proved;
# 3. **mystery runs** (graded): a fault drawn at random and hidden from you; you
#    investigate and name its family;
# 4. **practice** in interview form.
#
# CPU is enough; about 45 minutes. Cells marked `# YOUR CODE HERE` are yours; the
# cell after each one checks it.

# %% [markdown]
# ## Setup
# Every run in this lab is the toy Transformer of Lab 00 on the counting task, seed 0,
# **120 steps of the 200-step schedule** (`decay_steps=200`): the first 120 steps
# of the full run, bit for bit, in less time. The clean run is the yardstick.

# %%
import math
import random

import numpy as np

from nanlab import faults
from nanlab.course import check, start_lab
from nanlab.debug import diagnose, locate
from nanlab.faults import FaultRun, batch_problems, build_fault_trainer, get_fix, run_fault
from nanlab.judge import judge
from nanlab.signals import final_loss
from nanlab.train import TrainConfig
from nanlab.viz import plot_compare, plot_grad_heatmap, plot_loss

start_lab("07_sop_mystery")
RUN = dict(steps=120, decay_steps=200)  # the first 120 steps of the 200-step run
clean = run_fault(None, **RUN)
print(f"clean run: loss {clean.record.losses()[0]:.2f} -> "
      f"{final_loss(clean.record.losses()):.3f}")

# %% [markdown]
# ## 1. The SOP by hand, on one NaN
# The incident: a colleague's run trained well for a while, then its loss turned
# non-finite and stayed that way. Here it is (in this section we know the fault,
# `fp16_overflow`; in section 3 you will not).

# %%
run = run_fault("fp16_overflow", **RUN)
record = run.record
fig = plot_loss(record, title="The incident: a loss that goes non-finite")


# %% [markdown]
# ### 1a. Read the manifest first
# Before touching anything, read what the run *was*. Every nanlab run keeps a
# **manifest**: the full config, the seed, the fault (if one was injected on
# purpose), the library versions, the code commit and the device. Without it you
# cannot replay the run, and without a replay every later step of the SOP is a
# guess. The most useful view is the short one: **what differs from a known-good
# config**.

# %%
def config_changes(manifest):
    """The config fields of a run that differ from the clean baseline's."""
    base = TrainConfig(progress=False).to_dict()
    mine = manifest["config"]
    changes = {k: v for k, v in mine.items()
               if k != "model" and v != base[k]}
    changes.update({f"model.{k}": v for k, v in mine["model"].items()
                    if v != base["model"][k]})
    return changes


m = record.manifest
print("seed:", m["seed"], "| device:", m["device"], "| torch", m["torch"],
      "| nanlab", m["nanlab"])
print("code commit:", m["git_commit"])
print("fault:", m["fault"])
print("config changed from the baseline:", config_changes(m))

# %% tags=["nbval-check-output"]
needed = ("config", "seed", "fault", "torch", "nanlab", "git_commit", "device")
print("the manifest holds config, seed, fault, versions, commit and device:",
      all(k in m for k in needed))
print("changed from the baseline:", sorted(config_changes(m)))


# %% [markdown]
# Two changes beyond the run length: **fp16 mixed precision** and
# `loss_impl="naive"`, a cross-entropy written by hand (as custom label-smoothing
# or distillation losses often are). A config diff is not a diagnosis, but it tells
# you which later SOP steps will matter. In a real team the manifest also needs
# the **data version** (a dataset hash or snapshot id): here the data is generated
# from the seed, so the seed is the data version.
#
# ### 1b. The first bad step
# Everything after the first non-finite step is a consequence; the cause is at or
# before it. So the first number to get is that step.
#
# **Exercise 1.** Write `first_bad_step(losses)`: the index of the first loss that
# is NaN or ±inf, or `None` when every loss is finite. `losses` may be a list or a
# NumPy array; return a Python `int`.

# %%
def first_bad_step(losses):
    """Index of the first non-finite loss (NaN, +inf or -inf), or None."""
    ### BEGIN SOLUTION
    for i, loss in enumerate(losses):
        if not math.isfinite(float(loss)):
            return i
    return None
    ### END SOLUTION


# %% tags=["nbval-check-output"]
CASES = [[3.4, 2.1, 1.0], [3.4, float("nan"), 2.0], [3.4, float("inf"), float("nan")],
         np.array([3.4, 2.0, -np.inf]), record.losses()]
check("first_bad_step", lambda: [first_bad_step(c) for c in CASES],
      [None, 1, 1, 2, record.first_nonfinite_step], hints=[
          "math.isfinite(x) is False for NaN, inf and -inf alike.",
          "Loop with enumerate and return the index of the first one that is not "
          "finite; after the loop, return None.",
      ])

# %% [markdown]
# nanlab's record has the same answer built in, `record.first_nonfinite_step`; it
# also looks at the global grad norm, which can go non-finite a step before the
# loss does. Now read the rows around that step.

# %%
bad = record.first_nonfinite_step
for r in record.steps[bad - 3:bad + 3]:
    print(f"step {r['step']:>3}  loss {r['loss']:7.3f}  grad_norm {r['grad_norm']:7.3f}  "
          f"loss_scale {r['loss_scale']:7.0f}  skipped {r['skipped']}")

# %% tags=["nbval-check-output"]
after = record.steps[bad:]
print("first non-finite step within steps 70-110:", 70 <= bad <= 110)
print("the loss there is +inf (not NaN):", math.isinf(record.steps[bad]["loss"]))
print("non-finite at more than 80 % of the later steps:",
      sum(not r["finite"] for r in after) > 0.8 * len(after))
print("every non-finite step's update skipped by the GradScaler:",
      all(r["skipped"] for r in after if not r["finite"]))
print("the loss scale fell below 1 while the loss stayed non-finite:",
      after[-1]["loss_scale"] < 1 and not after[-1]["finite"])
print("loss at the step before it below 1.0:", record.steps[bad - 1]["loss"] < 1.0)

# %% [markdown]
# A healthy, learning run (loss well under 1) that breaks at one step and never
# recovers. (The few purple ticks before the failure in the plot above are normal
# GradScaler back-offs: a scaled gradient overflowed, the update was skipped and
# the scale halved; the loss itself stayed finite.) The GradScaler skips every
# update whose gradients are not finite, so the weights stay finite; but nearly
# every later step overflows again, and the loss scale halves at each one, down to
# a few millionths, without helping. That is a clue worth noting: the GradScaler
# scales the loss *after* it is computed, so an overflow inside the forward pass
# or the loss is out of its reach. (On a CUDA GPU the step need not be the same:
# PyTorch does not promise identical results between CPU and GPU runs, even with
# identical seeds (PyTorch documentation, "Reproducibility"); fp16 kernels and the
# order of float sums differ. The checks below assert a range of steps, and
# `bench/gpu_check.py` prints the step a GPU gives. On one GPU, a rerun is
# bit-identical only with `torch.use_deterministic_algorithms(True)` and, for cuBLAS,
# `CUBLAS_WORKSPACE_CONFIG=:4096:8` set before CUDA starts (PyTorch documentation,
# "Reproducibility"); locate's exact replay needs that, and `bench/gpu_check.py` sets
# both.)
#
# ### 1c. Replay that step exactly
# *Which* value went non-finite first, and where? `locate` loads the nearest
# checkpoint **at or before** the bad step, re-runs the steps in between exactly
# as they ran (same batches, schedule, loss scale, RNG; each compared with the
# record bit for bit) and then runs the bad step with a hook on every module and
# every op: data, forward, loss, backward and optimizer.

# %%
loc = locate(run.trainer)
print(loc.report(max_events=6))

# %% tags=["nbval-check-output"]
print("checkpoints kept:", run.trainer.checkpoints.steps())
print("replayed from checkpoint:", loc.checkpoint, "| located step = first bad step:",
      loc.step == bad)
print("the replay reproduced the record bit for bit:", loc.reproduced)
print("first non-finite value in pass:", loc.pass_name, "| made by op:", loc.first_op.op)
print("inf came before NaN:", loc.inf_before_nan, "| first NaN in pass:",
      loc.first_nan.pass_name)

# %% [markdown]
# The replay started at checkpoint 50 (检查点), re-ran the steps up to the bad one,
# and matched every recorded loss and grad norm exactly: the failure is
# **reproducible** (复现), which is what makes the rest of the SOP possible.
#
# The first non-finite value was made in the **loss**, by a `sum`: the hand-written
# cross-entropy computes `exp(logit)` for each of the 32 classes and sums them. By
# the bad step the model is confident, its logits are large, and for a few of the
# 992 positions the sum of exponentials passed fp16's largest number, 65504, and
# became **inf**. The loss is then `-log(p)` with `p = e / inf`, which is +inf: the
# recorded loss of that step. The first **NaN** only appears later, in the backward
# pass, where a multiplication in the gradient of that division meets the inf. That
# is claim B1 seen in a real run: **inf first, then NaN**.
#
# ### 1d. SOP step 1: the data
# The cheapest check: is the batch of the bad step itself broken (NaN or inf in a
# float input, an illegal label, every target masked)? `batch_problems` is
# nanlab's batch checker from Lab 02.

# %% tags=["nbval-check-output"]
vocab = run.trainer.config.model.vocab_size
batch = run.trainer.batches(record.steps[bad]["batch"])
problems = batch_problems(batch, vocab)
print("problems in the batch of the first bad step:", problems)


# %% [markdown]
# Clean, as `locate` already suggested (nothing was non-finite in the data pass).
# Data ruled out.
#
# ### 1e. SOP steps 2 and 3: AMP off is a hint, not proof
# Next, the two one-line changes: turn mixed precision off (关闭混合精度), and divide
# the learning rate by 10 (学习率 ÷ 10). Each is a **controlled replay**: the same
# run, same seed, same data order, one change (`fixes=` applies it; `nanlab.faults.fixes`
# defines each one).
#
# A replay is judged on its whole loss curve, not on whether a NaN shows up: a run
# can be finite and still not learn. The helper below calls a replay *healthy*
# when it is finite **and** learning: no spike, no stall, and its last 10 losses
# average below 30 % of its first loss (the clean run gets to about 7 %). That is
# `nanlab.judge.judge`, the judge `diagnose` uses (the fault x fix matrix asks it
# too, against the clean run's final loss instead of the first loss).

# %%
def outcome(fault_run):
    """{'finite': no NaN, inf or crash; 'learning': what nanlab.judge calls healthy}."""
    verdict = judge(fault_run)  # against its own start: no clean run needed
    finite = verdict.kind != "error" and verdict.first_nonfinite is None
    return {"finite": bool(finite), "learning": verdict.healthy}


replays = {fix: run_fault("fp16_overflow", fixes=[fix], **RUN)
           for fix in ("amp_off", "bf16", "lr_div10")}
for fix, r in replays.items():
    c = r.trainer.config
    print(f"{fix:9} precision {c.precision:5} lr {c.lr:.4f}: first non-finite "
          f"{r.record.first_nonfinite_step}, "
          f"final loss {final_loss(r.record.losses()):.3f}")

# %% tags=["nbval-check-output"]
for fix, r in replays.items():
    print(f"{fix:9}", outcome(r))

# %%
fig = plot_compare({"fp16 (the incident)": record,
                    "AMP off (fp32)": replays["amp_off"].record,
                    "bf16": replays["bf16"].record,
                    "LR / 10, fp16": replays["lr_div10"].record}, grad_norm=False)

# %% [markdown]
# **AMP off: healthy.** The NaN is gone and the run learns like the clean one.
# Tempting to stop and write "fp16 overflow". But turning AMP off changed *three*
# things at once:
#
# | | fp16 autocast | fp32 | bf16 autocast |
# |---|---|---|---|
# | largest number | 65504 | 3.4e38 | 3.4e38 |
# | mantissa bits (rounding) | 10 | 23 | **7** |
# | GradScaler | yes | no | no |
#
# So "the NaN disappears without AMP" is a **hint, not proof**: it could be the
# range, the rounding or the scaler, and in Lab 03 the same experiment on a run
# whose learning rate was 40x too high also removed the NaN while the run went on
# diverging (fp16 had only made the LR's damage visible). Two more facts turn
# the hint into proof here:
#
# - **bf16 is healthy too.** bf16 rounds *more coarsely* than fp16 and has no
#   scaler; the only thing it shares with fp32 is the range. So the range is what
#   matters.
# - **`locate` showed the mechanism**: a sum of exponentials passing 65504, in
#   the loss, at the step that failed. Precision explains the *where* and the
#   *when*, not only the *whether*.
#
# **LR ÷ 10: finite, but not healthy.** It removed the NaN as well, and here is
# the mirror image of Lab 03's trap: with a tenth of the LR the model learns far
# more slowly (final loss well above the clean run's), so its logits stay small and
# the overflow has not happened *yet* in 120 steps. A replay that makes the NaN go
# away by making training worse has not found the cause; it has postponed the
# symptom. Judge every replay by whether the run **learns**, not by whether it
# is finite.
#
# ### 1f. SOP steps 4 and 5: grad norms, init and eps
# The SOP stops at the first step that names the cause, so by the book we are
# done. We look at the last two anyway, to see what "nothing here" looks like.
# **Step 4**, the gradient-norm history (梯度范数): did the gradients grow by orders
# of magnitude before the failure (梯度爆炸, gradient explosion)?

# %%
fig = plot_grad_heatmap(record)


# %%
def grad_growth(rec, until=None):
    """Orders of magnitude the global grad norm grew before step `until`."""
    g = rec.column("grad_norm")[:until]
    g = g[np.isfinite(g) & (g > 0)]
    if len(g) < 5:
        return None  # not enough history before the failure
    return float(math.log10(g.max() / g[:max(5, len(g) // 10)].min()))


decades = grad_growth(record, bad)
print(f"the global grad norm grew {decades:.2f} orders of magnitude before step {bad}")


# %% [markdown]
# The heat map is calm until the failure: no layer's gradient grew by orders of
# magnitude first. The red columns are steps whose gradients were not finite: step
# 0, where the GradScaler's first loss scale (65536) is too large for fp16 and it
# backs off (normal, and the reason the first row shows `skipped`), and every
# recorded step from the failure on.
#
# **Step 5**, the model's own numbers: the scale of each weight matrix at step 0
# (from checkpoint 0; `std × √fan_in` is about the factor by which a layer
# multiplies the size of its input, so values above about 3 blow up a deep stack)
# and the norm eps (a zero-variance row divided by `√(0 + eps)`).

# %% tags=["nbval-check-output"]
def init_and_eps(trainer):
    """What is off in the model's own numbers: weight scale at step 0, norm eps."""
    notes = []
    for name, w in trainer.checkpoints.load(0)["model"].items():
        if name.endswith("weight") and w.dim() == 2:
            gain = float(w.float().std()) * math.sqrt(w.shape[1])
            if gain > 3:
                notes.append(f"{name} starts with std * sqrt(fan_in) = {gain:.1f}")
    if trainer.config.model.norm_eps < 1e-6:
        notes.append(f"norm eps = {trainer.config.model.norm_eps:g}")
    return notes


init_notes = init_and_eps(run.trainer)
print("grad norm grew less than 2 orders of magnitude before the failure:", decades < 2)
print("init scale and norm eps: nothing off:", init_notes == [])

# %% [markdown]
# ### 1g. The SOP as a function
# The whole procedure fits in a few lines once the evidence is gathered. This is
# the decision part; gathering (the replays) is the expensive part.
#
# **Exercise 2.** Write `sop_family(...)`: given the findings of the five SOP
# steps, return the family of the cause, one of `FAMILIES`, or `"not found"`.
# Go in SOP order and return at the **first** step that explains the failure.
# A finding is `None` when that step was not run or does not apply (AMP off on a
# run that is fp32 already). A replay counts only when it is finite **and**
# learning.

# %%
FAMILY = {"data": "dirty data", "amp": "mixed precision (fp16)", "lr": "learning rate",
          "grad_norms": "gradient explosion", "init_eps": "init / eps"}
FAMILIES = list(FAMILY.values())  # in SOP order


def sop_family(batch_problems, amp_off, lr_div10, grad_decades, init_notes):
    """The family of the cause, in SOP order.

    batch_problems: list of what is wrong with the bad step's batch ([] = clean)
    amp_off, lr_div10: outcome() of that replay ({'finite', 'learning'}) or None
    grad_decades: orders of magnitude the grad norm grew before the failure, or None
    init_notes: list of what is off in init scale / norm eps ([] = nothing)
    """
    ### BEGIN SOLUTION
    if batch_problems:
        return "dirty data"
    if amp_off is not None and amp_off["finite"] and amp_off["learning"]:
        return "mixed precision (fp16)"
    if lr_div10 is not None and lr_div10["finite"] and lr_div10["learning"]:
        return "learning rate"
    if grad_decades is not None and grad_decades >= 3:
        return "gradient explosion"
    if init_notes:
        return "init / eps"
    return "not found"
    ### END SOLUTION


# %% [markdown]
# The check feeds it the findings of this section, plus a few made-up cases,
# including Lab 03's trap (AMP off finite but not learning, LR ÷ 10 healthy).

# %% tags=["nbval-check-output"]
HEALTHY, NOT_LEARNING, NAN = ({"finite": True, "learning": True},
                              {"finite": True, "learning": False},
                              {"finite": False, "learning": False})
findings = dict(batch_problems=problems, amp_off=outcome(replays["amp_off"]),
                lr_div10=outcome(replays["lr_div10"]), grad_decades=decades,
                init_notes=init_notes)
SOP_CASES = [
    (findings, "mixed precision (fp16)"),  # this section's run
    (dict(batch_problems=[], amp_off=NOT_LEARNING, lr_div10=HEALTHY, grad_decades=0.5,
          init_notes=[]), "learning rate"),  # Lab 03: AMP off removes the NaN only
    (dict(batch_problems=["features: 1 non-finite value(s)"], amp_off=None,
          lr_div10=NAN, grad_decades=None, init_notes=[]), "dirty data"),
    (dict(batch_problems=[], amp_off=None, lr_div10=NAN, grad_decades=None,
          init_notes=["norm eps = 0"]), "init / eps"),
    (dict(batch_problems=[], amp_off=None, lr_div10=NAN, grad_decades=4.2,
          init_notes=[]), "gradient explosion"),
    (dict(batch_problems=[], amp_off=NAN, lr_div10=NOT_LEARNING, grad_decades=1.0,
          init_notes=[]), "not found"),
]
check("sop_family", lambda: [sop_family(**f) for f, _ in SOP_CASES],
      [want for _, want in SOP_CASES], hints=[
          "Check the steps in the order of FAMILY; return as soon as one explains it.",
          "A replay dict explains it only if both 'finite' and 'learning' are True; "
          "None means the step was not run.",
      ])

# %% [markdown]
# ### 1h. The proof: same seed, same step
# "The curve looks fine now" is not a proof. The fixed run is the same run (seed,
# data order, steps) with one change; compare its loss with the clean run's **at
# the same step**. Two cures, one for each reading of the cause: **bf16** keeps
# mixed precision but gives it fp32's range (the fix `diagnose` will pick), and the
# **stable loss** (`stable_softmax`: PyTorch's `F.cross_entropy`, which subtracts
# the max before `exp`) keeps fp16 and removes the overflow itself.

# %%
stable = run_fault("fp16_overflow", fixes=["stable_softmax"], **RUN)
proof = {"bf16": replays["bf16"], "stable loss, fp16": stable}
clean_losses = clean.record.losses()
for name, r in proof.items():
    losses = r.record.losses()
    print(f"{name:18} loss at step {bad}: {losses[bad]:.3f}, at step 119: "
          f"{losses[119]:.3f}   (clean: {clean_losses[bad]:.3f}, {clean_losses[119]:.3f})")

# %% tags=["nbval-check-output"]
for name, r in proof.items():
    losses = r.record.losses()
    print(f"{name}: finite at every step:", r.record.first_nonfinite_step is None,
          "| loss at step 119 within 15 % of the clean run's:",
          bool(abs(losses[119] - clean_losses[119]) < 0.15 * clean_losses[119]))

# %% [markdown]
# Both land on the clean run at the same step. Which one to ship is a judgement
# call: `F.cross_entropy` removes the bug (a hand-written exp that can overflow in
# *any* precision, only later in fp32: at 88.7 instead of 11.1); bf16 removes the
# fp16 range problem for every op at once, which is why large runs moved to it.
#
# ## 2. The same with `diagnose`
# `nanlab.debug.diagnose.diagnose` is this section, automated: the same five steps in
# the same order, each a replay that stops as soon as its verdict is clear, the
# first healthy replay names the cause, and then the matching fix is run once more
# to **prove** it. (It reads the fault's name from the manifest only to rebuild the
# same run; the decision never looks at it. For your own model you pass
# `build=`, a function that makes your trainer from a config.)

# %%
diagnosis = diagnose(run)
print(diagnosis.report())

# %% tags=["nbval-check-output"]
verdicts = {f.step: f.verdict for f in diagnosis.findings if f.verdict != "hint"}
print("cause:", diagnosis.cause, "| fix:", diagnosis.fix,
      "| proven:", diagnosis.fix_verified)
print("SOP steps and verdicts:", verdicts)

# %% [markdown]
# The report has what an incident review (事故复盘) needs, the three parts of
# claim V3:
#
# - **every NaN event is logged**: the record holds each non-finite step with its
#   loss, grad norm, loss scale and whether the update was skipped (section 1b);
# - **the root cause is named**, with the evidence for it and what was ruled out
#   (the data step, here), instead of "we lowered the LR and it went away";
# - **it is reproducible**: the manifest rebuilds the run, `locate` replayed the
#   failing step bit for bit, and the proof is a replay anyone can rerun.
#
# It found the same answer as the hand-run SOP, with bf16 as the fix (the stable
# loss is the other cure from 1h). What it cannot do is think: it applies nanlab's
# fixes to nanlab's knobs. On your own model, the by-hand version of section 1 is
# the one you will run, with `diagnose` as a second opinion.
#
# ## 3. Mystery runs
# Now the fault is hidden. A fault is drawn at random from the list below with a
# seeded random generator (`MYSTERY_SEED`; change it for new mysteries, the default
# keeps this notebook the same for everyone). Two things are kept from you: the
# fault's name in the manifest is replaced by `"(hidden)"`, and the `Mystery`
# object keeps the name to itself (please do not print `m._fault`: an incident has
# no answer key). Everything else is yours: the record, the config, the
# checkpoints, `locate`, `batch_problems`, the plots, and controlled replays with
# `m.replay("amp_off")`, `m.replay("lr_div10")`, ... (any fix of `nanlab.faults.fixes`;
# one that would change nothing, such as AMP off on an fp32 run, is refused).
# `m.diagnose()` runs the automated SOP: use it to check yourself **after** you
# have answered.

# %%
MYSTERY_SEED = 26
POOL = ["nan_input", "zero_std", "all_masked", "illegal_label", "high_lr", "high_lr_adam",
        "no_warmup", "fp16_overflow", "softmax_overflow", "position_overflow",
        "adam_eps_fp16", "tiny_eps", "bad_init"]  # deep_explosion, sigmoid_chain: slow
EVIDENCE = {"data": "the batch of the first bad step fails the batch checks",
            "amp": "the fp32 replay is finite and learning",
            "lr": "the LR / 10 replay is finite and learning",
            "grad_norms": "the grad norm grew 3+ orders of magnitude before the failure",
            "init_eps": "a weight matrix starts too large, or a norm eps is below 1e-6",
            "decoy": "the first loss is about ln(32) = 3.47, as in the clean run"}


from nanlab.course import FreeText, MultipleChoice, Ordering, RootCause


class Mystery:
    """A run with a hidden fault: what you have the morning after an incident."""

    def __init__(self, seed, index):
        self._fault = random.Random(seed).sample(POOL, 2)[index]
        self._family = FAMILY[faults.FAULTS[self._fault].reveals]
        self.run = self._hide(run_fault(self._fault, stop_when_poisoned=True, **RUN))

    @staticmethod
    def _hide(fault_run):
        fault_run.record.manifest["fault"] = "(hidden)"
        return FaultRun(None, {}, fault_run.fixes, fault_run.record, fault_run.trainer,
                        fault_run.error, fault_run.error_step)

    def replay(self, *fixes):
        """The same run (seed, data, steps) with nanlab fixes applied."""
        for fix in fixes:
            if not get_fix(fix).applies(self.run.trainer.config):
                raise ValueError(f"{fix!r} changes nothing in this run (e.g. AMP off "
                                 "on a run that is fp32 already): skip this SOP step")
        return self._hide(run_fault(self._fault, fixes=list(fixes),
                                    stop_when_poisoned=True, **RUN))

    def diagnose(self):
        """nanlab's automated SOP on this run (check yourself after answering)."""
        return diagnose(self.run, build=lambda config: build_fault_trainer(
            self._fault, config, {}))

    def grade(self, answer):
        if answer not in FAMILIES:
            return f"answer with one of {FAMILIES}; got {answer!r}"
        if answer != self._family:
            return "that is not the family of this run's fault: go through the SOP again"
        return None

    def question(self, qid):
        reveals = faults.FAULTS[self._fault].reveals
        return RootCause(
            qid, "Pick the family of this mystery run's fault, then tick the SOP finding "
            "that names it (the first one, in SOP order, that explains the failure).",
            FAMILIES, answer=self._family, evidence=list(EVIDENCE.values()),
            supporting=[EVIDENCE[reveals]],
            explanation=f"The SOP step that names it: {faults.SOP_STEPS[reveals]}. "
            "m.diagnose() shows the full report.",
            hints=["Is there a first bad step at all, and what happened at it?",
                   "A replay counts only if the run is finite and learning."])

    def __repr__(self):
        return f"Mystery(fault hidden, {len(self.run.record.steps)} steps recorded)"


# %% [markdown]
# ### Mystery 1
# What you have: the run, its loss curve, the changed config.

# %%
m1 = Mystery(MYSTERY_SEED, 0)
print(m1, "|", m1.run.record)
print("config changed from the baseline:", config_changes(m1.run.record.manifest))
print("crashed:", m1.run.error)
fig = plot_loss(m1.run.record, title="Mystery 1")


# %% [markdown]
# Investigate in the cell below: the SOP in order, cheapest first. Useful calls:
# `m1.run.record.first_nonfinite_step`, `m1.run.first_bad_step` (also a crash),
# `m1.run.record.steps[...]`, `locate(m1.run.trainer)`,
# `batch_problems(m1.run.trainer.batches(step), vocab)`, `outcome(m1.replay("amp_off"))`,
# `outcome(m1.replay("lr_div10"))`, `grad_growth(m1.run.record, step)`,
# `init_and_eps(m1.run.trainer)`, `plot_grad_heatmap(m1.run.record)`. Each replay
# takes a few seconds (fp16 ones the longest).

# %%
# Your investigation of mystery 1 (the SOP, step by step):

# %% [markdown] tags=["solution-only"]
# The solution's investigation: the SOP by hand, cheapest step first, stopping at
# the first step that explains the failure (your `sop_family` makes the call).

# %% tags=["solution-only"]
def investigate(m):
    """The SOP by hand on a mystery; stops at the first step that names the cause."""
    fault_run = m.run
    bad = fault_run.first_bad_step  # first non-finite step, or the step that crashed
    short = lambda v: f"{len(v)} items, e.g. {v[0]}" if isinstance(v, list) and len(v) > 3                 else v  # noqa: E731
    f = dict(batch_problems=[], amp_off=None, lr_div10=None, grad_decades=None,
             init_notes=[])
    steps = [
        ("batch_problems", lambda: [] if bad is None else batch_problems(
            fault_run.trainer.batches(bad), fault_run.trainer.config.model.vocab_size)),
        ("amp_off", lambda: None if fault_run.trainer.config.precision == "fp32"
         else outcome(m.replay("amp_off"))),
        ("lr_div10", lambda: outcome(m.replay("lr_div10"))),
        ("grad_decades", lambda: grad_growth(fault_run.record, bad)),
        ("init_notes", lambda: init_and_eps(fault_run.trainer)),
    ]
    print("first bad step:", bad, "| crashed:", fault_run.error)
    for key, gather in steps:
        f[key] = gather()
        print(f"  {key}: {short(f[key])}")
        if sop_family(**f) != "not found":
            break
    print("=>", sop_family(**f))
    return f


findings_1 = investigate(m1)


# %% [markdown]
# **Exercise 3 · mystery 1.** Your answer: return the family, one of `FAMILIES`.

# %%
def my_diagnosis_1():
    """The family of mystery 1's fault, one of FAMILIES."""
    ### BEGIN SOLUTION
    return sop_family(**findings_1)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
check("my_diagnosis_1", my_diagnosis_1, test=m1.grade, hints=[
    "Is there a first bad step (or a crash), and is its batch clean?",
    "A NaN at step 0 happened before any update: the LR cannot have caused it.",
])

# %% [markdown]
# Now the evidence. (The widget's answer is the hidden fault's family, so it stays
# right if you change `MYSTERY_SEED`.)

# %%
m1.question("07-mystery-1")

# %% [markdown]
# ### Mystery 2
# Same procedure, a different fault (the two draws never repeat a fault).

# %%
m2 = Mystery(MYSTERY_SEED, 1)
print(m2, "|", m2.run.record)
print("config changed from the baseline:", config_changes(m2.run.record.manifest))
print("crashed:", m2.run.error)
fig = plot_loss(m2.run.record, title="Mystery 2")

# %%
# Your investigation of mystery 2:

# %% tags=["solution-only"]
findings_2 = investigate(m2)


# %% [markdown]
# **Exercise 4 · mystery 2.**

# %%
def my_diagnosis_2():
    """The family of mystery 2's fault, one of FAMILIES."""
    ### BEGIN SOLUTION
    return sop_family(**findings_2)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
check("my_diagnosis_2", my_diagnosis_2, test=m2.grade, hints=[
    "Did it go non-finite or crash, and at which step? Start with that step's batch.",
    "Replays that remove the NaN without learning do not name the cause.",
])

# %%
m2.question("07-mystery-2")

# %% [markdown]
# Check yourself with `m1.diagnose()` and `m2.diagnose()` (a few seconds each) and
# read what they ruled out. Then change `MYSTERY_SEED` and run section 3 again for
# two new mysteries.
#
# ## 4. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
Ordering(
    "07-sop-actions",
    "A run's loss went NaN overnight. Put the actions of the investigation in order.",
    ["find the first non-finite step in the record",
     "check the batch of that step",
     "replay with AMP off (and with bf16)",
     "replay with the LR divided by 10",
     "read the grad-norm history before the failure",
     "check the init scale and the norm eps",
     "prove the fix: same seed, loss at the same step as the clean run"],
    explanation="Find the step first (everything after it is consequence), then the "
    "SOP from cheap to expensive: one batch, two one-line replays, a history to read, "
    "the model's own numbers. The proof comes last, as a replay anyone can rerun. "
    "locate goes with the first two: it replays that step and shows the data pass.",
    hints=["The first action needs no new run: only the record.",
           "Config switches you flip in one line come before reading histories."],
)

# %%
MultipleChoice(
    "07-step-zero",
    "A run's very first loss (step 0) is already NaN. Which SOP step can you skip, "
    "because it cannot be the cause?",
    ["LR / 10: no optimizer update has happened before the first loss",
     "checking the batch of step 0",
     "turning AMP off",
     "checking the init scale and the norm eps"],
    answers=0,
    explanation="The loss of step 0 is computed from the initial weights and the first "
    "batch, before any update: the learning rate has touched nothing yet. The data, the "
    "precision and the init all act in that first forward pass.",
    hints=["Is the loss of a step computed before or after that step's update?"],
)

# %%
MultipleChoice(
    "07-finite-not-cured",
    "In section 1e the LR / 10 replay of the fp16_overflow run had no NaN in 120 "
    "steps. Why is LR / 10 still not the answer?",
    ["its loss stayed far above the clean run's: it removed the NaN by learning more "
     "slowly, which only postpones the overflow",
     "lowering the LR never helps a run in fp16",
     "replays with a different LR are not deterministic",
     "the SOP forbids running step 3 when step 2 was healthy"],
    answers=0,
    explanation="A replay counts when the run is finite and learning. Slower learning "
    "keeps the logits small for longer, so exp(logit) overflows later, not never.",
    hints=["Compare the final losses of the replays, not only their NaN counts."],
)

# %%
from nanlab.course import KeyPoint

FreeText(
    "07-incident-report",
    "Write the incident report for the fp16_overflow run of section 1, in four or five "
    "sentences: the root cause, the evidence, what you ruled out, the fix and how you "
    "proved it.",
    key_points=[
        KeyPoint("the cause: a hand-written exp / softmax overflowing fp16",
                 ("hand-written", "naive", "exp", "65504", "overflow", "溢出"),
                 "name what overflowed, and where"),
        KeyPoint("the evidence: the exact replay of the first bad step",
                 ("locate", "replay", "inf before nan", "inf first", "复现", "重放"),
                 "say how you found where the first inf was made"),
        KeyPoint("ruled out: the data, and the LR",
                 ("batch is clean", "clean batch", "data", "lr / 10", "lr/10",
                  "learning rate", "数据", "学习率"),
                 "say which SOP steps you ruled out"),
        KeyPoint("the fix: bf16 or a stable loss",
                 ("bf16", "f.cross_entropy", "cross_entropy", "subtract the max",
                  "stable"),
                 "name the fix"),
        KeyPoint("the proof: same seed, same step as the clean run",
                 ("same seed", "same step", "clean run", "相同种子", "同一步"),
                 "say how you proved it"),
    ],
    model_answer="The loss went to inf at step 87 and never recovered because a "
    "hand-written cross-entropy summed exp(logit) in fp16, and once the model was "
    "confident that sum passed 65504. I replayed the first bad step from checkpoint 50 "
    "with locate, which reproduced it bit for bit and showed the first inf in the loss, "
    "with the NaN only later in the backward pass. The batch was clean, and the LR / 10 "
    "replay only postponed the overflow because it learned far more slowly. The fp32 and "
    "bf16 replays both trained normally, so the fix is bf16 or the stable F.cross_entropy. "
    "I proved it with the same seed: the loss at the same step matches the clean run.",
    hints=["Cause, evidence, ruled out, fix, proof: one sentence each.",
           "Which tool told you where the first inf was made?"],
)

# %% [markdown]
# ## Summary
# - **Read the manifest first** (config, seed, versions, commit, device): it is what
#   makes a run replayable, and its diff against a good config points at the
#   steps that will matter.
# - **Find the first bad step**; everything after it is consequence. Then **replay
#   it exactly** from the nearest checkpoint (`locate`): here the first inf came
#   from a sum of exponentials in the loss, and the NaN only later, in backward.
# - **The SOP, cheap to expensive**: data → AMP off → LR ÷ 10 → grad norms →
#   init / eps, each a controlled replay with one change, stopping at the first
#   that explains the failure.
# - **A replay counts when the run is finite and learning.** AMP off removing the
#   NaN is a hint: it changes range, rounding and the scaler at once; bf16 (range
#   only) and `locate` made it proof here. LR ÷ 10 removed the NaN too, by learning
#   slower: a postponed symptom, not a cure.
# - **Prove the fix** with the same seed, at the same step as the clean run.
# - `diagnose` runs the same procedure and writes the report an incident review
#   needs: cause, evidence, what was ruled out, the proven fix.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
