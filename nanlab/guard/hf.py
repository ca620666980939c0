"""nanlab's guard in the Hugging Face ``Trainer``: stop, skip or recover as a ``TrainerCallback``.

The policy is :class:`nanlab.guard.Guard`'s (see :mod:`nanlab.guard.framework` for how it
is driven); this module wires it to the hooks of ``transformers.Trainer``
(transformers/trainer.py, ``_run_epoch``):

- ``on_step_begin``: a good state kept every ``keep_every`` steps (``recover``).
- the model's forward: a forward hook reads ``outputs.loss`` (every Hugging Face model
  returns it when given labels) and the batch, on the device, without a sync.
- ``on_pre_optimizer_step``: called after backward and gradient clipping, just before
  ``optimizer.step()``. One host read of the loss and grad norm, then the guard decides.
  The norm is the clipped one (at most ``max_grad_norm``); a NaN or inf stays non-finite
  through clipping, but a clipped norm cannot spike, so ``watch_grad_norm`` needs
  ``max_grad_norm=0``.
  A dropped update sets the gradients to None, so ``optimizer.step()`` leaves weights and
  optimizer state alone; the LR schedule is put back after the Trainer steps it.
- ``on_step_end``: a rollback restores weights, optimizer and schedule, cutting the LR on a
  repeat; ``stop`` sets ``control.should_training_stop``.

``state.global_step`` keeps counting every attempted update (as it does for a step that a
GradScaler skips). Each action is a warning on the ``transformers`` logger and an entry
in ``state.log_history`` (``{"step", "nanlab_guard": action, "reason"}``), next to the
Trainer's own loss entries; evidence goes to ``<output_dir>/nanlab/evidence/`` (a folder
per rank under DDP). Under DDP the ranks agree through one all-reduce of the flags.

Example::

    from nanlab.guard.hf import GuardCallback
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[GuardCallback("recover")])
    trainer.train()

Needs ``pip install 'nanlab[hf]'``.
"""

from __future__ import annotations

from pathlib import Path

from nanlab.errors import NanlabError, require
from nanlab.guard.framework import GuardHooks

require("transformers", "hf")  # its Trainer also needs accelerate (in the extra), and says so

from transformers import TrainerCallback  # noqa: E402
from transformers.utils import logging  # noqa: E402

logger = logging.get_logger(__name__)


class GuardCallback(GuardHooks, TrainerCallback):
    """Stop, skip or recover inside ``transformers.Trainer`` (see the module docstring).

    ``mode`` and ``**options`` are :class:`nanlab.guard.Guard`'s (``spike=``,
    ``lr_factor=``, ``max_rollbacks=``, ...), or pass a ready ``guard=``. ``keep_every``:
    steps between the in-memory snapshots ``recover`` rolls back to (the last two kept).

    >>> cb = GuardCallback("skip")
    >>> cb.guard.mode, cb.summary()["skip"]
    ('skip', 0)
    """

    def __init__(self, mode: str = "recover", **options):
        super().__init__(mode, **options)
        self._hook = None  # the forward hook that reads the model's loss

    def on_train_begin(self, args, state, control, model=None, optimizer=None,
                       lr_scheduler=None, **kwargs):
        if self.guard.settings["watch_grad_norm"] and args.max_grad_norm > 0:
            raise NanlabError(f"watch_grad_norm=True, but the Trainer clips the gradients "
                              f"(max_grad_norm={args.max_grad_norm}) before the guard sees "
                              "their norm, which then cannot spike; allowed: max_grad_norm=0 "
                              "in TrainingArguments, or watch_grad_norm=False")
        folder = Path(args.output_dir) / "nanlab"
        if args.world_size > 1:
            folder = folder / f"rank{args.process_index}"
        self.steps.bind(model, optimizer, lr_scheduler, evidence_dir=folder)
        self._hook = model.register_forward_hook(self._read_output, with_kwargs=True)

    def _read_output(self, module, args, kwargs, output) -> None:
        if not module.training:
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is not None:
            self.steps.add_loss(loss)
            self._batch = kwargs or args

    def on_step_begin(self, args, state, control, **kwargs):
        self.steps.step_start(state.global_step)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        d = self._decide(state.global_step)
        if d is not None and d.action == "stop":
            control.should_training_stop = True
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.step_end()
        events = self.steps.new_events()
        for e in events:  # the update this step would have made, in the Trainer's numbering
            entry = {"step": state.global_step, "nanlab_guard": e["action"],
                     "reason": e["reason"]}
            if e["action"] == "rollback":
                back = next(g for g in reversed(self.guard.events) if g["kind"] == "rollback")
                entry.update(to_step=back["to_step"], lr_scale=self.guard.lr_scale)
            state.log_history.append(entry)
            logger.warning(f"nanlab guard, step {state.global_step}: {e['action']} "
                           f"({e['reason']})")
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


__all__ = ["GuardCallback"]
