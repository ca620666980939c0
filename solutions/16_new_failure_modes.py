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
# **Source notebook (solution version).** This pair (`solutions/16_new_failure_modes.py`,
# `.ipynb`) is the single source of `labs/16_new_failure_modes.ipynb`, answers filled in.
# Edit either (JupyterLab syncs the other on save), then run
# `nanlab course execute solutions/16_new_failure_modes.py` (syncs the pair, stores the
# outputs the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 16 · The NaNs people hit now
#
# An optional lab on NaNs that today's stacks produce and older guides do not cover: a
# query with nothing to attend to, a NaN that only the backward pass makes, FP8 scales,
# an MoE router in fp16, a precision bisection that names one module, and a NaN that
# appears only under `torch.compile`. Each section runs the fault on the toy, shows the
# arithmetic, and lets `diagnose` or a replay name it. CPU only; the runs take about a
# minute.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from nanlab import faults
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import diagnose
from nanlab.debug.locate import locate
from nanlab.debug.precision_bisect import bisect_precision
from nanlab.layers.fake_fp8 import amax_to_scale, fp8_max

start_lab("16_new_failure_modes")

# %% [markdown]
# ## 1. A query with nothing to attend to
#
# A padding mask hides keys from attention's softmax. With left padding (a tokenizer's
# `padding_side="left"`) under a causal mask, the first positions of a padded row are
# queries whose only keys are padding: the mask hides every key of that row. What the
# softmax gives then depends on the fill value and on which attention code runs.
#
# **Exercise · predict.** Return a dict mapping each of the `STATEMENTS` to `True` or
# `False`. `left_padding_inf_mask` fills the mask with -inf and left-pads the batches
# from step 40 on.

# %%
STATEMENTS = [
    "torch.softmax of a row that is all -inf is NaN",
    "torch.softmax of a row that is all torch.finfo(torch.float32).min is NaN",
    "F.scaled_dot_product_attention gives NaN for a query whose mask hides every key",
    "left_padding_inf_mask: the training loss is non-finite by step 45",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [True, False, False, True], strict=True))
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the runs: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("predict_masked_row", my_predictions)

# %%
inf_row = torch.softmax(torch.full((4,), float("-inf")), dim=-1)
min_row = torch.softmax(torch.full((4,), torch.finfo(torch.float32).min), dim=-1)
torch.manual_seed(0)
q, k, v = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8)
sees = torch.tensor([[False, False, False, False], [True, True, False, False]])
sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=sees)
padded = faults.run_fault("left_padding_inf_mask", steps=60, stop_when_poisoned=True)
print("softmax of all -inf:      ", inf_row.tolist())
print("softmax of all finfo.min: ", min_row.tolist())
print("SDPA, query 0 (sees no key):", sdpa[0, 0, 0, :4].tolist())
print("left_padding_inf_mask: first non-finite step", padded.first_bad_step)

# %% [markdown]
# Your prediction, graded against what ran:

# %% tags=["nbval-check-output"]
actual = dict(zip(STATEMENTS, [bool(inf_row.isnan().all()), bool(min_row.isnan().any()),
                               bool(sdpa.isnan().any()),
                               padded.first_bad_step is not None and padded.first_bad_step <= 45],
                  strict=True))
check("predict_masked_row", my_predictions, actual, locked=True, hints=[
    "A softmax subtracts the row's max first. What is the max of a row of -inf, and what is "
    "-inf minus it?",
    "A very negative but finite fill gives every key of the row the same score. PyTorch's "
    "fused attention treats a fully masked row on purpose (its safe softmax returns 0).",
    "After committing, the check cell reads each statement from the tensors and the run: "
    "`isnan()` on each result, and the run's `first_bad_step`.",
])

# %% [markdown]
# SDPA returns 0 for that row on this torch: its math path's `_safe_softmax`
# (pytorch/pytorch#131863, re-landed as #133882), and the CPU's fused kernel does the same.
# The toy computes its own softmax, as many hand-written attention layers do. Why does one NaN
# row poison the whole sequence? In the next layer, the padded position is a key whose
# value is NaN. Every real query gives it weight 0, and 0 times NaN is NaN:

# %%
weights = torch.tensor([0.0, 0.7, 0.3])           # a real query ignores the padded key
values = torch.tensor([float("nan"), 1.0, 2.0])   # the padded position's value is NaN
print("weighted sum:", (weights * values).sum().item())

# %% [markdown]
# Hugging Face fills its masks with `torch.finfo(dtype).min` instead of -inf
# (`transformers/masking_utils.py`, `eager_mask`); the fix `finite_mask` does the same.
# The padded query gets meaningless but finite weights, and its target is ignored anyway.

# %%
finite = faults.run_fault("left_padding_inf_mask", fixes=["finite_mask"], steps=60)
print("with finite_mask: first non-finite step", finite.first_bad_step,
      f"| final loss {finite.record.losses()[-1]:.3g}")

# %% tags=["nbval-check-output"]
print("the -inf mask makes the run non-finite from step 40 on:",
      padded.first_bad_step is not None and 40 <= padded.first_bad_step <= 45)
print("finite_mask keeps it finite:", finite.first_bad_step is None)

# %% [markdown]
# The other way in, `empty_sequence`, is an example with no token at all (an empty line
# of a corpus): broken data, which `validate_data` names and skips. Here the data are
# legal, so the fix belongs in the mask.
#
# ## 2. A NaN made in the backward pass only
#
# An attention-entropy term (Zhai et al. 2023, "Stabilizing Transformer Training by
# Preventing Attention Entropy Collapse") needs `p * log p` where some `p` are exactly 0.
# The "safe" log `torch.where(p > 0, torch.log(p), 0)` is finite in the forward pass.
# Autograd still differentiates the branch that `where` did not pick: the log's backward
# divides its incoming gradient, 0, by p = 0 (pytorch/pytorch#52248):

# %%
p = torch.tensor([0.0, 0.5], requires_grad=True)
(p * torch.where(p > 0, torch.log(p), 0.0)).sum().backward()
print("forward is finite; the gradient:", p.grad.tolist())

# %% [markdown]
# `where_log_grad` switches such a term on at step 40. `locate` replays that step from
# the checkpoint before, with every hook on, and names the first non-finite value:

# %%
where_run = faults.run_fault("where_log_grad", steps=60, stop_when_poisoned=True)
bad = where_run.record.steps[where_run.first_bad_step]
print(f"step {bad['step']}: loss {bad['loss']:.3g}, grad norm {bad['grad_norm']}")
print("\n".join(str(locate(where_run.trainer)).splitlines()[1:3]))

# %% [markdown]
# Clipping is the reflex fix. Try it, then let `diagnose` take the run through the SOP
# and prove a fix:

# %%
clipped = faults.run_fault("where_log_grad", fixes=["grad_clip"], steps=60,
                           stop_when_poisoned=True)
print("with grad_clip: first non-finite step", clipped.first_bad_step)
d_where = diagnose(where_run)
print(d_where.report())

# %% tags=["nbval-check-output"]
print("the loss is finite at the bad step, the grad norm is not:",
      math.isfinite(bad["loss"]) and not math.isfinite(bad["grad_norm"]))
print("grad_clip does not cure it:", clipped.first_bad_step == where_run.first_bad_step)
print(f"diagnose: {d_where.cause}, names the fault: {d_where.detail == 'where_log_grad'}, "
      f"fix {d_where.fix}, proven: {d_where.fix_verified}")

# %% [markdown]
# **Exercise · the double where.** Write `safe_log(p)`: log p where p > 0, else 0, with
# a finite gradient at p = 0.

# %%
def safe_log(p):
    """log p where p > 0, else 0; its gradient is finite everywhere."""
    ### BEGIN SOLUTION
    ok = p > 0
    return torch.where(ok, torch.log(torch.where(ok, p, torch.ones_like(p))), 0.0)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def entropy_grad():
    """safe_log at 0, and the value and gradient of -sum(p log p) over a row with exact
    zeros, via safe_log."""
    p = torch.tensor([0.0, 0.25, 0.75, 0.0], requires_grad=True)
    h = -(p * safe_log(p)).sum()
    h.backward()
    return float(safe_log(torch.zeros(1))[0]), float(h.detach()), p.grad.clone()


def entropy_test(result):
    at_zero, h, grad = result
    want = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    if at_zero != 0.0:
        return f"safe_log(0) is {at_zero:.4g}: the exercise asks for 0 where p is not > 0"
    if not math.isclose(h, want, rel_tol=1e-5):
        return f"the entropy is {h:.4g}, not {want:.4g}: is the forward still log p for p > 0?"
    if not torch.isfinite(grad).all():
        return (f"the gradient is {grad.tolist()}: the log's backward still sees p = 0; "
                "what does the unselected branch compute?")
    true = [0.0, -(math.log(0.25) + 1), -(math.log(0.75) + 1), 0.0]  # -(log p + 1), 0 at 0
    if not torch.allclose(grad, torch.tensor(true), atol=1e-5):
        return (f"the gradient is {[round(g, 3) for g in grad.tolist()]}, not "
                f"{[round(g, 3) for g in true]}: does the gradient still flow through the "
                "log for p > 0 (no detach), and is nothing added to p?")
    return None


check("double_where", entropy_grad, test=entropy_test,
      hints=["The outer where picks the answer; the NaN comes from the log's input, which "
             "still holds the zeros.",
             "Give the log an input where the zeros are replaced by a harmless value (1: its "
             "log is 0), with a second where on the input.",
             "Two calls of torch.where: one around the log's argument, one around the result."],
      solution="""\
ok = p > 0
return torch.where(ok, torch.log(torch.where(ok, p, torch.ones_like(p))), 0.0)""")

# %% [markdown]
# ## 3. FP8 scaling: the scale makes the NaN
#
# An FP8 matmul multiplies each operand by `scale = fp8_max / amax`, so that its largest
# magnitude lands on the format's largest value, and casts it to 8 bits (torchao's
# `amax_to_scale` in torchao/float8/float8_utils.py). nanlab's `FakeFp8Linear` does this
# with PyTorch's own float8 dtypes. Two formats, two behaviours past the max:

# %%
print("e4m3 max", fp8_max("e4m3"), "| e5m2 max", fp8_max("e5m2"))
big = torch.tensor([500.0, 1e5])
print("500 -> e4m3:", big[:1].to(torch.float8_e4m3fn).float().item(),
      "| 1e5 -> e5m2:", big[1:].to(torch.float8_e5m2).float().item())
zero_scale = amax_to_scale(torch.tensor(0.0), "e4m3", floor=None)
print("amax 0, no floor: scale", zero_scale.item(), "; a zero row times it:",
      (torch.zeros(2) * zero_scale).tolist())

# %% [markdown]
# `fp8_amax_zero` scales rowwise (one scale per token) with no floor under the amax. The
# rows of the LM head's gradient at targets the loss masks are exactly 0. This is
# pytorch/ao#3356; torchao clamps the amax at `EPS = 1e-12` (float8_utils.py), and so
# does the fix `fp8_amax_floor`.

# %%
zero_run = faults.run_fault("fp8_amax_zero", steps=30, stop_when_poisoned=True)
first = zero_run.record.steps[0]
event = next(e for e in zero_run.record.events if e["kind"] == "fp8")
print(f"step 0: loss {first['loss']:.3g}, grad norm {first['grad_norm']}")
print({k: event[k] for k in ("layer", "operand", "zero_amax", "inf_scale")})
floored = faults.run_fault("fp8_amax_zero", fixes=["fp8_amax_floor"], steps=30)
print("with fp8_amax_floor: first non-finite step", floored.first_bad_step)

# %% [markdown]
# `fp8_stale_amax` uses delayed scaling (Transformer Engine's `DelayedScaling`) with a
# one-step amax history, Megatron-LM's old default (NVIDIA/Megatron-LM#516): step t is
# scaled with step t-1's amax. A gradient that grew since then lands past e5m2's max,
# and PyTorch's e5m2 cast does not saturate (the cell above): inf, then NaN.

# %%
stale = faults.run_fault("fp8_stale_amax", steps=30, stop_when_poisoned=True)
d_stale = diagnose(stale)
print(d_stale.report())

# %% tags=["nbval-check-output"]
print("amax 0 without a floor: the scale is inf:", math.isinf(zero_scale.item()))
print("fp8_amax_zero: NaN gradient at step 0, the loss finite:",
      zero_run.first_bad_step == 0 and math.isfinite(first["loss"])
      and not math.isfinite(first["grad_norm"]))
print("fp8_amax_floor cures it:", floored.first_bad_step is None)
print("fp8_stale_amax is non-finite within 5 steps:", stale.first_bad_step <= 5)
print(f"diagnose: {d_stale.cause}, names the fault: {d_stale.detail == 'fp8_stale_amax'}, "
      f"fix {d_stale.fix}, proven: {d_stale.fix_verified}")

# %% [markdown]
# ## 4. An MoE router in fp16
#
# A mixture-of-experts layer routes each token by a softmax over its router logits, and
# nothing in the task loss bounds them. Two safeguards are standard: the router in fp32
# (Switch Transformer, Fedus et al. 2021, section 2.4) and the router z-loss (ST-MoE, Zoph
# et al. 2022). `router_low_precision` drops both and writes the softmax by hand,
# `exp(x) / sum(exp(x))`, in fp16. To be honest about what fails, the arithmetic first:

# %%
logits = torch.tensor([11.5, 0.0], dtype=torch.float16)
naive = torch.exp(logits) / torch.exp(logits).sum()
print(f"log(65504) = {math.log(65504):.2f}")
print("hand-written softmax, fp16:", naive.tolist())
print("torch.softmax, fp16:      ", torch.softmax(logits, -1).tolist())
wide = logits.bfloat16()
naive_bf16 = torch.exp(wide) / torch.exp(wide).sum()
print("hand-written softmax, bf16:", naive_bf16.tolist())

# %% [markdown]
# A softmax that subtracts the max never takes the exp of a positive number, and bf16
# has fp32's range: the fp16 exp is what meets the limit, not the router's size alone.
# Now the run, its router's largest logit per step, and the z-loss fix:

# %%
router = faults.run_fault("router_low_precision", steps=60)
zloss = faults.run_fault("router_low_precision", fixes=["router_z_loss"], steps=60)


def largest_logit(run):
    """Per step, the first router's largest logit (NaN once it is NaN)."""
    return [e["routers"]["blocks.0.mlp.router"]["logit_max"]
            for e in run.record.events if e["kind"] == "router"]


fig, ax = plt.subplots(figsize=(9, 3), layout="constrained")
ax.plot(largest_logit(router), label="router_low_precision")
ax.plot(largest_logit(zloss), label="with router_z_loss")
ax.axhline(math.log(65504), color="gray", ls="--", label="log(65504)")
ax.set_xlabel("step")
ax.set_ylabel("largest router logit")
ax.legend(fontsize=8)
print("router_low_precision: first non-finite step", router.first_bad_step)
print(f"with router_z_loss: first non-finite step {zloss.first_bad_step}, largest logit "
      f"{np.nanmax(largest_logit(zloss)):.3g}")

# %% tags=["nbval-check-output"]
print("fp16 exp of 11.5 is inf, the hand-written softmax NaN:", bool(naive.isnan().any()))
print("torch.softmax in fp16 and the hand-written one in bf16 stay finite:",
      bool(torch.softmax(logits, -1).isfinite().all() and naive_bf16.isfinite().all()))
at = router.first_bad_step
print("the run fails once the logit is past log(65504):",
      at is not None and largest_logit(router)[at] > math.log(65504))
print("router_z_loss keeps the logits below it and the run finite:",
      zloss.first_bad_step is None and np.nanmax(largest_logit(zloss)) < math.log(65504))

# %% [markdown]
# ## 5. Which module's precision decides?
#
# `diagnose` proves a run healthy in fp32, for the whole model. `bisect_precision`
# replays the first bad step from the checkpoint before, with parts of the module tree
# in fp32, halving the tree until one module decides. NVIDIA Transformer Engine's debug
# features (`DisableFP8GEMM`, transformer_engine/debug/features/disable_fp8_gemm.py)
# do this by hand, for layers you name. On `softmax_overflow` (fp16, a hand-written
# softmax, a high LR):

# %%
overflow = faults.run_fault("softmax_overflow", steps=60, checkpoint_every=10,
                            stop_when_poisoned=True)
bisection = bisect_precision(overflow.trainer)
print(bisection.line())

# %% tags=["nbval-check-output"]
print("one module decides:", bisection.verdict == "module")
print("it is an attention softmax:", bisection.module.endswith("attn.softmax"))

# %% [markdown]
# `diagnose` runs this bisection at its precision step and puts the line in its report.
#
# ## 6. A NaN only under `torch.compile` (read only)
#
# Inductor fuses a chain of fp16 ops into one kernel and keeps the values between them
# in fp32, where eager rounds each op's result to fp16 (the comment above
# `emulate_precision_casts` in torch/_inductor/config.py). So a value past 65504 between
# two ops is inf eagerly and finite compiled; one below fp16's smallest subnormal is 0
# eagerly and tiny compiled. Either can decide finite against NaN, in either direction.
#
# This section does not run a compile: a first, cold inductor compile on a CPU takes
# tens of seconds, too slow for this lab's minute. The commands, from
# `nanlab/debug/compile_bisect.py` and docs/guides/compile.md:
#
# ```python
# from nanlab.debug.compile_bisect import bisect_compile, compare_eager_compiled, one_pass_norm
# x = torch.tensor([[300.0, 290.0, 310.0, 305.0]], dtype=torch.float16)
# print(compare_eager_compiled(one_pass_norm, x))   # where eager and compiled part
# print(bisect_compile(one_pass_norm, x))           # PyTorch's CompilerBisector
# ```

# %% [markdown]
# What docs/guides/compile.md measured (torch 2.13.0, CPU inductor,
# `bench/bench_compile_nan.py`), not this notebook:
#
# | function (fp16 input) | eager | compiled | compiled, `emulate_precision_casts=True` |
# |---|---|---|---|
# | `one_pass_norm([300, 290, 310, 305])` | NaN | finite | NaN |
# | `guarded_reciprocal([1e-4] * 4)` | 0 | inf | 0 |
#
# The bisector names `inductor` and its subsystem `inductor_emulate_precision_casts`
# for both. That flag is a diagnosis, not a cure: the cure is an op that does not
# depend on where rounding happens (statistics in fp32, a guard that clamps rather than
# tests for 0).
#
# ## 7. Three incidents: what do you change first?
#
# Three more runs failed, their faults hidden (`incident_runs`), with settings other
# than their sections'. For each, the rows an on-call engineer reads from the run's
# record at its first non-finite step:

# %%
from nanlab.course.questions.lab16 import CHANGES, evidence_of, incident_runs

incidents = {name: evidence_of(run) for name, run in incident_runs().items()}
for name, rows in incidents.items():
    print(name)
    for row, value in rows.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        print(f"   {row:38} {shown}")
print("\nCHANGES:")
for change, meaning in CHANGES.items():
    print(f"   {change:15} {meaning}")

# %% [markdown]
# **Exercise · decide.** For each incident, pick the first change to make, one of the
# `CHANGES` keys: return `{"incident A": change, "incident B": change, "incident C":
# change}`. Several rows can look alike; pick the row that says what made the first
# non-finite value.

# %%
def my_changes():
    """{incident: the name of the first change to make}."""
    ### BEGIN SOLUTION
    # A: finite loss, NaN gradient, but FP8 casts had inf scales: an amax of 0.
    # B: the loss itself is NaN and the router's fp16 logit is past log(65504).
    # C: finite loss, NaN gradient, no FP8 event and no router: a backward-only NaN.
    return {"incident A": "amax_floor", "incident B": "router_fp32",
            "incident C": "double_where"}
    ### END SOLUTION


# %% tags=["nbval-check-output"]
from nanlab.course.questions.lab16 import judge_changes

check("first_change", my_changes, test=lambda got: judge_changes(got, incidents),
      hints=["A NaN grad norm says nothing about its cause: clipping and a smaller LR act on "
             "sizes, not on 0 * inf or 0 / 0.",
             "Two incidents have a finite loss and a NaN gradient: which row tells them apart?",
             "An inf scale comes from an amax of 0, an FP8 cast past its max from a stale "
             "amax; a logit past log(65504) overflows fp16's exp; with none of these, the "
             "NaN was made in the backward pass."],
      solution="""\
# A: finite loss, NaN gradient, but FP8 casts had inf scales: an amax of 0.
# B: the loss itself is NaN and the router's fp16 logit is past log(65504).
# C: finite loss, NaN gradient, no FP8 event and no router: a backward-only NaN.
return {"incident A": "amax_floor", "incident B": "router_fp32",
        "incident C": "double_where"}""")

# %% [markdown]
# ## 8. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("16-masked-row-fill")

# %%
practice("16-clip-a-nan-gradient")

# %%
practice("16-fp8-zero-row")

# %%
practice("16-router-fp16-exp")

# %% [markdown]
# Interview form, from the question bank (Lab 10's free-text widget): answer in a few
# sentences; the rubric checks the key points.

# %%
from nanlab.interview import free_text

free_text("masked-row-softmax", lab="16_new_failure_modes")

# %%
free_text("where-grad-nan", lab="16_new_failure_modes")

# %%
free_text("fp8-amax-zero", lab="16_new_failure_modes")

# %%
free_text("moe-router-stability", lab="16_new_failure_modes")

# %%
free_text("compile-nan-bisect", lab="16_new_failure_modes")

# %% [markdown]
# ## Summary
# - A row whose mask hides every key is NaN under a -inf fill, and 0 * NaN carries it to
#   real tokens; fill with `torch.finfo(dtype).min`.
# - A finite loss with a NaN gradient is made in the backward pass: `locate` names the
#   op; mask the input of the log too (the double where). Clipping cannot help.
# - FP8 scale = fp8_max / amax: floor the amax, and prefer current scaling where the
#   amax moves; e5m2's cast does not saturate.
# - An fp16 router with a hand-written exp meets log(65504): router in fp32, or a z-loss.
# - `bisect_precision` names the module whose precision decides; the compile bisector
#   names the compiler stage.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
