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
# **Source notebook (solution version).** This pair, `solutions/00_start_here.py` and
# `solutions/00_start_here.ipynb`, is the single source of `labs/00_start_here.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/00_start_here.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 00 · Start here: the model, the task, a clean run, the tools
#
# Every later lab breaks one thing and asks you to find it. You can only spot
# what is wrong if you know what *right* looks like, so this lab shows the healthy
# baseline (基线) and the tools you will use on the broken runs:
#
# 1. the toy Transformer, with its attention written out by hand;
# 2. the counting task it learns, and one batch of it;
# 3. a clean run and its **run record** (per-step rows, per-layer rows, a manifest);
# 4. the three plots you will read in every lab;
# 5. **determinism**: the same seed gives the same numbers, and a run resumed from
#    a checkpoint repeats its steps exactly;
# 6. the run folder on disk, and TensorBoard;
# 7. how the exercises, hints and practice widgets work.
#
# CPU is enough; about 20 minutes. The same code runs on a GPU
# (`device="auto"` picks CUDA when there is one).

# %% [markdown]
# ## Setup
# `start_lab` names this lab in your progress file, so `show_progress()` can tell
# you at the end what you have done.

# %%
import inspect
import math
import shutil
from pathlib import Path

import numpy as np
import torch

from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.toy.data import IGNORE_INDEX, CountingTask
from nanlab.toy.model import GPT, AttentionScores, CausalSelfAttention, GPTConfig, Softmax
from nanlab.train import TrainConfig, Trainer, train

start_lab("00_start_here")
torch.set_printoptions(precision=2, linewidth=110)

# %% [markdown]
# ## 1. The toy model (玩具模型)
# A decoder-only Transformer in the style of nanoGPT: token and position
# embeddings, a stack of pre-LayerNorm blocks (attention, then an MLP, each added
# to the residual stream 残差流), a final LayerNorm and a linear head that turns
# each position into scores for the next token. One config dataclass holds every
# switch; the defaults are the healthy model. Later labs flip one switch at a time.

# %% tags=["nbval-check-output"]
config = GPTConfig()
model = GPT(config)
for name, value in config.to_dict().items():
    print(f"{name:14} {value}")
print(f"\n{model.num_params():,} parameters")

# %% [markdown]
# About a hundred thousand parameters: small enough to train in seconds on a
# laptop, big enough to show the numerical failures (overflow, 0 / 0, exploding
# and vanishing gradients, too high an LR, dirty batches) when we inject them. It
# cannot show what only scale brings: the loss spikes of large runs, which came
# from particular batches meeting a particular model state (PaLM, Chowdhery et
# al. 2022, section 5.1); attention-logit growth and entropy collapse, which set
# in at lower LRs as models grow (Wortsman et al. 2023, section 3.1.1); outliers
# that build up over long runs; hardware faults across many nodes. The module names
# below are the names the tools use: a heat-map row called `blocks.1.attn.scores`
# is the attention-score module of the second block.

# %%
print(model)

# %% [markdown]
# ### Attention, written out
# Most code calls one fused kernel (`F.scaled_dot_product_attention`) and you never
# see the numbers. Here every step is a line you can read, and the two steps
# where values get large are small modules of their own, so hooks can watch them.

# %%
print(inspect.getsource(CausalSelfAttention.forward))

# %% [markdown]
# Where the numbers get large:
#
# - **`q @ k.T`** sums `head_size` products. When `q` and `k` grow during
#   training, a score grows with the *product* of their sizes. The division by
#   `sqrt(head_size)` keeps scores near 1 at the start; nothing keeps them there
#   later.
# - **the softmax** exponentiates the scores. `exp(x)` overflows at x ≈ 88.7 in
#   float32 and already at x ≈ 11.1 in float16. The stable version subtracts the
#   row maximum first, so every `exp` is at most 1.
# - **the logits** from the head feed another softmax, inside the cross-entropy.

# %%
print(inspect.getsource(AttentionScores.forward))
print(inspect.getsource(Softmax.forward))

# %% [markdown]
# ## 2. The task: counting in strides (计数任务)
# Each sequence starts at a random token `a` and counts in a random stride `c`,
# modulo 32: `a, a+c, a+2c, ...`. The model predicts the next token. After two
# tokens the stride is known, so the task is easy, and a healthy run drives the
# loss close to zero within 200 steps: any fault shows up as a clear departure.
#
# A batch is a pure function of `(seed, step)`: the batch of step 40 is the same
# today, tomorrow and inside a replay. That is what makes a bad step findable.

# %% tags=["nbval-check-output"]
task = CountingTask(seed=0)
batch = task(0)  # the batch of step 0
print("tokens  ", tuple(batch.tokens.shape), batch.tokens.dtype)
print("targets ", tuple(batch.targets.shape), batch.targets.dtype)
print("features", tuple(batch.features.shape), batch.features.dtype)
print("\nfirst two sequences, first 8 positions")
print("tokens: ", batch.tokens[:2, :8].tolist())
print("targets:", batch.targets[:2, :8].tolist())

# %% [markdown]
# Each target is the next token. The **first target of every row is `-100`**:
# from one token alone the stride cannot be known, so the pipeline masks that
# position out of the loss (掩码 mask). `-100` is PyTorch's default `ignore_index`
# for `cross_entropy`; nanlab calls it `IGNORE_INDEX`. Real pipelines mask prompt
# and padding tokens the same way.

# %% tags=["nbval-check-output"]
masked = batch.targets == IGNORE_INDEX
print("masked positions per row:", masked.sum(dim=1).unique().tolist())
only_first = bool(masked[:, 0].all() and not masked[:, 1:].any())
print("only the first position is masked:", only_first)

# %% [markdown]
# ### The float feature
# Real data carries numbers as well as token ids (a price, a sensor reading, a
# time gap). Here every token comes with one float, its numeric reading, and the
# pipeline **standardises** it per batch, `(x - mean) / std`, before a linear layer
# adds it to the residual stream. This float path is where dirty data (脏数据)
# enters in Lab 02: a NaN reading, or a column whose std is 0.

# %%
raw = task.raw(0).raw_features  # before standardising: the token value itself
print("raw reading:   ", raw[0, :8, 0].tolist())
print("standardised:  ", [round(v, 2) for v in batch.features[0, :8, 0].tolist()])
f = batch.features
print(f"batch mean {f.mean().item():+.3f}, std {f.std(unbiased=False).item():.3f}")

# %% [markdown]
# ## 3. A clean run, and its record
# `TrainConfig()` with its defaults is the clean baseline: AdamW, LR 5e-3 with 20
# warmup steps and cosine decay, fp32, no clipping. `out_dir` makes the run write
# its record and checkpoints to disk as well as keeping them in memory. The
# progress bar shows the loss every 10 steps.

# %%
run_dir = Path("runs/00_clean")
shutil.rmtree(run_dir, ignore_errors=True)  # start fresh if you rerun the lab
run = train(TrainConfig(steps=200, out_dir=str(run_dir)))
run

# %% [markdown]
# The facts a healthy run must show. Later labs compare against them.

# %% tags=["nbval-check-output"]
losses = run.losses()
print("steps run:", len(losses))
print("first non-finite step:", run.first_nonfinite_step)
print("loss at step 0 is about ln(32) = 3.47:", abs(losses[0] - math.log(32)) < 0.2)
print("loss at the last step <= 0.1:", losses[-1] <= 0.1)


# %% [markdown]
# A loss of 3.47 at step 0 is no accident: an untrained model spreads its guess
# evenly over 32 tokens, and `-ln(1/32) = 3.47`. A first loss far above
# `ln(vocab_size)` already says the init is wrong.
#
# ### Per-step rows
# One row per step: the loss, the learning rate, the global gradient norm
# (全局梯度范数), the loss scale (only with fp16), whether the step was finite, and
# whether an update was skipped.

# %%
def show_rows(rows, keys):
    """Print record rows as a small table (floats to 4 significant digits)."""
    text = [[f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
            for r in rows]
    widths = [max(len(k), *(len(t[i]) for t in text)) for i, k in enumerate(keys)]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True)))
    for t in text:
        print("  ".join(c.rjust(w) for c, w in zip(t, widths, strict=True)))


show_rows(run.steps[:3] + run.steps[-2:],
          ["step", "loss", "lr", "grad_norm", "loss_scale", "finite", "skipped"])

# %% [markdown]
# ### Per-layer rows
# Every `record_every` steps (10 by default) the trainer also records, for every
# leaf module: its gradient norm, the mean and std of its parameters, and the
# largest absolute value of its output (activation abs-max, 激活值最大绝对值).
# These are the numbers the heat map and the activation plot draw.

# %%
print(len(run.layer_names()), "layers x", len(run.layers) // len(run.layer_names()),
      "recorded steps =", len(run.layers), "rows")
last = [r for r in run.layers if r["step"] == 190]
show_rows(last[:4] + last[-2:], ["step", "layer", "grad_norm", "param_mean",
                                 "param_std", "act_absmax"])

# %% [markdown]
# Modules without parameters (the attention scores, the softmax, the activation
# function) have no gradient norm but do have an activation abs-max: those are
# exactly the places where values get large.
#
# ### The manifest
# Enough to reproduce the run (claim M12): the full config, the seed, the fault
# (none here), the device, the library versions and the code commit.

# %%
m = run.manifest
print("seed:", m["seed"], "| fault:", m["fault"], "| device:", m["device"])
print("torch", m["torch"], "| nanlab", m["nanlab"], "| python", m["python"])
print("code commit:", m["git_commit"])
print("config:", {k: m["config"][k] for k in ("steps", "lr", "warmup_steps",
                                              "precision", "grad_clip", "batch_size")})

# %% [markdown]
# ## 4. Three plots you will read in every lab
# **The loss curve.** In later labs it marks spikes, the first NaN or inf, skipped
# steps and rollbacks. Here there is nothing to mark: a smooth fall from 3.5 to
# near zero. The scale is logarithmic because the loss spans two decades.

# %%
from nanlab.viz import plot_activation_absmax, plot_grad_heatmap, plot_loss

fig = plot_loss(run, title="Clean baseline")

# %% [markdown]
# **The gradient-norm heat map** (梯度范数热力图): layers top to bottom (input to
# output), steps left to right, a log colour scale. In an exploding run one row
# turns bright and the brightness spreads; NaN cells turn red and inf cells black.
# Healthy looks like this: colours within a few decades, calming as the loss falls.

# %%
fig = plot_grad_heatmap(run)

# %% [markdown]
# **Activation abs-max against the fp16 limit.** The dashed red line is 65504, the
# largest float16 number. Anything that crosses it becomes `inf` under fp16
# autocast. In this run the largest activation stays far below it.

# %%
fig = plot_activation_absmax(run)
names, steps, grid = run.layer_matrix("act_absmax")
top = int(np.nanargmax(grid[:, -1]))
print(f"largest activation at step {steps[-1]}: {names[top]} = {grid[top, -1]:.3g}, "
      f"{65504 / grid[top, -1]:,.0f}x below the fp16 limit")

# %% [markdown]
# In a clean run the largest values sit in the logits (`lm_head`): the model
# becomes confident, so the right token's score pulls away from the rest. Keep
# this picture in mind for the mixed-precision lab.
#
# ## 5. Determinism (可复现): the same seed, the same numbers
# Debugging a NaN means running the failing step again, and proving a fix means
# comparing two runs that differ *only* by the fix. Both need runs that repeat
# exactly. Here the model init, the batches and the optimizer all follow from the
# seed, so a second run with the same seed must give bit-identical losses, and a
# different seed must not.

# %% tags=["nbval-check-output"]
again = train(TrainConfig(steps=200, progress=False))
other = train(TrainConfig(steps=20, seed=1, progress=False))
print("same seed, identical losses:", np.array_equal(again.losses(), run.losses()))
print("seed 1, identical first 20: ", np.array_equal(other.losses(), run.losses()[:20]))

# %% [markdown]
# "Identical" here means equal to the last bit, on the same machine with the same
# library versions **and the same number of CPU threads**: a matrix product split
# over two threads adds its terms in another order, and floating-point addition is
# not associative. That is why `start_lab` at the top of every lab runs torch on
# one thread: a run repeats exactly on your machine. Another CPU adds in another
# order (its kernels follow its instruction set: AVX2, AVX-512, ARM), as may another
# torch version. A run near the edge then fails some steps earlier or later (Lab 05's
# deep stack), so the labs check mechanisms and ranges, not one machine's step. On a
# GPU a few kernels add in a varying order; call
# `torch.use_deterministic_algorithms(True)` when you need exact repeats there.
#
# ### Resume from a checkpoint (断点续训)
# The run saved a checkpoint every 50 steps: the weights, the optimizer state, the
# LR schedule, the RNG state and the position in the data. A new trainer that
# loads the checkpoint of step 100 and runs to 200 must reproduce steps 100 to 199
# exactly. This is what lets a tool replay the bad step of a long run without
# starting from scratch.

# %% tags=["nbval-check-output"]
ckpt_dir = run_dir / "checkpoints"
print(sorted(p.name for p in ckpt_dir.glob("*.pt")))
resumed = Trainer(TrainConfig(steps=200, progress=False))
tail = resumed.run(resume_from=ckpt_dir / "ckpt_000100.pt")
print("resumed at step:", tail.steps[0]["step"], "| steps run:", len(tail.steps))
print("resume identical:", np.array_equal(tail.losses(), run.losses()[100:]))

# %% [markdown]
# A checkpoint is a plain dict of tensors and numbers, so it loads with
# `torch.load(weights_only=True)`: loading it cannot run code hidden in the file.
# Checkpoints are written atomically (to a temporary file, then renamed), so a
# crash in the middle of a save never leaves half a checkpoint behind.

# %% tags=["nbval-check-output"]
state = torch.load(ckpt_dir / "ckpt_000100.pt", weights_only=True)
print(sorted(k for k in state if not k.startswith("rng")), "+ the RNG state")
print("step:", state["step"], "| next batch:", state["data_position"])

# %% [markdown]
# ## 6. The run folder on disk
# Everything the record holds is also on disk as JSON Lines (one JSON object per
# line), so a crashed run still leaves its evidence, and any tool can read it.
# `events.jsonl` is empty here: it lists what a tool did to the run (a skipped
# step, a rollback, a stop), and nothing did anything to a clean run.
# A NaN is written as `NaN` and an infinity as `Infinity`: whether a value was
# inf or NaN is part of the evidence.

# %%
for p in sorted(run_dir.rglob("*")):
    if p.is_file():
        print(f"{str(p.relative_to(run_dir)):28} {p.stat().st_size:>9,} bytes")
print()
print((run_dir / "steps.jsonl").read_text().splitlines()[0])

# %% [markdown]
# `RunRecord.load` reads a folder back, for a run that finished in another
# process or on another machine:

# %% tags=["nbval-check-output"]
from nanlab.runs.record import RunRecord

loaded = RunRecord.load(run_dir)
print("same losses as in memory:", np.array_equal(loaded.losses(), run.losses()))

# %% [markdown]
# ### TensorBoard
# If you read runs in TensorBoard, export the same record. NaN points are not
# drawn there, so the export adds a running count of non-finite steps that starts
# to climb where the trouble starts.

# %%
try:
    from nanlab.viz import export_tensorboard

    print("wrote", export_tensorboard(run, "runs/tb/00_clean"))
except ImportError as err:
    print(err)


# %% [markdown]
# To look at it: in a terminal, from the folder of this notebook, run
# `tensorboard --logdir runs/tb` and open the address it prints
# (http://localhost:6006). Or inside JupyterLab, in a new cell:
# `%load_ext tensorboard` then `%tensorboard --logdir runs/tb`. The scalars are
# under `train/`, the per-layer statistics under `layers/`.

# %% [markdown]
# ## 7. How exercises and practice questions work
# **Exercises.** A cell with `# YOUR CODE HERE` and `raise NotImplementedError()`
# is yours to fill in. The cell after it calls `check(...)`, which runs your code
# and prints one line:
#
# - `passed: <name>`: right;
# - `not done yet: <name>`: the stub is still there;
# - `not yet right: <name>: <what differed>`: wrong value, or your code raised.
#
# `hint("<name>")`: one hint at a time; `solution("<name>")`: the code, noted in progress.
#
# **Exercise · the first bad step.** The first thing to find in any broken run is
# the first step whose loss is not finite. Write `first_bad_step(losses)`: the
# index of the first loss that is NaN, `inf` or `-inf`, or `None` if every loss is
# finite. `losses` may be a list or a NumPy array.

# %%
def first_bad_step(losses):
    """Index of the first non-finite loss, or None when all are finite."""
    ### BEGIN SOLUTION
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            return i
    return None
    ### END SOLUTION


# %% tags=["nbval-check-output"]
nan, inf = float("nan"), float("inf")
CASES = {"two finite losses, then NaN": ([3.0, 2.0, nan, nan],),
         "inf, then NaN": ([3.0, inf, nan],), "-inf": ([1.0, -inf],),
         "every loss finite": ([3.0, 2.0, 1.0],), "no losses at all": ([],),
         "the clean run's 200 losses": (run.losses(),)}
check("first_bad_step", first_bad_step, [2, 1, 1, None, None, None], cases=CASES, hints=[
    "A bad loss is NaN, +inf or -inf: you want the index of the first loss that is not "
    "an ordinary finite number, or None when there is none.",
    "math.isfinite is False for all three kinds at once; an equality test cannot find "
    "NaN, which equals nothing, not even itself.",
    "Walk the losses with their indices (enumerate) and stop at the first one math.isfinite "
    "rejects; a loop that ends without finding one means there is none.",
], solution="""\
for i, loss in enumerate(losses):
    if not math.isfinite(loss):
        return i
return None""")

# %% [markdown]
# Note the trap the second hint names: `nan == nan` is False, so a check written
# with `==` never fires. The run record has the same search built in,
# `run.first_nonfinite_step`; it also counts a step whose loss was finite but
# whose gradient norm was not.
#
# **Practice questions.** Each widget has a **Check** button (feedback appears
# below it: what is wrong, never the answer), a **Hint** button (one hint per click)
# and **Show answer** (the answer also appears after three wrong tries). Answers go
# to your progress file too. There are four kinds; here is one of each.
#
# *Multiple choice* (one answer, or tick boxes when several are right):

# %%
from nanlab.course import practice

practice("00-first-loss")

# %% [markdown]
# *Ordering.* The course follows one fixed procedure (SOP) for a NaN or a spike.
# The rule behind its order: **cheap and common causes first**, expensive ones last.
# Put the five checks in that order (you will use it in every lab).

# %%
practice("00-sop-order")

# %% [markdown]
# *Root cause.* A mystery run: pick the family of the fault, then tick **all** the
# evidence that supports it (and none that does not).

# %%
practice("00-mystery-preview")

# %% [markdown]
# *Free text*, scored against key points. A point counts when it is explained in a
# few words of its own, so a bare list of keywords earns nothing. English, Chinese
# or both are fine.

# %%
practice("00-why-determinism")

# %% [markdown]
# ## Summary
# - The toy model: a 2-block pre-LayerNorm Transformer, ~106k parameters, attention
#   by hand; values grow in `q @ k.T`, in the softmax and in the logits.
# - The task: counting in strides; first target masked with `-100`; one float
#   feature per token, standardised per batch.
# - A clean run: loss 3.47 (= ln 32) to below 0.1 in 200 steps, every step finite.
# - The record: per-step rows, per-layer rows every 10 steps, a manifest, all on
#   disk as JSON Lines; checkpoints every 50 steps.
# - Same seed, same numbers; resume from a checkpoint, same steps. This is what
#   makes a bad step replayable and a fix provable.
#
# Next: **Lab 01** (numbers: where inf and NaN come from), then **Lab 02** (dirty
# data). Your progress so far:

# %%
from nanlab.course import show_progress

show_progress();
