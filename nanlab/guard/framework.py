"""What the Hugging Face and Lightning callbacks share: one Guard driven from a framework's hooks.

A framework's training loop offers a callback four moments: a step starts, the loss is
known, the gradients are ready before the optimizer step, the step has ended.
:class:`GuardedSteps` maps the guard's plain-loop API (``watch``, ``keep``, ``check``,
``rollback``, :mod:`nanlab.guard.guard`) onto them, so the policy is the guard's, not a copy:

- **step start**: every ``keep_every`` steps, ``guard.keep`` (``recover`` only): the
  weights, optimizer and LR schedule, in memory (the last two are kept).
- **gradients ready**: one host read of the loss and the global grad norm, then
  ``guard.check`` (under ``torch.distributed`` its flags are all-reduced, so every rank
  decides alike). A dropped update sets every gradient to None: torch's optimizers skip a
  parameter without a gradient entirely, so AdamW's moments, step count and weight decay
  stay as they were. (A *zeroed* gradient is not a skip: AdamW would still move every
  weight by its momentum and decay it.) The LR schedule is held: its state and the groups'
  LRs are put back after the framework steps it, as if that step never happened.
- **step end**: a rollback loads the kept state and cuts the LR (``guard.rollback``).

Step numbers are the framework's global step (the optimizer steps it has attempted). It
keeps counting through a rollback and the data moves on: the batches between the kept
state and the failure are never trained on again (PaLM's restart skipped them the same
way), and the guard's ``skip_batches`` after the failure are dropped as they arrive.

>>> net = torch.nn.Linear(2, 1)
>>> steps = GuardedSteps(Guard("skip"), keep_every=10)
>>> steps.bind(net, torch.optim.AdamW(net.parameters()))
>>> steps.step_start(0)
>>> net(torch.tensor([[float("nan"), 1.0]])).sum().backward()
>>> steps.decide(0).action, net.weight.grad
('skip', None)
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import torch

from nanlab.errors import NanlabError, check_range
from nanlab.guard.guard import Decision, Guard

# Steps between in-memory snapshots (recover), as nanlab's Trainer's checkpoint_every. A
# snapshot serialises weights and optimizer state (5 ms on bench_callbacks' GPT-2, 40 % of
# a step): every 10 steps it cost 4-5 % per step, every 50 about 1 %.
KEEP_EVERY = 50


def grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of the gradients, a tensor (no host sync), 0 when there are none.

    One foreach norm over all gradients of a device, as ``clip_grad_norm_`` computes it,
    without its per-call grouping (a fixed cost that shows on small models).

    >>> p = torch.nn.Parameter(torch.ones(2)); p.grad = torch.tensor([3.0, 4.0])
    >>> float(grad_norm([p]))
    5.0
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    first = grads[0].device
    if any(g.device != first for g in grads) or not hasattr(torch, "_foreach_norm"):
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g).to(first)
                                                     for g in grads]))
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


class HeldSchedule:
    """The LR schedule as it was before a dropped update, to put back after the framework
    stepped it: the scheduler's state and each param group's LR.

    >>> net = torch.nn.Linear(2, 1); opt = torch.optim.SGD(net.parameters(), lr=1.0)
    >>> sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    >>> held = HeldSchedule(opt, sched); opt.step(); sched.step(); held.restore()
    >>> opt.param_groups[0]["lr"], sched.last_epoch
    (1.0, 0)
    """

    def __init__(self, optimizer, scheduler=None):
        self.optimizer, self.scheduler = optimizer, scheduler
        self.lrs = [group["lr"] for group in optimizer.param_groups]
        self.state = copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None

    def restore(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self.lrs, strict=True):
            group["lr"] = lr
        if self.scheduler is not None:
            self.scheduler.load_state_dict(self.state)


class GuardedSteps:
    """One :class:`Guard` driven through a framework's step hooks (see the module docstring).

    ``events`` lists what it did, newest last, for the callback to log the framework's way:
    ``{"step", "action", "reason"}`` with action "skip", "skip_batch", "rollback" or "stop".

    >>> steps = GuardedSteps(Guard("recover"), keep_every=5)
    >>> steps.recovers
    True
    """

    def __init__(self, guard: Guard, keep_every: int = KEEP_EVERY):
        check_range("keep_every", keep_every, 1, integer=True)
        self.guard, self.keep_every = guard, keep_every
        self.recovers = "recover" in (guard.mode, guard.spike)
        self.events: list[dict] = []
        self.params: list[torch.Tensor] = []
        self._optimizer = self._scheduler = None
        self._losses: list[torch.Tensor] = []  # this step's micro-batch losses, on device
        self._held: HeldSchedule | None = None
        self._rollback = False
        self._kept_at: int | None = None
        self._reported = 0  # events already handed out by new_events

    def bind(self, model: torch.nn.Module, optimizer, scheduler=None,
             evidence_dir: str | Path | None = None) -> None:
        """The objects to guard, once the framework has built them (its train start)."""
        self.guard.watch(model, optimizer, scheduler)
        if self.guard.evidence_dir is None and evidence_dir is not None:
            self.guard.evidence_dir = Path(evidence_dir)
        self._optimizer, self._scheduler = optimizer, scheduler
        self.params = [p for p in model.parameters() if p.requires_grad]

    def step_start(self, step: int) -> None:
        """Before the step's (first) forward: keep a good state every ``keep_every`` steps."""
        if self.recovers and step % self.keep_every == 0 and step != self._kept_at:
            self.guard.keep(step, step)
            self._kept_at = step

    def add_loss(self, loss: torch.Tensor) -> None:
        """A micro-batch's loss (kept on its device: no sync here)."""
        self._losses.append(loss.detach())

    def decide(self, step: int, batch: Any = None) -> Decision | None:
        """Gradients ready, update not applied: check, and drop the update if told to.
        None when the step's batch is one the guard skips after a rollback."""
        losses, self._losses = self._losses, []
        if step in self.guard.skip_batches:
            self._drop()
            self._note(step, "skip_batch", "recover: a batch next to a failure is not "
                                           "trained on")
            return None
        norm = grad_norm(self.params).float()
        if losses:
            loss = losses[0] if len(losses) == 1 else torch.stack(
                [x.reshape(()).to(norm.device) for x in losses]).mean()
            loss_value, norm_value = torch.stack([loss.float().reshape(()), norm]).tolist()
        elif self.guard.spike is not None:
            raise NanlabError("the guard's spike detector needs the loss, and this step's "
                              "loss was not seen (a model output without .loss?); allowed: "
                              "spike=None, which guards on the grad norm alone")
        else:
            loss_value, norm_value = math.nan, norm.item()
        finite = math.isfinite(norm_value) and (not losses or math.isfinite(loss_value))
        d = self.guard.check(step, loss_value, norm_value, batch_index=step, batch=batch,
                             finite=finite)
        if not d.ok:
            self._drop()
            self._rollback = d.action == "rollback"
            self._note(step, d.action, d.reason)
        return d

    def step_end(self) -> bool:
        """After the framework stepped the optimizer and the schedule: undo the schedule's
        step for a dropped update, or roll back. True when it rolled back."""
        held, self._held = self._held, None
        if self._rollback:
            self._rollback = False
            self.guard.rollback()  # loads the kept schedule too
            return True
        if held is not None:
            held.restore()
        return False

    def _drop(self) -> None:
        self._held = HeldSchedule(self._optimizer, self._scheduler)
        for p in self.params:
            p.grad = None

    @property
    def dropped(self) -> list[int]:
        """The steps whose update was dropped (every event drops its step's update)."""
        return [e["step"] for e in self.events]

    def _note(self, step: int, action: str, reason: str) -> None:
        self.events.append({"step": step, "action": action, "reason": reason})

    def new_events(self) -> list[dict]:
        """The events since the last call: what a callback has not logged yet."""
        events, self._reported = self.events[self._reported:], len(self.events)
        return events


class GuardHooks:
    """The part of a framework callback that is not the framework's: its guard, the steps
    it drives, and the batch of the step under way (for the evidence). A callback class
    inherits from this and from its framework's callback class.

    >>> hooks = GuardHooks("skip")
    >>> hooks.guard.mode, hooks.summary()["skip"]
    ('skip', 0)
    """

    def __init__(self, mode: str = "recover", *, keep_every: int = KEEP_EVERY,
                 guard: Guard | None = None, **options):
        self.guard = guard if guard is not None else Guard(mode, **options)
        self.steps = GuardedSteps(self.guard, keep_every)
        self._batch: Any = None

    def summary(self) -> dict:
        """The guard's counts (skips, rollbacks, incidents, evidence, ...)."""
        return self.guard.summary()

    def _decide(self, step: int) -> Decision | None:
        """The guard's decision on this step's gradients, with the batch it saw."""
        batch, self._batch = self._batch, None
        return self.steps.decide(step, batch=batch)


__all__ = ["KEEP_EVERY", "GuardHooks", "GuardedSteps", "HeldSchedule", "grad_norm"]
