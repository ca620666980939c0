"""The cures of the SOP, as objects: each changes a run's config or hooks into it.

A fix is "not applicable" to a run it would not change (turning AMP off in a run that
is already fp32): :meth:`Fix.configure` returns None then, and the fault x fix matrix
says n/a instead of pretending to measure something.

>>> from nanlab.faults.fixes import FIXES
>>> FIXES["lr_div10"].configure(TrainConfig(lr=0.5)).lr
0.05
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nanlab.batches import named_tensors
from nanlab.data import IGNORE_INDEX
from nanlab.errors import check_choice
from nanlab.train import TrainConfig, Trainer


@dataclass(frozen=True)
class Fix:
    """One cure: what it does, what it changes in the config, what it installs.

    ``change(config)`` returns the config changes (``{}``: installs something instead;
    ``None``: does not apply to this config); ``install(trainer)`` adds callbacks.

    >>> from nanlab.train import TrainConfig
    >>> fix = get_fix("lr_div10")
    >>> fix.configure(TrainConfig(lr=5e-3)).lr
    0.0005
    """

    name: str
    summary: str
    change: Callable[[TrainConfig], dict]  # config changes; None: does not apply
    install: Callable[[Trainer], None] = lambda trainer: None

    def configure(self, config: TrainConfig) -> TrainConfig | None:
        changes = self.change(config)
        if changes is None:
            return None
        return config.replace(**changes)

    def applies(self, config: TrainConfig) -> bool:
        return self.change(config) is not None


def batch_problems(batch, vocab_size: int | None = None) -> list[str]:
    """What is wrong with a batch, in words; [] for a clean one (SOP step 1).

    Every float tensor must be finite; integer tensors are labels: no negative value
    other than IGNORE_INDEX (-100), none >= ``vocab_size`` when it is given, and not
    all masked (a mean over nothing is 0 / 0).

    >>> from nanlab.data import CountingTask
    >>> batch_problems(CountingTask()(0), vocab_size=32)
    []
    """
    problems = []
    for name, t in named_tensors(batch, "batch" if isinstance(batch, torch.Tensor) else ""):
        if t.is_floating_point():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                nan = int(torch.isnan(t).sum())
                problems.append(f"{name}: {bad} non-finite value(s) ({nan} NaN, "
                                f"{bad - nan} inf) of {t.numel()}")
            continue
        if t.dtype == torch.bool or name in ("tokens",):
            continue
        valid = t != IGNORE_INDEX
        if t.numel() and not valid.any():
            problems.append(f"{name}: every target is masked ({IGNORE_INDEX}): "
                            "the mean loss is 0 / 0")
        illegal = valid & (t < 0)
        if vocab_size is not None:
            illegal |= valid & (t >= vocab_size)
        if illegal.any():
            values = sorted(set(t[illegal].tolist()))[:5]
            problems.append(f"{name}: {int(illegal.sum())} illegal label(s) {values}")
    return problems


def _skip_bad_batches(trainer: Trainer) -> None:
    """Check every batch before it is used and train on the next clean one instead."""
    source, vocab = trainer.batches, trainer.config.model.vocab_size

    def checked(index: int):
        batch = source(index)
        problems = batch_problems(batch, vocab)
        if problems:
            trainer.record.log_event("bad_batch", trainer.step, batch=index,
                                     problems=problems)
            trainer.skip_batches.add(index)
            trainer.data_position = index + 1
            return checked(trainer.next_batch_index())
        return batch
    trainer.batches = checked


def _skip_nonfinite(trainer: Trainer) -> None:
    def check(tr: Trainer, info) -> None:
        if not info.finite:
            info.skip, info.skip_reason = True, "non-finite loss or gradient"
    trainer.add_callback("on_after_backward", check)


def _only(condition: bool, changes: dict) -> dict | None:
    return changes if condition else None


FIXES: dict[str, Fix] = {f.name: f for f in [
    Fix("validate_data", "check every batch (finite inputs, legal labels, something to "
        "average) and skip the bad ones", lambda c: {}, _skip_bad_batches),
    Fix("amp_off", "train in fp32", lambda c: _only(c.precision != "fp32",
                                                    {"precision": "fp32", "grad_scaler": None})),
    Fix("bf16", "bf16 autocast: fp32's range, no scaler needed",
        lambda c: _only(c.precision != "bf16", {"precision": "bf16", "grad_scaler": None})),
    Fix("grad_scaler", "fp16 autocast with a GradScaler (fp32 weights, scaled loss)",
        lambda c: _only(c.precision in ("fp16", "fp16-pure") and not (
            c.precision == "fp16" and c.grad_scaler is not False),
            {"precision": "fp16", "grad_scaler": True})),
    Fix("lr_div10", "divide the learning rate by 10", lambda c: {"lr": c.lr / 10}),
    Fix("warmup_cosine", "20 warmup steps, then cosine decay",
        lambda c: _only(c.warmup_steps < 20 or c.schedule != "cosine",
                        {"warmup_steps": 20, "schedule": "cosine"})),
    Fix("grad_clip", "clip the global grad norm to 1.0",
        lambda c: _only(c.grad_clip == 0 or c.grad_clip > 1.0, {"grad_clip": 1.0})),
    Fix("sane_init", "the GPT-2 recipe: normal(0, 0.02) init, zero biases, pre-LN blocks "
        "with residuals",
        lambda c: _only(
            (c.model.init, c.model.init_std, c.model.init_scale, c.model.mlp_bias_init,
             c.model.use_norms, c.model.residual) != ("normal", 0.02, 1.0, 0.0, True, True),
            {"model": {"init": "normal", "init_std": 0.02, "init_scale": 1.0,
                       "mlp_bias_init": 0.0, "use_norms": True, "residual": True}})),
    Fix("modern_block", "the pre-LN block: LayerNorm, residual connections, GELU",
        lambda c: _only(
            (c.model.use_norms, c.model.residual, c.model.activation) != (True, True, "gelu"),
            {"model": {"use_norms": True, "residual": True, "activation": "gelu"}})),
    Fix("norm_eps", "LayerNorm eps = 1e-5 (Adam's eps is not touched: see grad_scaler)",
        lambda c: _only(c.model.norm_eps < 1e-5, {"model": {"norm_eps": 1e-5}})),
    Fix("stable_softmax", "subtract the row max before exp (attention and loss)",
        lambda c: _only(c.model.softmax != "stable" or c.loss_impl != "torch",
                        {"model": {"softmax": "stable"}, "loss_impl": "torch"})),
    Fix("qk_norm", "LayerNorm on queries and keys",
        lambda c: _only(not c.model.qk_norm, {"model": {"qk_norm": True}})),
    Fix("z_loss", "add 1e-4 * log(Z)^2 to the loss",
        lambda c: _only(c.z_loss == 0, {"z_loss": 1e-4})),
    Fix("skip_nonfinite", "skip the update of any step whose loss or gradient is not "
        "finite (the guard's skip mode)", lambda c: {}, _skip_nonfinite),
]}


def get_fix(name: str) -> Fix:
    """The fix called ``name`` (one of ``FIXES``); a clear error names the choices.

    >>> get_fix("grad_clip").name
    'grad_clip'
    >>> sorted(FIXES)[:3]
    ['amp_off', 'bf16', 'grad_clip']
    """
    check_choice("fix", name, sorted(FIXES))
    return FIXES[name]


__all__ = ["FIXES", "Fix", "batch_problems", "get_fix"]
