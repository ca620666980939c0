"""A plain loop's good states, kept in memory for the guard's rollback.

``Guard.keep`` runs every few steps of a healthy run, so its cost is the guard's cost.
Serialising the state (``torch.save`` into bytes) costs a pickle and two copies each
time; instead each kept state is a tree of tensors copied with ``copy_`` into buffers
allocated once and reused: the state that falls out of the window of two hands its
buffers to the next one. A rollback loads a fresh clone, never the buffers themselves
(``Optimizer.load_state_dict`` keeps the tensors it is given, and the next ``keep``
would overwrite them under the optimizer's feet). ``bench/bench_callbacks.py`` measures
the difference.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from nanlab.errors import NanlabError


def copy_tree(state: Any, into: Any = None) -> Any:
    """A copy of a nested state (dicts, lists, tuples of tensors and plain values) that
    shares no tensor with ``state``. Where ``into`` (an earlier copy of the same shape)
    holds a tensor of the same shape, dtype and device, it is refilled in place.

    >>> w = torch.ones(2)
    >>> kept = copy_tree({"w": w, "step": 3})
    >>> buffer = kept["w"]
    >>> w += 1
    >>> again = copy_tree({"w": w, "step": 4}, into=kept)
    >>> again["w"] is buffer, again["w"].tolist(), again["step"]
    (True, [2.0, 2.0], 4)
    """
    if isinstance(state, torch.Tensor):
        if isinstance(into, torch.Tensor) and into.shape == state.shape \
                and into.dtype == state.dtype and into.device == state.device:
            return into.copy_(state)
        return state.detach().clone()
    if isinstance(state, dict):
        old = into if isinstance(into, dict) else {}
        return {k: copy_tree(v, old.get(k)) for k, v in state.items()}
    if isinstance(state, list | tuple):
        old = into if isinstance(into, list | tuple) and len(into) == len(state) else ()
        items = [copy_tree(v, old[i] if old else None) for i, v in enumerate(state)]
        return items if isinstance(state, list) else type(state)(items)
    return copy.deepcopy(state)


KEEP = 2  # states kept: a spike at step t needs one from before step t - 1


class PlainLoop:
    """The plain-loop half of :class:`nanlab.guard.Guard` (a mixin: ``watch``, ``keep``,
    ``rollback``, ``next_position``; it uses the guard's LR scale, detectors and log).

    >>> from nanlab.guard import Guard
    >>> isinstance(Guard("recover"), PlainLoop)
    True
    """

    def watch(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              scheduler: Any = None):
        """Plain loop: the model, optimizer (and LR scheduler) to snapshot and roll back.

        >>> from nanlab.guard import Guard
        >>> net = torch.nn.Linear(2, 1)
        >>> guard = Guard("recover").watch(net, torch.optim.SGD(net.parameters(), lr=0.1))
        """
        if self.trainer is not None:
            raise NanlabError("this Guard is attached to a trainer; watch() is for a plain "
                              "loop: make a second Guard")
        self._model, self._optimizer, self._scheduler = model, optimizer, scheduler
        return self

    def _loop_state(self) -> dict:
        state = {"model": self._model.state_dict(), "optimizer": self._optimizer.state_dict()}
        if self._scheduler is not None:
            state["scheduler"] = self._scheduler.state_dict()
        return state

    def _need_watch(self, what: str) -> None:
        if self._optimizer is None:
            raise NanlabError(f"guard.{what}() needs guard.watch(model, optimizer) first "
                              "(or attach(trainer), which keeps checkpoints itself)")

    def _kept_state(self, step: int) -> dict:
        return self._kept[step][0]

    def keep(self, step: int, position: Any = None) -> None:
        """Plain loop: remember the current state as good, before running ``step``.

        ``position`` is your data position (handed back by :meth:`rollback`). The last
        two states are kept in memory, in buffers reused from one keep to the next.

        >>> from nanlab.guard import Guard
        >>> net = torch.nn.Linear(2, 1)
        >>> guard = Guard("recover").watch(net, torch.optim.SGD(net.parameters(), lr=0.1))
        >>> guard.keep(0, position=0)
        """
        self._need_watch("keep")
        spare = self._spare.pop() if self._spare else None
        state = copy_tree(self._loop_state(), into=spare)
        self._kept[step] = (state, position, self.lr_scale, self.detectors.state())
        self._checked.pop(step, None)
        for old in sorted(self._kept)[:-KEEP]:
            self._spare.append(self._kept.pop(old)[0])

    def rollback(self) -> tuple[int, Any]:
        """Plain loop: act on the last "rollback" decision. Loads the kept state, cuts the
        LR, remembers the batches to skip; returns ``(step, position)`` to resume from.

        >>> # after: decision = guard.check(...); decision.action == "rollback"
        >>> # step, pos = guard.rollback()
        """
        self._need_watch("rollback")
        d = self._last
        if d is None or d.action != "rollback":
            raise NanlabError("guard.rollback() follows a check() that returned "
                              f"action='rollback'; the last decision was "
                              f"{d.action if d else None!r}")
        kept, position, kept_scale, detectors = self._kept[d.to_step]
        state = copy_tree(kept)  # the optimizer keeps what it loads: never the buffers
        self._model.load_state_dict(state["model"])
        self._optimizer.load_state_dict(state["optimizer"])
        if self._scheduler is not None and "scheduler" in state:
            self._scheduler.load_state_dict(state["scheduler"])
        self.lr_scale *= d.lr_factor
        ratio = self.lr_scale / kept_scale  # the kept state ran at its own, older scale
        for group in self._optimizer.param_groups:
            group["lr"] *= ratio
        if self._scheduler is not None and hasattr(self._scheduler, "base_lrs"):
            self._scheduler.base_lrs = [lr * ratio for lr in self._scheduler.base_lrs]
        for s in [s for s in self._kept if s > d.to_step]:  # the abandoned branch
            self._spare.append(self._kept.pop(s)[0])
        self.skip_batches.update(d.skip_batches)
        self.detectors.load(detectors)
        self._record_rollback(d, self.lr_scale)
        self._last = None
        return d.to_step, position

    def next_position(self, position: int) -> int:
        """Plain loop: the first batch index at or after ``position`` not to be skipped.

        >>> from nanlab.guard import Guard
        >>> Guard().next_position(3)
        3
        """
        while position in self.skip_batches:
            position += 1
        return position
