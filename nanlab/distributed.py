"""Data-parallel training on the CPU, and a guard whose decision every rank shares.

In data-parallel training every rank holds a replica of the model, trains on its own
shard of the data, and DDP averages the gradients in backward. The replicas stay equal
only if every rank applies the same update: if one rank skips a step (or rolls back)
and another does not, they drift apart for good, and silently: DDP syncs gradients,
never the parameters after the first broadcast. So a guard's decision has to be global.
Megatron-LM and DeepSpeed all-reduce the found-inf flag with MAX before the optimizer
step; nanlab's guard does the same for its flags (:func:`agree`), for NaN *and* spikes.
(Lightning's ``SpikeDetection`` also reduces its decision, but then only raises; its
skip-the-bad-batch-across-ranks request, #4956, was closed as won't-fix.)

What really happens without the all-reduce, measured with 2 gloo processes on the toy
model, a bad batch on rank 1 only (``tests/test_distributed.py``):

- **NaN in rank 1's input**: rank 1's loss and gradients are NaN; DDP's all-reduce
  *averages* them into rank 0's gradients, so both ranks see a NaN grad norm while rank
  0's own loss is finite. With no guard both write NaN into every weight, in step: the
  replicas stay bit-identical, identically destroyed. A guard that looks at the global
  grad norm (nanlab's does) skips on both ranks even without the all-reduce.
- **A decision on a local value**: the loss is computed on each rank's own shard and is
  not averaged. A garbled shard on rank 1 (random targets) spikes rank 1's loss only.
  Each rank deciding alone, rank 1 skips and rank 0 steps: afterwards the replicas
  differ (largest weight difference 9e-4 at once, 2e-2 fifteen steps later), and
  nothing in DDP notices. With the flags
  all-reduced, both skip and stay bit-identical. The same holds for any check on the
  local loss (``if not math.isfinite(loss.item())``), or for a rollback decision.
- **A bit flip on rank 1's device** (``bit_flip``, silent data corruption): rank 1's loss
  is NaN, DDP averages its NaN gradient into rank 0's. With ``Guard(rerun=True)`` both
  ranks run the step again (the rerun's backward all-reduces too, so every rank must
  rerun), agree with one all-reduce that the rerun is clean (transient), and apply its
  update: both end bit-identical to the run without the flip. A NaN in the data, with the
  same guard, comes back on the rerun (persistent) and is skipped on both ranks.

To try it from a notebook or a script (spawned processes need a module-level function)::

    from nanlab import distributed
    runs = [{"fault": "garbled", "guard": {"mode": "skip", "spike": "skip"}}]
    rank0, rank1 = distributed.launch(distributed.train_data_parallel, 2, runs)
    distributed.replicas_identical([rank0[0]["params"], rank1[0]["params"]])
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.runs.checkpoint import atomic_save, safe_load
from nanlab.toy.data import IGNORE_INDEX


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(fn: Callable[..., Any], world_size: int = 2, *args: Any,
           timeout_s: float = 120.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes joined by a gloo
    process group on 127.0.0.1, and return each rank's result, in rank order.

    ``fn`` must be a module-level function (the processes are spawned, so it is pickled
    by name) and return tensors and plain Python (results travel through files read with
    ``weights_only=True``). Each process uses one thread: N processes share the cores.

    >>> # results = launch(train_data_parallel, 2, [{"fault": "nan_input"}])
    """
    check_range("world_size", world_size, 1, 64, integer=True)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="nanlab-ddp-") as tmp:
        mp.spawn(_entry, args=(world_size, port, tmp, fn, args, timeout_s),
                 nprocs=world_size, join=True)
        return [safe_load(Path(tmp) / f"rank{r}.pt") for r in range(world_size)]


def _entry(rank: int, world_size: int, port: int, tmp: str, fn: Callable, args: tuple,
           timeout_s: float) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    try:
        atomic_save(fn(rank, world_size, *args), Path(tmp) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def shard(batches: Callable[[int], Any], rank: int, world_size: int) -> Callable[[int], Any]:
    """Rank ``rank``'s batch source: its batch i is global batch ``i * world_size + rank``
    (the interleaving of ``DistributedSampler``), so ranks never share a batch.

    >>> shard(lambda i: i, rank=1, world_size=2)(3)
    7
    """
    return lambda i: batches(i * world_size + rank)


def ddp_trainer(config=None, batches: Callable[[int], Any] | None = None):
    """A :class:`nanlab.train.Trainer` for this rank: the toy model wrapped in DDP, on this
    rank's shard of the batches (default: the counting task). Call inside a process group.

    >>> # inside launch(): trainer = ddp_trainer(TrainConfig(steps=30, device="cpu"))
    """
    from torch.nn.parallel import DistributedDataParallel

    from nanlab.toy.model import GPT
    from nanlab.train.trainer import TrainConfig, Trainer, default_task

    if not dist.is_available() or not dist.is_initialized():
        raise NanlabError("ddp_trainer() needs a process group: call it inside "
                          "distributed.launch(fn, ...) or after init_process_group()")
    config = config or TrainConfig(progress=False)
    if config.device == "auto" and dist.get_backend() == "gloo":
        config = config.replace(device="cpu")
    torch.manual_seed(config.seed)
    model = GPT(config.model)
    if config.device != "cpu":
        model = model.to(config.device)
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's weights: equal replicas
    source = batches if batches is not None else default_task(config)
    return Trainer(config, model=ddp, batches=shard(source, dist.get_rank(),
                                                    dist.get_world_size()))


def garble_targets(vocab_size: int, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """A corruption for ``Injection.edit_labels``: every target becomes a random token, as
    in a shard of noise (a broken tokenizer, a binary file read as text). The loss on that
    batch jumps above log(vocab_size) (4.8 against ln 32 = 3.5 at step 24: the trained
    model is confidently wrong), finite: a spike, not a NaN.

    >>> t = torch.zeros(2, 4, dtype=torch.long)
    >>> garble_targets(32)(t).shape
    torch.Size([2, 4])
    """
    def fn(targets: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        noise = torch.randint(0, vocab_size, targets.shape, generator=g)
        return torch.where(targets == IGNORE_INDEX, targets, noise)
    return fn


DATA_FAULTS = (None, "nan_input", "garbled", "bit_flip")  # bit_flip: the device, not data


def train_data_parallel(rank: int, world_size: int, runs: list[dict]) -> list[dict]:
    """The worker of a data-parallel experiment (for :func:`launch`): one result per run.

    Each run is a dict: ``steps`` (30), ``seed`` (0), ``checkpoint_every`` (10),
    ``fault`` ("nan_input", "garbled", "bit_flip" or None), ``fault_rank`` (1), ``at_step``
    (20, the bad batch's local index), ``guard`` (a dict of :class:`nanlab.guard.Guard`
    arguments, or None for no guard). The result: the rank's losses, skipped steps, events, guard
    counts, its flat parameters and whether they are finite.

    >>> # per_rank = launch(train_data_parallel, 2, [{"fault": "garbled",
    >>> #                    "guard": {"mode": "skip", "spike": "skip", "sync_ranks": False}}])
    """
    return [_train_one(rank, **run) for run in runs]


def _train_one(rank: int, steps: int = 30, seed: int = 0, checkpoint_every: int = 10,
               fault: str | None = None, fault_rank: int = 1, at_step: int = 20,
               guard: dict | None = None) -> dict:
    from nanlab import faults
    from nanlab.guard import Guard
    from nanlab.train.trainer import TrainConfig

    check_choice("fault", fault, DATA_FAULTS)
    config = TrainConfig(steps=steps, seed=seed, device="cpu", progress=False,
                         record_every=0, checkpoint_every=checkpoint_every)
    trainer = ddp_trainer(config)
    if fault is not None and rank == fault_rank:
        if fault == "nan_input":
            injection = faults.inject("nan_input", batches=trainer.batches, inputs="features",
                                      at_step=at_step)
        elif fault == "bit_flip":  # one exponent bit of rank 1's first nn.Linear output
            injection = faults.inject("bit_flip", model=trainer.model, batches=trainer.batches,
                                      at_step=at_step, rank=fault_rank)
        else:
            injection = faults.Injection(batches=trainer.batches, labels="targets")
            injection.edit_labels(at_step, garble_targets(config.model.vocab_size, seed))
        trainer.batches = injection.batches
    g = Guard(**guard).attach(trainer) if guard is not None else None
    record = trainer.run()
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    return {"rank": rank, "losses": [r["loss"] for r in record.steps],
            "skipped": [r["step"] for r in record.steps if r["skipped"]],
            "events": record.events, "guard": g.summary() if g else None,
            "params": params, "finite": bool(torch.isfinite(params).all())}


def replicas_identical(params: list[torch.Tensor]) -> bool:
    """True when every rank's flat parameters equal rank 0's bit for bit (NaN included:
    the bits are compared, so identically broken replicas count as identical).

    >>> replicas_identical([torch.ones(3), torch.ones(3)])
    True
    """
    first = params[0].view(torch.int32)
    return all(torch.equal(first, p.view(torch.int32)) for p in params[1:])


def replica_gap(params: list[torch.Tensor]) -> float:
    """The largest |difference| between any rank's parameters and rank 0's (NaN if any
    parameter is not finite).

    >>> replica_gap([torch.zeros(2), torch.tensor([0.0, 0.5])])
    0.5
    >>> replica_gap([torch.zeros(1), torch.ones(1), torch.tensor([float("nan")])])
    nan
    """
    if len(params) < 2:
        return 0.0
    gaps = torch.stack([(p - params[0]).abs().max() for p in params[1:]])
    return float(gaps.max())  # torch's max propagates NaN whatever the rank order
