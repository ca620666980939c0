"""nanlab's guard in Lightning: stop, skip or recover as a ``lightning.pytorch.Callback``.

The policy is :class:`nanlab.guard.Guard`'s (see :mod:`nanlab.guard.framework` for how it
is driven); this module wires it to Lightning's hooks under automatic optimization
(lightning/pytorch/loops/training_epoch_loop.py and plugins/precision/precision.py):

- ``on_train_batch_start``: a good state kept every ``keep_every`` steps (``recover``).
- ``on_before_backward``: the loss, kept on its device (no sync).
- ``on_before_optimizer_step``: runs inside ``optimizer.step(closure)``, after the
  closure's backward and before both gradient clipping and the update. One host read of
  the loss and grad norm, then the guard decides. A dropped update sets the gradients to
  None, so the optimizer's update that follows leaves weights and optimizer state alone
  (returning None from ``training_step`` would skip it too, but that is the user's code,
  and the decision needs the gradients).
- ``on_train_batch_end``: after Lightning stepped the LR schedulers: the schedule put back
  for a dropped update, or a rollback (weights, optimizer, schedule; the LR cut on a
  repeat); ``stop`` sets ``trainer.should_stop``.

``trainer.global_step`` keeps counting every attempted update. Each action is a warning
from rank zero (``rank_zero_warn``) and, the step it happens, a logged metric
(``nanlab_guard/dropped``, ``nanlab_guard/rollbacks``) for the loggers and the progress
bar; evidence goes to ``<default_root_dir>/nanlab/evidence/`` (a folder per rank under
DDP). Under DDP the ranks agree through one all-reduce of the flags.

Example::

    from nanlab.guard.lightning import GuardCallback
    trainer = lightning.Trainer(max_steps=1000, callbacks=[GuardCallback("recover")])
    trainer.fit(module, dataloader)

Needs ``pip install 'nanlab[lightning]'``.
"""

from __future__ import annotations

from pathlib import Path

from nanlab.errors import NanlabError, require
from nanlab.guard.framework import GuardHooks

require("lightning", "lightning")

from lightning.pytorch import Callback  # noqa: E402
from lightning.pytorch.utilities import rank_zero_warn  # noqa: E402


class GuardCallback(GuardHooks, Callback):
    """Stop, skip or recover inside ``lightning.Trainer`` (see the module docstring).

    ``mode`` and ``**options`` are :class:`nanlab.guard.Guard`'s (``spike=``,
    ``lr_factor=``, ``max_rollbacks=``, ...), or pass a ready ``guard=``. ``keep_every``:
    steps between the in-memory snapshots ``recover`` rolls back to (the last two kept).

    >>> cb = GuardCallback("skip")
    >>> cb.guard.mode, cb.summary()["skip"]
    ('skip', 0)
    """

    def on_train_start(self, trainer, pl_module) -> None:
        if not pl_module.automatic_optimization:
            raise NanlabError("GuardCallback needs automatic optimization (Lightning steps "
                              "the optimizer and schedulers); got automatic_optimization="
                              "False: use nanlab.guard.Guard's plain-loop API in your "
                              "training_step instead")
        if len(trainer.optimizers) != 1:
            raise NanlabError(f"GuardCallback guards one optimizer; this module has "
                              f"{len(trainer.optimizers)}")
        configs = trainer.lr_scheduler_configs
        if len(configs) > 1:
            raise NanlabError(f"GuardCallback guards at most one LR scheduler; this module "
                              f"has {len(configs)}")
        folder = Path(trainer.default_root_dir) / "nanlab"
        if trainer.world_size > 1:
            folder = folder / f"rank{trainer.global_rank}"
        self.steps.bind(pl_module, trainer.optimizers[0],
                        configs[0].scheduler if configs else None, evidence_dir=folder)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.steps.step_start(trainer.global_step)
        self._batch = batch

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.steps.add_loss(loss)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        d = self._decide(trainer.global_step)
        if d is not None and d.action == "stop":
            trainer.should_stop = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.step_end()
        events = self.steps.new_events()
        if not events:
            return
        for e in events:  # the global step is past the update that was dropped
            rank_zero_warn(f"nanlab guard, step {trainer.global_step}: {e['action']} "
                           f"({e['reason']})", category=RuntimeWarning)
        pl_module.log_dict({"nanlab_guard/dropped": float(len(self.steps.dropped)),
                            "nanlab_guard/rollbacks": float(self.guard.rollbacks)},
                           on_step=True, on_epoch=False)


__all__ = ["GuardCallback"]
