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
# **Source notebook (solution version)** of `labs/08_guard_recovery.ipynb`, synced with
# its `.ipynb` by JupyterLab. After editing, run
# `nanlab course execute solutions/08_guard_recovery.py` (syncs, stores the checked
# outputs) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 08 · Guard and recovery (守护与恢复): stop-loss, skip, rollback, spike detection
#
# Labs 02 to 07 found a NaN's *cause*; a thousand-GPU run cannot wait for that. Here the
# loop acts *the moment* a NaN happens: stop (止损), skip (跳过) or recover (自动恢复) by
# rolling back (回滚).
#
# CPU is enough; about 40 minutes.

# %% [markdown]
# ## Setup
# Yardstick: Lab 00's clean run (200 steps, seed 0). Faulty runs take its **first 100
# steps** (`steps=100, decay_steps=200`: same LR and batches per step), so their step 57
# compares with its step 57. Checkpoints (检查点) every 10 steps, in memory.
#
# Quoted numbers are from one CPU; on another CPU (instruction set, threads) or a GPU,
# digits and failure steps may differ; the check facts hold.

# %%
import json
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from nanlab import faults
from nanlab.analysis.signals import final_loss, find_spikes, recovery_steps
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.faults import run_fault
from nanlab.faults.corpus import detector_table, make_corpus
from nanlab.guard import Guard, SpikeDetector
from nanlab.guard.detectors import Nanlab
from nanlab.train import Trainer
from nanlab.viz import plot_compare, plot_loss
from nanlab.viz.plots import kept_rows

start_lab("08_guard_recovery")
SHORT = dict(steps=100, decay_steps=200, record_every=0, checkpoint_every=10)
clean = run_fault(None, record_every=0, checkpoint_every=10)  # 200 steps
clean_losses = clean.record.losses()
N_PARAMS = sum(p.numel() for p in clean.trainer.model.parameters())
print(f"clean run: loss {clean_losses[0]:.2f} -> {final_loss(clean_losses):.3f} "
      f"in 200 steps; {N_PARAMS:,} parameters")


# %% [markdown]
# Helpers: a second dirty batch, the losses that *stand* after rollbacks (replayed rows
# replace abandoned ones), and a non-finite count.

# %%
def nan_batch_at(batch_index):
    """A callback pair: one more NaN reading, in batch `batch_index`."""
    def install(trainer, info):
        trainer.batches = faults.inject("nan_input", batches=trainer.batches,
                                        inputs="features", at_step=batch_index).batches
    return ("on_run_start", install)


def standing(record):
    """One loss per step: the rows that stand after any rollback."""
    rows = [r for r, keep in zip(record.steps, kept_rows(record.steps), strict=True) if keep]
    return np.array([r["loss"] for r in sorted(rows, key=lambda r: r["step"])])


def nonfinite(tensors):
    """How many values in these tensors are NaN or inf."""
    return sum(int((~torch.isfinite(t)).sum()) for t in tensors)


# %% [markdown]
# ## 1. What a silent NaN costs
# A NaN raises nothing, unlike an out-of-memory error
# ([Lab 01, section 7](01_numbers.ipynb#7.-NaN-is-silent,-out-of-memory-is-loud)), so
# the run goes on. How far? A NaN reading in batch 30's float feature (`nan_input`,
# Lab 02), no guard; a callback counts non-finite parameters after each step.

# %% tags=["nbval-check-output"]
bad_params = {}  # step -> non-finite parameter values after that step's update


def count_bad(trainer, info):
    bad_params[info.step] = nonfinite(trainer.model.parameters())


t0 = time.perf_counter()
unguarded = run_fault("nan_input", at_step=30, callbacks=[("on_step_end", count_bad)],
                      **SHORT)
seconds = time.perf_counter() - t0
losses = unguarded.record.losses()
print("exception raised:", unguarded.error)
print("steps run:", len(losses), "of", unguarded.trainer.config.steps)
print("first non-finite step:", unguarded.record.first_nonfinite_step)
print("NaN loss at every step from 30 to the end:", bool(np.isnan(losses[30:]).all()))

# %% [markdown]
# That is claim B3: no exception, and the GPUs stay busy on garbage. How much was
# wasted here?

# %%
wasted = len(losses) - unguarded.record.first_nonfinite_step
print(f"{wasted} of {len(losses)} steps ({wasted / len(losses):.0%}) trained on NaN: "
      f"about {seconds * wasted / len(losses):.1f} s of this {seconds:.1f} s run")

# %% [markdown]
# At scale, a NaN on day 3 of a 30-day run on 2,048 GPUs, noticed a day later, wastes
# 49,000 GPU-hours: hence a **stop-loss** (止损, claim M9).
#
# ## 2. A spike heals, a NaN does not
# Claim B2: `lr_jump` multiplies the LR by 10 at step 40 only (a scheduler glitch, Lab
# 03): a loss spike (损失尖峰).

# %%
spike_params = {}


def count_spike(trainer, info):
    spike_params[info.step] = nonfinite(trainer.model.parameters())


spiky = run_fault("lr_jump", at_step=40, callbacks=[("on_step_end", count_spike)],
          **{**SHORT, "steps": 70})
spike_losses = spiky.record.losses()
first_spike = find_spikes(spike_losses)[0]
back = recovery_steps(spike_losses, first_spike)
print(f"spike at step {first_spike}: loss {spike_losses[first_spike - 1]:.2f} -> "
      f"{spike_losses[first_spike]:.2f}, back to its level {back} steps later")

# %% tags=["nbval-check-output"]
print("spike: at least 3x the loss before it:",
      bool(spike_losses[first_spike] > 3 * spike_losses[first_spike - 1]))
print("spike: loss back to its pre-spike level within 40 steps:",
      back is not None and back <= 40)
print("spike: non-finite parameters after any step:", max(spike_params.values()))
print("NaN: non-finite parameters after step 29:", bad_params[29])
print("NaN: every parameter non-finite after step 30:", bad_params[30] == N_PARAMS)

# %%
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5), sharex=True, layout="constrained")
steps = np.arange(100)
ax1.plot(steps, clean_losses[:100], color="0.6", label="clean")
ax1.plot(steps[:70], spike_losses, color="C1", label="lr_jump at step 40 (spike)")
ax1.plot(steps, np.where(np.isfinite(losses), losses, np.nan), color="C3",
         label="nan_input at batch 30 (NaN from step 30 on)")
ax1.set_ylabel("loss")
ax1.legend(fontsize=8)
ax2.plot(steps[:70], [spike_params[s] / N_PARAMS for s in steps[:70]], color="C1")
ax2.plot(steps, [bad_params[s] / N_PARAMS for s in steps], color="C3")
ax2.set_ylabel("fraction of parameters\nnot finite")
ax2.set_xlabel("step");

# %% [markdown]
# One NaN update made **all** 106,368 parameters NaN: Adam's `m / (√v + eps)` of a NaN
# gradient is NaN, and every weight is downstream of the loss. The optimizer state?

# %% tags=["nbval-check-output"]
state = unguarded.trainer.optimizer.state_dict()["state"]
moments = [s[k] for s in state.values() for k in ("exp_avg", "exp_avg_sq")]
n_moments = sum(m.numel() for m in moments)
print("Adam moments m and v: all non-finite:", nonfinite(moments) == n_moments)

# %% [markdown]
# Nothing to "train through", and weights alone will not do (NaN `m`, `v`): **only a
# full checkpoint brings the run back.** The spike cost about 20 steps and healed
# itself.
#
# ## 3. Stop-loss (止损): stop at the first NaN, keep the evidence
# `Guard` sits between `backward()` and `optimizer.step()`, reading the loss and global
# grad norm already on the host (no extra sync). `Guard("stop")` drops the update, keeps
# the evidence, ends the run:

# %%
stop_guard = Guard("stop")
stopped = run_fault("nan_input", at_step=30, callbacks=stop_guard.callbacks(), **SHORT)
print("stop reason:", stopped.trainer.stop_reason)
print(stop_guard.summary())

# %% tags=["nbval-check-output"]
evidence = stop_guard.evidence[0]
weights = evidence["state"]["model"]
print("steps run:", len(stopped.record.steps), "instead of 100; steps saved:",
      100 - len(stopped.record.steps))
print("the live weights are finite:",
      nonfinite(stopped.trainer.model.parameters()) == 0)
print("evidence: the step:", evidence["step"], "| its batch index:",
      evidence["batch_index"])
print("evidence: NaN values in the batch's features:",
      int(torch.isnan(evidence["batch"]["features"]).sum()))
print("evidence: the weights before the bad update are finite:",
      nonfinite(weights.values()) == 0)
print("evidence: the gradients of that step hold NaN:",
      nonfinite(evidence["grads"].values()) > 0)

# %% [markdown]
# Stopping at step 30 saved the rest of the run (printed above). Evidence: the state *before* the bad update
# (`trainer.load_state_dict(evidence["state"])` restores it), the batch, its gradients;
# with `out_dir=`, saved as `evidence/evidence_step000030_batch000030_n1.pt` (step,
# batch, count: never overwritten), loadable with `torch.load(weights_only=True)`.
#
# ### Where the check sits matters
# `run_fault(..., stop_when_poisoned=True)` checks in `on_step_end`, **after** the
# optimizer step:

# %% tags=["nbval-check-output"]
late = run_fault("nan_input", at_step=30, stop_when_poisoned=True, **SHORT)
print("stopped after step:", late.record.steps[-1]["step"])
print("every parameter non-finite:",
      nonfinite(late.trainer.model.parameters()) == N_PARAMS)


# %% [markdown]
# One event late, the weights are gone; the failing state is in a checkpoint up to 10
# steps old. Check **after backward, before the update**, where it can still be dropped.
#
# **Exercise 1 · your stop-loss callback.** At the `Trainer` event `on_after_backward`,
# `fn(trainer, info)` gets a `StepInfo`: `info.step`, `info.loss_value`,
# `info.grad_norm_value` (host floats), `info.finite` (False if the loss or gradients
# are not finite). Write `stop_loss(trainer, info)`: on a non-finite step set
# `info.skip = True` (and a short `info.skip_reason`) and
# `trainer.stop_requested = True` (and a `trainer.stop_reason` naming the step and
# loss); else do nothing.

# %%
def stop_loss(trainer, info):
    """on_after_backward: drop the update of a non-finite step and end the run."""
    ### BEGIN SOLUTION
    if info.finite:
        return
    info.skip = True
    info.skip_reason = "stop-loss: non-finite step"
    trainer.stop_requested = True
    trainer.stop_reason = (f"stop-loss at step {info.step}: loss {info.loss_value}, "
                           f"grad norm {info.grad_norm_value}")
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def try_stop_loss():
    trainer = faults.build_fault_trainer(
        "nan_input", clean.trainer.config.replace(steps=20, checkpoint_every=0),
        {"at_step": 12})
    trainer.add_callback("on_after_backward", stop_loss)
    trainer.run()  # a stub raises NotImplementedError from inside the run
    return trainer


def judge_stop_loss(trainer):
    rows = trainer.record.steps
    if not trainer.stop_requested:
        return "the run was not asked to stop (trainer.stop_requested is False)"
    if len(rows) != 13:
        return f"the run stopped after {len(rows)} steps; the NaN arrives at step 12"
    if not rows[-1]["skipped"]:
        return "the update of the NaN step was applied: set info.skip = True"
    if nonfinite(trainer.model.parameters()):
        return "the weights are not finite"
    if "12" not in trainer.stop_reason:
        return f"say the step in trainer.stop_reason (got {trainer.stop_reason!r})"
    return None


check("stop_loss", try_stop_loss, test=judge_stop_loss, hints=[
    "Stop-loss acts only on a bad step: drop that step's update and ask the trainer to stop, "
    "saying why.",
    "The callback's info says whether the step is finite; on a bad one set its skip flag and "
    "skip reason, and the trainer's stop request and stop reason, with the step, the loss and "
    "the grad norm.",
    "Return at once when info.finite; otherwise four assignments: info.skip, "
    "info.skip_reason, trainer.stop_requested and trainer.stop_reason, the last one an "
    "f-string with info.step, info.loss_value and info.grad_norm_value.",
], solution="""\
if info.finite:
    return
info.skip = True
info.skip_reason = "stop-loss: non-finite step"
trainer.stop_requested = True
trainer.stop_reason = (f"stop-loss at step {info.step}: loss {info.loss_value}, "
                       f"grad norm {info.grad_norm_value}")""")

# %% [markdown]
# ## 4. Skip: drop the bad update
# Stopping suits debugging; a long run would rather drop the bad update, log it and go
# on (跳过). `Guard("skip")`, dirty batches 30 and 60:

# %%
skip_guard = Guard("skip")
skipped = run_fault("nan_input", at_step=30,
                    callbacks=[nan_batch_at(60)] + skip_guard.callbacks(), **SHORT)
for e in skipped.record.events:
    print(f"step {e['step']}: {e['kind']:5} batch {e['batch']}  {e['reason']}")

# %% tags=["nbval-check-output"]
skip_losses = skipped.record.losses()
ratio = final_loss(skip_losses) / final_loss(clean_losses[:100])
print("steps skipped:", [r["step"] for r in skipped.record.steps if r["skipped"]])
print("weights finite at the end:", nonfinite(skipped.trainer.model.parameters()) == 0)
print("LR schedule advanced only on applied updates:",
      skipped.trainer.scheduler.last_epoch == 98)
print("mean loss of steps 90-99 within 15 % of the clean run's:", abs(ratio - 1) < 0.15)

# %% [markdown]
# Skips are logged with a reason (DeepSpeed issue #8415: ZeRO under bf16 skipped
# non-finite steps silently), and the scheduler skips too: the LR keeps pace with the
# updates.
#
# That cures a bad batch. And bad weights? `high_lr` (AdamW in fp16, Lab 03; here at LR
# 0.5, so it fails early) grows the attention weights until the scores overflow, whatever
# the batch:

# %% tags=["nbval-check-output"]
frozen_guard = Guard("skip")
frozen = run_fault("high_lr", lr=0.5, steps=40, record_every=0, checkpoint_every=10,
                   callbacks=frozen_guard.callbacks())
rows = frozen.record.steps
first_bad = frozen.record.first_nonfinite_step
print("first non-finite step between 10 and 30:", 10 <= first_bad <= 30)
after = rows[first_bad:]
print("steps from there on skipped: more than 80 %:",
      sum(r["skipped"] for r in after) > 0.8 * len(after))

# %% [markdown]
# Skipping most steps freezes a run that looks alive. Alert when the skip count keeps
# growing (gpt-neox issue #291, "Abort runs if loss scale gets stuck at minimum").
#
# ## 5. Recover: roll back, skip the data, cut the LR
# Claims M1 and M10: keep the bad state, reload the last good checkpoint, never retrain
# the offending batches, cut the LR if it recurs. `Guard("recover")`, same batches:

# %%
recover_guard = Guard("recover")
recovered = run_fault("nan_input", at_step=30,
                      callbacks=[nan_batch_at(60)] + recover_guard.callbacks(), **SHORT)
print(recover_guard.summary())
for e in recovered.record.events:
    if e["kind"] in ("guard", "rollback", "skip_batches", "lr_cut"):
        detail = {k: e[k] for k in ("batch", "to_step", "batches", "repeat") if k in e}
        print(f"step {e['step']:>2}: {e['kind']:12} {detail}")

# %% tags=["nbval-check-output"]
rollbacks = [(e["step"], e["to_step"]) for e in recovered.record.events
             if e["kind"] == "rollback"]
skipped_batches = [e["batches"] for e in recovered.record.events
                   if e["kind"] == "skip_batches"]
print("rollbacks (failed step, back to step):", rollbacks)
print("batches never trained on:", skipped_batches)
print("LR cut:", any(e["kind"] == "lr_cut" for e in recovered.record.events))
print("bad states kept as evidence:", len(recover_guard.evidence))

# %% [markdown]
# Marked: batch `b`, two after it (bad data comes in runs: a corrupt shard) and `b − 1`,
# which may have pushed the weights astray. At step 30, marking batch 29 changes
# nothing: its update is inside the step-30 checkpoint (saved *before* step 30 ran). At
# step 57 (batch 60, after three skips) the rollback to step 50 passes batch 59, trained
# at step 56, so skipping it counts, as after a spike, a repeat or with sparse
# checkpoints. No LR cut: the run had passed the first failure, so this is a new
# incident.
#
# `plot_loss`: NaN steps (crosses), dropped updates (bottom ticks), rollback spans
# (shaded; the first spans zero steps).

# %%
fig = plot_loss(recovered.record, title="nan_input at batches 30 and 60, Guard('recover')")

# %% [markdown]
# **The proof (claim V2)**: the loss at the same step as the clean run; after skips the
# batches differ, so also the mean over 10 steps.

# %%
rec_losses = standing(recovered.record)
for s in (29, 45, 70, 99):
    print(f"step {s}: clean {clean_losses[s]:.3f}   recovered {rec_losses[s]:.3f}")
print(f"mean of steps 90-99: clean {final_loss(clean_losses[:100]):.3f}   "
      f"recovered {final_loss(rec_losses):.3f}")
fig = plot_compare({"clean": clean.record, "nan_input + Guard('recover')": recovered.record,
                    "nan_input, no guard": unguarded.record}, steps=100)

# %% tags=["nbval-check-output"]
ratio = final_loss(rec_losses) / final_loss(clean_losses[:100])
print("a loss for every one of the 100 steps, all finite:",
      len(rec_losses) == 100 and bool(np.isfinite(rec_losses).all()))
print("identical to the clean run before the first failure:",
      bool(np.array_equal(rec_losses[:30], clean_losses[:30])))
print("mean loss of steps 90-99 within 10 % of the clean run's:", abs(ratio - 1) < 0.10)

# %% [markdown]
# ### When it comes back: go back further and cut the LR
# A fault in the *training dynamics* returns at about the same step, whatever the
# batches. `high_lr` again:

# %%
lr_guard = Guard("recover")
lr_run = run_fault("high_lr", lr=0.5, steps=40, record_every=0, checkpoint_every=10,
                   callbacks=lr_guard.callbacks())
for e in lr_run.record.events:
    if e["kind"] in ("rollback", "lr_cut"):
        detail = {k: e[k] for k in ("to_step", "repeat", "lr_scale") if k in e}
        print(f"step {e['step']}: {e['kind']:8} {detail}")

# %% tags=["nbval-check-output"]
lr_rollbacks = [e for e in lr_run.record.events if e["kind"] == "rollback"]
cut = [e["lr_scale"] for e in lr_run.record.events if e["kind"] == "lr_cut"]
lr_losses = standing(lr_run.record)
came_back = len(lr_rollbacks) >= 2 and lr_rollbacks[1]["repeat"]
print("the NaN came back after the first rollback (a repeat):", came_back)
print("first rollback: data skipped, LR kept:", not lr_rollbacks[0]["repeat"])
print("second rollback went further back:",
      came_back and lr_rollbacks[1]["to_step"] < lr_rollbacks[0]["to_step"])
print("LR scale after the first cut:", cut[:1])
print("the run then finished, every standing step finite:",
      lr_run.trainer.stop_reason == "" and bool(np.isfinite(lr_losses).all()))


# %% [markdown]
# It came back: not (only) the data. As the same incident, the guard goes one checkpoint
# further back (the restored weights may be too large already) and multiplies the LR by
# 0.1, the article's "restart at LR ÷ 10"; after `max_rollbacks=3` it stops with a
# reason. An incident is the failing batch index (a rollback does not rewind it); only
# that batch failing again, or a failure at most `repeat_window=2` steps past it,
# repeats it. Cutting at *every* rollback, as the article says, would slow a data-fault
# run for nothing (section 7); `Guard("recover", lr_cut="always")` does so.
#
# **Exercise 2 · which checkpoint?** Write `rollback_target(checkpoints, step, trigger)`
# (the sorted checkpointed steps, each saved *before* its step ran; the failing step;
# `"nonfinite"` or `"spike"`): the step to roll back to, or `None`. A **non-finite**
# step `t` had its update dropped: the last checkpoint at or before `t`. A **spike** at
# `t` shows the damage of update `t − 1` (the loss of step `t` is computed *before*
# update `t`, Lab 03), already in the checkpoint before `t`: the last checkpoint at or
# before `t − 1`.

# %%
def rollback_target(checkpoints, step, trigger):
    """The checkpoint step to go back to after a failure at `step`, or None."""
    ### BEGIN SOLUTION
    latest = step if trigger == "nonfinite" else step - 1
    good = [s for s in checkpoints if s <= latest]
    return good[-1] if good else None
    ### END SOLUTION


# %% tags=["nbval-check-output"]
ROLLBACK_CASES = [  # (checkpoints, step, trigger) -> expected
    (([0, 10, 20, 30], 30, "nonfinite"), 30),
    (([0, 10, 20, 30], 30, "spike"), 20),
    (([0, 10, 20, 30], 31, "spike"), 30),
    (([0, 10, 20, 30], 57, "nonfinite"), 30),
    (([0, 50, 100], 49, "spike"), 0),
    (([10, 20], 10, "spike"), None),
    (([], 5, "nonfinite"), None),
]
check("rollback_target", rollback_target, [want for _, want in ROLLBACK_CASES],
      cases={f"checkpoints {c}, {t} at step {s}": (c, s, t)
             for (c, s, t), _ in ROLLBACK_CASES}, hints=[
          "Go back to the latest checkpoint that the bad update cannot have touched.",
          "The trigger sets the latest safe step: for a non-finite step it is that step "
          "itself, for a spike the step before it; then take the largest checkpoint step not "
          "after it, or None.",
          "A conditional expression gives the latest safe step; keep the checkpoint steps "
          "at or before it (they are sorted); the answer is the last one, or None when none "
          "is left.",
      ], solution="""\
latest = step if trigger == "nonfinite" else step - 1
good = [s for s in checkpoints if s <= latest]
return good[-1] if good else None""")

# %% [markdown]
# ## 6. Same seed, same numbers
# An unreproducible recovery proves nothing. Rerun it, same seed and faults; compare
# every row, abandoned branches included:

# %% tags=["nbval-check-output"]
again_guard = Guard("recover")
again = run_fault("nan_input", at_step=30,
                  callbacks=[nan_batch_at(60)] + again_guard.callbacks(), **SHORT)
a = np.array([[r["loss"], r["grad_norm"], r["lr"]] for r in recovered.record.steps])
b = np.array([[r["loss"], r["grad_norm"], r["lr"]] for r in again.record.steps])
print("rows:", len(a), "and", len(b))
print("every loss, grad norm and LR identical, bit for bit:",
      a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True)))
print("the same guard events:",  # as JSON text, where NaN equals NaN
      json.dumps(again.record.events) == json.dumps(recovered.record.events))
print("the same final weights:", all(torch.equal(p, q) for p, q in zip(
    recovered.trainer.model.parameters(), again.trainer.model.parameters(), strict=True)))


# %% [markdown]
# A checkpoint holds, and a rollback restores, all that decides a step: weights,
# optimizer state, LR schedule position, RNG and data position. So section 5's run
# differs from the clean run *only* by its skipped batches. (On a GPU some kernels are
# not deterministic by default: set `torch.use_deterministic_algorithms(True)`.)
#
# ## 7. Loss below 0.1 within 30 steps of a restart?
# The article's rule of thumb for a recovery, on section 5's restarts:

# %%
def steps_to_below(losses, start, threshold=0.1):
    """Steps after `start` until the loss is below `threshold` (None: never)."""
    below = np.flatnonzero(np.asarray(losses[start:]) < threshold)
    return int(below[0]) if len(below) else None


for _failed, restart in rollbacks:
    window = rec_losses[restart:restart + 31]
    print(f"restart at step {restart}: loss {rec_losses[restart]:.2f}, lowest in the "
          f"next 30 steps {window.min():.2f}")

# %% tags=["nbval-check-output"]
print("restarts at steps:", [r for _, r in rollbacks])
print("below 0.1 within 30 steps of either restart:",
      any(rec_losses[r:r + 31].min() < 0.1 for _, r in rollbacks))

# %% [markdown]
# A perfect recovery fails: at step 30 the clean run itself is at 1.5, over 100 steps
# from 0.1. From which restarts would the rule hold, by the clean curve?

# %%
holds = [s for s in range(170) if clean_losses[s:s + 31].min() < 0.1]
print("the clean run is first below 0.1 at step", steps_to_below(clean_losses, 0))
print("'below 0.1 within 30 steps' holds for restarts from step", holds[0], "on")


# %% [markdown]
# Now restart a fresh `Trainer`, as a scheduler would, from the clean run's step-120
# checkpoint (loss about 0.19): 30 steps at the same LR (it must replay the clean run
# exactly) and at LR ÷ 10.

# %%
def restart(step, lr_scale, n=30):
    config = clean.trainer.config.replace(steps=step + n, decay_steps=200)
    trainer = Trainer(config)
    trainer.load_state_dict(clean.trainer.checkpoints.load(step))
    trainer.set_lr_scale(lr_scale)  # every scheduled LR times this, from the next step
    trainer.run()
    return trainer.record.losses()


restarts = {k: restart(120, k) for k in (1.0, 0.1)}
for k, losses in restarts.items():
    print(f"restart at step 120, LR x {k}: loss {losses[0]:.3f}, lowest in 30 steps "
          f"{losses.min():.3f}, below 0.1 after {steps_to_below(losses, 0)} steps")

# %% tags=["nbval-check-output"]
print("same LR: the restart replays the clean run exactly:",
      bool(np.array_equal(restarts[1.0], clean_losses[120:150])))
print("from step 120, same LR: below 0.1 within 30 steps:", restarts[1.0].min() < 0.1)
print("from step 120, LR / 10: below 0.1 within 30 steps:", restarts[0.1].min() < 0.1)
print("from step 150: below 0.1 before the first step:", clean_losses[150] < 0.1)


# %% [markdown]
# So the rule measures *where the checkpoint was*, not the recovery (from step 150 it
# holds before the first step: a check of nothing), and LR ÷ 10, learning more slowly,
# fails it from step 120. Its 0.1 belongs to one task and loss scale (a language model
# at 2.0 nats never passes). Section 5's check transfers: **the loss at the same step as
# a clean run** (or the run before the failure), within a few steps' noise.
#
# ## 8. Acting before the NaN: a loss-spike detector
# A divergence, unlike dirty data, usually warns: the loss jumps first. OLMo-core and
# nanlab's guard watch with a **running z-score** (滑动 z 分数).
#
# **Exercise 3 · the detector.** Write
# `zscore_spikes(values, window=20, warmup=20, z_max=6.0, rtol=0.5)`, the indices of
# spikes in `values`. A finite `x` is a spike if `z = (x − mean) / std` over the last
# `window` finite values exceeds `z_max` (OLMo-core's 6 sigma) **and** `x` is more than
# `(1 + rtol)` times the mean (on a flat stretch a tiny std gives a harmless wobble a
# large `z`).  Use the population std (`np.std`'s default); a std of 0 gives `z = inf`
# if `x` is above the mean, else 0. No spike before `warmup` finite values, or with
# fewer than 2 in the window. Every finite value joins the window after being judged,
# spikes too (so a lasting change of level is accepted); non-finite values are neither
# flagged nor added.

# %%
def zscore_spikes(values, window=20, warmup=20, z_max=6.0, rtol=0.5):
    """Indices of the values more than z_max sigma above the running window."""
    ### BEGIN SOLUTION
    history, seen, spikes = [], 0, []
    for i, x in enumerate(values):
        x = float(x)
        if not math.isfinite(x):
            continue
        recent = history[-window:]
        if seen >= warmup and len(recent) >= 2:
            mean, std = float(np.mean(recent)), float(np.std(recent))
            z = (x - mean) / std if std > 0 else (math.inf if x > mean else 0.0)
            if z > z_max and x > (1 + rtol) * mean:
                spikes.append(i)
        history.append(x)
        seen += 1
    return spikes
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def nanlab_spikes(values, window=20, warmup=20, z_max=6.0, rtol=0.5):
    detector = SpikeDetector(window=window, warmup=warmup, z=z_max, rtol=rtol)
    spikes = []
    for i, x in enumerate(values):
        if math.isfinite(x):
            if detector.is_spike(x):
                spikes.append(i)
            detector.add(x)
    return spikes


gen = np.random.default_rng(0)
SPIKE_CASES = {
    "clean run": (list(clean_losses), {}),
    "lr_jump run": (list(spike_losses), {}),
    "unguarded NaN run": (list(losses), {}),
    "flat, then a jump": ([1.0] * 10 + [1.2, 1.0, 5.0, 1.0], {"window": 5, "warmup": 5}),
    "noisy, NaN, spikes": (list(1 + 0.05 * gen.standard_normal(60)) + [math.nan, 3.0]
                           + list(1 + 0.05 * gen.standard_normal(20)) + [math.inf, 9.0],
                           {"window": 8, "warmup": 10, "z_max": 4.0}),
}


def judge_spikes(got):
    for case, (values, kw) in SPIKE_CASES.items():
        want = nanlab_spikes(values, **kw)
        if list(got[case]) != want:
            return f"case {case!r} ({kw or 'defaults'}): got {list(got[case])}, expected {want}"
    return None


check("zscore_spikes", lambda values, kw: zscore_spikes(values, **kw), cases=SPIKE_CASES,
      test=judge_spikes, hints=[
          "A spike is a value far above the recent ones: judge each new value against a window"
          " of the values before it, never against itself.",
          "Skip non-finite values; judge only after warmup values and with at least two in the"
          " window; z counts standard deviations above the window's mean (numpy's mean and "
          "std); flag when z passes z_max and the value is also above the mean by more than "
          "rtol.",
          "Keep a history list of the finite values seen so far and judge each new one against"
          " its last window entries before appending it; a std of 0 makes any rise infinitely "
          "many sigmas (math.inf), no rise 0.",
      ], solution="""\
history, seen, spikes = [], 0, []
for i, x in enumerate(values):
    x = float(x)
    if not math.isfinite(x):
        continue
    recent = history[-window:]
    if seen >= warmup and len(recent) >= 2:
        mean, std = float(np.mean(recent)), float(np.std(recent))
        z = (x - mean) / std if std > 0 else (math.inf if x > mean else 0.0)
        if z > z_max and x > (1 + rtol) * mean:
            spikes.append(i)
    history.append(x)
    seen += 1
return spikes""")

# %% [markdown]
# Where does it fire on this lab's runs? (Unfinished function: this cell uses nanlab's.)

# %% tags=["nbval-check-output"]
try:
    detect = zscore_spikes
    detect([1.0, 2.0])
except NotImplementedError:
    detect = nanlab_spikes
print("clean run:", detect(clean_losses))
print("lr_jump run:", detect(spike_losses))
print("unguarded NaN run:", detect(losses))

# %% [markdown]
# A falling loss (3.5 to 0.02) never fires it; lr_jump fires at step 41, one after the
# glitch, then accepts the new level; the NaN came without warning, so a detector
# complements the non-finite check, not replaces it.
# `Guard(mode, spike="skip" | "recover" | "stop")` acts on spikes, but acting on one the
# model recovers from alone can do more harm than good (Lab 12): alert, and act only on
# spikes that stay up.
#
# ### Detectors compared, and a threshold priced
# Every framework ships a spike rule (section 9); none says how often it is wrong.
# `nanlab.faults.corpus` makes labelled runs (here the quick corpus: clean, noisy, an LR
# burst that heals, a skipped NaN then a burst, a deep stack that explodes) and replays
# each rule, as written in its source file, over their losses and grad norms. An alarm
# on a healthy step is a **false alarm**; an incident is **detected** by an alarm in its
# window before any NaN. `nanlab detectors` runs the full corpus.

# %%
corpus = make_corpus("quick")
table = detector_table(corpus, size="quick")
print(table.text())

# %%
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
points = {}  # rules on the same spot share one label
for s in table.scores:
    points.setdefault((s.false_per_1000, s.recall), []).append(s.rule)
same_height = {}  # labels at one recall alternate above and below their points
for (x, y), names in sorted(points.items()):
    n = same_height[y] = same_height.get(y, -1) + 1
    ax.scatter(x, y, color="C3" if "nanlab" in names else "C0")
    ax.annotate(", ".join(names), (x, y), fontsize=8, xytext=(4, -11 if n % 2 else 4),
                textcoords="offset points")
ax.set(xscale="symlog", xlabel="false alarms per 1,000 healthy steps",
       ylabel="recall (incidents caught)", title="each rule on the quick corpus");

# %% tags=["nbval-check-output"]
rows = {s.rule: s for s in table.scores}
print("OLMo-core: more false alarms than its NaN-proof twin:",
      rows["olmo_core"].false_alarms > rows["olmo_core_finite"].false_alarms)
print("ZClip: lower recall than its NaN-proof twin:",
      rows["zclip"].recall < rows["zclip_finite"].recall)
print("nanlab's default: every incident, no false alarm:",
      rows["nanlab"].recall == 1.0 and rows["nanlab"].false_alarms == 0)

# %% [markdown]
# Top left is good. The skipped NaN is why OLMo-core and ZClip fall: a NaN in their
# statistics makes OLMo-core skip the next 128 steps and blinds ZClip for good.
#
# **A threshold is a price.** A false alarm costs a rollback (here 20 steps of
# compute), a missed incident can cost the run (2,000 steps). Sweep the z threshold of
# nanlab's z-score alone (`rtol=0`, no relative gate) and add up the bill:

# %%
ROLLBACK, BLOWN = 20, 2000  # steps lost per false alarm, per missed incident
zs = [1, 1.5, 2, 3, 4, 6, 9, 13, 20, 30, 50]
sweep = detector_table(corpus, size="quick", rules={
    f"z={z}": (lambda z=z: Nanlab(z=z, rtol=0.0)) for z in zs}).scores
cost = [s.false_alarms * ROLLBACK + (s.detectable - s.detected) * BLOWN for s in sweep]
fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
ax.plot(zs, cost, "o-")
ax.set_yscale("symlog", linthresh=10)
ax.set(xscale="log", xlabel="z threshold", ylabel="expected cost (steps)",
       title=f"false alarms x {ROLLBACK} + misses x {BLOWN}");
cheapest = [z for z, c in zip(zs, cost, strict=True) if c == min(cost)]
print(f"cheapest z: {cheapest[0]:g} to {cheapest[-1]:g} (cost {min(cost)} steps)")

# %% [markdown]
# Read the minimum off the plot. Too low a z pays for rollbacks, too high one for
# blown runs; the price ratio moves the minimum (try `ROLLBACK = 200`).
#
# ## 9. How the big systems do it
# The article says Megatron-LM and DeepSpeed "detect overflow and recover
# automatically". From their public code and reports:

# %% [markdown]
# | | watches | then | ranks agree through |
# |---|---|---|---|
# | **PyTorch GradScaler** | inf / NaN in fp16 gradients | skips the optimizer step, halves the loss scale (starts at 2¹⁶, doubles after 2,000 clean steps) | nothing: one process |
# | **Megatron-LM** | the loss every step (NaN fatal by default); the fp16 found-inf flag; optionally a *spiky loss*, 10x the largest early one | on overflow, skips the optimizer **and** scheduler step, backs off the loss scale; its rerun machinery replays a step in place, then from a checkpoint on other GPUs: flaky device or real fault? | all-reduce (MAX) of the found-inf flag |
# | **DeepSpeed** | fp16 gradient overflow | skips the step ("OVERFLOW! ... Skipping step"), lowers the loss scale with hysteresis 2; at the minimum, `runtime/fp16/loss_scaler.py` raises "Current loss scale already at minimum" unless `raise_error_at_min_scale` is off | all-reduced overflow flag |
# | **OLMo-core** | loss or grad norm over 6 std *above* the mean of the last 128 steps (one-sided: `loss - mean <= 6 * std` passes), once 64 values are in; on device, no host sync (`src/olmo_core/optim/skip_step_optimizer.py`, `get_step_factor`) | skips the step (update times 0) | same decision given the same reduced loss and grad norm on every rank |
# | **PaLM 540B** (Chowdhery et al. 2022, section 5.1) | about 20 loss spikes, watched by people | restarted about 100 steps before each, skipping 200 to 500 batches; the same batches from an earlier state did not spike: data and state together | the whole job restarts |
# | **nanlab `Guard`** | non-finite loss or grad norm; optionally the z-score | `stop`, `skip`, `recover`; `rerun=True` replays the step: transient or persistent? | all-reduce of two flags under `torch.distributed` |

# %% [markdown]
# - **Skip and loss scaling** are the automatic defaults for fp16 overflow; a *NaN in
#   the weights* is not: Megatron-LM and DeepSpeed stop (or keep skipping) until a
#   person or cluster script restarts from a checkpoint. So the article's "recover
#   automatically" means "skip the overflow step".
# - nanlab automates PaLM's manual recipe, **rollback plus data skip**, and adds the LR
#   cut.
# - All ranks must **decide alike**, or the data-parallel copies drift apart.
#
# ## 10. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("08-where-to-check")

# %%
practice("08-recovery-order")

# %%
practice("08-comes-back")

# %%
practice("08-interview-recovery")

# %% [markdown]
# ## Summary
# - A NaN is silent and poisons every weight at once; a spike heals.
# - Stop-loss before the update; prove a recovery at the same step as a clean run, not
#   by a 0.1 threshold (V4), and bit for bit (V1).
# - Big systems automate skip and loss scaling, not rollback (M13).
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
