"""One way to change the LR a run applies: a factor on whatever LR the optimizer and its
schedule give, at the moment the optimizer steps.

Writing ``group["lr"]`` by hand does not last: a scheduler (a ``LambdaLR``, a cosine)
overwrites it at its next ``step()``, and editing ``base_lrs`` changes what the scheduler,
``ReduceLROnPlateau`` and a checkpoint see as the run's own LR. The lever instead uses
the optimizer's step hooks: just before ``optimizer.step()`` each group's LR is multiplied
by the factor, just after it the LR is put back. Whatever sets the LR (any scheduler, a
plateau rule, the user's own loop) keeps setting it; the factor holds on every step.

>>> net = torch.nn.Linear(2, 1)
>>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
>>> sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
>>> set_lr_factor(opt, "demo", 10.0)
>>> applied_lr(opt), opt.param_groups[0]["lr"]      # the step applies 10x; the group keeps 0.1
(1.0, 0.1)
>>> net(torch.ones(1, 2)).sum().backward(); opt.step(); sched.step()
>>> applied_lr(opt), opt.param_groups[0]["lr"]      # the schedule halved it; the factor holds
(0.5, 0.05)
>>> set_lr_factor(opt, "demo", 1.0)                  # 1.0 takes a factor off
>>> applied_lr(opt)
0.05
"""

from __future__ import annotations

import math

import torch

from nanlab.errors import NanlabError

_ATTR = "_nanlab_lr_lever"  # where an optimizer keeps its lever (one per optimizer)


class LRLever:
    """The factors on one optimizer's LR, by name (so an injected fault, a restart's
    re-warmup and a user's own factor do not undo each other); the LR a step applies is
    the group's LR times their product. Made by :func:`lr_lever`.

    >>> opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> lever = lr_lever(opt); lever.set("a", 2.0); lever.set("b", 3.0); lever.factor
    6.0
    """

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.factors: dict[str, float] = {}
        self._saved: list | None = None  # the groups' own LRs while a step runs
        self._handles = (optimizer.register_step_pre_hook(self._before),
                         optimizer.register_step_post_hook(self._after))

    @property
    def factor(self) -> float:
        return math.prod(self.factors.values())

    def set(self, name: str, factor: float) -> None:
        """Apply ``factor`` under ``name`` from the next ``optimizer.step()``; 1.0 removes it."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not math.isfinite(factor) or factor <= 0:
            raise NanlabError(f"LR factor {name}={factor!r} is not allowed; give a finite "
                              "number above 0")
        if factor == 1.0:
            self.factors.pop(name, None)
        else:
            self.factors[name] = float(factor)

    def _before(self, optimizer, args, kwargs) -> None:
        self._after(optimizer, args, kwargs)  # a step that raised never put its LRs back
        factor = self.factor
        if factor != 1.0:
            self._saved = [group["lr"] for group in optimizer.param_groups]
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * factor

    def _after(self, optimizer, args, kwargs) -> None:
        if self._saved is not None:
            for group, lr in zip(optimizer.param_groups, self._saved, strict=True):
                group["lr"] = lr
            self._saved = None


def lr_lever(optimizer: torch.optim.Optimizer) -> LRLever:
    """The optimizer's lever, made (and its two step hooks registered) on first use.

    >>> opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> lr_lever(opt) is lr_lever(opt)
    True
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise NanlabError(f"an LR factor needs a torch.optim.Optimizer; got "
                          f"{type(optimizer).__name__}")
    if not optimizer.param_groups or any("lr" not in g for g in optimizer.param_groups):
        raise NanlabError(f"an LR factor needs an optimizer whose param groups each have an "
                          f"lr; this {type(optimizer).__name__} has "
                          f"{len(optimizer.param_groups)} param group(s)")
    lever = getattr(optimizer, _ATTR, None)
    if lever is None:
        lever = LRLever(optimizer)
        setattr(optimizer, _ATTR, lever)
    return lever


def set_lr_factor(optimizer: torch.optim.Optimizer, name: str, factor: float) -> None:
    """Multiply the LR of every ``optimizer.step()`` from now on by ``factor`` (1.0: stop);
    an optimizer that never gets a factor other than 1.0 gets no hooks at all.

    >>> opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> set_lr_factor(opt, "kick", 10.0); round(applied_lr(opt), 6)
    1.0
    """
    if factor == 1.0 and getattr(optimizer, _ATTR, None) is None:
        return
    lr_lever(optimizer).set(name, factor)


def applied_lr(optimizer: torch.optim.Optimizer, group: int = 0) -> float:
    """The LR the next ``optimizer.step()`` applies to ``group``: its LR times the factors
    (what a run should log as its LR).

    >>> applied_lr(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1))
    0.1
    """
    lr = optimizer.param_groups[group]["lr"]
    lever = getattr(optimizer, _ATTR, None)
    factor = lever.factor if lever is not None else 1.0
    return float(lr * factor) if factor != 1.0 else float(lr)
