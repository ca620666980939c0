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
# **Source notebook (solution version).** This pair, `solutions/06_norms_softmax.py` and
# `solutions/06_norms_softmax.ipynb`, is the single source of `labs/06_norms_softmax.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/06_norms_softmax.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 06 · Norms and softmax: tiny eps, naive softmax, QK-norm, z-loss
#
# Two small formulas sit in every Transformer layer: the **LayerNorm** (层归一化)
# `(x − mean) / sqrt(var + eps)` and the **softmax** `exp(x) / Σ exp(x)`. Each has one
# place where the arithmetic can break: a division by zero and an exponential
# that overflows (上溢). In this lab:
#
# 1. **eps** (数值稳定项): a row with no variance through LayerNorm, eps = 0, tiny
#    eps, fp32 and fp16; you write a safe norm;
# 2. **the `tiny_eps` fault**: padding tokens meet an embedding LayerNorm with eps
#    = 0; `locate` finds the 0 / 0, and the cure is proven with the same seed;
# 3. **softmax by hand**: where `exp` overflows in fp16 (11.09) and fp32 (88.7),
#    and the stable version; you write it;
# 4. **the `softmax_overflow` fault**: an attention score passes 11.09 in fp16;
#    `locate` shows the inf first, the NaN one op later (claim B1);
# 5. **three fixes, measured**: stable softmax, **QK-LayerNorm** and **z-loss**, two
#    methods that large runs use today and the article does not mention; which
#    one cures what;
# 6. **positions past 65504**: a sinusoidal encoding in pure fp16, and why "bf16
#    fixed it" is only half the story;
# 7. **LayerNorm init**, honestly;
# 8. **practice**.
#
# CPU only, about 45 minutes; the runs take a few seconds each. Cells marked
# `# YOUR CODE HERE` are yours; the cell after each one checks it.

# %% [markdown]
# ## Setup
# Every run is the toy Transformer of Lab 00 on the counting task, seed 0, with one
# fault switched on. To keep the lab fast, most runs are the first 60 steps of the
# usual 200-step run (`steps=60, decay_steps=200` keeps the 200-step schedule).

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from nanlab.course import check, hint, start_lab  # noqa: F401  (hint: yours, when stuck)
from nanlab.debug import locate
from nanlab.faults import run_fault
from nanlab.model import LayerNorm, SinusoidalPositions
from nanlab.viz import plot_compare

start_lab("06_norms_softmax")
SHORT = dict(steps=60, decay_steps=200)  # the first 60 steps of the 200-step run
FP16_EXP_LIMIT = math.log(torch.finfo(torch.float16).max)  # 11.09
FP32_EXP_LIMIT = math.log(torch.finfo(torch.float32).max)  # 88.72
print(f"exp(x) overflows fp16 above x = {FP16_EXP_LIMIT:.2f}, fp32 and bf16 above "
      f"x = {FP32_EXP_LIMIT:.2f}")

# %% [markdown]
# ## 1. LayerNorm's eps: a row with no variance
#
# LayerNorm subtracts the row mean and divides by the row's standard deviation.
# A row whose entries are all equal has variance 0, and then everything hangs on
# `eps`: `0 / sqrt(0 + eps)` is 0 when eps > 0, and `0 / 0` = NaN when eps = 0.
# Such rows are not exotic: the embedding of a **padding token** (填充符) is often
# a row of zeros (`nn.Embedding(padding_idx=...)` keeps it at zero).
#
# Two implementations, two precisions. `F.layer_norm` is PyTorch's fused op;
# the "manual" one is the line many codebases (and many RMSNorm implementations)
# write by hand, `(x − mean) / torch.sqrt(var + eps)`, with every op in the input's
# dtype (`nanlab.model.LayerNorm(..., impl="manual")`).

# %%
pad_row = torch.zeros(1, 64)  # a padding token's embedding: variance 0
table = {}
print(f"{'input':8} {'eps':>6} {'eps in that dtype':>18} {'F.layer_norm':>13} "
      f"{'manual':>8}")
for dtype in (torch.float32, torch.float16):
    for eps in (0.0, 1e-12, 1e-8, 1e-5):
        fused = F.layer_norm(pad_row.to(dtype), (64,), eps=eps)[0, 0].item()
        manual = LayerNorm(64, eps, "manual").to(dtype)(pad_row.to(dtype))[0, 0].item()
        table[(dtype, eps)] = (fused, manual)
        name = str(dtype).split(".")[1]
        print(f"{name:8} {eps:>6.0e} {torch.tensor(eps, dtype=dtype).item():>18.4g} "
              f"{fused:>13} {manual:>8}")

# %% tags=["nbval-check-output"]
nan = math.isnan
print("eps = 0: NaN in every implementation and dtype:",
      all(nan(v) for d in (torch.float32, torch.float16) for v in table[(d, 0.0)]))
print("fp32, eps = 1e-12: 0 in both implementations:",
      table[(torch.float32, 1e-12)] == (0.0, 0.0))
print("fp16 input, F.layer_norm, eps = 1e-12: 0 (not NaN):",
      table[(torch.float16, 1e-12)][0] == 0.0)
print("fp16, manual norm, eps = 1e-12 and 1e-8: NaN:",
      all(nan(table[(torch.float16, e)][1]) for e in (1e-12, 1e-8)))
print("fp16, manual norm, eps = 1e-5: 0:", table[(torch.float16, 1e-5)][1] == 0.0)
print("1e-8 in fp16 is exactly 0:", torch.tensor(1e-8, dtype=torch.float16).item() == 0.0)

# %% [markdown]
# Three lessons:
#
# - **eps = 0 is the bug**, in any precision: `0 / sqrt(0)` = `0 / 0` = NaN.
# - **A tiny eps is fine in fp32.** 1e-12 is a perfectly good eps for a row of
#   zeros in fp32; the exact value hardly matters as long as it is > 0.
# - **In fp16, a tiny eps becomes eps = 0**, but only in a norm that does its
#   arithmetic in fp16. fp16's smallest positive number is about 6e-8, so 1e-8
#   and 1e-12 round to exactly 0. `F.layer_norm` is safe because it computes the
#   mean and variance in fp32 inside, even for fp16 input (and on CUDA, autocast
#   runs `layer_norm` in fp32 altogether). The hand-written norm is not. 1e-5
#   survives (as 1.0014e-5, a subnormal).
#
# The hand-written fp16 norm has a second trap, at the other end of the range:
# the variance of a row with values around 300 is about 90 000, past fp16's 65504.

# %%
torch.manual_seed(0)
loud = torch.randn(1, 64) * 300  # a row with std ~300 (a large activation)
manual16 = LayerNorm(64, 1e-5, "manual").half()(loud.half())
fused16 = F.layer_norm(loud.half(), (64,))
print("manual fp16 norm of a row with std ~300, largest |output|:",
      manual16.abs().max().item())
print("F.layer_norm of the same fp16 row, largest |output|:",
      fused16.abs().max().item())


# %% [markdown]
# `var` overflows to inf, `x / sqrt(inf)` = 0: the whole row is silently zeroed.
# No NaN, no warning, just a layer that stops passing information. Both traps have
# the same cure: **compute the statistics in fp32** and cast back at the end.
#
# **Exercise 1 · a safe layer norm.** Write `safe_layer_norm(x, eps)`: normalise
# `x` over its last dimension, `(x − mean) / sqrt(var + eps)` with the biased
# variance (as LayerNorm uses), computing in fp32 whatever the input dtype, and
# return the result in `x`'s dtype. No weight or bias.

# %%
def safe_layer_norm(x, eps=1e-5):
    """LayerNorm over the last dim, statistics in fp32, returned in x.dtype."""
    ### BEGIN SOLUTION
    x32 = x.float()
    mean = x32.mean(-1, keepdim=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdim=True)
    return ((x32 - mean) / torch.sqrt(var + eps)).to(x.dtype)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
torch.manual_seed(1)
ROWS = torch.cat([torch.randn(2, 64), torch.zeros(1, 64), torch.randn(1, 64) * 300])


def norm_test(outputs):
    """fp16 rows (two random, one all zero, one std ~300) against F.layer_norm."""
    for eps, got in outputs.items():
        if got.dtype != torch.float16:
            return f"returned {got.dtype} for an fp16 input; cast back to x.dtype"
        bad_rows = (~torch.isfinite(got)).any(-1).nonzero().flatten().tolist()
        if bad_rows:
            return f"eps={eps}: non-finite values in rows {bad_rows}"
        err = (got.float() - F.layer_norm(ROWS, (64,), eps=eps)).abs().max().item()
        if err > 1e-2:
            return f"eps={eps}: differs from F.layer_norm by up to {err:.3g}"
    return None


check("safe_layer_norm",
      lambda: {eps: safe_layer_norm(ROWS.half(), eps) for eps in (1e-8, 1e-5)},
      test=norm_test,
      hints=["x32 = x.float(); compute mean and var on x32, over dim -1 with keepdim=True.",
             "var = ((x32 - mean) ** 2).mean(-1, keepdim=True); end with .to(x.dtype)."])

# %% [markdown]
# ## 2. The `tiny_eps` fault: padding meets eps = 0
#
# Now the same 0 / 0 inside a training run. The fault `tiny_eps` builds the setup
# where it bites in practice: a **LayerNorm straight after the token embedding**
# (BLOOM has one, to stabilise training), eps = 0, and **padded batches**: a
# quarter of the sequences are short and padded at the end with token 32, whose
# embedding row is all zeros. The padded positions are masked out of the loss, so
# they "should not matter". fp32 throughout.

# %%
eps0 = run_fault("tiny_eps", steps=5, stop_when_poisoned=True)
batch0 = eps0.trainer.batches(0)
pad_id = eps0.trainer.config.model.pad_id
n_pad = int((batch0.tokens == pad_id).sum())
print("first non-finite step:", eps0.record.first_nonfinite_step)
print("padding tokens in the batch of step 0:", n_pad)
print("every padded position masked out of the loss:",
      bool((batch0.targets[batch0.tokens == pad_id] == -100).all()))
print("loss of step 0:", eps0.record.losses()[0])

# %% [markdown]
# NaN at the very first step, although every padded position is masked out of the
# loss. Which module made it? `locate` replays the step with a hook on every module
# and a check on the result of every op:

# %%
loc_eps = locate(eps0.trainer)
print(loc_eps.report(max_events=6))

# %% tags=["nbval-check-output"]
op = loc_eps.first_op
print("first non-finite value in module:", loc_eps.module, f"({loc_eps.module_type})")
print("made by op:", op.op)
print("one +inf per padding token:", op.posinf == n_pad)
print("one NaN per padded row entry (64 per token):", op.nan == 64 * n_pad)
print("inf and NaN first appear in the same op:", loc_eps.inf_before_nan is None)

# %% [markdown]
# Read the counts. `aten.native_layer_norm` returns three tensors: the output, the
# row means and `rstd = 1 / sqrt(var + eps)`. For each padding token `rstd` is
# `1 / sqrt(0)` = **+inf** (one per token), and the output is `(x − mean) · rstd` =
# `0 · inf` = **NaN** (64 per token). Inf first, NaN one multiplication later,
# both inside the one fused op, so `locate` sees them together.
#
# How does a NaN at a *padded* position reach the loss, which only reads real
# positions? The padding sits at the end of each sequence, and the causal mask
# gives every later position an attention weight of exactly 0. But `att @ v` still
# multiplies those zeros by the padded values, and **0 · NaN is NaN**:

# %%
weights = torch.tensor([[1.0, 0.0]])  # attention: all on the real token, none on the pad
values = torch.tensor([[2.0], [math.nan]])  # the real token's value, the pad's NaN
print("att @ v =", (weights @ values).item())
print("0 * nan =", 0.0 * math.nan)

# %% [markdown]
# A mask hides a value from the *result* only when the masked value is finite.
# (This is also why a stable softmax writes `-inf` into the scores, and `exp(-inf)`
# = 0, instead of multiplying the probabilities by a 0/1 mask afterwards: fine for
# finite numbers, not for NaN.)
#
# ### The cure, proven with the same seed
# The fix `norm_eps` sets eps = 1e-5. One change, same seed, same data. As a
# second witness we run eps = 1e-12, the "too small" eps of the section title:

# %%
cured = run_fault("tiny_eps", fixes=["norm_eps"], **SHORT)
tiny = run_fault("tiny_eps", eps=1e-12, **SHORT)
for name, run in (("eps = 1e-5 (norm_eps)", cured), ("eps = 1e-12", tiny)):
    losses = run.record.losses()
    print(f"{name:22} first non-finite step {run.record.first_nonfinite_step}, "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f} at step {len(losses) - 1}")

# %% tags=["nbval-check-output"]
a, b = cured.record.losses(), tiny.record.losses()
print("no non-finite step in 60 steps, either eps:",
      cured.record.first_nonfinite_step is None
      and tiny.record.first_nonfinite_step is None)
print("the loss falls to below half its start:", a[-1] < 0.5 * a[0])
print("loss at step 59 within 2 % for eps 1e-5 and 1e-12:",
      abs(a[-1] - b[-1]) < 0.02 * a[-1])

# %%
fig = plot_compare({"eps = 0 (tiny_eps)": eps0.record,
                    "eps = 1e-5 (norm_eps)": cured.record,
                    "eps = 1e-12": tiny.record}, grad_norm=False)


# %% [markdown]
# The eps = 0 run is NaN from step 0 (its line is the vertical marker); both
# positive eps values train, and their curves lie on top of each other. So the
# claim "a LayerNorm eps that is too small gives NaN" needs sharpening: in fp32 the
# danger is **eps = 0** (a config that sets it, or a norm written without one);
# in fp16 it is **any eps below about 6e-8 in a norm that computes in fp16**, which
# is eps = 0 in disguise.
#
# (This model, with an embedding LayerNorm and padded batches, learns more slowly
# than the baseline of the other labs: compare its loss at step 59 with the clean
# run's in section 5. Both eps values agree, so that is the configuration, not the
# fix.)
#
# ## 3. Softmax by hand: naive against stable
#
# The softmax of a row `x` is `exp(x_i) / Σ_j exp(x_j)`. Written literally, it
# computes `exp` of every raw score. Subtracting the row maximum first changes
# nothing mathematically (the factor `exp(−max)` cancels) and makes every `exp`
# at most 1. Compare them on the row `[x, 0]` as `x` grows, in the three formats:

# %%
def naive_softmax(x):
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def max_subtracted_softmax(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
print(f"{'x':>6}  " + "  ".join(f"{'naive ' + n:>11}" for n in DTYPES)
      + f"  {'stable fp16':>11}")
results = {}
for value in (10.0, 11.0, 11.1, 12.0, 88.0, 89.0, 1000.0):
    row = []
    for name, dtype in DTYPES.items():
        p = naive_softmax(torch.tensor([value, 0.0], dtype=dtype))[0].item()
        results[(name, value)] = p
        row.append(f"{p:>11.4g}")
    row16 = torch.tensor([value, 0.0], dtype=torch.float16)
    stable = max_subtracted_softmax(row16)[0].item()
    results[("stable", value)] = stable
    print(f"{value:>6g}  " + "  ".join(row) + f"  {stable:>11.4g}")

# %% tags=["nbval-check-output"]
print("naive fp16: fine at 11.0, NaN at 11.1:",
      not nan(results[("fp16", 11.0)]) and nan(results[("fp16", 11.1)]))
print("naive fp32: fine at 88, NaN at 89:",
      not nan(results[("fp32", 88.0)]) and nan(results[("fp32", 89.0)]))
print("naive bf16 overflows where fp32 does (89), not where fp16 does:",
      not nan(results[("bf16", 12.0)]) and nan(results[("bf16", 89.0)]))
print("stable fp16: finite for every x, even 1000:",
      not any(nan(results[("stable", v)]) for v in (10.0, 11.1, 89.0, 1000.0)))


# %% [markdown]
# The naive softmax is NaN, not inf: `exp(x)` overflows to inf, the sum is inf,
# and `inf / inf` = NaN. In fp16 that happens as soon as one score passes **11.09**
# (`ln 65504`), a very ordinary number for an attention score or a logit. In fp32
# and bf16 (the same 8 exponent bits) the limit is **88.7**.
#
# The stable version never overflows: after subtracting the max, the largest
# `exp` is `exp(0) = 1`. What it *can* still do is underflow: a score far below
# the max gets probability exactly 0, which is the right answer to fp16's precision.
# This is what `torch.softmax`, `F.cross_entropy` and every fused attention kernel
# do inside.
#
# **Exercise 2 · a stable softmax.** Write `stable_softmax(x)` over the last
# dimension, in `x`'s own dtype (no casting to fp32: the point is that it survives
# fp16). It must handle `-inf` entries (the causal mask) too.

# %%
def stable_softmax(x):
    """Softmax over the last dim, computed in x.dtype, that never overflows."""
    ### BEGIN SOLUTION
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
LOGITS = torch.tensor([[0.0, 5.0, 12.0, 20.0, 30.0],  # overflows a naive fp16 softmax
                       [-math.inf, 2.0, 11.5, 11.5, -math.inf],  # masked entries
                       [-60000.0, 0.0, 1.0, 2.0, 3.0]], dtype=torch.float16)
print("the naive fp16 softmax of these rows is finite:",
      bool(torch.isfinite(naive_softmax(LOGITS)).all()))


def softmax_test(got):
    if got.dtype != LOGITS.dtype:
        return f"returned {got.dtype}; compute in the input's dtype ({LOGITS.dtype})"
    if not bool(torch.isfinite(got).all()):
        return "some probabilities are not finite"
    err = (got.float() - torch.softmax(LOGITS.float(), -1)).abs().max().item()
    return None if err < 1e-3 else f"differs from torch.softmax by up to {err:.3g}"


check("stable_softmax", lambda: stable_softmax(LOGITS), test=softmax_test,
      hints=["Subtract the row maximum: x.amax(-1, keepdim=True).",
             "exp(-inf - max) is exp(-inf) = 0: masked entries need no special case."])


# %% [markdown]
# ## 4. The `softmax_overflow` fault: inf first, then NaN
#
# The toy model's attention is written out by hand, so its softmax can be switched
# to the naive one. The fault `softmax_overflow` does that under fp16 autocast
# (with the usual GradScaler) at LR 0.01: as the model learns, its attention
# sharpens and the scores `q · k / sqrt(d)` grow. A small callback records the
# largest attention score of every step, as the softmax sees it (after the causal
# mask).
#
# The naive softmax runs with autocast switched off for it and no cast to fp32, so
# its `exp` sees the fp16 scores of the `q @ k` matmul on any device, CPU or CUDA.
# Inside autocast it would depend on the device: CUDA autocast runs `exp` and `sum`
# in fp32 (PyTorch documentation, "Automatic Mixed Precision package - torch.amp",
# CUDA ops that can autocast to float32) and would not overflow here; CPU autocast
# runs them in fp16. The numbers below are from the CPU.
#
# PyTorch's own attention could not fail this way.
# `F.scaled_dot_product_attention` picks a FlashAttention-2, a memory-efficient or
# a C++ math kernel (its PyTorch documentation). The math kernel uses PyTorch's
# softmax, which subtracts the row maximum; the fused kernels never write the score
# matrix out at all and normalise the softmax block by block with a running maximum
# (FlashAttention, Dao et al. 2022, section 3.1). That is why the toy writes its
# attention out by hand: a model on SDPA meets this failure only where its own code
# computes a softmax.

# %%
def watch_scores(store):
    """A run_fault callback: store[step] = the largest attention score of the step."""
    def attach(trainer, info):
        def hook(module, inputs):
            top = inputs[0].detach().float().max().item()
            store[trainer.step] = max(top, store.get(trainer.step, -math.inf))
        for block in trainer.model.blocks:
            block.attn.softmax.register_forward_pre_hook(hook)
    return ("on_run_start", attach)


scores = {"naive softmax": {}}
naive = run_fault("softmax_overflow", steps=40, decay_steps=200,
                  callbacks=[watch_scores(scores["naive softmax"])])
bad = naive.record.first_nonfinite_step
top = scores["naive softmax"]
print("first non-finite step:", bad)
print(f"largest score: step {bad - 1}: {top[bad - 1]:.2f}, step {bad}: {top[bad]:.2f}")

# %% tags=["nbval-check-output"]
print("first non-finite step within 20-35:", 20 <= bad <= 35)
print("every score below 11.09 before that step:",
      all(top[s] < FP16_EXP_LIMIT for s in range(bad)))
print("a score above 11.09 at that step:", top[bad] > FP16_EXP_LIMIT)
print("that step's update skipped by the GradScaler:", naive.record.steps[bad]["skipped"])

# %% [markdown]
# The step that goes non-finite is exactly the first step with a score past 11.09.
# The GradScaler skips that update (the gradients are NaN), but it cannot help: the
# overflow is in the forward pass, not a gradient that was scaled too far.
# Now `locate`, op by op:

# %%
loc_soft = locate(naive.trainer)
print(loc_soft.report(max_events=5))

# %% tags=["nbval-check-output"]
print("first non-finite value in an attention softmax:",
      loc_soft.module.endswith("attn.softmax"))
print("first op to make a non-finite value:", loc_soft.first_op.op,
      "(+inf only:", loc_soft.first_op.posinf > 0 and loc_soft.first_op.nan == 0, ")")
print("first NaN made by:", loc_soft.first_nan.op)
print("inf came before NaN:", loc_soft.inf_before_nan)

# %% [markdown]
# **Inf first, NaN second** (claim B1, 先出现 inf，再出现 NaN). `aten.exp` makes a
# handful of `+inf` values; the very next op, `aten.div`, turns each into NaN
# (`inf / inf`), and from there the NaN spreads through `att @ v`, the residual
# stream and the loss. This is the usual order: arithmetic overflows to inf, and
# inf is then turned into NaN by one of three operations. The faults of this lab
# each used one:

# %%
inf = torch.tensor(math.inf)
print("inf - inf =", (inf - inf).item(), "  (a stable softmax fed an inf score: x - max)")
print("0 * inf   =", (0 * inf).item(), "  (LayerNorm with eps = 0: (x - mean) * rstd)")
print("inf / inf =", (inf / inf).item(), "  (the naive softmax: exp / sum)")
print("sin(inf)  =", torch.sin(inf).item(), "  (section 6)")

# %% [markdown]
# So when a log shows NaN, look for the inf one step earlier in the chain: the inf
# says *what grew too large* (here: an attention score), and that is where the
# fix goes. `locate` answers it in one replay; `torch.autograd.detect_anomaly`
# would not, because it watches only the backward pass.
#
# ## 5. Three fixes, measured: stable softmax, QK-LayerNorm, z-loss
#
# Three candidate cures, each a one-line change (`nanlab.faults.fixes`):
#
# - **`stable_softmax`**: subtract the row max, as in section 3;
# - **`qk_norm`** (QK-LayerNorm): a LayerNorm on the queries and on the keys of each
#   head, before `q · k`. Used by large runs since Dehghani et al. 2023 (ViT-22B)
#   and studied by Wortsman et al. 2023, who found that runs whose attention logits
#   grew past about 1e4 diverged, and that QK-LayerNorm prevents that growth;
# - **`z_loss`**: an extra loss term `1e-4 · (log Z)²`, with `Z = Σ exp(logit)` the
#   softmax normaliser of the **output** layer (PaLM).
#
# Same seed, 60 steps each. The fixed runs keep everything else of the fault
# (fp16, LR 0.01); the clean run (fp32, stable softmax, the baseline LR 5e-3) is
# the yardstick for the loss. The z-loss run needs only the first 30 steps to
# answer its question.

# %%
scores.update({"clean (fp32)": {}, "stable_softmax": {}, "qk_norm": {}})
clean = run_fault(None, callbacks=[watch_scores(scores["clean (fp32)"])], **SHORT)
fixed = {fix: run_fault("softmax_overflow", fixes=[fix],
                        callbacks=[watch_scores(scores[fix])], **SHORT)
         for fix in ("stable_softmax", "qk_norm")}
fixed["z_loss"] = run_fault("softmax_overflow", fixes=["z_loss"], steps=30, decay_steps=200)
clean_losses = clean.record.losses()
print(f"clean (fp32): loss at step 59 {clean_losses[59]:.3f}")
for fix, run in fixed.items():
    losses = run.record.losses()
    print(f"{fix:15} first non-finite step {run.record.first_nonfinite_step}, "
          f"loss at step {len(losses) - 1}: {losses[-1]:.3f}")

# %% tags=["nbval-check-output"]
stable_run, qk_run = fixed["stable_softmax"].record, fixed["qk_norm"].record
stable_l, qk_l = stable_run.losses(), qk_run.losses()
print("stable_softmax: no non-finite step in 60:", stable_run.first_nonfinite_step is None)
print("stable_softmax: loss at step 59 within 5 % of the clean run:",
      abs(stable_l[59] - clean_losses[59]) < 0.05 * clean_losses[59])
print("qk_norm: no non-finite step in 60:", qk_run.first_nonfinite_step is None)
print("qk_norm: loss at step 59 below the stable_softmax run's (same LR):",
      qk_l[59] < stable_l[59])
print("z_loss: first non-finite step the same as without a fix:",
      fixed["z_loss"].record.first_nonfinite_step == bad)

# %% [markdown]
# Two cures and one non-cure, and the largest attention score of every step shows
# why:

# %%
fig, ax = plt.subplots(figsize=(9, 3.5), layout="constrained")
for i, (name, store) in enumerate(scores.items()):
    steps = sorted(store)
    ax.plot(steps, [store[s] for s in steps], color=f"C{i}", lw=1.4, label=name)
ax.axhline(FP16_EXP_LIMIT, color="red", ls=":", lw=1.5, label="11.09: exp overflows fp16")
ax.axvline(bad, color="C0", ls="--", lw=1, label=f"naive: first NaN, step {bad}")
ax.set_xlabel("step")
ax.set_ylabel("largest attention score")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
for name, store in scores.items():
    print(f"{name:15} largest attention score of the run: {max(store.values()):.2f}")

# %% tags=["nbval-check-output"]
print("stable_softmax: largest score still passes 11.09 (and nothing breaks):",
      max(scores["stable_softmax"].values()) > FP16_EXP_LIMIT)
print("stable_softmax: largest score more than 3x 11.09:",
      max(scores["stable_softmax"].values()) > 3 * FP16_EXP_LIMIT)
print("clean run (LR 5e-3): every score below 11.09:",
      max(scores["clean (fp32)"].values()) < FP16_EXP_LIMIT)
print("qk_norm: every score stays below 11.09:",
      max(scores["qk_norm"].values()) < FP16_EXP_LIMIT)


# %% [markdown]
# - **stable_softmax** does nothing to the scores: at LR 0.01 they keep growing,
#   several times past 11.09, and nothing breaks, because `exp` only ever sees
#   `x − max ≤ 0`. The loss follows the clean run. This is the real fix for this
#   bug, and the one a fused attention kernel gives you for free.
# - Note the clean run's scores: at the baseline LR they stay small. The higher LR
#   is what grows the attention logits; this is, at toy scale, the attention-logit
#   growth Wortsman et al. saw in large runs at high learning rates.
# - **qk_norm** attacks that growth itself: with q and k each normalised to a
#   fixed length, `q · k / sqrt(d)` can be at most about `sqrt(d)` = 4 here (head
#   size 16), times the learned norm gains, so the scores stay below 11.09 even
#   with the naive softmax and LR 0.01. It also reached a lower loss than the
#   stable-softmax run at the same LR. At scale this is the point: QK-LayerNorm
#   keeps attention logits bounded at high learning rates, whatever the softmax
#   implementation.
# - **z_loss** changes nothing here: the first NaN is at the same step. It acts on
#   the output layer's normaliser, not on attention. A fix aimed at the wrong
#   tensor is no fix, which is why `locate`'s answer ("attention softmax", not
#   "loss") matters before choosing one.
#
# ### What z-loss does act on
# The z-loss pulls `log Z` of the output softmax towards 0. Cross-entropy only
# cares about the *differences* between logits, so without it the whole logit
# vector can drift upwards, and `log Z` with it: the quantity that overflowed the
# hand-written fp16 loss of Lab 04 at 11.09. Watch `log Z` (the largest over the
# batch, computed in fp32) in the clean fp32 run, with PaLM's weight 1e-4, and
# with a weight 100x larger:

# %%
def watch_log_z(store):
    """A run_fault callback: store[step] = the largest log Z of the output softmax."""
    def attach(trainer, info):
        def hook(module, inputs, logits):
            store[trainer.step] = torch.logsumexp(logits.detach().float(), -1).max().item()
        trainer.model.lm_head.register_forward_hook(hook)
    return ("on_run_start", attach)


log_z = {}
for weight in (0.0, 1e-4, 1e-2):
    log_z[weight] = {}
    run_fault(None, z_loss=weight, callbacks=[watch_log_z(log_z[weight])], **SHORT)
    print(f"z-loss weight {weight:g}: largest log Z at step 59 = {log_z[weight][59]:.2f}")

# %%
fig, ax = plt.subplots(figsize=(9, 3), layout="constrained")
for i, (weight, store) in enumerate(log_z.items()):
    ax.plot(sorted(store), [store[s] for s in sorted(store)], color=f"C{i}",
            label=f"z-loss weight {weight:g}")
ax.axhline(FP16_EXP_LIMIT, color="red", ls=":",
           label="11.09: a hand-written fp16 sum of exp overflows")
ax.set_xlabel("step")
ax.set_ylabel("largest log Z (output)")
ax.grid(alpha=0.3)
ax.legend(fontsize=8);

# %% tags=["nbval-check-output"]
print("log Z grows during training without z-loss (step 59 above step 0 + 3):",
      log_z[0.0][59] > log_z[0.0][0] + 3)
print("weight 1e-4: log Z at step 59 within 0.5 of no z-loss:",
      abs(log_z[1e-4][59] - log_z[0.0][59]) < 0.5)
print("weight 1e-2: log Z at step 59 more than 2 below no z-loss:",
      log_z[1e-2][59] < log_z[0.0][59] - 2)


# %% [markdown]
# Honest reading: z-loss does what it says, it holds `log Z` down, but **at PaLM's
# weight of 1e-4 it makes no visible difference in 60 steps of this toy run**;
# only a weight around 1e-2 bends the curve. PaLM used 1e-4 over hundreds of
# thousands of steps, where a slow drift has time to matter. Its job is to keep
# the output logits from drifting over a long run (Wortsman et al. saw
# output-logit divergence without weight decay, and z-loss fixed it), not to
# rescue a run in a few steps. (Try it on Lab 04's fault yourself:
# `run_fault("fp16_overflow", z_loss=...)`, about 10 s per run, with `steps=140,
# decay_steps=200`.)
#
# **Exercise 3 · the z-loss term.** Write `z_loss_term(logits, weight)`: for each
# row of `logits` (the last dimension is the vocabulary), `log Z` =
# `log Σ exp(logits)`; return `weight` times the mean of `(log Z)²`. The logits may
# be fp16 and large: compute `log Z` so that it cannot overflow, in fp32.

# %%
def z_loss_term(logits, weight=1e-4):
    """weight * mean over rows of logsumexp(logits)^2, computed safely in fp32."""
    ### BEGIN SOLUTION
    log_z = torch.logsumexp(logits.float(), dim=-1)
    return weight * (log_z ** 2).mean()
    ### END SOLUTION


# %% tags=["nbval-check-output"]
torch.manual_seed(2)
Z_LOGITS = (torch.randn(8, 33) * 4 + 25).half()  # exp(25) is inf in fp16
expected = 1e-4 * torch.logsumexp(Z_LOGITS.double(), -1).pow(2).mean().item()


def z_test(got):
    value = float(got)
    if not math.isfinite(value):
        return f"got {value}: compute log Z without exp overflowing"
    if not math.isclose(value, expected, rel_tol=1e-4):
        return f"got {value:.6g}, expected {expected:.6g}"
    return None


check("z_loss_term", lambda: z_loss_term(Z_LOGITS, 1e-4), test=z_test,
      hints=["torch.logsumexp(x, dim=-1) subtracts the max inside, like a stable softmax.",
             "Cast to fp32 first (logits.float()), square, take the mean, times weight."])

# %% [markdown]
# ## 6. Positions past 65504 (`position_overflow`)
#
# The article lists positional-encoding overflow among the structural causes of
# NaN. Where does it really come from? A sinusoidal encoding computes
# `sin(pos · ω)` and `cos(pos · ω)` from the position id. A model that streams
# long documents and keeps counting positions across windows reaches large ids,
# and in a **pure-fp16** model (weights and activations `.half()`, no autocast)
# the id itself is cast to fp16. Look at the numbers first:

# %% tags=["nbval-check-output"]
positions = torch.arange(32) + 70_000  # one window, deep into a long stream
sinus = SinusoidalPositions(64)
for name, dtype in DTYPES.items():
    as_dtype = positions.to(dtype)
    pe = sinus(positions, dtype)
    distinct = len(set(as_dtype.tolist()))
    print(f"{name}: ids 70000, 70001 become {as_dtype[0].item():g}, "
          f"{as_dtype[1].item():g}; distinct ids: {distinct:2} of 32; "
          f"encoding finite: {bool(torch.isfinite(pe).all())}")

# %% [markdown]
# - **fp16**: 70000 is past 65504, the id becomes inf, and `sin(inf)` is NaN.
# - **bf16**: no overflow (fp32's range), but only 8 bits of precision: near 70000
#   bf16 can only represent multiples of 512, so all 32 positions of the window
#   round to **the same number**, 70144. Finite, and silently useless: every
#   position gets the same encoding.
# - **fp32**: exact.
#
# Now the fault in a run (pure fp16), and `locate`:

# %%
pos16 = run_fault("position_overflow", steps=3, stop_when_poisoned=True)
loc_pos = locate(pos16.trainer)
print(loc_pos.report(max_events=4))

# %% tags=["nbval-check-output"]
print("first non-finite step:", pos16.record.first_nonfinite_step)
print("first non-finite value made in module:", loc_pos.first_op.module,
      "by op", loc_pos.first_op.op, "(a cast to fp16)")
print("it is +inf:", loc_pos.first_op.posinf > 0 and loc_pos.first_op.nan == 0)
print("inf came before NaN:", loc_pos.inf_before_nan)

# %% [markdown]
# Inf first again: the cast `aten._to_copy` makes the inf, `sin` and `cos` make
# the NaN. The fault's registered cure is `bf16`: bf16 autocast instead of a pure
# fp16 model. It works, but check *why*: after the bf16 table above, it would be
# surprising if bf16 itself gave usable positions. A hook on the encoding reports
# the dtype it is computed in:

# %%
pe_dtype = {}


def watch_pe_dtype(trainer, info):
    def hook(module, inputs, output):
        pe_dtype[trainer.step] = output.dtype
    trainer.model.wpe.register_forward_hook(hook)


pos_bf16 = run_fault("position_overflow", fixes=["bf16"],
                     callbacks=[("on_run_start", watch_pe_dtype)], **SHORT)
pos_losses = pos_bf16.record.losses()
print(f"bf16 autocast: first non-finite step {pos_bf16.record.first_nonfinite_step}, "
      f"loss {pos_losses[0]:.3f} -> {pos_losses[-1]:.3f}")
print("positional encoding computed in:", set(pe_dtype.values()))

# %% tags=["nbval-check-output"]
print("bf16 autocast: no non-finite step in 60:",
      pos_bf16.record.first_nonfinite_step is None)
print("the loss falls to below half its start:", pos_losses[-1] < 0.5 * pos_losses[0])
print("the encoding was computed in fp32, not bf16:",
      set(pe_dtype.values()) == {torch.float32})

# %% [markdown]
# **The myth check.** "bf16 fixed the positional overflow" is true of the NaN and
# misleading about the cause. Under autocast the weights stay fp32, the embedding
# lookup returns fp32, and the model computes the encoding in the dtype of that
# embedding, so the positions were exact fp32 numbers. bf16's wide range played no
# part; had the model been cast to bf16 outright (`model.bfloat16()`), the NaN
# would be gone and all 32 positions would be 70144: no error, a worse model, and
# nothing in the loss curve to say why.
#
# The robust fix is to **compute positions in fp32 whatever the model's dtype**
# (what careful RoPE implementations do), or to keep position ids small (reset them
# per window; relative encodings). And the claim as the article states it needs
# its condition: positional encodings overflow only where a position id (or
# `pos · ω`) is held in fp16.
#
# ## 7. LayerNorm init: an honest note
#
# The article also lists LayerNorm (and BatchNorm) initialisation as a cause of
# NaN. The standard init, gain 1 and bias 0, cannot cause one: LayerNorm's output
# is bounded whatever its input's scale, `|y| ≤ sqrt(d − 1)` per entry for gain 1.
# That is why LayerNorm is the cure for badly scaled activations, not a cause.
# The bound holds until the input is so large that the variance itself overflows:

# %%
torch.manual_seed(0)
bound = math.sqrt(64 - 1)
largest = {}
for scale in (1e-3, 1.0, 1e4, 1e18, 1e20):
    y = F.layer_norm(torch.randn(4, 64) * scale, (64,))
    largest[scale] = y.abs().max().item()
    print(f"input scale {scale:7.0e}: largest |output| {largest[scale]:.3f}   "
          f"(bound {bound:.2f})")

# %% tags=["nbval-check-output"]
print("output bounded for input scales 1e-3 to 1e18:",
      all(largest[s] <= bound for s in (1e-3, 1.0, 1e4, 1e18)))
print("NaN at 1e20 (x² = 1e40 overflows fp32):", nan(largest[1e20]))

# %% [markdown]
# So LayerNorm by itself breaks in exactly two ways: **eps = 0 on a constant row**
# (sections 1-2) and **an input so large that its square overflows** (past about
# 1e19 in fp32, about 256 in a hand-written fp16 norm). A badly chosen *gain*
# (initialised to 100, say) is just a large init: it scales the output like any
# weight (the init lab's topic), and a gain of 0 silences the layer without a NaN.
# BatchNorm divides by `sqrt(var + eps)` too (eps 1e-5 by default), so the same two
# ways apply to it. In an interview: name the mechanism, not the module.
#
# ## 8. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import FreeText, KeyPoint, MultipleChoice, Ordering, RootCause

MultipleChoice(
    "06-eps-fp16",
    "A hand-written LayerNorm, (x - mean) / torch.sqrt(var + eps) with eps = 1e-8, runs "
    "in a pure-fp16 model. A padding row of zeros comes in. What comes out?",
    ["NaN: 1e-8 rounds to 0 in fp16, so it is 0 / sqrt(0)",
     "zeros: eps keeps the denominator positive",
     "inf: dividing by a tiny eps",
     "zeros, because fp16 flushes the whole row to 0"],
    answers=0,
    explanation="fp16's smallest positive value is about 6e-8; 1e-8 becomes exactly 0. "
    "F.layer_norm would give zeros: it computes the statistics in fp32.",
    hints=["What is torch.tensor(1e-8, dtype=torch.float16)?"],
)

# %%
MultipleChoice(
    "06-attn-overflow-fixes",
    "An fp16 model with a hand-written attention softmax goes NaN once an attention "
    "score passes 11.09. Which changes remove the NaN? Tick all that apply.",
    ["subtract the row max before exp (stable softmax)",
     "QK-LayerNorm (normalise queries and keys)",
     "z-loss with weight 1e-4",
     "a GradScaler",
     "bf16 instead of fp16"],
    answers=[0, 1, 4],
    explanation="The stable softmax removes the overflow from the arithmetic, QK-norm "
    "keeps the scores small, bf16 moves exp's limit to 88.7. z-loss acts on the output "
    "logits, not attention; the GradScaler only handles gradients, and the overflow "
    "is in the forward pass (the run above had one).",
    hints=["Which of these touches the attention scores or the exp that overflows?",
           "Did the softmax_overflow run have a GradScaler?"],
)

# %%
Ordering(
    "06-inf-then-nan",
    "Put the events of a naive-softmax overflow in fp16 in the order they happen.",
    ["an attention score passes 11.09",
     "exp(score) overflows to inf",
     "exp / sum gives inf / inf = NaN",
     "att @ v spreads the NaN to the later layers",
     "the loss is NaN",
     "the GradScaler finds NaN gradients and skips the update"],
    explanation="Inf comes first, in the forward pass; one op later it is NaN; the "
    "backward pass and the scaler only see the consequence.",
    hints=["Which comes first, inf or NaN?"],
)

# %%
RootCause(
    "06-mystery-padding",
    "Mystery: a model with a LayerNorm right after the token embedding goes NaN at "
    "step 0, in fp32. What is the root cause? Tick the evidence that supports it.",
    ["dirty data", "learning rate too high", "fp16 overflow", "bad init",
     "LayerNorm eps too small"],
    answer="LayerNorm eps too small",
    evidence=["batches without padding train normally",
              "locate: first non-finite value in embed_norm, op native_layer_norm",
              "the number of inf values equals the number of padding tokens",
              "LR / 10 gives NaN at step 0 as well",
              "the attention scores contain NaN",
              "the loss at step 0 is NaN"],
    supporting=["batches without padding train normally",
                "locate: first non-finite value in embed_norm, op native_layer_norm",
                "the number of inf values equals the number of padding tokens"],
    explanation="A padding row of zeros has variance 0; with eps = 0 the norm computes "
    "0 / 0. LR / 10 not helping rules the LR out but does not point anywhere; NaN "
    "attention scores and a NaN loss are downstream symptoms. The data is legal: "
    "padding is normal, the model must survive it.",
    hints=["Which evidence names a place, and which only a symptom?",
           "What is the variance of a row of zeros?"],
)

# %%
FreeText(
    "06-qk-norm-vs-z-loss",
    "Interview: 'What do QK-LayerNorm and z-loss each protect against? Which would you "
    "reach for if attention logits keep growing?' Answer in three or four sentences.",
    key_points=[
        KeyPoint("QK-norm normalises queries and keys, bounding the attention logits",
                 ("normalise q", "normalize q", "queries and keys", "query and key",
                  "q and k", "attention logit", "attention score", "bound"),
                 "say what QK-LayerNorm normalises and what that bounds"),
        KeyPoint("z-loss penalises log Z of the output softmax",
                 ("log z", "logsumexp", "normaliser", "normalizer", "partition",
                  "output logit", "output softmax"),
                 "say what z-loss penalises"),
        KeyPoint("z-loss does not act on attention",
                 ("not attention", "output layer", "final layer", "lm head",
                  "doesn't touch attention", "does not touch attention", "wrong tensor"),
                 "say where z-loss acts, and where it does not"),
        KeyPoint("a stable (max-subtracted) softmax / locate first",
                 ("stable softmax", "subtract the max", "max-subtracted", "locate",
                  "fused", "数值稳定"),
                 "mention the arithmetic fix or finding where the overflow is"),
    ],
    model_answer="QK-LayerNorm normalises the queries and keys of each head before "
    "their dot product, so the attention logits stay bounded even at a high learning "
    "rate. z-loss adds a small penalty on log Z, the log of the output softmax's "
    "normaliser, so the output logits cannot drift upwards; it does not act on "
    "attention at all. For growing attention logits I would first locate the overflow "
    "and make sure the softmax subtracts the max (or use the fused kernel), then add "
    "QK-LayerNorm; z-loss is for the output layer.",
    hints=["One of them acts inside attention, the other on the last layer.",
           "What does each normalise or penalise?"],
)

# %% [markdown]
# ## Summary
# - **LayerNorm's eps**: a row with variance 0 (a padding token's zero embedding)
#   gives `0 / sqrt(0 + eps)`. eps = 0 is NaN in any precision; a tiny eps (1e-12)
#   is fine in fp32; in fp16 an eps below ~6e-8 *is* 0 in a norm that computes in
#   fp16. `F.layer_norm` computes in fp32 inside; a hand-written norm should too.
# - **The `tiny_eps` fault**: NaN at step 0 although the padded positions are masked
#   out of the loss, because attention multiplies their NaN values by weight 0, and
#   0 · NaN = NaN. `locate` named `embed_norm`, with one inf `rstd` per padding
#   token. eps = 1e-5 (or 1e-12) cured it, same seed.
# - **Softmax**: the naive `exp / sum` is NaN once a score passes 11.09 in fp16, 88.7
#   in fp32 and bf16. Subtracting the row max makes every `exp` ≤ 1.
# - **Inf first, then NaN** (B1): `exp` made the inf, `div` the NaN, one op later;
#   the NaN-making ops are `inf − inf`, `0 · inf`, `inf / inf` (and `sin(inf)`).
# - **Fixes, measured**: the stable softmax cures the attention overflow; QK-LayerNorm
#   cures it by keeping the scores small; z-loss does not (it acts on the output
#   logits' `log Z`, and at 1e-4 barely moves it in a short run).
# - **Positions past 65504** are inf in pure fp16; bf16 autocast "cured" it because
#   the encoding was then computed in fp32. In pure bf16 all 32 positions of a window
#   would collapse to one value. Compute positions in fp32.
# - **LayerNorm init** is not a NaN source: the output is bounded until the input's
#   square overflows.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
