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
# **Source notebook (solution version).** This pair (`solutions/12_incidents.py`,
# `.ipynb`) is the single source of `labs/12_incidents.ipynb`, answers filled in.
# Edit either (JupyterLab syncs the other on save), then run
# `nanlab course execute solutions/12_incidents.py` (syncs the pair, stores the
# outputs the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 12 · The famous incidents as case studies
#
# Four large training runs published what went wrong and what they did about it:
# PaLM 540B, OPT-175B, BLOOM 176B and OLMo 2. For each, this lab puts the paper's
# numbers beside a toy experiment you run, and says where the toy agrees and where it
# does not. Every paper number is quoted with its section; every toy number is read
# from a run. CPU only, about 30 minutes; the runs take about two minutes.

# %% [markdown]
# ## Setup
# One run of the toy Transformer that spikes by itself, with no injected fault:
# AdamW at a constant LR of 1e-2 with b2 = 0.99, a checkpoint every 10 steps.

# %%
import matplotlib.pyplot as plt
import numpy as np

from nanlab.analysis.signals import final_loss, find_spikes
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.faults import run_fault
from nanlab.guard import Guard
from nanlab.train import TrainConfig, Trainer, stop_early
from nanlab.viz import plot_compare, plot_loss

start_lab("12_incidents")
STEPS = 300
SPIKY = TrainConfig(steps=STEPS, lr=1e-2, beta2=0.99, schedule="constant",
                    checkpoint_every=10, record_every=0, progress=False)


def losses_of(record):
    """The standing loss of every step (after a rollback, the rerun replaces the old)."""
    by_step = {r["step"]: r["loss"] for r in record.steps}
    return np.array([by_step[s] for s in sorted(by_step)])


def first_spike(losses, bar=10.0, window=20, start=40):
    """The first step whose loss is `bar` times the median of the `window` before it."""
    for t in range(start, len(losses)):
        if losses[t] > bar * np.median(losses[t - window:t]):
            return t
    return None


def largest_jump(losses, window=20, start=40):
    """The largest ratio of a loss to the median of the `window` losses before it."""
    return max(losses[i] / np.median(losses[i - window:i]) for i in range(start, len(losses)))


def rise(losses, first=10):
    """The worst loss of a stretch against the median of its first `first` losses."""
    return float(np.max(losses) / np.median(losses[:first]))


trainer = Trainer(SPIKY)
base = losses_of(trainer.run())
t = first_spike(base)
if t is None:  # everything below starts from the spike
    raise RuntimeError(f"no 10x spike in {STEPS} steps on this machine: this lab needs one; "
                       "please report your CPU and torch version")
print(f"spike at step {t} (the step varies with the CPU): loss {base[t - 5]:.3f} five steps "
      f"before, {base[t]:.3f} at the spike, {base[t:t + 10].max():.2f} at its peak; final "
      f"loss {base[-1]:.3f}")

# %% tags=["nbval-check-output"]
print(f"a finite spike between steps 200 and {STEPS}:", 200 <= t < STEPS)
print("every loss finite:", bool(np.isfinite(base).all()))
print("peak more than 20x the loss five steps before:", base[t:t + 10].max() > 20 * base[t - 5])

# %% [markdown]
# No batch is special here (the data is a clean, generated counting task) and the LR
# never changes. One explanation, which this lab does not prove: Adam's second-moment
# average `v` follows the shrinking gradients of a nearly solved task, so a gradient
# larger than `v` expects makes the update `m / √v` far larger than usual.
#
# ## 1. PaLM 540B: the same batches from an earlier state
#
# Chowdhery et al. 2022, *PaLM*, section 5.1 "Training Instability": the 540B model's
# loss spiked **roughly 20 times**, despite gradient clipping. The fix: restart from a
# checkpoint **roughly 100 steps before** the spike and skip **roughly 200-500 data
# batches**. The test: the batches around a spike, fed to an earlier checkpoint, did
# not spike. Their conclusion: a spike needs specific batches *and* a specific model
# state.
#
# Your turn, on the toy. The near state: the last checkpoint at least 15 steps before
# the spike (checkpoints come every 10 steps). The window: its batches up to 15 past the
# spike. Feed the window to the near state, then to the state 100 steps earlier still.
#
# **Exercise · predict.** A third replay feeds the near state batches it never saw.
# Return a dict mapping each of the `STATEMENTS` to `True` or `False`; a replay's
# rise is its worst loss over the median of its first 10.

# %%
STATEMENTS = [
    "near state, the window: the spike comes back (rise above 10x)",
    "near state, the window: every loss stays finite",
    "state 100 steps earlier, the same window: a spike (rise above 10x)",
    "near state, batches it never saw: a spike (rise above 10x)",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [True, True, False, True], strict=True))
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the replays run: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("predict_replay", my_predictions)

# %%
near_state = trainer.checkpoints.nearest(t - 15)  # the latest checkpoint at or before
far_state = trainer.checkpoints.nearest(near_state - 100)
WINDOW = list(range(near_state, min(t + 15, STEPS)))
print(f"spike at step {t}; near state: step {near_state} ({t - near_state} steps before); "
      f"far state: step {far_state}; window: batches {WINDOW[0]}-{WINDOW[-1]}")


def replay(start, batches):
    """Load the checkpoint of step `start`, then train on `batches`; their losses."""
    trainer.restore(start)
    return np.array([trainer.train_step(batch_index=b, record_layers=False).loss_value
                     for b in batches])


near = replay(near_state, WINDOW)
far = replay(far_state, WINDOW)
other = replay(near_state, range(1000, 1000 + len(WINDOW)))  # batches it never saw
for name, x in (("near state, window", near), ("far state, same window", far),
                ("near state, other batches", other)):
    print(f"{name:27} worst {x.max():7.3f}   rise x{rise(x):.1f}")

# %% tags=["nbval-check-output"]
print("the near state replays the run bit for bit:",
      np.array_equal(near, base[near_state:near_state + len(WINDOW)]))
print("near state, window: rise above 10x:", rise(near) > 10)
print("far state, same window: rise below 2x:", rise(far) < 2)
print("near state, other batches: rise above 10x:", rise(other) > 10)

# %% [markdown]
# Your prediction, graded against the three replays:

# %% tags=["nbval-check-output"]
actual = dict(zip(STATEMENTS, [rise(near) > 10, bool(np.isfinite(near).all()),
                               rise(far) > 10, rise(other) > 10], strict=True))
check("predict_replay", my_predictions, actual, locked=True, hints=[
    "PaLM's test separates two suspects, the batches and the model state: the same batches "
    "from two states, and other batches from the same state, say which one a spike needs.",
    "The toy's data is a clean, generated counting task, and its run is fp32: ask whether a "
    "loss of a few nats can overflow, and whether the spike needs special batches or only a "
    "fragile state.",
    "After committing, the check cell reads each statement from the replays: each one's "
    "`rise` (the helper of the setup cell) and numpy's `isfinite` on the near replay's losses.",
])

# %% [markdown]
# The picture, losses over the same batches:

# %%
fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
ax.semilogy(WINDOW, near, "o-", ms=3, label=f"state of step {near_state}")
ax.semilogy(WINDOW, far, "s-", ms=3, label=f"state of step {far_state} (100 earlier)")
ax.axvline(t, color="grey", ls=":", label=f"spike in the run (step {t})")
ax.set(xlabel="batch index", ylabel="loss (log)", title="The same batches, two states")
ax.legend();

# %% [markdown]
# Half of PaLM's finding holds on the toy: the earlier state takes the same batches
# without a spike. The other half does not: the near state spikes on batches it never
# saw. Here the state alone is enough; PaLM's spikes also needed the data.
#
# ## 2. PaLM's recipe: roll back, skip the batches
#
# `Guard("recover", spike="recover")` does it in the run: a one-sided z-score on the
# loss flags the spike, the trainer goes back to the last checkpoint at or before it,
# and batches `b - 1 .. b + 2` are never trained on. If it fails again before the run
# is two steps past that failure, the guard goes one checkpoint further back and cuts
# the LR tenfold, a blunter version of OPT's remedy (section 3: OPT lowered its LR by
# hand, by 10 % at first). PaLM skipped hundreds of batches; on the toy, a few.

# %%
guard = Guard("recover", spike="recover")
guarded = Trainer(SPIKY)
guard.attach(guarded)
recovered = losses_of(guarded.run())
events = [e for e in guarded.record.events if e["kind"] in ("rollback", "lr_cut")]
for e in events:
    detail = {k: e[k] for k in ("to_step", "repeat", "lr_scale") if k in e}
    print(f"step {e['step']}: {e['kind']:8} {detail}")
print(f"worst loss after step {t}: {recovered[t:].max():.3f}  (unguarded: {base[t:].max():.2f})")

# %% tags=["nbval-check-output"]
rollbacks = [e for e in events if e["kind"] == "rollback"]
print("first rollback skipped data and kept the LR:", not rollbacks[0]["repeat"])
print("the guard acted no later than the unguarded run's spike step:", rollbacks[0]["step"] <= t)
print("more than one rollback (it came back on other batches):", len(rollbacks) > 1)
print("then an LR cut:", any(e["kind"] == "lr_cut" for e in events))
print("all", STEPS, "steps done, every loss finite:",
      len(recovered) == STEPS and bool(np.isfinite(recovered).all()))
print("worst loss after the spike step below 0.1:", recovered[t:].max() < 0.1)

# %% [markdown]
# The detector fires no later than the unguarded run's spike step, often a few steps
# ahead, while the loss is still small. Skipping the data is not enough here: the spike
# comes back on other batches, as section 1 predicted, and only the LR cut ends it. On
# PaLM, skipping was enough: "the loss did not spike again at the same point".
#
# ### When the recipe hurts: a spike the model heals from
# PaLM's recipe suits a spike that data and state make together. Lab 03's `lr_jump` is
# another kind: the LR is 10x for the one step 100 of 200, and the loss heals alone.
# Should a guard **skip** the spiking update, or **recover**: roll back, skip the nearby
# batches, cut the LR if the failure returns?

# %%
jump = run_fault("lr_jump")  # left alone: the spike at step 101 heals by itself
jump_losses = jump.record.losses()
first = find_spikes(jump_losses)[0]
skip_guard = Guard("skip", spike="skip")
skipped = run_fault("lr_jump", callbacks=skip_guard.callbacks())
recover_guard = Guard("recover", spike="recover")
rolled_back = run_fault("lr_jump", callbacks=recover_guard.callbacks())
for name, g in (("skip", skip_guard), ("recover", recover_guard)):
    print(f"{name}: {g.summary()}")
    for e in g.events:
        if e["kind"] in ("guard", "rollback", "lr_cut"):
            detail = {k: e[k] for k in ("to_step", "factor") if k in e}
            print(f"   step {e['step']}: {e['kind']} {detail or ''} "
                  f"{e.get('reason', '')[:60]}")

# %%
def final_losses(seed):  # one seed is one sample: seeds 1 and 2, the same glitch
    """Final loss of lr_jump left alone, with a skip guard and with a recover guard."""
    ends = {"leave it alone": final_loss(run_fault("lr_jump", seed=seed).record.losses())}
    for mode in ("skip", "recover"):
        guard = Guard(mode, spike=mode)
        run = run_fault("lr_jump", seed=seed, callbacks=guard.callbacks())
        ends[mode] = final_loss(run.record.losses())
    return ends


by_seed = {0: {"leave it alone": final_loss(jump_losses),
               "skip": final_loss(skipped.record.losses()),
               "recover": final_loss(rolled_back.record.losses())}}
by_seed |= {seed: final_losses(seed) for seed in (1, 2)}
ends_by_mode = {name: np.array([ends[name] for ends in by_seed.values()])
                for name in by_seed[0]}
for name, values in ends_by_mode.items():
    print(f"{name:15} final loss: mean {values.mean():.3f}, min {values.min():.3f}, "
          f"max {values.max():.3f}  (seeds {', '.join(map(str, by_seed))})")

# %% tags=["nbval-check-output"]
alone = ends_by_mode["leave it alone"]
fired = [e["step"] for e in skip_guard.events if e["kind"] == "guard"]
print("seed 0: the detector fired once, at the first spike step:", fired == [first])
print("seed 0: recover's failure came back after the first rollback:",
      recover_guard.counts["rollback"] >= 2)
print("skip: final loss within 20 % of leaving it alone at every seed:",
      bool((abs(ends_by_mode["skip"] - alone) < 0.2 * alone).all()))
print("recover: final loss above leaving it alone at every seed:",
      bool((ends_by_mode["recover"] > alone).all()))

# %%
fig = plot_compare({"leave it alone": jump.record, "Guard: skip the spike": skipped.record,
                    "Guard: recover (roll back)": rolled_back.record}, grad_norm=False)

# %%
fig = plot_loss(rolled_back.record,  # grey dashed: rolled back; shaded: where it went back to
                title="lr_jump with Guard('recover', spike='recover')")

# %% [markdown]
# Why did neither beat leaving it alone?
#
# - **Skip is one step late**: the spike at step 101 comes from update 100 (Lab 03,
#   section 1a); dropping update 101 throws a good one away.
# - **Rollback replays the glitch**: the LR is a function of the step, so the replayed
#   step 100 spikes again (skipping batches cannot help). The guard goes back further
#   and cuts the LR; the run then learns slowly.
#
# A spike the model heals from alone is best **left alone**: alert, find its cause (here
# the scheduler), act only if the loss stays up or spikes repeat. Rollback and skipped
# batches are for spikes that data and state make together (sections 1 and 2), and for
# NaN.

# %% [markdown]
# ## 3. OPT-175B: an earlier checkpoint, a lower LR, tighter clipping
#
# Zhang et al. 2022, *OPT*, section 2.5 "Training Processes": "When the loss diverged,
# we found that lowering the learning rate and restarting from an earlier checkpoint
# allowed for the job to recover and continue training." Gradient norms were clipped at
# **1.0**, "except for some mid-flight changes that reduce this threshold down from 1.0
# to 0.3" (section 2.2); restart points were chosen where the dynamic loss scale was
# still "healthy" (**≥ 1.0**). Hardware alone caused at least **35 manual restarts**
# and **over 100 hosts** cycled in 2 months. The day-by-day account is the metaseq
# logbook (`projects/OPT/chronicles`); its `56_percent_update.md` gives the LR cuts:
# 10 % on run 12.43, when grad and activation norms drifted, then down to 2/3 of
# GPT-3's LR on run 12.45.2.
#
# The toy analogue: go back to section 1's far state (100 steps before the window, a
# little further than PaLM went) and continue over the same batches with one change,
# as OPT changed things mid-flight.

# %%
def continue_from(start, lr_scale=1.0, grad_clip=0.0):
    """From checkpoint `start`, train batches start..STEPS-1 with a mid-flight change."""
    trainer.restore(start)
    trainer.config = SPIKY.replace(grad_clip=grad_clip)
    trainer.set_lr_scale(lr_scale)
    out = [trainer.train_step(batch_index=b, record_layers=False).loss_value
           for b in range(start, STEPS)]
    trainer.config = SPIKY
    return np.array(out)


restart = far_state
CHANGES = {"LR x 0.5": {"lr_scale": 0.5}, "clip at 1.0": {"grad_clip": 1.0},
           "clip at 0.3": {"grad_clip": 0.3}}
after = {"no change": base[restart:]}  # the run itself (section 1: replays are exact)
after |= {name: continue_from(restart, **kw) for name, kw in CHANGES.items()}
for name, x in after.items():
    print(f"{name:12} rise x{rise(x):6.1f}   mean of the last 10: {x[-10:].mean():.4f}")

# %% tags=["nbval-check-output"]
print("no change: the spike (rise above 5x):", rise(after["no change"]) > 5)
for name in CHANGES:
    print(f"{name}: no spike (rise below 5x):", rise(after[name]) < 5)

# %% [markdown]
# Each of OPT's levers works on the toy. Clipping caps the gradient that enters Adam's
# averages; a lower LR scales every update down. Neither says *why* the state was
# fragile, and each costs progress (OPT's Figure 1 plots its LR, changed by hand).
#
# ## 4. BLOOM: fp16, bf16 and the embedding LayerNorm
#
# BigScience's 104B English trials ran in fp16 (`train/tr8-104B-wide/chronicles.md`,
# `train/tr8b-104B/chronicles.md`) and "failed to cross the 24B-tokens barrier"; the
# 176B run crossed it "w/o a single instability issue" (bigscience-workshop/bigscience,
# `train/tr11-176B-ml/chronicles.md`). That page lists five candidate reasons, without
# ablations: very clean data, **bf16**, fp32 gradient accumulation, a smaller init, and
# the embedding LayerNorm ("but it was also used in 104B-en"). The BLOOM paper (Le Scao
# et al. 2022, arXiv 2211.05100, "Embedding LayerNorm") tried a LayerNorm right after
# the embedding in the 104B trials (as bitsandbytes' StableEmbedding does), kept it,
# and notes: "It is possible that bfloat16 alleviates the need for the embedding
# LayerNorm".
#
# Toy part one: the precision. LR 0.2 (40 times the toy's default) in fp16 and bf16
# autocast, 60 steps; a run stops after three non-finite steps in a row (its
# GradScaler skips each of them).

# %%
def run_until_nan(config):
    trainer = Trainer(config)
    trainer.add_callback("on_step_end", stop_early(nonfinite_streak=3))
    return losses_of(trainer.run())


HIGH = TrainConfig(steps=60, lr=0.2, checkpoint_every=0, record_every=0, progress=False)
by_precision = {p: run_until_nan(HIGH.replace(precision=p)) for p in ("fp16", "bf16")}
for p, x in by_precision.items():
    bad = np.flatnonzero(~np.isfinite(x))
    print(f"{p}: {len(x)} steps, first non-finite step {bad[0] if len(bad) else None}")

# %% tags=["nbval-check-output"]
fp16, bf16 = by_precision["fp16"], by_precision["bf16"]
print("fp16: a non-finite loss within 60 steps:", not np.isfinite(fp16).all())
print("bf16: all 60 steps finite:", len(bf16) == 60 and bool(np.isfinite(bf16).all()))

# %% [markdown]
# The same updates, different ranges: an attention score passes fp16's 65504 and
# becomes inf (Lab 04 follows it op by op); bf16 has fp32's range. Part two: the
# embedding LayerNorm (`model.embed_norm`) on the spiky fp32 run.

# %%
with_ln = losses_of(Trainer(SPIKY.replace(model={"embed_norm": True})).run())
print(f"largest jump (a loss over the median of the 20 before it): "
      f"x{largest_jump(with_ln):.1f} with the embedding LayerNorm, x{largest_jump(base):.0f} "
      f"without; worst loss from step 200 on {with_ln[200:].max():.3f} "
      f"(without: {base[200:].max():.2f})")

# %% tags=["nbval-check-output"]
print("with the embedding LayerNorm: no 20x jump in", STEPS, "steps:",
      largest_jump(with_ln) < 20)

# %% [markdown]
# The embedding LayerNorm shrinks the spike to a bump far below the unguarded one (its
# size varies with the CPU, as the spike's step does). One run, one seed: it is a lead, as the
# chronicles' list is, not a proof.
#
# ## 5. OLMo 2: eight changes for stability
#
# Team OLMo 2024, *2 OLMo 2 Furious* (arXiv 2501.00656), section 3 "Pretraining
# stability". Its earlier model, OLMo-0424, had frequent loss spikes and a slowly
# growing gradient norm. The changes, each with its section; the **spike score** is the
# percentage of values at least 7 standard deviations away from the rolling average of
# the last 1,000:
#
# | change | section | measured in the paper |
# |---|---|---|
# | drop repeated n-grams (32+ repeats of a 1-13 token span), mask them in the loss | 3.1 | fewer gradient spikes, not none |
# | init every parameter from N(0, 0.02) | 3.2 | grad-norm spike score 0.40 → 0.03 |
# | RMSNorm instead of non-parametric LayerNorm | 3.3.1 | no difference |
# | norm on each sub-layer's output (reordered) + QK-norm | 3.3.2 | neither alone; together 0.108 → 0.069 |
# | z-loss | 3.3.3 | keeps output logits from growing |
# | AdamW eps 1e-5 → 1e-8 | 3.4.1 | grad norm settles sooner, stays lower |
# | no weight decay on embeddings | 3.4.2 | spike score 0.16 → 0.092 |
#
# QK-norm bounds the attention logits ([Lab 06, section 5](06_norms_softmax.ipynb#5.-Three-fixes,-measured:-stable-softmax,-QK-LayerNorm,-z-loss)); Lab 11
# sweeps it, z-loss, warmup and b2 over seven LRs. Here, QK-norm on the spiky run:

# %%
with_qk = losses_of(Trainer(SPIKY.replace(model={"qk_norm": True})).run())
t_qk = first_spike(with_qk)
print(f"QK-norm: first spike {t_qk}, worst loss from step 200 on {with_qk[200:].max():.3f}")

# %% tags=["nbval-check-output"]
print("with QK-norm: no 10x spike in", STEPS, "steps:", t_qk is None)

# %% [markdown]
# **Exercise · the spike score.** Write OLMo 2's measure: the percentage of the values
# that lie more than `sigma` standard deviations from the mean of the `window` values
# before them. Only values with a full window are judged.

# %%
def spike_score(values, window=1000, sigma=7.0):
    """OLMo 2's spike score (section 3.2), in percent of the judged values."""
    ### BEGIN SOLUTION
    values = np.asarray(values, dtype=float)
    flagged = 0
    for i in range(window, len(values)):
        past = values[i - window:i]
        flagged += abs(values[i] - past.mean()) > sigma * past.std()
    judged = len(values) - window
    return 100.0 * flagged / judged if judged > 0 else 0.0
    ### END SOLUTION


# %% tags=["nbval-check-output"]
SCORE_CASES = {  # (values, window, sigma) -> score
    "a 10 among 100 ones, window 20, sigma 7": (([1.0] * 50 + [10.0] + [1.0] * 49, 20, 7.0),
                                                 1.25),
    "1 and 2 alternating, window 20, sigma 7": (([1.0, 2.0] * 50, 20, 7.0), 0.0),
    "a 5 and a 9 among 70 ones, window 10, sigma 3": (
        ([1.0] * 30 + [5.0] + [1.0] * 29 + [9.0] + [1.0] * 9, 10, 3.0), 100 * 2 / 60),
}
check("spike_score", spike_score, [want for _, want in SCORE_CASES.values()],
      cases={case: args for case, (args, _) in SCORE_CASES.items()},
      hints=["A spike is judged against the recent past only: the mean and the spread of "
             "the window of values just before it, not of the whole series.",
             "Loop over the positions from window on; the past is the slice of the window "
             "values before each one, and numpy gives its mean and standard deviation; "
             "divide the count by the number of judged values (the length minus the "
             "window), times 100.",
             "np.asarray turns the values into an array, so a slice has .mean() and .std(); "
             "a comparison (True counts as 1) adds to the count of flagged values."],
      solution="""\
values = np.asarray(values, dtype=float)
flagged = 0
for i in range(window, len(values)):
    past = values[i - window:i]
    flagged += abs(values[i] - past.mean()) > sigma * past.std()
judged = len(values) - window
return 100.0 * flagged / judged if judged > 0 else 0.0""")

# %% [markdown]
# With it, compare the runs of this lab (a window of 50 suits 300 steps):
# `spike_score(base, 50)` against `spike_score(with_qk, 50)`.
#
# ## 6. Side by side
#
# | incident | the paper | the toy |
# |---|---|---|
# | PaLM 540B | ~20 spikes; same batches from an earlier checkpoint: no spike | earlier state: no spike; near state: spikes on any batches |
# | PaLM's recipe | back ~100 steps, skip ~200-500 batches | skip alone: it came back; then the LR cut |
# | OPT-175B | earlier checkpoint + lower LR; clip 1.0 → 0.3 | from the far state, LR × 0.5, clip 1.0 or clip 0.3: no spike |
# | BLOOM | 104B fp16 trials failed; 176B bf16 did not | fp16 inf where bf16 is finite; embedding LN shrank the spike to a bump |
# | OLMo 2 | eight changes; QK-norm + reordered norm lower the spike score | QK-norm removed the spike |
#
# What the toy cannot show: a run of months, data that really varies (PaLM's half of
# the finding), hardware failures (OPT's restarts), or how often (one seed).

# %% [markdown]
# ## 7. On call: two new incidents
#
# Two other runs spiked, and an alarm halted each at its first spike. How they were
# set up is hidden (`incident_runs`): on call, nobody tells you the cause. You have
# their checkpoints, so you run section 1's test on each: the near state replays the
# window, the state 100 steps earlier replays the same window, the near state replays
# batches it never saw. Each number is a replay's rise.

# %%
from nanlab.course.questions.lab12 import REMEDIES, incident_runs


def replay_on(run, start, batches):
    """Section 1's replay on another run: load its checkpoint `start`, train `batches`."""
    run.restore(start)
    return np.array([run.train_step(batch_index=b, record_layers=False).loss_value
                     for b in batches])


incidents = {}
for run_name, run in incident_runs().items():
    run_losses = losses_of(run.record)
    spike_at = first_spike(run_losses, bar=5.0)
    near_at = run.checkpoints.nearest(spike_at - 15)
    far_at = run.checkpoints.nearest(near_at - 100)
    window = list(range(near_at, spike_at + 15))
    incidents[run_name] = {
        "near state, the window": rise(replay_on(run, near_at, window)),
        "earlier state, the window": rise(replay_on(run, far_at, window)),
        "near state, other batches": rise(replay_on(run, near_at, range(1000, 1000 + len(window)))),
        "every loss finite": bool(np.isfinite(run_losses).all()),
    }
    print(f"{run_name} (fp32): spike at step {spike_at}; near state {near_at}, earlier state "
          f"{far_at}")
    for row, value in incidents[run_name].items():
        print(f"   {row:27} {value if isinstance(value, bool) else f'rise x{value:.1f}'}")
print("\nREMEDIES:")
for remedy, meaning in REMEDIES.items():
    print(f"   {remedy:21} {meaning}")

# %% [markdown]
# **Exercise · the first remedy.** For each run, which of the `REMEDIES` would you try
# first? Return `{"run A": name, "run B": name}`. Decide from the replays, not from
# what worked on section 1's run.

# %%
def my_remedies():
    """{run: the name of the remedy you would try first}."""
    ### BEGIN SOLUTION
    # run A: from its near state, batches it never saw spike too, so the state alone
    # fails: smaller updates (OPT). run B: only the window spikes, and only from the
    # near state: skip those batches (PaLM). Both are fp32 and finite: no range problem.
    return {"run A": "restart_lower_lr", "run B": "restart_skip_batches"}
    ### END SOLUTION


# %% tags=["nbval-check-output"]
from nanlab.course.questions.lab12 import judge_remedies

check("first_remedy", my_remedies, test=lambda got: judge_remedies(got, incidents),
      hints=["Each replay changes one suspect and keeps the other: which one keeps the "
             "state and changes the batches, and what did it do in each run?",
             "A spike that comes on any batches says the state takes steps too large for "
             "it; a spike that needs particular batches says those batches. Sections 2 and "
             "3 tried a remedy for each case.",
             "Two remedies change the model or the number format: one means training "
             "again from the start, the other cures a range problem. Ask whether either "
             "run showed a reason for them."],
      solution="""\
# run A: from its near state, batches it never saw spike too, so the state alone
# fails: smaller updates (OPT). run B: only the window spikes, and only from the
# near state: skip those batches (PaLM). Both are fp32 and finite: no range problem.
return {"run A": "restart_lower_lr", "run B": "restart_skip_batches"}""")

# %% [markdown]
# ## 8. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("12-palm-replay")

# %%
practice("12-skip-came-back")

# %% [markdown]
# Why a guard's recipe can hurt: the next question replays section 2's one-step LR
# glitch.

# %%
practice("12-leave-it-alone")

# %% [markdown]
# ## Summary
# - A spike from one state and not from an earlier one, on the same batches, points at
#   the state; PaLM also needed the data, the toy did not.
# - Rolling back and skipping the data cures a data-and-state spike; when it comes
#   back, lower the LR or tighten the clipping (OPT). A spike the model heals from
#   alone (a one-step LR glitch) is better left alone: skipping matched doing nothing,
#   rolling back did worse, on three seeds.
# - Range (bf16) and QK-norm each removed a toy failure, an embedding LayerNorm shrank
#   one; the big runs changed several things at once, without ablations.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
