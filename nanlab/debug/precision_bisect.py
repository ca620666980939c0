"""precision_bisect: which module's precision decides a non-finite fp16 / bf16 step.

diagnose's precision step proves that the run is healthy in fp32, for the whole model.
This names the module. The first bad step is replayed exactly from the checkpoint before
it (the way :func:`nanlab.debug.locate.locate` replays a step), once as the run ran it
(non-finite), then with some modules run in fp32, bisecting the module tree from the top:
the model's children (a container that is never called, a ``ModuleList``, stands for its
own children), then the children of the half that made the step finite, and so on down,
until one module makes it finite and none of its parts alone does. The cost is about
``2 * depth * log2(width)`` single-step replays; a budget (40 replays by default) bounds
it. Nothing assumes nanlab's own module names: the tree is ``named_children``.

A module "in fp32" for one replay: a forward pre-hook (first in line) widens its fp16 /
bf16 inputs to fp32 and turns autocast off, a forward hook (last in line) turns it back
on and rounds its outputs back to the dtypes they had in the run. Inside, every op and
its backward runs in fp32 (the CPU's fp16 GEMM emulation, :mod:`nanlab.layers.half_matmul`,
only acts on fp16 tensors; an emulation that rounds by hand reads
:mod:`nanlab.layers.fp32_region`). The rest of the model sees the same dtypes as in the
run, so a value that does not fit them is still inf at the module's boundary: only a
module around it can decide, and when none inside the model can (the model's output
itself does not fit, or the loss overflows on it), the answer says so. The hooks are
removed after each replay and the model and trainer are checked to be as they were.

NVIDIA Transformer Engine's precision debug tools do this by hand for FP8: the
``DisableFP8GEMM`` feature (NVIDIA/TransformerEngine,
transformer_engine/debug/features/disable_fp8_gemm.py) runs the fprop, dgrad or wgrad
GEMM of the layers a nvidia-dlframework-inspect YAML config names in high precision, and
``DisableFP8Layer`` (disable_fp8_layer.py, now an alias of DisableQuantizationLayer) all
of a layer's GEMMs. There the user picks the layers; here the replays pick them.

>>> from nanlab import faults
>>> run = faults.run_fault("softmax_overflow", steps=60, checkpoint_every=10,
...                        stop_when_poisoned=True)  # doctest: +SKIP
>>> print(bisect_precision(run.trainer).line())  # doctest: +SKIP
fp32 in blocks.1.attn.softmax alone makes step 26 finite (13 replays)
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from nanlab.debug.locate import (
    Location,
    _batch_of,
    _pick_checkpoint,
    _pick_step,
    _prepare,
    _put_back,
    _replay_until,
    _save,
    _state_nonfinite,
    _timeline,
    _trainer_tensors,
)
from nanlab.errors import NanlabError, check_range
from nanlab.layers import fp32_region
from nanlab.train.trainer import Trainer

MAX_REPLAYS = 40
LOW = (torch.float16, torch.bfloat16)
Unit = tuple[str, nn.Module]  # (path in the model, module)


@dataclass
class Bisection:
    """What the bisection found for one step.

    ``verdict``: "module" (fp32 in ``module`` alone makes the step finite; ``parts``
    says why none of its children does alone: "" for a leaf, "own code" when its own
    forward makes the value, else the children needed together), "together" (only
    several of the model's parts together, ``parts``), "model" (only the whole model:
    its own forward code), "loss" (the whole model in fp32 leaves the step non-finite:
    the loss, or the model's output in its run dtype, decides; ``output_fp32`` says
    whether handing the loss the model's output in fp32 makes it finite) or
    "not reproduced" (the replay in the run's precision is finite).

    >>> b = Bisection(step=26, precision="fp16", verdict="module",
    ...               module="blocks.1.attn.softmax", replays=13)
    >>> b.line()
    'fp32 in blocks.1.attn.softmax alone makes step 26 finite (13 replays)'
    """

    step: int
    precision: str
    verdict: str
    module: str | None = None
    parts: list[str] | str = ""
    output_fp32: bool | None = None
    replays: int = 0
    seconds: float = 0.0
    budget_spent: bool = False
    tried: list[tuple[list[str], bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model_restored: bool = True

    @property
    def decided(self) -> bool:
        """True when one module (not the whole model) decides."""
        return self.verdict == "module"

    @property
    def where(self) -> str | None:
        """Where precision decides, in a few words: the module, 'a + b' for parts that
        decide only together, the model's own forward code, the loss; None when the
        failure did not reproduce.

        >>> Bisection(step=3, precision="fp16", verdict="together", parts=["0", "2"]).where
        '0 + 2'
        """
        if self.verdict == "module":
            return self.module
        if self.verdict == "together":
            return " + ".join(self.parts) if isinstance(self.parts, list) else self.parts
        return {"model": "the model's own forward code", "loss": "the loss"}.get(self.verdict)

    def line(self) -> str:
        """The answer in one line (the replay count included)."""
        k = f"({self.replays} replays{', budget spent' if self.budget_spent else ''})"
        n = self.step
        parts = ", ".join(self.parts) if isinstance(self.parts, list) else self.parts
        if self.verdict == "module":
            why = "" if not parts else (
                ", no part of it alone does (its own forward code)" if parts == "own code"
                else f", no part of it alone does ({parts} together)")
            return f"fp32 in {self.module} alone makes step {n} finite{why} {k}"
        if self.verdict == "together":
            return (f"no single module decides: fp32 in {parts} together makes step {n} "
                    f"finite, none of them alone does {k}")
        if self.verdict == "model":
            return (f"no single module decides: only the whole model in fp32 makes step {n} "
                    f"finite (its own forward code, outside its submodules) {k}")
        if self.verdict == "loss":
            after = ("; it is finite once the model's output reaches the loss in fp32"
                     if self.output_fp32 else "; even with the model's output in fp32 "
                     "it is not: the loss itself decides")
            return (f"no module decides: step {n} stays non-finite with the whole model in "
                    f"fp32 and its output in the run's {self.precision}{after} {k}")
        return (f"the replay of step {n} in {self.precision} is finite: the failure does not "
                f"reproduce, nothing to bisect {k}")

    __str__ = line


def bisect_precision(trainer: Trainer, step: int | None = None, *,
                     max_replays: int = MAX_REPLAYS,
                     max_seconds: float | None = None) -> Bisection:
    """Find the module whose precision decides a non-finite step of an fp16 / bf16 run.

    ``step`` defaults to the run's first non-finite step; the trainer needs a checkpoint
    at or before it (``checkpoint_every > 0``). At most ``max_replays`` single-step
    replays (and ``max_seconds``, when given) are spent; when the budget runs out the
    answer is as deep as the bisection got (``budget_spent``). The trainer and the model
    are left as they were (weights, optimizer, RNG, record, hooks); state kept inside
    your own hooks' or callbacks' closures sees the replays (as with ``locate``).

    >>> from nanlab import faults
    >>> run = faults.run_fault("softmax_overflow", steps=60, checkpoint_every=10,
    ...                        stop_when_poisoned=True)  # doctest: +SKIP
    >>> b = bisect_precision(run.trainer)  # doctest: +SKIP
    >>> b.verdict, b.module  # doctest: +SKIP
    ('module', 'blocks.1.attn.softmax')
    """
    if not isinstance(trainer, Trainer):
        raise NanlabError(f"bisect_precision needs a nanlab Trainer (run.trainer); got "
                          f"{type(trainer).__name__}")
    precision = trainer.config.precision
    if precision not in ("fp16", "bf16"):
        why = ("its weights are fp16 themselves (model.half()), there is no autocast to turn "
               "off per module" if precision == "fp16-pure" else "it runs in fp32 already")
        raise NanlabError(f"bisect_precision needs an autocast run (precision 'fp16' or "
                          f"'bf16'); this run's precision is {precision!r}: {why}")
    check_range("max_replays", max_replays, 3, integer=True)
    if max_seconds is not None:
        check_range("max_seconds", max_seconds, 0.0)
    return _Bisector(trainer, step, max_replays, max_seconds).run()


class _Bisector:
    def __init__(self, trainer: Trainer, step: int | None, max_replays: int,
                 max_seconds: float | None):
        self.trainer, self.requested = trainer, step
        self.max_replays, self.max_seconds = max_replays, max_seconds
        self.model = trainer.model
        self.device_type = trainer.device.type
        self.dtypes: dict[int, object] = {}  # id(module) -> its output's dtypes in the run
        self.called: set[int] = set()
        self.seen: dict[tuple, bool] = {}
        self.started = time.perf_counter()

    # -- the frame: pick the step, replay up to it, put everything back -----------------
    def run(self) -> Bisection:
        trainer = self.trainer
        target, row_index = _pick_step(trainer, trainer.record, self.requested)
        rows = _timeline(trainer.record, target, row_index)
        checkpoint, state, _ = _pick_checkpoint(trainer, target)
        hooks_before = _hook_ids(self.model)
        autocast_before = torch.is_autocast_enabled(self.device_type)
        saved = _save(trainer)
        loc = Location(step=target, checkpoint=checkpoint, batch=None,
                       precision=trainer.config.precision)
        try:
            _prepare(trainer)
            trainer.load_state_dict(state)
            target = _replay_until(trainer, checkpoint, target, rows, loc)
            self.row, self.before = rows.get(target), copy.deepcopy(trainer.state_dict())
            self.out = Bisection(step=target, precision=trainer.config.precision,
                                 verdict="not reproduced", notes=list(loc.notes))
            if not loc.reproduced:
                self.out.notes += loc.mismatches[:3]
            self._bisect()
        finally:
            _put_back(trainer, saved)
        out = self.out
        out.seconds = time.perf_counter() - self.started
        out.model_restored = (_no_hook_added(hooks_before, _hook_ids(self.model))
                              and torch.is_autocast_enabled(self.device_type) == autocast_before
                              and not fp32_region.in_fp32_region())
        if not out.model_restored:
            raise NanlabError("bisect_precision did not leave the model as it was (a hook or "
                              "the autocast state changed): please report this as a bug")
        return out

    # -- the search ----------------------------------------------------------------------
    def _bisect(self) -> None:
        out = self.out
        if not self._bad([], record=True):
            return  # not reproduced
        root: Unit = ("", self.model)
        if self._bad([root]):
            out.verdict = "loss"
            out.output_fp32 = not self._bad([root], cast_back=False)
            return
        node = root
        while True:
            units = self._units(node)
            found = self._narrow(units) if units else None
            if found is not None and len(found) == 1:
                node = found[0]
                continue
            if found is None and len(units) > 1 and not self._spent():
                found = self._reduce(units) if not self._bad(units) else None
                parts = [p for p, _ in found] if found else "own code"
            elif found is None and units and not self.out.budget_spent:
                parts = "own code"  # its one part was replayed alone and was not enough
            else:
                parts = [p for p, _ in self._reduce(found)] if found else ""
            if node[0]:
                out.verdict, out.module, out.parts = "module", node[0], parts
            elif isinstance(parts, list) and parts:
                out.verdict, out.module, out.parts = "together", "", parts
            else:
                out.verdict, out.module, out.parts = "model", "", "own code"
            return

    def _narrow(self, units: list[Unit]) -> list[Unit] | None:
        """The smallest run of ``units`` found to make the step finite by halving, or None
        (no half of them alone does; the budget may have run out)."""
        group, known = units, False
        while len(group) > 1 and not self._spent():
            half = len(group) // 2
            first, second = group[:half], group[half:]
            if not self._bad(first):
                group, known = first, True
            elif not self._spent() and not self._bad(second):
                group, known = second, True
            else:
                return group if known else None
        if self._spent() and not known:
            return None
        if len(group) == 1 and not known:
            known = not self._bad(group)
        return group if known else None

    def _reduce(self, group: list[Unit]) -> list[Unit]:
        """Drop each part that the others make the step finite without (one replay per
        part, while the budget lasts): what is left is needed, every part of it."""
        keep = list(group)
        for unit in list(group):
            if len(keep) == 1 or self._spent():
                break
            rest = [u for u in keep if u is not unit]
            if not self._bad(rest):
                keep = rest
        return keep

    def _units(self, node: Unit) -> list[Unit]:
        """The node's children the step calls; an uncalled container (a ModuleList)
        stands for its own children."""
        path, module = node
        found = []
        for name, child in module.named_children():
            full = f"{path}.{name}" if path else name
            if id(child) in self.called:
                found.append((full, child))
            elif any(True for _ in child.children()):
                found += self._units((full, child))
        return found

    def _spent(self) -> bool:
        over = self.out.replays >= self.max_replays or (
            self.max_seconds is not None
            and time.perf_counter() - self.started > self.max_seconds)
        self.out.budget_spent = self.out.budget_spent or over
        return over

    # -- one replay ------------------------------------------------------------------
    def _bad(self, units: list[Unit], *, cast_back: bool = True, record: bool = False) -> bool:
        """Replay the step with ``units`` in fp32: is it non-finite (a non-finite loss or
        grad norm as the trainer counts it, or non-finite weights / optimizer state)?"""
        key = (frozenset(id(m) for _, m in units), cast_back)
        if key in self.seen and not record:
            return self.seen[key]  # a set already replayed (the halving and the reduction)
        self.seen[key] = self._replay(units, cast_back, record)
        return self.seen[key]

    def _replay(self, units: list[Unit], cast_back: bool, record: bool) -> bool:
        trainer = self.trainer
        trainer.load_state_dict(copy.deepcopy(self.before))
        handles, regions = [], []
        if record:
            handles += [m.register_forward_hook(self._recorder(m)) for m in self.model.modules()]
        for _, module in units:
            region = _Region(self.device_type, self.dtypes.get(id(module)) if cast_back
                             else None)
            regions.append(region)
            handles.append(module.register_forward_pre_hook(region.enter, prepend=True,
                                                            with_kwargs=True))
            handles.append(module.register_forward_hook(region.leave, always_call=True))
        try:
            info = trainer.train_step(_batch_of(trainer, self.row), record_layers=False)
            bad = not info.finite or _state_nonfinite(_trainer_tensors(trainer))
        except Exception as e:  # noqa: BLE001 - a replay that crashes is not finite
            bad = True
            self.out.notes.append(f"replay with {[p for p, _ in units] or 'nothing'} in fp32 "
                                  f"crashed: {type(e).__name__}: {str(e).splitlines()[0]}")
        finally:
            for h in handles:
                h.remove()
            for region in regions:
                region.close()
        self.out.replays += 1
        self.out.tried.append(([p or "(model)" for p, _ in units], not bad))
        return bad

    def _recorder(self, module: nn.Module):
        def hook(mod, args, output):
            self.called.add(id(module))
            self.dtypes.setdefault(id(module), _dtypes(output))
        return hook


class _Region:
    """One module's fp32 region: widened inputs, autocast off, outputs rounded back."""

    def __init__(self, device_type: str, dtypes):
        self.device_type, self.dtypes = device_type, dtypes
        self.open: list[torch.autocast] = []

    def enter(self, module, args, kwargs):
        ctx = torch.autocast(self.device_type, enabled=False)
        ctx.__enter__()
        self.open.append(ctx)
        fp32_region.enter()
        return _widen(args), _widen(kwargs)

    def leave(self, module, args, output):
        if self.open:  # always_call: also after an error in forward
            self.open.pop().__exit__(None, None, None)
            fp32_region.leave()
        return _cast_like(output, self.dtypes) if output is not None else None

    def close(self) -> None:
        while self.open:  # a forward that never reached its hooks' end
            self.open.pop().__exit__(None, None, None)
            fp32_region.leave()


def _widen(x):
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in LOW else x
    if isinstance(x, dict):
        return {k: _widen(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)) and not hasattr(x, "_fields"):
        return type(x)(_widen(v) for v in x)
    return x


def _dtypes(x):
    """The dtypes of a module output's floating tensors, in its shape."""
    if isinstance(x, torch.Tensor):
        return x.dtype if x.is_floating_point() else None
    if isinstance(x, dict):
        return {k: _dtypes(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [_dtypes(v) for v in x]
    return None


def _cast_like(x, dtypes):
    """``x`` with each floating tensor cast to the dtype it had in the run."""
    if dtypes is None:
        return x
    if isinstance(x, torch.Tensor):
        return x.to(dtypes) if isinstance(dtypes, torch.dtype) and x.is_floating_point() \
            and x.dtype != dtypes else x
    if isinstance(x, dict) and isinstance(dtypes, dict):
        for k in list(x):  # in place: a ModelOutput keeps its class and attributes
            x[k] = _cast_like(x[k], dtypes.get(k))
        return x
    if isinstance(x, (tuple, list)) and isinstance(dtypes, list) and len(x) == len(dtypes):
        items = [_cast_like(v, d) for v, d in zip(x, dtypes, strict=True)]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    return x


HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks",
              "_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs",
              "_forward_hooks_always_called")


def _hook_ids(model: nn.Module) -> dict[int, list[set]]:
    """The keys of every hook dict of every module."""
    return {id(m): [set(getattr(m, n, {})) for n in HOOK_DICTS] for m in model.modules()}


def _no_hook_added(before: dict, after: dict) -> bool:
    """No module has a hook it did not have before (the model's own hooks may have
    removed themselves during the replays: a fault's watch does after 20 passes)."""
    return before.keys() == after.keys() and all(
        new <= old for m in after for new, old in zip(after[m], before[m], strict=True))


__all__ = ["MAX_REPLAYS", "Bisection", "bisect_precision"]
