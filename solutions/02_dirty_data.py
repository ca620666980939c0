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
# **Source notebook (solution version).** This pair, `solutions/02_dirty_data.py` and
# `solutions/02_dirty_data.ipynb`, is the single source of `labs/02_dirty_data.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/02_dirty_data.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 02 · Dirty data (脏数据): one bad batch, NaN forever
#
# The data is the cheapest cause of a NaN loss to check, and one of the commonest: an
# empty cell parsed as NaN, a stuck sensor, a label from the wrong vocabulary. You
# will watch one NaN reading silently wreck a run, trace it (SOP step 1, data), meet
# three more kinds of dirty data, write the validation that cures them, and prove the
# cure with the same seed.
#
# CPU is enough; about 45 minutes. Do Lab 00 first: it shows a healthy run.

# %% [markdown]
# ## Setup

# %%
import dataclasses
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from nanlab import faults
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.faults import batch_problems, run_fault
from nanlab.toy.data import IGNORE_INDEX, CountingTask, standardize
from nanlab.train import TrainConfig, Trainer
from nanlab.viz import plot_compare, plot_grad_heatmap, plot_loss

start_lab("02_dirty_data")
VOCAB = 32  # the counting task's number of tokens: legal labels are 0..31

# %% [markdown]
# ## 1. The failure
# Lab 00's clean baseline (200 steps, seed 0), except that the batch of step 40
# carries **one** NaN in its float feature: one reading, in one example, out of 1,024
# (`faults.run_fault("nan_input")`). A callback counts the finite parameters after
# every step.
#
# **Exercise · predict.** Return a dict mapping each of the `STATEMENTS` to `True` or
# `False`.

# %%
STATEMENTS = [
    "the run stops with an exception at step 40",
    "the loss of step 41, a clean batch, is finite again",
    "after step 40's update, no parameter value is finite",
    "the grad norm climbs more than 10x over steps 30-39 (a warning)",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [False, False, True, False], strict=True))
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the run: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("predict_nan_input", my_predictions)

# %%
finite_after = {}  # step -> number of finite parameter values after that step


def count_finite(trainer, info):
    finite_after[info.step] = sum(int(torch.isfinite(p).sum())
                                  for p in trainer.model.parameters())


bad = run_fault("nan_input", progress=True, callbacks=[("on_step_end", count_finite)])
rec = bad.record

# %% [markdown]
# Did anything complain? The run's own report:

# %% tags=["nbval-check-output"]
losses = rec.losses()
nonfinite = ~np.isfinite(losses)
print("exception raised:", bad.error)
print("steps run:", len(losses), "of", bad.trainer.config.steps)
print("first non-finite step:", rec.first_nonfinite_step)
print("non-finite steps:", int(nonfinite.sum()))
print("every step from 40 on is non-finite:", bool(nonfinite[40:].all()))

# %% [markdown]
# **No exception, no warning, 160 steps of training on NaN** (claim B3; the contrast
# with a loud out-of-memory error is
# [Lab 01, section 7](01_numbers.ipynb#7.-NaN-is-silent,-out-of-memory-is-loud)).
# Only a check you write catches it. Is the loss all it broke?

# %% tags=["nbval-check-output"]
total = sum(p.numel() for p in bad.trainer.model.parameters())
for step in range(38, 43):
    print(f"after step {step}: {finite_after[step]:>7,} of {total:,} parameters finite")

# %% [markdown]
# Your prediction, graded against the run:

# %% tags=["nbval-check-output"]
before40 = rec.column("grad_norm")[30:40]
actual = dict(zip(STATEMENTS, [bad.error is not None, bool(np.isfinite(losses[41])),
                               finite_after[40] == 0,
                               bool(before40.max() > 10 * before40.min())], strict=True))
check("predict_nan_input", my_predictions, actual, locked=True, hints=[
    "PyTorch arithmetic does not raise on a NaN: every op that touches one passes it on, and "
    "a batch mean touches every example.",
    "Follow the NaN one step further: the loss's gradient reaches every weight, and the "
    "optimizer writes what it gets. Before step 40, neither the data nor the model has "
    "changed.",
    "After committing, the check cell reads each statement from the run: its `error`, the "
    "record's losses and `grad_norm` column, and the callback's count of finite parameters.",
])

# %% [markdown]
# One optimizer step with NaN gradients writes NaN into **every** weight (claim B2),
# so from step 41 even clean batches give a NaN loss. After a NaN you restore the last
# good checkpoint (回滚 roll back); you never "train through" it.
#
# ## 2. The investigation: SOP step 1, the data
# **The record.** Any warning sign before the first bad step, such as a climbing loss
# or gradient norm?

# %%
for r in rec.steps[36:43]:
    print(f"step {r['step']:>3}  batch {r['batch']:>3}  loss {r['loss']:8.4f}  "
          f"grad_norm {r['grad_norm']:8.4f}  finite {r['finite']}")

# %% tags=["nbval-check-output"]
norms = rec.column("grad_norm")[30:40]
print("grad norm, steps 30-39: finite and within 10x of each other:",
      bool(np.isfinite(norms).all() and norms.max() < 10 * norms.min()))

# %% [markdown]
# **Healthy until one step, then broken at once** fits dirty data, but not only: a
# forward op that passes fp16's range (Lab 07's run: loss 0.54, then inf), an fp16
# Adam whose eps rounds to 0 (Lab 04: broken from step 1) or a flipped bit on the
# device (Lab 14) break the same way. An exploding gradient or a too-high learning rate climbs for a
# while first. So the abrupt break says: look at that step's batch first, the
# cheapest check; it does not convict the data.
#
# **The plot.** Crosses along the top mark NaN steps (a NaN cannot be drawn as a
# point); a red line marks the first.

# %%
fig = plot_loss(rec, title="nan_input: one NaN reading in the batch of step 40")

# %% [markdown]
# The gradient-norm heat map shows the inside (NaN is drawn red). Does any layer
# brighten before step 40? Compare with Lab 00's healthy map.

# %%
fig = plot_grad_heatmap(rec)

# %% [markdown]
# **The batch.** Batches are a pure function of `(seed, step)`, so the batch of step
# 40 can be rebuilt exactly. `batch_problems` is nanlab's batch checker (you write
# your own in section 4).

# %% tags=["nbval-check-output"]
batch40 = bad.trainer.batches(40)  # rebuilt exactly as the run saw it
print("batch 39:", batch_problems(bad.trainer.batches(39), VOCAB))
print("batch 40:", batch_problems(batch40, VOCAB))
where = torch.isnan(batch40.features).nonzero().tolist()
print("NaN at (example, position, feature):", where)

# %% [markdown]
# **`locate`.** Is that NaN really the step's *first* non-finite value? `locate` loads
# the nearest checkpoint before the bad step (here step 0's), replays the steps in
# between, checking each against the record bit for bit (claim M4), then runs the bad
# step with hooks on every module, forward and backward, and on the optimizer.

# %%
from nanlab.debug import locate

loc = locate(bad.trainer)
print(loc.report(max_events=6))

# %% tags=["nbval-check-output"]
print("located step:", loc.step)
print("first non-finite value in:", loc.pass_name, "/", loc.tensor)
print("the batch itself holds non-finite values:", loc.data_nonfinite)
print("replay matched the record:", loc.reproduced)

# %% [markdown]
# The first non-finite tensor is `features`, in the **data**. Then it spreads: the
# feature projection turns 1 bad number into 64 (one position, 64 channels), the first
# LayerNorm keeps it to that position, attention mixes it into every later position of
# that example, and the batch mean makes the loss NaN.
#
# Note `inf before nan: no`. "inf usually comes first, then NaN" (claim B1) holds for
# overflow past the format's maximum; a NaN that *arrives* in the data never passed
# through inf. Which came first is a clue.
#
# The fault's own card agrees (a mystery run would not give you one):

# %%
print(faults.FAULTS["nan_input"].describe())

# %% [markdown]
# ## 3. The other kinds of dirty data
# Three more dirty batches (claim C3), each at step 40, in 60-step runs.
#
# ### 3a. A constant column: standardising (标准化) by a std of 0
# A stuck sensor reports 7.0 for every token of the batch: ordinary finite numbers.
# What does the standardisation make of them?

# %% tags=["nbval-check-output"]
raw = CountingTask(seed=0).raw(40).raw_features.clone()
raw.fill_(7.0)  # the stuck sensor
print("raw batch all finite:", bool(torch.isfinite(raw).all()))
print("std of the column:", raw.std(unbiased=False).item())
z = standardize(raw)  # (x - mean) / std = 0 / 0
print("after standardising, NaN values:", int(torch.isnan(z).sum()), "of", z.numel())

# %% [markdown]
# Clean data; the pipeline made the NaN: `(7 - 7) / 0 = 0 / 0`. The run with this
# fault, and `locate` on it:

# %% tags=["nbval-check-output"]
zero_std = run_fault("zero_std", steps=60)
zloc = locate(zero_std.trainer)
print("first non-finite step:", zero_std.record.first_nonfinite_step)
print("first non-finite value in:", zloc.pass_name, "/", zloc.tensor)
print("made by op:", zloc.first_op.op)

# %% [markdown]
# `aten.div` in the data pass: the standardisation's division. So check for NaN
# *after* preprocessing, on what the model sees, not only in the raw files.
#
# ### 3b. Every target masked: a mean over nothing
# Masks (`-100`) hide padding and prompt tokens from the loss. A batch of padding only
# leaves nothing to average: the mean is `0 / 0`.

# %% tags=["nbval-check-output"]
all_masked = run_fault("all_masked", steps=60)
am = all_masked.record
print("first non-finite step:", am.first_nonfinite_step)
print("non-finite steps:", int((~np.isfinite(am.losses())).sum()))
print("grad norm at step 40:", am.steps[40]["grad_norm"])
print("weights finite at the end:",
      all(bool(torch.isfinite(p).all()) for p in all_masked.trainer.model.parameters()))

# %% [markdown]
# A NaN at step 40 **only**: PyTorch's `cross_entropy` with `ignore_index` gives every
# masked position a gradient of exactly 0, so the NaN never reaches the weights. A
# masked mean written by hand (common for per-token weights) lacks that protection:

# %% tags=["nbval-check-output"]
logits = torch.randn(4, 5, requires_grad=True)
targets = torch.full((4,), IGNORE_INDEX)  # every target masked

builtin = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
builtin.backward()
print(f"built-in:      loss {builtin.item()}, NaN grads {int(logits.grad.isnan().sum())}")

logits.grad = None
mask = (targets != IGNORE_INDEX).float()
per_token = F.cross_entropy(logits, targets.clamp_min(0), reduction="none")
by_hand = (per_token * mask).sum() / mask.sum()  # 0 / 0
by_hand.backward()
print(f"by hand:       loss {by_hand.item()}, NaN grads {int(logits.grad.isnan().sum())}")

logits.grad = None
per_token = F.cross_entropy(logits, targets.clamp_min(0), reduction="none")
guarded = (per_token * mask).sum() / mask.sum().clamp_min(1)  # an empty batch gives 0
guarded.backward()
print(f"clamped count: loss {guarded.item()}, NaN grads {int(logits.grad.isnan().sum())}")

# %% [markdown]
# The hand-written mean divides by a zero count, its backward computes `0 / 0` too,
# and the next optimizer step poisons the weights as in section 1;
# `count.clamp_min(1)` makes an empty batch contribute a loss of 0 and no gradient.
# Even with the built-in loss, a NaN in the loss log breaks averaged metrics and trips
# NaN alarms: skip such batches before the model.
#
# ### 3c. An illegal label (非法标签): loud, not silent
# Interview lore (and the article this course corrects) says a negative label makes
# the cross-entropy NaN. Does it in PyTorch?

# %% tags=["nbval-check-output"]
logits = torch.randn(3, VOCAB)
for label in (-1, VOCAB, IGNORE_INDEX):
    try:
        loss = F.cross_entropy(logits, torch.tensor([0, 1, label]))
        print(f"label {label:>4}: loss {'finite' if loss.isfinite() else 'NaN'}")
    except IndexError as err:
        print(f"label {label:>4}: {type(err).__name__}: {err}")

# %% [markdown]
# `-1` and `32` (one past the last class) raise; `-100` passes because it is the
# default `ignore_index`: that position is **silently dropped** from the loss. The
# full run with an illegal label:

# %% tags=["nbval-check-output"]
illegal = run_fault("illegal_label", steps=60)
print("error:", illegal.error)
print("crashed at step:", illegal.error_step)
n_bad = int((~np.isfinite(illegal.record.losses())).sum())
print("non-finite steps before the crash:", n_bad)

# %% [markdown]
# So in PyTorch an illegal label is **loud**, on one device. But:
#
# - On **CUDA** the check is a device-side assert: the error surfaces asynchronously,
#   often at a later line, and leaves the CUDA context unusable (restart the process).
#   `CUDA_LAUNCH_BLOCKING=1` shows the real line.
# - TensorFlow's `sparse_softmax_cross_entropy_with_logits` documents that
#   out-of-range labels raise on the CPU but give **NaN** loss and gradient rows on
#   the GPU.
# - The dangerous PyTorch labels look legal: `-100` (dropped without a word), or
#   in-range labels from the wrong vocabulary or shifted by one: no error, no NaN, a
#   model that learns the wrong thing. Validation should count masked targets, not
#   only check the range.
# - Tensor parallelism can remove the check. Megatron-LM's vocab-parallel
#   cross-entropy (NVIDIA/Megatron-LM,
#   `megatron/core/tensor_parallel/cross_entropy.py`) masks every target outside a
#   rank's vocabulary slice and gives it a predicted logit of 0, so an id outside the
#   *whole* vocabulary is masked on every rank: a finite loss belonging to no label,
#   and no error. Its `VocabParallelEmbedding` (`layers.py`) gives an out-of-range
#   input id a zero embedding when the tensor-parallel size is above 1.
#
# ### The four side by side
# The shared symptom: **the loss is non-finite (or the step fails) from the first step
# of the bad batch**, with nothing unusual before. Same seed, 60 steps each, so the
# runs are identical up to step 39.

# %% tags=["nbval-check-output"]
runs = {"nan_input": run_fault("nan_input", steps=60),  # the same 60 steps as the rest
        "zero_std": zero_std, "all_masked": all_masked, "illegal_label": illegal}
print(f"{'fault':14} {'first bad step':>15}  {'non-finite steps':>16}  {'crashed':>7}  "
      "weights finite at the end")
for name, r in runs.items():
    n_bad = int((~np.isfinite(r.record.losses())).sum())
    ok = all(bool(torch.isfinite(p).all()) for p in r.trainer.model.parameters())
    crashed = r.error is not None
    print(f"{name:14} {r.first_bad_step!s:>15}  {n_bad:>16}  {crashed!s:>7}  {ok}")

# %%
fig = plot_compare({name: r.record for name, r in runs.items()})


# %% [markdown]
# Which runs stay NaN to the end, which has a single NaN step (a gradient norm of
# exactly 0 in the lower panel), and why does `illegal_label` stop at step 39?

# %% [markdown]
# ## 4. The fix: validate every batch
# The cure is a check (数据校验 data validation) in the data pipeline, on the batch the
# model is about to see.
#
# **Exercise 1 · `validate_batch`.** Return a list of the batch's problems, `[]` for a
# clean batch. Each problem is a string that **starts with** one of these phrases,
# followed by any details you like (counts, positions, values):
#
# - `"non-finite input"`: a NaN or inf anywhere in `batch.features`;
# - `"illegal label"`: a target outside `[0, vocab_size)` that is not the mask value
#   `IGNORE_INDEX` (-100);
# - `"no target"`: every target is masked, so the mean loss would be `0 / 0`.
#
# A batch can have several problems at once.

# %%
def validate_batch(batch, vocab_size=VOCAB):
    """The batch's problems as a list of strings; [] when it is safe to train on."""
    ### BEGIN SOLUTION
    problems = []
    bad = ~torch.isfinite(batch.features)
    if bad.any():
        nan = int(torch.isnan(batch.features).sum())
        first = tuple(bad.nonzero()[0].tolist())
        problems.append(f"non-finite input: {int(bad.sum())} value(s) ({nan} NaN), "
                        f"first at {first}")
    targets = batch.targets
    kept = targets != IGNORE_INDEX
    illegal = kept & ((targets < 0) | (targets >= vocab_size))
    if illegal.any():
        values = sorted(set(targets[illegal].tolist()))[:5]
        problems.append(f"illegal label: {values} outside [0, {vocab_size})")
    if not kept.any():
        problems.append("no target: every target is masked; the mean loss is 0 / 0")
    return problems
    ### END SOLUTION


# %% [markdown]
# Test batches: step 0's clean batch and edited copies, each with the problems a good
# validator reports.

# %%
KINDS = ("non-finite input", "illegal label", "no target")


def dirty(**edits):
    """A copy of the clean batch of step 0 with some entries overwritten."""
    b = CountingTask(seed=0)(0)
    features, targets = b.features.clone(), b.targets.clone()
    for where, value in edits.get("features", []):
        features[where] = value
    for where, value in edits.get("targets", []):
        targets[where] = value
    return dataclasses.replace(b, features=features, targets=targets)


everything = (slice(None), slice(None))
CASES = {
    "clean batch": (dirty(), set()),
    "one NaN feature": (dirty(features=[((3, 5, 0), math.nan)]), {"non-finite input"}),
    "one -inf feature": (dirty(features=[((0, 0, 0), -math.inf)]), {"non-finite input"}),
    "label -1": (dirty(targets=[((2, 7), -1)]), {"illegal label"}),
    "label 32": (dirty(targets=[((0, 31), VOCAB)]), {"illegal label"}),
    "extra padding (-100)": (dirty(targets=[((slice(None), slice(-4, None)),
                                             IGNORE_INDEX)]), set()),
    "every target masked": (dirty(targets=[(everything, IGNORE_INDEX)]), {"no target"}),
    "NaN and all masked": (dirty(features=[((1, 1, 0), math.nan)],
                                 targets=[(everything, IGNORE_INDEX)]),
                           {"non-finite input", "no target"}),
}


# %% [markdown]
# The check compares the kinds of problem you report with the expected ones:

# %% tags=["nbval-check-output"]
def judge_validation(found):
    for case, (_, want) in CASES.items():
        problems = found[case]
        if not isinstance(problems, list):
            return f"case {case!r}: expected a list, got {type(problems).__name__}"
        odd = [p for p in problems if not str(p).startswith(KINDS)]
        if odd:
            return f"case {case!r}: {odd[0]!r} does not start with one of {KINDS}"
        got = {k for p in problems for k in KINDS if str(p).startswith(k)}
        if got != want:
            return (f"case {case!r}: found {sorted(got) or 'nothing'}, "
                    f"expected {sorted(want) or 'nothing'}")
    return None


check("validate_batch", validate_batch, cases={c: (b,) for c, (b, _) in CASES.items()},
      test=judge_validation, hints=[
          "Three checks, one per problem: non-finite inputs, labels outside the vocabulary "
          "(masked ones do not count), and a batch with no target left at all.",
          "torch.isfinite marks NaN and both infinities; IGNORE_INDEX marks a masked target, "
          "which is never illegal; only the kept targets must lie from 0 to vocab_size - 1; "
          "one message per problem, as the text above words them.",
          "Build boolean masks and ask .any() of each: the features that are not finite, the "
          "kept targets (those that are not IGNORE_INDEX), and among the kept ones those "
          "below 0 or at vocab_size and above; no kept target at all is the third problem.",
      ], solution="""\
problems = []
bad = ~torch.isfinite(batch.features)
if bad.any():
    nan = int(torch.isnan(batch.features).sum())
    first = tuple(bad.nonzero()[0].tolist())
    problems.append(f"non-finite input: {int(bad.sum())} value(s) ({nan} NaN), "
                    f"first at {first}")
targets = batch.targets
kept = targets != IGNORE_INDEX
illegal = kept & ((targets < 0) | (targets >= vocab_size))
if illegal.any():
    values = sorted(set(targets[illegal].tolist()))[:5]
    problems.append(f"illegal label: {values} outside [0, {vocab_size})")
if not kept.any():
    problems.append("no target: every target is masked; the mean loss is 0 / 0")
return problems""")


# %% [markdown]
# **Exercise 2 · `safe_standardize`.** Standardise per feature over the batch and time
# dimensions, like `nanlab.toy.data.standardize`, but floor the std at `eps` with
# `std.clamp_min(eps)`, so that a constant column becomes 0 instead of `0 / 0`. Use
# the population std (`unbiased=False`), as the pipeline does.

# %%
def safe_standardize(x, dim=(0, 1), eps=1e-6):
    """(x - mean) / max(std, eps) per feature: finite for a constant column."""
    ### BEGIN SOLUTION
    mean = x.mean(dim, keepdim=True)
    std = x.std(dim, keepdim=True, unbiased=False)
    return (x - mean) / std.clamp_min(eps)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
normal = CountingTask(seed=0).raw(0).raw_features  # (32, 32, 1)
stuck = torch.full_like(normal, 7.0)
two_cols = torch.cat([normal, stuck], dim=-1)  # a live column and a stuck one


def judge_standardize(out):
    a, b, c = out["a normal column"], out["a stuck column"], out["a normal and a stuck column"]
    if not torch.allclose(a, standardize(normal), atol=1e-5):
        return "case 'a normal column': it should come out exactly as standardize() gives it"
    if not (torch.isfinite(b).all() and (b == 0).all()):
        return "case 'a stuck column': a constant column should become all zeros (finite)"
    if not (torch.allclose(c[..., :1], standardize(normal), atol=1e-5)
            and (c[..., 1] == 0).all()):
        return ("case 'a normal and a stuck column': each column needs its own mean and std "
                "(keepdim=True)")
    return None


check("safe_standardize", safe_standardize,
      cases={"a normal column": (normal,), "a stuck column": (stuck,),
             "a normal and a stuck column": (two_cols,)},
      test=judge_standardize, hints=[
          "A constant column has std 0, so standardising it is 0 / 0: keep the division, but "
          "never divide by less than a small eps.",
          "The statistics are per feature, over the batch and time dimensions 0 and 1, kept "
          "with keepdim so they broadcast; clamp_min puts a floor under a tensor; use the "
          "population std, unbiased False.",
          "x.mean and x.std both take the dimensions and keepdim; floor the std with "
          "clamp_min(eps), then subtract the mean and divide, as standardize does.",
      ], solution="""\
mean = x.mean(dim, keepdim=True)
std = x.std(dim, keepdim=True, unbiased=False)
return (x - mean) / std.clamp_min(eps)""")

# %% [markdown]
# Why `clamp_min(eps)`, not `std + eps`: the clamp leaves every normal column exactly
# as it was. A column constant in this batch carries no information here, so 0 ("at
# the mean") is right; log the stuck sensor all the same.
#
# Validate *before* standardising, too: one NaN in the raw data makes the batch mean
# NaN. How much does it spoil?

# %% tags=["nbval-check-output"]
raw = CountingTask(seed=0).raw(40).raw_features.clone()
raw[0, 0, 0] = math.nan  # one missing reading, before standardising
n_nan = int(torch.isnan(standardize(raw)).sum())
print("NaN after standardising:", n_nan, "of", raw.numel())


# %% [markdown]
# ### Your validation as a guard: fail loud
# Wrapped around the batch source, `validate_batch` turns a silent NaN into a loud
# error. `faults.inject` puts the same NaN into batch 40 of a task we build; our own
# `Trainer` reads the checked batches.

# %%
class BadBatch(ValueError):
    """A batch that must not reach the model."""


def checked(batches, vocab_size=VOCAB):
    """Wrap a batch source: raise BadBatch, naming the batch and its problems."""
    def get(index):
        batch = batches(index)
        problems = validate_batch(batch, vocab_size)
        if problems:
            raise BadBatch(f"batch {index}: " + "; ".join(problems))
        return batch
    return get


injection = faults.inject("nan_input", batches=CountingTask(seed=0), inputs="features")
guarded = Trainer(TrainConfig(steps=200, progress=False),
                  batches=checked(injection.batches))
try:
    guarded.run()
    print("the run finished?!")
except BadBatch as err:
    print("stopped loudly at step", guarded.step, "->", err)
except NotImplementedError:
    print("(validate_batch is still a stub: fill it in above, then rerun this cell)")

# %% [markdown]
# Stopping suits debugging; a long run would rather skip the bad batch and log it.
# nanlab's `validate_data` fix trains on the next clean batch instead and writes an
# event to the record (claim V3: every bad batch is logged, with its problems). What
# does checking every batch cost?

# %%
clean_batch = CountingTask(seed=0)(0)
t0 = time.perf_counter()
for _ in range(200):
    batch_problems(clean_batch, VOCAB)
per_check = (time.perf_counter() - t0) / 200
print(f"one batch check: {per_check * 1e6:.0f} microseconds")

# %% [markdown]
# Tens of microseconds, against a training step of several milliseconds. On a GPU,
# check the CPU batch in the data loader, before `.to(device)`: no host-device sync,
# and it overlaps with training.
#
# ## 5. The proof
# A fix is proven when a run **with the same seed**, fault still in the data, gives a
# normal curve and matches the clean run's loss at the same step.

# %%
clean = run_fault(None)  # the clean baseline, seed 0
fixed = run_fault("nan_input", fixes=["validate_data"])  # the same fault, validated
print(fixed.record.events)

# %% tags=["nbval-check-output"]
lc, lf = clean.record.losses(), fixed.record.losses()
print("fixed run, first non-finite step:", fixed.record.first_nonfinite_step)
print("identical to the clean run up to step 39:", bool(np.array_equal(lc[:40], lf[:40])))
print("loss at step 199 within 0.01 of the clean run:", bool(abs(lf[199] - lc[199]) < 0.01))

# %%
print(f"loss at step 199: clean {lc[199]:.4f}, fixed {lf[199]:.4f}")
fig = plot_compare({"clean": clean.record, "nan_input, no fix": rec,
                    "nan_input + validate_data": fixed.record})

# %% [markdown]
# Bit-identical up to step 39: same seed, same batches. From step 40 the fixed run
# trains on batch 41 where the clean run had batch 40 (it skipped one), so the curves
# differ in the last digits yet land at the same loss. A difference *before* step 40
# would mean something besides the fix changed.
#
# ### The wrong fixes, measured
# Would the usual reflexes have worked? The fault × fix matrix runs each fault against
# each fix, same seed, 200 steps, in two processes.

# %%
from nanlab.faults import fault_fix_matrix

matrix = fault_fix_matrix(faults=["nan_input", "illegal_label"],
                          fixes=["validate_data", "lr_div10", "grad_clip",
                                 "skip_nonfinite"], workers=2)
print(matrix.table())
print()
print(matrix.evidence())

# %% tags=["nbval-check-output"]
for fault in matrix.faults:
    print(fault, {fix: matrix.outcome(fault, fix) for fix in matrix.fixes})

# %% [markdown]
# - **LR ÷ 10** (降低学习率) changes nothing: the NaN is in the input, not in the size of
#   the update.
# - **Gradient clipping** (梯度裁剪) is worse than useless: a gradient holding one NaN has
#   a NaN global norm, and clipping multiplies *every* gradient by `max_norm / NaN`.
#   Watch a perfectly finite `b.grad`:

# %% tags=["nbval-check-output"]
a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
a.grad = torch.tensor([1.0, math.nan, 2.0])
b.grad = torch.tensor([3.0, 4.0, 5.0])  # perfectly fine
norm = torch.nn.utils.clip_grad_norm_([a, b], max_norm=1.0)
print("total norm:", norm.item(), "| b.grad after clipping:", b.grad.tolist())

# %% [markdown]
# - **Skipping non-finite steps** (`skip_nonfinite`, the guard's skip mode) *contains*
#   the NaN: step 40's update is dropped, the weights stay clean. But the bad batch
#   returns next epoch, the guard would as quietly hide a real numerical problem, and
#   an illegal label crashes before there is a step to skip.
# - **Validating the data** cures both: it acts on the cause.
#
# Contain vs cure (止损 vs 根治), a distinction interviewers like: a guard buys time, the
# root-cause fix ends the problem. `all_masked` (NaN loss, zero gradients) is left out
# here; the full matrix (`nanlab matrix`) reports it "not cured, the weights stayed
# finite": a NaN in the log needs explaining even when harmless.
#
# ## 6. Practice
# Answer, then **Check**; **Hint** gives one hint per click.

# %%
from nanlab.course import practice

practice("02-lr-no-change")

# %%
practice("02-which-nan")

# %%
practice("02-mystery-stuck")

# %%
practice("02-what-first")

# %% [markdown]
# ## 7. For instructors: the same fault in any model
# `faults.inject` puts a fault into a model, optimizer and batch source nanlab did not
# create; call `injection.batches(step)` once per step of your loop. Here: a tiny MLP,
# a hand-written loop, `(x, y)` batches. The fault finds the float tensor itself (or
# name it with `inputs=`).

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
opt = torch.optim.Adam(mlp.parameters(), lr=1e-2)


def get_batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 4, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # 3 classes


injection = faults.inject("nan_input", model=mlp, optimizer=opt, batches=get_batch,
                          at_step=3)
for step in range(6):
    x, y = injection.batches(step)
    loss = F.cross_entropy(mlp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    weights_ok = all(bool(torch.isfinite(p).all()) for p in mlp.parameters())
    print(f"step {step}: loss {'finite' if loss.isfinite() else 'NaN':6}  "
          f"weights finite: {weights_ok}")

# %% [markdown]
# `"illegal_label"` and `"all_masked"` edit the integer labels (the last integer
# tensor, or name it with `labels=`). `python -m nanlab faults` lists every fault with
# its parameters.
#
# ## Summary
# - One NaN reading in one batch: NaN loss from then on, no error, and every weight
#   NaN after one optimizer step.
# - The signature: healthy until the bad batch, nothing growing before it (a forward
#   overflow or a flipped bit looks the same), no inf before the NaN; `locate` finds
#   the first non-finite value in the data.
# - Floor the std (`std.clamp_min(eps)`); clamp the count of a hand-written masked
#   mean.
# - An illegal label is loud in single-device PyTorch (IndexError, a device-side
#   assert on CUDA), NaN in TensorFlow on GPU, silently masked by Megatron-LM's
#   vocab-parallel loss; `-100` is silently ignored.
# - Validation cures; LR ÷ 10 and clipping do nothing; skipping non-finite steps only
#   contains the damage. Proof: same seed, bit-identical before the bad batch, same
#   loss at step 199.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
