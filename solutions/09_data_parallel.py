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
# **Source notebook (solution version).** This pair, `solutions/09_data_parallel.py` and
# `solutions/09_data_parallel.ipynb`, is the single source of `labs/09_data_parallel.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/09_data_parallel.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 09 · NaN in data-parallel training (数据并行): one bad rank
#
# Every large run is data-parallel: N copies of the model (replicas, 副本), one per
# rank (进程/卡), each training on its own shard of the data. PyTorch's DDP
# (DistributedDataParallel) averages the gradients of all ranks during backward
# with an **all-reduce** (全归约), so every rank applies the same update and
# the replicas stay equal. What happens when only *one* rank gets a bad batch?
#
# 1. **a NaN on one rank**, with and without a guard;
# 2. **a decision on a local value**: the replicas drift apart;
# 3. **the fix**: all-reduce the flags with MAX;
# 4. **how Megatron-LM and DeepSpeed do it**;
# 5. **practice** in interview form.
#
# Two real processes on this machine's CPU; about 30 minutes.

# %% [markdown]
# ## Setup
# `nanlab.distributed.launch(fn, 2, ...)` starts two Python processes, joins them
# in a process group (gloo, on 127.0.0.1), runs `fn(rank, 2, ...)` in each and
# returns each rank's result. The worker, `train_data_parallel`, is Lab 00's toy
# Transformer wrapped in DDP, on the counting task; rank *r* trains on global
# batches *r*, *r* + 2, *r* + 4, ... (the interleaving of PyTorch's
# `DistributedSampler`), seed 0.
#
# The worker runs on the CPU even with a GPU present: gloo is a CPU backend. A GPU
# job would use NCCL, with the same mechanism (DDP's gradient all-reduce, the flag
# all-reduce) and loss values that differ in their last digits.

# %%
import inspect
import math
import time

import matplotlib.pyplot as plt
import torch

from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.distributed import launch, replica_gap, replicas_identical, train_data_parallel
from nanlab.guard import agree
from nanlab.toy.model import GPT
from nanlab.train import TrainConfig

start_lab("09_data_parallel")

# %% [markdown]
# ## The experiment: five runs, one launch
# Starting the processes (each imports PyTorch and joins the group: about 10 to
# 20 s on a busy 2-core machine) costs more than training, so one launch runs five
# short trainings per rank, each a controlled replay (same seed, same data, one
# change):
#
# - `clean` (10 steps): the yardstick;
# - `nan` (10 steps): one NaN in the float feature of rank 1's batch of step 6 (the
#   `nan_input` fault), no guard;
# - `nan + guard`: the same, with `Guard("skip")` deciding alone on each rank;
# - `garbled, alone` (25 steps): random targets in rank 1's batch of step 24 (a
#   `garbled` shard), a spike detector deciding alone on each rank;
# - `garbled, agreed` (25 steps): the same, with its flags all-reduced.
#
# "Deciding alone" is `sync_ranks=False`; by default (`sync_ranks=None`) the guard
# all-reduces its flags whenever it runs under `torch.distributed`.
#
# **Exercise 1 · predict.** Before the launch, predict four outcomes: return a dict
# mapping each of the `STATEMENTS` to `True` or `False`.

# %%
STATEMENTS = [
    "nan, no guard: rank 0's own loss at step 6 is finite",
    "nan, no guard: rank 0's weights are all finite at the end",
    "nan, no guard: the two replicas are bit-identical at the end",
    "garbled, alone: the two replicas are bit-identical at the end",
]


def my_predictions():
    """{statement: True or False} for each of STATEMENTS."""
    ### BEGIN SOLUTION
    return dict(zip(STATEMENTS, [True, False, True, False], strict=True))
    ### END SOLUTION


# %% [markdown]
# Commit your prediction before the launch: the first one you commit is the one graded.

# %%
from nanlab.course import predict

predict("predict_ddp", my_predictions)

# %% [markdown]
# The launch takes about 15 to 30 s. The garbled runs' detector window is 10 steps,
# not the default 20: in 25 steps the loss still falls fast, which widens a long
# window's spread and hides the spike.

# %%
NAN = {"fault": "nan_input", "steps": 10, "at_step": 6, "checkpoint_every": 5}
GARBLED = {"fault": "garbled", "steps": 25, "at_step": 24, "checkpoint_every": 5}
DETECTOR = {"mode": "skip", "spike": "skip", "window": 10, "warmup": 10}
RUNS = {
    "clean": {"steps": 10, "fault": None, "guard": None},
    "nan": {**NAN, "guard": None},
    "nan + guard": {**NAN, "guard": {"mode": "skip", "sync_ranks": False}},
    "garbled, alone": {**GARBLED, "guard": {**DETECTOR, "sync_ranks": False}},
    "garbled, agreed": {**GARBLED, "guard": DETECTOR},
}

start = time.perf_counter()
per_rank = launch(train_data_parallel, 2, list(RUNS.values()))
runs = {name: (per_rank[0][i], per_rank[1][i]) for i, name in enumerate(RUNS)}
print(f"two processes, five runs each: {time.perf_counter() - start:.1f} s")

# %% [markdown]
# Each result is a dict per rank: `losses` (this rank's loss at every step),
# `skipped` (the steps its guard dropped), `events` (what the guard did and why),
# `params` (all weights, flattened) and `finite`. Check your predictions:

# %% tags=["nbval-check-output"]
r0, r1 = runs["nan"]
g0, g1 = runs["garbled, alone"]
actual = dict(zip(STATEMENTS, [
    math.isfinite(r0["losses"][6]),
    r0["finite"],
    replicas_identical([r0["params"], r1["params"]]),
    replicas_identical([g0["params"], g1["params"]]),
], strict=True))
check("predict_ddp", my_predictions, actual, locked=True, hints=[
    "DDP averages gradients across ranks, not losses: each rank's loss comes from its own "
    "shard.",
    "A NaN in one rank's gradient enters the average, and the average reaches every rank; a "
    "spike detector deciding alone can skip a step on one rank only.",
    "After committing, the check cell computes each statement, e.g. "
    "math.isfinite(runs[\"nan\"][0][\"losses\"][6])",
])

# %% [markdown]
# ## 1. A NaN on one rank reaches every rank
# The `nan` run, around step 6, one column per rank:

# %%
r0, r1 = runs["nan"]
for step in range(4, 10):
    print(f"step {step}:  rank 0 loss {r0['losses'][step]:6.3f}   "
          f"rank 1 loss {r1['losses'][step]:6.3f}")

# %% tags=["nbval-check-output"]
nan_steps = [s for s in range(10) if math.isnan(r0["losses"][s])]
print("rank 1's loss at step 6 is NaN:", math.isnan(r1["losses"][6]))
print("rank 0's loss at step 6 is finite:", math.isfinite(r0["losses"][6]))
print("rank 0's loss is NaN at every step from 7 on:", nan_steps == [7, 8, 9])
print("weights finite at the end (rank 0, rank 1):", (r0["finite"], r1["finite"]))
print("replicas bit-identical:", replicas_identical([r0["params"], r1["params"]]))
print("both processes ran every step and exited without an error:",
      len(r0["losses"]) == len(r1["losses"]) == 10)

# %% [markdown]
# Rank 1's NaN feature makes a NaN loss and NaN gradients; rank 0's loss at step 6
# is finite: **the loss is local**, computed on each rank's own shard. DDP's
# all-reduce then averages the gradients, `(g₀ + NaN) / 2 = NaN`, and both ranks
# apply the same NaN update: every weight becomes NaN, in lockstep.
#
# The replicas stay bit-identical: **identically destroyed**. Nothing complained,
# as in a single-process run (claim B3, Lab 02), now on every card at once.

# %%
fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
c0, _ = runs["clean"]
ax.plot(c0["losses"], "k-", lw=1, label="clean, rank 0")
for (rank, res), style in zip(enumerate(runs["nan"]), ("o-", "s--"), strict=True):
    ax.plot(res["losses"], style, label=f"nan, rank {rank}")
for (rank, res), style in zip(enumerate(runs["nan + guard"]), ("^:", "v:"),
                              strict=True):
    ax.plot(res["losses"], style, alpha=0.7, label=f"nan + guard, rank {rank}")
ax.axvline(6, color="red", lw=0.8, ls="--")
nan_at = [s for s in range(10) if any(math.isnan(r["losses"][s]) for r in runs["nan"])]
ax.plot(nan_at, [3.45] * len(nan_at), "rx", label="nan: a NaN loss (on a rank)")
ax.set(xlabel="step", ylabel="loss (this rank's shard)",
       title="NaN in rank 1's batch of step 6")
ax.legend(fontsize=7);

# %% [markdown]
# **With a guard.** The `nan + guard` run attaches `Guard("skip")` to each rank,
# each deciding alone. The guard checks the step's loss *and* its global gradient
# norm after backward, before the optimizer step. What did rank 0 decide, although
# its own loss was finite?

# %%
q0, q1 = runs["nan + guard"]
for rank, res in enumerate((q0, q1)):
    for e in res["events"]:
        if e["kind"] == "guard":
            print(f"rank {rank}, step {e['step']}: {e['action']}: {e['reason']}")
c0, _ = runs["clean"]
for step in range(6, 10):
    print(f"step {step}, rank 0 loss: clean {c0['losses'][step]:.3f}   "
          f"nan + guard {q0['losses'][step]:.3f}")

# %% tags=["nbval-check-output"]
reason = next(e["reason"] for e in q0["events"] if e["kind"] == "guard")
print("both ranks skipped step 6, and only step 6:", q0["skipped"] == q1["skipped"] == [6])
print("rank 0 skipped on the averaged gradients' norm:",
      reason.startswith("non-finite grad norm"))
print("weights finite on both ranks:", q0["finite"] and q1["finite"])
print("replicas bit-identical:", replicas_identical([q0["params"], q1["params"]]))
print("rank 0's loss at step 9 within 5 % of the clean run's:",
      abs(q0["losses"][9] - c0["losses"][9]) < 0.05 * c0["losses"][9])
print("about one update behind (between the clean loss at steps 9 and 7):",
      c0["losses"][9] < q0["losses"][9] < c0["losses"][7])

# %% [markdown]
# Rank 0 saw the NaN in the *averaged* gradients: after DDP's all-reduce the global
# gradient norm is NaN on every rank, so a guard that checks it skips on every
# rank without talking to the others. The only cost is the skipped update (early
# in training, as here, one update is worth a few per cent of the loss).
#
# What saved rank 0 is the **gradient** check. A check on the local loss only (the
# common `if not math.isfinite(loss.item()): skip`) sees a finite loss on rank 0 at
# step 6, so rank 0 would step with NaN gradients while rank 1 skips (practice
# question `09-local-loss-check`).
#
# ## 2. A decision on a local value: the replicas drift apart
# Not every bad batch makes a NaN. In the garbled runs, rank 1's batch of step 24
# has **random targets**: a shard of noise, a broken tokenizer, a binary file read
# as text. The loss stays finite but jumps on rank 1 only, even above ln 32 ≈ 3.5
# (a uniform guess): the model is confidently wrong about every random target.
# The spike detector (损失尖峰检测) works on the **local** loss, so only rank 1's
# fires, and in `garbled, alone` each rank acts on its own.

# %%
g0, g1 = runs["garbled, alone"]
for step in range(21, 25):
    print(f"step {step}:  rank 0 loss {g0['losses'][step]:.3f}   "
          f"rank 1 loss {g1['losses'][step]:.3f}")
for rank, res in enumerate((g0, g1)):
    print(f"rank {rank}: skipped {res['skipped']}; guard events:",
          [e["reason"] for e in res["events"] if e["kind"] == "guard"])

# %%
fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
for rank, res in enumerate(runs["garbled, alone"]):
    ax.plot(res["losses"], label=f"rank {rank}")
ax.axvline(24, color="red", lw=0.8, ls="--", label="garbled batch (rank 1)")
ax.set(xlabel="step", ylabel="loss (this rank's shard)",
       title="garbled, alone: a spike on rank 1 only")
ax.legend(fontsize=8);

# %% [markdown]
# Both ranks held the same averaged gradient (DDP's all-reduce ran in backward,
# garbled part included), but only rank 0 applied it. How far apart are the
# replicas now?

# %%
gap = replica_gap([g0["params"], g1["params"]])
print(f"largest weight difference between the replicas after step 24: {gap:.1e}")

# %% tags=["nbval-check-output"]
print("rank 1's loss at step 24 more than 2x rank 0's:",
      g1["losses"][24] > 2 * g0["losses"][24])
print("rank 1 skipped step 24, rank 0 skipped nothing:",
      (g1["skipped"], g0["skipped"]) == ([24], []))
print("replicas bit-identical:", replicas_identical([g0["params"], g1["params"]]))
print("largest weight difference above 1e-4:", gap > 1e-4)
print("every weight finite on both ranks:", g0["finite"] and g1["finite"])

# %% [markdown]
# **Silent drift** (副本不一致). After step 24 the ranks hold different models, and
# nothing brings them back together: every later step applies the *same* averaged
# gradient (computed from then on by two different models) to *different* weights,
# and DDP synchronises gradients, never the parameters after the first broadcast.
# No rank raises anything. The checkpoint rank 0 writes (the usual practice) holds
# one of the two models; the training ran with two.
#
# The same holds for any decision on a rank-local value: a check on the local loss,
# a per-rank data check that drops a batch, a rollback decided by one rank.
#
# **Exercise 2 · a replica-drift check.** Real runs compare replicas from state
# dicts (or checkpoints), not a flat vector. Write `weight_gap(state_a, state_b)`:
# the largest absolute difference over every tensor of two state dicts with the
# same keys, as a Python float; NaN if any difference is NaN. `as_state_dict`
# turns a rank's flat `params` back into the model's state dict.

# %%
SHAPES = {k: v.shape for k, v in GPT(TrainConfig().model).state_dict().items()}


def as_state_dict(flat):
    """A rank's flat parameters as {name: tensor}, in the model's order."""
    out, i = {}, 0
    for name, shape in SHAPES.items():
        n = math.prod(shape)
        out[name] = flat[i:i + n].view(shape)
        i += n
    assert i == flat.numel()
    return out


def weight_gap(state_a, state_b):
    """max |a - b| over every tensor of two state dicts (float; NaN if any is NaN)."""
    ### BEGIN SOLUTION
    gaps = [(state_a[k] - state_b[k]).abs().max() for k in state_a]
    return float(torch.stack(gaps).max())  # torch's max propagates NaN
    ### END SOLUTION


# %% tags=["nbval-check-output"]
PAIRS = ["garbled, alone", "garbled, agreed", "nan"]  # the two replicas of each run
expected = [replica_gap([r["params"] for r in runs[name]]) for name in PAIRS]
check("weight_gap", weight_gap, expected,
      cases={f"the {name} run": tuple(as_state_dict(r["params"]) for r in runs[name])
             for name in PAIRS}, hints=[
          "The gap between two replicas is the largest absolute difference over every weight "
          "of every tensor; a NaN anywhere must make the gap NaN.",
          "Take one maximum per tensor, then the maximum of those; Python's built-in max keeps"
          " or drops a NaN depending on the order, while torch's max over a stacked tensor "
          "propagates it.",
          "Collect the per-tensor maxima of the absolute differences in a list, turn it into "
          "one tensor with torch.stack; the answer is float of its max.",
      ], solution="""\
gaps = [(state_a[k] - state_b[k]).abs().max() for k in state_a]
return float(torch.stack(gaps).max())  # torch's max propagates NaN""")

# %% [markdown]
# Which tensors did the one-sided skip touch? (`replica_gap` stands in if your
# function is not done yet.)

# %%
a, b = (as_state_dict(r["params"]) for r in runs["garbled, alone"])
per_tensor = {k: replica_gap([a[k].flatten(), b[k].flatten()]) for k in a}
for name in sorted(per_tensor, key=per_tensor.get, reverse=True)[:5]:
    print(f"{name:28} max |difference| {per_tensor[name]:.1e}")
try:
    total, by = weight_gap(a, b), "your weight_gap"
except Exception:  # not done yet (or raising): the package's answer instead
    total, by = max(per_tensor.values()), "replica_gap"
print(f"over all tensors ({by}): {total:.1e}")
print("tensors that differ:", sum(g > 0 for g in per_tensor.values()), "of",
      len(per_tensor))

# %% [markdown]
# The `nan` run's replicas are bit-identical, yet their gap is NaN: `NaN − NaN` is
# NaN. A value-based check cannot tell "identically destroyed" from "different", so
# `replicas_identical` compares the **bits** (the float32 bit patterns as
# integers), and a real run's drift check should compare a hash or checksum of the
# bits across ranks.

# %% tags=["nbval-check-output"]
n0, n1 = runs["nan"]
print("nan run: the gap is NaN:", math.isnan(replica_gap([n0["params"], n1["params"]])))
print("nan run: bit-identical:", replicas_identical([n0["params"], n1["params"]]))

# %% [markdown]
# ## 3. The fix: every rank takes the decision any rank took
# Before the optimizer step, each rank puts its decision flags into a small tensor
# and all ranks all-reduce it with **MAX**: a 1 anywhere becomes a 1 everywhere, a
# logical OR across ranks: **any rank bad → every rank skips**. This is
# `nanlab.guard.agree`, which the guard calls once per step (the flags are
# "non-finite" and "spike"):

# %%
print(inspect.getsource(agree))


# %% [markdown]
# **Exercise 3 · the semantics of `agree`.** Write it as a pure function, no
# process group needed: `per_rank[r]` is rank *r*'s tuple of flags; return what
# each rank holds after the all-reduce, a list with one tuple of bools per rank.
# The check compares it with gloo's reduction (a MAX over ranks), then replays the
# `garbled, alone` run through it: each rank's local skip decision at every step,
# agreed, must give the skips of the `garbled, agreed` run.

# %%
def agree_flags(per_rank):
    """[flags of rank 0, flags of rank 1, ...] -> each rank's flags after an
    all-reduce with MAX (a list with one tuple of bools per rank)."""
    ### BEGIN SOLUTION
    agreed = tuple(any(flags[i] for flags in per_rank) for i in range(len(per_rank[0])))
    return [agreed for _ in per_rank]
    ### END SOLUTION


# %% tags=["nbval-check-output"]
CASES = {"2 ranks, rank 1 raises flag 2": [(False, False), (False, True)],
         "4 ranks, rank 0 raises the only flag": [(True,), (False,), (False,), (False,)],
         "2 ranks, no flag raised": [(False, False), (False, False)],
         "1 rank": [(True, False)], "2 ranks, flags as 0 / 1": [(0, 1, 0), (1, 0, 0)]}


def all_reduce_max(per_rank):
    """What dist.all_reduce(t, op=ReduceOp.MAX) leaves on every rank."""
    t = torch.tensor(per_rank, dtype=torch.float32).amax(dim=0)
    return [tuple(bool(v) for v in t.tolist())] * len(per_rank)


def replay(fn):
    """The garbled, alone run's local skip decisions, agreed step by step."""
    alone = runs["garbled, alone"]
    steps = range(len(alone[0]["losses"]))
    agreed = [fn([(s in res["skipped"],) for res in alone]) for s in steps]
    return [[s for s in steps if agreed[s][rank][0]] for rank in range(2)]


def judge_agree(got):
    for case, per_rank in CASES.items():
        want = all_reduce_max(per_rank)
        if [tuple(bool(v) for v in flags) for flags in got[case]] != want:
            return f"case {case!r} {per_rank}: got {got[case]}, expected {want}"
    replayed = replay(agree_flags)
    want = [r["skipped"] for r in runs["garbled, agreed"]]
    if replayed != want:
        return (f"case 'the garbled, alone run, replayed': skips per rank {replayed}, the "
                f"agreed run skipped {want}")
    return None


check("agree_flags", agree_flags, cases={c: (per_rank,) for c, per_rank in CASES.items()},
      test=judge_agree, hints=[
          "All ranks must take the same decision: a flag raised on any rank is raised on all, "
          "as an all-reduce with MAX does.",
          "MAX over values of 0 and 1 is a logical OR, flag by flag; every rank gets back the "
          "same tuple.",
          "Build one tuple, flag position by flag position, with Python's any over the ranks; "
          "then every rank gets that same tuple, in a list with one entry per rank.",
      ], solution="""\
agreed = tuple(any(flags[i] for flags in per_rank) for i in range(len(per_rank[0])))
return [agreed for _ in per_rank]""")

# %% [markdown]
# The run that does it, `garbled, agreed` (the same detector, `sync_ranks` at its
# default):

# %%
a0, a1 = runs["garbled, agreed"]
for rank, res in enumerate((a0, a1)):
    print(f"rank {rank}: skipped {res['skipped']}; guard events:",
          [e["reason"] for e in res["events"] if e["kind"] == "guard"])

# %% tags=["nbval-check-output"]
reason = next(e["reason"] for e in a0["events"] if e["kind"] == "guard")
print("both ranks skipped step 24, and only step 24:",
      a0["skipped"] == a1["skipped"] == [24])
print("rank 0 says why:", reason.startswith("loss spike on another rank"))
print("replicas bit-identical:", replicas_identical([a0["params"], a1["params"]]))
print("largest weight difference is 0.0:", replica_gap([a0["params"], a1["params"]]) == 0.0)

# %% [markdown]
# The price of agreeing: one all-reduce of two numbers per step, next to the
# all-reduce of every gradient of the model that DDP already does.

# %% [markdown]
# ## 4. How Megatron-LM and DeepSpeed do it
# Both detect a bad step in the optimizer, after the gradient reduction, and make
# it global the same way: **a found-inf (overflow) flag, all-reduced with MAX,
# before the optimizer step**.
#
# - **Megatron-LM** (`megatron/core/optimizer/optimizer.py`, the mixed-precision
#   optimizer): while unscaling the gradients it sets a `found_inf` tensor to 1 if
#   any gradient is inf or NaN, all-reduces it with MAX over the ranks that hold
#   *different* parts of the gradients (`get_grad_stats_parallel_group`: the
#   model-parallel ranks; with the distributed optimizer, whose ranks each hold a
#   shard of the gradients, the data-parallel ranks too), and only then reads it on
#   the host. If it is set, every rank skips the optimizer step, the loss scale
#   backs off, the learning-rate schedule does not advance, and the log counts a
#   "skipped iteration".
# - **DeepSpeed** (`runtime/utils.py` `CheckOverflow`, and the ZeRO optimizers):
#   each rank checks its gradients (or their norm) for inf / NaN and all-reduces
#   the overflow flag with MAX over the data-parallel group, then the
#   model-parallel group; every rank skips, lowers the loss scale and logs
#   "OVERFLOW! ... Skipping step".
# - **fairseq and metaseq** check the other way round: every step each rank puts
#   its gradient norm in a buffer, the buffer is all-reduced, and ranks whose norms
#   differ stop the run with "gradients are inconsistent between workers", which
#   sends it to the `NanDetector` re-run (`fairseq/trainer.py`, `_check_grad_norms`;
#   Lab 04 describes the detector). Replicas that drift apart, as in section 2,
#   are caught the step they part.
# - **PyTorch** itself can check every collective: `TORCH_NCCL_NAN_CHECK=1` makes the
#   NCCL process group assert on a NaN in a collective's input on the GPU
#   (pytorch/pytorch#125726; the variable is in `ProcessGroupNCCL.hpp`). It stops
#   the job at the rank that sent the NaN, before the all-reduce spreads it.

# %% [markdown]
# Why the all-reduce, if DDP already spreads a NaN gradient to every rank (section
# 1)? Because there the gradients are not replicated: with ZeRO stages 2-3 or
# Megatron's distributed optimizer each rank keeps only its shard of the averaged
# gradients, and with tensor or pipeline parallelism each rank holds a different
# slice of the weights. An inf in one shard is seen by one rank only, which alone
# would skip: the drift of section 2. nanlab's guard all-reduces its two flags,
# non-finite and spike, so a decision on the local loss (which these two systems do
# not take in the optimizer) is global too.

# %% [markdown]
# Their automatic recovery is the skip (and, in fp16, the lower loss scale); going
# back to a checkpoint is a restart, or in Megatron-LM a re-run of the step by its
# `RerunStateMachine` to classify the fault. nanlab's `recover` mode rolls back
# inside the run, and under DDP the flag all-reduce sends every rank back to the
# same checkpoint (`tests/test_distributed.py` checks it; Lab 08 covers recovery).

# %% [markdown]
# | | flags | agreed by | on a bad step, every rank |
# |---|---|---|---|
# | Megatron-LM | inf/NaN in grads | MAX of `found_inf` | skips, backs off the scale |
# | DeepSpeed | inf/NaN in grads | MAX of `overflow` | skips, backs off the scale |
# | nanlab `Guard` | non-finite; spike | MAX of both (`agree`) | skips, stops or rolls back |
# | plain DDP | none | nothing | trains on: NaN everywhere |

# %% [markdown]
# ## 5. Practice
# Answer, then press **Check**. **Hint** reveals one hint at a time.

# %%
from nanlab.course import practice

practice("09-which-ranks")

# %%
practice("09-local-loss-check")

# %%
practice("09-guarded-step")

# %%
practice("09-dp-skip")

# %% [markdown]
# ## Summary
# - Under DDP the **gradients** are averaged across ranks, the **loss** is not.
# - A NaN in one rank's batch makes the averaged gradient NaN on **every** rank:
#   without a guard every replica is destroyed in lockstep, bit-identical, and
#   training goes on silently (B3).
# - A guard on the **global grad norm** skips on every rank; one on the **local
#   loss** alone does not.
# - A decision on a local value taken by each rank alone makes the replicas
#   **drift apart silently** (here every tensor differs, by up to about 1e-3,
#   after one skipped update). Compare replicas by their bits: NaN ≠ NaN.
# - The fix: all-reduce the flags with **MAX** before the optimizer step, so that
#   any rank bad → every rank skips (or rolls back), as Megatron-LM and DeepSpeed
#   do with their found-inf / overflow flag.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
