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
# **Source notebook (solution version).** This pair, `solutions/03_learning_rate.py` and
# `solutions/03_learning_rate.ipynb`, is the single source of `labs/03_learning_rate.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/03_learning_rate.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 03 · The learning rate (学习率): spikes, divergence, NaN, warmup
#
# A learning rate that is too high is the commonest cause of a loss spike (损失尖峰)
# and one of the commonest causes of a NaN. It does not look the same every time.
# In this lab:
#
# 1. **three faces of one cause**: a spike that recovers by itself, a divergence
#    (发散) that never comes back, and a NaN;
# 2. **the SOP on the NaN**: turning AMP off makes the NaN go away, and that is a
#    *hint, not proof*; LR ÷ 10 is the cure, proven with the same seed;
# 3. **warmup + cosine** (学习率预热 + 余弦退火): why AdamW needs warmup, and you
#    write the schedule;
# 4. **gradient clipping** (梯度裁剪): what it cures and what it does not, with AdamW;
# 5. **the spike detector**, and the honest finding that a spike the model
#    recovers from by itself may be better left alone;
# 6. **practice** in interview form.
#
# CPU only, about 45 minutes; the runs take a few seconds each. Cells marked
# `# YOUR CODE HERE` are yours; the cell after each one checks it.

# %% [markdown]
# ## Setup
# Every run in this lab is the toy Transformer of Lab 00 on the counting task,
# 200 steps, seed 0, changed in one way only. The clean run is the yardstick.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from nanlab import faults
from nanlab.course import check, hint, start_lab  # noqa: F401  (hint: yours, when stuck)
from nanlab.faults import run_fault
from nanlab.guard import Guard
from nanlab.signals import final_loss, find_spikes, recovery_steps
from nanlab.train import TrainConfig, lr_factor
from nanlab.viz import plot_compare, plot_loss, plot_lr

start_lab("03_learning_rate")
clean = run_fault(None)  # the clean baseline: AdamW, LR 5e-3, 20 warmup steps, cosine
clean_losses = clean.record.losses()
print(f"clean run: loss {clean_losses[0]:.2f} -> {final_loss(clean_losses):.3f}")

# %% [markdown]
# ## 1. Three faces of a learning rate that is too high
#
# ### 1a. A spike that recovers (`lr_jump`)
# A scheduler glitch: at step 100 the learning rate is 10x what it should be, for
# one step, then it is back to normal. Think of a restart that reloaded the
# optimizer but not the schedule, or a config typo caught one step later.

# %%
jump = run_fault("lr_jump")  # at_step=100, factor=10, length=1
jump_losses = jump.record.losses()
fig = plot_loss(jump.record, title="lr_jump: the LR is 10x for the one step 100")

# %% [markdown]
# The orange circles are the steps `find_spikes` flags: a loss more than 3x the
# median of the 20 steps before it. Now read the record around the first one,
# with the learning-rate column beside the loss.

# %%
spikes = find_spikes(jump_losses)
first = spikes[0]
for r in jump.record.steps[first - 3:first + 3]:
    print(f"step {r['step']:>3}  lr {r['lr']:.5f}  loss {r['loss']:7.3f}  "
          f"grad_norm {r['grad_norm']:6.2f}")

# %% tags=["nbval-check-output"]
lr = jump.record.column("lr")
glitch = int(np.argmax(lr[1:] / lr[:-1])) + 1  # the step whose LR jumped most
back = recovery_steps(jump_losses, first)
print("first spike at step:", first)
print("the LR jumps at step:", glitch, f"(x{lr[glitch] / lr[glitch - 1]:.0f})")
print("the spike comes one step after the jump:", first == glitch + 1)
print("loss back to its pre-spike level within 20-80 steps:", 20 <= back <= 80)

# %% [markdown]
# **Why one step later.** The loss of step *t* is computed *before* the update of
# step *t*, so it shows the effect of every update up to *t − 1*. Row 100 holds
# the 10x learning rate *and* a normal loss; the damage shows in row 101. The rule
# to remember: **a spike at step t points at the update of step t − 1** (its
# learning rate, its gradient, its batch). The guard in section 5 uses the same
# rule when it picks a checkpoint to go back to.
#
# The model recovers by itself: the loss is back at its pre-spike level about 40
# steps later. But the recovery is not free. Compare with the clean run at the
# same steps:

# %%
for step in (100, 101, 150, 199):
    print(f"step {step}: clean {clean_losses[step]:.3f}   lr_jump {jump_losses[step]:.3f}")

# %% tags=["nbval-check-output"]
print("at step 199 lr_jump is still more than 3x above the clean run:",
      bool(jump_losses[199] > 3 * clean_losses[199]))

# %% [markdown]
# One bad update cost about 40 steps of progress, and with the cosine schedule
# already decaying, the run never catches up inside 200 steps. In a long run the
# same spike would be a blip; in a short fine-tune it is most of the budget.
#
# ### 1b. A divergence that does not recover (`high_lr_adam`)
# Now the learning rate is too high all the time: AdamW at 0.1, twenty times the
# baseline, in fp32.

# %% tags=["nbval-check-output"]
adam = run_fault("high_lr_adam")
adam_losses = adam.record.losses()
print("first non-finite step:", adam.record.first_nonfinite_step)
print("final loss more than 10x the clean run's:",
      bool(final_loss(adam_losses) > 10 * final_loss(clean_losses)))
print("spikes found:", len(find_spikes(adam_losses)))

# %% [markdown]
# No NaN, no inf, no spike: a monitor that only watches for NaN stays silent while
# the model learns nothing. Why no NaN? Adam's update is about `lr · m / √v`, and
# `m / √v` is close to ±1, so every weight moves by about the learning rate each
# step; with this toy's β2 = 0.95 never more (section 3 derives the bound, which is
# about 3.16 lr with PyTorch's default β2 = 0.999). LayerNorm then rescales the activations, so nothing grows
# towards the float32 limit. The weights are simply kicked around too hard to
# settle: the loss climbs and stays high.
#
# ### 1c. A NaN (`high_lr`)
# The same mistake under fp16 mixed precision (混合精度): AdamW at 0.2 with fp16
# autocast and its GradScaler. We run the first 60 steps of the 200-step run
# (`decay_steps=200` keeps the schedule of the full run).

# %% tags=["nbval-check-output"]
nan_run = run_fault("high_lr", steps=60, decay_steps=200)
rows = nan_run.record.steps
bad = nan_run.record.first_nonfinite_step
weights_finite = all(bool(torch.isfinite(p).all())
                     for p in nan_run.trainer.model.parameters())
print("first non-finite step between 20 and 40:", 20 <= bad <= 40)
after = rows[bad:]
print("non-finite steps from there on: more than 80 %:",
      sum(not r["finite"] for r in after) > 0.8 * len(after))
print("every non-finite step's update skipped by the GradScaler:",
      all(r["skipped"] for r in after if not r["finite"]))
print("weights still finite:", weights_finite)

# %% [markdown]
# Where was the first non-finite value made? `locate` replays the first bad step
# from the nearest checkpoint, exactly, with a hook on every module and every op
# (Lab 02 introduced it):

# %%
from nanlab.debug import locate

loc = locate(nan_run.trainer)
print(loc.report(max_events=5))

# %% tags=["nbval-check-output"]
print("first non-finite value in:", loc.pass_name, "/", loc.module_type)
print("made by op:", loc.first_op.op)
print("inf came before NaN:", loc.inf_before_nan)

# %% [markdown]
# The oversized updates grew the attention weights until a score `q · k` (a batched
# matmul, `aten.bmm`) passed fp16's 65504 and became inf. Even a *stable* softmax
# cannot survive that: it subtracts the row max, and `inf − inf` is NaN. The
# GradScaler skips every update whose gradients are not finite, so the weights stay
# finite, but they are exactly the weights that overflow: nearly every later
# step overflows again and the run is frozen. (Lab 04 follows the loss scale down as it
# halves at every one of those steps.)
#
# The three side by side:

# %%
fig = plot_compare({"clean (LR 5e-3)": clean.record,
                    "lr_jump: one step at 10x": jump.record,
                    "high_lr_adam: LR 0.1, fp32": adam.record,
                    "high_lr: LR 0.2, fp16": nan_run.record})

# %% [markdown]
# | shape | the loss curve | the grad norm | typical cause |
# |---|---|---|---|
# | **spike** (尖峰) | jumps, then comes back down | jumps with it | one bad update or batch |
# | **divergence** (发散) | rises or stalls, finite | stays high | LR too high throughout |
# | **NaN** | finite, then NaN for good | NaN | a divergence meeting fp16's limit |
#
# The third row is the trap for the next section: the NaN *looks* like a
# precision problem, because precision is where it became visible.
#
# ## 2. The SOP on the NaN: AMP off is a hint, not proof
# The SOP checks, cheapest first: **data → AMP off → LR ÷ 10 → grad norms →
# init / eps**. Step 1, the data: rebuild the batch of the first bad step and check
# it (`batch_problems` is nanlab's batch checker from Lab 02).

# %% tags=["nbval-check-output"]
from nanlab.faults import batch_problems

batch = nan_run.trainer.batches(rows[bad]["batch"])
print("problems in the batch of the first NaN step:", batch_problems(batch, 32))
print("loss of the step before it finite:", math.isfinite(rows[bad - 1]["loss"]))

# %% [markdown]
# The batch is clean. Step 2 is to turn AMP off (关闭混合精度) and step 3 to divide
# the LR by 10 (学习率 ÷ 10), each a controlled replay: same seed, same data, one
# change.
#
# **Exercise 1 · predict.** Before running them, predict four outcomes: return a
# dict mapping each of the `STATEMENTS` to `True` or `False`. "Ends below 0.1"
# means the mean loss of the last 10 steps; the clean run ends near 0.02.

# %%
STATEMENTS = [
    "AMP off (fp32, LR 0.2): no NaN in 200 steps",
    "AMP off (fp32, LR 0.2): loss ends below 0.1",
    "LR / 10 (fp16 kept, LR 0.02): no NaN in 200 steps",
    "LR / 10 (fp16 kept, LR 0.02): loss ends below 0.1",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS (the high_lr run, fp16)."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [True, False, True, True], strict=True))
    ### END SOLUTION


# %% [markdown]
# Now measure. `fixes=` applies the SOP's cures as nanlab defines them
# (`nanlab.faults.fixes`): `amp_off` trains in fp32, `lr_div10` divides the LR by 10 and
# changes nothing else (fp16 and the GradScaler stay).

# %%
amp_off = run_fault("high_lr", fixes=["amp_off"])
div10 = run_fault("high_lr", fixes=["lr_div10"])
for name, run in (("AMP off", amp_off), ("LR / 10", div10)):
    c = run.trainer.config
    print(f"{name:8} precision {c.precision}, lr {c.lr:g}: first non-finite step "
          f"{run.record.first_nonfinite_step}, final loss "
          f"{final_loss(run.record.losses()):.3f}")


# %% tags=["nbval-check-output"]
def measured(run):
    return (run.record.first_nonfinite_step is None,
            final_loss(run.record.losses()) < 0.1)


actual = dict(zip(STATEMENTS, [*measured(amp_off), *measured(div10)], strict=True))
check("my_predictions", my_predictions, actual, hints=[
    "fp32 reaches 3.4e38: can an attention score of 1e5 overflow it?",
    "Does fp32 make an update of the wrong size any smaller?",
])

# %% [markdown]
# **AMP off removed the NaN and kept the disease.** In fp32 the scores that
# overflowed fp16's 65504 fit easily (the limit is 3.4e38), so nothing becomes inf;
# the weights are still thrown around by updates twenty times too large, and the
# run diverges exactly like `high_lr_adam`. "The NaN disappears without AMP, so it
# was fp16 overflow" is the inference the article makes; it is a strong hint that
# fp16's range is *involved*, not proof that it is the *cause*. Turning AMP off
# changes several things at once: the range (no overflow), the rounding of every
# op, and the GradScaler with its skipped steps. Any of them can hide a different
# cause.
#
# The run that keeps fp16 and divides the LR by 10 trains normally: the cause was
# the learning rate, and fp16 only made it loud.
#
# **The proof (claims V1, V2).** Same seed, same data order, same number of steps;
# compare the loss at the *same step* against the clean run, not "the curve looks
# fine now".

# %%
fig = plot_compare({"clean": clean.record, "high_lr (fp16, LR 0.2)": nan_run.record,
                    "AMP off (fp32, LR 0.2)": amp_off.record,
                    "LR / 10 (fp16, LR 0.02)": div10.record})

# %%
for step in (50, 100, 150, 199):
    print(f"step {step:>3}: clean {clean_losses[step]:.3f}   "
          f"LR / 10 {div10.record.losses()[step]:.3f}   "
          f"AMP off {amp_off.record.losses()[step]:.3f}")

# %% tags=["nbval-check-output"]
d, a = div10.record.losses(), amp_off.record.losses()
print("LR / 10 within 2x of the clean loss at step 199:",
      bool(d[199] < 2 * clean_losses[199]))
print("AMP off above 1.0 at every step from 100 on:", bool((a[100:] > 1.0).all()))

# %% [markdown]
# LR ÷ 10 lands close to the clean run at the same step (its LR, 0.02, is still 4x
# the baseline's). Note what the SOP step says: *divide by 10*, a diagnostic
# jump large enough to tell "too high" from "something else", not a tuned value.
# The article's recovery recipe (claim M1) is the same move after a NaN in a real
# run: roll back to the last good checkpoint, restart at LR ÷ 10.
#
# ## 3. Warmup and cosine decay
# ### Why AdamW needs warmup
# Adam divides each gradient by the running root-mean-square of that weight's past
# gradients. At the first step there is no past: `m / √v` is `g / |g|`, so **every
# weight moves by the full learning rate**, whatever its gradient. Watch one AdamW
# step on a fresh layer with GPT-2's init (std 0.02) at LR 0.02:

# %%
torch.manual_seed(0)
layer = torch.nn.Linear(64, 64)
torch.nn.init.normal_(layer.weight, std=0.02)  # GPT-2 init
before = layer.weight.detach().clone()
opt = torch.optim.AdamW(layer.parameters(), lr=0.02, weight_decay=0.0)
layer(torch.randn(32, 64)).pow(2).mean().backward()
g = layer.weight.grad.abs()
opt.step()
moved = (layer.weight.detach() - before).abs()
print(f"gradients from {g.min().item():.1e} to {g.max().item():.1e}")
print(f"every weight moved by {moved.min().item():.4f} to {moved.max().item():.4f}")

# %% tags=["nbval-check-output"]
print("gradients span more than 3 powers of ten:",
      bool(math.log10(g.max() / g.min()) > 3))
print("every weight moved by between 0.9 x LR and LR:",
      bool((moved > 0.9 * 0.02).all() and (moved <= 0.02 * 1.0001).all()))


# %% [markdown]
# A step of 0.02 on weights whose typical size is 0.02: one update rewrites every
# weight of a fresh model by about 100 %, in directions set by one noisy batch.
# After a few dozen steps `v` has seen enough gradients to be a real average, and
# the updates become sensible. **Warmup** (学习率预热) keeps the LR small for
# those first steps; **cosine decay** (余弦退火) then lowers it smoothly so that the
# last steps fine-tune instead of jumping around the minimum.
#
# ### How large can an Adam step be? Not "at most the LR"
# The first step is exactly `lr` per weight. Later steps are not capped at the LR.
# Kingma & Ba (2015, "Adam: a method for stochastic optimization", section 2.1)
# bound the step of one coordinate, with bias correction and ε = 0, by
#
# $$|\Delta_t| \le \mathrm{lr}\cdot\max\left(1,\ \frac{1-\beta_1}{\sqrt{1-\beta_2}}\right)$$
#
# and the worst case is a coordinate whose gradient was 0 for a long time and is
# suddenly large: `m` takes `(1 − β1)·g` of it at once, while `v`, still
# remembering the quiet steps, takes only `(1 − β2)·g²`. With PyTorch's default
# betas (0.9, 0.999) that is 0.1 / √0.001 ≈ 3.16 lr; with β2 = 0.95, the value in
# nanlab's `TrainConfig` (`nanlab/config.py`, printed below), the ratio is
# 0.1 / √0.05 ≈ 0.45 and the bound is the LR itself. So the "Adam moves each
# weight by at most about the LR" that this course leans on is a property of
# β2 = 0.95, not of Adam. A large β2 means a `v` that lags behind a sudden change
# of the gradients, and that lag is one account of Adam-driven loss spikes:
# Wortsman et al. 2023 (section 4, citing Shazeer & Stern and Cohen et al.)
# note that lowering β2 removes such spikes. Measured: 3000 quiet steps, then one
# gradient of 1, on a single weight at LR 1 (ε = 1e-12, so 0 / 0 cannot occur).

# %%
def worst_adam_step(betas, quiet_steps=3000, lr=1.0):
    """The size of the Adam step on a gradient of 1 after `quiet_steps` zero gradients."""
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([w], lr=lr, betas=betas, eps=1e-12)
    for _ in range(quiet_steps):
        w.grad = torch.zeros(1)
        opt.step()
    before = w.detach().clone()
    w.grad = torch.ones(1)
    opt.step()
    return float((w.detach() - before).abs())


torch_betas = torch.optim.Adam([torch.zeros(1)]).defaults["betas"]
nanlab_betas = (TrainConfig().beta1, TrainConfig().beta2)
steps_seen = {}
for name, betas in (("PyTorch default", torch_betas), ("nanlab TrainConfig", nanlab_betas)):
    bound = max(1.0, (1 - betas[0]) / math.sqrt(1 - betas[1]))
    steps_seen[name] = (worst_adam_step(betas), bound)
    print(f"{name:18} betas {betas}: step after the quiet stretch "
          f"{steps_seen[name][0]:.3f} x lr, bound {bound:.3f} x lr")

# %% tags=["nbval-check-output"]
print("PyTorch's betas: the step is more than 3 x lr:", steps_seen["PyTorch default"][0] > 3)
print("nanlab's betas: the step is below the lr:", steps_seen["nanlab TrainConfig"][0] < 1)
print("both within the Kingma & Ba bound:",
      all(step <= bound * 1.0001 for step, bound in steps_seen.values()))

# %% [markdown]
# **Exercise 2 · the schedule.** Write `lr_at(step, warmup, total, base_lr,
# min_ratio)`, the learning rate at `step` of nanlab's schedule:
#
# - **warmup**, for `step < warmup`: linear, `base_lr · (step + 1) / warmup`, so
#   step 0 already trains and step `warmup − 1` reaches `base_lr`;
# - **cosine**, from `step = warmup` on: with
#   `progress = (step − warmup) / (total − warmup)`, capped at 1, the LR goes from
#   `base_lr` at progress 0 down to `min_ratio · base_lr` at progress 1 along half
#   a cosine, `(1 + cos(π · progress)) / 2`, and stays there after `total`.

# %%
def lr_at(step, warmup, total, base_lr, min_ratio):
    """Linear warmup over `warmup` steps, then cosine decay to min_ratio * base_lr."""
    ### BEGIN SOLUTION
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))  # 1 -> 0
    return base_lr * (min_ratio + (1 - min_ratio) * cosine)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
SCHEDULES = [(20, 200, 5e-3, 0.1), (0, 100, 1e-3, 0.0), (10, 50, 0.02, 0.5)]


def reference(step, warmup, total, base_lr, min_ratio):
    config = TrainConfig(steps=total, warmup_steps=warmup, lr=base_lr,
                         min_lr_ratio=min_ratio, progress=False)
    return base_lr * lr_factor(step, config)  # what the trainer uses


def judge_schedule(got):
    for case, values in zip(SCHEDULES, got, strict=True):
        for step, value in enumerate(values):
            want = reference(step, *case)
            if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-12):
                return (f"warmup, total, base_lr, min_ratio = {case}: step {step} "
                        f"gives {value:.6g}, expected {want:.6g}")
    return None


check("lr_at", lambda: [[lr_at(s, *case) for s in range(case[1] + 5)]
                        for case in SCHEDULES],
      test=judge_schedule, hints=[
          "Two branches: step < warmup, and everything after.",
          "Warmup: base_lr * (step + 1) / warmup. After: progress = (step - warmup) / "
          "(total - warmup), then min(1.0, progress).",
          "base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * "
          "progress)))",
      ])

# %% [markdown]
# Your schedule on top of the learning rate the clean run actually recorded (its
# `lr` column):

# %%
fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
plot_lr(clean.record, ax=ax)
ax.lines[0].set_label("recorded by the clean run")
try:
    mine = [lr_at(s, 20, 200, 5e-3, 0.1) for s in range(200)]
    ax.plot(range(200), mine, "k--", lw=1, label="your lr_at")
except NotImplementedError:
    ax.set_title("Recorded schedule (fill in lr_at above to draw yours on top)")
ax.legend(fontsize=8);

# %% [markdown]
# ### No warmup: the same peak LR, the first 20 steps decide the run
# `no_warmup` trains at LR 0.02 (4x the baseline) with `beta2 = 0.99` (a slower
# second-moment average, common in practice) and **no** warmup. The fix
# `warmup_cosine` adds 20 warmup steps and changes nothing else: same peak LR,
# same seed, same data.

# %% tags=["nbval-check-output"]
cold = run_fault("no_warmup")
warm = run_fault("no_warmup", fixes=["warmup_cosine"])
print("warmup steps:", cold.trainer.config.warmup_steps, "vs",
      warm.trainer.config.warmup_steps)
print("same peak LR:", cold.trainer.config.lr == warm.trainer.config.lr)
cold_losses = cold.record.losses()
print("no warmup: the loss rises above its start within 5 steps:",
      bool(cold_losses[1:6].max() > cold_losses[0]))
print("no warmup, final loss above 1.0:", bool(final_loss(cold_losses) > 1.0))
print("with warmup, final loss below 0.2:", bool(final_loss(warm.record.losses()) < 0.2))

# %%
fig = plot_compare({"no warmup (LR 0.02 from step 0)": cold.record,
                    "20 warmup steps, same peak LR": warm.record})


# %% [markdown]
# Without warmup the loss goes *up* within the first few steps: the first
# full-size updates threw the fresh weights far off. Then the gradient norm drops
# and stays low: the model has settled in a poor region and crawls out of it very
# slowly at this LR. With warmup, the same LR is harmless once it is reached,
# because by then Adam's `v` is a real average.
# (LR ÷ 10 also cures `no_warmup`, more slowly: `nanlab matrix --faults no_warmup`.)
#
# ## 4. Gradient clipping: what it cures, what it does not
# `torch.nn.utils.clip_grad_norm_(params, max_norm)` computes the **global** norm
# of all gradients together and, when it is above `max_norm`, multiplies *every*
# gradient by `max_norm / norm`. The direction is kept; only the length is capped.
# The article (claim M6) recommends `max_norm = 1.0`. What OPT-175B really did:
# the paper (Zhang et al. 2022, arXiv 2205.01068, sections 2.2 and 2.5) clips at
# 1.0, lowered to 0.3 early in training because that helped stability, and cut the
# LR by hand several times, restarting from an earlier checkpoint after each loss
# divergence. The 2.5 seen in some summaries belongs to the earlier, abandoned 11.x
# runs, which started at clip 2.5 and went to 1.5, then 1.0 (metaseq,
# `projects/OPT/chronicles/10_percent_update.md`); in the final 12.x run the LR came
# down by 10 % at run 12.43 and to 2/3 of GPT-3's at 12.45.2 (`56_percent_update.md`).
#
# **Exercise 3 · clip by hand.** Write `clip_by_global_norm(grads, max_norm)`: it
# returns `(clipped, total_norm)`, a new list of tensors and the global norm
# *before* clipping, as a float. Use PyTorch's coefficient,
# `max_norm / (total_norm + 1e-6)`, and apply it only when it is below 1.

# %%
def clip_by_global_norm(grads, max_norm):
    """(clipped copies of grads, global L2 norm before clipping)."""
    ### BEGIN SOLUTION
    total = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        return [g * coef for g in grads], total
    return [g.clone() for g in grads], total
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def torch_clip(grads, max_norm):
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return [p.grad for p in params], float(norm)


gen = torch.Generator().manual_seed(0)
CLIP_CASES = {"big gradients, clipped": ([torch.randn(8, 8, generator=gen) * 3,
                                          torch.randn(8, generator=gen)], 1.0),
              "small gradients, left alone": ([torch.randn(4, generator=gen) * 1e-3], 1.0),
              "one huge tensor among small": ([torch.full((3,), 1e4),
                                               torch.randn(5, generator=gen)], 0.5)}


def judge_clip(got):
    for case, (grads, max_norm) in CLIP_CASES.items():
        mine, norm = got[case]
        want, want_norm = torch_clip(grads, max_norm)
        if not math.isclose(float(norm), want_norm, rel_tol=1e-5):
            return f"{case}: total norm {float(norm):.6g}, expected {want_norm:.6g}"
        same = len(mine) == len(want) and all(
            torch.allclose(m, w, rtol=1e-5, atol=1e-8)
            for m, w in zip(mine, want, strict=True))
        if not same:
            return f"{case}: the clipped gradients differ from clip_grad_norm_'s"
    return None


check("clip_by_global_norm",
      lambda: {c: clip_by_global_norm(g, m) for c, (g, m) in CLIP_CASES.items()},
      test=judge_clip, hints=[
          "The global norm is sqrt of the sum over all tensors of (g ** 2).sum().",
          "coef = max_norm / (total + 1e-6); multiply every tensor by coef only if "
          "coef < 1.",
      ])


# %% [markdown]
# ### With SGD clipping caps the step; with AdamW it barely touches it
# Clipping rescales the gradient. For SGD the update *is* the gradient times the
# LR, so clipping caps the update. Adam divides the gradient by the running RMS of
# the gradients, so if every gradient is scaled by the same factor, `m / √v` does
# not change at all. Five steps on a 64 x 64 weight, with the gradients at their
# normal size, 100x larger, and 100x larger but clipped to 1.0:

# %%
def update_size(optimizer, grad_scale, clip=None, steps=5):
    """Norm of the total change of one weight after a few steps."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 64) * 0.02)
    start = w.detach().clone()
    opt = (torch.optim.SGD([w], lr=0.01) if optimizer == "SGD"
           else torch.optim.AdamW([w], lr=0.01, weight_decay=0.0))
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        w.grad = torch.randn(64, 64, generator=gen) * grad_scale
        if clip:
            torch.nn.utils.clip_grad_norm_([w], clip)
        opt.step()
    return float((w.detach() - start).norm())


sizes = {}
for name in ("SGD", "AdamW"):
    sizes[name] = [update_size(name, 1), update_size(name, 100),
                   update_size(name, 100, clip=1.0)]
    print(f"{name:6} update norm: grads x1 {sizes[name][0]:8.3f}   x100 "
          f"{sizes[name][1]:8.3f}   x100 clipped to 1 {sizes[name][2]:8.3f}")

# %% tags=["nbval-check-output"]
sgd, adamw = sizes["SGD"], sizes["AdamW"]
print("SGD: 100x gradients make a 100x update:", math.isclose(sgd[1], 100 * sgd[0],
                                                              rel_tol=1e-3))
print("SGD: clipping shrinks it more than 100x:", sgd[2] < sgd[1] / 100)
print("AdamW: 100x gradients, the same update (within 0.1 %):",
      math.isclose(adamw[1], adamw[0], rel_tol=1e-3))
print("AdamW: clipped, still the same update (within 0.1 %):",
      math.isclose(adamw[2], adamw[0], rel_tol=1e-3))

# %% [markdown]
# So with AdamW, clipping does **not** make an update smaller when the learning
# rate is too high: the update is at most about `lr` per weight either way (with
# this toy's β2 = 0.95; the bound is derived in section 3). What it does
# do is keep one outlier step from dominating Adam's moment estimates (a single
# huge gradient inflates `v`, which then shrinks the next dozens of updates).
#
# The fault × fix matrix says the same on the real run. The `(none)` cell is
# this lab's `high_lr_adam` run judged by the matrix's rules; `run_cell` measures
# the `grad_clip` cell (clip at 1.0, everything else unchanged).

# %%
from nanlab.faults.matrix import Cell, Matrix, judge, run_cell

clean_final = final_loss(clean_losses)
threads = torch.get_num_threads()
outcome, evidence = judge(adam, clean_final, faults.FAULTS["high_lr_adam"].signature)
cells = [Cell("high_lr_adam", None, outcome, evidence),
         run_cell("high_lr_adam", "grad_clip", 200, 0, clean_final)]
torch.set_num_threads(threads)  # run_cell uses one thread, like a matrix worker
matrix = Matrix(cells, clean_final, steps=200, seed=0)
print(matrix.table())
print()
print(matrix.evidence())

# %% tags=["nbval-check-output"]
print("high_lr_adam:", {fix: matrix.outcome("high_lr_adam", fix)
                        for fix in (None, "grad_clip")})
print("with clipping, final loss still more than 10x the clean run's:",
      matrix.cells[("high_lr_adam", "grad_clip")].final_loss > 10 * clean_final)

# %% [markdown]
# Still diverged, as the five-step experiment predicted: clipping does not cure a
# learning rate that is too high. On `lr_jump` (`nanlab matrix --faults lr_jump
# --fixes grad_clip`, about a minute) clipping gives a smaller spike that recovers
# faster, but still a spike; and at `max_norm = 1.0` the clip is active on almost
# every step of that run (the clean grad norm is 1 to 12), so it changes the whole
# trajectory, not only the bad step.
#
# Clipping is cheap insurance against a rare outlier gradient, and essential with
# SGD-like optimizers; it is not a cure for the LR. With SGD, a clip that fires on
# every step effectively *sets* the step size, so the clip value becomes part of
# the learning rate. With AdamW it does not (the five-step experiment above: a
# common factor cancels in `m / √v`); a clip that fires on every step instead
# reweights the steps against each other, the large-gradient ones counting less in
# `m` and `v`. Either way, log how often it fires.
#
# ## 5. The spike detector, and when to leave a spike alone
# nanlab's guard has a loss-spike detector (损失尖峰检测): a running z-score over
# the last 20 finite losses, firing when a loss is more than 6 standard deviations
# *above* the window mean and at least 1.5x it (OLMo-core skips a step at 6 sigma
# over 128 steps; Megatron-LM flags a loss 10x the early maximum). What should it
# *do* on `lr_jump`? Two options: **skip** the update of the spiking step, or
# **recover**: roll back to the last checkpoint before it, skip the batches
# around it, and cut the LR if the failure comes back (PaLM's recipe, plus the
# article's LR ÷ 10).

# %%
skip_guard = Guard("skip", spike="skip")
skipped = run_fault("lr_jump", callbacks=skip_guard.callbacks())
recover_guard = Guard("recover", spike="recover")
recovered = run_fault("lr_jump", callbacks=recover_guard.callbacks())
for name, guard in (("skip", skip_guard), ("recover", recover_guard)):
    print(f"{name}: {guard.summary()}")
    for e in guard.events:
        if e["kind"] in ("guard", "rollback", "lr_cut"):
            detail = {k: e[k] for k in ("to_step", "factor") if k in e}
            print(f"   step {e['step']}: {e['kind']} {detail or ''} "
                  f"{e.get('reason', '')[:60]}")

# %%
ends = {"leave it alone": final_loss(jump_losses),
        "skip": final_loss(skipped.record.losses()),
        "recover": final_loss(recovered.record.losses())}
for name, value in ends.items():
    print(f"{name:15} final loss {value:.3f}")

# %% tags=["nbval-check-output"]
fired = [e["step"] for e in skip_guard.events if e["kind"] == "guard"]
print("the detector fired once, at the first spike step:", fired == [first])
print("skip: final loss within 20 % of leaving it alone:",
      abs(ends["skip"] - ends["leave it alone"]) < 0.2 * ends["leave it alone"])
print("recover: the failure came back after the first rollback:",
      recover_guard.counts["rollback"] >= 2)
print("recover: final loss above leaving it alone:",
      ends["recover"] > ends["leave it alone"])

# %%
fig = plot_compare({"leave it alone": jump.record, "Guard: skip the spike": skipped.record,
                    "Guard: recover (roll back)": recovered.record}, grad_norm=False)

# %% [markdown]
# The loss curve of the recover run shows what the guard did: the grey dashed
# branch is what it rolled back, the shaded spans where it went back to.

# %%
fig = plot_loss(recovered.record, title="lr_jump with Guard('recover', spike='recover')")

# %% [markdown]
# Neither action helped, and the reasons are worth an interview answer:
#
# - **Skip comes one step too late.** The spike at step 101 is the *result* of the
#   update of step 100 (section 1a). Dropping update 101 throws away one good
#   update and leaves the damage in place.
# - **Rolling back replays the glitch.** The checkpoint of step 100 is from just
#   before the bad update, but the learning rate is a function of the step
#   number: the replayed step 100 gets the same 10x LR and spikes again. Skipping
#   batches cannot help; the data was never the cause. The guard sees the failure
#   come back, goes back one checkpoint further, cuts the LR to a tenth, and the
#   rest of the run learns slowly at the cut LR: it ends worse than doing nothing.
#
# So a spike the model recovers from by itself is often best **left alone**:
# log it, alert on it, find its cause (here the scheduler), and act only if the
# loss does not come back down, or the spikes repeat. PaLM 540B, with about 20
# spikes, restarted about 100 steps before each and skipped 200 to 500 batches; the
# same batches did not spike when replayed from an earlier state, so data and model
# state *together* caused them. Rollback plus data skipping is for that kind of
# spike, and for NaN (after a NaN the weights are garbage and there is nothing to
# recover from but a checkpoint).
#
# ## 6. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import FreeText, KeyPoint, MultipleChoice, RootCause

MultipleChoice(
    "03-which-update",
    "The loss is normal at step 5,000 and spikes at step 5,001. Which optimizer "
    "update do you inspect first?",
    ["the update of step 5,000", "the update of step 5,001",
     "the update at the last checkpoint", "the first update after warmup"],
    answers=0,
    explanation="The loss of step t is computed before update t, so it shows the "
    "updates up to t - 1. Look at step 5,000's LR, grad norm and batch.",
    hints=["Is the loss of a step computed before or after that step's update?"],
)

# %%
MultipleChoice(
    "03-clip-adamw",
    "AdamW, learning rate 10x too high, the loss diverges. Does adding "
    "clip_grad_norm_(params, 1.0) fix it?",
    ["No: Adam divides by the RMS of past gradients, so scaled-down gradients "
     "give about the same update, about lr per weight",
     "Yes: clipping bounds every update to lr * 1.0",
     "Yes, but only in fp16",
     "No: clipping only works on the loss, not the gradients"],
    answers=0,
    explanation="Clipping rescales the gradient; Adam's m / sqrt(v) is invariant to "
    "a common rescaling. With SGD the answer would be different.",
    hints=["Scale every gradient by 0.01: what happens to m / sqrt(v)?"],
)

# %%
RootCause(
    "03-mystery-fp16",
    "Mystery: a Transformer trained in fp16 with a GradScaler goes NaN at step 26. "
    "What is the root cause? Tick the evidence that supports it.",
    ["dirty data", "learning rate too high", "fp16 overflow", "bad init",
     "LayerNorm eps too small"],
    answer="learning rate too high",
    evidence=["the batch of step 26 is clean",
              "with AMP off the loss stays finite but ends near 2.8 (clean: 0.02)",
              "with LR / 10, still in fp16, the run trains normally",
              "the first inf is an attention score",
              "the loss scale halves at every step after 26",
              "the loss at step 0 is about ln(vocab_size)"],
    supporting=["with AMP off the loss stays finite but ends near 2.8 (clean: 0.02)",
                "with LR / 10, still in fp16, the run trains normally"],
    explanation="fp16 is where the divergence became visible (an attention score "
    "past 65504), not why it happened: fp32 at the same LR diverges too, and LR / 10 "
    "cures it without leaving fp16. The clean batch only rules out data; the inf "
    "score and the halving scale describe the symptom, not the cause.",
    hints=["Which change cured it, and which only removed the NaN?",
           "Does an inf attention score tell you why the score grew?"],
)

# %%
FreeText(
    "03-amp-off-not-proof",
    "Interview: 'Our fp16 run went NaN; with AMP off the NaN is gone. So it was fp16 "
    "overflow, right?' Answer in three or four sentences.",
    key_points=[
        KeyPoint("a hint, not proof",
                 ("not proof", "not a proof", "hint", "not necessarily", "doesn't prove",
                  "does not prove", "不一定", "不能证明", "线索"),
                 "say whether the experiment proves the cause"),
        KeyPoint("fp32 can hide a divergence: finite but not learning",
                 ("diverge", "still high", "loss stays high", "finite but",
                  "not learning", "doesn't learn", "发散", "不收敛"),
                 "say what the loss does in fp32 when the LR is the cause"),
        KeyPoint("control experiment: keep AMP, LR / 10",
                 ("lr / 10", "lr/10", "divide the lr", "lower the lr",
                  "lower learning rate", "reduce the learning rate", "learning rate",
                  "降低学习率", "学习率"),
                 "name the replay that separates LR from precision"),
        KeyPoint("compare with the same seed at the same step",
                 ("same seed", "same step", "clean run", "baseline", "相同种子",
                  "同一步"),
                 "say how you prove the fix"),
    ],
    model_answer="Not necessarily: the NaN going away without AMP is a hint that "
    "fp16's range is involved, not proof it is the cause. A learning rate that is "
    "too high makes the weights grow until something passes 65504 in fp16, while in "
    "fp32 the same run stays finite but diverges, so I check whether the fp32 loss is "
    "actually learning. Then I keep AMP on and divide the LR by 10: if that trains "
    "normally, the LR was the cause. I prove it by rerunning with the same seed and "
    "comparing the loss at the same step with a clean run.",
    hints=["What does the fp32 run's loss do, not just whether it is NaN?",
           "Which single change would separate the LR from the precision?"],
)

# %% [markdown]
# ## Summary
# - A learning rate that is too high shows up three ways: a **spike** that
#   recovers (one bad update), a **divergence** that stays finite and never
#   learns (no NaN alarm fires), and a **NaN** when the divergence meets fp16's
#   range.
# - A spike at step *t* points at the **update of step t − 1**: read the LR and
#   grad-norm columns of the record one row up.
# - **AMP off removing the NaN is a hint, not proof**: in fp32 the same run
#   diverged (loss stuck above 2.5). LR ÷ 10, with fp16 kept, trained normally: that is the
#   cause, proven with the same seed at the same step.
# - AdamW's first steps move every weight by about the full LR: **warmup** keeps
#   them small until the second-moment estimate means something; same peak LR,
#   with and without 20 warmup steps, is the difference between learning and not.
# - **Clipping** rescales gradients: it caps SGD's step, but AdamW's update is
#   invariant to it; it does not cure a high LR.
# - A spike the model recovers from alone may be **best left alone**: skipping
#   comes one step late, and rolling back replays a schedule bug. Log it, find the
#   cause, and roll back for NaN or for spikes that do not recover.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
