"""LR sensitivity over a learning-rate sweep, as Wortsman et al. 2023 define it.

"Small-scale proxies for large-scale Transformer training instabilities" (arXiv
2309.14322, section 2.2) summarise a final-loss-against-LR curve by one number::

    LR sensitivity = E_{lr in [a, b]} [ min(loss(lr), loss_0) - loss* ]

``loss(lr)`` is the final validation loss of a run trained at peak LR ``lr``, ``loss_0``
the loss at initialisation (a run that diverged counts as ``loss_0``, not infinity) and
``loss*`` the best final loss of the sweep. The paper sweeps
{3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1} (``PAPER_LRS``). Low means "trains well over
three orders of magnitude of LR"; it says nothing about how low the loss is (their
Appendix B): read it beside the curve.

:func:`lr_sweep` trains every (variant, LR) pair with :class:`~nanlab.debug.probes.ModelProbe`
attached and returns a tidy table (one row per run) and the sensitivity per variant.

>>> round(lr_sensitivity([4.5, 4.0, 9.0], initial_loss=7.0), 4)  # (4.5 + 4 + 7) / 3 - 4
1.1667
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from nanlab.debug.probes import ModelProbe
from nanlab.errors import NanlabError
from nanlab.train.config import TrainConfig
from nanlab.train.trainer import Trainer, lm_loss, stop_early

PAPER_LRS = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)  # Wortsman et al. 2023, section 2.2
EVAL_OFFSET = 1_000_000  # held-out batches: indices no training run reaches


def lr_sensitivity(final_losses: Sequence[float], initial_loss: float) -> float:
    """E[min(loss, loss_0) - loss*] over the sweep; a NaN or inf final loss counts as loss_0.

    >>> lr_sensitivity([2.0, 2.0, float("nan")], initial_loss=3.5)  # one run diverged
    0.5
    """
    if not final_losses:
        raise NanlabError("lr_sensitivity needs at least one final loss; got none")
    if not math.isfinite(initial_loss):
        raise NanlabError(f"initial_loss={initial_loss} is not allowed; it must be finite")
    capped = [min(x, initial_loss) if math.isfinite(x) else initial_loss for x in final_losses]
    finite = [x for x in final_losses if math.isfinite(x)]
    best = min(finite) if finite else initial_loss
    return sum(capped) / len(capped) - best


def independent_decay(optimizer: torch.optim.Optimizer, decay: float) -> None:
    """Make an optimizer's weight decay ``theta -= s_t * decay * theta``, not scaled by the LR.

    PyTorch's AdamW multiplies its decay by the LR (``theta -= s_t * lr * wd * theta``);
    Loshchilov and Hutter, and Wortsman et al. (section 3.2.2), scale it by the schedule
    ``s_t`` only. Setting each group's ``wd = decay / lr`` gives exactly that with the
    stock optimizer. In :func:`lr_sweep`: the variant ``{"independent_decay": 1e-2}``.

    >>> opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], lr=1e-3)
    >>> independent_decay(opt, 1e-2)
    >>> opt.param_groups[0]["weight_decay"]
    10.0
    """
    if not math.isfinite(decay) or not 0 <= decay < 1:
        raise NanlabError(f"independent decay={decay!r} is not allowed; give 0 <= decay < 1")
    for group in optimizer.param_groups:
        group["weight_decay"] = decay / group["lr"]


@torch.no_grad()
def eval_loss(trainer: Trainer, batches: int = 4) -> float:
    """Mean cross-entropy (no z-loss) on ``batches`` held-out batches; NaN if the model diverged.

    >>> round(eval_loss(Trainer(TrainConfig(progress=False))), 1)   # untrained: ~ln(32)
    3.5
    """
    was_training = trainer.model.training
    trainer.model.eval()
    try:
        losses = [lm_loss(trainer.model, trainer.batches(EVAL_OFFSET + i)).item()
                  for i in range(batches)]
    finally:
        trainer.model.train(was_training)
    return sum(losses) / len(losses)


@dataclass
class Sweep:
    """What :func:`lr_sweep` measured: ``rows`` (one dict per run) and ``probes`` (per run).

    >>> sweep = Sweep(rows=[{"variant": "a", "lr": 0.1, "final_loss": 1.0, "initial_loss": 3.0},
    ...                     {"variant": "a", "lr": 1.0, "final_loss": 5.0, "initial_loss": 3.0}])
    >>> sweep.curve("a"), sweep.sensitivity()          # (1 + 3) / 2 - 1
    (([0.1, 1.0], [1.0, 5.0]), {'a': 1.0})
    """

    rows: list[dict] = field(default_factory=list)
    probes: dict[tuple[str, float], list[dict]] = field(default_factory=dict)

    def variants(self) -> list[str]:
        return list(dict.fromkeys(r["variant"] for r in self.rows))

    def curve(self, variant: str) -> tuple[list[float], list[float]]:
        """(LRs, final losses) of one variant, in sweep order."""
        rows = [r for r in self.rows if r["variant"] == variant]
        return [r["lr"] for r in rows], [r["final_loss"] for r in rows]

    def sensitivity(self) -> dict[str, float]:
        """LR sensitivity of each variant (section 2.2 of Wortsman et al.)."""
        out = {}
        for v in self.variants():
            rows = [r for r in self.rows if r["variant"] == v]
            out[v] = lr_sensitivity([r["final_loss"] for r in rows], rows[0]["initial_loss"])
        return out

    def table(self, keys: Sequence[str] = ("variant", "lr", "final_loss", "max_attn_logit",
                                           "min_entropy", "final_log_z", "min_log_z",
                                           "max_update_ratio", "nonfinite")) -> str:
        """The rows as a fixed-width text table (3 significant digits)."""
        def cell(value: Any) -> str:
            return f"{value:.3g}" if isinstance(value, float) else str(value)
        cells = [[cell(r[k]) for k in keys] for r in self.rows]
        widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
        lines = ["  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
                  for row in cells]
        return "\n".join(lines)


def _summary(probe_rows: list[dict]) -> dict:
    def values(key: str) -> list[float]:
        return [r[key] for r in probe_rows if math.isfinite(r[key])]
    logits, logz, ent, upd = (values(k) for k in ("max_attn_logit", "log_z", "attn_entropy",
                                                  "max_update_ratio"))
    return {"max_attn_logit": max(logits, default=math.nan),
            "final_log_z": logz[-1] if logz else math.nan,
            "min_log_z": min(logz, default=math.nan),
            "min_entropy": min(ent, default=math.nan),
            "final_entropy": ent[-1] if ent else math.nan,
            "max_update_ratio": max(upd, default=math.nan)}


def lr_sweep(variants: dict[str, dict | Callable[[float], dict]],
             lrs: Sequence[float] = PAPER_LRS, base: TrainConfig | None = None,
             every: int = 10, eval_batches: int = 4,
             on_run: Callable[[dict], None] | None = None) -> Sweep:
    """Train every variant at every LR from ``base`` and measure each run.

    A variant is a dict of :class:`TrainConfig` changes (``{"model": {"qk_norm": True}}``)
    or a function of the LR returning one; ``"independent_decay": decay`` in it applies
    :func:`independent_decay` to the run's optimizer. A run stops at its
    first non-finite update (its final loss is then NaN, counted as loss_0). Each row:
    variant, lr, initial_loss, final_loss (held-out, no z-loss), diverged, steps run,
    and the probes' max attention logit, min / final entropy, min / final log Z and
    max update-to-weight ratio over the run. ``on_run(row)`` is called after each run.

    >>> sweep = lr_sweep({"base": {}}, lrs=[1e-3, 1e-2], base=TrainConfig(steps=5))
    >>> [r["lr"] for r in sweep.rows], list(sweep.sensitivity())
    ([0.001, 0.01], ['base'])
    """
    if not variants or not lrs:
        raise NanlabError("lr_sweep needs at least one variant and one LR")
    base = (base or TrainConfig()).replace(progress=False, checkpoint_every=0, record_every=0)
    sweep = Sweep()
    for name, change in variants.items():
        for lr in lrs:
            changes = change(lr) if callable(change) else dict(change)
            decay = changes.pop("independent_decay", None)
            trainer = Trainer(base.replace(lr=lr, **changes))
            if decay is not None:
                independent_decay(trainer.optimizer, decay)
            initial = eval_loss(trainer, eval_batches)
            probe = ModelProbe(trainer.model, every=every).attach(trainer)
            trainer.add_callback("on_step_end", stop_early(poisoned=True))
            record = trainer.run()
            final = eval_loss(trainer, eval_batches)
            diverged = record.first_nonfinite_step is not None or not math.isfinite(final)
            row = {"variant": name, "lr": lr, "initial_loss": initial,
                   "final_loss": math.nan if diverged else final, "nonfinite": diverged,
                   "steps": len(record.steps), **_summary(probe.rows)}
            sweep.rows.append(row)
            sweep.probes[(name, lr)] = probe.rows
            if on_run is not None:
                on_run(row)
    return sweep
