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
           **params) -> Injection:
    """Apply a fault to a model, optimizer and batch source that nanlab did not create.

    Changes to the model and optimizer happen in place now; data faults and LR changes
    happen when you call ``injection.batches(step)``, once per step. ``inputs`` /
    ``labels`` name the float input and the integer labels in your batch (a dict key, a
    dataclass field or a tuple index) when the defaults (first float tensor, last
    integer tensor) do not fit.

    >>> inj = inject("nan_input", batches=lambda i: (torch.randn(4, 3), torch.zeros(4).long()),
    ...              at_step=2)
    >>> torch.isnan(inj.batches(2)[0]).any().item()
    True
    """
    fault = get_fault(name)
    p = fault.resolve(**params)
    if fault.foreign is None:
        raise NanlabError(f"fault {name!r} needs the built-in model's switches ({fault.needs}); "
                          "it cannot be applied to a foreign model")
    inj = Injection(model, optimizer, batches, inputs=inputs, labels=labels)
    fault.install(inj, p)
    fault.foreign(inj, p)
    inj.notes.append(f"{name}: {fault.summary}")
    return inj
