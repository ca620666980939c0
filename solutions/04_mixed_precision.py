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
# **Source notebook (solution version).** This pair, `solutions/04_mixed_precision.py` and
# `solutions/04_mixed_precision.ipynb`, is the single source of `labs/04_mixed_precision.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/04_mixed_precision.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 04 · Mixed precision (混合精度): fp16, bf16 and loss scaling (损失缩放)
#
# Mixed precision runs the big matrix multiplications in 16 bits and the rest in
# 32: half the memory traffic, much faster on a GPU, and the classic source of NaN.
#
# 1. **the numbers**: three formats, and what `autocast` runs in 16 bits;
# 2. **one run, four precisions**: which goes NaN, and where;
# 3. **the GradScaler**;
# 4. **bf16**;
# 5. **Adam's eps in pure fp16**;
# 6. **the modern API**, `torch.amp`;
# 7. **practice**.
#
# CPU only, about 45 minutes. Lab 01 (the float formats) is assumed.

# %% [markdown]
# ## Setup

# %%
import math
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from nanlab.analysis.signals import final_loss
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import locate
from nanlab.faults import run_fault
from nanlab.toy.data import IGNORE_INDEX
from nanlab.viz import plot_compare

start_lab("04_mixed_precision")
FP16_EXP_LIMIT = math.log(torch.finfo(torch.float16).max)  # 11.09: exp(x) > 65504 above it

# %% [markdown]
# ## 1. The numbers
# ### Three formats in one table
# Exponent bits set the range, mantissa bits the precision. The last column, where
# `exp(x)` overflows, matters for every softmax.

# %% tags=["nbval-check-output"]
print(f"{'dtype':9} {'exp bits':>8} {'mantissa':>8} {'max':>10} {'min normal':>11} "
      f"{'min subnormal':>13} {'eps':>9} {'exp(x) inf above':>16}")
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    fi = torch.finfo(dtype)
    mantissa = round(-math.log2(fi.eps))
    exponent = fi.bits - 1 - mantissa
    print(f"{str(dtype).split('.')[1]:9} {exponent:>8} {mantissa:>8} {fi.max:>10.5g} "
          f"{fi.tiny:>11.4g} {fi.tiny * fi.eps:>13.4g} {fi.eps:>9.3g} "
          f"{math.log(fi.max):>16.2f}")

# %% [markdown]
# fp16 overflows above **65504** and underflows below **6e-8**; bf16 reaches fp32's
# **3.4e38** with only 8 bits of precision (`eps` = 0.0078). `exp` overflows fp16
# at **11.09**: a logit or attention score of 12 is enough.
#
# ### What autocast runs in 16 bits
# Under `torch.amp.autocast` the **weights stay fp32** (the *master weights*,
# 主权重); each op casts its inputs to the precision it is listed for, matmuls and
# linear layers to 16 bits. Which ops stay in fp32 depends on the **device**:

# %%
device = "cuda" if torch.cuda.is_available() else "cpu"
layer = torch.nn.Linear(8, 8).to(device)
x = torch.randn(4, 8, device=device)
with torch.amp.autocast(device_type=device, dtype=torch.float16):
    y = layer(x)
    ops = {"linear": y, "exp": torch.exp(y), "softmax": torch.softmax(y, -1),
           "sum": y.sum(), "layer_norm": F.layer_norm(y, (8,)),
           "cross_entropy": F.cross_entropy(y, torch.zeros(4, dtype=torch.long,
                                                           device=device))}
print(f"device {device}; weight dtype {layer.weight.dtype}")
for name, out in ops.items():
    print(f"  {name:14} -> {out.dtype}")


# %% [markdown]
# On a CUDA GPU, autocast runs `exp`, `softmax`, `log_softmax`, `sum` and `pow` in
# fp32 (PyTorch's "CUDA ops that can autocast to float32" list); on the CPU they
# stay in fp16 (the CPU's fp32 list holds other ops, such as `cross_entropy`). So
# a hand-written `exp` can overflow on one device and not on the other. When you
# write a loss or a softmax by hand, do not rely on autocast to protect it: compute
# it in fp32 yourself (`logits.float()`) or use the fused, stable op
# (`F.cross_entropy`, `torch.softmax`).

# %% [markdown]
# A GPU can also change the fp32 baseline itself. On Ampere and newer GPUs an fp32
# matmul may run on TF32 tensor cores: 10 explicit mantissa bits, fp32's exponent
# range. PyTorch leaves that off for matmuls (`torch.get_float32_matmul_precision()`
# is `"highest"`, `torch.backends.cuda.matmul.allow_tf32` is `False`) and on for
# cuDNN convolutions (PyTorch documentation, "CUDA semantics", section on
# TensorFloat-32; `torch.set_float32_matmul_precision("high")` turns it on). With
# TF32 the fp32 runs below would be a little less exact, but nothing in them would
# overflow sooner: the range is fp32's.

# %% [markdown]
# A CPU without fp16 matrix hardware runs PyTorch's fp16 matmul kernel many times slower
# than its fp32 one (`bench/bench_half_matmul.py` measures it). So on a CPU nanlab's
# Trainer computes each fp16 matmul in fp32 and rounds the result to fp16 once, which is
# what PyTorch's fp16 GEMM does on a GPU (fp32 accumulation; `nanlab/layers/half_matmul.py`
# cites the source): the same fp16 output, the same overflow past 65504, in a fraction
# of the time. Every other op below runs in fp16 exactly as autocast leaves it.

# %% [markdown]
# ## 2. One run, four precisions
# The fault `fp16_overflow` is exactly that mistake: a softmax cross-entropy
# written by hand, `-log(exp(l_y) / Σ exp(l))`, without subtracting the max, as
# custom label-smoothing or distillation losses often are. In fp32 it equals
# `F.cross_entropy` until the model becomes confident. The fault computes it on the
# fp16 logits in an `autocast(enabled=False)` region, without `.float()`: inputs from
# the surrounding region must be cast to the dtype you want (the torch.amp docs on
# `autocast(enabled=False)` subregions), so every op runs in fp16, on the CPU and on
# CUDA alike. Inside autocast CUDA would run `exp` and `sum` in fp32 (section 1).

# %% [markdown]
# **Exercise · predict.** Four runs, same seed, same data: fp32, fp16 without a
# scaler, fp16 with a GradScaler (its first 120 steps), bf16. Return a dict mapping
# each of the `STATEMENTS` to `True` or `False`; a final loss is the mean of the last 10
# finite ones.

# %%
STATEMENTS = [
    "fp32: every loss finite",
    "bf16: every loss finite",
    "fp16 + GradScaler: every loss finite",
    "fp16, no scaler: finite for more steps than fp16 + GradScaler",
    "fp16, no scaler: final loss within 10 % of fp32's",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [True, True, False, True, False], strict=True))
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the runs: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("predict_precisions", my_predictions)

# %% [markdown]
# A callback records at every step the largest logit and the largest **log of the
# softmax denominator**, `logsumexp(logits)`, in fp32: the fp16 denominator overflows
# once it passes 11.09. Another keeps, every 30 steps, the run's own gradient of the
# loss with respect to the logits (section 3).

# %%
def watch_logits(store):
    """A run_fault callback: store[step] = (largest logit, largest logsumexp)."""
    def attach(trainer, info):
        def hook(module, inputs, logits):
            z = logits.detach().float()  # (B, T, V), measured in fp32
            store[trainer.step] = (z.max().item(), torch.logsumexp(z, -1).max().item())
        trainer.model.lm_head.register_forward_hook(hook)
    return ("on_run_start", attach)


def count_flushed(store, steps):
    """run_fault callbacks: store[step] = share of the run's own logit gradient that is
    exactly 0 (positions left out of the loss not counted), at each step in `steps`."""
    kept = {}

    def attach(trainer, info):
        def hook(module, inputs, logits):
            if trainer.step in steps and logits.requires_grad:
                logits.retain_grad()  # keep this step's d(loss)/d(logits)
                kept["logits"] = logits
        trainer.model.lm_head.register_forward_hook(hook)

    def count(trainer, info):
        logits = kept.pop("logits", None)
        if logits is not None and logits.grad is not None:
            rows = logits.grad[info.batch.targets != IGNORE_INDEX]
            store[info.step] = (rows == 0).float().mean().item()
    return [("on_run_start", attach), ("on_after_backward", count)]


probes = {name: {} for name in ("fp32", "fp16", "fp16 + GradScaler", "bf16")}
flushed = {name: {} for name in probes}
FLUSH_STEPS = range(0, 200, 30)
runs = {
    "fp32": run_fault("fp16_overflow", fixes=["amp_off"],
                      callbacks=[watch_logits(probes["fp32"]),
                                 *count_flushed(flushed["fp32"], FLUSH_STEPS)]),
    "fp16": run_fault("fp16_overflow", grad_scaler=False,
                      callbacks=[watch_logits(probes["fp16"]),
                                 *count_flushed(flushed["fp16"], FLUSH_STEPS)]),
    # the first 120 of 200 steps (same schedule): it is frozen after the NaN anyway
    "fp16 + GradScaler": run_fault("fp16_overflow", steps=120, decay_steps=200,
                                   callbacks=[watch_logits(probes["fp16 + GradScaler"]),
                                 *count_flushed(flushed["fp16 + GradScaler"], FLUSH_STEPS)]),
    "bf16": run_fault("fp16_overflow", fixes=["bf16"],
                      callbacks=[watch_logits(probes["bf16"]),
                                 *count_flushed(flushed["bf16"], FLUSH_STEPS)]),
}
for name, run in runs.items():
    c = run.trainer
    print(f"{name:18} precision {c.config.precision:5} scaler {c.scaler is not None!s:5} "
          f"first non-finite step {run.record.first_nonfinite_step}, "
          f"loss at the last step {run.record.losses()[-1]:.3g}")

# %% [markdown]
# Your prediction, graded against the four runs:

# %% tags=["nbval-check-output"]
first = {n: r.record.first_nonfinite_step for n, r in runs.items()}
finite_for = {n: len(r.record.steps) if first[n] is None else first[n] for n, r in runs.items()}
fp16_end, fp32_end = (final_loss(runs[n].record.losses()) for n in ("fp16", "fp32"))
actual = dict(zip(STATEMENTS, [
    first["fp32"] is None, first["bf16"] is None, first["fp16 + GradScaler"] is None,
    finite_for["fp16"] > finite_for["fp16 + GradScaler"],
    abs(fp16_end - fp32_end) < 0.1 * fp32_end,
], strict=True))
check("predict_precisions", my_predictions, actual, locked=True, hints=[
    "Range decides the forward pass: fp32 and bf16 reach 3.4e38, fp16 only 65504, and the "
    "hand-written sum of exps grows as the model grows confident. A scaler acts on the "
    "backward pass only.",
    "Without a scaler, gradients below fp16's smallest number become exactly 0: ask how "
    "confident such a model gets, and so how large its sum of exps grows.",
    "After committing, the check cell reads each statement from the runs: each record's "
    "`first_nonfinite_step`, and `final_loss` of the fp16 and fp32 runs' losses.",
])

# %% tags=["nbval-check-output"]
scaled = runs["fp16 + GradScaler"]
bad = scaled.record.first_nonfinite_step
print("fp32: no NaN in 200 steps:", runs["fp32"].record.first_nonfinite_step is None)
print("bf16: no NaN in 200 steps:", runs["bf16"].record.first_nonfinite_step is None)
print("fp16 + GradScaler: first non-finite step between 70 and 110:", 70 <= bad <= 110)
plain = runs["fp16"].record.first_nonfinite_step
print("fp16 without a scaler: finite for longer than with the GradScaler:",
      plain is None or plain > bad)

# %%
fig = plot_compare({name: run.record for name, run in runs.items()}, grad_norm=False)

# %% [markdown]
# Note plain fp16: finite far longer (on two threads it can still break near the end).
# Section 3 shows why; it was not safer. First:
# why does the GradScaler run fail then?

# %%
fig, ax = plt.subplots(figsize=(9, 3.5), layout="constrained")
for i, (name, store) in enumerate(probes.items()):
    steps = sorted(store)
    ax.plot(steps, [store[s][1] for s in steps], color=f"C{i}", lw=1.3, label=name)
    first = runs[name].record.first_nonfinite_step
    if first is not None:
        ax.axvline(first, color=f"C{i}", ls="--", lw=1,
                   label=f"{name}: first non-finite step {first}")
ax.axhline(FP16_EXP_LIMIT, color="red", lw=1.5, ls=":",
           label="ln(65504) = 11.09: the fp16 sum of exp overflows")
ax.set_xlabel("step")
ax.set_ylabel("largest logsumexp(logits)")
ax.set_title("The softmax denominator grows as the model learns (fp32 / bf16 limit: 88.7)")
ax.grid(alpha=0.3)
ax.legend(fontsize=7, loc="lower right");

# %% [markdown]
# Where does each curve cross 11.09, and what happens there? (bf16's limit is
# 88.7.)
#
# ### Where exactly: `locate`, and inf before NaN
# `locate` replays the GradScaler run's first bad step from its checkpoint and
# names, op by op, the first tensor that went non-finite:

# %%
loc = locate(scaled.trainer)
print(loc.report(max_events=6))

# %% tags=["nbval-check-output"]
row = scaled.record.steps[bad]
print(f"first non-finite value: the {loc.tensor} tensor, in the {loc.pass_name} pass")
print("made by the exp or the sum of exps:", loc.first_op.op in ("aten.exp", "aten.sum"))
print("the recorded loss of that step:", "inf" if math.isinf(row["loss"]) else row["loss"])
print("inf came before NaN:", loc.inf_before_nan)
print("first NaN appears in the pass:", loc.first_nan.pass_name)
top_lse = probes["fp16 + GradScaler"][bad][1]
print("log of the largest sum above 11.09 (the sum overflows):", top_lse > FP16_EXP_LIMIT)

# %% [markdown]
# In order:
#
# 1. The softmax denominator `Σ exp(logit)` passes 65504. In the stored run each
#    `exp(logit)` is finite and their **sum** (`aten.sum`) makes the first `+inf`;
#    on another CPU a logit past 11.09 can make `aten.exp` overflow first.
# 2. `exp(l_y) / inf = 0` and `−log(0) = +inf`: the loss is **inf, not NaN**.
# 3. In **backward** the chain rule multiplies that inf by a zero:
#    `inf · 0 = NaN`. Inf first, NaN second: claim B1.
#
# An `inf` loss with `NaN` gradients in the same step is the fingerprint of a
# forward-pass overflow.

# %% [markdown]
# Related tools: fairseq and metaseq re-run a failed step's samples inside
# `NanDetector`, whose hooks log the first module with a NaN or
# inf output or gradient (`fairseq/nan_detector.py`, called from `train_step` in
# `fairseq/trainer.py`); JAX's `jax_debug_nans` re-runs a jitted function op by op
# ("JAX debugging flags"); TensorFlow's `tf.debugging.enable_check_numerics()` raises
# at the first op with an inf or NaN; `torch.autograd.detect_anomaly()` watches the
# backward pass only. `locate` adds an exact replay (the failed step's checkpoint, batch
# and random state) and watches every ATen op of forward, loss, backward and the
# optimizer step; module hooks see only module outputs.

# %% [markdown]
# ## 3. The GradScaler: what it cures, what it cannot
# ### The loss-scale curve
# Loss scaling multiplies the loss by a scale $S$ before backward, so that small
# gradients land inside fp16's range, and divides them by $S$ before the update:
#
# $$\tilde L = S\,L,\qquad \tilde g = \frac{\partial \tilde L}{\partial w} = S\,g,\qquad g = \tilde g\,/\,S .$$
#
# After each step, `GradScaler.update()` (PyTorch, `torch/amp/grad_scaler.py`) sets
#
# $$S \leftarrow \begin{cases} S\cdot b & \text{if } \tilde g \text{ holds an inf or NaN: the update is skipped} \\ S\cdot \gamma & \text{after } N \text{ clean steps in a row} \\ S & \text{otherwise.} \end{cases}$$
#
# The record's `loss_scale` column holds each step's $S$. The constants, read from
# a fresh scaler:

# %% tags=["nbval-check-output"]
fresh = torch.amp.GradScaler("cpu")
print(f"initial S = {fresh.get_scale():g} = 2^{math.log2(fresh.get_scale()):g}, "
      f"backoff b = {fresh.get_backoff_factor()}, growth γ = {fresh.get_growth_factor()}, "
      f"N = {fresh.get_growth_interval()}")

# %%
srows = scaled.record.steps
steps = np.array([r["step"] for r in srows])
scale = np.array([r["loss_scale"] for r in srows])
skipped = np.array([r["skipped"] for r in srows])
fig, ax = plt.subplots(figsize=(9, 3), layout="constrained")
ax.step(steps, scale, where="post", color="C0", label="loss scale")
ax.plot(steps[skipped], scale[skipped], "x", color="red",
        label="skipped step (inf/NaN grads)")
ax.axvline(bad, color="red", ls="--", lw=1, label=f"first inf loss, step {bad}")
ax.set_yscale("log", base=2)
ax.set_xlabel("step")
ax.set_ylabel("loss scale (log2)")
ax.legend(fontsize=8)
ax.grid(alpha=0.3);

# %% tags=["nbval-check-output"]
before, after = skipped[:bad], skipped[bad:]
print("initial scale:", scale[0])
print("overflowing steps before the first inf loss: between 1 and 10:",
      1 <= int(before.sum()) <= 10)
print("skipped from the first inf loss on: more than 90 % of the steps:",
      after.mean() > 0.9)
print("every skipped step halved the scale, every other kept it:",
      all(scale[i + 1] == scale[i] * (0.5 if skipped[i] else 1.0)
          for i in range(len(scale) - 1)))
print("scale at the last step more than 1000x (2^10) below the scale at the first inf loss:",
      scale[-1] <= scale[bad] / 2**10)


# %% [markdown]
# Two regimes:
#
# - **Before the failure**, a few isolated skips: the first step (starting high
#   costs one skipped step, and the scale is halved) and an occasional step whose
#   scaled gradients passed 65504: the scaler working.
# - **After it**, the loss itself is inf. The scaler cannot tell that from a
#   gradient overflow: it skips and halves at every step, the weights stay frozen,
#   and the next step overflows again. PyTorch's GradScaler has no floor;
#   DeepSpeed stops with "Current loss scale already at minimum" (gpt-neox issue
#   #291 asked for that abort; it was fixed in EleutherAI's DeeperSpeed fork).
#
# BLOOM's 104B fp16 trials kept diverging (bigscience-workshop/bigscience,
# `train/tr8-104B-wide/chronicles.md`); the 176B model trained in bf16, one of five
# changes its notes credit, without an ablation (`train/tr11-176B-ml/chronicles.md`).
# **Log the loss scale, and alert when it keeps falling.**
#
# **Exercise 1 · the update rule.** Write `next_scale`, the rule of
# `GradScaler.update()`: on an overflow step, multiply by `backoff` and reset the
# count of clean steps; on a clean step, add one to the count, and when it reaches
# `growth_interval`, multiply by `growth` and reset it. Return
# `(new_scale, new_good_steps)`.

# %%
def next_scale(scale, found_inf, good_steps, growth_interval=2000, growth=2.0,
               backoff=0.5):
    """GradScaler's update after one step: (new scale, new count of clean steps)."""
    ### BEGIN SOLUTION
    if found_inf:
        return scale * backoff, 0
    good_steps += 1
    if good_steps == growth_interval:
        return scale * growth, 0
    return scale, good_steps
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def real_scales(flags, growth_interval):
    """Drive a real torch.amp.GradScaler through a sequence of overflow flags."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", growth_interval=growth_interval)
    out = []
    for overflow in flags:
        scaler.scale(torch.ones(()))  # the scaler must have scaled something this step
        p.grad = torch.tensor([math.inf if overflow else 1.0])
        scaler.step(opt)  # finds the inf, skips the step
        scaler.update()
        out.append(scaler.get_scale())
    return out


def my_scales(flags, growth_interval, start=2.0**16):
    out, s, good = [], start, 0
    for overflow in flags:
        s, good = next_scale(s, overflow, good, growth_interval)
        out.append(s)
    return out


FLAGS = [True, False, False, False, False, True, True] + [False] * 7
recorded = [bool(x) for x in skipped]  # the 120 steps of the run above
check("next_scale",
      lambda: {"a real GradScaler, growth every 3": my_scales(FLAGS, 3),
               "the run's recorded loss_scale column": my_scales(recorded, 2000)[:-1]},
      {"a real GradScaler, growth every 3": real_scales(FLAGS, 3),
       "the run's recorded loss_scale column": [float(s) for s in scale[1:]]},
      hints=[
          "The scaler backs off at once when a step overflows and grows only after a long run "
          "of clean steps.",
          "An overflow multiplies the scale by backoff and resets the count of good steps; a "
          "clean step adds one to the count first, and reaching growth_interval multiplies the"
          " scale by growth and resets the count.",
          "Three outcomes, each returned as a (scale, count) pair: an overflow, a clean step "
          "that completes the interval, and a clean step that does not.",
      ], solution="""\
if found_inf:
    return scale * backoff, 0
good_steps += 1
if good_steps == growth_interval:
    return scale * growth, 0
return scale, good_steps""")

# %% [markdown]
# ### What the scaler is for: gradients that underflow
# Why did plain fp16 stay finite so much longer? The callback kept each run's own gradient with
# respect to the logits every 30 steps. Softmax cross-entropy's gradient there,
# `(softmax − one-hot) / positions`, is never exactly 0 in exact arithmetic; how
# much of it was exactly 0 in each run?

# %%
print("step  " + "".join(f"{name:>19}" for name in flushed))
for step in FLUSH_STEPS:
    print(f"{step:4}  " + "".join(
        f"{100 * flushed[name][step]:17.1f} %" if step in flushed[name] else f"{'-':>19}"
        for name in flushed))

# %% tags=["nbval-check-output"]
late = max(flushed["fp16"])
print(f"fp16 without a scaler, step {late}: more than a quarter of the entries are 0:",
      flushed["fp16"][late] > 0.25)
print("fp32 and bf16: no entry is 0 at any step:",
      all(v == 0 for name in ("fp32", "bf16") for v in flushed[name].values()))
print("fp16 + GradScaler: fewer than 0.1 % at every step before its first non-finite one:",
      all(v < 0.001 for step, v in flushed["fp16 + GradScaler"].items() if step < bad))


# %% [markdown]
# The loss averages about a thousand positions, so each position's gradient is
# divided by a thousand; for a confident prediction it falls below fp16's 6e-8, to
# exactly 0. Scaling the loss by 2^16 lifts those values into range; dividing
# afterwards in fp32 restores their size. **Loss scaling is for underflow (下溢) in
# the backward pass.**
#
# So plain fp16 lost the gradients that would have made it more confident (its
# logsumexp and final loss against fp32's): it stayed finite because it **learned less**. A change that makes the NaN go away has not necessarily fixed
# anything (as with AMP off in Lab 03).
#
# ### The scaler's check, by hand
# **Exercise 2 · unscale and check.** Before the optimizer step,
# `scaler.unscale_(optimizer)` divides every gradient by the scale and records
# whether any is inf or NaN; `scaler.step(optimizer)` then skips
# `optimizer.step()` if so. Write `unscale_and_check(grads, scale)`: return
# `(unscaled, found_inf)`, new tensors `g / scale` and `True` when any element of
# any gradient is inf or NaN.

# %%
def unscale_and_check(grads, scale):
    """(gradients divided by the loss scale, whether any is inf or NaN)."""
    ### BEGIN SOLUTION
    unscaled = [g / scale for g in grads]
    found_inf = any(not bool(torch.isfinite(g).all()) for g in unscaled)
    return unscaled, found_inf
    ### END SOLUTION


# %% tags=["nbval-check-output"]
UNSCALE_CASES = {
    "clean": ([torch.tensor([2048.0, -512.0]), torch.tensor([[1024.0]])], 1024.0, False),
    "one inf": ([torch.tensor([1.0, math.inf]), torch.tensor([3.0])], 2.0, True),
    "one NaN": ([torch.tensor([1.0]), torch.tensor([0.0, math.nan])], 4.0, True),
    "tiny but finite": ([torch.tensor([6e-8, 0.0])], 65536.0, False),
}


def judge_unscale(got):
    for case, (grads, s, want_inf) in UNSCALE_CASES.items():
        unscaled, found = got[case]
        if bool(found) != want_inf:
            return f"case {case!r}: found_inf is {bool(found)}, expected {want_inf}"
        for g, u in zip(grads, unscaled, strict=True):
            if not torch.allclose(u, g / s, equal_nan=True):
                return f"case {case!r}: unscaled {u.tolist()}, expected {(g / s).tolist()}"
    return None


check("unscale_and_check", unscale_and_check,
      cases={c: (g, s) for c, (g, s, _) in UNSCALE_CASES.items()},
      test=judge_unscale, hints=[
          "Divide the scale back out of every gradient, then ask whether any of them holds an "
          "inf or NaN: if one does, the step must be skipped.",
          "torch.isfinite on a tensor, then all on the result, is False when the tensor holds "
          "any inf or NaN; Python's any combines the tensors.",
          "Return a pair: the list of divided gradients, and one bool that is True as soon as "
          "one of them is not entirely finite.",
      ], solution="""\
unscaled = [g / scale for g in grads]
found_inf = any(not bool(torch.isfinite(g).all()) for g in unscaled)
return unscaled, found_inf""")

# %% [markdown]
# Clip **after** `unscale_`, so that `max_norm = 1.0` means 1.0 in real units, not
# in units of 65536. A clipped inf is still not finite, so the scaler decides on
# what `unscale_` found, not on clipped values.
#
# ## 4. bf16: fp32's range, 8 bits of precision
# With fp32's 8 exponent bits, bf16 needs **no scaler**: nothing here comes near
# its limit, and gradients do not underflow. The price is the mantissa: add 0.001
# to a weight of 1.0.

# %% tags=["nbval-check-output"]
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    w = torch.tensor(1.0, dtype=dtype)
    print(f"{str(dtype):15} 1.0 + 0.001 = {(w + 0.001).item():.7f}   "
          f"spacing of numbers at 1.0: {torch.finfo(dtype).eps:.2e}")

# %% [markdown]
# bf16 loses the update: the next number after 1.0 is 1.0078. Updates are usually
# far smaller than the weights, so **weights and optimizer state stay in fp32** and
# only the compute runs in bf16, as in autocast and in the bf16 run above:

# %% tags=["nbval-check-output"]
b = runs["bf16"]
p = next(b.trainer.model.parameters())
with torch.amp.autocast(b.trainer.device.type, dtype=torch.bfloat16):
    out = b.trainer.model.lm_head(torch.randn(2, 64, device=b.trainer.device))
f32_end, b16_end = (final_loss(runs[n].record.losses()) for n in ("fp32", "bf16"))
print("bf16 run: weights", p.dtype, "| lm_head output", out.dtype)
print("bf16 run uses a GradScaler:", b.trainer.scaler is not None)
print("bf16 final loss within 10 % of fp32's:", abs(b16_end - f32_end) < 0.1 * f32_end)

# %% [markdown]
# bf16, with no other change and no scaler, is the usual first fix for fp16
# overflow on hardware that supports it (NVIDIA A100 and later, TPUs). Two limits:
# it does not cure a real divergence (Lab 03's `high_lr` still diverges in bf16:
# `nanlab matrix --faults high_lr --fixes bf16`), and the proper fix of *this*
# fault is the stable loss, `F.cross_entropy` (`nanlab.faults.fixes` calls it
# `stable_softmax`).
#
# ## 5. Adam's eps in pure fp16
# Some code puts the *whole* model and optimizer in fp16 (`model.half()`), without
# fp32 master weights. Adam divides by `√v + eps`, with `eps = 1e-8` by default:

# %% tags=["nbval-check-output"]
print("1e-8 in fp16:", torch.tensor(1e-8).half().item())
fi16 = torch.finfo(torch.float16)
print(f"smallest positive fp16: {fi16.tiny * fi16.eps:.2g}")
print("1e-4 squared in fp16:", (torch.tensor(1e-4).half() ** 2).item())


# %% [markdown]
# The eps is 0, and `v`, the running mean of squared gradients, is 0 for any
# small enough gradient: at the first step `v = (1 - β2) · g²`, and fp16 rounds
# anything up to half its smallest number (2^-25, about 3e-8) to 0: every `|g|`
# below √(2^-25 / (1 - β2)). `nanlab.optim.numerics.adam_v_underflow_grad` computes it
# (the interview bank and cheat sheet quote the same function):

# %% tags=["nbval-check-output"]
from nanlab.optim.numerics import adam_v_underflow_grad

for beta2, who in ((0.95, "the toy's TrainConfig"), (0.999, "PyTorch's default")):
    print(f"beta2 = {beta2} ({who}): v = 0 for |g| below "
          f"{adam_v_underflow_grad(beta2):.2g}")

# %% [markdown]
# Then the update `m / (√v + eps)` is `m / 0`. One AdamW step on four fp16 weights
# with gradients 1e-2, 1e-4, 1e-6 and 0:

# %% tags=["nbval-check-output"]
def one_adam_step(eps):
    w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    opt = torch.optim.AdamW([w], lr=1e-3, betas=(0.9, 0.95), eps=eps, weight_decay=0.0,
                            foreach=False)  # the toy trainer's betas
    w.grad = torch.tensor([1e-2, 1e-4, 1e-6, 0.0], dtype=torch.float16)
    opt.step()
    return ["nan" if math.isnan(v) else "inf" if math.isinf(v) else "finite"
            for v in w.tolist()]


print("eps = 1e-8:", one_adam_step(1e-8))
print("eps = 1e-4:", one_adam_step(1e-4))

# %% [markdown]
# `1e-4 / 0 = inf` and `0 / 0 = NaN`, written straight into the weights. The fault
# `adam_eps_fp16` does this to the toy model; where does `locate` point?

# %%
eps_run = run_fault("adam_eps_fp16", steps=5)
eps_loc = locate(eps_run.trainer)
print(eps_loc.report(max_events=3))

# %% tags=["nbval-check-output"]
print("first non-finite loss at step:", eps_run.record.first_nonfinite_step)
print("located step:", eps_loc.step, "| pass:", eps_loc.pass_name,
      "| op:", eps_loc.first_op.op)

# %% [markdown]
# Step 0's **update** writes ±inf into the weights (`aten.addcdiv_` is how
# PyTorch's Adam applies `w -= lr · m / (√v + eps)`). The signature: a NaN one step
# after a normal loss, nothing growing before it, and `locate` in the optimizer
# pass.
#
# The cure: keep what Adam accumulates in fp32, with fp16 *autocast* and a
# GradScaler (fp32 master weights and optimizer state; nanlab's fix
# `grad_scaler`) or with bf16 autocast. An eps fp16 can represent (1e-4) also
# stops the NaN, but pure-fp16 training stays fragile. The fix against the fp32
# run, same seed, 60 steps:

# %%
eps_fixed = run_fault("adam_eps_fp16", fixes=["grad_scaler"], steps=60, decay_steps=200)
cfg = eps_fixed.trainer.config
fixed_59 = eps_fixed.record.losses()[59]
fp32_59 = runs["fp32"].record.losses()[59]
print(f"precision {cfg.precision}, scaler {eps_fixed.trainer.scaler is not None}, "
      f"weights {next(eps_fixed.trainer.model.parameters()).dtype}")
print(f"loss at step 59: fixed {fixed_59:.3f}, fp32 {fp32_59:.3f}")

# %% tags=["nbval-check-output"]
print("no non-finite step:", eps_fixed.record.first_nonfinite_step is None)
print("loss at step 59 within 10 % of the fp32 run:",
      abs(fixed_59 - fp32_59) < 0.1 * fp32_59)

# %% [markdown]
# ## 6. The modern API in ten lines
# A loop for your own code. Three rules:
#
# - `torch.amp.autocast(device_type=..., dtype=...)` and
#   `torch.amp.GradScaler(device)`: the `torch.cuda.amp` spellings are deprecated;
# - autocast wraps the **forward pass and the loss only**, not `backward`;
# - `unscale_` before clipping, then `step` and `update`.
#
# With `growth_interval=10` (not 2000), 60 steps show the scale probing upwards
# and backing off.

# %%
from nanlab.toy.data import CountingTask
from nanlab.toy.model import GPT, GPTConfig
from nanlab.train import lm_loss, to_device

torch.manual_seed(0)
model = GPT(GPTConfig()).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-3, betas=(0.9, 0.95))
scaler = torch.amp.GradScaler(device, init_scale=2.0**16, growth_interval=10)
task, trace = CountingTask(seed=0), []
for step in range(60):
    batch = to_device(task(step), torch.device(device))
    with torch.amp.autocast(device_type=device, dtype=torch.float16):
        loss = lm_loss(model, batch)  # forward and loss in mixed precision
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()  # backward of loss * scale, outside autocast
    scaler.unscale_(opt)  # grads / scale, in place; looks for inf / NaN
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # real units now
    trace.append((scaler.get_scale(), loss.item()))
    scaler.step(opt)  # skips opt.step() if unscale_ found inf / NaN
    scaler.update()  # x0.5 after an overflow, x2 after 10 clean steps

# %%
loop_scale = np.array([s for s, _ in trace])
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 4), sharex=True, layout="constrained")
ax1.step(range(60), loop_scale, where="post")
ax1.set_yscale("log", base=2)
ax1.set_ylabel("loss scale")
ax2.plot([loss for _, loss in trace])
ax2.set_ylabel("loss")
ax2.set_xlabel("step");

# %% tags=["nbval-check-output"]
overflow = [bool(loop_scale[i + 1] < loop_scale[i]) for i in range(59)]
print("the loss went down:", trace[-1][1] < 0.5 * trace[0][1])
print("some steps overflowed and were skipped:", any(overflow))
print("the scale grew again after 10 clean steps:",
      any(loop_scale[i + 1] > loop_scale[i] for i in range(59)))

# %% [markdown]
# The sawtooth is normal: the scaler keeps probing a larger scale (more headroom
# for small gradients) and backs off after an overflow. A few skips per thousand
# steps are the price; a scale that only goes down is the alarm.
#
# And the old spelling, on a machine without CUDA?

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old = torch.cuda.amp.GradScaler()
for w in caught:
    print(f"{w.category.__name__}: {str(w.message)[:100]}")
print("old-style scaler enabled:", old.is_enabled())

# %% tags=["nbval-check-output"]
print("torch.cuda.amp.GradScaler() raises a FutureWarning (deprecated):",
      any(issubclass(w.category, FutureWarning) for w in caught))

# %% [markdown]
# Code from a 2020 tutorial thus runs unscaled on a laptop, with only a warning;
# on a GPU it works until the deprecated names are removed.
#
# ## 7. Practice

# %%
from nanlab.course import practice

practice("04-scaler-cures")

# %%
practice("04-pick-precision")

# %%
practice("04-mystery-scale")

# %%
practice("04-underflow-overflow")

# %% [markdown]
# ## Summary
# - fp16: max **65504**, `exp` overflows above **11.09**, underflow below
#   **6e-8**; bf16: fp32's range, 8 bits of precision.
# - Autocast keeps **fp32 weights**; its fp32 op list depends on the device:
#   write hand-made losses in fp32 or use the stable built-ins.
# - An `inf` loss, then `NaN` gradients: a forward overflow.
# - The **GradScaler cures underflow** and skips rare overflow steps; a **forward
#   overflow** makes its scale collapse. Log the scale.
# - A NaN that goes away is not a fix: plain fp16 "survived" by learning less.
# - **Adam eps 1e-8 is 0 in fp16**: keep optimizer state in fp32, or use bf16.
# - `torch.amp.autocast(device_type=...)`, `torch.amp.GradScaler(device)`,
#   `unscale_` before clipping.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
