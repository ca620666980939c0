"""The tracer behind ``locate``: every non-finite tensor of one training step, in order.

Hooks on modules and parameters, optimizer step hooks and a ``TorchDispatchMode`` that
checks the result of every aten op; active only while ``locate`` replays one step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nanlab.layers.half_matmul import run_op
from nanlab.train.batches import named_tensors
from nanlab.train.trainer import StepInfo, Trainer

PASSES = ("data", "forward", "loss", "backward", "optimizer")
MAX_EVENTS = 20
ROOT = "(model)"  # the name shown for the model itself (its qualified name is "")


# ---------------------------------------------------------------------------------------
# Events: one non-finite tensor seen at one point of the replayed step
# ---------------------------------------------------------------------------------------
@dataclass
class Event:
    """A non-finite tensor, numbered in the order the replayed step produced it.

    ``op`` is set for op-level events (an aten op's result, seen by the dispatch mode);
    module-level events (hooks) name the ``tensor``: ``input[0]``, ``output``,
    ``grad_output[0]``, ``grad_input[0]``, ``weight.grad``, ``exp_avg_sq``, ``loss``...

    :func:`locate` makes them; ``Location.events`` lists them.

    >>> e = Event(seq=0, pass_name="forward", module="blocks.0.attn.softmax",
    ...           module_type="Softmax", tensor="output", shape=[2, 4], dtype="torch.float16",
    ...           finite=6, posinf=0, neginf=0, nan=2)
    >>> e.numel, e.has_nan, e.has_inf
    (8, True, False)
    """

    seq: int
    pass_name: str
    module: str | None
    module_type: str | None
    tensor: str
    shape: list[int]
    dtype: str
    finite: int
    posinf: int
    neginf: int
    nan: int
    op: str | None = None
    param: str | None = None  # the full parameter name, for gradients and optimizer state
    node: str | None = None  # a backward op's autograd node (LogBackward0): whose derivative

    @property
    def numel(self) -> int:
        return self.finite + self.posinf + self.neginf + self.nan

    @property
    def has_inf(self) -> bool:
        return bool(self.posinf or self.neginf)

    @property
    def has_nan(self) -> bool:
        return bool(self.nan)

    def counts(self) -> str:
        """'64 nan of 65536', '3 +inf, 1 -inf of 2048'."""
        parts = [f"{n} {k}" for k, n in (("+inf", self.posinf), ("-inf", self.neginf),
                                           ("nan", self.nan)) if n]
        return f"{', '.join(parts)} of {self.numel}"

    def where(self) -> str:
        module = None
        if self.module == ROOT:
            module = f"the model itself ({self.module_type})"
        elif self.module is not None:
            module = f"module {self.module} ({self.module_type})"
        if self.op is not None:
            inside = f" in {module}" if module else ""
            target = f" on {self.tensor}" if self.tensor != "output" else ""
            node = f" (in {self.node}, the derivative of {self.node_of()})" if self.node else ""
            return f"{self.pass_name}, op {self.op}{node}{target}{inside}"
        return ", ".join(x for x in (self.pass_name, module, self.tensor) if x)

    def node_of(self) -> str | None:
        """The forward function whose derivative a backward op computed, read from its
        autograd node's name ("LogBackward0" -> "log"); None for other events.

        >>> Event(1, "backward", None, None, "output", [2], "float32", 1, 0, 0, 1,
        ...       op="aten.div", node="LogBackward0").node_of()
        'log'
        """
        if not self.node:
            return None
        base = self.node.split("::")[-1]
        base = base[:base.rfind("Backward")] if "Backward" in base else base
        return base.lower() or self.node

    def describe(self) -> str:
        return (f"#{self.seq} {self.where()}: {self.counts()} "
                f"(shape {self.shape}, {self.dtype})")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["pass"] = d.pop("pass_name")
        return d


def _nonfinite_counts(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """(finite, +inf, -inf, nan) counts of a float tensor, or None when all finite."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return None
    t = t.detach()
    if t.element_size() == 1:  # float8: isfinite has no kernel for it; fp32 holds every value
        t = t.float()
    if bool(torch.isfinite(t).all()):
        return None
    counts = torch.stack([torch.isposinf(t).sum(), torch.isneginf(t).sum(),
                          torch.isnan(t).sum()]).tolist()
    posinf, neginf, nan = (int(c) for c in counts)
    return t.numel() - posinf - neginf - nan, posinf, neginf, nan


def _float_leaves(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0]
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]


def _kinds(tensors: list[torch.Tensor]) -> set[str]:
    """Which of '+inf', '-inf', 'nan' occur in any of the tensors."""
    kinds: set[str] = set()
    for t in tensors:
        counts = _nonfinite_counts(t)
        if counts is not None:
            kinds |= {k for k, n in zip(("+inf", "-inf", "nan"), counts[1:], strict=True) if n}
    return kinds


def _key(t: torch.Tensor) -> tuple:
    """Identity of a tensor's values: the same storage, offset, shape and strides."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
        ptr = id(t)
    return ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype


# ---------------------------------------------------------------------------------------
# The tracer: hooks + dispatch mode, active only during the replayed step
# ---------------------------------------------------------------------------------------
class _Tracer(TorchDispatchMode):
    """Numbers, in the order they happen, the non-finite tensors of one training step.

    Module level: the batch, each module's inputs and outputs, ``grad_output`` and
    ``grad_input``, each parameter's gradient, the loss, the grad norm, and the weights
    and optimizer state after ``optimizer.step()``; a tensor already reported is not
    reported again where it is passed on. Op level: every aten op that *made* a kind of
    non-finite value (+inf, -inf, nan) that its inputs did not hold.

    A tensor whose only non-finite values are -inf is taken for an attention mask
    (``masked_fill(mask, -inf)``) and not reported as an event: masks are -inf on
    purpose, on every healthy step. Forward ones are listed in ``masks``.
    """

    def __init__(self, trainer: Trainer, module_backward_hooks: bool = True,
                 ops: bool = True, max_events: int = MAX_EVENTS):
        super().__init__()
        self.trainer, self.ops, self.max_events = trainer, ops, max_events
        self.model, self.optimizer = trainer.model, trainer.optimizer
        self.phase = "data"
        self.stack: list[str] = []  # the modules whose forward is running
        self.seq = 0
        self.events: list[Event] = []  # the first max_events events
        self.n_events = 0
        self.first_tensor: Event | None = None  # the first module-level event
        self.first_op: Event | None = None  # the first op-level event
        self.first_inf: Event | None = None
        self.first_nan: Event | None = None
        self.first_optimizer: Event | None = None  # kept even past max_events
        self.masks: list[str] = []
        self.first_minus_inf: tuple | None = None  # (pass, module, type, op) of an op's -inf
        self._seen: dict[tuple, torch.Tensor] = {}  # keeps the tensors alive: ids stay unique
        self._ptr_names: dict[int, str] = {}
        self._checking = False
        self.handles: list = []
        self.names = {m: (n or ROOT) for n, m in self.model.named_modules()}
        self.param_names = {p: n for n, p in self.model.named_parameters()}
        for m, name in self.names.items():
            self.handles += [
                m.register_forward_pre_hook(self._pre_forward(name), with_kwargs=True),
                m.register_forward_hook(self._post_forward(name), with_kwargs=True),
            ]
            if module_backward_hooks:
                self.handles.append(m.register_full_backward_hook(self._backward(name)))
        for p, name in self.param_names.items():
            if p.requires_grad:
                self.handles.append(p.register_post_accumulate_grad_hook(self._grad(name)))
        self.handles += [self.optimizer.register_step_pre_hook(self._pre_step),
                         self.optimizer.register_step_post_hook(self._post_step)]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self._seen.clear()

    # -- recording -----------------------------------------------------------------
    def _owner(self, param_name: str) -> tuple[str, str]:
        module, _, local = param_name.rpartition(".")
        return module or ROOT, local

    def _type(self, module: str | None) -> str | None:
        if module is None:
            return None
        if module == ROOT:
            return type(self.model).__name__
        try:
            return type(self.model.get_submodule(module)).__name__
        except AttributeError:
            return None

    def record(self, pass_name: str, module: str | None, tensor: str, counts: tuple,
               t: torch.Tensor, op: str | None = None, param: str | None = None) -> Event:
        self.seq += 1
        finite, posinf, neginf, nan = counts
        node = None
        if op is not None and pass_name == "backward":  # whose derivative the op computes
            current = torch._C._current_autograd_node()
            node = current.name() if current is not None else None
        event = Event(self.seq, pass_name, module, self._type(module), tensor, list(t.shape),
                      str(t.dtype).replace("torch.", ""), finite, posinf, neginf, nan, op, param,
                      node)
        self.n_events += 1
        if len(self.events) < self.max_events:
            self.events.append(event)
        if op is None and self.first_tensor is None:
            self.first_tensor = event
        if op is not None and self.first_op is None:
            self.first_op = event
        # claim B1's trace: a -inf in a forward activation may be an attention mask, so
        # there only +inf (or an op that made -inf next to other non-finite values) counts
        inf = posinf or (neginf and not (op is None and pass_name in ("forward", "data")))
        if inf and self.first_inf is None:
            self.first_inf = event
        if event.has_nan and self.first_nan is None:
            self.first_nan = event
        if pass_name == "optimizer" and self.first_optimizer is None:
            self.first_optimizer = event
        return event

    def check(self, pass_name: str, module: str | None, tensor: str, t: torch.Tensor,
              param: str | None = None, strict: bool = False) -> Event | None:
        """Record ``t`` if it holds a non-finite value not reported before.

        ``strict=False`` lets a tensor whose only non-finite values are -inf pass as a mask.
        """
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return None
        key = _key(t)
        if key in self._seen:
            return None
        self._checking = True  # the check's own ops (isfinite uses abs) are not events
        try:
            counts = _nonfinite_counts(t)
        finally:
            self._checking = False
        if counts is None:
            return None
        self._seen[key] = t
        _, posinf, neginf, nan = counts
        if not strict and neginf and not (posinf or nan):
            label = f"{module}.{tensor}" if module else tensor
            if len(self.masks) < self.max_events and label not in self.masks:
                self.masks.append(label)
            return None
        return self.record(pass_name, module, tensor, counts, t, param=param)

    # -- every aten op (the dispatch mode) -----------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        run = partial(run_op, func)  # the Trainer's rule for fp16 on a CPU: the run's numbers
        if (not self.ops or self.phase not in PASSES or self._checking
                or getattr(func, "is_view", False)):
            return run(*args, **kwargs)
        # what the inputs already held, read before the op runs (in-place ops overwrite)
        before = _kinds(_float_leaves((args, kwargs)))
        out = run(*args, **kwargs)
        self._check_op(func, out, before)
        return out

    def _check_op(self, func, out, before: set[str]) -> None:
        """Record the op if it *made* a kind of non-finite value its inputs did not hold:
        exp overflowing to +inf, inf - inf = nan, 0 / 0 = nan. Copies of a value that
        was already there are not new events. Making -inf alone is taken for a mask."""
        leaves = _float_leaves(out)
        made = _kinds(leaves) - before
        if made == {"-inf"} and self.first_minus_inf is None and self.phase in ("forward",
                                                                                "loss"):
            # not an event (a mask is -inf on purpose), but log(0) makes one too: kept
            # so that an op which then turns it into +inf or NaN can be traced to it
            module = self.stack[-1] if self.phase == "forward" and self.stack else None
            op = getattr(getattr(func, "overloadpacket", None), "__name__", str(func))
            self.first_minus_inf = (self.phase, module, self._type(module), f"aten.{op}")
        if not made or made == {"-inf"}:
            return
        total, first = [0, 0, 0, 0], None
        for t in leaves:
            counts = _nonfinite_counts(t) or (t.numel(), 0, 0, 0)
            total = [a + b for a, b in zip(total, counts, strict=True)]
            if first is None and counts[0] != t.numel():
                first = t
        module = self.stack[-1] if self.phase == "forward" and self.stack else None
        name = self._ptr_names.get(first.data_ptr(), "output") if self.phase == "optimizer" \
            else "output"
        op = getattr(getattr(func, "overloadpacket", None), "__name__", str(func))
        self.record(self.phase, module, name, tuple(total), first, op=f"aten.{op}")

    # -- hooks -----------------------------------------------------------------------
    def _pre_forward(self, name: str) -> Callable:
        def hook(module, args, kwargs):
            if not self.stack:
                self.phase = "forward"
            for label, t in [*named_tensors(args, "input"), *named_tensors(kwargs, "input")]:
                self.check("forward", name, label, t)
            self.stack.append(name)
        return hook

    def _post_forward(self, name: str) -> Callable:
        def hook(module, args, kwargs, output):
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
            for label, t in named_tensors(output, "output"):
                self.check("forward", name, label, t)
            if not self.stack:
                self.phase = "loss"  # the model has returned: what follows is the loss
        return hook

    def _backward(self, name: str) -> Callable:
        def hook(module, grad_input, grad_output):
            for label, t in named_tensors(grad_output, "grad_output"):
                self.check("backward", name, label, t, strict=True)
            for label, t in named_tensors(grad_input, "grad_input"):
                self.check("backward", name, label, t, strict=True)
        return hook

    def _grad(self, param_name: str) -> Callable:
        module, local = self._owner(param_name)

        def hook(p):
            self.check("backward", module, f"{local}.grad", p.grad, param=param_name,
                       strict=True)
        return hook

    def check_batch(self, batch: Any) -> None:
        prefix = "" if dataclasses.is_dataclass(batch) or isinstance(batch, dict) else "batch"
        for label, t in named_tensors(batch, prefix):
            # a batch may carry an additive attention mask of -inf: that one is on purpose
            self.check("data", None, label, t, strict="mask" not in label.lower())
        self.phase = "forward"

    def check_loss(self, loss: Any) -> None:
        for label, t in named_tensors(loss, "loss"):
            self.check("loss", None, label, t, strict=True)
        self.phase = "backward"

    def check_grad_norm(self, trainer: Trainer, info: StepInfo) -> None:
        if info.grad_norm is not None:
            self.check("backward", None, "grad_norm", info.grad_norm, strict=True)
        self.phase = "update"  # GradScaler bookkeeping: not watched outside optimizer.step

    def _pre_step(self, optimizer, args, kwargs) -> None:
        self.phase = "optimizer"
        self._ptr_names = {}
        for p, name in self.param_names.items():
            self._ptr_names[p.data_ptr()] = name
            for k, v in optimizer.state.get(p, {}).items():
                if isinstance(v, torch.Tensor) and v.numel():
                    self._ptr_names[v.data_ptr()] = f"{k} of {name}"

    def _post_step(self, optimizer, args, kwargs) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                name = self.param_names.get(p, f"param[{id(p)}]")
                module, local = self._owner(name)
                for k, v in optimizer.state.get(p, {}).items():
                    if isinstance(v, torch.Tensor):
                        self.check("optimizer", module, k, v, param=name, strict=True)
                self.check("optimizer", module, local, p, param=name, strict=True)
        self.phase = "after"
