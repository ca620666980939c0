"""Plots of a run record that a person would rather look at than read.

Every function takes a :class:`~nanlab.runs.record.RunRecord` and returns a matplotlib
``Figure`` (built with ``plt.subplots``, never shown here). In a notebook, assign it
(``fig = plot_loss(run)``) or end the line with ``;``: a Figure left as the last value
of a cell is drawn twice, once by the inline backend and once as the cell's value.

- :func:`plot_loss`: the loss curve with spikes, the first NaN / inf, skipped steps,
  rollbacks and stops marked.
- :func:`plot_grad_heatmap`: layers x steps, log colour scale, NaN and inf in their
  own colours: where the gradient blew up first.
- :func:`plot_activation_absmax`: activation abs-max per layer against the fp16 limit.
- :func:`plot_param_stats`, :func:`plot_lr`, :func:`plot_compare`.

>>> from nanlab.train.trainer import TrainConfig, train
>>> run = train(TrainConfig(steps=40, progress=False))  # doctest: +SKIP
>>> fig = plot_loss(run)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap, LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nanlab.analysis.signals import find_spikes  # noqa: F401  (re-exported for notebooks)
from nanlab.errors import NanlabError, check_choice
from nanlab.runs.record import RunRecord

# Largest finite value of each float format: past it a number becomes inf.
FP16_MAX = 65504.0
BF16_MAX = 3.3895e38  # same exponent range as fp32, fewer mantissa bits
FP32_MAX = 3.4028e38

LAYER_STATS = ("grad_norm", "param_mean", "param_std", "act_absmax", "update_ratio")
NAN_COLOR, INF_COLOR, ZERO_COLOR = "#d62728", "black", "#dddddd"


# -- small pure helpers (shared with the tests and nanlab.viz.tensorboard) -------------------
def kept_rows(rows: Sequence[Mapping], key: str = "step") -> list[bool]:
    """For each row, whether it is the last one with its step (the run that stands).

    After a rollback the trainer runs some steps again; the earlier rows of those
    steps belong to the abandoned branch. Without rollbacks every row is kept.

    >>> kept_rows([{"step": 0}, {"step": 1}, {"step": 1}])
    [True, False, True]
    """
    seen, kept = set(), []
    for row in reversed(rows):
        kept.append(row[key] not in seen)
        seen.add(row[key])
    return kept[::-1]


def describe_nonfinite(row: Mapping) -> str:
    """'NaN', 'inf' or '-inf' for a bad loss, else e.g. 'NaN grad norm'.

    >>> describe_nonfinite({"loss": float("nan"), "grad_norm": float("nan")})
    'NaN'
    """
    for name, suffix in (("loss", ""), ("grad_norm", " grad norm")):
        value = row.get(name)
        if value is not None and not math.isfinite(value):
            return ("NaN" if math.isnan(value) else "inf" if value > 0 else "-inf") + suffix
    return "non-finite"


# -- internal helpers -------------------------------------------------------------------
def _figure(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax


def _spans_decades(values: np.ndarray, decades: float = 2.0) -> bool:
    """True when the positive finite values span more than ``decades`` powers of ten."""
    v = values[np.isfinite(values) & (values > 0)]
    return len(v) > 1 and math.log10(v.max() / v.min()) > decades


def _layer_styles(n: int) -> list[dict]:
    """Ten colours x three line styles: up to 30 layers stay distinguishable."""
    colors = plt.get_cmap("tab10").colors
    return [{"color": colors[i % 10], "linestyle": ("-", "--", ":")[(i // 10) % 3]}
            for i in range(n)]


def _need_layers(record: RunRecord, stat: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    check_choice("stat", stat, LAYER_STATS)
    names, steps, grid = record.layer_matrix(stat)
    if not names:
        raise NanlabError(f"the record has no per-layer {stat!r} values; run with "
                          "record_every > 0 (e.g. TrainConfig(record_every=10))")
    return names, steps, grid


def _rug(ax: Axes, x, y_axes: float, **style) -> None:
    """Markers at a fixed height of the axes (x in data units): for values a curve can't show."""
    if len(x):
        ax.plot(x, np.full(len(x), y_axes), transform=ax.get_xaxis_transform(),
                linestyle="none", clip_on=False, **style)


def _legend_outside(ax: Axes, fontsize: float = 7) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=fontsize, frameon=False)


# -- the plots --------------------------------------------------------------------------
def plot_loss(record: RunRecord, *, ax: Axes | None = None, title: str | None = None) -> Figure:
    """The loss per step with what went wrong marked on it.

    Marks spikes (:func:`find_spikes`), the first non-finite step (a vertical line),
    every NaN / inf loss (markers along the top: they cannot be drawn as a curve),
    skipped steps (ticks along the bottom), rollbacks (a shaded span from the restored
    step to the failed one, with an arrow back) and stops. Log y when the loss spans
    more than two decades.

    >>> fig = plot_loss(run, title="fp16, lr=1.0")  # doctest: +SKIP
    """
    fig, ax = _figure(ax, (9, 4))
    rows = record.steps
    steps = np.array([r["step"] for r in rows], dtype=float)
    loss = record.column("loss")
    kept = np.array(kept_rows(rows), dtype=bool) if rows else np.zeros(0, dtype=bool)
    finite = np.isfinite(loss)

    order = np.argsort(steps[kept], kind="stable")
    main_steps, main_loss = steps[kept][order], loss[kept][order]
    ax.plot(main_steps, np.where(np.isfinite(main_loss), main_loss, np.nan),
            color="C0", lw=1.5, label="loss")
    if not kept.all():  # rows of steps that were run again after a rollback
        gone = np.where(kept, np.nan, loss)
        ax.plot(steps, gone, color="0.6", lw=1, ls="--", label="rolled-back branch")

    spikes = find_spikes(main_loss)
    if spikes:
        ax.plot(main_steps[spikes], main_loss[spikes], "o", ms=7, mfc="none", mew=1.5,
                color="C1", label="spike (> 3x running median)")

    if _spans_decades(loss[finite]):
        ax.set_yscale("log")

    nan, inf = np.isnan(loss), np.isinf(loss)
    _rug(ax, steps[nan], 0.97, marker="x", color=NAN_COLOR, ms=6, label="NaN loss")
    _rug(ax, steps[inf], 0.97, marker="^", color=INF_COLOR, ms=6, label="inf loss")

    first = record.first_nonfinite_step
    if first is not None:
        row = next(r for r in rows if r["step"] == first and not r.get("finite", True))
        label = f"first {describe_nonfinite(row)} at step {first}"
        ax.axvline(first, color=NAN_COLOR, lw=1.2, label=label)
        ax.annotate(label, (first, 0.9), xycoords=ax.get_xaxis_transform(),
                    xytext=(4, 0), textcoords="offset points", color=NAN_COLOR, fontsize=9)

    skipped = sorted({r["step"] for r in rows if r.get("skipped")}
                     | {e["step"] for e in record.events if e["kind"] == "skip"})
    _rug(ax, skipped, 0.03, marker="|", color="C4", ms=12, mew=2, label="skipped step")

    for i, event in enumerate(e for e in record.events if e["kind"] == "rollback"):
        label = "rollback (failed step -> restored step)" if i == 0 else None
        to_step = event.get("to_step")
        if to_step is None:
            ax.axvline(event["step"], color="C2", ls="--", lw=1, label=label)
            continue
        if to_step < event["step"]:
            ax.axvspan(to_step, event["step"], color="C2", alpha=0.12, label=label)
        else:  # back to the start of the failed step itself: a span of zero width
            ax.axvline(to_step, color="C2", lw=3, alpha=0.35, label=label)
        height = 0.85 - 0.07 * (i % 4)  # stagger, so repeated rollbacks stay readable
        ax.annotate(f"{event['step']} -> {to_step}", xy=(to_step, height),
                    xytext=(event["step"], height), xycoords=ax.get_xaxis_transform(),
                    ha="right", va="bottom", color="C2", fontsize=8,
                    arrowprops={"arrowstyle": "->", "color": "C2", "lw": 1.5})

    for event in (e for e in record.events if e["kind"] == "lr_cut"):
        ax.annotate(f"LR x{event.get('factor', 0):g}", xy=(event["step"], 0.55),
                    xycoords=ax.get_xaxis_transform(), color="C2", fontsize=8, ha="center")
    for i, event in enumerate(e for e in record.events if e["kind"] in ("stop", "give_up")):
        what = "guard gave up" if event["kind"] == "give_up" else "stop"
        ax.axvline(event["step"], color="black", ls=":", lw=1.5,
                   label=f"{what} at step {event['step']}" if i == 0 else None)

    ax.set_xlabel("step")
    ax.set_ylabel("loss" + (" (log scale)" if ax.get_yscale() == "log" else ""))
    ax.set_title(title or "Training loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


def plot_grad_heatmap(record: RunRecord, stat: str = "grad_norm") -> Figure:
    """A layers x steps heat map of a per-layer statistic on a log colour scale.

    Read it top to bottom (input to output): the row that brightens first is where
    the trouble starts. NaN cells are red, inf cells black, exact zeros light grey
    (a zero gradient is a dead layer, not a small one).

    >>> fig = plot_grad_heatmap(run)                      # per-layer grad norm  # doctest: +SKIP
    >>> fig = plot_grad_heatmap(run, stat="act_absmax")  # doctest: +SKIP
    """
    names, steps, grid = _need_layers(record, stat)
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.28 * len(names)), layout="constrained")

    # Cell edges halfway between recorded steps, so the x axis reads in real steps.
    x = steps.astype(float)
    if len(x) > 1:
        mids = (x[1:] + x[:-1]) / 2
        x_edges = np.concatenate([[2 * x[0] - mids[0]], mids, [2 * x[-1] - mids[-1]]])
    else:
        x_edges = np.array([x[0] - 0.5, x[0] + 0.5])
    y_edges = np.arange(len(names) + 1) - 0.5

    good = np.isfinite(grid) & (grid > 0)
    positive = grid[good]
    vmin, vmax = (positive.min(), positive.max()) if positive.size else (1e-3, 1.0)
    if vmax <= vmin:
        vmin, vmax = vmin / 10, vmax * 10
    cmap = plt.get_cmap("viridis").with_extremes(bad=NAN_COLOR)  # masked: NaN or missing
    mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_where(~good, grid),
                         cmap=cmap, norm=LogNorm(vmin=vmin, vmax=vmax))
    # Overlays in their own colours for inf and zero; transparent elsewhere.
    for mask, color in ((np.isinf(grid), INF_COLOR), (grid == 0, ZERO_COLOR)):
        if mask.any():
            ax.pcolormesh(x_edges, y_edges, np.ma.masked_where(~mask, np.ones_like(grid)),
                          cmap=ListedColormap([color]))
    fig.colorbar(mesh, ax=ax, label=f"{stat} (log scale)", pad=0.01)

    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()  # first layer at the top, like the model file
    ax.set_xlabel("step")
    ax.set_title(f"Per-layer {stat}, layers x steps")
    handles = [Patch(color=NAN_COLOR, label="NaN"), Patch(color=INF_COLOR, label="inf")]
    if (grid == 0).any():
        handles.append(Patch(color=ZERO_COLOR, label="0"))
    fig.legend(handles=handles, loc="outside lower right", ncol=3, fontsize=8, frameon=False)
    return fig


def plot_activation_absmax(record: RunRecord) -> Figure:
    """Activation abs-max per layer over steps, against the fp16 limit 65504.

    An activation that crosses the fp16 line becomes inf under fp16 autocast; bf16
    and fp32 reach about 3.4e38, which is why bf16 rarely overflows.

    >>> fig = plot_activation_absmax(run)  # doctest: +SKIP
    """
    names, steps, grid = _need_layers(record, "act_absmax")
    fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
    for name, values, style in zip(names, grid, _layer_styles(len(names)), strict=True):
        ax.plot(steps, np.where(np.isfinite(values), values, np.nan), marker=".", ms=4,
                lw=1.2, label=name, **style)
    bad_steps = steps[(~np.isfinite(grid)).any(axis=0)]
    _rug(ax, bad_steps, 0.97, marker="x", color=NAN_COLOR, ms=7, label="NaN / inf activation")

    ax.axhline(FP16_MAX, color=NAN_COLOR, ls="--", lw=1.5, label="fp16 max 65504")
    ax.set_yscale("log")
    top = np.nanmax(np.where(np.isfinite(grid), grid, np.nan)) if np.isfinite(grid).any() else 1
    ax.set_ylim(top=max(top, FP16_MAX) * 5)
    ax.annotate("fp16 max", (0, FP16_MAX), xycoords=("axes fraction", "data"),
                xytext=(4, -3), textcoords="offset points", va="top", fontsize=8,
                color=NAN_COLOR)
    ax.plot([], [], " ", label=f"bf16 max {BF16_MAX:.3g}, fp32 max {FP32_MAX:.3g}\n(off the chart)")
    ax.set_xlabel("step")
    ax.set_ylabel("max |activation| (log scale)")
    ax.set_title("Activation abs-max per layer")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return fig


def plot_param_stats(record: RunRecord) -> Figure:
    """Parameter mean and std per layer over steps: drifting weights, exploding init.

    The statistics pool all of a layer's parameters, so a LayerNorm (weight 1, bias 0)
    starts at mean 0.5 and std 0.5, and a GPT-2-style linear layer near 0 and 0.02.

    >>> fig = plot_param_stats(run)  # doctest: +SKIP
    """
    fig, (ax_mean, ax_std) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                          layout="constrained")
    names, steps, means = _need_layers(record, "param_mean")
    std_names, _, stds = record.layer_matrix("param_std")
    std_of = dict(zip(std_names, stds, strict=True))
    for name, mean, style in zip(names, means, _layer_styles(len(names)), strict=True):
        ax_mean.plot(steps, mean, marker=".", ms=3, label=name, **style)
        if name in std_of:
            ax_std.plot(steps, std_of[name], marker=".", ms=3, **style)
    if _spans_decades(stds.ravel()):
        ax_std.set_yscale("log")
    ax_mean.set_ylabel("parameter mean")
    ax_std.set_ylabel("parameter std" + (" (log)" if ax_std.get_yscale() == "log" else ""))
    ax_std.set_xlabel("step")
    ax_mean.set_title("Parameter mean and std per layer")
    for ax in (ax_mean, ax_std):
        ax.grid(alpha=0.3)
    _legend_outside(ax_mean)
    return fig


def plot_lr(record: RunRecord, *, ax: Axes | None = None) -> Figure:
    """The learning rate per step: warmup and decay at a glance.

    >>> fig = plot_lr(run)  # doctest: +SKIP
    """
    fig, ax = _figure(ax, (5, 2.5))
    rows = [r for r, keep in zip(record.steps, kept_rows(record.steps), strict=True) if keep]
    rows.sort(key=lambda r: r["step"])
    ax.plot([r["step"] for r in rows], [r.get("lr") for r in rows], color="C2")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_title("Learning-rate schedule")
    ax.grid(alpha=0.3)
    return fig


def plot_compare(records: Mapping[str, RunRecord], *, steps: int | tuple[int, int] | None = None,
                 grad_norm: bool = True) -> Figure:
    """Overlay the loss (and global grad norm) of several runs, e.g. clean vs faulty.

    ``steps`` limits the x axis: ``n`` for steps 0..n, or ``(first, last)``.
    Each run's first non-finite step is a vertical line in its colour.

    >>> fig = plot_compare({"clean": clean, "fp16, no scaler": broken}, steps=50)  # doctest: +SKIP
    """
    if not records:
        raise NanlabError("records={} is empty; pass a dict of name -> RunRecord")
    panels = 2 if grad_norm else 1
    fig, axes = plt.subplots(panels, 1, figsize=(9, 3 + 2.5 * (panels - 1)), sharex=True,
                             layout="constrained", squeeze=False)
    axes = axes[:, 0]
    names = ("loss", "grad_norm")[:panels]
    lo, hi = (None, None) if steps is None else (0, steps) if isinstance(steps, int) else steps
    shown: dict[str, list[float]] = {name: [] for name in names}

    def inside(step: float) -> bool:
        return steps is None or lo <= step <= hi

    for i, (label, record) in enumerate(records.items()):
        color = f"C{i % 10}"
        rows = [r for r, keep in zip(record.steps, kept_rows(record.steps), strict=True)
                if keep and inside(r["step"])]  # markers outside the window would stretch it
        rows.sort(key=lambda r: r["step"])
        x = np.array([r["step"] for r in rows], dtype=float)
        for ax, name in zip(axes, names, strict=True):
            present = np.array([r.get(name) is not None for r in rows], dtype=bool)
            y = np.array([r[name] if r.get(name) is not None else np.nan for r in rows],
                         dtype=float)
            ax.plot(x, np.where(np.isfinite(y), y, np.nan), color=color, lw=1.4, label=label)
            _rug(ax, x[present & ~np.isfinite(y)], 0.97, marker="x", color=color, ms=5)
            shown[name] += list(y)
        first = record.first_nonfinite_step
        if first is not None and inside(first):
            for ax in axes:
                ax.axvline(first, color=color, ls="--", lw=1,
                           label=f"{label}: first non-finite at step {first}"
                           if ax is axes[0] else None)
    for ax, name in zip(axes, names, strict=True):
        values = np.array(shown[name], dtype=float)
        if name == "grad_norm" or _spans_decades(values):
            ax.set_yscale("log")
        ax.set_ylabel(name.replace("_", " ") + (" (log)" if ax.get_yscale() == "log" else ""))
        ax.grid(alpha=0.3)
    if steps is not None:
        axes[-1].set_xlim(lo, hi)
    axes[0].set_title("Runs compared: " + " vs ".join(records))
    axes[0].legend(fontsize=8, loc="best")
    axes[-1].set_xlabel("step")
    return fig
