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
# **Source notebook (solution version).** This pair, `solutions/05_init_depth.py` and
# `solutions/05_init_depth.ipynb`, is the single source of `labs/05_init_depth.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/05_init_depth.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 05 · Initialisation and depth: gradient explosion (梯度爆炸), and two myths
#
# Gradient explosion is a real cause of NaN, visible in the record long before the
# NaN; some usual suspects make none. CPU is enough; about 45 minutes.

# %% [markdown]
# ## Setup
# Every run is Lab 00's toy Transformer on the counting task, seed 0. The clean
# baseline (2 pre-LN blocks, AdamW at 5e-3) runs 80 steps of a 200-step schedule
# (`decay_steps=200`), shared by the faulty runs so same-step losses compare.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from nanlab.analysis.signals import final_loss, is_stalled
from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import locate
from nanlab.faults import FIXES, run_fault
from nanlab.toy.model import GPT
from nanlab.train import TrainConfig, Trainer, global_grad_norm, lm_loss, to_device
from nanlab.viz import plot_compare, plot_grad_heatmap, plot_loss

start_lab("05_init_depth")
clean = run_fault(None, steps=80, decay_steps=200)
clean_losses = clean.record.losses()
device = clean.trainer.device
print(f"clean run on {device}: loss {clean_losses[0]:.2f} -> {clean_losses[79]:.3f} "
      "at step 79")


# %% [markdown]
# ## 1. A deep stack without LayerNorm: 梯度爆炸 (gradient explosion)
#
# `deep_explosion` changes only this: 6 blocks instead of 2, no LayerNorm
# (层归一化), AdamW at a constant LR of 0.015 (3x the clean run's) with β2 = 0.99,
# no clipping. It records layer statistics every 5 steps, a checkpoint every 25; a
# callback notes what is finite after each step and stops at the first NaN loss.

# %%
WATCH = {}  # step -> notes (a replay of a step rewrites its own)


def watch(trainer, info):
    """on_step_end: are the gradients, Adam's exp_avg_sq and the weights finite?"""
    params = [p for p in trainer.model.parameters() if p.grad is not None]
    v = [trainer.optimizer.state[p]["exp_avg_sq"] for p in params]
    WATCH[info.step] = {
        "step": info.step, "grads_finite": all(bool(p.grad.isfinite().all()) for p in params),
        "v_inf": sum(int(x.isinf().sum()) for x in v) / sum(x.numel() for x in v),
        "weights_finite": all(bool(p.isfinite().all()) for p in params)}
    if math.isnan(info.loss_value):
        trainer.request_stop("the loss is NaN")


deep = run_fault("deep_explosion", steps=500, record_every=5, checkpoint_every=25,
                 callbacks=[("on_step_end", watch)])
deep_losses = deep.record.losses()
first_bad = deep.record.first_nonfinite_step
if first_bad is None:
    raise RuntimeError(f"deep_explosion stayed finite for {len(deep_losses)} steps on this "
                       "machine; rerun this cell with more steps (steps=1000)")
nan_steps = np.flatnonzero(np.isnan(deep_losses))
first_nan = int(nan_steps[0]) if len(nan_steps) else None
deep_config = deep.trainer.config
fig = plot_loss(deep.record, title=f"deep_explosion: 6 blocks, no LayerNorm, AdamW "
                f"{deep_config.lr:g}, β2 {deep_config.beta2:g}")

# %% [markdown]
# Does the loss jump to NaN or climb? Print the record around the first non-finite
# step and the first NaN loss. (The steps vary with the CPU and thread count.)

# %%
for s in (0, 20, 40, 60, first_bad - 1, first_bad, first_nan):
    if s is None or s >= len(deep.record.steps):
        continue  # no NaN loss in this run
    r = deep.record.steps[s]
    print(f"step {r['step']:>3}  loss {r['loss']:10.3g}  grad_norm {r['grad_norm']:10.3g}"
          f"  finite {r['finite']}")
if first_nan is not None:
    print(f"the loss turned NaN {first_nan - first_bad} steps after the first inf")

# %% tags=["nbval-check-output"]
row = deep.record.steps[first_bad]
print("first non-finite step within 50-250:", 50 <= first_bad <= 250)
print("at that step the loss is still finite:", math.isfinite(row["loss"]))
print("and the global grad norm is inf (not NaN):", math.isinf(row["grad_norm"]))
print("the loss itself turns NaN, at a later step:",
      first_nan is not None and first_nan > first_bad)

# %% [markdown]
# The first non-finite number is in the grad norm, not the loss: a loss monitor
# fires late, a grad-norm monitor long before.
#
# ### 1a. The per-layer grad-norm history
# Each layer's recorded grad norm (`run.record.layers`): input to output top to
# bottom, steps left to right, log colour scale.

# %%
fig = plot_grad_heatmap(deep.record)

# %%
names, steps, grid = deep.record.layer_matrix("grad_norm")
before = steps < first_bad
last = steps[before][-1]  # the last recorded step before the first inf
for name in ("wte", "blocks.0.attn.c_attn", "blocks.5.mlp.c_proj", "lm_head"):
    values = grid[names.index(name)]
    print(f"{name:22}" + "".join(f"{v:9.1e}" for v in values[before][::3]))
print("steps:                " + "".join(f"{s:9d}" for s in steps[before][::3]))
climb = deep.record.column("grad_norm")
first_big = int(np.argmax(climb > 100))  # first step with a global grad norm > 100
print(f"global grad norm first above 100 at step {first_big}; first inf at {first_bad}")
snames, _, stds = deep.record.layer_matrix("param_std")
w = stds[snames.index("blocks.0.attn.c_attn"), before]
print(f"blocks.0.attn.c_attn parameter std: {w[0]:.3f} at step 0, {w[-1]:.3f} at {last}")
decades = np.log10(np.nanmax(grid[:, before], axis=1) / grid[:, 0])  # each layer's rise
print(f"every layer's grad norm rose by at least {decades.min():.0f} powers of ten")

# %% tags=["nbval-check-output"]
print("every layer's grad norm rose by more than 6 powers of ten before the first inf:",
      bool((decades > 6).all()))
print("the global grad norm first passed 100 more than 20 steps before the first inf:",
      first_bad - first_big > 20)


# %% [markdown]
# Every row brightens together, by many powers of ten before the inf: tenfold
# every few steps for tens of steps, not one jump (C1).
#
# Why? An Adam step per weight is bounded by
# $\mathrm{lr}\cdot\max(1, (1-\beta_1)/\sqrt{1-\beta_2})$ whatever its gradient
# (Kingma & Ba 2015, section 2.1; measured in Lab 03): the LR for β2 up to 0.99
# (this run's 0.99, the toy's 0.95), about 3.16 lr with PyTorch's default 0.999.
# A slower `v` trails gradients that keep growing, so each step stays near that
# bound; Wortsman et al. 2023 (section 4) link a large β2 to Adam-driven loss
# spikes. So the weights grow steadily (the std above). With no LayerNorm to rescale the residual
# stream, a dozen weight matrices up and again down turn that into activations and
# gradients growing by powers of ten.
#
# **Exercise 1 · per-layer grad norms.** Write `layer_grad_norms(model)`, for use
# after `backward()`: `{module name: L2 norm of the gradients of that module's own
# parameters}` for every module with parameter gradients (use
# `model.named_modules()`, `module.parameters(recurse=False)`; the L2 norm of
# several tensors is the square root of the sum of all their squares). The check
# compares with the record at step 0.

# %%
def layer_grad_norms(model):
    """{module name: L2 norm of its own parameters' gradients}, after backward()."""
    ### BEGIN SOLUTION
    norms = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            norms[name] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    return norms
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def fresh_model(config):
    """The model a Trainer builds for this config: same seed, same init."""
    torch.manual_seed(config.seed)
    return GPT(config.model).to(device)


def step0_grads(run):
    """A fresh model of the run's config after the forward and backward of step 0."""
    model = fresh_model(run.trainer.config)
    lm_loss(model, to_device(run.trainer.batches(0), device)).backward()
    return model


def judge_grad_norms(got):
    want = {r["layer"]: r["grad_norm"] for r in deep.record.layers
            if r["step"] == 0 and r["grad_norm"] is not None}
    if set(got) != set(want):
        return (f"missing {sorted(set(want) - set(got))[:3]}, "
                f"unexpected {sorted(set(got) - set(want))[:3]}")
    for name, value in want.items():
        if not math.isclose(float(got[name]), value, rel_tol=1e-4):
            return f"{name}: got {float(got[name]):.6g}, the record says {value:.6g}"
    return None


check("layer_grad_norms", lambda: layer_grad_norms(step0_grads(deep)),
      test=judge_grad_norms, hints=[
          "One number per module that owns parameters: the norm of its own gradients, not of "
          "its children's.",
          "model.named_modules walks every module with its name; a module's parameters with "
          "recurse False are only its own; skip gradients that are None, and modules left with"
          " none.",
          "For each module, sum every own gradient's squares in float64 (double), across its "
          "tensors, then take one math.sqrt: the norm of all its gradients as one vector.",
      ], solution="""\
norms = {}
for name, module in model.named_modules():
    grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
    if grads:
        norms[name] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
return norms""")

# %% [markdown]
# ### 1b. Where was the first inf made? `locate`
# `locate` (Lab 02) replays the first non-finite step exactly from the checkpoint
# before it, hooking every module, gradient and op, and names the first non-finite
# tensor.

# %%
loc = locate(deep.trainer)
print(loc.report(max_events=3))

# %% tags=["nbval-check-output"]
print("located the first non-finite step:", loc.step == first_bad)
print("first non-finite value in pass:", loc.pass_name)
print("it is the global grad norm, every single gradient still finite:",
      loc.tensor == "grad_norm")
print("inf came before NaN:", loc.inf_before_nan)

# %% [markdown]
# Every gradient was finite, but their *squares*, summed inside the norm, passed
# fp32's maximum of 3.4e38. AdamW's second moment `exp_avg_sq` (`v`, a running mean
# of the squared gradient) squares each entry on its own, so it overflows once a
# single entry's square does: often at the same step, never earlier (the callback's
# notes).

# %%
notes = [WATCH[s] for s in sorted(WATCH)]
v_rows = [r for r in notes if r["v_inf"] > 0]
first_v_inf = v_rows[0]["step"] if v_rows else None
frozen = [r for r in v_rows if r["weights_finite"]]  # inf in v, every weight finite
first_w_bad = next((r["step"] for r in notes if not r["weights_finite"]), None)
first_g_bad = next((r["step"] for r in notes if not r["grads_finite"]), None)
print(f"grad norm first inf at step {first_bad}; exp_avg_sq first inf after step "
      f"{first_v_inf}")
if frozen:
    print(f"exp_avg_sq held inf with every weight finite after {len(frozen)} steps "
          f"({frozen[0]['step']}-{frozen[-1]['step']}; up to "
          f"{max(r['v_inf'] for r in frozen):.0%} of its entries)")
print(f"first non-finite gradient entry at step {first_g_bad}, first non-finite weight "
      f"after step {first_w_bad}, first NaN loss at step {first_nan}")
saved = [c for c in deep.trainer.checkpoints.steps() if c - 1 in {r["step"] for r in frozen}]
print("checkpoints saved then (finite weights, inf in v):", saved)

# %% tags=["nbval-check-output"]
print("exp_avg_sq held an inf while every weight was finite (frozen entries):", len(frozen) > 0)
print("every update from finite gradients left every weight finite, inf in v or not:",
      all(r["weights_finite"] for r in notes if r["grads_finite"]))
print("after the NaN loss, the weights are not finite:", first_nan is not None
      and not all(bool(torch.isfinite(p).all()) for p in deep.trainer.model.parameters()))

# %% [markdown]
# An inf in `v` makes no NaN: the update `m / (√v + eps)` is `m / inf = 0`, and as
# `β2 · inf` is inf, it stays 0. Those entries are **silently frozen** while the rest
# move on, with losses in the billions (a checkpoint saved then would look healthy). The
# order: **grad norms climb by decades → the norm overflows to inf, `v` with
# it or soon after → training carries on, broken → a gradient, the weights, then the
# loss go NaN.** Inf first, as usual (claim B1).
#
# Log per-layer grad norms (claim M3): the climb showed tens of steps before anything
# was non-finite (1a's printout). Clipping cannot catch it this late:
# `clip_grad_norm_` scales by `max_norm / total_norm`; an inf norm makes that 0.

# %% tags=["nbval-check-output"]
p = torch.nn.Parameter(torch.zeros(2))
p.grad = torch.tensor([3e19, 1.0])  # finite, but its square is not
norm = torch.nn.utils.clip_grad_norm_([p], max_norm=1.0)
print("total norm:", norm.item(), "  gradient after clipping:", p.grad.tolist())

# %% [markdown]
# The step's update is silently zero; the cause remains. Clipping from step 0 caps
# every gradient long before an overflow (with AdamW that does not shrink the
# update, Lab 03).
#
# ## 2. A bad init: NaN at step 0, and an activation recorder
# `bad_init` (初始化不当): the same 6 blocks, init std 1.0 instead of GPT-2's 0.02:

# %%
bad = run_fault("bad_init", steps=1)
print(bad.record.steps[0])
bad_loc = locate(bad.trainer)
print(bad_loc.report(max_events=4))

# %% tags=["nbval-check-output"]
print("loss at step 0 is NaN:", math.isnan(bad.record.steps[0]["loss"]))
print("first non-finite value in pass:", bad_loc.pass_name)
print("made in module type:", bad_loc.module_type)
print("inf came before NaN:", bad_loc.inf_before_nan)


# %% [markdown]
# The first forward pass overflows: a `q · k` score in the last block is inf, and
# the stable softmax computes `inf − inf = NaN`. With std 1.0 each 64-wide matmul
# scales by about `std · √64 = 8` (16 for the 256-wide MLP projection); nothing
# scales back.
#
# **Exercise 2 · an activation recorder (claim M8).** Write
# `block_absmax(model, batch)`: put a **forward hook** (前向钩子) on each block in
# `model.blocks`, run `model(batch.tokens, batch.features)` once under
# `torch.no_grad()`, and return each block's max `|output|`, in order, as a list
# of floats. PyTorch calls `hook(module, inputs, output)` after `module.forward`;
# `module.register_forward_hook(hook)` returns a handle. Remove the hooks
# afterwards (`handle.remove()`, best in `finally:`), or they run on every later
# forward pass.

# %%
def block_absmax(model, batch):
    """max |output| of each block in model.blocks on one forward pass, as floats."""
    ### BEGIN SOLUTION
    values, handles = [], []

    def hook(module, inputs, output):
        values.append(float(output.detach().abs().amax()))

    for block in model.blocks:
        handles.append(block.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(batch.tokens, batch.features)
    finally:
        for handle in handles:
            handle.remove()
    return values
    ### END SOLUTION


# %% tags=["nbval-check-output"]
def reference_absmax(model, batch):
    """The same numbers without hooks: the model's forward pass, written out."""
    with torch.no_grad():
        positions = torch.arange(batch.tokens.shape[1], device=device)
        x = model.wte(batch.tokens) + model.wpe(positions) + model.feat_proj(batch.features)
        values = []
        for block in model.blocks:
            x = block(x)
            values.append(float(x.abs().amax()))
    return values


def model_at(run, step):
    """The run's model loaded from its checkpoint at `step`."""
    model = fresh_model(run.trainer.config)
    model.load_state_dict(run.trainer.checkpoints.load(step)["model"])
    return model


ckpt = deep.trainer.checkpoints.nearest(first_bad)
CASES = {
    "clean, at init": (fresh_model(clean.trainer.config), 0),
    "bad_init, at init": (fresh_model(bad.trainer.config), 0),
    "deep_explosion, at init": (fresh_model(deep.trainer.config), 0),
    f"deep_explosion, step {ckpt}, batch {first_bad}": (model_at(deep, ckpt), first_bad),
}
CASES = {name: (model, to_device(clean.trainer.batches(i), device))
         for name, (model, i) in CASES.items()}


def judge_absmax(got):
    for name, (model, batch) in CASES.items():
        problem = check_lists(got[name], reference_absmax(model, batch))
        if problem:
            return f"case {name!r}: {problem}"
        if any(block._forward_hooks for block in model.blocks):
            return f"case {name!r}: hooks are still registered after the call; remove them"
    return None


def check_lists(mine, want):
    if len(mine) != len(want):
        return f"{len(mine)} values, expected one per block ({len(want)})"
    for i, (a, b) in enumerate(zip(mine, want, strict=True)):
        same = math.isclose(float(a), b, rel_tol=1e-6) or (math.isnan(a) and math.isnan(b))
        if not same:
            return f"block {i}: got {float(a):.6g}, expected {b:.6g}"
    return None


check("block_absmax", lambda: {name: block_absmax(model, batch)
                               for name, (model, batch) in CASES.items()},
      test=judge_absmax, hints=[
          "Watch each block's output while the model runs once, without changing the model: a "
          "forward hook sees it.",
          "register_forward_hook on each of model.blocks returns a handle; remove every handle"
          " afterwards, in a finally block, so the model is left as it was; no gradient is "
          "needed.",
          "The hook is a small inner function that appends the float of output.abs().amax() "
          "to a list the outer function returns; the blocks run in order, so the list is in "
          "order too.",
      ], solution="""\
values, handles = [], []

def hook(module, inputs, output):
    values.append(float(output.detach().abs().amax()))

for block in model.blocks:
    handles.append(block.register_forward_hook(hook))
try:
    with torch.no_grad():
        model(batch.tokens, batch.features)
finally:
    for handle in handles:
        handle.remove()
return values""")

# %% [markdown]
# Batch *i* is the data set's own, the same in every run (seed 0). Your recorder
# (or the reference) on each model:

# %%
try:
    recorder = block_absmax
    recorder(*CASES["clean, at init"])
except Exception as err:  # not done yet, or not working: draw the reference
    if not isinstance(err, NotImplementedError):
        print(f"your block_absmax raised {type(err).__name__}; drawing the reference")
    recorder = reference_absmax
fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
for name, (model, batch) in CASES.items():
    values = np.array(recorder(model, batch))
    blocks = np.arange(len(values))
    line, = ax.plot(blocks, np.where(np.isfinite(values), values, np.nan), "o-",
                    label=name)
    bad_blocks = blocks[~np.isfinite(values)]
    ax.plot(bad_blocks, np.full(len(bad_blocks), 1e30), "x", ms=10, color=line.get_color())
ax.axhline(3.4e38, color="k", ls=":", lw=1, label="fp32 max 3.4e38")
ax.set_yscale("log")
ax.set_xlabel("block")
ax.set_ylabel("max |block output| (log)")
ax.set_title("Per-block activation abs-max (x: NaN or inf)")
ax.legend(fontsize=7, loc="upper left");

# %% tags=["nbval-check-output"]
ref = {name: reference_absmax(model, batch) for name, (model, batch) in CASES.items()}
b = np.array(ref["bad_init, at init"])
d0 = np.array(ref["deep_explosion, at init"])
d1 = np.array(ref[f"deep_explosion, step {ckpt}, batch {first_bad}"])
finite_b = b[np.isfinite(b)]
print("bad_init: each finite block output more than 100x the one before:",
      bool((finite_b[1:] > 100 * finite_b[:-1]).all()))
print("bad_init: the last block's output is not finite:", not math.isfinite(b[-1]))
print("deep_explosion at init: every block below 1:", bool((d0 < 1).all()))
print("deep_explosion near the failure: last block more than 1000x its init value:",
      bool(d1[-1] > 1000 * d0[-1]))

# %% [markdown]
# An abs-max is one number per layer; the distribution shows more. Per layer (input
# on top): output values (left) and parameter gradients (right), |value| on a log
# axis, for `deep_explosion` at init and at its last checkpoint before the failure,
# same batch. Where do they part, and does the gap grow with depth?

# %%
from nanlab.viz import layer_values, plot_layer_histograms

bad_batch = CASES[f"deep_explosion, step {ckpt}, batch {first_bad}"][1]
fig = plot_layer_histograms(
    {"deep_explosion, at init": layer_values(fresh_model(deep.trainer.config), bad_batch,
                                             lm_loss),
     f"step {ckpt}": layer_values(model_at(deep, ckpt), bad_batch, lm_loss)}, max_layers=16)

# %% [markdown]
# Two explosions: `bad_init` explodes *along the depth* at step 0 until the last
# block overflows; `deep_explosion`, tame at init, explodes *over time*.
#
# That is claim M8's post-mortem. The trainer keeps a cheap `act_absmax` per leaf
# module every `record_every` steps (`run.record.layers`); for more, replay the bad
# batch from a checkpoint with hooks on, as the histograms above (`layer_values`)
# and `locate` (every module and op) do.
#
# ## 3. The cure, proven with the same seed
# The SOP's last step (init and eps) names two fixes: `modern_block` (LayerNorm,
# residual connections, GELU) and `sane_init` (GPT-2's normal(0, 0.02), zero
# biases, the same pre-LN residual blocks). With the init already 0.02 they should
# coincide:

# %% tags=["nbval-check-output"]
config = deep.trainer.config
print("modern_block and sane_init make the same change here:",
      FIXES["modern_block"].configure(config) == FIXES["sane_init"].configure(config))
print("what changes:", {k: (getattr(config.model, k),
                            getattr(FIXES["modern_block"].configure(config).model, k))
                        for k in ("use_norms", "residual", "activation")})

# %% [markdown]
# Same seed, data, LR, β2 and 6 blocks, LayerNorms back; 80 steps, long past the
# start of the fault's climb.

# %%
fixed = run_fault("deep_explosion", fixes=["modern_block"], steps=80)
fixed_losses = fixed.record.losses()
fig = plot_compare({"clean (2 blocks, LR 5e-3)": clean.record,
                    "deep_explosion": deep.record,
                    "deep_explosion + modern_block": fixed.record})

# %%
for s in (20, 50, 79):
    print(f"step {s}: clean {clean_losses[s]:.3f}   fixed {fixed_losses[s]:.3f}   "
          f"deep_explosion {deep_losses[s]:.3g}")
_, _, fixed_grid = fixed.record.layer_matrix("grad_norm")
print(f"largest per-layer grad norm: fault {np.nanmax(grid[:, before]):.3g} (before the "
      f"inf), fixed {np.nanmax(fixed_grid):.3g}")

# %% tags=["nbval-check-output"]
print("fixed: no non-finite step in 80 steps:", fixed.record.first_nonfinite_step is None)
print("fixed: every per-layer grad norm below 100:", bool(np.nanmax(fixed_grid) < 100))
print("fixed: loss at step 79 within the matrix's cure bound, 3x the clean run's + 0.25:",
      bool(fixed_losses[79] < 3 * clean_losses[79] + 0.25))
print("fixed: loss at step 79 below a thousandth of the fault's:",
      bool(fixed_losses[79] < 1e-3 * deep_losses[79]))

# %% [markdown]
# Behind the clean run, as it should be: 6 blocks at 3x the LR, held constant, is a
# different model on a hotter schedule (the fault × fix matrix calls a run cured within 3x + 0.25 of
# the clean loss). An honest proof reports both the cure and the gap.
#
# `sane_init` cures `bad_init` at the clean LR, so this same-step comparison is
# tight (30 steps):

# %%
sane = run_fault("bad_init", fixes=["sane_init"], steps=30, decay_steps=200)
sane_losses = sane.record.losses()
for s in (10, 20, 29):
    print(f"step {s}: clean {clean_losses[s]:.3f}   "
          f"bad_init + sane_init {sane_losses[s]:.3f}")

# %% tags=["nbval-check-output"]
print("bad_init + sane_init: no non-finite step:", sane.record.first_nonfinite_step is None)
print("loss at step 29 within 20 % of the clean run at step 29:",
      abs(sane_losses[29] - clean_losses[29]) < 0.2 * clean_losses[29])

# %% [markdown]
# ### How much does one step rewrite? The update-to-weight ratio
# The trainer records each layer's $\|\Delta W\| / \|W\|$ per step. CS231n's notes
# ("Neural Networks Part 3", "Ratio of weights:updates") call about 1e-3 a rough
# heuristic: lower, the LR might be too low; higher, likely too high. Where do the
# exploding run and its cure sit, and which rewrites more of each layer per step?

# %%
from nanlab.viz import plot_update_ratio

fig = plot_update_ratio({f"deep_explosion, LR {deep.trainer.base_lr:g}": deep.record,
                         f"+ modern_block, LR {fixed.trainer.base_lr:g}": fixed.record})
for name, r in (("deep_explosion", deep), ("+ modern_block", fixed)):
    _, at, ratio = r.record.layer_matrix("update_ratio")
    print(f"{name:15} median ratio over the first 30 steps: "
          f"{np.nanmedian(ratio[:, at < 30]):.2g}")

# %% [markdown]
# ## 4. Xavier, He or a small normal? (初始化方案)
# The toy model's three init schemes (`GPTConfig.init`):
#
# | scheme | std of a 64 → 64 weight | designed for |
# |---|---|---|
# | `normal`, std 0.02 (GPT-2) | 0.02 | Transformers with LayerNorm |
# | `xavier` (Glorot, normal) | √(2 / (fan_in + fan_out)) = 0.125 | tanh / sigmoid stacks |
# | `kaiming` (He, ReLU gain) | √(2 / fan_in) = 0.177 | plain ReLU stacks |
#
# Xavier and He keep a *plain* layer's output variance near its input's; a residual
# block *adds* to its input, so the derivation does not carry over. Measure each
# scheme's step-0 loss and grad norm, with and without LayerNorm:

# %%
STACKS = {"2 blocks, pre-LN": {},
          "6 blocks, no LayerNorm": {"n_layer": 6, "use_norms": False}}
INITS = ("normal", "xavier", "kaiming")


def at_step0(model_changes):
    """(loss, global grad norm) of the first step, for a model config change."""
    config = TrainConfig(progress=False).replace(model=model_changes)
    model = fresh_model(config)
    loss = lm_loss(model, to_device(clean.trainer.batches(0), device))
    loss.backward()
    return loss.item(), global_grad_norm(list(model.parameters())).item()


init_table = {(stack, init): at_step0({**changes, "init": init})
              for stack, changes in STACKS.items() for init in INITS}
for (stack, init), (loss, gnorm) in init_table.items():
    print(f"{stack:24} {init:8} loss at step 0 {loss:10.4g}   grad norm {gnorm:10.3g}")

# %% tags=["nbval-check-output"]
deep_loss = {init: init_table["6 blocks, no LayerNorm", init][0] for init in INITS}
deep_grad = {init: init_table["6 blocks, no LayerNorm", init][1] for init in INITS}
ln_loss = [init_table["2 blocks, pre-LN", init][0] for init in INITS]
print("no LayerNorm, He: loss at step 0 above 100:", deep_loss["kaiming"] > 100)
print("no LayerNorm, He: grad norm at step 0 above 1e4:", deep_grad["kaiming"] > 1e4)
print("no LayerNorm, normal(0.02): grad norm at step 0 below 0.1:",
      deep_grad["normal"] < 0.1)
print("with LayerNorm: every scheme's loss at step 0 below 5:", max(ln_loss) < 5)

# %% [markdown]
# Without LayerNorm the scheme decides usability. He's larger std compounds over 6
# blocks that add to the stream (a sane start is ln 32 ≈ 3.5); with 0.02 the blocks
# barely contribute, so the step-0 gradient is tiny. Does the scheme matter with
# LayerNorm? 40 steps each (normal *is* the clean run):

# %%
init_runs = {"normal": clean.record}
for init in ("xavier", "kaiming"):
    init_runs[init] = run_fault(None, steps=40, decay_steps=200, record_every=0,
                                checkpoint_every=0, model={"init": init}).record
for init, rec in init_runs.items():
    print(f"{init:8} loss at step 39 {rec.losses()[39]:.3f}   "
          f"first non-finite: {rec.first_nonfinite_step}")

# %% tags=["nbval-check-output"]
at39 = {init: rec.losses()[39] for init, rec in init_runs.items()}
print("with LayerNorm, no scheme made a non-finite value:",
      all(rec.first_nonfinite_step is None for rec in init_runs.values()))
print("with LayerNorm, every scheme below 2.5 at step 39:", max(at39.values()) < 2.5)

# %% [markdown]
# Differences of speed, not stability. **Init and normalisation go together.**
# "Use Xavier / He" suits plain stacks; Transformers use a small normal init
# *because* LayerNorm rescales each block's input, and GPT-2 shrinks the init of
# projections into the residual stream by 1/√(number of residual layers) so the
# stream does not grow with depth. Without norms no init is safe for long: 0.02
# exploded in section 1 at LR 0.015.
#
# ## 5. Two myths: a dead ReLU and a sigmoid chain (激活函数)
# Two real problems of "why did my network not train", often listed as causes of
# NaN. Are they?
#
# ### 5a. Dead ReLU (`dead_relu`)
# A bias of −10 on each MLP's first layer makes every ReLU input negative and every
# output 0; no residual connection goes around.

# %%
dead = run_fault("dead_relu", steps=30, decay_steps=200)
dead_losses = dead.record.losses()
print(f"dead_relu: loss {dead_losses[0]:.3f} -> {dead_losses[29]:.3f}   "
      f"(clean at step 29: {clean_losses[29]:.3f})")
fig = plot_grad_heatmap(dead.record)

# %% tags=["nbval-check-output"]
dnames, _, dgrid = dead.record.layer_matrix("grad_norm")
below = dnames[:dnames.index("blocks.1.mlp.c_fc") + 1]  # every layer below the last ReLU
print("no non-finite step:", dead.record.first_nonfinite_step is None)
print("stalled (is_stalled):", is_stalled(dead_losses))
print("every layer below the last ReLU has a gradient of exactly 0 at every record:",
      bool((dgrid[:len(below)] == 0).all()))

# %% [markdown]
# Grey cells are exact zeros: ReLU's slope is 0 for negative input, so no gradient
# reaches the layers before it, and those after it learn nothing about the input:
# the loss sits at ln 32, a uniform guess. Zero gradients, zero updates: nothing
# overflows or divides by zero. Stuck and finite forever, unseen by a NaN monitor.
#
# ### 5b. A deep sigmoid chain (`sigmoid_chain`)
# Eight sigmoid blocks, no residual connections or LayerNorm, Xavier init, 20
# steps. Sigmoid's slope is at most 1/4; backpropagation multiplies slopes along the
# chain.

# %%
sig = run_fault("sigmoid_chain", steps=20, decay_steps=200)
sig_losses = sig.record.losses()
print(f"sigmoid_chain: loss {sig_losses[0]:.3f} -> {sig_losses[19]:.3f}   "
      f"(clean at step 19: {clean_losses[19]:.3f})")
fig = plot_grad_heatmap(sig.record)

# %%
snames, _, sgrid = sig.record.layer_matrix("grad_norm")
_, _, sact = sig.record.layer_matrix("act_absmax")
first_fc, last_fc = sgrid[snames.index("blocks.0.mlp.c_fc"), 0], \
    sgrid[snames.index("blocks.7.mlp.c_fc"), 0]
print(f"step 0 grad norm: blocks.0.mlp.c_fc {first_fc:.1e}, "
      f"blocks.7.mlp.c_fc {last_fc:.1e}")
print(f"largest activation anywhere: {np.nanmax(sact):.3g}")

# %% tags=["nbval-check-output"]
print("no non-finite step:", sig.record.first_nonfinite_step is None)
print("stalled (is_stalled):", is_stalled(sig_losses))
print("first block's gradient more than 10,000x smaller than the last block's:",
      bool(first_fc < last_fc / 1e4))
print("every activation below 1000 (nothing near an overflow):",
      bool(np.nanmax(sact) < 1000))

# %% [markdown]
# The map darkens towards the input, about tenfold per block. That is
# **vanishing** (梯度消失): numbers, activations included, get *small*, far from a
# float's maximum.
#
# Both stall without a NaN: suspects for a finite run stuck at ln(vocab), not for
# a NaN. The modern block cures both: residual connections (a path around the
# activation), LayerNorm, and GELU instead of a saturating or hard-zero
# nonlinearity.
#
# Only **dead or saturating** activations were tested, so do not conclude that
# activation choice never causes NaN. **Unbounded or multiplicative** ones can
# amplify an outlier (squared ReLU squares its input; SwiGLU multiplies two linear
# branches): Fishman et al. 2024 ("Scaling FP8 training to trillion-token LLMs",
# arXiv 2409.12517) traced the divergence of FP8 runs of a 7B model, only after
# about 200B tokens, to SwiGLU outlier amplification, fixed by a rescaled
# Smooth-SwiGLU. What was shown: SwiGLU *with FP8*, over a long run; their BF16
# baseline of the same model trained normally, and squared ReLU was not tested.
# That needs a long run and low precision; this toy has neither.
#
# ## 6. Optimizers and pretrained weights
# > **Optional, senior track.** Skip section 6 and you miss the optimizer comparison, the
# > pretrained start and the last practice question; nothing later relies on them.
#
# ### 6a. AdamW vs SGD on the deep stack
# The same 6 blocks without LayerNorm at the same LR, with SGD (momentum 0.9), 40 steps.

# %%
sgd_deep = run_fault("deep_explosion", optimizer="sgd", steps=40,
                     record_every=0, checkpoint_every=0)
sgd_norm = sgd_deep.record.column("grad_norm")
adam_norm = deep.record.column("grad_norm")
for s in (0, 20, 39):
    print(f"step {s}: grad norm AdamW {adam_norm[s]:9.3g}   SGD {sgd_norm[s]:9.3g}   "
          f"loss AdamW {deep_losses[s]:8.3g}   SGD {sgd_deep.record.losses()[s]:.3f}")

# %% tags=["nbval-check-output"]
print("SGD: no non-finite step, grad norm below 1 throughout:",
      sgd_deep.record.first_nonfinite_step is None and bool(sgd_norm.max() < 1))
print("SGD: loss at step 39 still above 3.0 (it barely moved):",
      bool(sgd_deep.record.losses()[39] > 3.0))
print("AdamW: grad norm at step 39 more than 1000x SGD's:",
      bool(adam_norm[39] > 1000 * sgd_norm[39]))

# %% [markdown]
# SGD is "more stable" only by doing nothing: its update, `lr × gradient`, is tiny
# at this init (section 4). AdamW divides by the gradient's running size, moving
# each weight up to about the LR (β2 ≤ 0.99) whatever the gradient: it escapes the
# tiny-gradient start and, without LayerNorm, explodes. Neither fixes the
# architecture.
#
# ### 6b. AdamW vs NAdam vs SGD on the clean model
# One LR each would compare LRs, not optimizers: three LRs each, about 3x apart
# (SGD's higher), 40 steps, seed 0; then each one's best LR with seeds 1 and 2. NAdam
# is Adam with Nesterov momentum.

# %%
SWEEP = {"AdamW": (3e-3, 1e-2, 3e-2), "NAdam": (1e-3, 3e-3, 1e-2),
         "SGD": (0.015, 0.05, 0.15)}


def optimizer_run(name, lr, seed):
    """Final loss (mean of the last 10 of 40 steps) of the clean model under `name`."""
    config = TrainConfig(progress=False, steps=40, decay_steps=200, record_every=0,
                         checkpoint_every=0, lr=lr, seed=seed,
                         optimizer="sgd" if name == "SGD" else "adamw")
    model = optimizer = None  # the Trainer builds AdamW or SGD itself
    if name == "NAdam":
        model = fresh_model(config)
        optimizer = torch.optim.NAdam(model.parameters(), lr=lr,
                                      betas=(config.beta1, config.beta2))
    trainer = Trainer(config, model=model, optimizer=optimizer)
    trainer.run()
    return final_loss(trainer.record.losses())


sweep = {(name, lr): optimizer_run(name, lr, seed=0)
         for name, lrs in SWEEP.items() for lr in lrs}
best_lr = {name: min(lrs, key=lambda lr: sweep[name, lr]) for name, lrs in SWEEP.items()}
best = {name: np.array([sweep[name, lr]] + [optimizer_run(name, lr, seed) for seed in (1, 2)])
        for name, lr in best_lr.items()}
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
for name, lrs in SWEEP.items():
    line, = ax.plot(lrs, [sweep[name, lr] for lr in lrs], "o-", label=name)
    ax.plot([best_lr[name]] * 2, best[name][1:], "x", ms=9, color=line.get_color())
ax.set_xscale("log")
ax.set_xlabel("learning rate (log)")
ax.set_ylabel("final loss (steps 30-39)")
ax.set_title("40 steps, seed 0 (x: seeds 1 and 2 at the best LR)")
ax.legend(fontsize=8)
for name, values in best.items():
    print(f"{name:6} best LR {best_lr[name]:<6g} final loss, seeds 0-2: "
          + ", ".join(f"{v:.3f}" for v in values))

# %% tags=["nbval-check-output"]
print("no run of the sweep made a non-finite loss:",
      all(math.isfinite(v) for v in [*sweep.values(), *np.concatenate(list(best.values()))]))
print("each optimizer's best LR lies inside its grid, not at an edge:",
      all(best_lr[name] == lrs[1] for name, lrs in SWEEP.items()))
ranked = sorted(best, key=lambda name: best[name].mean())
print("ranked by mean final loss at the best LR:", ranked)
print("every seed agrees (each one's worst seed below the next one's best):",
      all(best[a].max() < best[b].min() for a, b in zip(ranked[:-1], ranked[1:], strict=True)))

# %% [markdown]
# Another task, a finer grid or longer runs could reorder these. For claim M11 the
# optimizer changes the *speed* and *kind* of failure, not stability: SGD's step
# grows with the gradient (a gradient spike becomes a weight spike unless clipped);
# Adam's first steps are full-size, hence warmup
# ([Lab 03](03_learning_rate.ipynb#Why-AdamW-needs-warmup)).
#
# ### 6c. Is a pretrained start more stable than a random one?
# A careless fine-tune of the clean run's step-80 weights (constant LR 0.01, twice
# the baseline; no warmup; fresh AdamW) against the same recipe from a random init,
# seeds 1-3 (new batches). The loss says little about the weights; their
# **displacement** does: ‖W₄₀ − W₀‖ / ‖W₀‖ per weight matrix, 1 meaning "moved by its
# own size". Which start moved further: in distance, and relative to its size?

# %%
hot = TrainConfig(progress=False, steps=40, lr=0.01, warmup_steps=0, schedule="constant",
                  record_every=0, checkpoint_every=0)
STARTS = {"random init": None, "pretrained": clean.trainer.checkpoints.load(80)["model"]}


def fine_tune(start, seed):
    """40 hot steps from `start` (a state dict, or None: random init): per weight matrix,
    the distance moved and the size at the start, and the losses."""
    trainer = Trainer(hot.replace(seed=seed))
    if start is not None:
        trainer.model.load_state_dict(start)
    w0 = {k: w.detach().clone() for k, w in trainer.model.named_parameters() if w.dim() == 2}
    trainer.run()
    w40 = dict(trainer.model.named_parameters())
    moved = {k: float((w40[k].detach() - w).norm()) for k, w in w0.items()}
    return moved, {k: float(w.norm()) for k, w in w0.items()}, trainer.record.losses()


def overall(norms):
    """The norm of all matrices together, from their norms."""
    return math.sqrt(sum(v * v for v in norms.values()))


SEEDS = (1, 2, 3)
tuned = {(name, seed): fine_tune(start, seed) for name, start in STARTS.items()
         for seed in SEEDS}
for (name, seed), (moved, size, losses) in tuned.items():
    print(f"{name:11} seed {seed}: moved {overall(moved):4.1f} = "
          f"{overall(moved) / overall(size):.2f}x its size; loss {losses[0]:.2f}, "
          f"peak {losses.max():.2f}, step 39 {losses[39]:.2f}")
layers = list(tuned["pretrained", 1][0])
fig, ax = plt.subplots(figsize=(8, 3), layout="constrained")
for i, name in enumerate(STARTS):
    rel = np.array([[tuned[name, s][0][k] / tuned[name, s][1][k] for k in layers]
                    for s in SEEDS])
    mean = rel.mean(0)
    ax.bar(np.arange(len(layers)) + 0.4 * i, mean, 0.4, label=name, capsize=2,
           yerr=[mean - rel.min(0), rel.max(0) - mean])
ax.axhline(1.0, color="k", ls=":", lw=1, label="moved by its own size")
ax.set_xticks(np.arange(len(layers)) + 0.2, [k.removesuffix(".weight") for k in layers],
              rotation=60, fontsize=7)
ax.set_ylabel("‖W₄₀ − W₀‖ / ‖W₀‖")
ax.set_title("40 steps at LR 0.01, no warmup (bars: mean of seeds 1-3, whiskers: range)")
ax.legend(fontsize=7);

# %% tags=["nbval-check-output"]
pairs = [(tuned["pretrained", s], tuned["random init", s]) for s in SEEDS]
print("no run made a non-finite loss:",
      all(np.isfinite(run[2]).all() for run in tuned.values()))
print("every seed: both starts moved the same distance within 25 %:",
      all(abs(overall(p[0]) / overall(r[0]) - 1) < 0.25 for p, r in pairs))
print("every seed: the pretrained weights moved by more than their own size:",
      all(overall(p[0]) > overall(p[1]) for p, _ in pairs))
print("every seed: relative to its size, the random init moved further:",
      all(overall(r[0]) / overall(r[1]) > overall(p[0]) / overall(p[1]) for p, r in pairs))
print("every seed: the pretrained run's loss at step 39 is the lower:",
      all(p[2][39] < r[2][39] for p, r in pairs))

# %% [markdown]
# A fresh AdamW moves each weight by about the LR per step whatever its gradient
# (section 1): the distance is set by the LR and the step count, not by the start;
# the pretrained ratio is smaller only because those weights are larger. A head
# start, not a shield. The toy **can** show that a careless LR or missing warmup
# overwrites a good start (fine-tunes use a smaller LR, warmup, and the optimizer
# state when one exists); it **cannot** show what makes large models
# well-conditioned at scale (weight and activation scales tuned over billions of
# tokens).
#
# ## 7. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("05-explosion-order")

# %%
practice("05-he-no-norm")

# %%
practice("05-mystery-stall")

# %%
practice("05-deep-nan-interview")

# %%
practice("05-pretrained-shield")

# %% [markdown]
# ## Summary
# - Gradient explosion has a history (C1): alert on per-layer grad norms; the first
#   inf comes long before the NaN loss.
# - Hooks record activations for the post-mortem (M8).
# - Init and normalisation go together (M7).
# - Dead ReLUs and sigmoid chains stall without NaN (C4); neither an optimizer nor a
#   pretrained start is a stability switch (M11).
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
