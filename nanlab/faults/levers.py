"""The levers a fault pulls on a run that may not be nanlab's: the batches, the LR, the
weights, the norms. :class:`Injection` holds them; :func:`nanlab.faults.inject` makes one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from nanlab.batches import replace_tensor, tensor_at, tensor_paths
from nanlab.errors import NanlabError
from nanlab.norms import norm_modules


# ---------------------------------------------------------------------------------------
# Where a fault reaches into a run: the batch source, the optimizer's LR, the weights.
# ---------------------------------------------------------------------------------------
def _find(batch: Any, key: str | int | None, want_float: bool):
    """The (path, tensor) in a batch: a named field, a dict key, a tuple index, or by
    default the first float tensor (inputs) or the last integer tensor (labels) of the
    batch's own items, else of the tensors nested deeper (nanlab.batches walks them)."""
    if key is not None:
        tensor = tensor_at(batch, (key,))
        if want_float and not tensor.is_floating_point():
            raise NanlabError(f"this fault writes a non-finite value into a floating-point "
                              f"input; inputs={key!r} is a {tensor.dtype} tensor (integer "
                              "ids cannot hold NaN): name a float tensor, such as the "
                              "features or inputs_embeds")
        return (key,), tensor
    every = list(tensor_paths(batch))
    for pool in ([(p, t) for p, t in every if len(p) <= 1], every):
        floats = [(p, t) for p, t in pool if t.is_floating_point()]
        ints = [(p, t) for p, t in pool if not t.is_floating_point()]
        found = floats[:1] if want_float else ints[-1:]
        if found:
            return found[0]
    kind = "floating-point input" if want_float else "integer label"
    raise NanlabError(f"this fault needs a batch with a {kind} tensor; got "
                      f"{type(batch).__name__}; name it with inputs=/labels=")


class Injection:
    """A fault hooked into a model, an optimizer and a batch source.

    ``batches(step)`` returns the (possibly corrupted) batch of that step and applies
    any time-dependent change (an LR jump) first: call it once per step.
    :func:`inject` makes one.

    >>> from nanlab.faults import inject
    >>> source = lambda i: (torch.ones(4, 3), torch.zeros(4).long())   # (inputs, labels)
    >>> injection = inject("nan_input", batches=source, at_step=2)
    >>> [bool(injection.batches(i)[0].isnan().any()) for i in range(4)]
    [False, False, True, False]
    """

    def __init__(self, model: nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None,
                 batches: Callable[[int], Any] | None = None,
                 inputs: str | int | None = None, labels: str | int | None = None,
                 scheduler=None):
        self.model, self.optimizer, self.source = model, optimizer, batches
        self.scheduler = scheduler
        self.inputs, self.labels = inputs, labels
        self.batch_faults: list[tuple[int, Callable[[Any], Any]]] = []
        self.step_hooks: list[Callable[[int], None]] = []
        self.notes: list[str] = []

    def batches(self, step: int) -> Any:
        self.before_step(step)
        return self.corrupt(step, self.source(step))

    def before_step(self, step: int) -> None:
        for hook in self.step_hooks:
            hook(step)

    def corrupt(self, step: int, batch: Any) -> Any:
        for at, fn in self.batch_faults:
            if step == at:
                batch = fn(batch)
        return batch

    # -- levers ----------------------------------------------------------------------
    def on_batch(self, at_step: int, fn: Callable[[Any], Any]) -> None:
        self._need("batches", self.source)
        self.batch_faults.append((at_step, fn))

    def edit_inputs(self, at_step: int, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        def apply(batch):
            key, x = _find(batch, self.inputs, want_float=True)
            return replace_tensor(batch, key, fn(x.clone()))
        self.on_batch(at_step, apply)

    def edit_labels(self, at_step: int, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        def apply(batch):
            key, y = _find(batch, self.labels, want_float=False)
            return replace_tensor(batch, key, fn(y.clone()))
        self.on_batch(at_step, apply)

    def set_lr_factor(self, factor: float, from_step: int = 0, until_step: int | None = None):
        """Multiply the optimizer's LR by ``factor`` on steps [from_step, until_step)."""
        self._need("optimizer", self.optimizer)
        state = {"on": False}

        def hook(step: int) -> None:
            want = from_step <= step and (until_step is None or step < until_step)
            if want != state["on"]:
                k = factor if want else 1.0 / factor
                for group in self.optimizer.param_groups:
                    group["lr"] *= k
                if self.scheduler is not None:
                    self.scheduler.base_lrs = [lr * k for lr in self.scheduler.base_lrs]
                state["on"] = want
        self.step_hooks.append(hook)

    def set_lr(self, lr: float) -> None:
        """Train at ``lr`` from the first step on, whatever the optimizer was given."""
        self._need("optimizer", self.optimizer)
        self.set_lr_factor(lr / self.optimizer.param_groups[0]["lr"])

    def scale_weights(self, factor: float) -> int:
        """Multiply every Linear / Embedding / Conv weight by ``factor`` (a bad init)."""
        self._need("model", self.model)
        n = 0
        with torch.no_grad():
            for m in self.model.modules():
                if isinstance(m, (nn.Linear, nn.Embedding, nn.modules.conv._ConvNd)):
                    m.weight.mul_(factor)
                    n += 1
        return n

    def set_norm_eps(self, eps: float) -> int:
        """Set the eps of every normalisation module, whatever its field is called
        (:func:`nanlab.norms.norm_modules`: torch's, Hugging Face's, hand-written)."""
        self._need("model", self.model)
        n = 0
        for _, m, attr in norm_modules(self.model):
            setattr(m, attr, eps)
            n += 1
        if n == 0:
            raise NanlabError("this model has no normalisation module with an eps to change")
        return n

    def _need(self, what: str, value) -> None:
        if value is None:
            raise NanlabError(f"this fault needs {what}=...; pass it to inject()")
