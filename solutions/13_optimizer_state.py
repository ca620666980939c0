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
# **Source notebook (solution version).** This pair (`solutions/13_optimizer_state.py`,
# `.ipynb`) is the single source of `labs/13_optimizer_state.ipynb`, answers filled in.
# Edit either (JupyterLab syncs the other on save), then run
# `nanlab course execute solutions/13_optimizer_state.py` (syncs the pair, stores the
# outputs the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 13 · Optimizer state: resumes that forget, and a layer that wakes up
#
# A long run is restarted many times (preemptions, node failures, a new release of the
# code). Each restart is a chance to lose state that is not the weights: Adam's moments
# (动量), its step count, the LR schedule. Nothing crashes and nothing turns NaN; the
# loss simply jumps. You break a trained toy run three ways (the `optimizer_state`
# family), read each failure's signature in the run record, let `diagnose` name it, then
# write a resume that loses nothing. CPU only, about 30 minutes.

# %% [markdown]
# ## Setup
# The toy run of Lab 00 (200 steps, AdamW, b2 0.95, warmup then cosine), clean, as the
# reference for every fault below.

# %%
import io

import matplotlib.pyplot as plt
import numpy as np
import torch

from nanlab import faults
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import diagnose

start_lab("13_optimizer_state")


def weights_around(step, names=""):
    """Callbacks that copy the parameters whose names contain `names` before `step` and
    before `step + 1`: what one update did to each weight."""
    seen = {}

    def grab(tr, info):
        if info.step in (step, step + 1):
            seen[info.step] = {n: p.detach().clone() for n, p in tr.model.named_parameters()
                               if names in n}
    return seen, [("on_step_start", grab)]


def update_over_lr(run, seen, step):
    """|Δw| / lr of every watched weight in the update of `step`."""
    lr = run.record.steps[step]["lr"]
    return torch.cat([((seen[step + 1][n] - w).abs() / lr).flatten()
                      for n, w in seen[step].items()]).numpy()


clean_seen, clean_grab = weights_around(100)
clean = faults.run_fault(None, callbacks=clean_grab)
print(f"clean run: final loss {clean.record.losses()[-1]:.4f}")

# %% [markdown]
# ## 1. A restart that forgets Adam's state
#
# `resume_fresh_optimizer`: before step 100 the job restarts for real (`torch.save`, then
# `torch.load(weights_only=True)`), but the resume code loads only `model.state_dict()`
# and builds a new AdamW. A code path that is easy to write: the weights are "the
# model", and the optimizer looks like something you can rebuild.
#
# **Exercise · predict.** Beside it runs the fix `rewarm_lr`: Adam's state still lost,
# the LR warmed up again over 20 steps. Return a dict mapping each of the `STATEMENTS`
# to `True` or `False`; "the loss before" is the median over steps 90-99.

# %%
STATEMENTS = [
    "fresh AdamW: within 3 steps of the restart the loss passes 5x the loss before",
    "fresh AdamW: the loss turns NaN or inf",
    "fresh AdamW, update of step 100: over 90 % of the weights move by the LR (within 1 %)",
    "rewarm_lr: the loss stays below 2x the loss before, to the end",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [True, False, True, True], strict=True))
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the runs: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("predict_fresh_adam", my_predictions)

# %%
fresh_seen, fresh_grab = weights_around(100)
fresh = faults.run_fault("resume_fresh_optimizer", callbacks=fresh_grab)
rewarm = faults.run_fault("resume_fresh_optimizer", fixes=["rewarm_lr"])
loss_clean, loss_fresh = clean.record.losses(), fresh.record.losses()
fig, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
steps = np.arange(len(loss_clean))
ax.plot(steps[80:], loss_clean[80:], label="clean")
ax.plot(steps[80:], loss_fresh[80:], label="resume_fresh_optimizer")
ax.plot(steps[80:], rewarm.record.losses()[80:], label="the same + rewarm_lr")
ax.axvline(100, color="gray", ls=":", label="restart")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.legend(fontsize=8)
before = np.median(loss_fresh[90:100])
peak = 100 + int(np.argmax(loss_fresh[100:]))
print(f"median loss over steps 90-99: {before:.3f}; highest after the restart: "
      f"{loss_fresh[peak]:.3f} at step {peak} ({loss_fresh[peak] / before:.0f}x)")

# %% [markdown]
# What does the run record say? The trainer logs a "restart" event that describes the
# *resumed* objects, measured on them: Adam's step count and the schedule's step.

# %%
event = fresh.record.events[0]
print(event)
saved = fresh.trainer.checkpoints.load(100)["optimizer"]["state"]
print("Adam's step count inside the checkpoint it resumed from:",
      min(int(s["step"]) for s in saved.values()))

# %% tags=["nbval-check-output"]
print("the event is a restart at step 100:", (event["kind"], event["step"]) == ("restart", 100))
print("the resumed optimizer has seen 0 steps:", event["optimizer_steps"] == 0)
print("the schedule was resumed (step 100):", event["schedule_step"] == 100)
print("the loss after the restart peaks within 3 steps:", peak <= 103)
print("the peak is more than 8x the loss before:", loss_fresh[peak] > 8 * before)

# %% [markdown]
# The checkpoint held Adam's state; the resume threw it away. Now measure the first
# update after the restart on every weight: `|Δw| / lr`, from the weights before and
# after step 100, in the clean run and in the faulty one.

# %%
ratio_clean = update_over_lr(clean, clean_seen, 100)
ratio_fresh = update_over_lr(fresh, fresh_seen, 100)
fig, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
bins = np.linspace(0, 1.3, 66)
ax.hist(ratio_clean, bins=bins, alpha=0.6, label="clean (Adam's state loaded)")
ax.hist(ratio_fresh, bins=bins, alpha=0.6, label="fresh AdamW")
ax.set_yscale("log")
ax.set_xlabel("|update| / lr, per weight, step 100")
ax.set_ylabel("weights")
ax.legend(fontsize=8)
at_lr = float(np.mean(np.abs(ratio_fresh - 1) < 0.01))
print(f"{ratio_fresh.size:,} weights; fresh AdamW: {at_lr:.1%} moved by lr within 1%; "
      f"median |update| / lr: fresh {np.median(ratio_fresh):.3f}, clean "
      f"{np.median(ratio_clean):.3f}")

# %% tags=["nbval-check-output"]
print("fresh AdamW: more than 90% of the weights move by the LR (within 1%):", at_lr > 0.9)
print("clean: the median weight moves by less than half the LR:",
      float(np.median(ratio_clean)) < 0.5)

# %% [markdown]
# Your prediction, graded against the two runs and the update just measured:

# %% tags=["nbval-check-output"]
loss_rewarm = rewarm.record.losses()
actual = dict(zip(STATEMENTS, [
    bool(loss_fresh[100:104].max() > 5 * before),
    fresh.record.first_nonfinite_step is not None,
    at_lr > 0.9,
    bool(loss_rewarm[100:].max() < 2 * np.median(loss_rewarm[90:100])),
], strict=True))
check("predict_fresh_adam", my_predictions, actual, locked=True, hints=[
    "A fresh Adam has no running averages yet: its bias correction makes the first update "
    "about the same size for every weight, whatever its gradient, and nothing in that "
    "arithmetic comes near fp32's limit.",
    "A trained model needs most weights to barely move. Ask what one full-LR step on all of "
    "them does to the loss, and what the same sign-like steps do when the LR starts small.",
    "After committing, the check cell reads each statement from the runs: the losses around "
    "step 100, the record's `first_nonfinite_step`, and the share of weights whose update "
    "over the LR is 1.",
])

# %% [markdown]
# One bar at 1: the fresh optimizer moves *every* weight by the full LR, the tiny
# gradients as far as the large ones. A trained model has many weights that should
# barely move; all of them move at once, in the direction of one noisy batch.
#
# Why every weight: at Adam's first step the bias correction cancels the `(1 − b1)` and
# `(1 − b2)` of the moments, so the update is `lr · sign(g)` whatever `g` is (derived
# in [Lab 03, "Why AdamW needs warmup"](03_learning_rate.ipynb#Why-AdamW-needs-warmup)).
# Gradient clipping cannot help: it shrinks `g`, and the first step does not depend on
# `g`'s size. `lr / 10` helps only by slowing the whole run.
#
# ## 2. A restart that forgets the LR schedule
#
# `resume_reset_schedule`: the resume loads the weights and the optimizer but not
# `scheduler.state_dict()`. A new `LambdaLR` counts from 0, so the restart at step 130
# runs warmup again and climbs back to the peak LR, on a model the cosine decay had
# brought near its minimum.

# %%
reset = faults.run_fault("resume_reset_schedule")
loss_reset = reset.record.losses()
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), layout="constrained")
for run, name in ((clean, "clean"), (reset, "resume_reset_schedule")):
    ax1.plot(steps[110:], run.record.losses()[110:], label=name)
    ax2.plot(steps[110:], run.record.column("lr")[110:], label=name)
for ax, label in ((ax1, "training loss"), (ax2, "learning rate")):
    ax.axvline(130, color="gray", ls=":")
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.legend(fontsize=8)
ax1.set_yscale("log")
lr = reset.record.column("lr")
event = reset.record.events[0]
peak = 130 + int(np.argmax(loss_reset[130:]))
print(event)
print(f"LR before the restart {lr[129]:.2e}, right after {lr[130]:.2e}, at step 149 "
      f"{lr[149]:.2e}; loss peaks at step {peak}: {loss_reset[peak]:.3f} "
      f"({loss_reset[peak] / np.median(loss_reset[120:130]):.0f}x the steps before)")

# %% tags=["nbval-check-output"]
print("the restart event says: schedule step 0:", event["schedule_step"] == 0)
print("Adam's state was resumed:", event["optimizer_steps"] == 130)
print("the LR falls at the restart, then climbs above where it was:",
      lr[130] < lr[129] < lr[149])
print("the loss peaks 15-30 steps after the restart:", 145 <= peak <= 160)
print("the peak is more than 5x the loss before:",
      loss_reset[peak] > 5 * np.median(loss_reset[120:130]))

# %% [markdown]
# The signature differs from section 1: the spike comes late, about 20 steps after the
# restart, when warmup has brought the LR back to its peak. In a real run you see it
# in the LR curve (log it!) and in the restart event's `schedule_step`.
#
# ## 3. A layer that wakes up under b2 = 0.999
#
# `adam_unfreeze_spike`: no restart this time. The first MLP matrix of every block is
# frozen for 100 steps by zeroing its gradient (a gradient mask: the parameters stay in
# the optimizer), then unfrozen, with AdamW's b2 = 0.999 (PyTorch's default). During the
# freeze Adam still steps the layer: its count `t` reaches 100 while `m = v = 0`.
#
# At the first real gradient (`t = 101`):
# `m_hat = (1−b1)·g / (1−b1^101) ≈ 0.1·g` and `v_hat = (1−b2)·g² / (1−b2^101)`.
# With b2 = 0.999, `1 − b2^t` at `t = 100` is only about 0.1 (computed below), so
# `v_hat ≈ g²/100` and `m_hat / sqrt(v_hat) ≈ sign(g)`: full-size steps again. With
# b2 = 0.95 the correction is near 1 and the step about half as large.

# %%
b1 = 0.9
formula = {}
for b2 in (0.999, 0.95):
    t = 101
    m_hat = (1 - b1) / (1 - b1**t)  # in units of g
    v_hat = (1 - b2) / (1 - b2**t)  # in units of g²
    formula[b2] = m_hat / v_hat**0.5
    print(f"b2 = {b2}: 1 - b2^100 = {1 - b2**100:.3f}; first update after unfreezing = "
          f"{formula[b2]:.2f} lr · sign(g)")

# %% [markdown]
# Now the run, and the same layer's first update measured from its weights. The fix
# to compare is `beta2_095`: the same freeze with b2 = 0.95.

# %%
wake_seen, wake_grab = weights_around(100, names="mlp.c_fc")
wake = faults.run_fault("adam_unfreeze_spike", callbacks=wake_grab)
calm_seen, calm_grab = weights_around(100, names="mlp.c_fc")
calm = faults.run_fault("adam_unfreeze_spike", fixes=["beta2_095"], callbacks=calm_grab)
measured = {0.999: float(np.median(update_over_lr(wake, wake_seen, 100))),
            0.95: float(np.median(update_over_lr(calm, calm_seen, 100)))}
loss_wake, loss_calm = wake.record.losses(), calm.record.losses()
fig, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
ax.plot(steps[80:], loss_clean[80:], label="clean (no freeze)")
ax.plot(steps[80:], loss_wake[80:], label="frozen until 100, b2 0.999")
ax.plot(steps[80:], loss_calm[80:], label="frozen until 100, b2 0.95 (beta2_095)")
ax.axvline(100, color="gray", ls=":", label="unfreeze")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.legend(fontsize=8)
height = {b2: float(np.max(loss[100:110]) / np.median(loss[90:100]))
          for b2, loss in ((0.999, loss_wake), (0.95, loss_calm))}
for b2 in (0.999, 0.95):
    print(f"b2 = {b2}: median |Δw| / lr of the unfrozen layer {measured[b2]:.2f} "
          f"(formula {formula[b2]:.2f}); loss after unfreezing {height[b2]:.1f}x the "
          f"steps before")

# %% tags=["nbval-check-output"]
print("b2 0.999: the measured first update is within 10% of the formula's:",
      abs(measured[0.999] / formula[0.999] - 1) < 0.1)
print("b2 0.95: the first update is less than 0.6 lr:", measured[0.95] < 0.6)
print("b2 0.999 spikes more than 5x:", height[0.999] > 5)
print("b2 0.95 stays under 3x:", height[0.95] < 3)

# %% [markdown]
# A frozen-then-unfrozen layer is common: a new head trained first, adapters, a
# progressive unfreeze in fine-tuning. If the freeze is a gradient mask, Adam's count
# runs on without its moments. (PyTorch's Adam skips a parameter whose `.grad` is
# None, so a `requires_grad=False` freeze does not count.) Adding the layer to the
# optimizer only when it wakes up is no cure: its state is then fresh, section 1's
# case. b2 = 0.95 halves the first update and shrinks the jump (printed above), yet the
# layer still steps about 0.45 lr and the loss still rises: a mitigation. The
# targeted cures act on that layer alone: a short LR warmup for it in its own param
# group, its optimizer state reset and re-warmed, or update clipping (Shazeer & Stern
# 2018, Adafactor, abstract: updates too large when v decays slowly).
#
# ## 4. `diagnose` names the cause and proves the cure
#
# The SOP of Lab 07 on each bad run: it reads the restart event, the LR column and the
# per-layer grad-norm history, names the cause, and replays the run with the fix
# (about a minute for the three).

# %%
verdicts = {}
for name, run in (("resume_fresh_optimizer", fresh), ("resume_reset_schedule", reset),
                  ("adam_unfreeze_spike", wake)):
    verdicts[name] = diagnose(run)
    print(f"=== {name}\n{verdicts[name].report()}\n")

# %% tags=["nbval-check-output"]
for name, want in (("resume_fresh_optimizer", "resume_full_state"),
                   ("resume_reset_schedule", "resume_full_state"),
                   ("adam_unfreeze_spike", "beta2_095")):
    d = verdicts[name]
    print(f"{name}: cause {d.cause}, detail names the fault: {d.detail == name}, "
          f"fix {d.fix}: {d.fix == want}, proven: {d.fix_verified}")

# %% [markdown]
# When the old optimizer state is truly gone (a corrupt file, a changed parameter
# layout), the fresh optimizer's sign-like first steps can be tamed with a short
# warmup after the restart (`rewarm_lr`, 20 steps: section 1's third run). It does not
# cure the reset schedule: the LR still climbs back to its peak.
#
# ## 5. Never roll back to a poisoned optimizer state
#
# A rollback trusts the "last good" checkpoint. Good must mean the whole state. A
# gradient of 1e22 is finite in fp32, but Adam's `v` adds `(1 − b2)·g²`, and `g²` =
# 1e44 is past fp32's maximum (3.4e38): `exp_avg_sq` overflows to inf, while the update
# `m / sqrt(inf) = 0` leaves the weight finite. A checkpoint saved then looks healthy
# by its weights. (In a real run, `deep_explosion` of Lab 05 can do this as its
# gradients blow up, once one entry's square passes fp32's maximum: at the grad norm's
# overflow or a few steps later, depending on the CPU's kernels;
# `tests/test_optimizer_state.py` replays it.)
#
# The guard checks every floating-point tensor of a saved state, weights *and*
# optimizer, and passes over a bad one with a "bad_checkpoint" event:

# %%
from nanlab.guard import Guard
from nanlab.runs.checkpoint import nonfinite_tensors

torch.manual_seed(0)
net = torch.nn.Linear(1, 1)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=False)
guard = Guard("recover").watch(net, opt)
for step, scale in enumerate([1.0, 1e22]):
    guard.keep(step, position=step)
    opt.zero_grad()
    (net(torch.ones(1, 1)).sum() * scale).backward()
    opt.step()
guard.keep(2, position=2)  # the weights are finite: it looks like a good state
print("weights finite:", bool(torch.isfinite(net.weight).all()))
print("non-finite in the optimizer:", nonfinite_tensors(opt.state_dict()))
decision = guard.check(2, loss=float("nan"), grad_norm=float("nan"), batch_index=2)
print(decision.action, "to step", decision.to_step)
print([e for e in guard.events if e["kind"] == "bad_checkpoint"])

# %% tags=["nbval-check-output"]
print("exp_avg_sq is inf, the weight is not:",
      bool(torch.isinf(opt.state[net.weight]["exp_avg_sq"]).all())
      and bool(torch.isfinite(net.weight).all()))
print("the guard rolls back past state 2, to state 1:",
      (decision.action, decision.to_step) == ("rollback", 1))
print("state 2 is logged as a bad checkpoint:",
      [e["step"] for e in guard.events if e["kind"] == "bad_checkpoint"] == [2])

# %% [markdown]
# ## 6. Exercise: a resume that is bit-exact
#
# The real cure for sections 1 and 2 is a resume that loses nothing. Its proof is
# strong: a run interrupted and resumed gives **the same bits** as one that was never
# interrupted. Megatron-LM's checkpoint holds the model, the optimizer's state, the
# `opt_param_scheduler` state and the Python, NumPy, torch and CUDA RNG states
# (`generate_state_dict` and `get_rng_state` in `megatron/training/checkpointing.py`);
# PyTorch's recipe *Saving and loading a general checkpoint* says to save the
# optimizer's state_dict besides the model's.
#
# Write `save_state` (returns one dict) and `load_state` (puts it back) for a plain
# PyTorch loop with a model, an AdamW, a `LambdaLR` warmup, a `GradScaler` and dropout
# (which draws from the global RNG). The scaler starts at 2^120 and doubles its scale
# every 3 clean steps, so it reaches fp32's ceiling and skips steps, as a GradScaler
# does under fp16's 65504. The check trains 40 steps straight, then 20 steps, your
# save, `torch.save`, `torch.load(weights_only=True)`, fresh objects, your load, 20
# more, and compares every loss and weight bit for bit.

# %%
def save_state(model, optimizer, scheduler, scaler):
    """Everything the next 20 steps depend on, as one dict of plain state."""
    ### BEGIN SOLUTION
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "rng": torch.get_rng_state()}
    ### END SOLUTION


def load_state(state, model, optimizer, scheduler, scaler):
    """Put `state` back into freshly built objects."""
    ### BEGIN SOLUTION
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"])
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def build():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(),
                                torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**120, growth_interval=3)
    return model, optimizer, scheduler, scaler


def train(objects, first, last):
    model, optimizer, scheduler, scaler = objects
    losses = []
    for step in range(first, last):
        data = torch.Generator().manual_seed(step)  # the batch of a step, as a loader's
        x = torch.randn(16, 8, generator=data)
        y = x.sum(1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        losses.append(loss.item())
    return losses


STRAIGHT = build()
WANT = train(STRAIGHT, 0, 40)  # the run that was never interrupted


def resumed_run():
    """20 steps, your save, a round trip through torch.save / load, your load, 20 more."""
    first = build()
    losses = train(first, 0, 20)
    buffer = io.BytesIO()
    torch.save(save_state(*first), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    torch.manual_seed(123)  # a new process: its RNG is not the old one's
    second = build()
    torch.manual_seed(123)
    load_state(state, *second)
    return losses + train(second, 20, 40), second[0].state_dict()


def resume_test(result):
    got, weights = result
    if got != WANT:
        k = next(i for i, (a, b) in enumerate(zip(got, WANT, strict=True)) if a != b)
        return (f"the losses differ from step {k} (resumed at 20): {got[k]!r} against "
                f"{WANT[k]!r}; what else does step {k} depend on?")
    for (n, a), b in zip(weights.items(), STRAIGHT[0].state_dict().values(), strict=True):
        if not torch.equal(a, b):
            return f"the losses match but the weights {n} differ"
    return None


check("bit_exact_resume", resumed_run, test=resume_test,
      hints=["A resume is exact only if every object whose state changes during training "
             "comes back: the weights, Adam's m, v and step count, the schedule's step, the "
             "loss scaler's scale, and the random numbers dropout will draw.",
             "Each of model, optimizer, scheduler and scaler has a state_dict and a "
             "load_state_dict method; the global RNG has torch.get_rng_state and "
             "torch.set_rng_state.",
             "save_state returns one dict with a key per object plus one for the RNG state; "
             "load_state reads the same keys back, one load_state_dict per object, and "
             "restores the RNG last."],
      solution="""\
# save_state
return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
        "rng": torch.get_rng_state()}
# load_state
model.load_state_dict(state["model"])
optimizer.load_state_dict(state["optimizer"])
scheduler.load_state_dict(state["scheduler"])
scaler.load_state_dict(state["scaler"])
torch.set_rng_state(state["rng"])""")

# %% [markdown]
# Leave out one part and rerun the check: which step differs first tells you what it
# was. (On a GPU add `torch.cuda.get_rng_state()`; with a data loader, its position.)

# %% [markdown]
# ## 7. On call: three resumed runs
#
# Three jobs were preempted and resumed by code you have not read (`resumed_runs`). The
# job log says where each restarted. You have the checkpoint each resumed from and the
# run record after it: what the checkpoint saved, the LR the resumed run used, and its
# loss around the restart. The restart event is left out on purpose: not every
# framework writes one.

# %%
from nanlab.course.questions.lab13 import LOST, resumed_runs

resumes = {}
for run_name, run in resumed_runs().items():
    at = next(e["step"] for e in run.record.events if e["kind"] == "restart")
    saved = run.trainer.checkpoints.load(run.trainer.checkpoints.nearest(at))
    adam_count = min(int(s["step"]) for s in saved["optimizer"]["state"].values())
    run_losses, run_lrs = run.record.losses(), run.record.column("lr")
    level = np.median(run_losses[at - 10:at])
    top = at + int(np.argmax(run_losses[at:at + 40]))
    resumes[run_name] = {"LR saved in the checkpoint": saved["scheduler"]["_last_lr"][0],
                         "LR after the restart": float(run_lrs[at]),
                         "LR 20 steps later": float(run_lrs[at + 20]),
                         "peak / loss before": float(run_losses[top] / level),
                         "steps to the peak": top - at}
    print(f"{run_name}: restarted before step {at}; the checkpoint holds {sorted(saved)}, "
          f"Adam's step count {adam_count}")
    for row, value in resumes[run_name].items():
        print(f"   {row:27} {value:.3g}")
print("\nLOST:")
for state, meaning in LOST.items():
    print(f"   {state:12} {meaning}")

# %% [markdown]
# **Exercise · what did the resume lose?** For each run, one of the `LOST` keys:
# return `{"resume P": state, "resume Q": state, "resume R": state}`.

# %%
def my_lost_state():
    """{run: the name of the state its resume lost}."""
    ### BEGIN SOLUTION
    # P: the LR after the restart is not the one saved, and the loss peaks late (warmup).
    # Q: the LR goes on as saved, but the loss jumps at once: every weight moved by lr.
    # R: the LR goes on as saved and the loss does not jump.
    return {"resume P": "lr_schedule", "resume Q": "adam_state", "resume R": "nothing"}
    ### END SOLUTION


# %% tags=["nbval-check-output"]
from nanlab.course.questions.lab13 import judge_lost

check("lost_state", my_lost_state, test=lambda got: judge_lost(got, resumes),
      hints=["Compare each run with what its checkpoint saved: which runs go on with the "
             "LR the checkpoint held?",
             "Sections 1 and 2 found two timings: a jump at the first steps after the "
             "restart, and one about 20 steps later. Which one does each run show?",
             "The checkpoint holds every piece of state in all three runs; what differs is "
             "what the resume code put back, and each lost piece leaves its own mark in "
             "the LR or the loss."],
      solution="""\
# P: the LR after the restart is not the one saved, and the loss peaks late (warmup).
# Q: the LR goes on as saved, but the loss jumps at once: every weight moved by lr.
# R: the LR goes on as saved and the loss does not jump.
return {"resume P": "lr_schedule", "resume Q": "adam_state", "resume R": "nothing"}""")

# %% [markdown]
# ## 8. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("13-fresh-adam-first-step")

# %%
practice("13-which-state-was-lost")

# %% [markdown]
# Section 3's signature has no restart in it at all: the last question asks which
# evidence names it.

# %%
practice("13-mystery-wake-up")

# %% [markdown]
# ## Summary
# - A fresh AdamW's first update is `lr · sign(g)` on every weight (bias correction):
#   a resume without the optimizer state spikes one step after the restart.
# - A resume without the scheduler state reruns warmup and returns to the peak LR: a
#   spike about 20 steps later. The restart event's `optimizer_steps` and
#   `schedule_step` say which.
# - A layer frozen by a gradient mask wakes up under b2 = 0.999 with full-size steps;
#   b2 = 0.95 shrinks the jump; a warmup, reset or update clip for that layer targets it.
# - "Last good" means weights *and* optimizer state finite.
# - Prove a resume: interrupted and straight runs, bit for bit.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
