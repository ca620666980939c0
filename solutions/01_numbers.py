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
# **Source notebook (solution version).** This pair, `solutions/01_numbers.py` and
# `solutions/01_numbers.ipynb`, is the single source of `labs/01_numbers.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/01_numbers.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 01 · Numbers: where inf and NaN come from
#
# Every NaN loss starts as ordinary arithmetic on a number that the float format
# cannot hold. Before we break a Transformer, we look at the three formats training
# uses and find out exactly:
#
# 1. how big and how small a number each can hold, and how precisely;
# 2. when a value **overflows** to `inf` or **underflows** to `0`;
# 3. how an `inf` turns into a `NaN`;
# 4. how one `NaN` spreads through a network in a single training step;
# 5. why a NaN is *silent* when an out-of-memory error is *loud*.
#
# CPU only, about 30 minutes. Cells marked `# YOUR CODE HERE` are yours; the cell
# after each one checks it.

# %% [markdown]
# ## Setup
# The lab needs only `torch` and `matplotlib`. `start_lab` names this lab in your
# progress file, so `show_progress()` can tell you later what is left.

# %%
import math

import matplotlib.pyplot as plt
import torch

from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)

start_lab("01_numbers")
torch.manual_seed(0);

# %% [markdown]
# ## 1. Three float formats
# A float is a sign, an exponent and a mantissa. The **exponent bits set the range**
# (the largest and the smallest number); the **mantissa bits set the precision**
# (`eps`, the gap between 1 and the next number). float16 has 5 exponent bits;
# bfloat16 has 8, like float32. That one difference explains most of this course.
# `torch.finfo` reports the numbers.

# %% tags=["nbval-check-output"]
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    fi = torch.finfo(dtype)
    print(f"{str(dtype):15} bits={fi.bits}  max={fi.max:.4g}  "
          f"smallest normal={fi.tiny:.4g}  eps={fi.eps:.4g}")

# %% [markdown]
# Where do these numbers come from? The bits, drawn from the same `torch.finfo`
# (mantissa bits m = −log2(eps), exponent bits = bits − 1 − m). Which format buys
# range, and which buys precision?

# %%
from nanlab.viz import plot_float_layouts

fig = plot_float_layouts()

# %% [markdown]
# Two numbers to remember. **65504** is the largest float16: an attention score, a
# squared activation or a sum of squares reaches it easily. bfloat16 reaches 3.4e38
# like float32 but has only 8 bits of precision (`eps` = 0.0078), so small changes
# disappear:

# %% tags=["nbval-check-output"]
print(torch.finfo(torch.float16).max)
print(torch.tensor(1.001, dtype=torch.bfloat16).item())  # 1.001 rounds to 1
print(torch.tensor(257.0, dtype=torch.bfloat16).item())  # and 257 to 256

# %% [markdown]
# ### The ranges side by side
# The three ranges span about 80 powers of ten. A log axis shows at a glance what a
# table hides: float16 covers a narrow band, and a gradient of 1e-8 falls off its
# left end. Orange is the *subnormal* zone, where a format still has numbers but
# fewer and fewer digits.

# %%
fig, ax = plt.subplots(figsize=(9, 2.8))
formats = [("float32", torch.float32), ("bfloat16", torch.bfloat16),
           ("float16", torch.float16)]
for row, (_label, dtype) in enumerate(formats):
    fi = torch.finfo(dtype)
    smallest = fi.tiny * fi.eps  # the smallest subnormal number
    ax.plot([smallest, fi.tiny], [row, row], lw=10, color="tab:orange", alpha=0.6,
            label="subnormal" if row == 0 else None)
    ax.plot([fi.tiny, fi.max], [row, row], lw=10, color="tab:blue",
            label="normal" if row == 0 else None)
for value, text in [(1e-8, "gradient 1e-8"), (65504, "65504")]:
    ax.axvline(value, color="gray", ls="--", lw=1)
    ax.text(value, 2.45, text, ha="center", fontsize=8)
ax.set_xscale("log")
ax.set_yticks(range(len(formats)), [label for label, _ in formats])
ax.set_ylim(-0.6, 2.8)
ax.set_xlabel("magnitude of a representable number (log scale)")
ax.legend(loc="upper left", fontsize=8)
plt.show()

# %% [markdown]
# ## 2. Overflow: too big becomes `inf`
# A result above the largest finite value rounds to `inf`. There is no error and no
# warning. Note the second line: 300 is a harmless number, its square is not.

# %% tags=["nbval-check-output"]
print(torch.tensor(70000.0).half())                   # above 65504
print(torch.tensor(300.0).half() ** 2)                # 90000 > 65504
print(torch.tensor(300.0, dtype=torch.bfloat16) ** 2)  # no overflow, only rounding

# %% [markdown]
# Squares hide in many places of a Transformer: a variance, the sum of squares of a
# gradient norm, the dot product `q @ k.T` of attention. In bfloat16 the same square
# is merely rounded (90112 instead of 90000), which training tolerates far better
# than `inf`.
#
# Whether such a square overflows depends on *who* computes it. PyTorch's own
# kernels accumulate half-precision inputs in float32: `F.layer_norm` keeps its
# mean and variance in `acc_type<T>` (pytorch/pytorch,
# `aten/src/ATen/native/cuda/layer_norm_kernel.cu`), and `torch.linalg.vector_norm`
# of a float16 tensor reduces in float (`aten/src/ATen/native/cuda/ReduceNormKernel.cu`,
# `norm_kernel_cuda_impl<at::Half, float>`). Only the *result* is float16 again, so
# a norm that is itself above 65504 still becomes `inf`. A hand-written variance or
# norm in float16 (many RMSNorm implementations) overflows at the first square:

# %%
row = torch.tensor([300.0, -300.0] * 512).half()  # every square is 90000 > 65504
norms = {"F.layer_norm": torch.nn.functional.layer_norm(row, (row.numel(),)),
         "hand-written variance": ((row - row.mean()) ** 2).mean(),
         "torch.linalg.vector_norm": torch.linalg.vector_norm(row),
         "hand-written norm": (row * row).sum().sqrt()}
for name, value in norms.items():
    print(f"{name:25} finite: {bool(value.isfinite().all())}   dtype {value.dtype}")

# %% tags=["nbval-check-output"]
print("PyTorch's kernels stay finite:", bool(norms["F.layer_norm"].isfinite().all()
                                              and norms["torch.linalg.vector_norm"].isfinite()))
print("the hand-written float16 versions overflow:",
      not norms["hand-written variance"].isfinite() and not norms["hand-written norm"].isfinite())

# %% [markdown]
# ## 3. Underflow: too small becomes `0`
# Below the smallest normal number float16 still has subnormals, down to about 6e-8,
# and then nothing: the value becomes exactly 0. Gradients of that size are common
# in a large model, and a zero gradient means no learning, silently. Multiplying
# the loss by a large *loss scale* before `backward` lifts them back into range;
# this is what `torch.amp.GradScaler` does.

# %% tags=["nbval-check-output"]
print(torch.tensor(1e-8).half().item())
grads = torch.tensor([1e-3, 1e-5, 1e-7, 1e-9])
print("float16 zero?        ", (grads.half() == 0).tolist())
print("bfloat16 zero?       ", (grads.bfloat16() == 0).tolist())
print("scaled float16 zero? ", ((grads * 2**16).half() == 0).tolist())  # loss scale 2**16

# %% [markdown]
# A dynamic loss scaler halves its scale whenever the scaled gradients overflow and
# grows it again after a run of good steps. You will see that "loss scale" column in
# the run records of later labs.

# %% [markdown]
# ## 4. `inf` and `NaN` are different
# `inf` is still a number with rules: `inf + 1 = inf`, `1 / inf = 0`. `NaN` means
# "no meaningful answer". It appears when two infinities meet, or zero meets
# infinity, and everything it touches becomes `NaN` too.
#
# **Exercise 1 · predict.** Before running anything, say what each expression gives:
# `"nan"`, `"inf"`, `"-inf"` or `"finite"`. Fill in `my_predictions()`; the check
# runs the real arithmetic and compares.

# %%
inf = torch.tensor(float("inf"))
zero = torch.tensor(0.0)
EXPRESSIONS = {
    "inf - inf": lambda: inf - inf,
    "0 * inf": lambda: zero * inf,
    "0 / 0": lambda: zero / zero,
    "1 / 0": lambda: 1 / zero,
    "inf / inf": lambda: inf / inf,
    "inf + 1": lambda: inf + 1,
    "log(0)": lambda: torch.log(zero),
    "sqrt(-1)": lambda: torch.sqrt(-torch.ones(())),
    "exp(-inf)": lambda: torch.exp(-inf),
}


def my_predictions():
    """{expression: "nan" | "inf" | "-inf" | "finite"} for each of EXPRESSIONS."""
    ### BEGIN SOLUTION
    return {
        "inf - inf": "nan",
        "0 * inf": "nan",
        "0 / 0": "nan",
        "1 / 0": "inf",
        "inf / inf": "nan",
        "inf + 1": "inf",
        "log(0)": "-inf",
        "sqrt(-1)": "nan",
        "exp(-inf)": "finite",
    }
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the arithmetic runs: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("my_predictions", my_predictions)

# %% tags=["nbval-check-output"]
def classify(t):
    v = float(t)
    if math.isnan(v):
        return "nan"
    return "inf" if v == math.inf else "-inf" if v == -math.inf else "finite"


actual = {name: classify(f()) for name, f in EXPRESSIONS.items()}
check("my_predictions", my_predictions, actual, locked=True, hints=[
    "Two infinities that cancel, or a zero meeting an infinity, have no meaningful value: NaN.",
    "IEEE 754's rules, as the text above gives them: a non-zero number over zero is an "
    "infinity with that number's sign, the log of zero is minus infinity, and the exponential "
    "of minus infinity is exactly zero, an ordinary finite number.",
    "After committing, test one rule yourself: classify(EXPRESSIONS[\"0 * inf\"]())",
])

# %% [markdown]
# One more property makes NaN dangerous: **every comparison with NaN is False**,
# even `nan == nan`. A monitor written as `if loss > 10: alarm()` never fires on a
# NaN loss.

# %% tags=["nbval-check-output"]
nan = torch.tensor(float("nan"))
print("nan == nan:", (nan == nan).item())
print("nan > 10:  ", (nan > 10).item())
print("nan < 10:  ", (nan < 10).item())


# %% [markdown]
# **Exercise 2 · a finite report.** The first thing to do with a suspicious tensor is
# to count what is in it. Write `is_finite_report(t)` returning a dict
# `{"finite": ..., "inf": ..., "nan": ...}` of plain ints (`inf` counts both signs).
# Later labs run the same report on every layer.

# %%
def is_finite_report(t: torch.Tensor) -> dict:
    """Count the finite, infinite (either sign) and NaN elements of a tensor."""
    ### BEGIN SOLUTION
    return {
        "finite": int(torch.isfinite(t).sum()),
        "inf": int(torch.isinf(t).sum()),
        "nan": int(torch.isnan(t).sum()),
    }
    ### END SOLUTION


# %% tags=["nbval-check-output"]
sample = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), 0.0, -2.5])
check("is_finite_report", lambda: is_finite_report(sample.clone()),
      {"finite": 3, "inf": 2, "nan": 1}, hints=[
          "Every entry is exactly one of three kinds: finite, an infinity of either sign, or "
          "NaN; count each kind.",
          "torch.isfinite, torch.isinf and torch.isnan each return a boolean mask; the sum of "
          "a mask counts its True entries, and int turns it into a plain number.",
          "One mask per kind, one count per mask, returned as a dict under the three keys the "
          "exercise names; torch.isinf already counts both signs.",
      ], solution="""\
return {
    "finite": int(torch.isfinite(t).sum()),
    "inf": int(torch.isinf(t).sum()),
    "nan": int(torch.isnan(t).sum()),
}""")

# %% [markdown]
# ## 5. `exp` overflows early
# Softmax and cross-entropy both exponentiate. `exp(x)` overflows as soon as
# `x > ln(max)`: about 88.7 in float32 and bfloat16, but only **11.09** in float16.
# An attention score of 12 is nothing unusual.

# %% tags=["nbval-check-output"]
x32 = torch.tensor([88.0, 89.0])
x16 = torch.tensor([11.0, 11.1], dtype=torch.float16)
print("float32: exp(88), exp(89) inf?  ", torch.exp(x32).isinf().tolist())
print("float16: exp(11), exp(11.1) inf?", torch.exp(x16).isinf().tolist())


# %% [markdown]
# **Exercise 3 · the threshold.** Write `exp_overflow_threshold(dtype)`: the largest
# `x` for which `exp(x)` is still finite in that dtype, as a Python float.

# %%
def exp_overflow_threshold(dtype: torch.dtype) -> float:
    """The x above which exp(x) overflows to inf in ``dtype``."""
    ### BEGIN SOLUTION
    return math.log(torch.finfo(dtype).max)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
check("exp_overflow_threshold", lambda dtype: round(float(exp_overflow_threshold(dtype)), 2),
      [88.72, 11.09, 88.72], cases={str(d): (d,) for d in DTYPES}, hints=[
          "The exponential overflows once its result passes the format's largest finite value,"
          " so the threshold is the natural log of that largest value.",
          "torch.finfo describes a float format; its max field is the largest finite value; "
          "math.log takes the natural log.",
          "Chain the two: the format's largest finite value from torch.finfo, then its natural "
          "log, returned as a plain float.",
      ], solution="return math.log(torch.finfo(dtype).max)")

# %% [markdown]
# This is the commonest way an `inf` becomes a `NaN`. A softmax written as
# `exp(x) / sum(exp(x))` turns two large scores into `inf / inf`. The stable form
# subtracts the largest score first (which changes nothing mathematically) and is
# what `torch.softmax` does. In float16 a score of 12 is already enough.

# %% tags=["nbval-check-output"]
logits = torch.tensor([1000.0, 1000.0])
print("naive: ", (logits.exp() / logits.exp().sum()).tolist())
print("stable:", torch.softmax(logits, dim=0).tolist())
small = torch.tensor([12.0, 0.0], dtype=torch.float16)
print("float16 naive:", (small.exp() / small.exp().sum()).tolist())

# %% [markdown]
# ## 6. One NaN spreads everywhere
# A bad element does not stay where it is. Follow a single NaN in the input of a
# tiny `Linear -> LayerNorm` block through the forward pass, the backward pass and
# one optimizer step.

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
opt = torch.optim.SGD(block.parameters(), lr=0.1)
x = torch.randn(3, 4)  # a batch of 3 rows
x[0, 1] = float("nan")  # one bad element


def nan_count(t):
    return f"{int(t.isnan().sum())}/{t.numel()}"


print("after Linear, NaN per row:   ", block[0](x).isnan().sum(dim=1).tolist())
out = block(x)
print("after LayerNorm, NaN per row:", out.isnan().sum(dim=1).tolist())
loss = out.pow(2).mean()
print("loss:", loss.item())

# %% [markdown]
# The Linear layer mixes every input feature of a row into every output of that
# row, so one element poisons its whole row; the other rows are still fine. The
# loss averages over the batch, so the row poisons the loss. Now the backward pass
# and one step:

# %% tags=["nbval-check-output"]
loss.backward()
for name, p in block.named_parameters():
    print(f"{name:9} grad NaN: {nan_count(p.grad)}")
opt.step()
print("Linear weight NaN after the step:", nan_count(block[0].weight))
print("output on a clean batch:         ", nan_count(block(torch.randn(3, 4))))

# %% [markdown]
# One bad number in the data, one step, and **every parameter is NaN**: from now on
# even clean data gives NaN, and nothing will ever bring the run back. That is why
# the SOP starts by checking the data, and why a guard must act *before*
# `optimizer.step()`.

# %% [markdown]
# ## 7. NaN is silent, out-of-memory is loud
# Here are ten steps of an ordinary training loop where one batch carries a single
# NaN. Watch for an error.

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10):
    xb, yb = torch.randn(16, 8), torch.randn(16, 1)
    if step == 3:
        xb[5, 2] = float("nan")  # one bad value in one batch
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss is {'NaN' if loss.isnan() else 'finite'}")
print("the loop finished: no exception, no warning")

# %% [markdown]
# Now ask for more memory than any machine has: 2**60 floats, 4 EiB. The allocator
# refuses at once (nothing is actually allocated) and the program gets an exception
# with a message. A real out-of-memory error in training behaves the same way: the job
# dies and says why, the scheduler notices, someone is paged.

# %% tags=["nbval-check-output"]
try:
    torch.empty(2**60)
    message = "the allocation succeeded?!"
    print(message)
except RuntimeError as err:
    message = str(err).strip().splitlines()[0]
    print("loud:", type(err).__name__, "was raised")

# %%
print(message[:160])  # the wording depends on the platform

# %% [markdown]
# So a NaN needs a check that you write: `torch.isfinite(loss)` every step costs
# almost nothing. Lab 08 measures what an unwatched NaN costs and builds a guard around
# `optimizer.step()` that stops, skips or rolls back.

# %% [markdown]
# ## Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time. Your answers are
# saved to your progress file.

# %%
from nanlab.course import practice

practice("01-fp16-max")

# %%
practice("01-which-nan")

# %%
practice("01-predict-square")

# %%
practice("01-bf16-why")

# %%
practice("01-nan-vs-oom")

# %% [markdown]
# ## Summary
# - float16 overflows above **65504** and flushes values below ~6e-8 to **0**;
#   bfloat16 has float32's range with much less precision.
# - `exp` overflows above **88.7** (float32) and **11.09** (float16).
# - `inf` becomes `NaN` through `inf - inf`, `0 * inf`, `inf / inf`; `0 / 0` is
#   NaN directly.
# - One NaN in the input makes its row NaN, then the loss, then every gradient
#   and, after one step, every weight.
# - NaN raises nothing and fails every comparison: check `torch.isfinite` yourself.
#
# Your progress so far:

# %%
from nanlab.course import show_progress

show_progress();
