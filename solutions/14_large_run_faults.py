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
# **Source notebook (solution version).** This pair (`solutions/14_large_run_faults.py`,
# `.ipynb`) is the single source of `labs/14_large_run_faults.ipynb`, answers filled in.
# Edit either (JupyterLab syncs the other on save), then run
# `nanlab course execute solutions/14_large_run_faults.py` (syncs the pair, stores the
# outputs the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 14 · Large-run faults: bad tokens, accumulation bugs, a flipped bit
#
# Three kinds of fault that large LLM runs meet and that no float check in the batch
# sees: token ids and junk sequences in the data (`llm_data`), a gradient-accumulation
# loop written wrongly (`grad_accum`), and a device that returns one wrong number
# (`hardware`). For each you run the fault on the toy, read its signature, learn the
# mechanism, let `diagnose` name it and prove the cure, and try a fix that does not
# cure it. CPU only, about 30 minutes; the runs take about a minute.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from nanlab import faults
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import diagnose
from nanlab.debug.attribution import per_sample_loss
from nanlab.faults.hardware import flip_bit
from nanlab.train.accum import split_batch, target_count

start_lab("14_large_run_faults")


def spike(losses, at, before=20):
    """(peak step, peak / median of the `before` steps before `at`) after step `at`."""
    losses = np.asarray(losses)
    peak = at + int(np.nanargmax(losses[at:]))
    return peak, float(losses[peak] / np.median(losses[at - before:at]))


# %% [markdown]
# ## 1. A token id past the vocabulary: loud, then silent
#
# A special token is added to the tokenizer (`add_special_tokens`) and the model's
# embedding is not resized: the new id equals `num_embeddings`. `oov_token` puts it in
# every sequence of the batch of step 40. Plain PyTorch checks the index:

# %%
loud = faults.run_fault("oov_token", steps=60, stop_when_poisoned=True)
print(f"oov_token: {loud.error} at step {loud.first_bad_step}")

# %% [markdown]
# Large models split the embedding and the output layer over tensor-parallel ranks by
# vocabulary. Megatron-LM's `VocabParallelEmbedding` (megatron/core/tensor_parallel/
# layers.py) masks every id outside a rank's slice, looks up row 0 for it and zeroes
# that output before the all-reduce; `vocab_parallel_cross_entropy`
# (megatron/core/tensor_parallel/cross_entropy.py) does the same to a target, whose
# predicted logit becomes 0 after the max is subtracted. An id that no rank owns embeds
# as a zero vector and its target costs `log Z - max`: finite, no error.
# `oov_token_masked` runs the same ids through that arithmetic
# (`nanlab/toy/vocab_parallel.py`, two slices), in a shard of 5 batches from step 150.

# %%
masked = faults.run_fault("oov_token_masked", steps=170)
print("error:", masked.error, "| first non-finite step:", masked.first_bad_step)
masked_peak, masked_ratio = spike(masked.record.losses(), 150)
print(f"loss peaks at step {masked_peak}, {masked_ratio:.1f}x the median of steps 130-149")

# %% tags=["nbval-check-output"]
print("oov_token crashes with an IndexError at step 40:",
      loud.error.startswith("IndexError") and loud.first_bad_step == 40)
print("the masked run has no error and stays finite:",
      masked.error is None and masked.first_bad_step is None)
print("the masked run spikes within 3 steps of step 150:", 150 <= masked_peak <= 153)
print("the spike is more than 3x the steps before:", masked_ratio > 3)

# %% [markdown]
# ## 2. A junk shard, found by per-sample loss
#
# `repeated_token_shard`: five batches from step 150 in which a quarter of the sequences
# are one token repeated (a broken dedup, a corrupted shard). Every id is legal, every
# number finite. The toy has learned to count, so on `a a a a ...` it confidently
# predicts the next count and pays on every position.

# %%
junk = faults.run_fault("repeated_token_shard", steps=170)
junk_peak, junk_ratio = spike(junk.record.losses(), 150)
steps = np.arange(170)
fig, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
ax.plot(steps[120:], masked.record.losses()[120:], label="oov_token_masked")
ax.plot(steps[120:], junk.record.losses()[120:], label="repeated_token_shard")
ax.axvspan(150, 154, color="gray", alpha=0.2, label="the bad shard")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.legend(fontsize=8)
print(f"repeated_token_shard: peak at step {junk_peak}, {junk_ratio:.1f}x the steps before")

# %% [markdown]
# A spiking batch loss is a mean. Did every sequence get worse (the model moved) or do a
# few carry it (the data)? `per_sample_loss` runs the run's own loss on each sample alone,
# with the weights the model had when the batch arrived (the checkpoint of step 150).

# %%
trainer = junk.trainer
batch = trainer.batches(150)
kept = [s for s in trainer.checkpoints.steps() if s <= 150]
attribution = per_sample_loss(trainer.model, batch, trainer.loss_fn,
                              state=trainer.checkpoints.load(kept[-1])["model"])
print(attribution.report())
by_row = attribution.by_index
fig, ax = plt.subplots(figsize=(9, 3), layout="constrained")
rows = sorted(by_row)
colors = ["C3" if by_row[i].top_share > 0.5 else "C0" for i in rows]
ax.bar(rows, [by_row[i].loss for i in rows], color=colors)
ax.set_yscale("log")
ax.set_xlabel("sequence of batch 150 (red: one token repeated)")
ax.set_ylabel("its loss alone");

# %% tags=["nbval-check-output"]
culprits = attribution.culprits()
print("the shard spikes within 3 steps of step 150:", 150 <= junk_peak <= 153)
print("8 sequences of 32 carry the spike:", (len(culprits), len(by_row)) == (8, 32))
print("every one is one token repeated:", all(s.top_share == 1.0 for s in culprits))
print("they carry more than 80% of the batch's loss:", attribution.share() > 0.8)

# %% [markdown]
# Now `diagnose` on both spikes. Its batch check reads the legal id range from every
# `nn.Embedding` of the model (any model, a Hugging Face GPT-2 too), and on a spike whose
# batch passes it, ranks the samples as above. It then replays the run with the fix.

# %%
verdicts = {name: diagnose(run) for name, run in
            (("oov_token_masked", masked), ("repeated_token_shard", junk))}
for name, d in verdicts.items():
    print(f"=== {name}\n{d.report()}\n")

# %% tags=["nbval-check-output"]
for name, want in (("oov_token_masked", "validate_data"),
                   ("repeated_token_shard", "quality_filter")):
    d = verdicts[name]
    print(f"{name}: cause {d.cause}, names the fault: {d.detail == name}, "
          f"fix {d.fix}: {d.fix == want}, proven: {d.fix_verified}")

# %% [markdown]
# A wrong fix: the batch check alone on the junk shard. Its ids are legal and its
# numbers finite, so it lets every junk sequence through. `quality_filter` (a repetition
# filter: drop a sequence whose most common token is more than half of it, a token-level
# cousin of Gopher's, Rae et al. 2021, arXiv 2112.11446, Table A1) is the cure.

# %%
checked = faults.run_fault("repeated_token_shard", fixes=["validate_data"], steps=170)
checked_peak, checked_ratio = spike(checked.record.losses(), 150)
print(f"with validate_data: peak at step {checked_peak}, {checked_ratio:.1f}x")

# %% tags=["nbval-check-output"]
print("validate_data does not cure the junk shard (still above 3x):", checked_ratio > 3)

# %% [markdown]
# ## 3. Gradient accumulation: the mean of means
#
# With `accum_steps = k` each step's batch is cut into k micro-batches; the gradients
# add up before one optimizer step. The step's loss should be the sum over all `N`
# unmasked targets divided by `N`: each target weighs `1 / N`. A loop that takes each
# micro-batch's *mean* loss (over its own `n_i` targets) and divides by `k` gives a
# target of micro-batch i the weight
#
# `1 / (k · n_i)`  instead of  `1 / N`.
#
# Equal only when every `n_i = N / k`. Hugging Face transformers' Trainer had this bug;
# the first fix came in October 2024 (huggingface/transformers PR #34191 "Fix Gradient
# Accumulation issue"; the HF blog "Fixing Gradient Accumulation", huggingface/blog PR
# #2414), and later reports show it lingering: PR #35438 (December 2024) and issue
# #37766 (April 2025, models whose forward takes no `num_items_in_batch`). In
# `accum_mean_of_means`, steps 140-159 have a first micro-batch with 1 unmasked target,
# the others 248 each:

# %%
counts = [target_count(m) for m in split_batch(faults.run_fault(
    "accum_mean_of_means", steps=1).trainer.batches(140), 4)]
k, N = len(counts), sum(counts)
weight_ratio = (1 / (k * counts[0])) / (1 / N)
print(f"targets per micro-batch at step 140: {counts}; the lone target weighs "
      f"{weight_ratio:.0f}x what it should (1/(k n_0) against 1/N)")

# %% [markdown]
# Does one token with the weight of a whole micro-batch matter? Adam's normalised step
# moves the weights as far as for a full batch, toward fitting that token.
#
# **Exercise · predict.** Two runs: the mean of means, and the cure `token_weighted`
# (each target weighs `1 / N`). Return a dict mapping each of the `STATEMENTS` to `True`
# or `False`; "the level" is the median loss of steps 130-139.

# %%
STATEMENTS = [
    "mean of means: the loss passes 3x the level",
    "mean of means: the loss peaks within 3 steps of step 140",
    "mean of means: the loss turns NaN or inf",
    "token_weighted: the loss stays under 1.5x the level",
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

predict("predict_accumulation", my_predictions)

# %%
mom = faults.run_fault("accum_mean_of_means", steps=170)
tokw = faults.run_fault("accum_mean_of_means", fixes=["token_weighted"], steps=170)
fig, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
ax.plot(steps[120:], mom.record.losses()[120:], label="mean of means (/ k)")
ax.plot(steps[120:], tokw.record.losses()[120:], label="token_weighted (/ N)")
ax.axvspan(140, 159, color="gray", alpha=0.2, label="a 1-target micro-batch")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.legend(fontsize=8)
mom_peak, mom_ratio = spike(mom.record.losses(), 140, before=10)
tokw_peak, tokw_ratio = spike(tokw.record.losses(), 140, before=10)
print(f"mean of means: peak at step {mom_peak}, {mom_ratio:.1f}x steps 130-139; "
      f"token_weighted: {tokw_ratio:.1f}x")

# %% [markdown]
# Your prediction, graded against the two runs:

# %% tags=["nbval-check-output"]
actual = dict(zip(STATEMENTS, [mom_ratio > 3, mom_peak <= 143,
                               mom.record.first_nonfinite_step is not None, tokw_ratio < 1.5],
                  strict=True))
check("predict_accumulation", my_predictions, actual, locked=True, hints=[
    "The wrong weight is a finite number: every value stays ordinary, so ask whether anything "
    "can overflow, and what a step that fits one token does to the other targets.",
    "The uneven micro-batches come back at every step from 140 to 159: does the damage of one "
    "such step heal before the next, or add up? With 1 / N, that token weighs what any other "
    "does.",
    "After committing, the check cell reads each statement from the runs: the `spike` helper's "
    "peak step and ratio for each run, and the record's `first_nonfinite_step`.",
])

# %% tags=["nbval-check-output"]
print("the lone target weighs more than 100x its share:", weight_ratio > 100)
print("mean of means spikes more than 3x:", mom_ratio > 3)
print("token_weighted stays under 1.5x:", tokw_ratio < 1.5)

# %% [markdown]
# ## 4. An all-masked micro-batch, and a scaler updated too often
#
# If a micro-batch has no unmasked target at all (padding, prompts only), its mean
# is `0 / 0 = NaN`, and the mean of means is NaN although the other micro-batches are
# fine. Token weighting leaves it out: it adds nothing to the sum. The batch as a whole
# has targets, so a batch check passes it: `validate_data` is a wrong fix here.

# %%
nan_run = faults.run_fault("accum_masked_micro_batch", steps=60, stop_when_poisoned=True)
nan_counts = [target_count(m) for m in split_batch(nan_run.trainer.batches(40), 4)]
wrong = faults.run_fault("accum_masked_micro_batch", fixes=["validate_data"], steps=60,
                         stop_when_poisoned=True)
print(f"targets per micro-batch at step 40: {nan_counts}; first non-finite loss: step "
      f"{nan_run.first_bad_step}; with validate_data: step {wrong.first_bad_step}")
d_nan = diagnose(nan_run)
print(d_nan.report())

# %% [markdown]
# The third accumulation fault is mixed precision's. PyTorch's AMP examples ("Gradient
# accumulation" in *Automatic Mixed Precision examples*) say to call `scaler.step` and
# `scaler.update` once per *effective* batch: gradients stay scaled by one factor until
# every micro-batch is in. A loop that calls `scaler.update()` after each micro-batch
# stops at once:

# %%
scaler_run = faults.run_fault("scaler_update_micro_batch", steps=5)
print(f"step {scaler_run.first_bad_step}: {scaler_run.error}")

# %% tags=["nbval-check-output"]
print("an all-masked micro-batch makes the loss NaN at step 40:",
      nan_counts[0] == 0 and nan_run.first_bad_step == 40)
print("validate_data does not prevent it:", wrong.first_bad_step == 40)
print(f"diagnose: {d_nan.cause}, names the fault: {d_nan.detail == 'accum_masked_micro_batch'}"
      f", fix {d_nan.fix}, proven: {d_nan.fix_verified}")
print("update() per micro-batch: PyTorch's assertion at step 0:",
      scaler_run.first_bad_step == 0 and "No inf checks were recorded" in scaler_run.error)

# %% [markdown]
# ## 5. One flipped bit
#
# A GPU with a marginal core can return one wrong number without any error: silent data
# corruption. An fp32 value is `(-1)^s · 2^(e - 127) · 1.m`, with the sign in bit 31,
# the 8-bit exponent `e` in bits 30-23 and the mantissa below. Flipping bit 30, the
# highest exponent bit, adds or removes 128 from `e`. Below 1 in magnitude the value
# is multiplied by `2^128 ≈ 3.4e38`; in [1, 2) the exponent becomes 255, which fp32
# reserves for inf (mantissa 0) and NaN; from 2 up the value is divided by `2^128`.

# %%
for x in (0.5, 1.0, 1.5, 3.0):
    flipped = flip_bit(torch.tensor([x]), 0, -2).item()
    print(f"{x:4}: bits {torch.tensor([x]).view(torch.int32).item():032b} -> {flipped:.3g}")

# %% [markdown]
# `bit_flip` flips that bit in element 0 of the first `nn.Linear`'s output, at step 40,
# on its first call only: a transient fault.

# %%
flip = faults.run_fault("bit_flip", steps=60, stop_when_poisoned=True)
print("first non-finite step:", flip.first_bad_step)
d_flip = diagnose(flip)
print(d_flip.report())

# %% [markdown]
# The evidence is a replay: from the checkpoint before, the same weights, batch and RNG,
# every step reproduces bit for bit and step 40 comes back clean. Dirty data would fail
# again. That is Megatron-LM's `RerunStateMachine` (megatron/core/rerun_state_machine.py):
# a result that cannot be reproduced on the same GPU is a `TRANSIENT_ERROR`. The cure,
# `guard_rerun`, reruns a failed step from the same state and keeps the clean rerun.
# The wrong fix is the data check: the batch is clean.

# %%
clean = faults.run_fault(None, steps=60)
rerun = faults.run_fault("bit_flip", fixes=["guard_rerun"], steps=60)
wrong_flip = faults.run_fault("bit_flip", fixes=["validate_data"], steps=60,
                              stop_when_poisoned=True)
print([e for e in rerun.record.events if e["kind"] == "rerun"])
print("with validate_data, first non-finite step:", wrong_flip.first_bad_step)

# %% tags=["nbval-check-output"]
print("the flip makes the loss NaN at step 40:", flip.first_bad_step == 40)
print(f"diagnose: {d_flip.cause}, names the fault: {d_flip.detail == 'bit_flip'}, "
      f"fix {d_flip.fix}, proven: {d_flip.fix_verified}")
print("guard_rerun gives the clean run's losses bit for bit:",
      list(rerun.record.losses()) == list(clean.record.losses()))
print("validate_data does not cure it:", wrong_flip.first_bad_step == 40)

# %% [markdown]
# ## 6. Exercise: token-weighted accumulation
#
# Write the loss of one micro-batch so that the accumulated gradient equals the gradient
# of the whole batch, whatever the micro-batches' target counts, an all-masked one
# included. `targets == -100` marks a masked position; `total_targets` is the step's
# count of unmasked targets over all micro-batches (`N`).

# %%
def token_weighted_loss(logits, targets, total_targets):
    """This micro-batch's part of the step's loss, to call .backward() on."""
    ### BEGIN SOLUTION
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100,
                           reduction="sum") / total_targets
    ### END SOLUTION


# %% tags=["nbval-check-output"]
MICRO_BATCHES = ["micro-batch 0, every target masked", "micro-batch 1, 2 targets",
                 "micro-batch 2, 12 targets", "micro-batch 3, 12 targets"]


def accumulated_step():
    """The whole batch's mean loss and gradients, then your micro-batches' (4 of 2 rows)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
    x = torch.randint(0, 10, (8, 6))
    y = torch.randint(0, 10, (8, 6))
    y[:2] = -100          # micro-batch 0: every target masked
    y[2:4, :-1] = -100    # micro-batch 1: 2 targets
    whole = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
    whole.backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total = int((y != -100).sum())
    losses = {}
    for label, xs, ys in zip(MICRO_BATCHES, x.split(2), y.split(2), strict=True):
        loss = token_weighted_loss(model(xs), ys.clone(), total)
        loss.backward()
        losses[label] = float(loss.detach())
    return float(whole.detach()), losses, want, [p.grad for p in model.parameters()]


def step_test(result):
    whole, losses, want, got = result
    for label, loss in losses.items():
        if not np.isfinite(loss):
            return (f"case {label!r}: its loss is {loss}: what should a micro-batch without "
                    "targets add?")
    if not np.isclose(sum(losses.values()), whole, rtol=1e-5, atol=0.0):
        return (f"the micro-batch losses add up to {sum(losses.values()) / whole:.2f} x the "
                "whole batch's loss: how much should each target weigh?")
    if not all(torch.isfinite(g).all() for g in got):
        return "a gradient is not finite: what does a micro-batch without targets add?"
    if not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(want, got, strict=True)):
        ratio = float(got[1].norm() / want[1].norm())
        return (f"the losses add up, but the accumulated gradient is not the whole batch's "
                f"(norm ratio {ratio:.2f}): is every micro-batch's loss part of the graph?")
    return None


check("token_weighted_accumulation", accumulated_step, test=step_test,
      hints=["Each unmasked target of the step should weigh 1 / N, whichever micro-batch "
             "it sits in; a micro-batch with no target should add exactly 0, not 0 / 0.",
             "F.cross_entropy takes ignore_index=-100 and reduction='sum': the sum over "
             "this micro-batch's unmasked targets, 0 when there are none.",
             "Flatten the logits to (positions, vocabulary) and the targets to (positions,), "
             "as F.cross_entropy expects; divide the summed loss by the step's total_targets, "
             "never by this micro-batch's own count."],
      solution="""\
return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100,
                       reduction="sum") / total_targets""")

# %% [markdown]
# ## 7. Triage: three incidents
#
# Three more runs went wrong, their faults hidden (`incident_runs`), each at a step
# other than its section's. For each you have what an on-call engineer gathers in the
# first hour, with this lab's tools: the first bad step (a NaN, or a loss twice the
# median of the ten before), an exact replay of it from the checkpoint before, the
# per-sample loss of its batch, and the unmasked targets of each micro-batch.

# %%
from nanlab.course.questions.lab14 import FAMILIES, incident_runs


def first_bad_step(losses, bar=2.0, start=20):
    """The first step whose loss is not finite or `bar` times the median of the 10 before."""
    for at in range(start, len(losses)):
        if not np.isfinite(losses[at]) or losses[at] > bar * np.median(losses[at - 10:at]):
            return at
    return None


def evidence_of(run):
    """The four rows of evidence of one incident."""
    losses = np.array(run.record.losses())
    at = first_bad_step(losses)
    tr = run.trainer
    kept = tr.checkpoints.nearest(at)
    batch = tr.batches(at)
    alone = per_sample_loss(tr.model, batch, tr.loss_fn, state=tr.checkpoints.load(kept)["model"])
    scored = np.sort([s.loss for s in alone.samples if np.isfinite(s.loss)])[::-1]
    tr.restore(kept)  # replay from the checkpoint before, the same batches and RNG
    again = [tr.train_step(batch_index=b, record_layers=False).loss_value
             for b in range(kept, at + 1)][-1]
    times = losses[at] / np.median(losses[at - 10:at])
    return {"bad step's loss": f"{losses[at]:.3g}" + (f", {times:.1f}x the 10 before"
                                                      if np.isfinite(times) else ""),
            "exact replay gives the same loss": np.array_equal(again, losses[at], equal_nan=True),
            "worst quarter's share of the loss": float(scored[:len(scored) // 4].sum() / scored.sum()),
            "targets per micro-batch": [target_count(m) for m in split_batch(batch, 4)]}


triage = {name: evidence_of(run) for name, run in incident_runs().items()}
for name, rows in triage.items():
    print(name)
    for row, value in rows.items():
        print(f"   {row:34} {f'{value:.0%}' if isinstance(value, float) else value}")
print("\nFAMILIES:")
for family, meaning in FAMILIES.items():
    print(f"   {family:13} {meaning}")

# %% [markdown]
# **Exercise · triage.** Name the fault family of each incident, one of the `FAMILIES`
# keys: return `{"incident A": family, "incident B": family, "incident C": family}`.

# %%
def my_triage():
    """{incident: the name of its fault family}."""
    ### BEGIN SOLUTION
    # A: the replay fails the same way and one micro-batch holds a single target.
    # B: the replay of the same state and batch comes back finite: transient.
    # C: the replay fails again, micro-batches are even, a few sequences carry the loss.
    return {"incident A": "accumulation", "incident B": "hardware", "incident C": "data"}
    ### END SOLUTION


# %% tags=["nbval-check-output"]
from nanlab.course.questions.lab14 import judge_families

check("triage", my_triage, test=lambda got: judge_families(got, triage),
      hints=["Start with the replay: which families fail again from the same state, batch "
             "and RNG, and which does not?",
             "Of those that fail again, one depends on how the loop splits the batch and one "
             "on what is in the batch: which row shows each?",
             "An even batch gives its worst quarter of sequences about a third of the loss; "
             "micro-batches of the same size hold about the same number of targets."],
      solution="""\
# A: the replay fails the same way and one micro-batch holds a single target.
# B: the replay of the same state and batch comes back finite: transient.
# C: the replay fails again, micro-batches are even, a few sequences carry the loss.
return {"incident A": "accumulation", "incident B": "hardware", "incident C": "data"}""")

# %% [markdown]
# ## 8. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("14-mean-of-means-weight")

# %%
practice("14-transient-or-data")

# %% [markdown]
# A junk shard passes every id and number check (section 2): which evidence does point
# at it?

# %%
practice("14-mystery-junk-shard")

# %% [markdown]
# An accumulation loop can make a NaN out of a batch the check passes (section 4): which
# evidence says so?

# %%
practice("14-mystery-empty-micro-batch")

# %% [markdown]
# Why a flipped bit is transient, in numbers: section 5's bit layout on one value.

# %%
practice("14-bit-flip-value")

# %% [markdown]
# ## Summary
# - An id past the vocabulary crashes plain PyTorch; vocabulary-parallel layers mask
#   it into a silent spike. Check ids against every `nn.Embedding` (`validate_data`).
# - A junk shard is a finite spike; per-sample loss puts it on the junk sequences and a
#   repetition filter cures it.
# - Accumulate with `1 / N` per target, not `1 / (k · n_i)`: the mean of means spikes on
#   uneven micro-batches and turns NaN on an empty one. One `scaler.update()` per step.
# - A flipped exponent bit multiplies a value by 2^128; a failure that does not
#   reproduce on replay is the device, and a rerun cures it.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
