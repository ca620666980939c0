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
# Unlike Labs 02 to 04, a real incident comes with no label on its cause: you need a
# **procedure** from cheap, common causes to expensive, rare ones, each step a
# controlled experiment (对照实验), not a guess. You run the SOP by hand on one NaN run
# (manifest, first bad step, exact replay, then **data → AMP off → LR ÷ 10 → grad norms
# → init / eps**), then with `diagnose`, which reports the root cause (根因), what it
# ruled out and the fix it proved; then on two hidden faults (graded); then interview
# practice.
#
# CPU is enough; about 45 minutes. Cells marked `# YOUR CODE HERE` are yours; the cell
# after each one checks it.

# %% [markdown]
# ## Setup
# Every run is Lab 00's toy Transformer on the counting task, seed 0: the first **120
# steps of the 200-step schedule** (`decay_steps=200`), bit for bit. The clean run is
# the yardstick.

# %%
import math

import numpy as np

from nanlab.analysis.judge import judge
from nanlab.analysis.signals import final_loss
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import diagnose, locate
from nanlab.faults import batch_problems, run_fault
from nanlab.train import TrainConfig
from nanlab.viz import plot_compare, plot_grad_heatmap, plot_loss

start_lab("07_sop_mystery")
RUN = dict(steps=120, decay_steps=200)  # the first 120 steps of the 200-step run
clean = run_fault(None, **RUN)
print(f"clean run: loss {clean.record.losses()[0]:.2f} -> "
      f"{final_loss(clean.record.losses()):.3f}")

# %% [markdown]
# The map for this lab: each SOP step, the question it asks, and where a "yes"
# points (drawn from `diagnose`'s code and the fault catalogue). For an fp16 NaN,
# which box asks the question that can clear or convict fp16?

# %%
from nanlab.viz import plot_sop_flowchart

fig = plot_sop_flowchart()

# %% [markdown]
# ## 1. The SOP by hand, on one NaN
# The incident: a run trained well, then its loss went non-finite for good. Here we know
# the fault, `fp16_overflow`; in section 3 you will not.

# %%
run = run_fault("fp16_overflow", **RUN)
record = run.record
fig = plot_loss(record, title="The incident: a loss that goes non-finite")


# %% [markdown]
# ### 1a. Read the manifest first
# First read what the run *was*: its **manifest** holds the config, seed, fault (if
# injected on purpose), library versions, code commit and device. Without it there is no
# replay, and without a replay every later step is a guess. Start with **what differs
# from a known-good config**.

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
# One change beyond the run length: **fp16 mixed precision**. The cause is not in the
# config: this run's loss is a cross-entropy written by hand (as custom label-smoothing
# or distillation losses often are), and code is not a config field. A config diff is
# not a diagnosis, but it says which SOP steps will matter. A real team's manifest also
# needs the **data version** (a dataset hash or snapshot id); here the seed is the data
# version (the data is generated from it).
#
# ### 1b. The first bad step
# Everything after the first non-finite step is consequence; the cause is at or before
# it.
#
# **Exercise 1.** Write `first_bad_step(losses)`: the index of the first loss that is
# NaN or ±inf, or `None` if all are finite. `losses` may be a list or a NumPy array;
# return a Python `int`.

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
CASES = {"every loss finite": ([3.4, 2.1, 1.0],), "a NaN": ([3.4, float("nan"), 2.0],),
         "inf, then NaN": ([3.4, float("inf"), float("nan")],),
         "a NumPy array ending in -inf": (np.array([3.4, 2.0, -np.inf]),),
         "this run's losses (a NumPy array)": (record.losses(),)}
check("first_bad_step", first_bad_step, [None, 1, 1, 2, record.first_nonfinite_step],
      cases=CASES, hints=[
          "A bad loss is NaN, +inf or -inf: you want the index of the first loss that is not "
          "an ordinary finite number, or None when there is none.",
          "math.isfinite is False for all three kinds at once; the losses may be a NumPy "
          "array, so turn each item into a Python float first.",
          "Walk the losses with their indices (enumerate), convert each with float, and stop "
          "at the first one math.isfinite rejects; a loop that finds none means None.",
      ], solution="""\
for i, loss in enumerate(losses):
    if not math.isfinite(float(loss)):
        return i
return None""")

# %% [markdown]
# The record has it built in, `record.first_nonfinite_step`, which also watches the
# global grad norm (it can go non-finite a step before the loss). The rows around that
# step:

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
print("the loss scale fell more than 1000x (2^10) while the loss stayed non-finite:",
      after[-1]["loss_scale"] <= after[0]["loss_scale"] / 2**10 and not after[-1]["finite"])
print("loss at the step before it below 1.0:", record.steps[bad - 1]["loss"] < 1.0)

# %% [markdown]
# The purple ticks before the failure are normal GradScaler back-offs: a scaled gradient
# overflowed, its update was skipped, the scale halved, the loss stayed finite. After
# the failure, the scaler skips every non-finite update (so the weights stay finite) and
# halves its scale again and again, in vain. A clue: it scales the loss *after* it
# is computed, so an overflow inside the forward pass
# or the loss is out of its reach. (On another CPU or a CUDA GPU the step need not be
# the same: the order of float sums depends on the instruction set (AVX2, AVX-512, ARM),
# the thread count and the kernels, and PyTorch does not promise identical results
# between CPU and GPU runs, even with identical seeds (PyTorch documentation,
# "Reproducibility"). The checks below assert a range of steps, and
# `bench/gpu_check.py` prints the step a GPU gives. On one GPU, a rerun is
# bit-identical only with `torch.use_deterministic_algorithms(True)` and, for cuBLAS,
# `CUBLAS_WORKSPACE_CONFIG=:4096:8` set before CUDA starts (PyTorch documentation,
# "Reproducibility"); locate's exact replay needs that, and `bench/gpu_check.py` sets
# both.)
#
# ### 1c. Replay that step exactly
# *Which* value went non-finite first, and where? `locate` loads the nearest checkpoint
# **at or before** the bad step, re-runs the steps in between (same batches, schedule,
# loss scale, RNG; each compared with the record bit for bit), then runs the bad step
# with a hook on every module and op: data, forward, loss, backward, optimizer.

# %%
loc = locate(run.trainer)
print(loc.report(max_events=6))
print(f"\nreplayed from checkpoint {loc.checkpoint}, the latest at or before step {bad}")

# %% tags=["nbval-check-output"]
print("checkpoints kept:", run.trainer.checkpoints.steps())
print("replayed from the latest checkpoint at or before the bad step:",
      loc.checkpoint == run.trainer.checkpoints.nearest(bad),
      "| located step = first bad step:", loc.step == bad)
print("the replay reproduced the record bit for bit:", loc.reproduced)
print("first non-finite value in pass:", loc.pass_name, "| made by the exp or the sum of exps:",
      loc.first_op.op in ("aten.exp", "aten.sum"))
print("inf came before NaN:", loc.inf_before_nan, "| first NaN in pass:",
      loc.first_nan.pass_name)

# %% [markdown]
# A bit-for-bit replay from that checkpoint (检查点): the failure is **reproducible**
# (复现).
#
# In the stored run the first non-finite value came from a `sum` in the **loss** (on
# another CPU it can be the `exp` just before it): the hand-written cross-entropy sums `exp(logit)` over the 32 classes. The model is confident by now,
# its logits large, and for a few of the 992 positions that sum passed fp16's largest
# number, 65504: **inf**. Then `p = e / inf`, and `-log(p)` is +inf, the recorded loss.
# The first **NaN** comes later, in backward, where a multiplication in the gradient of
# that division meets the inf: claim B1, **inf first, then NaN**.
#
# ### 1d. SOP step 1: the data
# The cheapest check: is the bad step's batch broken (NaN or inf in a float input, an
# illegal label, every target masked)? `batch_problems` is Lab 02's batch checker.

# %% tags=["nbval-check-output"]
vocab = run.trainer.config.model.vocab_size
batch = run.trainer.batches(record.steps[bad]["batch"])
problems = batch_problems(batch, vocab)
print("problems in the batch of the first bad step:", problems)


# %% [markdown]
# Clean, as `locate` suggested (its data pass was finite): data ruled out.
#
# ### 1e. SOP steps 2 and 3: AMP off is a hint, not proof
# Next, two one-line changes: mixed precision off (关闭混合精度) and the learning rate ÷ 10
# (学习率 ÷ 10). Each is a **controlled replay**: same run, seed and data order, one change
# (`fixes=` applies it; `nanlab.faults.fixes` defines each one).
#
# A finite run may still not learn, so judge the whole curve. The helper calls a replay
# *healthy* when finite **and** learning: no spike, no stall, last 10 losses averaging
# below 30 % of the first (the clean run: about 7 %). That is `nanlab.analysis.judge.judge`, also
# used by `diagnose` and, against the clean run's final loss, by the fault x fix matrix.

# %%
def outcome(fault_run):
    """{'finite': no NaN, inf or crash; 'learning': what nanlab.analysis.judge calls healthy}."""
    verdict = judge(fault_run)  # against its own start: no clean run needed
    finite = verdict.kind != "error" and verdict.first_nonfinite is None
    return {"finite": bool(finite), "learning": verdict.healthy}


replays = {fix: run_fault("fp16_overflow", fixes=[fix], **RUN)
           for fix in ("amp_off", "bf16", "lr_div10")}
for fix, r in replays.items():
    c = r.trainer.config  # lr_div10 edits the optimizer's param groups, not c.lr:
    peak_lr = float(np.nanmax(r.record.column("lr")))  # so read the LR it ran at
    print(f"{fix:9} precision {c.precision:5} peak lr {peak_lr:g}: first non-finite "
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
# **AMP off: healthy.** But AMP off changed *three* things at once:
#
# | | fp16 autocast | fp32 | bf16 autocast |
# |---|---|---|---|
# | largest number | 65504 | 3.4e38 | 3.4e38 |
# | mantissa bits (rounding) | 10 | 23 | **7** |
# | GradScaler | yes | no | no |
#
# So it is a **hint, not proof**: range, rounding or scaler? In Lab 03 the same
# experiment, on a run whose LR was 40x too high, also removed the NaN while the run
# went on diverging (fp16 had only made the LR's damage visible). Here two facts make it
# proof:
#
# - **bf16 is healthy too.** It rounds *more coarsely* than fp16, so rounding is
#   ruled out. But it shares two things with fp32, the range and the absence of a
#   scaler: this replay alone cannot tell range from scaler.
# - **`locate` decides it**: exponentials summing past 65504, in the loss, at the
#   failing step: a range problem, which no scaler setting removes.
#
# **LR ÷ 10: finite, not healthy**, Lab 03's trap in mirror image. Learning far more
# slowly (final loss well above the clean run's), the model keeps its logits small, and
# the overflow has not happened *yet* in 120 steps. Removing a NaN by making training
# worse postpones the symptom.
#
# ### 1f. SOP steps 4 and 5: grad norms, init and eps
# The SOP stops at the first step that names the cause; the last two show what "nothing
# here" looks like. **Step 4**, the gradient-norm history (梯度范数): did the gradients grow
# by orders of magnitude before the failure (梯度爆炸, gradient explosion)?

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
# Calm until the failure. Red columns are steps with non-finite gradients: step 0, where
# the GradScaler's first loss scale (65536) is too large for fp16 and backs off (normal;
# hence `skipped` in the first row), and every recorded step from the failure on.
#
# **Step 5**, the model's own numbers: each weight matrix's `std × √fan_in` at step 0
# (from checkpoint 0; roughly how much a layer scales the size of its input, so above
# about 3 a deep stack blows up), and the norm eps (a zero-variance row is divided by
# `√(0 + eps)`).

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
# **Exercise 2.** Write `sop_family(...)`: from the findings of the five SOP steps,
# return the family of the cause (one of `FAMILIES`) or `"not found"`, at the **first**
# step in SOP order that explains the failure. A finding is `None` when its step was not
# run or does not apply (AMP off on an fp32 run). A replay counts only when it is finite
# **and** learning.

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
# The check uses this section's findings plus made-up cases, among them Lab 03's trap
# (AMP off finite but not learning, LR ÷ 10 healthy).

# %% tags=["nbval-check-output"]
HEALTHY, NOT_LEARNING, NAN = ({"finite": True, "learning": True},
                              {"finite": True, "learning": False},
                              {"finite": False, "learning": False})
findings = dict(batch_problems=problems, amp_off=outcome(replays["amp_off"]),
                lr_div10=outcome(replays["lr_div10"]), grad_decades=decades,
                init_notes=init_notes)
SOP_CASES = {  # the findings (None: that step was not run) -> the family
    "this section's run": (findings, "mixed precision (fp16)"),
    "Lab 03: AMP off finite, not learning; LR / 10 healthy": (dict(
        batch_problems=[], amp_off=NOT_LEARNING, lr_div10=HEALTHY, grad_decades=0.5,
        init_notes=[]), "learning rate"),
    "a batch problem; AMP off and grad norms not run (None)": (dict(
        batch_problems=["features: 1 non-finite value(s)"], amp_off=None, lr_div10=NAN,
        grad_decades=None, init_notes=[]), "dirty data"),
    "norm eps 0; AMP off and grad norms not run (None)": (dict(
        batch_problems=[], amp_off=None, lr_div10=NAN, grad_decades=None,
        init_notes=["norm eps = 0"]), "init / eps"),
    "grad norm up 4.2 decades; AMP off not run (None)": (dict(
        batch_problems=[], amp_off=None, lr_div10=NAN, grad_decades=4.2,
        init_notes=[]), "gradient explosion"),
    "AMP off NaN, LR / 10 not learning, grad norm up 1 decade": (dict(
        batch_problems=[], amp_off=NAN, lr_div10=NOT_LEARNING, grad_decades=1.0,
        init_notes=[]), "not found"),
}
check("sop_family", sop_family, [want for _, want in SOP_CASES.values()],
      cases={label: f for label, (f, _) in SOP_CASES.items()}, hints=[
          "The SOP stops at the first step, in its order, that explains the failure: data, AMP"
          " off, LR / 10, grad norms, init and eps.",
          "A replay explains it only when it is both finite and learning, and None means the "
          "step was not run; the grad norm explains it from 3 orders of magnitude of growth; "
          "any batch problem or init note explains it at once.",
          "One if per SOP step, in FAMILY's order, each returning that family; test a finding "
          "for None (is not None) before you read from it; fall through to \"not found\".",
      ], solution="""\
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
""")

# %% [markdown]
# ### 1h. The proof: same seed, same step
# "The curve looks fine now" is not a proof. Compare the fixed run (same seed, data
# order and steps, one change) with the clean run **at the same step**. Two cures:
# **bf16**, mixed precision with fp32's range, and the **stable loss**
# (`stable_softmax`: PyTorch's `F.cross_entropy`, which subtracts the max before `exp`),
# which keeps fp16 and removes the overflow.

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
# Which to ship? `F.cross_entropy` removes the bug (a hand-written exp overflows in
# *any* precision, only later in fp32: at 88.7 instead of 11.1); bf16 removes fp16's
# range problem for every op at once, which is why large runs moved to it.
#
# ## 2. The same with `diagnose`
# `nanlab.debug.diagnose.diagnose` automates this section: the same five steps in order,
# each a replay that stops once its verdict is clear; the first healthy replay names the
# cause, and the matching fix is run once more to **prove** it. (It reads the fault's
# name from the manifest only to rebuild the run, never to decide. For your own model,
# pass `build=`, a function that makes your trainer from a config.)

# %%
diagnosis = diagnose(run)
print(diagnosis.report())

# %% tags=["nbval-check-output"]
verdicts = {f.step: f.verdict for f in diagnosis.findings if f.verdict != "hint"}
print("cause:", diagnosis.cause, "| fix:", diagnosis.fix,
      "| proven:", diagnosis.fix_verified)
print("SOP steps and verdicts:", verdicts)

# %% [markdown]
# The report has the three parts of claim V3 that an incident review (事故复盘) needs:
# **every NaN event logged** (each non-finite step's loss, grad norm, loss scale and
# skip, section 1b); **the root cause named**, with its evidence and what was ruled out
# (here the data step); and **reproducible** (the manifest rebuilds the run, `locate`
# replayed the failing step bit for bit, the proof is a replay anyone can rerun).
#
# Same answer as by hand, fixed with bf16 (1h's other cure is the stable loss). But
# `diagnose` only applies nanlab's own fixes: on your own model, run section 1 by hand,
# with `diagnose` as a second opinion.
#
# ## 3. Mystery runs
# Now the fault is hidden, drawn from the list below by a generator seeded with
# `MYSTERY_SEED` (the default gives everyone the same notebook). The manifest's fault
# reads `"(hidden)"`, and the `Mystery` keeps the name to itself (an incident has no
# answer key). Each diagnosis is graded three times at most, and its hints (`hint(...)`
# after a check) are read from the run itself. Everything else is yours, controlled
# replays included: `m.replay("amp_off")`, `m.replay("lr_div10")`, ... (any fix of
# `nanlab.faults.fixes`; one that changes nothing, such as AMP off on an fp32 run, is
# refused). `m.diagnose()` (the automated SOP) is for checking yourself **after**
# answering.

# %%
from nanlab.course.mysteries import Mystery

MYSTERY_SEED = 26
POOL = ["nan_input", "zero_std", "all_masked", "illegal_label", "high_lr", "high_lr_adam",
        "no_warmup", "fp16_overflow", "softmax_overflow", "position_overflow",
        "adam_eps_fp16", "tiny_eps", "bad_init"]  # deep_explosion, sigmoid_chain: slow


# %% [markdown]
# ### Mystery 1
# What you have: the run, its loss curve and its config (`m1.run.trainer.config`); no
# diff from a known-good config is handed to you.

# %%
m1 = Mystery(MYSTERY_SEED, 0, POOL, FAMILY, RUN)
print(m1, "|", m1.run.record)
print("crashed:", m1.run.error is not None)
fig = plot_loss(m1.run.record, title="Mystery 1")


# %% [markdown]
# Investigate below, cheapest step first. Useful calls:
# `m1.run.record.first_nonfinite_step`, `m1.run.first_bad_step` (also a crash),
# `m1.run.record.steps[...]`, `locate(m1.run.trainer)`,
# `batch_problems(m1.run.trainer.batches(step), vocab)`,
# `outcome(m1.replay("amp_off"))`, `outcome(m1.replay("lr_div10"))`,
# `grad_growth(m1.run.record, step)`, `init_and_eps(m1.run.trainer)`,
# `plot_grad_heatmap(m1.run.record)`. Each replay takes a few seconds (fp16 ones the
# longest).

# %%
# Your investigation of mystery 1 (the SOP, step by step):

# %% [markdown] tags=["solution-only"]
# The solution's investigation: the SOP by hand, stopping at the first step that
# explains the failure (`sop_family` decides).

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
check("my_diagnosis_1", my_diagnosis_1, test=m1.grade, hints=m1.hints())

# %% [markdown]
# Now the evidence. (The widget's answer is the hidden fault's family, so it stays right
# for any `MYSTERY_SEED`.)

# %%
m1.question("07-mystery-1")

# %% [markdown]
# ### Mystery 2
# Same procedure, a different fault (the two draws never repeat a fault).

# %%
m2 = Mystery(MYSTERY_SEED, 1, POOL, FAMILY, RUN)
print(m2, "|", m2.run.record)
print("crashed:", m2.run.error is not None)
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
check("my_diagnosis_2", my_diagnosis_2, test=m2.grade, hints=m2.hints())

# %%
m2.question("07-mystery-2")

# %% [markdown]
# Now run `m1.diagnose()` and `m2.diagnose()` (a few seconds each) and read what they
# ruled out. Then change `MYSTERY_SEED` and rerun section 3 for two new mysteries.
#
# ## 4. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("07-sop-actions")

# %%
practice("07-step-zero")

# %%
practice("07-finite-not-cured")

# %%
practice("07-incident-report")

# %% [markdown]
# ## Summary
# - **Manifest, first bad step, exact replay** (`locate`): inf first, then NaN.
# - **The SOP, cheap to expensive**: data → AMP off → LR ÷ 10 → grad norms → init / eps,
#   one change per replay, stopping at the first that explains the failure.
# - **A replay counts when the run is finite and learning.** AMP off was a hint (range,
#   rounding and scaler at once); bf16 ruled out rounding, `locate` showed the range.
#   LR ÷ 10 only postponed the symptom.
# - **Prove the fix**: same seed, same step as the clean run. `diagnose` automates all
#   of it.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
