"""The hardware family: silent data corruption (SDC), one bit flipped in one matmul output.

A GPU with a marginal core, a cosmic ray or a bad memory cell can return a wrong number
without any error: one bit of one element of one matmul's output flips, once. If it is
a low mantissa bit nobody notices; if it is a high exponent bit the value explodes (0.5
becomes 0.5 * 2^128 = 1.7e38 in fp32), the next norm or softmax overflows, and the
loss is NaN or spikes at that step. Run the same step again, from the same weights, on
the same batch with the same RNG, and it is clean: the fault does not reproduce.

That is what tells it apart from dirty data, which fails again on every replay, and
what the guard's ``rerun=True`` reads, as Megatron-LM's ``RerunStateMachine`` does
(NVIDIA/Megatron-LM, ``megatron/core/rerun_state_machine.py``: ``TRANSIENT_ERROR``,
"the result could not be reproduced on the same GPU"; a result that reproduces there
is re-run from a checkpoint on another GPU to tell a bad GPU from a correct result).
Megatron's own ``RerunErrorInjector`` fakes the comparison's outcome; here a real bit
of a real activation flips, by a forward hook on an ``nn.Linear`` found by its type.

>>> x = torch.tensor([0.5])
>>> flip_bit(x, 0, -2).item() > 1e38     # the highest exponent bit of fp32: bit 30
True
>>> flip_bit(torch.tensor([0.5]), 0, 0).item() - 0.5 < 1e-7   # the lowest mantissa bit
True
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import AT_STEP, Fault, Param, register
from nanlab.faults.fixes import FIXES, Fix
from nanlab.guard.guard import Guard

if TYPE_CHECKING:
    from nanlab.faults.levers import Injection
    from nanlab.train.trainer import Trainer

_AS_INT = {torch.float32: torch.int32, torch.float16: torch.int16,
           torch.bfloat16: torch.int16, torch.float64: torch.int64}


def flip_bit(t: torch.Tensor, element: int, bit: int) -> torch.Tensor:
    """XOR one bit of one element of ``t`` in place, through its integer view, and return
    ``t``. ``bit`` counts from the lowest mantissa bit (0); a negative one from the sign
    bit (-1), so -2 is the highest exponent bit in fp32, fp16 and bf16 alike.

    >>> flip_bit(torch.tensor([1.0, 2.0]), 1, -1).tolist()   # the sign bit of element 1
    [1.0, -2.0]
    """
    if t.dtype not in _AS_INT:
        raise NanlabError(f"bit_flip flips a bit of a float tensor; this output is {t.dtype}")
    width = t.element_size() * 8
    position = bit % width if -width <= bit < width else None
    if position is None:
        raise NanlabError(f"bit_flip.bit={bit} is out of range for {t.dtype}; allowed: "
                          f"0 .. {width - 1}, or -1 (the sign) .. -{width}")
    n = t.numel()
    if not 0 <= element < n:
        raise NanlabError(f"bit_flip.element={element} is out of range; allowed: 0 .. {n - 1} "
                          f"(this output has {n} elements, shape {tuple(t.shape)})")
    flat = t.view(-1).view(_AS_INT[t.dtype])
    mask = torch.tensor(1, dtype=flat.dtype) << position  # bit 31 of int32: the sign
    flat[element] ^= mask.to(flat.device)
    return t


def worst_element(t: torch.Tensor, bit: int) -> int:
    """The flat index of the element of ``t`` that a flip of ``bit`` makes largest (a
    non-finite result first, then the largest positive one, which a ReLU after it lets
    through): the worst case of that flip, which a lesson needs to see.

    >>> worst_element(torch.tensor([-0.5, 3.0, 0.25, 0.5]), -2)  # 0.5 * 2^128; 3.0 shrinks
    3
    """
    flipped = flip_bit_all(t.detach().clone(), bit)
    return int(torch.nan_to_num(flipped.view(-1), nan=float("inf")).argmax())


def flip_bit_all(t: torch.Tensor, bit: int) -> torch.Tensor:
    """XOR ``bit`` of every element of ``t`` in place (a float tensor) and return it."""
    width = t.element_size() * 8
    flat = t.view(-1).view(_AS_INT[t.dtype])
    flat ^= torch.tensor(1, dtype=flat.dtype) << (bit % width)
    return t


def linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """Every ``nn.Linear`` of a model whose forward runs, in module order, found by type
    (any model). The ``out_proj`` of an ``nn.MultiheadAttention`` is left out: the
    attention reads its weight directly and never calls it, so a hook there never fires.

    >>> [name for name, _ in linears(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))]
    ['0', '2']
    >>> [name for name, _ in linears(nn.Sequential(nn.MultiheadAttention(4, 2), nn.Linear(4, 1)))]
    ['1']
    """
    bypassed = {id(m.out_proj) for m in model.modules() if isinstance(m, nn.MultiheadAttention)}
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, nn.Linear) and id(m) not in bypassed]


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _install_bit_flip(inj: Injection, p: dict) -> None:
    """Arm a forward hook at step ``at_step``: its first call flips the bit, once."""
    inj._need("model", inj.model)
    found = linears(inj.model)
    if not found:
        raise NanlabError("bit_flip needs a model with at least one nn.Linear (its output "
                          "gets the flipped bit); this one has none")
    if not -len(found) <= p["layer"] < len(found):
        raise NanlabError(f"bit_flip.layer={p['layer']} is out of range; allowed: "
                          f"0 .. {len(found) - 1} (this model has {len(found)} nn.Linear) "
                          "or a negative index from the last")
    name, linear = found[p["layer"]]
    state = {"armed": False, "fired": False}

    def lived(step: int) -> bool:
        """The built-in run already went past ``step`` (it holds a later checkpoint): a run
        read back from its folder replays a step its device got wrong once, and a transient
        fault does not come back on a replay (in this process, ``fired`` says the same)."""
        trainer = getattr(inj, "trainer", None)
        return trainer is not None and any(s > step for s in trainer.checkpoints.steps())

    def arm(step: int) -> None:  # a transient fault: one step, once in the run's life
        state["armed"] = (step == p["at_step"] and not state["fired"]
                          and _rank() == p["rank"] and not lived(step))

    def hook(module, inputs, output):
        if not state["armed"] or not isinstance(output, torch.Tensor):
            return None
        state["armed"], state["fired"] = False, True  # the rerun of this step is clean
        with torch.no_grad():
            element = p["element"] if p["element"] >= 0 else worst_element(output, p["bit"])
            before = output.view(-1)[element].item()
            flip_bit(output, element, p["bit"])
            after = output.view(-1)[element].item()
        if abs(after) < abs(before):
            warnings.warn(f"bit_flip: the flip made {before:.3g} into {after:.3g}, smaller, not "
                          f"larger: bit {p['bit']} of it was already set (a value of 2 or "
                          "more in fp32); a lower exponent bit (bit=-3) makes it grow",
                          RuntimeWarning, stacklevel=2)
        return output

    linear.register_forward_hook(hook)
    inj.step_hooks.append(arm)
    inj.notes.append(f"bit_flip: {name} ({type(linear).__name__}), step {p['at_step']}, "
                     f"element {p['element']}, bit {p['bit']}, rank {p['rank']}")


register(Fault(
    name="bit_flip", family="hardware",
    summary="one bit flips in one element of one matmul output at one step (silent data "
            "corruption on a faulty device)",
    mechanism="the output of an nn.Linear is reinterpreted as integers and one bit is "
              "XORed; the highest exponent bit multiplies a value below 2 in magnitude by "
              "2^128 (fp32; 2^16 in fp16), so the next LayerNorm's variance or the logits "
              "overflow and the loss is NaN or spikes at that step. It happens once: "
              "the same step run again from the same state, batch and RNG is clean",
    needs="a device that corrupts a result now and then (simulated: a forward hook that "
          "fires at one step, on its first call only, on one rank); any model with an "
          "nn.Linear",
    # None of the five SOP steps tests for it: the nearest is the batch check, whose
    # replay of the batch at the same state is the test that tells it from dirty data.
    reveals="data", cure="guard_rerun", signature="nonfinite",
    params={"at_step": AT_STEP,
            "bit": Param(-2, -64, 63, help="the bit flipped: 0 = the lowest mantissa bit, "
                                           "-1 = the sign, -2 = the highest exponent bit"),
            "element": Param(0, -1, 10**12, help="the flat index of the element flipped; "
                             "-1: the output's largest value, the worst case"),
            "layer": Param(0, -10**6, 10**6, help="which nn.Linear, in module order"),
            "rank": Param(0, 0, 10**6, help="the data-parallel rank whose device fails")},
    install=_install_bit_flip,
    foreign=lambda inj, p: None,  # install hooks any model's nn.Linear
))

# The spike detector too: a flip that leaves the loss finite (a logit times 2^64) spikes
# it instead (measured: 4.1e16 at step 40); on the clean toy run it never fires.
RERUN_GUARD = {"mode": "skip", "spike": "skip", "rerun": True}


def _install_rerun_guard(trainer: Trainer) -> None:
    """A failed or spiking step is run again from the same state: a clean rerun
    (transient: a bit flip) gives its update; one that fails again (persistent: data)
    is skipped."""
    Guard(**RERUN_GUARD).attach(trainer)


FIXES["guard_rerun"] = Fix(
    "guard_rerun", "the guard with rerun=True: a non-finite or spiking step is run again from "
    "the same state; a clean rerun (transient) is applied, one that fails again skipped",
    lambda c: {}, _install_rerun_guard, sop_step="data")


__all__ = ["RERUN_GUARD", "flip_bit", "linears"]
