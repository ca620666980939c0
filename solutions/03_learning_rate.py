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
# **Source notebook (solution version).** This pair (`solutions/03_learning_rate.py`,
# `.ipynb`) is the single source of `labs/03_learning_rate.ipynb`, answers filled in.
# Edit either (JupyterLab syncs the other on save), then run
# `nanlab course execute solutions/03_learning_rate.py` (syncs the pair, stores the
# outputs the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 03 · The learning rate (学习率): spikes, divergence, NaN, warmup
#
# A learning rate that is too high is the commonest cause of a loss spike (损失尖峰) and
# one of the commonest of a NaN. CPU only, about 45 minutes, seconds per run. Cells
# marked `# YOUR CODE HERE` are yours; the next cell checks each.

# %% [markdown]
# ## Setup
# Every run: Lab 00's toy Transformer on the counting task, 200 steps, seed 0, the
# clean run changed in one way only.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from nanlab.analysis.signals import final_loss, find_spikes, recovery_steps
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.faults import run_fault
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
# A scheduler glitch: at step 100 the LR is 10x too high for one step (a restart that
# reloaded the optimizer, not the schedule).

# %%
jump = run_fault("lr_jump")  # at_step=100, factor=10, length=1
jump_losses = jump.record.losses()
fig = plot_loss(jump.record, title="lr_jump: the LR is 10x for the one step 100")

# %% [markdown]
# Orange circles: the steps `find_spikes` flags (a loss above 3x the median of the
# previous 20). The record around the first:

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
# **Why one step later.** The loss of step *t* is computed *before* update *t*: row
# 100 holds the 10x LR *and* a normal loss. **A spike at step t points at the update
# of step t − 1** (its LR, gradient, batch).
#
# At what cost? The clean run:

# %%
for step in (100, 101, 150, 199):
    print(f"step {step}: clean {clean_losses[step]:.3f}   lr_jump {jump_losses[step]:.3f}")

# %% tags=["nbval-check-output"]
print("at step 199 lr_jump is still more than 3x above the clean run:",
      bool(jump_losses[199] > 3 * clean_losses[199]))

# %% [markdown]
# One bad update cost tens of steps of progress; with the cosine already decaying,
# the run never catches up in 200 steps: a blip in a long run, most of the budget in a
# short fine-tune.
#
# ### 1b. A divergence that does not recover (`high_lr_adam`)
# Now the LR stays too high: AdamW at 0.1, twenty times the baseline, fp32.

# %% tags=["nbval-check-output"]
adam = run_fault("high_lr_adam")
adam_losses = adam.record.losses()
print("first non-finite step:", adam.record.first_nonfinite_step)
print("final loss more than 10x the clean run's:",
      bool(final_loss(adam_losses) > 10 * final_loss(clean_losses)))
print("spikes found:", len(find_spikes(adam_losses)))

# %% [markdown]
# A NaN monitor stays silent while nothing is learned. Each Adam step moves a weight
# by about the LR (section 3) and LayerNorm rescales the activations, so nothing nears
# the float32 limit: the weights are kicked around too hard to settle.
#
# ### 1c. A NaN (`high_lr`)
# The same mistake in fp16 mixed precision (混合精度): AdamW at 0.2, fp16 autocast and
# GradScaler, the first 60 of 200 steps (`decay_steps=200` keeps the schedule).

# %% tags=["nbval-check-output"]
nan_run = run_fault("high_lr", steps=60, decay_steps=200)
rows = nan_run.record.steps
bad = nan_run.record.first_nonfinite_step
weights_finite = all(bool(torch.isfinite(p).all())
                     for p in nan_run.trainer.model.parameters())
print("first non-finite step between 20 and 45:", 20 <= bad <= 45)
after = rows[bad:]
print("non-finite steps from there on: more than 80 %:",
      sum(not r["finite"] for r in after) > 0.8 * len(after))
print("every non-finite step's update skipped by the GradScaler:",
      all(r["skipped"] for r in after if not r["finite"]))
print("weights still finite:", weights_finite)

# %% [markdown]
# Where was the first non-finite value made? `locate` (Lab 02) answers:

# %%
from nanlab.debug import locate

loc = locate(nan_run.trainer)
print(loc.report(max_events=5))

# %% tags=["nbval-check-output"]
print("first non-finite value in the forward pass:", loc.pass_name == "forward")
print("made inside an attention layer:", ".attn" in (loc.module or ""))
print("inf came before NaN:", loc.inf_before_nan)

# %% [markdown]
# The oversized updates grew the attention weights until an fp16 value inside the
# attention passed 65504. On the machine that stored this notebook it was a score
# `q · k` (the batched matmul `aten.bmm`); on another CPU the first overflow may sit in
# another op of the attention (the report names it). Even a *stable* softmax then
# fails: it subtracts the row max, and `inf − inf` is NaN. The GradScaler skips each
# non-finite update, keeping the very weights that overflow, so nearly every later
# step overflows again: the run is frozen. (Lab 04 follows the loss scale halving at
# each such step.)

# %%
fig = plot_compare({"clean (LR 5e-3)": clean.record,
                    "lr_jump: one step at 10x": jump.record,
                    "high_lr_adam: LR 0.1, fp32": adam.record,
                    "high_lr: LR 0.2, fp16": nan_run.record})

# %% [markdown]
# - **spike** (尖峰): loss and grad norm jump, then come back down; one bad update or
#   batch.
# - **divergence** (发散): the loss stalls far above the clean run's, finite. Look at
#   its grad norm (below):
# - **NaN**: finite, then NaN for good, grad norm too; a divergence meeting fp16's
#   limit.

# %%
adam_norm, clean_norm = (np.median(r.record.column("grad_norm")[50:]) for r in (adam, clean))
print(f"median grad norm from step 50 on: high_lr_adam {adam_norm:.2f}, clean {clean_norm:.2f}")

# %% tags=["nbval-check-output"]
print("the divergence's grad norm is below the clean run's:", bool(adam_norm < clean_norm))

# %% [markdown]
# A high loss with a *small* gradient: the oversized steps threw the weights into a
# flat, poor region where they are stuck, not about to blow up. A grad-norm alarm
# misses this divergence; only the loss against a baseline shows it.
#
# The NaN is the trap: it *looks* like a precision problem, since precision is where
# it became visible.
#
# ## 2. The SOP on the NaN: AMP off is a hint, not proof
# The SOP, cheapest first: **data → AMP off → LR ÷ 10 → grad norms → init / eps**.
# Step 1: check the first bad step's batch (`batch_problems`, Lab 02).

# %% tags=["nbval-check-output"]
from nanlab.faults import batch_problems

batch = nan_run.trainer.batches(rows[bad]["batch"])
print("problems in the batch of the first NaN step:", batch_problems(batch, 32))
print("loss of the step before it finite:", math.isfinite(rows[bad - 1]["loss"]))

# %% [markdown]
# Step 2 turns AMP off (关闭混合精度), step 3 divides the LR by 10 (学习率 ÷ 10): controlled
# replays with one change each.
#
# **Exercise 1 · predict.** Return a dict mapping each of the `STATEMENTS` to `True`
# or `False`. "Ends below 0.1" means the mean loss of the last 10 steps (the clean
# run's: the setup cell).

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
# Commit your prediction before the replays run: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("my_predictions", my_predictions)

# %% [markdown]
# `fixes=` applies nanlab's cures (`nanlab.faults.fixes`): `amp_off` trains in fp32;
# `lr_div10` divides the LR by 10 and keeps fp16 and the GradScaler.

# %%
amp_off = run_fault("high_lr", fixes=["amp_off"])
div10 = run_fault("high_lr", fixes=["lr_div10"])
for name, run in (("AMP off", amp_off), ("LR / 10", div10)):
    c = run.trainer.config
    peak_lr = max(run.record.column("lr"))  # what the optimizer used, not the config
    print(f"{name:8} precision {c.precision}, peak lr {peak_lr:g}: first non-finite step "
          f"{run.record.first_nonfinite_step}, final loss "
          f"{final_loss(run.record.losses()):.3f}")


# %% tags=["nbval-check-output"]
def measured(run):
    return (run.record.first_nonfinite_step is None,
            final_loss(run.record.losses()) < 0.1)


actual = dict(zip(STATEMENTS, [*measured(amp_off), *measured(div10)], strict=True))
check("my_predictions", my_predictions, actual, locked=True, hints=[
    "AMP off changes the range (fp32 reaches 3.4e38) but not the size of the updates; LR / 10 "
    "changes the updates and keeps fp16.",
    "Ask two questions of each replay: can an attention score of 1e5 still overflow, and are "
    "the updates still far too large for the loss to settle near the clean run's?",
    "After committing, the check cell's measured(amp_off) and measured(div10) compute each "
    "statement from the runs.",
])

# %% [markdown]
# **AMP off removed the NaN and kept the disease.** In fp32 (max 3.4e38) the scores
# that overflowed fp16's 65504 fit, but updates forty times too large still throw the
# weights around. "The NaN disappears without AMP, so it was fp16 overflow" is the
# article's inference: a strong hint that fp16's range is *involved*, not proof that
# it is the *cause*. AMP off changes the range, every op's rounding and the GradScaler
# (with its skipped steps) at once; any can hide another cause. LR ÷ 10 in fp16
# trains: fp16 only made the LR problem loud.
#
# **The proof (claims V1, V2).** Same seed, data order and step count; compare the
# loss at the *same step* with the clean run.

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
# LR ÷ 10 still runs at 0.02, 4x the baseline: *divide by 10* is a diagnostic jump,
# big enough to tell "too high" from "something else", not a tuned value. The
# article's recovery recipe (claim M1) is the same move: roll back to the last good
# checkpoint, restart at LR ÷ 10.
#
# ## 3. Warmup and cosine decay
# ### Why AdamW needs warmup
# Adam divides each gradient by the running RMS of that weight's past gradients, and
# at step one there is no past. Adam (Kingma & Ba 2015, arXiv 1412.6980, Algorithm 1)
# keeps `m ← β1·m + (1−β1)·g` and `v ← β2·v + (1−β2)·g²`, both starting at 0, and
# divides them by the bias corrections `1 − β1^t` and `1 − β2^t` (PyTorch's
# `torch/optim/adam.py`: `bias_correction1 = 1 - beta1 ** step`); the step is
# `lr · m_hat / (√v_hat + ε)`. At `t = 1`:
#
# `m_hat = (1−β1)·g / (1−β1) = g`,  `v_hat = (1−β2)·g² / (1−β2) = g²`,
# so `m_hat / √v_hat = g / |g| = sign(g)`.
#
# **Every weight moves by the full learning rate**, whatever its gradient; only ε
# shrinks the step of a gradient near ε's size. One step on a fresh layer (GPT-2's
# init, std 0.02) at LR 0.02:

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
# A step of 0.02 on weights of typical size 0.02 rewrites a fresh model by about
# 100 %, in directions set by one noisy batch; `v` is a real average only after a few
# dozen steps. **Warmup** (学习率预热) keeps the LR small until then; **cosine decay**
# (余弦退火) lowers it smoothly so the last steps fine-tune rather than jump around the
# minimum.
#
# ### How large can an Adam step be? Not "at most the LR"
# Kingma & Ba (2015, "Adam: a method for stochastic optimization", section 2.1) bound
# one coordinate's step (bias correction, ε = 0) by
#
# $$|\Delta_t| \le \mathrm{lr}\cdot\max\left(1,\ \frac{1-\beta_1}{\sqrt{1-\beta_2}}\right)$$
#
# reached by a gradient that was 0 for long and is suddenly large: `m` takes
# `(1 − β1)·g` at once, `v`, remembering the quiet steps, only `(1 − β2)·g²`.
# PyTorch's betas (0.9, 0.999) give 0.1 / √0.001 ≈ 3.16 lr; β2 = 0.95 (nanlab's
# `TrainConfig`) gives 0.1 / √0.05 ≈ 0.45 (`nanlab.optim.numerics.adam_step_bound`). "Adam
# moves each weight by at most about the LR" is a property of β2 = 0.95, not of Adam. A `v` lagging a sudden gradient change is one account of Adam-driven
# loss spikes: Wortsman et al. 2023 (section 4, citing Shazeer & Stern and Cohen et
# al.) note that lowering β2 removes them. Measured after 3000 quiet steps (ε = 1e-12,
# so no 0 / 0):

# %%
from nanlab.optim.numerics import adam_step_bound


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
    bound = adam_step_bound(*betas)  # max(1, (1 - beta1) / sqrt(1 - beta2))
    steps_seen[name] = (worst_adam_step(betas), bound)
    print(f"{name:18} betas {betas}: step after the quiet stretch "
          f"{steps_seen[name][0]:.3f} x lr, bound {bound:.3f} x lr")

# %% tags=["nbval-check-output"]
print("PyTorch's betas: the step is more than 3 x lr:", steps_seen["PyTorch default"][0] > 3)
print("nanlab's betas: the step is below the lr:", steps_seen["nanlab TrainConfig"][0] < 1)
print("both within the Kingma & Ba bound:",
      all(step <= bound * 1.0001 for step, bound in steps_seen.values()))

# %% [markdown]
# **Exercise 2 · the schedule.** Write
# `lr_at(step, warmup, total, base_lr, min_ratio)`, nanlab's learning rate at `step`:
#
# - **warmup**, `step < warmup`: linear, `base_lr · (step + 1) / warmup`, so step 0
#   already trains and step `warmup − 1` reaches `base_lr`;
# - **cosine**, from `step = warmup`: with
#   `progress = (step − warmup) / (total − warmup)`, capped at 1, the LR falls from
#   `base_lr` (progress 0) to `min_ratio · base_lr` (progress 1) along half a cosine,
#   `(1 + cos(π · progress)) / 2`, and stays there after `total`.

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
    for label, case in zip(got, SCHEDULES, strict=True):
        for step, value in enumerate(got[label]):
            want = reference(step, *case)
            if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-12):
                return f"case {label!r}: step {step} gives {value:.6g}, expected {want:.6g}"
    return None


check("lr_at", lambda *case: [lr_at(s, *case) for s in range(case[1] + 5)],
      cases={f"warmup {w}, total {t}, base_lr {lr:g}, min_ratio {m:g}": (w, t, lr, m)
             for w, t, lr, m in SCHEDULES},
      test=judge_schedule, hints=[
          "Two phases: a linear warmup up to the base LR, then a cosine decay from the base LR"
          " down to min_ratio times it, flat once total is reached.",
          "Warmup counts steps from 1, so its first LR is not 0; the decay's progress runs "
          "from 0 at the end of warmup to 1 at total and is capped at 1; math.cos and math.pi "
          "give the half cosine.",
          "The half cosine, (1 + cos(pi * progress)) / 2, falls from 1 to 0: use it to blend "
          "from base_lr down to min_ratio * base_lr; min(1.0, ...) keeps progress capped.",
      ], solution="""\
if step < warmup:
    return base_lr * (step + 1) / warmup
progress = min(1.0, (step - warmup) / (total - warmup))
cosine = 0.5 * (1 + math.cos(math.pi * progress))  # 1 -> 0
return base_lr * (min_ratio + (1 - min_ratio) * cosine)""")

# %% [markdown]
# Your schedule over the clean run's recorded `lr` column:

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
# `no_warmup`: LR 0.02 (4x the baseline), `beta2 = 0.99` (a slower second-moment
# average, common in practice), **no** warmup. The fix `warmup_cosine` adds only 20
# warmup steps.

# %% tags=["nbval-check-output"]
cold = run_fault("no_warmup")
warm = run_fault("no_warmup", fixes=["warmup_cosine"])
print("warmup steps:", cold.trainer.config.warmup_steps, "vs",
      warm.trainer.config.warmup_steps)
print("same peak LR:", cold.trainer.config.lr == warm.trainer.config.lr)
cold_losses = cold.record.losses()
print("no warmup: the loss rises above its start within 5 steps:",
      bool(cold_losses[1:6].max() > cold_losses[0]))
print("seed 0, no warmup: final loss above 1.0:", bool(final_loss(cold_losses) > 1.0))
print("seed 0, with warmup: final loss below 0.2:",
      bool(final_loss(warm.record.losses()) < 0.2))

# %%
fig = plot_compare({"no warmup (LR 0.02 from step 0)": cold.record,
                    "20 warmup steps, same peak LR": warm.record})


# %% [markdown]
# Without warmup the first full-size updates throw the fresh weights far off, and the
# model settles in a poor region (low gradient norm) it leaves very slowly. (LR ÷ 10 also cures `no_warmup`, more slowly:
# `nanlab matrix --faults no_warmup`.)
#
# `no_warmup` changed two knobs: the warmup, and β2 (0.99, not `TrainConfig`'s 0.95).
# Which one matters? The 2 x 2 at the same peak LR, on seeds 0 and 1:

# %%
def warmup_grid(seed):
    """Final losses at LR 0.02: beta2 in {0.95, 0.99} x warmup steps in {0, 20}."""
    if seed == 0:
        runs = [cold, warm]
    else:
        runs = [run_fault("no_warmup", seed=seed),
                run_fault("no_warmup", seed=seed, fixes=["warmup_cosine"])]
    for warmup in (0, 20):  # the two missing cells: nanlab's own beta2
        runs.append(run_fault(None, seed=seed, lr=cold.trainer.config.lr,
                              warmup_steps=warmup, beta2=TrainConfig().beta2))
    return {(run.trainer.config.beta2, run.trainer.config.warmup_steps):
            final_loss(run.record.losses()) for run in runs}


seeds = (0, 1)
warmup_ends = {seed: warmup_grid(seed) for seed in seeds}
print("beta2  warmup   final loss, seeds " + ", ".join(map(str, seeds)))
for b2, warmup in sorted(warmup_ends[0]):
    ends = "  ".join(f"{warmup_ends[seed][b2, warmup]:6.3f}" for seed in seeds)
    print(f"{b2:5}  {warmup:6}   {ends}")

# %% tags=["nbval-check-output"]
betas2 = sorted({b2 for b2, _ in warmup_ends[0]})
print("no warmup: final loss above 1.0 with either beta2, on every seed:",
      all(ends[b2, 0] > 1.0 for ends in warmup_ends.values() for b2 in betas2))
print("20 warmup steps: final loss below 0.2 with either beta2, on every seed:",
      all(ends[b2, 20] < 0.2 for ends in warmup_ends.values() for b2 in betas2))
print("changing beta2 moves the final loss less than changing the warmup, on every seed:",
      all(max(abs(ends[betas2[0], w] - ends[betas2[1], w]) for w in (0, 20))
          < min(abs(ends[b2, 0] - ends[b2, 20]) for b2 in betas2)
          for ends in warmup_ends.values()))

# %% [markdown]
# Warmup decides, on every seed. At step 0 the bias correction makes Adam's step about
# the LR whatever β2 (the measurement above); β2 matters when a gradient jumps after a
# quiet stretch (the bound above, and section 4's outlier).
#
# ## 4. Gradient clipping: what it cures, what it does not
# `torch.nn.utils.clip_grad_norm_(params, max_norm)` (梯度裁剪) takes the **global** norm
# of all gradients and, above `max_norm`, multiplies *every* gradient by
# `max_norm / norm`. The article (claim M6) recommends `max_norm = 1.0`. OPT-175B
# (Zhang et al. 2022, arXiv 2205.01068, sections 2.2 and 2.5) clipped at 1.0, lowered
# it to 0.3 in "mid-flight changes" (2.2), and cut the LR by hand several times, restarting from
# an earlier checkpoint after each loss divergence. The 2.5 in some summaries belongs
# to the abandoned 11.x runs (clip 2.5, then 1.5, then 1.0; metaseq,
# `projects/OPT/chronicles/10_percent_update.md`); in the final 12.x run the LR fell
# 10 % at run 12.43 and to 2/3 of GPT-3's at 12.45.2 (`56_percent_update.md`).
#
# **Exercise 3 · clip by hand.** Write `clip_by_global_norm(grads, max_norm)`
# returning `(clipped, total_norm)`: new tensors and the global norm *before*
# clipping, as a float. Apply PyTorch's coefficient, `max_norm / (total_norm + 1e-6)`,
# only when it is below 1.

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
            return f"case {case!r}: total norm {float(norm):.6g}, expected {want_norm:.6g}"
        same = len(mine) == len(want) and all(
            torch.allclose(m, w, rtol=1e-5, atol=1e-8)
            for m, w in zip(mine, want, strict=True))
        if not same:
            return f"case {case!r}: the clipped gradients differ from clip_grad_norm_'s"
    return None


check("clip_by_global_norm", clip_by_global_norm, cases=CLIP_CASES,
      test=judge_clip, hints=[
          "One norm for all gradients together, as if they were one long vector; every "
          "gradient is scaled by the same factor, and only when that norm is above max_norm.",
          "The global norm is the square root of the sum, over tensors, of each tensor's sum "
          "of squares; the factor is max_norm over that norm plus 1e-6, as in "
          "torch.nn.utils.clip_grad_norm_; return the norm too.",
          "Sum the squares in float64 (double) so a 1e4 gradient cannot lose the small ones, "
          "take math.sqrt once, and multiply every gradient by the factor only when it is "
          "below 1; otherwise hand back copies (clone).",
      ], solution="""\
total = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
coef = max_norm / (total + 1e-6)
if coef < 1.0:
    return [g * coef for g in grads], total
return [g.clone() for g in grads], total""")


# %% [markdown]
# ### Clipping one outlier step, with SGD and with AdamW
# SGD's update *is* LR times gradient, so clipping caps it. Adam divides by the
# running RMS of past gradients, so a factor shared by every step cancels in
# `m / √v`: a clip can change only a *rare* outlier. One 64 x 64 weight: 100 ordinary
# steps (gradient norm 0.64, under the clip of 1.0) so `v` settles, one gradient 100x
# larger, 100 ordinary steps. Each update over the typical one before the outlier:

# %%
def outlier_updates(optimizer, betas=None, clip=None, settle=100, after=100):
    """Update norm of each step from the outlier on, over the mean of the 10 before it."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 64) * 0.02)
    opt = (torch.optim.SGD([w], lr=0.01) if optimizer == "SGD"
           else torch.optim.AdamW([w], lr=0.01, betas=betas, weight_decay=0.0))
    gen = torch.Generator().manual_seed(1)
    sizes = []
    for step in range(settle + 1 + after):
        w.grad = torch.randn(64, 64, generator=gen) * 0.01
        if step == settle:
            w.grad *= 100  # the outlier
        if clip:
            torch.nn.utils.clip_grad_norm_([w], clip)
        before = w.detach().clone()
        opt.step()
        sizes.append(float((w.detach() - before).norm()))
    return np.array(sizes[settle:]) / np.mean(sizes[settle - 10:settle])


SETUPS = {"SGD": ("SGD", None), "AdamW, betas (0.9, 0.95)": ("AdamW", nanlab_betas),
          "AdamW, betas (0.9, 0.999)": ("AdamW", torch_betas)}
ratios = {(name, clip): outlier_updates(*setup, clip=clip)
          for name, setup in SETUPS.items() for clip in (None, 1.0)}
for (name, clip), r in ratios.items():
    print(f"{name:26} {'clip 1.0' if clip else 'no clip ':8}: outlier step {r[0]:6.2f}x, "
          f"steps 20-100 after it {r[20:].mean():4.2f}x the typical update")
fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
for (name, clip), r in ratios.items():
    if name != "SGD":
        ax.plot(r[:60], ls="-" if clip else "--",
                label=f"{name}, {'clipped' if clip else 'no clip'}")
ax.set_xlabel("steps since the outlier")
ax.set_ylabel("update / typical update")
ax.legend(fontsize=7);

# %% tags=["nbval-check-output"]
adam_names = [n for n in SETUPS if n != "SGD"]
print("SGD: the outlier's update is about 100x, clipped below 2x:",
      bool(90 < ratios["SGD", None][0] < 110 and ratios["SGD", 1.0][0] < 2))
print("AdamW, no clip: the outlier step is more than 1.5x the typical update:",
      all(ratios[n, None][0] > 1.5 for n in adam_names))
print("AdamW, no clip: larger with beta2 0.999 than with 0.95:",
      bool(ratios[adam_names[1], None][0] > ratios[adam_names[0], None][0]))
print("AdamW, no clip: steps 20-100 after it shrink below 0.8x:",
      all(ratios[n, None][20:].mean() < 0.8 for n in adam_names))
print("AdamW, clipped: the outlier step and the steps after it within 20 % of typical:",
      all(abs(ratios[n, 1.0] - 1).max() < 0.2 for n in adam_names))

# %% [markdown]
# Unclipped, AdamW's outlier step is larger than usual, most with β2 = 0.999 (the slow
# `v` of section 3); `m` carries the outlier for about ten steps, then the inflated
# `v` shrinks every update for a hundred more. Clipped, the outlier is an ordinary step
# and nothing follows.
#
# The real run in the fault × fix matrix (`(none)`: this lab's run; `grad_clip`: clip
# at 1.0, nothing else):

# %%
from nanlab.analysis.judge import judge
from nanlab.faults.matrix import Cell, Matrix, run_cell

clean_final = final_loss(clean_losses)
threads = torch.get_num_threads()
verdict = judge(adam, clean=clean_final)  # the matrix's own judge, on this lab's run
cells = [Cell("high_lr_adam", None, verdict.outcome, verdict.reason),
         run_cell("high_lr_adam", "grad_clip", 200, 0, clean_final)]
torch.set_num_threads(threads)  # run_cell uses one thread, like a matrix worker
matrix = Matrix(cells, clean_final, steps=200, seed=0)
print(matrix.table())
print()
print(matrix.evidence())
print(f"\nclean run: grad norm above 1.0 at {np.mean(clean.record.column('grad_norm') > 1):.0%}"
      " of its steps")

# %% tags=["nbval-check-output"]
print("high_lr_adam:", {fix: matrix.outcome("high_lr_adam", fix)
                        for fix in (None, "grad_clip")})
print("with clipping, final loss still more than 10x the clean run's:",
      matrix.cells[("high_lr_adam", "grad_clip")].final_loss > 10 * clean_final)

# %% [markdown]
# On `lr_jump` (`nanlab matrix --faults lr_jump --fixes grad_clip`, about a minute)
# clipping gives a smaller, faster-recovering spike, but still a spike; at
# `max_norm = 1.0` it fires on most steps (the clean run's share, printed above),
# changing the whole trajectory.
#
# Clipping is cheap insurance against rare outlier gradients, essential with SGD-like
# optimizers, no cure for the LR. A clip firing every step *sets* SGD's step size (the
# clip value joins the LR) and reweights AdamW's steps, large-gradient ones counting
# less in `m` and `v`. Log how often it fires.
#
# A spike like `lr_jump`'s: should a guard skip the update, roll back, or leave it
# alone? Lab 08 (section 8) measures all three on it, over three seeds.
#
# ## 5. Practice
# Answer, then press **Check**; **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("03-which-update")

# %%
practice("03-clip-adamw")

# %%
practice("03-mystery-fp16")

# %%
practice("03-amp-off-not-proof")

# %% [markdown]
# ## Summary
# - Too high an LR: a **spike**, a finite **divergence**, or in fp16 a **NaN**; a
#   spike at step *t* points at **update t − 1**.
# - **AMP off removing a NaN is a hint, not proof** (fp32 diverged, far above the clean loss);
#   LR ÷ 10 in fp16 cured it.
# - **Warm up** AdamW; **clipping** caps SGD's step and tames AdamW's outlier steps;
#   a spike the model recovers from may be **best left alone** (Lab 08 measures it).
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
