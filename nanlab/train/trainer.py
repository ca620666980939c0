"""A small, model-agnostic trainer in the spirit of minGPT's.

The trainer knows nothing about the model: it takes any ``nn.Module``, a batch source
(``batches(i)`` returns batch number ``i``) and a loss function
(``loss_fn(model, batch)`` returns a scalar). It defaults to the toy Transformer and
the counting task.

The knobs the course teaches sit in :class:`TrainConfig` with the reason beside each:
learning rate and warmup, gradient clipping, precision (and the GradScaler that fp16
needs). Monitors and guards plug in through named callbacks, as in minGPT::

    trainer.add_callback("on_after_backward", my_check)

Events, in the order they fire each step: ``on_step_start`` (batch built),
``on_after_backward`` (gradients unscaled, ``info.loss_value`` and
``info.grad_norm_value`` known on the host, the optimizer has not stepped: set
``info.skip = True`` to drop the update, or call ``trainer.request_stop(reason)`` to end
the run), ``on_step_end`` (row recorded). Also ``on_run_start``,
``on_checkpoint`` and ``on_run_end``.

Runs are deterministic: the same seed on the same machine gives the same numbers, and
resuming from the checkpoint at step k reproduces steps k..n bit for bit.

>>> from nanlab.train.trainer import TrainConfig, train
>>> run = train(TrainConfig(steps=20, progress=False))
>>> len(run.steps)
20
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from nanlab.errors import (
    NanlabError,
    StorageError,
    Terminated,
    check_choice,
    check_range,
    error_line,
)
from nanlab.layers.half_matmul import half_matmul
from nanlab.optim.lr_lever import applied_lr
from nanlab.runs.checkpoint import CheckpointStore
from nanlab.runs.record import RunRecord, environment_info
from nanlab.toy.data import CountingTask
from nanlab.toy.model import GPT
from nanlab.train.accum import accumulate
from nanlab.train.batches import to_device
from nanlab.train.config import TrainConfig
from nanlab.train.objective import global_grad_norm, lm_loss, lr_factor
from nanlab.train.resume import Resumable

EVENTS = ("on_run_start", "on_step_start", "on_after_backward", "on_step_end",
          "on_checkpoint", "on_run_end")


def resolve_device(name: str) -> torch.device:
    """'auto' -> CUDA when present, else CPU; asking for CUDA without it is an error.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("auto")  # doctest: +SKIP
    device(type='cuda')
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NanlabError(f"device={name!r} is not available: this machine has no CUDA GPU "
                          "(torch.cuda.is_available() is False); use 'auto' or 'cpu'")
    return torch.device(name)


def default_task(config: TrainConfig) -> CountingTask:
    """The counting task sized to the model (the pad token, if any, is the last id).

    >>> task = default_task(TrainConfig(batch_size=8))
    >>> task.vocab_size, tuple(task(0).tokens.shape)
    (32, (8, 32))
    """
    m = config.model
    padded = m.pad_id is not None
    return CountingTask(seed=config.seed, batch_size=config.batch_size, seq_len=m.block_size,
                        vocab_size=m.vocab_size - 1 if padded else m.vocab_size,
                        pad_id=m.pad_id, pad_prob=config.pad_prob)


@dataclass(frozen=True)
class Gradients:
    """What :meth:`Trainer.forward_backward` returns (the gradients are in ``p.grad``):
    ``loss`` and ``grad_norm`` detached, the same two on the host, ``finite`` as in StepInfo.

    >>> g = Trainer(TrainConfig(progress=False)).forward_backward(default_task(TrainConfig())(0))
    >>> g.finite, g.loss_value == g.loss.item()
    (True, True)
    """

    loss: torch.Tensor
    grad_norm: torch.Tensor
    loss_value: float
    grad_norm_value: float
    finite: bool


@dataclass
class StepInfo:
    """What the callbacks see of one step. Set ``skip`` to drop the optimizer update.

    >>> def skip_bad(trainer, info):                  # an on_after_backward callback
    ...     if not info.finite:
    ...         info.skip, info.skip_reason = True, "non-finite loss or gradient"
    >>> trainer = Trainer(TrainConfig(steps=5, progress=False))
    >>> trainer.add_callback("on_after_backward", skip_bad)
    """

    step: int
    batch_index: int
    batch: Any
    loss: torch.Tensor | None = None
    grad_norm: torch.Tensor | None = None
    loss_value: float = math.nan  # the same two numbers on the host (the step's one sync)
    grad_norm_value: float = math.nan
    finite: bool = True  # loss finite, and gradients finite (or handled by the GradScaler)
    skip: bool = False
    skip_reason: str = ""
    row: dict = field(default_factory=dict)

    @property
    def poisoned(self) -> bool:
        """Non-finite and not skipped: the update wrote the fault into the weights."""
        return not self.finite and not self.skip


def stop_early(*, poisoned: bool = True, nonfinite_streak: int | None = None,
               until_step: int | None = None) -> Callable[[Trainer, StepInfo], None]:
    """An ``on_step_end`` callback that ends a run once its outcome is known, each reason
    an event: a non-finite update reached the weights (nothing trains after that; a
    skipped step left the weights alone), ``nonfinite_streak`` non-finite steps in a row,
    or every step before ``until_step`` has run. The matrix, diagnose's replays and
    ``run_fault(stop_when_poisoned=True)`` all stop through it.

    >>> trainer = Trainer(TrainConfig(steps=50, progress=False))
    >>> trainer.add_callback("on_step_end", stop_early(until_step=10))
    >>> len(trainer.run().steps), trainer.record.events[-1]["reason"]
    (10, 'stopped before step 10')
    """
    def callback(trainer: Trainer, info: StepInfo) -> None:
        rows = trainer.record.steps
        if poisoned and info.poisoned:
            trainer.request_stop("a non-finite update reached the weights")
        elif nonfinite_streak and len(rows) >= nonfinite_streak and \
                not any(r["finite"] for r in rows[-nonfinite_streak:]):
            trainer.request_stop(f"{nonfinite_streak} non-finite steps in a row")
        elif until_step is not None and trainer.step >= until_step:
            trainer.request_stop(f"stopped before step {until_step}")
    return callback


def stop_if_poisoned(trainer: Trainer, info: StepInfo) -> None:
    """``stop_early()`` as a ready ``on_step_end`` callback: stop once a non-finite update
    reached the weights (``run_fault(stop_when_poisoned=True)`` adds it).

    >>> Trainer(TrainConfig(progress=False)).add_callback("on_step_end", stop_if_poisoned)
    """
    _stop_when_poisoned(trainer, info)


_stop_when_poisoned = stop_early()


class Trainer(Resumable):
    """Trains any model on any batch source; see the module docstring.

    Without ``model`` / ``batches`` / ``loss_fn`` it trains the toy Transformer on the
    counting task. An ``out_dir`` already holding a run is never overwritten: ``run()``
    refuses it unless it resumes (``resume_from``) or ``overwrite=True`` (a one-off action,
    so a Trainer argument, not a TrainConfig field stored in every manifest). Your own
    model, data and loss:

    >>> net = nn.Linear(3, 1)
    >>> data = lambda i: (torch.randn(8, 3), torch.zeros(8, 1))     # batch number i
    >>> import torch.nn.functional as F
    >>> mse = lambda model, b: F.mse_loss(model(b[0]), b[1])
    >>> trainer = Trainer(TrainConfig(steps=3, progress=False), model=net, batches=data,
    ...                   loss_fn=mse)
    >>> trainer.add_callback("on_after_backward", lambda tr, info: print(info.step, info.finite))
    >>> run = trainer.run()
    0 True
    1 True
    2 True
    """

    def __init__(self, config: TrainConfig | None = None, model: nn.Module | None = None,
                 batches: Callable[[int], Any] | None = None,
                 loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
                 optimizer: torch.optim.Optimizer | None = None, overwrite: bool = False):
        self.config = config = config or TrainConfig()
        self.overwrite = overwrite  # run() into a folder holding a run: remove it first
        self.device = resolve_device(config.device)
        torch.manual_seed(config.seed)  # model init is the first use of the global RNG
        if model is None:
            model = GPT(config.model)
        self.model = model.to(self.device)
        self.input_dtype = None
        if config.precision == "fp16-pure":
            self.model.half()
            self.input_dtype = torch.float16
        self.batches = batches if batches is not None else default_task(config)
        parts = config.model.vocab_partitions
        self.loss_fn = loss_fn or (
            partial(lm_loss, z_loss=config.z_loss, vocab_partitions=parts)
            if config.z_loss or parts > 1 else lm_loss)
        # The micro-batch loop (nanlab.train.accum); a grad_accum fault swaps in a loop with a bug.
        self.accumulate = accumulate
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = optimizer or self._make_optimizer()
        self.lr_scale = 1.0  # tools that cut the LR (recovery) multiply this
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: self.lr_scale * lr_factor(s, self.config))
        use_scaler = config.grad_scaler if config.grad_scaler is not None \
            else config.precision == "fp16"
        self.scaler = torch.amp.GradScaler(self.device.type) if use_scaler else None
        self._unscaled = False  # scaler.unscale_ ran since the last scaler.update()
        self.step = 0  # the next step to run
        self.data_position = 0  # the next batch index to read
        self.skip_batches: set[int] = set()  # batch indices never to train on
        self.stop_requested = False
        self.stop_reason = ""
        self.restart_steps: set[int] = set()  # a job restart before each (schedule_restart)
        self.last_restart: int | None = None  # the step of the last restart
        self._terminated = False  # a SIGTERM arrived while running
        self.callbacks: dict[str, list[Callable]] = {e: [] for e in EVENTS}
        self.checkpoints = CheckpointStore(
            Path(config.out_dir) / "checkpoints" if config.out_dir else None,
            keep=config.keep_checkpoints)
        self.record = RunRecord(config.out_dir, manifest=self._manifest())
        self.refresh_layers()

    def refresh_layers(self) -> None:
        """Read the names of the model's leaf modules, the rows of the per-layer statistics;
        after a change of the model's structure (MoE blocks put in), call it again. A module
        swapped under the same name (a fault's softmax, an FP8 Linear) needs nothing: each
        recorded step looks the rows up by name."""
        self._layer_names = [n for n, m in self.model.named_modules()
                             if n and not any(True for _ in m.children())]

    def _layer_modules(self) -> list[tuple[str, nn.Module]]:
        """(name, module) of each row, the model's module under that name now (a row whose
        module was removed since :meth:`refresh_layers` is left out)."""
        now = dict(self.model.named_modules())
        return [(name, now[name]) for name in self._layer_names if name in now]

    # -- setup -------------------------------------------------------------------
    def _make_optimizer(self) -> torch.optim.Optimizer:
        c = self.config
        if c.optimizer == "sgd":
            return torch.optim.SGD(self.params, lr=c.lr, momentum=c.momentum,
                                   weight_decay=c.weight_decay)
        # foreach=False keeps the arithmetic identical on CPU and CUDA and easy to read.
        return torch.optim.AdamW(self.params, lr=c.lr, betas=(c.beta1, c.beta2),
                                 eps=c.adam_eps, weight_decay=c.weight_decay, foreach=False)

    def _manifest(self) -> dict:
        def name(obj) -> str:
            return f"{type(obj).__module__}.{type(obj).__qualname__}"

        return {"config": self.config.to_dict(), "seed": self.config.seed, "fault": None,
                "device": str(self.device), "model_class": name(self.model),
                # the optimizer really used: a caller's own (NAdam) overrides config.optimizer
                "optimizer_class": name(self.optimizer),
                "num_params": sum(p.numel() for p in self.model.parameters()),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **environment_info()}

    def add_callback(self, event: str, fn: Callable) -> None:
        """Call ``fn(trainer, info)`` at ``event`` (one of EVENTS; on_run_* get ``info=None``)."""
        check_choice("event", event, EVENTS)
        self.callbacks[event].append(fn)

    def trigger_callbacks(self, event: str, info: StepInfo | None = None) -> None:
        for fn in self.callbacks[event]:
            fn(self, info)

    def request_stop(self, reason: str) -> None:
        """End the run after this step, with a "stop" event naming ``reason``: the one way
        for a callback to stop a run. The first reason is kept (it names the cause).

        >>> trainer = Trainer(TrainConfig(steps=50, progress=False))
        >>> trainer.add_callback("on_step_end", lambda tr, info: tr.request_stop("enough"))
        >>> len(trainer.run().steps), trainer.record.events[-1]["reason"]
        (1, 'enough')
        """
        self.stop_requested = True
        self.stop_reason = self.stop_reason or str(reason)

    def set_lr_scale(self, scale: float) -> None:
        """Multiply the scheduled LR by ``scale`` from the next step on (a recovery's LR cut).

        The optimizer's LR is updated at once, so the very next step already runs at the
        new rate; the scale is saved in checkpoints and restored with them.

        >>> trainer = Trainer(TrainConfig(steps=5, progress=False))
        >>> trainer.set_lr_scale(0.1)
        >>> round(trainer.optimizer.param_groups[0]["lr"], 8), trainer.lr_scale
        (2.5e-05, 0.1)
        """
        check_range("scale", scale, 0.0, integer=False)
        self.lr_scale = float(scale)
        sched = self.scheduler
        for group, base, fn in zip(self.optimizer.param_groups, sched.base_lrs,
                                   sched.lr_lambdas, strict=True):
            group["lr"] = base * fn(sched.last_epoch)

    def divide_lr(self, by: float) -> None:
        """Divide every param group's base LR by ``by`` (a fix's LR / 10).

        It acts on the optimizer the trainer really uses, also one the caller made (whose
        LR ``config.lr`` never sees); the schedule keeps its shape.

        >>> trainer = Trainer(TrainConfig(steps=5, lr=5e-3, progress=False))
        >>> trainer.divide_lr(10)
        >>> trainer.scheduler.base_lrs
        [0.0005]
        """
        check_range("by", by, 0.0, integer=False)
        if by == 0:
            raise NanlabError("divide_lr(by=0): the divisor must be above 0")
        sched = self.scheduler
        sched.base_lrs = [base / by for base in sched.base_lrs]
        for group in self.optimizer.param_groups:
            if "initial_lr" in group:
                group["initial_lr"] /= by
        self.set_lr_scale(self.lr_scale)

    @property
    def base_lr(self) -> float:
        """The first param group's LR before the schedule and any LR cut."""
        return float(self.scheduler.base_lrs[0])

    # -- the loop ------------------------------------------------------------------
    def autocast(self):
        p = self.config.precision
        if p in ("fp16", "bf16"):
            dtype = torch.float16 if p == "fp16" else torch.bfloat16
            return torch.amp.autocast(device_type=self.device.type, dtype=dtype)
        return contextlib.nullcontext()

    def next_batch_index(self) -> int:
        while self.data_position in self.skip_batches:
            self.data_position += 1
        return self.data_position

    def forward_backward(self, batch: Any, loss_fn: Callable | None = None) -> Gradients:
        """A step without its update: forward under autocast and the loss, backward (scaled
        by the GradScaler), unscale, clip, global grad norm; ``p.grad`` is left ready for
        the optimizer, one host sync reads loss and norm. train_step calls it, and so does
        a tool that needs a step's gradients again from the same state (the guard's
        rerun): one copy of the arithmetic, the same numbers bit for bit. ``loss_fn``
        replaces the loss for this pass. GradScaler.unscale_ runs once per update: a second
        pass unscales by hand, and scaler.step acts on the first pass's overflow check.

        >>> trainer = Trainer(TrainConfig(steps=5, progress=False))
        >>> g = trainer.forward_backward(trainer.batches(0))
        >>> round(g.loss_value, 1), g.finite, trainer.step   # no update: still step 0
        (3.5, True, 0)
        """
        batch = to_device(batch, self.device, self.input_dtype)
        with half_matmul(self.device, self.config.precision):  # fp16 GEMMs as a GPU does
            if self.config.accum_steps > 1:  # micro-batches into p.grad (nanlab.train.accum)
                loss = self.accumulate(self, batch, loss_fn or self.loss_fn)
            else:
                with self.autocast():
                    loss = (loss_fn or self.loss_fn)(self.model, batch)
                self.optimizer.zero_grad(set_to_none=True)
                (self.scaler.scale(loss) if self.scaler else loss).backward()
        if self.scaler and not self._unscaled:
            self.scaler.unscale_(self.optimizer)  # grads in true units before norms/clipping
        elif self.scaler:
            inv = 1.0 / self.scaler.get_scale()  # what unscale_ multiplies by
            for grad in [p.grad for p in self.params if p.grad is not None]:
                grad.mul_(inv)
        self._unscaled = self.scaler is not None
        clip = self.config.grad_clip
        norm = (torch.nn.utils.clip_grad_norm_(self.params, clip) if clip > 0
                else global_grad_norm(self.params))
        loss, norm = loss.detach(), norm.detach()
        loss_value, norm_value = torch.stack(
            [loss.float().cpu(), norm.float().cpu()]).tolist()  # the one sync
        # With a GradScaler, inf gradients at a finite loss are the scaler at work (the
        # scaled backward overflowed; it skips the step and halves the scale), not a fault.
        finite = math.isfinite(loss_value) and (math.isfinite(norm_value) or bool(self.scaler))
        return Gradients(loss, norm, loss_value, norm_value, finite)

    def train_step(self, batch_index: int | None = None, *, loss_fn: Callable | None = None,
                   record_layers: bool | None = None) -> StepInfo:
        """One step: batch, :meth:`forward_backward`, callbacks, update, record. For a replay:
        ``batch_index`` (that batch, not the next), ``loss_fn`` (this step's loss),
        ``record_layers`` (per-layer statistics on / off; None: every ``record_every``).

        >>> trainer = Trainer(TrainConfig(steps=5, progress=False))
        >>> info = trainer.train_step(batch_index=3)
        >>> info.row["batch"], trainer.step, trainer.data_position
        (3, 1, 4)
        """
        index = self.next_batch_index() if batch_index is None else batch_index
        info = StepInfo(step=self.step, batch_index=index,
                        batch=to_device(self.batches(index), self.device, self.input_dtype))
        self.trigger_callbacks("on_step_start", info)
        if record_layers is None:
            every = self.config.record_every
            record_layers = every > 0 and self.step % every == 0
        activations: dict[str, torch.Tensor] = {}
        layers = self._layer_modules() if record_layers else []
        hooks = [m.register_forward_hook(_absmax_hook(activations, n)) for n, m in layers]
        try:
            g = self.forward_backward(info.batch, loss_fn)
        finally:
            for h in hooks:
                h.remove()
        info.loss, info.grad_norm, info.finite = g.loss, g.grad_norm, g.finite
        info.loss_value, info.grad_norm_value = g.loss_value, g.grad_norm_value
        self.trigger_callbacks("on_after_backward", info)

        lr = applied_lr(self.optimizer)  # the schedule's LR times any lever factor
        scale = self.scaler.get_scale() if self.scaler else None
        # each layer's own weights before the update, for its update_ratio
        before = {n: torch.cat([p.detach().float().flatten() for p in ps]) for n, m in
                  layers if (ps := [*m.parameters(recurse=False)])}
        if info.skip:
            if self.scaler:
                self.scaler.update()
            self.record.log_event("skip", self.step, batch=index, reason=info.skip_reason)
        elif self.scaler:
            self.scaler.step(self.optimizer)  # skips the update by itself on inf/NaN grads
            self.scaler.update()
            if not math.isfinite(g.grad_norm_value):
                info.skip, info.skip_reason = True, "GradScaler found inf/NaN gradients"
        else:
            self.optimizer.step()
        self._unscaled = False  # the next pass unscales with the scaler again
        if not info.skip:
            self.scheduler.step()  # a skipped update does not advance the schedule
        if record_layers:
            self.record.log_layers(self._layer_rows(layers, activations, before))
        # the step as applied: a guard's clean rerun (a transient fault) replaces g in info
        info.row = {"step": self.step, "batch": index, "loss": info.loss_value, "lr": lr,
                    "grad_norm": info.grad_norm_value, "loss_scale": scale,
                    "finite": info.finite, "skipped": info.skip}
        self.record.log_step(info.row)
        self.data_position = index + 1
        self.step += 1
        self.trigger_callbacks("on_step_end", info)
        return info

    def _layer_rows(self, layers: list[tuple[str, nn.Module]],
                    activations: dict[str, torch.Tensor],
                    before: dict[str, torch.Tensor]) -> list[dict]:
        """Per-layer grad norm, param mean/std, act abs-max, ||update|| / ||weights||; one sync."""
        names, stats = [], []
        nan = torch.tensor(float("nan"), device=self.device)
        for name, module in layers:
            params = [p for p in module.parameters(recurse=False)]
            if params:
                flat = torch.cat([p.detach().float().flatten() for p in params])
                grads = [p.grad for p in params if p.grad is not None]
                gnorm = torch.linalg.vector_norm(torch.stack(
                    [torch.linalg.vector_norm(g.float()) for g in grads])) if grads else nan
                w0 = before[name]
                ratio = torch.linalg.vector_norm(flat - w0) / torch.linalg.vector_norm(w0)
                pstats = [gnorm, flat.mean(), flat.std() if flat.numel() > 1 else nan, ratio]
            else:
                pstats = [nan, nan, nan, nan]
            act = activations.get(name, nan)
            names.append((name, bool(params), name in activations))
            stats.append(torch.stack([*pstats, act]))
        values = torch.stack(stats).cpu().tolist() if stats else []
        return [{"step": self.step, "layer": name, "grad_norm": gn if has_params else None,
                 "param_mean": mean if has_params else None,
                 "param_std": std if has_params else None, "act_absmax": act if has_act else None,
                 "update_ratio": ratio if has_params else None}
                for (name, has_params, has_act), (gn, mean, std, ratio, act)
                in zip(names, values, strict=True)]

    def run(self, resume_from: int | str | Path | None = None,
            allow_nonfinite: bool = False) -> RunRecord:
        """Train until ``config.steps`` (or a stop request) and return the run record.

        ``resume_from`` (a checkpoint step or file) continues the run: the record, in memory
        and in ``out_dir``, keeps the rows before that step and drops the rest, which run
        again (:meth:`RunRecord.resume`): one history, each step once; a checkpoint holding
        NaN or inf is refused unless ``allow_nonfinite=True`` (:meth:`restore`). A new run (no
        ``resume_from``) into an ``out_dir`` holding a run is refused before anything is
        written, unless ``Trainer(..., overwrite=True)`` (:meth:`RunRecord.claim`). While it
        runs, the trainer holds ``out_dir``'s lock: a second writer is refused in one line.

        Ctrl-C (KeyboardInterrupt) saves a checkpoint of the last completed step, logs a
        "stop" event "interrupted (SIGINT)", writes the manifest with ``status``
        "interrupted" and re-raises. SIGTERM (what Slurm and Kubernetes send before a kill)
        ends a run into a folder the same way after the step in progress, with "terminated
        (SIGTERM)" and ``status`` "terminated", then raises :class:`Terminated`. ``status`` is
        otherwise "finished", or "crashed" on an exception.

        >>> trainer = Trainer(TrainConfig(steps=6, checkpoint_every=3, progress=False))
        >>> _ = trainer.run()
        >>> [r["step"] for r in trainer.run(resume_from=3).steps]   # 3..5 once, not twice
        [0, 1, 2, 3, 4, 5]
        """
        self.record.hold()  # one writer per run folder
        try:
            with _sigterm_stops(self):
                self._run(resume_from, allow_nonfinite)
        finally:
            self.record.abandon()  # an overwrite that never started: the old run goes back
            self.record.release()
        if self._terminated:
            raise Terminated(f"terminated (SIGTERM) at step {self.step}; the run is saved, "
                             "resume it from its newest checkpoint")
        return self.record

    def _run(self, resume_from, allow_nonfinite: bool = False) -> None:
        c = self.config
        self._terminated = False
        if resume_from is not None:
            self.restore(resume_from, allow_nonfinite=allow_nonfinite)
            self.record.log_event("resume", self.step, source=str(resume_from),
                                  dropped=self.record.resume(self.step))
        self.trigger_callbacks("on_run_start")
        self.record.claim(self.overwrite)  # refuses a folder holding another run
        if not c.checkpoint_every:
            self.record.started()  # no checkpoint to wait for: its manifest is written
        bar = tqdm(total=c.steps, initial=self.step, disable=not c.progress,
                   desc="train", unit="step", dynamic_ncols=True)
        status = "crashed"
        try:
            while self.step < c.steps and not self.stop_requested:
                if c.checkpoint_every and self.step % c.checkpoint_every == 0:
                    self.save_checkpoint()
                if self.step in self.restart_steps and self.last_restart != self.step:
                    self.restart()  # once: a rollback past it does not restart again
                info = self.train_step()
                bar.update(self.step - bar.n)  # may go back: a rollback rewinds the step
                if c.progress and (info.step % 10 == 0 or not info.row["finite"]):
                    bar.set_postfix(step=info.step, loss=f"{info.row['loss']:.4g}",
                                    grad_norm=f"{info.row['grad_norm']:.3g}", refresh=False)
            if self.stop_requested:
                self.record.log_event("stop", self.step, reason=self.stop_reason)
            if (c.checkpoint_every or self._terminated) and \
                    self.step not in self.checkpoints.steps():
                self.save_checkpoint()  # the final state, to resume or extend the run
            status = "terminated" if self._terminated else "finished"
        except NotImplementedError:
            raise  # a learner's unfinished callback, not a symptom of the run
        except StorageError as e:  # the disk, not the training: named, then raised
            status = "storage"
            with contextlib.suppress(OSError):  # a full disk may refuse the event too
                self.record.log_event("error", self.step, error=error_line(e), storage=e.reason)
            raise
        except Exception as e:  # a crash is a symptom: recorded with its step, then raised
            self.record.log_event("error", self.step, error=error_line(e))
            raise
        except KeyboardInterrupt:  # Ctrl-C: keep what ran, resumable, then let it through
            status, self.stop_reason = "interrupted", "interrupted (SIGINT)"
            self.record.log_event("stop", self.step, reason=self.stop_reason)
            if self.step not in self.checkpoints.steps():
                self.save_checkpoint()  # the state after the last completed step
            raise
        finally:
            bar.close()
            self.trigger_callbacks("on_run_end")
            self.record.manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            self.record.manifest["status"] = status
            self.record.manifest["stop_reason"] = self.stop_reason or None
            with contextlib.suppress(OSError) if status == "storage" else contextlib.nullcontext():
                self.record.write_manifest()
                self.record.flush()


@contextlib.contextmanager
def _sigterm_stops(trainer: Trainer):
    """While the trainer runs into a folder, SIGTERM requests a stop after the step in
    progress (never in the middle of an update). Only there is something to save: a run
    in memory (a data-parallel rank, the matrix) still dies at once. Installed only in the
    main thread, and only where nothing else handles SIGTERM (a framework's own handler
    is left alone)."""
    def stop(signum, frame):
        trainer._terminated = True
        trainer.request_stop("terminated (SIGTERM)")

    own = trainer.record.directory is not None and \
        threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if own:
        signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        if own:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _absmax_hook(store: dict[str, torch.Tensor], name: str):
    def hook(module, inputs, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
            store[name] = out.detach().abs().amax().float()
    return hook


def train(config: TrainConfig | None = None, **kwargs) -> RunRecord:
    """Build a :class:`Trainer` and run it: ``train(TrainConfig(steps=200))``.

    ``kwargs`` go to :class:`Trainer` (``model=``, ``batches=``, ``loss_fn=``, ...).

    >>> run = train(TrainConfig(steps=200))       # the clean baseline  # doctest: +SKIP
    >>> run.first_nonfinite_step, bool(run.losses()[-1] < 0.1)  # doctest: +SKIP
    (None, True)
    """
    return Trainer(config, **kwargs).run()
