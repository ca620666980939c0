"""Every data-parallel rank takes the same guard decision: the flags are all-reduced with MAX."""

from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True inside an initialised process group of more than one rank.

    >>> is_distributed()
    False
    """
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def agree(*flags: bool, group=None) -> tuple[bool, ...]:
    """Each flag OR-ed over all ranks (an all-reduce with MAX), so that every rank takes the
    decision any one of them took. Outside a process group the flags come back as they are.

    One small collective per call, which is the guard's only extra cost per step under
    data parallelism (Megatron-LM pays the same for its found-inf flag).

    >>> agree(True, False)
    (True, False)
    """
    if not is_distributed():
        return tuple(bool(f) for f in flags)
    device = "cpu"
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([float(bool(f)) for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return tuple(bool(v) for v in t.tolist())
