"""How a trainer saves, restores and restarts: the state that makes a run resumable.

A checkpoint holds everything needed to continue bit for bit (weights, optimizer,
schedule, GradScaler, RNG). ``restart`` plays a job restart that forgets part of it, as
resume code that loads the weights but not ``optimizer.state_dict()`` does: the
optimizer-state faults are built on it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.runs.checkpoint import CHECKPOINT_NAME, CheckpointStore, nonfinite_state, safe_load
from nanlab.train.config import RESUMABLE


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """The fewest updates any parameter's optimizer state has seen: Adam's ``step``, or
    1 for a state without a count (SGD's momentum buffer); 0 when some parameter has no
    state at all (a fresh optimizer, or one whose state was never loaded).

    >>> net = torch.nn.Linear(2, 1)
    >>> opt = torch.optim.AdamW(net.parameters())
    >>> optimizer_steps(opt)
    0
    >>> net(torch.ones(1, 2)).sum().backward(); opt.step()
    >>> optimizer_steps(opt)
    1
    """
    counts = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            if not state:
                return 0
            counts.append(int(state["step"]) if "step" in state else 1)
    return min(counts, default=0)


def misfit(expected: dict, state) -> str | None:
    """What keeps ``state`` (a loaded checkpoint) from loading into a trainer whose own
    state is ``expected``, in words, or None: a part missing, weights missing or extra,
    weights of another shape (a few named, then a count).

    >>> ours = {"step": 0, "model": {"w": torch.zeros(2, 3), "v": torch.zeros(1)}}
    >>> print(misfit(ours, {"step": 5, "model": {"w": torch.zeros(4, 3), "b": torch.zeros(4)}}))
    1 weight of the model not in it ('v'); 1 weight in it not in the model ('b'); 'w' is [4, 3] ...
    >>> misfit(ours, {"model": {}})
    "no 'step' in it (not a trainer's checkpoint)"
    """
    if not isinstance(state, dict):
        return f"holds a {type(state).__name__}, not a trainer's checkpoint"
    parts = [k for k in expected if k not in state and k not in ("scaler", "rng_cuda")]
    if parts:
        return f"no {', '.join(map(repr, parts))} in it (not a trainer's checkpoint)"
    ours, theirs = expected["model"], state["model"]
    if not isinstance(theirs, dict):
        return "its 'model' is not a state dict"

    def some(names: list[str]) -> str:
        more = ", ..." if len(names) > 2 else ""
        return f"{len(names)} weight{'s' if len(names) > 1 else ''}", \
            f"({', '.join(map(repr, names[:2]))}{more})"

    found = []
    missing = [n for n in ours if n not in theirs]
    extra = [n for n in theirs if n not in ours]
    if missing:
        count, names = some(missing)
        found.append(f"{count} of the model not in it {names}")
    if extra:
        count, names = some(extra)
        found.append(f"{count} in it not in the model {names}")
    shapes = [f"{n!r} is {list(theirs[n].shape)} in it, {list(t.shape)} in the model"
              for n, t in ours.items() if isinstance(theirs.get(n), torch.Tensor)
              and theirs[n].shape != t.shape]
    found += shapes[:2] + ([f"{len(shapes) - 2} more of another shape"] if len(shapes) > 2
                           else [])
    return "; ".join(found) or None


def _store_of(path: Path) -> CheckpointStore | None:
    """The store a checkpoint file belongs to (a ``ckpt_000050.pt`` in a folder), or None."""
    return CheckpointStore(path.parent) if CHECKPOINT_NAME.fullmatch(path.name) else None


def refuse_nonfinite(state: dict, where: str, store: CheckpointStore | None = None,
                     step: int | None = None, override: str = "allow_nonfinite=True",
                     step_as: str = "step {}") -> None:
    """Raise one NanlabError line if ``state`` holds a non-finite weight or optimizer
    tensor: which tensors, the checkpoint, and what is allowed instead: the newest finite
    checkpoint of ``store`` before ``step`` (named by ``step_as``), or ``override``. A
    resume from such a state trains on NaN from its first step.

    >>> refuse_nonfinite({"model": {"w": torch.ones(2)}}, "checkpoint 5")   # finite: nothing
    >>> refuse_nonfinite({"model": {"w": torch.tensor([float("nan")])}}, "checkpoint 5")
    Traceback (most recent call last):
    nanlab.errors.NanlabError: checkpoint 5: holds non-finite state (model.w: 0 inf, 1 NaN ...
    """
    bad = nonfinite_state(state)
    if not bad:
        return
    more = f"; {len(bad) - 2} more tensor{'s' if len(bad) > 3 else ''}" if len(bad) > 2 else ""
    good = store.newest_finite(before=step) if store is not None else None
    earlier = (f"the newest finite checkpoint, {step_as.format(good)}" if good is not None
               else "an earlier finite checkpoint (this run has none)")
    raise NanlabError(f"{where}: holds non-finite state ({'; '.join(bad[:2])}{more}); a resume "
                      f"from it trains on NaN; allowed: {earlier}, or {override} to load it "
                      "anyway")


class Resumable:
    """The checkpoint half of :class:`nanlab.train.Trainer` (a mixin: it uses the trainer's
    model, optimizer, scheduler, scaler, checkpoints and record).

    >>> from nanlab.train.trainer import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(steps=2, progress=False))
    >>> sorted(trainer.state_dict())[:4]
    ['data_position', 'lr_scale', 'model', 'optimizer']
    """

    # What restore() does with a checkpoint holding NaN/inf when not told: refuse it. A
    # trainer rebuilt to replay a recorded run (nanlab.debug.load_run) sets True: its
    # replays load the bad states on purpose, to show them.
    allow_nonfinite: bool = False

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit: weights, optimizer, schedule, RNG."""
        state = {"step": self.step, "data_position": self.data_position,
                 "lr_scale": self.lr_scale, "model": self.model.state_dict(),
                 "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "rng_cpu": torch.get_rng_state()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        if self.device.type == "cuda":
            state["rng_cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def load_state_dict(self, state: dict, skip: tuple[str, ...] = ()) -> None:
        """Load a checkpoint's state. ``skip`` names the parts left fresh (a resume that
        forgets them, see ``TrainConfig.resume_skips``): "optimizer" clears the optimizer's
        state, as a newly built AdamW holds none (m = v = 0, step 0 on its first update);
        "scheduler" puts the LR schedule back at step 0 (warmup again, then the peak)."""
        for part in skip:
            check_choice("skip", part, RESUMABLE)
        self.step = int(state["step"])
        self.data_position = int(state["data_position"])
        self.lr_scale = float(state["lr_scale"])
        self.model.load_state_dict(state["model"])
        if "optimizer" in skip:
            self.optimizer.state.clear()  # what a fresh optimizer holds: no state at all
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        if "scheduler" in skip:
            self.scheduler.last_epoch = 0  # a fresh LambdaLR: step 0 of the schedule
        else:
            self.scheduler.load_state_dict(state["scheduler"])
        if skip:  # the LR a rebuilt optimizer gets from the schedule it is given
            self.set_lr_scale(self.lr_scale)
        torch.set_rng_state(state["rng_cpu"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        if "rng_cuda" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng_cuda"], self.device)

    def save_checkpoint(self) -> None:
        """Save the state before this step. The rows of the steps before it are flushed and
        fsynced first: once the checkpoint has landed, a crash cannot lose rows it covers
        (a resume from it would keep a history with a hole in it)."""
        self.record.flush()
        kept = self.checkpoints.kept_finite
        self.checkpoints.save(self.step, self.state_dict())
        if self.checkpoints.kept_finite not in (None, kept):  # rotation spared a good state
            self.record.log_event(
                "checkpoint_kept", self.step, checkpoint=self.checkpoints.kept_finite,
                keep=self.checkpoints.keep, reason="the newest checkpoint whose weights and "
                "optimizer state are all finite, kept beyond keep_checkpoints")
        self.record.started()  # an overwritten run, moved aside, can go now
        self.trigger_callbacks("on_checkpoint")

    def restore(self, source: int | str | Path, allow_nonfinite: bool | None = None) -> None:
        """Load a checkpoint: a step number of this run's store, or a checkpoint file.
        One that does not fit this trainer (another model shape, not a trainer's
        checkpoint) is one NanlabError line naming it; nothing is half loaded.

        One whose weights or optimizer state hold NaN or inf is refused too, naming the
        tensors and the newest finite checkpoint before it: resuming from it trains on NaN
        (:func:`refuse_nonfinite`). ``allow_nonfinite=True`` loads it anyway, for a replay
        that means to show the bad state; None: the trainer's own ``allow_nonfinite``.

        >>> from nanlab.train.trainer import TrainConfig, Trainer
        >>> small = Trainer(TrainConfig(steps=1, checkpoint_every=1, progress=False))
        >>> _ = small.run()
        >>> deeper = Trainer(TrainConfig(steps=1, progress=False, model={"n_layer": 3}))
        >>> deeper.checkpoints = small.checkpoints
        >>> deeper.restore(0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        nanlab.errors.NanlabError: checkpoint 0: does not fit this model: ...
        """
        if isinstance(source, int):
            state = self.checkpoints.load(source)
            where = (f"checkpoint {source}" if self.checkpoints.directory is None
                     else str(self.checkpoints.path(source)))
        else:
            if not Path(source).is_file():
                raise NanlabError(f"checkpoint file {str(source)!r} does not exist")
            state, where = safe_load(source), str(source)
        problem = misfit(self.state_dict(), state)
        if problem:
            raise NanlabError(f"{where}: does not fit this model: {problem}; allowed: a "
                              "checkpoint of this run, restored with the config it was trained "
                              "with (its manifest.json)")
        if not (self.allow_nonfinite if allow_nonfinite is None else allow_nonfinite):
            store = self.checkpoints if isinstance(source, int) else _store_of(Path(source))
            step = source if isinstance(source, int) else int(state.get("step", 0))
            refuse_nonfinite(state, where, store, step)
        self.load_state_dict(state)

    def schedule_restart(self, step: int) -> None:
        """A job restart (a preemption) before ``step``: the run saves a checkpoint there
        and resumes from it as a new process would (:meth:`restart`). A real run is
        restarted by its cluster's scheduler; a fault (``resume_fresh_optimizer``) or a test
        schedules one here, on the built run, not in its config.

        >>> from nanlab.train import TrainConfig, Trainer
        >>> trainer = Trainer(TrainConfig(steps=4, resume_skips=("optimizer",), progress=False))
        >>> trainer.schedule_restart(2)
        >>> _ = trainer.run()
        >>> e = trainer.record.events[0]
        >>> e["kind"], e["step"], e["optimizer_steps"], e["schedule_step"]
        ('restart', 2, 0, 2)
        """
        check_range("schedule_restart.step", step, 1, integer=True)
        self.restart_steps.add(step)

    def restart(self) -> dict:
        """A job restart before this step: save a checkpoint (``torch.save``), then resume
        from it as a new process would (``torch.load(weights_only=True)``), leaving fresh
        what ``config.resume_skips`` names. A "restart" event records what the resumed
        state holds, measured on the objects themselves: Adam's step count (0: a fresh
        optimizer), the schedule's step and the LR; returns that event.

        >>> from nanlab.train import TrainConfig, Trainer
        >>> trainer = Trainer(TrainConfig(steps=4, progress=False))
        >>> trainer.restart()["optimizer_steps"]  # nothing trained yet
        0
        """
        if self.step not in self.checkpoints.steps():
            self.save_checkpoint()
        skips = tuple(self.config.resume_skips)
        self.load_state_dict(self.checkpoints.load(self.step), skip=skips)
        self.last_restart = self.step
        facts = {"checkpoint": self.step, "fresh": list(skips),
                 "optimizer_steps": optimizer_steps(self.optimizer),
                 "schedule_step": int(self.scheduler.last_epoch),
                 "lr": float(self.optimizer.param_groups[0]["lr"])}
        self.record.log_event("restart", self.step, **facts)
        return {"kind": "restart", "step": self.step, **facts}
