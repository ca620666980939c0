"""locate: replay the first bad step exactly and name where the first NaN / inf was made.

Claim M4 of the course: find the first non-finite step, then replay that step's input
and model state. Because nanlab runs are deterministic (batches are a pure function of
the step, checkpoints hold weights, optimizer, schedule, loss scale and RNG), the
replay from the nearest checkpoint reproduces the recorded losses bit for bit (on the
same machine and torch version, with the same number of torch threads: a different
thread count changes the order of float sums), and only the replayed step is watched,
with:

- a forward pre-hook and a forward hook on every module (inputs and outputs),
- a full backward hook on every module (``grad_output`` and ``grad_input``),
- a hook on every parameter as its gradient is accumulated,
- a check of the global grad norm, of the loss and of the batch itself,
- optimizer step hooks: the updated weights and the optimizer state (``exp_avg``,
  ``exp_avg_sq``, ...) after the real ``optimizer.step()``,
- a ``TorchDispatchMode`` that checks the result of every aten op, so a value made
  *inside* a module (``exp`` overflowing to inf, then ``inf / inf = nan`` in a naive
  softmax) is seen in the order it happened (claim B1: inf usually comes first).

Why not ``torch.autograd.detect_anomaly``? It watches the backward pass only (there
is no forward mode in PyTorch), it slows every step of the run down by about 2.5-3x
(Lightning issues #12344, #17359) and it raises at the first NaN it meets in
backward, which is often far from where the bad value was made (a NaN input, a
LayerNorm in the forward pass, an Adam update in fp16). ``locate`` costs nothing
while you train: it runs after the fact, on one replayed step, and covers the data,
forward, loss, backward and optimizer. It also answers "a NaN that does not
reproduce after resuming" (Megatron-LM issue #780): every replayed step is compared
with the record, and a mismatch is reported instead of silently ignored.

>>> from nanlab import faults
>>> from nanlab.debug.locate import locate
>>> run = faults.run_fault("nan_input", steps=45, checkpoint_every=10,  # doctest: +SKIP
...                        stop_when_poisoned=True)
>>> loc = locate(run.trainer)  # doctest: +SKIP
>>> loc.pass_name, loc.tensor  # doctest: +SKIP
('data', 'features')
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from nanlab.debug.trace import MAX_EVENTS, PASSES, Event, _Tracer
from nanlab.errors import NanlabError, check_range
from nanlab.runs.record import RunRecord
from nanlab.train.trainer import StepInfo, Trainer


# ---------------------------------------------------------------------------------------
# The answer
# ---------------------------------------------------------------------------------------
@dataclass
class Location:
    """Where the first non-finite value of a step was made, found by an exact replay.

    ``first`` is the first module-level event (a module's input or output, a gradient,
    the loss, the batch, a weight or optimizer-state tensor after the update);
    ``first_op`` the first aten op whose result was non-finite (it can sit inside a
    module, before the module's output shows it). ``pass_name``, ``module``,
    ``module_type``, ``tensor``, ``shape`` and ``counts`` read from ``first`` (or from
    the crash, when the step raised before any non-finite value).

    :func:`locate` returns one:

    >>> from nanlab import faults
    >>> run = faults.run_fault("nan_input", steps=45, checkpoint_every=10,
    ...                        stop_when_poisoned=True)  # doctest: +SKIP
    >>> loc = locate(run.trainer)  # doctest: +SKIP
    >>> loc.found, loc.step, loc.pass_name, loc.tensor  # doctest: +SKIP
    (True, 40, 'data', 'features')
    >>> print(loc.report())  # doctest: +SKIP
    """

    step: int
    checkpoint: int
    batch: int | None
    precision: str
    requested_step: int | None = None
    first: Event | None = None
    first_op: Event | None = None
    first_inf: Event | None = None
    first_nan: Event | None = None
    first_optimizer: Event | None = None  # the first non-finite weight / optimizer state
    data_nonfinite: bool = False
    error: str | None = None
    error_pass: str | None = None
    error_module: str | None = None
    loss: float | None = None
    loss_scale: float | None = None
    skipped: bool = False
    replayed_steps: int = 0
    reproduced: bool = True
    mismatches: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    n_events: int = 0
    masks: list[str] = field(default_factory=list)
    first_minus_inf: tuple | None = None  # (pass, module, type, op): -inf alone, as log(0)
    notes: list[str] = field(default_factory=list)
    trainer_restored: bool = True

    # -- the headline, read from the first event (or the crash) ----------------------------
    @property
    def found(self) -> bool:
        """True when the replayed step made a non-finite value or crashed."""
        return self.first is not None or self.first_op is not None or self.error is not None

    @property
    def pass_name(self) -> str | None:
        """'data', 'forward', 'loss', 'backward' or 'optimizer'."""
        head = self.first or self.first_op
        return head.pass_name if head else self.error_pass

    @property
    def module(self) -> str | None:
        head = self.first or self.first_op
        return head.module if head else self.error_module

    @property
    def module_type(self) -> str | None:
        head = self.first or self.first_op
        return head.module_type if head else None

    @property
    def tensor(self) -> str | None:
        return self.first.tensor if self.first else None

    @property
    def shape(self) -> list[int] | None:
        return self.first.shape if self.first else None

    @property
    def counts(self) -> dict | None:
        """{'finite', 'posinf', 'neginf', 'nan', 'numel'} of the first tensor."""
        e = self.first
        if e is None:
            return None
        return {"finite": e.finite, "posinf": e.posinf, "neginf": e.neginf, "nan": e.nan,
                "numel": e.numel}

    @property
    def inf_before_nan(self) -> bool | None:
        """Claim B1: did an inf appear before any NaN, in the order of events?

        True: an inf came first (or no NaN at all); False: a NaN came first, or no inf at
        all; None: nothing non-finite, or inf and NaN first appear in the same event.
        """
        inf, nan = self.first_inf, self.first_nan
        if inf is None and nan is None:
            return None
        if nan is None:
            return True
        if inf is None:
            return False
        if inf.seq == nan.seq:
            return None
        return inf.seq < nan.seq

    @property
    def backward_only(self) -> bool:
        """True when the first non-finite value of the step is a gradient: the forward
        pass and the loss were finite (a single-where log, a hand-written norm at 0)."""
        heads = [e for e in (self.first, self.first_op) if e is not None]
        head = min(heads, key=lambda e: e.seq) if heads else None
        return head is not None and head.pass_name == "backward" and not self.data_nonfinite \
            and self.loss is not None and math.isfinite(self.loss)

    # -- reading it ----------------------------------------------------------------------
    def report(self, max_events: int = 8) -> str:
        """A few lines a learner reads; the same text as ``str(location)``."""
        if self.checkpoint == self.step:
            origin = f"replayed from checkpoint {self.checkpoint}"
        else:
            origin = (f"replayed from checkpoint {self.checkpoint} through "
                      f"{self.replayed_steps} earlier step(s)")
        head = f"step {self.step} ({origin}, batch {self.batch}, {self.precision}): "
        lines = []
        if self.first is not None:
            e = self.first
            lines.append(head + f"first non-finite value in {e.where()}: {e.counts()} "
                         f"(shape {e.shape}, {e.dtype})")
        elif self.first_op is not None:
            lines.append(head + f"first non-finite value in {self.first_op.where()}: "
                         f"{self.first_op.counts()}")
        elif self.error is None:
            lines.append(head + "no non-finite value: every tensor of this step was finite")
        if self.error is not None:
            where = f" in module {self.error_module}" if self.error_module else ""
            crash = f"crashed in {self.error_pass}{where}: {self.error}"
            lines.append(f"  then {crash}" if lines else head + crash)
        if self.first_op is not None and self.first is not None:
            label = "made by" if self.first_op.seq < self.first.seq else "first op to make one"
            lines.append(f"  {label}: {self.first_op.describe()}")
        if self.backward_only:
            op = self.first_op.node_of() if self.first_op is not None else None
            lines.append("  backward only: every forward value and the loss were finite; the "
                         "first non-finite value is a gradient"
                         + (f", made by the derivative of {op}" if op else ""))
        if self.first is not None and self.first.tensor == "grad_norm":
            lines.append("  every gradient is finite: the sum of their squares overflowed while "
                         "computing the global grad norm (a gradient tensor whose norm is "
                         "above ~1.8e19)")
        if self.first_optimizer is not None and self.first is not None \
                and self.first.pass_name != "optimizer":
            lines.append(f"  the update then wrote a non-finite value: "
                         f"{self.first_optimizer.describe()}")
        lines.append(f"  inf before nan: {self._b1_text()}")
        if self.data_nonfinite:
            lines.append("  the batch itself holds non-finite values: fix the data first")
        if self.skipped:
            lines.append("  the optimizer update of this step was skipped"
                         + (f" (loss scale {self.loss_scale:g})" if self.loss_scale else ""))
        if self.reproduced:
            this = "" if self.error else " and this one"
            lines.append(f"  replay exact: {self.replayed_steps} earlier step(s){this} "
                         "matched the recorded loss and grad norm bit for bit")
        else:
            lines.append("  REPLAY MISMATCH (the run is not reproducible from its checkpoint; "
                         "compare Megatron-LM #780):")
            lines += [f"    {m}" for m in self.mismatches[:5]]
        lines += [f"  note: {n}" for n in self.notes]
        if self.masks:
            lines.append(f"  masks (-inf on purpose, not counted): {', '.join(self.masks[:3])}"
                         + (" ..." if len(self.masks) > 3 else ""))
        if self.events:
            lines.append(f"  events in order ({min(len(self.events), max_events)} of "
                         f"{self.n_events}):")
            lines += [f"    {e.describe()}" for e in self.events[:max_events]]
        return "\n".join(lines)

    def _b1_text(self) -> str:
        b1 = self.inf_before_nan
        inf, nan = self.first_inf, self.first_nan
        if inf is None and nan is None:
            return "n/a (nothing non-finite)"
        if b1 is None:
            return f"together (both first appear in event #{inf.seq})"
        if b1:
            after = f", nan first at #{nan.seq}" if nan else ", no nan"
            return f"yes (inf first at #{inf.seq}{after})"
        after = f", inf first at #{inf.seq}" if inf else ", no inf at all"
        return f"no (nan first at #{nan.seq}{after})"

    def __str__(self) -> str:
        return self.report()

    def to_dict(self) -> dict:
        """JSON-safe: non-finite floats become None, events become dicts."""
        def num(x):
            return x if x is None or math.isfinite(x) else None

        return {
            "step": self.step, "requested_step": self.requested_step,
            "checkpoint": self.checkpoint, "batch": self.batch, "precision": self.precision,
            "found": self.found, "pass": self.pass_name, "module": self.module,
            "module_type": self.module_type, "tensor": self.tensor, "shape": self.shape,
            "counts": self.counts,
            "first": self.first.to_dict() if self.first else None,
            "first_op": self.first_op.to_dict() if self.first_op else None,
            "first_inf": self.first_inf.to_dict() if self.first_inf else None,
            "first_nan": self.first_nan.to_dict() if self.first_nan else None,
            "first_optimizer": self.first_optimizer.to_dict() if self.first_optimizer else None,
            "inf_before_nan": self.inf_before_nan,
            "data_nonfinite": self.data_nonfinite,
            "error": self.error, "error_pass": self.error_pass,
            "error_module": self.error_module,
            "loss": num(self.loss), "loss_is_nan": self.loss is not None and math.isnan(self.loss),
            "loss_scale": self.loss_scale, "skipped": self.skipped,
            "replayed_steps": self.replayed_steps, "reproduced": self.reproduced,
            "mismatches": list(self.mismatches),
            "events": [e.to_dict() for e in self.events], "n_events": self.n_events,
            "masks": list(self.masks), "notes": list(self.notes),
            "trainer_restored": self.trainer_restored,
        }


# ---------------------------------------------------------------------------------------
# locate
# ---------------------------------------------------------------------------------------
def locate(trainer: Trainer, step: int | None = None, *, ops: bool = True,
           restore: bool = True, strict: bool = False,
           max_events: int = MAX_EVENTS) -> Location:
    """Replay a step exactly from the nearest checkpoint and name its first non-finite value.

    ``step`` defaults to the run's first non-finite step (or the step that crashed, for
    runs made by ``faults.run_fault``). The checkpoint at or before it is loaded into the
    trainer, the steps in between are re-run as they ran (same batches, callbacks and
    schedule) and each is compared with the record, bit for bit; then the step itself
    runs with every hook on. If a replayed step leaves a non-finite weight or optimizer
    state behind before the loss shows it (Adam in pure fp16 does this), the replay
    stops there and that step is located instead (see ``notes``).

    ``strict=True`` raises ``NanlabError`` when the replay does not reproduce the record
    (``Location.mismatches`` lists the differences either way).
    ``ops=False`` turns the op-level trace off (module hooks only). With ``restore=True``
    (default) the trainer is put back as it was: weights, optimizer, schedule, loss
    scale, RNG, step, data position, record, config and callbacks. State kept inside
    your own callbacks' closures (a guard's running window, say) is not restored. With
    ``restore=False`` the trainer is left just after the replayed step.

    >>> from nanlab import faults
    >>> run = faults.run_fault("tiny_eps", steps=5, checkpoint_every=10,  # doctest: +SKIP
    ...                        stop_when_poisoned=True)
    >>> loc = locate(run.trainer)  # doctest: +SKIP
    >>> loc.module, loc.pass_name  # doctest: +SKIP
    ('embed_norm', 'forward')
    >>> print(loc.report())  # doctest: +SKIP
    step 0 (replayed from checkpoint 0, batch 0, fp32): first non-finite value in forward...
    """
    if not isinstance(trainer, Trainer):
        raise NanlabError(f"locate needs a nanlab Trainer (run.trainer); got "
                          f"{type(trainer).__name__}")
    check_range("max_events", max_events, 1, integer=True)
    record = trainer.record
    target, row_index = _pick_step(trainer, record, step)
    rows = _timeline(record, target, row_index)
    checkpoint, state, skipped_ckpts = _pick_checkpoint(trainer, target)
    saved = _save(trainer) if restore else None
    loc = Location(step=target, checkpoint=checkpoint, batch=None,
                   precision=trainer.config.precision, requested_step=step)
    if skipped_ckpts:
        loc.notes.append(f"checkpoint(s) {skipped_ckpts} already held non-finite weights or "
                         f"optimizer state; replayed from checkpoint {checkpoint}")
    try:
        _prepare(trainer)
        trainer.load_state_dict(state)
        target = _replay_until(trainer, checkpoint, target, rows, loc)
        _run_target(trainer, target, rows.get(target), loc, ops, max_events)
    finally:
        if saved is not None:
            _put_back(trainer, saved)
        loc.trainer_restored = saved is not None
    if strict and not loc.reproduced:
        raise NanlabError(f"the replay of step {loc.step} from checkpoint {checkpoint} does not "
                          "reproduce the record: " + "; ".join(loc.mismatches[:3]))
    return loc


def _pick_step(trainer: Trainer, record: RunRecord, step: int | None) -> tuple[int, int | None]:
    """The step to replay and the index of its row in ``record.steps`` (None: no row)."""
    rows = record.steps
    recorded = [r["step"] for r in rows]
    # a crash leaves no row: run_fault logs an "error" event; a bare trainer.run() that
    # raised is still at the step that crashed, trainer.step
    # a replay never runs past what was recorded: a crash is at most one step after the rows
    limit = max(len(rows), trainer.step)
    crashes = [e["step"] for e in record.events if e.get("kind") == "error"
               and isinstance(e.get("step"), int) and e["step"] <= limit]
    span = (f"steps {min(recorded)}..{max(recorded)}" if recorded else "no steps")
    if step is None:
        for i, r in enumerate(rows):
            if not r.get("finite", True):
                return r["step"], i
        if crashes:
            return crashes[0], None
        raise NanlabError(f"this run never went non-finite ({len(rows)} steps recorded, "
                          f"{span}) and did not crash; name a step: locate(trainer, step=k)")
    check_range("step", step, 0, integer=True)
    if step in recorded:
        return step, recorded.index(step)
    if step in crashes or step == trainer.step:
        return step, None
    raise NanlabError(f"step={step} is out of range: this run recorded {span}"
                      + (f" and crashed at step {crashes[0]}" if crashes else "")
                      + f"; the trainer is at step {trainer.step}")


def _timeline(record: RunRecord, target: int, row_index: int | None) -> dict[int, dict]:
    """The recorded row of each step up to the target, as the run lived it (after a
    rollback a step number can appear twice: the latest row before the target wins)."""
    rows = record.steps if row_index is None else record.steps[:row_index + 1]
    return {r["step"]: r for r in rows if r["step"] <= target}


def _state_nonfinite(tensors: list[torch.Tensor]) -> bool:
    floats = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()
              and t.numel()]
    if not floats:
        return False
    return not bool(torch.stack([torch.isfinite(t).all() for t in floats]).all())


def _checkpoint_tensors(state: dict) -> list[torch.Tensor]:
    tensors = list(state["model"].values())
    for s in state["optimizer"].get("state", {}).values():
        tensors += [v for v in s.values() if isinstance(v, torch.Tensor)]
    return tensors


def _trainer_tensors(trainer: Trainer) -> list[torch.Tensor]:
    tensors = list(trainer.model.parameters())
    for s in trainer.optimizer.state.values():
        tensors += [v for v in s.values() if isinstance(v, torch.Tensor)]
    return tensors


def _pick_checkpoint(trainer: Trainer, target: int) -> tuple[int, dict, list[int]]:
    """The latest checkpoint at or before ``target`` whose weights are all finite."""
    available = trainer.checkpoints.steps()
    earlier = [s for s in available if s <= target]
    if not earlier:
        raise NanlabError(
            f"no checkpoint at or before step={target} to replay from; available "
            f"checkpoints: {available or 'none'} (train with checkpoint_every > 0, e.g. "
            f"checkpoint_every=10; this run has checkpoint_every="
            f"{trainer.config.checkpoint_every})")
    poisoned = []
    for s in reversed(earlier):
        state = trainer.checkpoints.load(s)
        _check_state(trainer, s, state)
        if not _state_nonfinite(_checkpoint_tensors(state)):
            return s, state, poisoned
        poisoned.append(s)
    raise NanlabError(f"every checkpoint at or before step={target} ({earlier}) already "
                      "holds non-finite weights or optimizer state: the first bad step is "
                      "before the first checkpoint; train again with checkpoint_every > 0 "
                      "from step 0")


def _check_state(trainer: Trainer, step: int, state: dict) -> None:
    """A checkpoint read from a folder must be this trainer's state: the keys
    ``Trainer.state_dict`` writes, and weights of this model's names and shapes."""
    where = (trainer.checkpoints.path(step) if trainer.checkpoints.directory is not None
             else f"checkpoint {step}")
    missing = [k for k in ("step", "data_position", "lr_scale", "model", "optimizer",
                           "scheduler", "rng_cpu") if k not in state]
    model = state.get("model")
    ours = {k: tuple(v.shape) for k, v in trainer.model.state_dict().items()}
    theirs = ({k: tuple(getattr(v, "shape", ())) for k, v in model.items()}
              if isinstance(model, dict) else None)
    if missing or theirs != ours or not isinstance(state.get("optimizer"), dict):
        what = (f"lacks {missing}" if missing else "holds weights of another model"
                if theirs != ours else "holds no optimizer state")
        raise NanlabError(f"{where}: {what}; not a checkpoint of this run (a nanlab run "
                          "folder has checkpoints written by its trainer)")


@dataclass
class _Saved:
    state: dict
    record: RunRecord
    skip_batches: set[int]
    stop: tuple[bool, str]
    callbacks: dict[str, list[Callable]]


def _save(trainer: Trainer) -> _Saved:
    return _Saved(copy.deepcopy(trainer.state_dict()), trainer.record,
                  set(trainer.skip_batches), (trainer.stop_requested, trainer.stop_reason),
                  {k: list(v) for k, v in trainer.callbacks.items()})


def _prepare(trainer: Trainer) -> None:
    """A scratch record: the replayed steps, and whatever the callbacks log about them
    (a guard's events, a stop), must not enter the run's history. No stop pending."""
    trainer.record = RunRecord()
    trainer.stop_requested, trainer.stop_reason = False, ""


def _put_back(trainer: Trainer, saved: _Saved) -> None:
    trainer.load_state_dict(saved.state)
    trainer.record, trainer.skip_batches = saved.record, saved.skip_batches
    trainer.stop_requested, trainer.stop_reason = saved.stop
    trainer.callbacks = saved.callbacks


def _batch_of(trainer: Trainer, row: dict | None) -> int:
    """The batch the record says this step used (a rollback may have changed the skip
    list since), else the trainer's next one."""
    if row is not None and row.get("batch") is not None:
        return int(row["batch"])
    return trainer.next_batch_index()


def _replayed_step(trainer: Trainer, row: dict | None, **watch) -> StepInfo:
    """One step as the record says it ran; no per-layer statistics (they read the numbers,
    never change them, and their own ops would show in the op trace)."""
    return trainer.train_step(_batch_of(trainer, row), record_layers=False, **watch)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _compare(step: int, recorded: dict | None, replayed: dict) -> list[str]:
    if recorded is None:
        return []
    return [f"step {step}: {k} replayed {replayed.get(k)!r}, recorded {recorded.get(k)!r}"
            for k in ("batch", "loss", "grad_norm", "finite")
            if k in recorded and not _same(recorded.get(k), replayed.get(k))]


def _replay_until(trainer: Trainer, start: int, target: int, rows: dict[int, dict],
                  loc: Location) -> int:
    """Re-run steps start..target-1 without hooks, checking each against the record.

    Returns the step to locate: ``target``, or an earlier step that left a non-finite
    weight / optimizer state behind (or crashed), which is then restored to run again.
    """
    for s in range(start, target):
        before = copy.deepcopy(trainer.state_dict())
        try:
            info = _replayed_step(trainer, rows.get(s))
        except Exception as e:  # the record says it ran: not reproducible
            loc.mismatches.append(f"step {s}: crashed in replay ({type(e).__name__}: {e}) "
                                  "but the record has it")
            loc.reproduced = False
            trainer.load_state_dict(before)
            loc.step = s
            return s
        loc.mismatches += _compare(s, rows.get(s), info.row)
        loc.reproduced = not loc.mismatches
        loc.replayed_steps += 1
        if _state_nonfinite(_trainer_tensors(trainer)):
            trainer.load_state_dict(before)
            loc.replayed_steps -= 1
            loc.notes.append(
                f"step {s} already wrote a non-finite value into the weights or optimizer "
                f"state (its loss was {info.loss_value:.6g}): that is the step located, "
                f"not step {target}")
            loc.step = s
            return s
    return target


def _run_target(trainer: Trainer, target: int, row: dict | None, loc: Location,
                ops: bool, max_events: int) -> None:
    """Run the target step with every hook on, and fill ``loc`` in."""
    before = copy.deepcopy(trainer.state_dict())
    loc.batch = _batch_of(trainer, row)
    for attempt in ("full", "no module backward hooks"):
        tracer = _Tracer(trainer, module_backward_hooks=attempt == "full", ops=ops,
                         max_events=max_events)

        def watched(model, batch, _tracer=tracer, _loss_fn=trainer.loss_fn):
            _tracer.check_batch(batch)
            loss = _loss_fn(model, batch)
            _tracer.check_loss(loss)
            return loss

        trainer.callbacks["on_after_backward"].append(tracer.check_grad_norm)
        info, error = None, None
        try:
            with warnings.catch_warnings(), tracer:
                # modules whose inputs need no grad (the embeddings) still get their hook
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                # a module returning a ModelOutput (Hugging Face) gets no backward hook;
                # its forward output is still checked, and its children's grads are
                warnings.filterwarnings("ignore", message="For backward hooks to be called")
                info = _replayed_step(trainer, row, loss_fn=watched)
        except Exception as e:
            error = e
        finally:
            tracer.remove()
            trainer.callbacks["on_after_backward"].remove(tracer.check_grad_norm)
        if attempt == "full" and error is not None and "BackwardHookFunction" in str(error):
            # an in-place op on a module's output: full backward hooks cannot wrap it
            trainer.load_state_dict(before)
            loc.notes.append("module backward hooks were turned off: the model modifies a "
                             "module output in place; gradients are still checked per op "
                             "and per parameter")
            continue
        break
    loc.first, loc.first_op = tracer.first_tensor, tracer.first_op
    loc.first_inf, loc.first_nan = tracer.first_inf, tracer.first_nan
    loc.first_optimizer = tracer.first_optimizer
    loc.events, loc.n_events, loc.masks = tracer.events, tracer.n_events, tracer.masks
    loc.first_minus_inf = tracer.first_minus_inf
    loc.data_nonfinite = any(e.pass_name == "data" and e.op is None for e in tracer.events)
    if error is not None:
        loc.error = f"{type(error).__name__}: {error}".splitlines()[0]
        # after the backward pass only the optimizer and the GradScaler are left to fail
        loc.error_pass = tracer.phase if tracer.phase in PASSES else "optimizer"
        loc.error_module = tracer.stack[-1] if tracer.phase == "forward" and tracer.stack \
            else None
        if row is not None:
            loc.mismatches.append(f"step {target}: crashed in replay ({loc.error}) but the "
                                  "record has it")
            loc.reproduced = False
        return
    loc.loss, loc.skipped = info.loss_value, info.skip
    loc.loss_scale = info.row.get("loss_scale")
    loc.mismatches += _compare(target, row, info.row)
    loc.reproduced = not loc.mismatches
    if row is not None and not row.get("finite", True) and info.finite:
        loc.notes.append(f"the record says step {target} was non-finite, but the replay is "
                         "finite: the NaN does not reproduce (a hardware fault, a "
                         "non-deterministic kernel, or state the checkpoint does not hold)")
