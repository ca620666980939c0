"""Per-layer pictures practitioners look at: value histograms and the update-to-weight ratio.

- :func:`layer_values`: one forward and backward pass of any model, with forward hooks on
  its leaf modules: a sample of each layer's output values and of its parameters'
  gradients (the model's ``.grad`` is left alone).
- :func:`plot_layer_histograms`: a ridge plot of those values, one row per layer, |value|
  on a log axis: a healthy network keeps every row in the same few decades; an exploding
  one slides to the right layer after layer.
- :func:`plot_update_ratio`: the record's ``update_ratio`` per layer over steps,
  ``||update|| / ||weights||``, against CS231n's rough heuristic of about 1e-3.

>>> import torch.nn as nn, torch.nn.functional as F
>>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
>>> batch = (torch.randn(16, 4), torch.zeros(16, 1))
>>> values = layer_values(net, batch, lambda m, b: F.mse_loss(m(b[0]), b[1]))
>>> list(values.activations), list(values.gradients)
(['0', '1', '2'], ['0', '2'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from nanlab.errors import NanlabError, check_range
from nanlab.runs.record import RunRecord
from nanlab.train.batches import to_device
from nanlab.viz.plots import NAN_COLOR, _layer_styles, _legend_outside, _need_layers, _rug

# CS231n, "Neural Networks Part 3", section "Ratio of weights:updates"
# (cs231n.github.io/neural-networks-3/#ratio): "A rough heuristic is that this ratio should
# be somewhere around 1e-3. If it is lower than this then the learning rate might be too
# low. If it is higher then the learning rate is likely too high." A heuristic from
# SGD-trained convnets, not a law: read it as a scale to compare layers against.
UPDATE_RATIO_RULE = 1e-3
MAX_VALUES = 20_000  # values kept per layer: enough for a histogram, cheap for any model
MAX_LEGEND = 12  # layers named one by one; more are coloured by depth, first and last named


@dataclass
class LayerValues:
    """A sample of each layer's output values and parameter gradients at one step.

    ``activations`` / ``gradients`` map a module name to a 1-D float64 array (signs kept;
    NaN, inf and zeros kept as they were). Layers are in the order the forward pass ran
    them (activations) and the model lists them (gradients).

    >>> v = LayerValues({"fc": np.array([0.0, 2.0])}, {"fc": np.array([1e-3])})
    >>> v.activations["fc"].max()
    np.float64(2.0)
    """

    activations: dict[str, np.ndarray] = field(default_factory=dict)
    gradients: dict[str, np.ndarray] = field(default_factory=dict)
    loss: float = math.nan


def _sample(t: torch.Tensor, max_values: int) -> np.ndarray:
    """At most ``max_values`` entries of ``t`` (a fixed-seed random subset: the same
    numbers every time, and no aliasing with the tensor's layout)."""
    flat = t.detach().flatten().float()
    if flat.numel() > max_values:
        gen = torch.Generator(device="cpu").manual_seed(0)
        index = torch.randint(flat.numel(), (max_values,), generator=gen)
        flat = flat[index.to(flat.device)]
    return flat.cpu().double().numpy()


def layer_values(model: nn.Module | Any, batch: Any = None,
                 loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None, *,
                 max_values: int = MAX_VALUES) -> LayerValues:
    """Each leaf module's output values and its own parameters' gradients, from one
    forward and backward pass on ``batch`` (``loss_fn(model, batch)`` returns the loss,
    as for :class:`~nanlab.train.Trainer`).

    Pass a :class:`~nanlab.train.Trainer` instead of a model to look at its next step:
    its model, its next batch, its loss and its autocast. Nothing is updated and
    ``p.grad`` is left as it was (the gradients come from ``torch.autograd.grad``), so a
    trainer can go on training afterwards. Works on any ``nn.Module``: names come from
    ``named_modules()``, values from forward hooks.

    >>> from nanlab.train.trainer import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(steps=5, progress=False))
    >>> values = layer_values(trainer)            # what step 0 would see
    >>> "lm_head" in values.activations and "lm_head" in values.gradients
    True
    """
    check_range("max_values", max_values, 1)
    autocast = None
    if hasattr(model, "loss_fn") and hasattr(model, "model") and hasattr(model, "batches"):
        trainer = model  # a nanlab Trainer (duck-typed: no import of the trainer needed)
        model, loss_fn, autocast = trainer.model, loss_fn or trainer.loss_fn, trainer.autocast()
        if batch is None:
            batch = to_device(trainer.batches(trainer.next_batch_index()), trainer.device,
                              trainer.input_dtype)
    if not isinstance(model, nn.Module):
        raise NanlabError(f"model={type(model).__name__}: expected a torch nn.Module or a "
                          "nanlab Trainer")
    if batch is None or loss_fn is None:
        raise NanlabError("layer_values(model, batch, loss_fn): a model needs a batch and "
                          "loss_fn(model, batch) -> scalar loss (a Trainer brings its own)")
    leaves = [(n, m) for n, m in model.named_modules() if n and not any(m.children())]
    acts: dict[str, np.ndarray] = {}

    def hook_for(name: str):
        def hook(module, inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
                acts[name] = _sample(out, max_values)
        return hook

    hooks = [m.register_forward_hook(hook_for(n)) for n, m in leaves]
    try:
        with autocast if autocast is not None else torch.enable_grad():
            loss = loss_fn(model, batch)
    finally:
        for h in hooks:
            h.remove()
    owned = [(n, p) for n, m in leaves for p in m.parameters(recurse=False) if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in owned], allow_unused=True) if owned else []
    by_layer: dict[str, list[torch.Tensor]] = {}
    for (name, _), g in zip(owned, grads, strict=True):
        if g is not None:
            by_layer.setdefault(name, []).append(g.flatten())
    gradients = {n: _sample(torch.cat(gs), max_values) for n, gs in by_layer.items()}
    return LayerValues(acts, gradients, float(loss.detach().float()))


# -- the histograms -----------------------------------------------------------------------
def _log_histogram(values: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, float, int]:
    """(density over log10|v| bins, fraction of exact zeros, count of NaN / inf)."""
    finite = np.isfinite(values)
    nonzero = finite & (values != 0)
    logs = np.log10(np.abs(values[nonzero]))
    counts, _ = np.histogram(np.clip(logs, edges[0], edges[-1]), bins=edges)
    n = max(len(values), 1)
    return counts / n, float(((values == 0) & finite).sum()) / n, int((~finite).sum())


def _pick_layers(names: list[str], most: int) -> list[str]:
    if len(names) <= most:
        return names
    keep = np.unique(np.linspace(0, len(names) - 1, most).round().astype(int))
    return [names[i] for i in keep]


def plot_layer_histograms(values: LayerValues | Mapping[str, LayerValues], *,
                          max_layers: int = 24, title: str | None = None) -> Figure:
    """Ridge plots of |activation| and |gradient| per layer, log x, input layer on top.

    ``values`` is one :class:`LayerValues` or a dict ``{run name: LayerValues}`` drawn
    over each other in their own colours (e.g. a healthy and an exploding init). Each
    row's height is the share of that layer's values in each bin; exact zeros (dead
    units) and NaN / inf cannot sit on a log axis, so they are written at the row's end.
    At most ``max_layers`` rows (evenly chosen) keep a deep model readable.

    >>> fig = plot_layer_histograms({"healthy": good, "exploding": bad})  # doctest: +SKIP
    """
    check_range("max_layers", max_layers, 1)
    runs = {"": values} if isinstance(values, LayerValues) else dict(values)
    if not runs or not all(isinstance(v, LayerValues) for v in runs.values()):
        raise NanlabError("values: expected a LayerValues (from layer_values) or a non-empty "
                          "dict of name -> LayerValues")
    fig, axes = plt.subplots(1, 2, figsize=(11, 1.2 + 0.32 * min(max_layers, 30)),
                             layout="constrained")
    for ax, kind in zip(axes, ("activations", "gradients"), strict=True):
        names = _pick_layers(list(dict.fromkeys(
            n for v in runs.values() for n in getattr(v, kind))), max_layers)
        logs = np.log10(np.concatenate(
            [np.abs(a[np.isfinite(a) & (a != 0)]) for v in runs.values()
             for a in getattr(v, kind).values()] or [np.ones(1)]))
        # the bulk, not a few denormal outliers, sets the range; the rest piles up at its ends
        lo, hi = (np.floor(np.percentile(logs, 0.5)), np.ceil(logs.max())) \
            if logs.size else (-1.0, 1.0)
        edges = np.linspace(lo, max(hi, lo + 1), 61)
        centres = 10 ** ((edges[1:] + edges[:-1]) / 2)
        for row, name in enumerate(names):
            ax.axhline(-row, color="0.85", lw=0.6, zorder=0)
            for i, (run, v) in enumerate(runs.items()):
                if name not in getattr(v, kind):
                    continue
                density, zeros, bad = _log_histogram(getattr(v, kind)[name], edges)
                peak = density.max() if density.max() > 0 else 1.0
                color = f"C{i % 10}"
                ax.fill_between(centres, -row, -row + 0.9 * density / peak, step="mid",
                                where=density > 0, color=color, alpha=0.5, lw=0,
                                label=run if row == 0 and run else None)
                note = (f"{zeros:.0%} zero" if zeros >= 0.005 else "") + \
                    (f" {bad} NaN/inf" if bad else "")
                if note:  # neither zeros nor NaN / inf have a place on a log axis
                    ax.annotate(note.strip(), (1.0, -row + 0.1 + 0.35 * i),
                                xycoords=("axes fraction", "data"), ha="right", fontsize=7,
                                color=NAN_COLOR if bad else color)
        ax.set_xscale("log")
        ax.set_yticks([-r for r in range(len(names))], names, fontsize=7)
        ax.set_ylim(-len(names) + 0.8, 1.0)
        ax.set_xlabel(f"|{kind[:-1]}| (log scale)")
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"{'Output' if kind == 'activations' else 'Parameter-gradient'} "
                     "values per layer")
        if len(runs) > 1 or next(iter(runs)):
            ax.legend(fontsize=8, loc="upper right")
    if title:
        fig.suptitle(title)
    return fig


# -- the update-to-weight ratio ----------------------------------------------------------------
def plot_update_ratio(records: RunRecord | Mapping[str, RunRecord], *,
                      title: str | None = None) -> Figure:
    """``||update|| / ||weights||`` per layer over steps (log y), one panel per run, with
    a band at CS231n's rough heuristic of about 1e-3 (:data:`UPDATE_RATIO_RULE`).

    The trainer records ``update_ratio`` every ``record_every`` steps: the norm of what
    the optimizer step changed in a layer's own parameters over their norm before it
    (the real update, whatever the optimizer; for plain SGD ``lr * ||g|| / ||w||``). A
    skipped step (no update, ratio 0) is a tick at the bottom, a NaN / inf ratio a red x
    at the top. Run folders written before the ratio was recorded have none: a
    NanlabError says so.

    >>> fig = plot_update_ratio({"healthy": good, "exploding": bad})  # doctest: +SKIP
    """
    runs = {"": records} if isinstance(records, RunRecord) else dict(records)
    if not runs:
        raise NanlabError("records={} is empty; pass a RunRecord or a dict of name -> RunRecord")
    data = {}
    for run, record in runs.items():
        try:
            data[run] = _need_layers(record, "update_ratio")
        except NanlabError as e:
            raise NanlabError(f"{run or 'the run'}: {e} (runs recorded before nanlab kept "
                              "update_ratio have none: train it again)") from None
    fig, axes = plt.subplots(1, len(runs), figsize=(4 + 4.5 * len(runs), 4), sharey=True,
                             layout="constrained", squeeze=False)
    axes = axes[0]
    for ax, (run, (names, steps, grid)) in zip(axes, data.items(), strict=True):
        _ratio_panel(ax, names, steps, grid)
        ax.set_title(run or "Update / weight ratio per layer")
    axes[0].set_ylabel("||update|| / ||weights|| (log scale)")
    _legend_outside(axes[-1])
    if title:
        fig.suptitle(title)
    return fig


def _ratio_panel(ax: Axes, names: list[str], steps: np.ndarray, grid: np.ndarray) -> None:
    """One run's ratios; past MAX_LEGEND layers, colours run by depth (input dark)."""
    styles = _layer_styles(len(names)) if len(names) <= MAX_LEGEND else [
        {"color": c} for c in plt.get_cmap("viridis")(np.linspace(0, 0.95, len(names)))]
    for i, (name, row, style) in enumerate(zip(names, grid, styles, strict=True)):
        shown = np.where(np.isfinite(row) & (row > 0), row, np.nan)
        named = len(names) <= MAX_LEGEND or i in (0, len(names) - 1)
        ax.plot(steps, shown, marker=".", ms=3, lw=1.1,
                label=(name if i == 0 or len(names) <= MAX_LEGEND else f"... {name}")
                if named else None, **style)
    _rug(ax, steps[(~np.isfinite(grid)).any(axis=0)], 0.97, marker="x", color=NAN_COLOR,
         ms=7, label="NaN / inf ratio")
    _rug(ax, steps[(grid == 0).all(axis=0)], 0.03, marker="|", color="C4", ms=12, mew=2,
         label="no update (skipped step)")
    ax.axhspan(UPDATE_RATIO_RULE / 10 ** 0.5, UPDATE_RATIO_RULE * 10 ** 0.5, color="0.5",
               alpha=0.15, label="about 1e-3 (CS231n's rough heuristic)")
    ax.axhline(UPDATE_RATIO_RULE, color="0.3", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
