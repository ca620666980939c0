"""Export a run record to TensorBoard, for people who read runs there.

TensorBoard draws a NaN scalar as a gap or a broken axis, so non-finite values are
not written as points: each step instead carries running counts
(``train/nonfinite_steps``, ``train/skipped_steps``) that start to climb where the
trouble starts, and the first non-finite step and every event (skip, rollback,
stop, ...) are written as text. After a rollback, only the rows that stand (the last
run of each step) become scalars, so the curves do not fold back on themselves.

Layout of the tags:

- ``train/loss``, ``train/lr``, ``train/grad_norm``, ``train/loss_scale``
- ``layers/<layer>/<stat>`` for ``grad_norm``, ``param_mean``, ``param_std``,
  ``act_absmax``, ``update_ratio``, at every recorded step
- ``histograms/log10_grad_norm``, ``histograms/log10_act_absmax``: the spread of a
  statistic across layers at each recorded step
- text: ``events/<kind>`` and ``run/summary``

TensorBoard is an optional extra: ``pip install nanlab[tensorboard]``.

>>> from nanlab.train.trainer import TrainConfig, train
>>> run = train(TrainConfig(steps=40, progress=False))  # doctest: +SKIP
>>> logdir = export_tensorboard(run, "runs/clean")  # doctest: +SKIP
>>> # then: tensorboard --logdir runs
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from nanlab.runs.record import RunRecord
from nanlab.viz.plots import LAYER_STATS, describe_nonfinite, kept_rows

STEP_SCALARS = ("loss", "lr", "grad_norm", "loss_scale")
HISTOGRAM_STATS = ("grad_norm", "act_absmax")


def _summary_writer(logdir: str | Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # torch raises ImportError when tensorboard is missing
        raise ImportError(
            "export_tensorboard needs the tensorboard package, which is an optional extra "
            "of nanlab; install it with: pip install nanlab[tensorboard]") from err
    return SummaryWriter(log_dir=str(logdir))


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def export_tensorboard(record: RunRecord, logdir: str | Path) -> Path:
    """Write ``record`` as TensorBoard event files under ``logdir`` and return the folder.

    Scalars per step, per-layer scalars, histograms across layers and events as
    text; see the module docstring for the tags.

    >>> export_tensorboard(run, "runs/fp16_no_scaler")  # doctest: +SKIP
    PosixPath('runs/fp16_no_scaler')
    """
    logdir = Path(logdir)
    writer = _summary_writer(logdir)
    try:
        rows = sorted((r for r, keep in zip(record.steps, kept_rows(record.steps), strict=True)
                       if keep), key=lambda r: r["step"])
        nonfinite = skipped = 0
        for row in rows:
            step = row["step"]
            for name in STEP_SCALARS:
                if _finite(row.get(name)):
                    writer.add_scalar(f"train/{name}", row[name], step)
            nonfinite += not row.get("finite", True)
            skipped += bool(row.get("skipped"))
            writer.add_scalar("train/nonfinite_steps", nonfinite, step)
            writer.add_scalar("train/skipped_steps", skipped, step)

        # The last row of each (step, layer) stands, as in RunRecord.layer_matrix.
        layer_rows = {(r["step"], r["layer"]): r for r in record.layers}
        by_step: dict[int, list[dict]] = {}
        for (step, layer), row in sorted(layer_rows.items()):
            by_step.setdefault(step, []).append(row)
            for stat in LAYER_STATS:
                if _finite(row.get(stat)):
                    writer.add_scalar(f"layers/{layer}/{stat}", row[stat], step)
        for step, layer_group in by_step.items():
            for stat in HISTOGRAM_STATS:
                values = np.array([r[stat] for r in layer_group if _finite(r.get(stat))])
                values = values[values > 0]
                if values.size:
                    writer.add_histogram(f"histograms/log10_{stat}", np.log10(values), step)

        for event in record.events:
            details = {k: v for k, v in event.items() if k not in ("kind", "step")}
            text = f"**{event['kind']}** at step {event['step']}"
            if details:
                text += ": " + ", ".join(f"{k}={v}" for k, v in details.items())
            writer.add_text(f"events/{event['kind']}", text, event["step"])

        summary = record.summary()
        first = record.first_nonfinite_step
        if first is not None:
            bad = next(r for r in record.steps
                       if r["step"] == first and not r.get("finite", True))
            summary["first_nonfinite"] = f"{describe_nonfinite(bad)} at step {first}"
        summary["nonfinite_steps"] = nonfinite
        summary["skipped_steps"] = skipped
        writer.add_text("run/summary", "```\n" + json.dumps(summary, indent=2) + "\n```", 0)
    finally:
        writer.close()
    return logdir
