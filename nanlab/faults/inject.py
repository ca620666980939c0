"""Where a fault reaches into a run that may not be nanlab's: the batches, the LR, the weights.

:func:`inject` applies a catalogued fault to any model, optimizer and batch source;
the :class:`Injection` it returns holds the levers the faults pull.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import get_fault
from nanlab.faults.levers import Injection

__all__ = ["Injection", "inject"]  # Injection is re-exported: its home is nanlab.faults.levers


def inject(name: str, *, model: nn.Module | None = None,
           optimizer: torch.optim.Optimizer | None = None,
           batches: Callable[[int], Any] | None = None,
           inputs: str | int | None = None, labels: str | int | None = None,
           scheduler=None, **params) -> Injection:
    """Apply a fault to a model, optimizer and batch source that nanlab did not create.

    Changes to the model and optimizer happen in place now; data faults and LR changes
    happen when you call ``injection.batches(step)``, once per step. ``inputs`` /
    ``labels`` name the float input and the integer labels in your batch (a dict key, a
    dataclass field or a tuple index) when the defaults (first float tensor, last
    integer tensor) do not fit. ``scheduler`` is your LR scheduler, for the faults that
    act on the schedule (``no_warmup``, ``resume_reset_schedule``).

    What the fault needs is checked first, before anything changes: a fault that cannot
    happen on this model or batch (no norm module, integer ids where a NaN must go, no
    integer labels, an architecture to build) raises a one-line NanlabError now. A data
    fault reads the batch of its step once for that (batch sources are pure functions
    of the step). A fault whose trigger may simply not occur (a zero-variance row, a
    value past fp16's range) warns once if its first forward passes never show it.

    >>> inj = inject("nan_input", batches=lambda i: (torch.randn(4, 3), torch.zeros(4).long()),
    ...              at_step=2)
    >>> torch.isnan(inj.batches(2)[0]).any().item()
    True
    >>> inject("nan_input", batches=lambda i: {"ids": torch.zeros(2, 3).long()})
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: nan_input: the batch of step 40: this fault needs a batch ...
    """
    fault = get_fault(name)
    p = fault.resolve(**params)
    if fault.foreign is None:
        reason = fault.refusal or f"it needs the built-in model's switches ({fault.needs})"
        raise NanlabError(f"fault {name!r} cannot be applied to a foreign model: {reason}")
    inj = Injection(model, optimizer, batches, inputs=inputs, labels=labels,
                    scheduler=scheduler)
    inj.fault = name
    fault.check(inj, p)
    fault.install(inj, p)
    fault.foreign(inj, p)
    inj.notes.append(f"{name}: {fault.summary}")
    return inj
