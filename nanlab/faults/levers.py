"""The levers a fault pulls on a run that may not be nanlab's: the batches, the LR, the
weights, the norms. :class:`Injection` holds them; :func:`nanlab.faults.inject` makes one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn as nn

from nanlab.errors import NanlabError
from nanlab.layers.norms import norm_modules
from nanlab.train.batches import replace_tensor, tensor_at, tensor_paths


# ---------------------------------------------------------------------------------------
# Where a fault reaches into a run: the batch source, the optimizer's LR, the weights.
# ---------------------------------------------------------------------------------------
def _find(batch: Any, key: str | int | None, want_float: bool):
    """The (path, tensor) in a batch: a named field, a dict key, a tuple index, or by
    default the first float tensor (inputs) or the last integer tensor (labels; a bool
    mask is not one) of the batch's own items, else of the tensors nested deeper
    (nanlab.train.batches walks them)."""
    if key is not None:
        tensor = tensor_at(batch, (key,))
        if want_float and not tensor.is_floating_point():
            raise NanlabError(f"this fault writes a non-finite value into a floating-point "
                              f"input; inputs={key!r} is a {tensor.dtype} tensor (integer "
                              "ids cannot hold NaN): name a float tensor, such as the "
                              "features or inputs_embeds")
        if not want_float and not _is_int(tensor):
            raise NanlabError(f"this fault edits integer class labels; labels={key!r} is a "
                              f"{tensor.dtype} tensor: name the integer targets")
        return (key,), tensor
    every = list(tensor_paths(batch))
    for pool in ([(p, t) for p, t in every if len(p) <= 1], every):
        floats = [(p, t) for p, t in pool if t.is_floating_point()]
        ints = [(p, t) for p, t in pool if _is_int(t)]
        found = floats[:1] if want_float else ints[-1:]
        if found:
            return found[0]
    kind = "a floating-point input" if want_float else "an integer label"
    held = ", ".join(sorted({str(t.dtype).removeprefix("torch.") for _, t in every})) or "none"
    why = "; integer ids cannot hold NaN" if want_float and every else ""
    raise NanlabError(f"this fault needs a batch with {kind} tensor; got "
                      f"{type(batch).__name__}; name it with "
                      f"{'inputs=' if want_float else 'labels='} (its tensors: {held}{why})")


def _is_int(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


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
                 scheduler=None, trainer=None):
        self.model, self.optimizer, self.source = model, optimizer, batches
        self.scheduler = scheduler
        self.trainer = trainer  # the built-in run's Trainer, for a fault's on_toy levers
        self.inputs, self.labels = inputs, labels
        self.batch_faults: list[tuple[int, Callable[[Any], Any]]] = []
        self.step_hooks: list[Callable[[int], None]] = []
        self.batch_maps: list[Callable[[Any], Any]] = []
        self.handles: list = []  # the module hooks a fault added; remove() takes them out
        self.notes: list[str] = []
        self.fault = "this fault"  # inject() names it, for messages

    def batches(self, step: int) -> Any:
        self.before_step(step)
        return self.corrupt(step, self.source(step))

    def before_step(self, step: int) -> None:
        for hook in self.step_hooks:
            hook(step)

    def corrupt(self, step: int, batch: Any) -> Any:
        for fn in self.batch_maps:
            batch = fn(batch)
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
        """Multiply the LR of every update on steps [from_step, until_step) by ``factor``:
        a factor on whatever LR the optimizer and its schedule give at that step
        (:mod:`nanlab.optim.lr_lever`), so no scheduler undoes it and none sees it."""
        from nanlab.optim.lr_lever import lr_lever, set_lr_factor

        self._need("optimizer", self.optimizer)
        lr_lever(self.optimizer)  # refuses now, at inject time, an optimizer it cannot steer
        name = f"injection-{id(self)}-{len(self.step_hooks)}"  # one lever entry per call

        def hook(step: int) -> None:
            on = from_step <= step and (until_step is None or step < until_step)
            set_lr_factor(self.optimizer, name, factor if on else 1.0)
        self.step_hooks.append(hook)

    def set_lr(self, lr: float) -> None:
        """Train at ``lr`` where the optimizer was given its own (the LR a scheduler
        started from, ``initial_lr``): the schedule keeps its shape around it."""
        self._need("optimizer", self.optimizer)
        group = self.optimizer.param_groups[0]
        self.set_lr_factor(lr / group.get("initial_lr", group["lr"]))

    def scale_weights(self, factor: float) -> int:
        """Multiply every Linear / Embedding / Conv weight by ``factor``."""
        self._need("model", self.model)
        n = 0
        with torch.no_grad():
            for m in self.model.modules():
                if isinstance(m, (nn.Linear, nn.Embedding, nn.modules.conv._ConvNd)):
                    m.weight.mul_(factor)
                    n += 1
        return n

    def set_gain(self, gain: float, only: tuple[type, ...] | None = None) -> int:
        """Rescale every matmul weight so that its std x sqrt(fan_in) is ``gain``: each
        layer then multiplies its input's scale by about ``gain``, whatever the model's
        own init was (an embedding's fan-in is 1: its std becomes ``gain``). A rescale,
        not a redraw: the pattern and the RNG stay the user's; a weight that is all one
        value (a zero init) is drawn from N(0, 1) with a fixed seed first. ``only``: the
        layer types to touch (those a cure can re-initialise)."""
        self._need("model", self.model)
        weights = [(w, fan_in) for m, w, fan_in in matmul_weights(self.model)
                   if only is None or isinstance(m, only)]
        if not weights:
            raise NanlabError(f"{self.fault}: this model has no Linear, Conv, Embedding or "
                              "attention projection weight to give a large init")
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for w, fan_in in weights:
                if float(w.std()) == 0.0:
                    w.copy_(torch.randn(w.shape, generator=g))
                w.mul_(gain / (float(w.std()) * math.sqrt(fan_in)))
        return len(weights)

    def set_norm_eps(self, eps: float) -> int:
        """Set the eps of every normalisation module, whatever its field is called
        (:func:`nanlab.layers.norms.norm_modules`: torch's, Hugging Face's, hand-written)."""
        self._need("model", self.model)
        n = 0
        for _, m, attr in norm_modules(self.model):
            setattr(m, attr, eps)
            n += 1
        if n == 0:
            raise NanlabError(f"{self.fault}: this model has no normalisation module (a "
                              "LayerNorm, RMSNorm, GroupNorm, BatchNorm or a *Norm* class with "
                              "an eps field); eps has nothing to act on")
        return n

    # -- looking before the run ------------------------------------------------------
    def preview(self, step: int) -> Any:
        """The clean batch of ``step``, read once before training so a fault can refuse a
        batch of the wrong kind now, not mid-run. A batch source is a pure function of
        the step (nanlab's contract: a replay reads the same batch), so this read changes
        nothing the run will see."""
        self._need("batches", self.source)
        try:
            return self.source(step)
        except NanlabError:
            raise
        except Exception as err:  # the user's source: any error it raises, said in a line
            raise NanlabError(f"{self.fault}: batches({step}) raised {type(err).__name__}: "
                              f"{err}; the fault strikes at step {step}: choose a step your "
                              "source has") from None

    def check_batch(self, step: int, want_float: bool) -> None:
        """Refuse now a batch without the tensor the fault edits at ``step``."""
        batch = self.preview(step)
        try:
            _find(batch, self.inputs if want_float else self.labels, want_float)
        except (NanlabError, KeyError, IndexError, AttributeError) as err:
            msg = err.args[0] if isinstance(err, NanlabError) else f"no field {err}"
            raise NanlabError(f"{self.fault}: the batch of step {step}: {msg}") from None

    def map_batches(self, fn: Callable[[Any], Any]) -> None:
        """Apply ``fn`` to every batch (a pure-fp16 run's inputs cast to fp16)."""
        self._need("batches", self.source)
        self.batch_maps.append(fn)

    # -- hooks on the model, and a warning when the fault's condition never shows ---------
    def hook(self, handle) -> None:
        self.handles.append(handle)

    def remove(self) -> None:
        """Take out every module hook the fault added (the weights it changed stay)."""
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def watch(self, warning: Callable[[], str], steps: int, modules: Iterable[nn.Module] = (),
              seen: Callable[[nn.Module, tuple], bool] | None = None) -> Watch:
        """Warn once when the fault's firing condition has not shown by the model's
        ``steps``-th forward pass: absent from this model or its batches, the run would
        go on clean without saying so. The condition shows when ``seen(module, inputs)``
        is true in a forward pre-hook on ``modules``, or when a fault's own hook calls
        ``.saw()`` on the returned watch. Its hooks go once it has decided."""
        self._need("model", self.model)
        w = Watch()

        def look(module, args):
            if w.active and seen(module, args):
                w.saw()

        def count(module, args, output):
            w.calls += 1
            if w.active and w.calls >= steps:
                w.saw()
                warnings.warn(warning(), RuntimeWarning, stacklevel=2)
        if seen is not None:
            w.handles += [m.register_forward_pre_hook(look) for m in modules]
        w.handles.append(self.model.register_forward_hook(count))
        self.handles += w.handles
        return w

    def _need(self, what: str, value) -> None:
        if value is None:
            raise NanlabError(f"this fault needs {what}=...; pass it to inject()")


class Watch:
    """A fault's firing condition, looked for in the first forward passes
    (:meth:`Injection.watch`)."""

    def __init__(self):
        self.active, self.calls, self.handles = True, 0, []

    def saw(self) -> None:
        """The condition showed (or the watch is over): stop looking."""
        self.active = False
        for h in self.handles:
            h.remove()


def matmul_weights(model: nn.Module) -> list[tuple[nn.Module, torch.Tensor, int]]:
    """(module, weight, fan_in) of every matmul weight: Linear, Conv (torch's own fan-in), an
    Embedding (fan-in 1: one row is read, not a sum), nn.MultiheadAttention's packed or
    separate input projections, Hugging Face's Conv1D (its weight is (in, out))."""
    found = []
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            found.append((m, m.weight, 1))
        elif isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
            found.append((m, m.weight, nn.init._calculate_fan_in_and_fan_out(m.weight)[0]))
        elif isinstance(m, nn.MultiheadAttention):
            for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                w = getattr(m, name, None)
                if w is not None:
                    found.append((m, w, w.shape[1]))
        elif type(m).__name__ == "Conv1D" and getattr(m, "weight", None) is not None \
                and m.weight.dim() == 2:
            found.append((m, m.weight, m.weight.shape[0]))
    return found


__all__ = ["Injection"]  # Watch and matmul_weights serve the family modules
