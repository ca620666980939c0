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
# Two small formulas in every Transformer layer can break: the **LayerNorm**
# (层归一化) can divide by zero, the **softmax**'s exponential can overflow (上溢).
# Also measured: **QK-LayerNorm** and **z-loss**, two methods large runs use today
# that the article does not mention.
#
# CPU only, about 45 minutes; the runs take seconds. Cells marked
# `# YOUR CODE HERE` are yours; the cell after each one checks it.

# %% [markdown]
# ## Setup
# Every run is Lab 00's toy Transformer on the counting task, seed 0, with one fault
# switched on. Most runs are the first 60 steps of the usual 200-step schedule
# (`steps=60, decay_steps=200`).

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import locate
from nanlab.faults import run_fault
from nanlab.toy.model import LayerNorm, SinusoidalPositions
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
# A row of equal entries has variance 0, so all hangs on `eps` (数值稳定项):
# `0 / sqrt(0 + eps)` is 0 when eps > 0, and `0 / 0` = NaN when eps = 0. A
# **padding token** (填充符) often embeds as such a row of zeros
# (`nn.Embedding(padding_idx=...)` keeps it at zero). Compare the fused
# `F.layer_norm` with the hand-written line of many codebases (and RMSNorm
# implementations), `(x − mean) / torch.sqrt(var + eps)` in the input's dtype
# (`nanlab.toy.model.LayerNorm(..., impl="manual")`):

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
# Why: fp16's smallest positive number is about 6e-8, so a norm computing in fp16
# rounds 1e-8 and 1e-12 to 0, eps = 0 in disguise; 1e-5 survives
# (as 1.0014e-5, a subnormal). `F.layer_norm` computes mean and variance in fp32
# inside, even for fp16 input (and on CUDA, autocast runs `layer_norm` in fp32
# altogether). In fp32 any eps > 0 keeps the row finite.
#
# A second fp16 trap: a row with values around 300 has a variance of about 90 000,
# past fp16's 65504.

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
# `var` overflows to inf and `x / sqrt(inf)` = 0: the row is silently zeroed. One
# cure for both traps: **compute the statistics in fp32**, cast back at the end.
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
      hints=[
          "Compute the statistics in fp32, where the squares of fp16 values cannot overflow, "
          "and give only the result back in the input's dtype.",
          "Mean and variance over the last dimension, kept for broadcasting; eps goes inside "
          "the square root; the tensor's to method casts back at the end.",
          "Everything between the first cast (x.float()) and the last one (.to(x.dtype)) runs "
          "in fp32: the biased variance is the mean of the squared deviations, and "
          "torch.sqrt takes the root of it plus eps.",
      ], solution="""\
x32 = x.float()
mean = x32.mean(-1, keepdim=True)
var = ((x32 - mean) ** 2).mean(-1, keepdim=True)
return ((x32 - mean) / torch.sqrt(var + eps)).to(x.dtype)""")

# %% [markdown]
# ### eps in backward: the gain through a norm
# Does the size of eps matter backward? With
# $\hat x = (x-\mu)/\sqrt{\sigma^2+\epsilon}$ and $g = \partial L/\partial \hat x$,
# differentiating through $\mu$ and $\sigma^2$ gives (bars: means over the row)
#
# $$\frac{\partial L}{\partial x} = \frac{1}{\sqrt{\sigma^2+\epsilon}}\left(g - \bar g - \hat x\,\overline{g\hat x}\right),$$
#
# a gain of about $1/\sqrt{\sigma^2+\epsilon}$: on a row with next to no variance,
# $1/\sqrt{\epsilon}$. Measured on a near-constant row:

# %%
flat_row = 1e-7 * torch.randn(1, 64)  # variance ~1e-14: next to none
upstream = torch.randn(1, 64)
for eps in (1e-12, 1e-5):
    x = flat_row.clone().requires_grad_()
    F.layer_norm(x, (64,), eps=eps).backward(upstream)
    gain = (x.grad.norm() / upstream.norm()).item()
    bound = 1 / math.sqrt(flat_row.var(unbiased=False).item() + eps)
    print(f"eps {eps:.0e}: |dL/dx| / |dL/dy| = {gain:.3g}, 1 / sqrt(var + eps) = {bound:.3g}")

# %% [markdown]
# ## 2. The `tiny_eps` fault: padding meets eps = 0
#
# `tiny_eps` puts a **LayerNorm right after the token embedding** (BLOOM has one,
# to stabilise training), with eps = 0, and pads a quarter of the sequences at the
# end with token 32, whose embedding is all zeros; padded positions are masked out
# of the loss. fp32 throughout.

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
# NaN at step 0, despite the mask. `locate` replays the step, hooking every module
# and checking every op:

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
# `aten.native_layer_norm` returns the output, the row means and
# `rstd = 1 / sqrt(var + eps)`. A padding token's `rstd` is `1 / sqrt(0)` = **+inf**,
# and its output `(x − mean) · rstd` is `0 · inf` = **NaN**: inf, then NaN, in one
# fused op, so `locate` sees them together.
#
# How does a padded NaN reach the loss? The causal mask gives padded (later)
# positions an attention weight of exactly 0, but `att @ v` still multiplies those
# zeros by the padded values:

# %%
weights = torch.tensor([[1.0, 0.0]])  # attention: all on the real token, none on the pad
values = torch.tensor([[2.0], [math.nan]])  # the real token's value, the pad's NaN
print("att @ v =", (weights @ values).item())
print("0 * nan =", 0.0 * math.nan)

# %% [markdown]
# A mask hides only finite values from the *result*. (Hence a stable softmax puts
# `-inf` in the scores, `exp(-inf)` = 0, rather than multiplying probabilities by a
# 0/1 mask.)
#
# ### The cure, proven with the same seed
# The fix `norm_eps` sets eps = 1e-5 (same seed and data); a second witness runs
# eps = 1e-12:

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
# So "a LayerNorm eps that is too small gives NaN" needs sharpening: the NaN comes
# from **eps = 0** (a config, or a norm written without one) or, in fp16, from **any
# eps below about 6e-8 in a norm that computes in fp16**. A tiny eps > 0 is finite,
# not safe: backward multiplies a near-flat row's gradient by up to `1/sqrt(eps)`
# (section 1: 9.94e5 at 1e-12, 316 at 1e-5); keep the default 1e-5. (On this
# seed both end step 59 above section 5's clean run, checked there: the
# configuration, not the fix.)
#
# ## 3. Softmax by hand: naive against stable
#
# Subtracting the row maximum before `exp(x_i) / Σ_j exp(x_j)` changes nothing
# mathematically (`exp(−max)` cancels) and keeps every `exp` ≤ 1. Naive and stable,
# on the row `[x, 0]` as `x` grows:

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
# Naive: `exp` and the sum overflow, and `inf / inf` = NaN. In fp16 that takes a
# score past **11.09** (`ln 65504`), an ordinary attention score or logit; in fp32
# and bf16 (the same 8 exponent bits), past **88.7**. The stable version can only
# underflow, to probability exactly 0, the right answer at fp16's precision.
# `torch.softmax`, `F.cross_entropy` and every fused attention kernel do this
# inside.
#
# **Exercise 2 · a stable softmax.** Write `stable_softmax(x)` over the last
# dimension, in `x`'s own dtype (no cast to fp32: the point is that it survives
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


check("stable_softmax", lambda: stable_softmax(LOGITS.clone()), test=softmax_test,
      hints=[
          "Softmax does not change when the same number is subtracted from a whole row: "
          "subtract the row's largest value and no exponential can exceed 1.",
          "amax over the last dimension, with keepdim, gives the row maxima; masked entries at"
          " minus infinity then have an exponential of 0, with no special case.",
          "torch.exp of the shifted rows, then divide by their sum over the last dimension, "
          "kept with keepdim; no .float() anywhere, so the dtype stays the input's.",
      ], solution="""\
e = torch.exp(x - x.amax(-1, keepdim=True))
return e / e.sum(-1, keepdim=True)""")


# %% [markdown]
# ## 4. The `softmax_overflow` fault: inf first, then NaN
#
# `softmax_overflow` swaps the naive softmax (a module, `NaiveSoftmax`) in for the
# toy's stable one in every attention layer, under fp16 autocast (with the usual GradScaler) at LR 0.01, where the scores
# `q · k / sqrt(d)` grow as attention sharpens. A callback records each step's
# largest score, after the causal mask.
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
# matrix out and normalise the softmax block by block with a running maximum
# (FlashAttention, Dao et al. 2022, section 3.1). So the toy writes its attention by
# hand: a model on SDPA meets this failure only where its own code
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
# The GradScaler skips that step (its gradients are NaN) but cannot help: the
# overflow is in the forward pass. Now `locate`, op by op:

# %%
loc_soft = locate(naive.trainer)
print(loc_soft.report(max_events=5))
print(f"\nfirst +inf made by {loc_soft.first_op.op}, first NaN by {loc_soft.first_nan.op}")

# %% tags=["nbval-check-output"]
print("first non-finite value in an attention softmax:",
      loc_soft.module.endswith("attn.softmax"))
print("first op to make a non-finite value: the exp or the sum of exps:",
      loc_soft.first_op.op in ("aten.exp", "aten.sum"),
      "(+inf only:", loc_soft.first_op.posinf > 0 and loc_soft.first_op.nan == 0, ")")
print("inf came before NaN:", loc_soft.inf_before_nan)

# %% [markdown]
# **Inf first, NaN second** (claim B1, 先出现 inf，再出现 NaN): in the stored run
# `aten.exp` makes `+inf` and the next op, `aten.div`, makes NaN (`inf / inf`; on
# another CPU the sum may overflow first, the NaN a few ops later), which spreads
# through `att @ v`, the residual stream and the loss. Each fault of this lab used one of three inf-to-NaN
# operations:

# %%
inf = torch.tensor(math.inf)
print("inf - inf =", (inf - inf).item(), "  (a stable softmax fed an inf score: x - max)")
print("0 * inf   =", (0 * inf).item(), "  (LayerNorm with eps = 0: (x - mean) * rstd)")
print("inf / inf =", (inf / inf).item(), "  (the naive softmax: exp / sum)")
print("sin(inf)  =", torch.sin(inf).item(), "  (section 6)")

# %% [markdown]
# Behind a NaN, find the inf one step earlier: it shows *what grew too large*
# (here an attention score), where the fix goes. `locate` finds it in one replay;
# `torch.autograd.detect_anomaly` watches only the backward pass.
#
# ## 5. Three fixes, measured: stable softmax, QK-LayerNorm, z-loss
#
# - **`stable_softmax`**: subtract the row max (section 3);
# - **`qk_norm`** (QK-LayerNorm): a LayerNorm on each head's queries and keys before
#   `q · k`, used by large runs since Dehghani et al. 2023 (ViT-22B). The failure it
#   prevents at scale is not an fp16 overflow but attention entropy collapse, measured
#   in [Lab 11, section 4](11_lr_sensitivity.ipynb#4.-Inside-a-failing-run:-attention-logits);
# - **`z_loss`**: an extra loss `1e-4 · (log Z)²`, `Z = Σ exp(logit)` being the
#   **output** layer's softmax normaliser (PaLM).
#
# One-line fixes (`nanlab.faults.fixes`), same seed, fp16 and LR 0.01, 60 steps
# (z-loss 40); the clean run (fp32, stable softmax, LR 5e-3) is the yardstick.

# %%
scores.update({"clean (fp32)": {}, "stable_softmax": {}, "qk_norm": {}})
clean = run_fault(None, callbacks=[watch_scores(scores["clean (fp32)"])], **SHORT)
fixed = {fix: run_fault("softmax_overflow", fixes=[fix],
                        callbacks=[watch_scores(scores[fix])], **SHORT)
         for fix in ("stable_softmax", "qk_norm")}
fixed["z_loss"] = run_fault("softmax_overflow", fixes=["z_loss"], steps=40, decay_steps=200)
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
print("seed 0: stable_softmax's loss at step 59 within 25 % of the clean run's:",
      abs(stable_l[59] - clean_losses[59]) < 0.25 * clean_losses[59])
print("qk_norm: no non-finite step in 60:", qk_run.first_nonfinite_step is None)
print("seed 0: qk_norm's loss at step 59 below stable_softmax's (same LR):",
      qk_l[59] < stable_l[59])
print("seed 0: section 2's two eps runs end step 59 above the clean run:",
      min(cured.record.losses()[59], tiny.record.losses()[59]) > clean_losses[59])
z_bad = fixed["z_loss"].record.first_nonfinite_step
print("z_loss: still non-finite within 40 steps, within 5 steps of the run without a fix:",
      z_bad is not None and abs(z_bad - bad) <= 5)

# %% [markdown]
# Each step's largest attention score shows why:

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
# - **stable_softmax** leaves the scores alone: they pass 11.09 several times over,
#   harmlessly, since `exp` only sees `x − max ≤ 0`: the real fix, free in a fused
#   attention kernel.
# - **qk_norm** stops the growth that the high LR causes (the clean run's scores
#   stay small; Dehghani et al. met it at 22B): `q · k / sqrt(d)` of
#   normalised q and k is at most about `sqrt(d)` = 4 here (head size 16) times the
#   learned norm gains, below 11.09 even with the naive softmax. At scale it bounds
#   attention logits at a high LR, whatever the softmax.
# - **z_loss** changes nothing: it acts on the output layer's normaliser, not on
#   attention. Check `locate`'s answer first ("attention softmax", not "loss").
#
# ### What z-loss does act on
# Cross-entropy sees only *differences* between logits, so the whole logit vector,
# and `log Z`, is free to drift, up or down. Wortsman et al. 2023 (section 3.1.2,
# Figure 4) describe the large-run failure: late in training the output logits
# diverge to very negative values, `log Z` far below 0, with no overflow involved.
# They do not name the mechanism; a likely one is precision: far from 0, bf16 values
# are coarse (4 apart near 1000), and the small differences between logits round
# away. z-loss pulls `log Z` towards 0. The batch's largest `log Z` (fp32) in the
# clean run: no z-loss, PaLM's 1e-4, 100x that:

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
ax.axhline(0, color="gray", ls=":", label="log Z = 0, where z-loss pulls it")
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
# 1e-4 barely moves `log Z` here. PaLM used it over hundreds of thousands of steps,
# to stop the output logits drifting over a long run (Wortsman et al. saw the
# divergence in runs without weight decay, and z-loss removed it), not to rescue
# a run in a few steps. (Try Lab 04's fault: `run_fault("fp16_overflow",
# z_loss=..., steps=140, decay_steps=200)`, about 10 s a run.)
#
# **Exercise 3 · the z-loss term.** Write `z_loss_term(logits, weight)`: for each
# row of `logits` (the last dimension is the vocabulary), `log Z` =
# `log Σ exp(logits)`; return `weight` times the mean of `(log Z)²`. The logits may
# be fp16 and large: compute `log Z` in fp32, so that it cannot overflow.

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


check("z_loss_term", lambda: z_loss_term(Z_LOGITS.clone(), 1e-4), test=z_test,
      hints=[
          "The z-loss penalises log Z, the log of the softmax's normaliser, squared: it pulls "
          "log Z towards 0.",
          "torch.logsumexp computes log Z stably over the last dimension; compute it in fp32, "
          "average its square over the positions, and multiply by the weight.",
          "Cast the logits with .float() before torch.logsumexp (dim=-1), square the result, "
          "take its mean, and scale it by weight.",
      ], solution="""\
log_z = torch.logsumexp(logits.float(), dim=-1)
return weight * (log_z ** 2).mean()""")

# %% [markdown]
# ## 6. Positions past 65504 (`position_overflow`)
#
# The article lists positional-encoding overflow among structural causes of NaN. A
# sinusoidal encoding takes `sin` and `cos` of `pos · ω`, from the position id. A
# model streaming long documents, counting positions across windows, reaches large
# ids, and a **pure-fp16** model (`.half()`, no autocast) casts the id to fp16:

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
# - **fp16**: past 65504 the id is inf, and `sin(inf)` is NaN.
# - **bf16**: fp32's range, but 8 bits of precision: near 70000 only multiples of
#   512 exist, so the window gets one encoding. Finite, silently useless.
# - **fp32**: exact.
#
# The fault in a run (pure fp16), and `locate`:

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
# Inf first again: `aten._to_copy` (the cast) makes the inf, `sin` and `cos` the
# NaN. The registered cure is bf16 autocast instead of pure fp16. Given the bf16
# table, why would that work? A hook reports the encoding's dtype:

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
# **The myth check.** "bf16 fixed the positional overflow" is true of the NaN,
# misleading about the cause: under autocast the weights, the embedding lookup and
# so the encoding stay fp32; bf16's range played no part. With `model.bfloat16()`
# the NaN would be gone and all 32 positions would be 70144: no error, a worse
# model, nothing in the loss curve.
#
# The robust fix: **compute positions in fp32 whatever the model's dtype** (as
# careful RoPE implementations do), or keep position ids small (reset them per
# window; relative encodings). The claim needs its condition: positional encodings
# overflow only where a position id (or `pos · ω`) is held in fp16.
#
# ## 7. LayerNorm init: an honest note
#
# The article also blames LayerNorm (and BatchNorm) initialisation. Gain 1 and bias
# 0 cannot cause NaN: the output is bounded, `|y| ≤ sqrt(d − 1)` per entry for gain
# 1, whatever the input's scale (why LayerNorm cures badly scaled activations), as
# long as the variance does not overflow:

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
# LayerNorm breaks in exactly two ways: **eps = 0 on a constant row** and **an
# input whose square overflows** (past about 1e19 in fp32, about 256 in a
# hand-written fp16 norm). A *gain* of 100 is a large init (the init lab's
# topic); a gain of 0 silences the layer, no NaN. BatchNorm also divides by
# `sqrt(var + eps)` (eps 1e-5 by default): the same two ways. In an interview,
# name the mechanism, not the module.
#
# ## 8. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("06-eps-fp16")

# %%
practice("06-attn-overflow-fixes")

# %%
practice("06-inf-then-nan")

# %%
practice("06-mystery-padding")

# %%
practice("06-qk-norm-vs-z-loss")

# %% [markdown]
# ## Summary
# - Compute norm statistics in fp32; eps = 0 is NaN; a tiny eps > 0 multiplies a
#   flat row's gradient by up to `1/sqrt(eps)`.
# - Inf first, then NaN (B1): fix what grew.
# - Stable softmax and QK-LayerNorm cure attention overflow; z-loss does not.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
