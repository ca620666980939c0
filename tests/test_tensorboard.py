import math
import sys

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from nanlab.runs.record import RunRecord  # noqa: E402
from nanlab.train import TrainConfig, train  # noqa: E402
from nanlab.viz.tensorboard import export_tensorboard  # noqa: E402

NAN = float("nan")


def read_back(logdir) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0,
                                                       "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> tuple[list[int], list[float]]:
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events]


def text(acc: EventAccumulator, tag: str) -> list[str]:
    """add_text("a/b", ...) is stored as the tensor tag "a/b/text_summary"."""
    return [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(f"{tag}/text_summary")]


def test_a_real_run_round_trips(tmp_path):
    run = train(TrainConfig(steps=12, record_every=4, progress=False))
    logdir = export_tensorboard(run, tmp_path / "clean")
    assert logdir == tmp_path / "clean"
    acc = read_back(logdir)
    for name in ("loss", "lr", "grad_norm"):
        steps, values = scalars(acc, f"train/{name}")
        assert steps == list(range(12))
        assert values == pytest.approx(list(run.column(name)), rel=1e-6)  # stored as float32
    assert "train/loss_scale" not in acc.Tags()["scalars"]  # None without a GradScaler
    assert scalars(acc, "train/nonfinite_steps")[1] == [0] * 12

    steps, values = scalars(acc, "layers/blocks.0.attn.c_attn/grad_norm")
    expected = [r["grad_norm"] for r in run.layers if r["layer"] == "blocks.0.attn.c_attn"]
    assert steps == [0, 4, 8]
    assert values == pytest.approx(expected, rel=1e-6)
    assert "layers/blocks.0.attn.softmax/act_absmax" in acc.Tags()["scalars"]
    assert "layers/blocks.0.attn.softmax/grad_norm" not in acc.Tags()["scalars"]  # no params
    assert [h.step for h in acc.Histograms("histograms/log10_grad_norm")] == [0, 4, 8]
    assert '"steps_run": 12' in text(acc, "run/summary")[0]


def test_nonfinite_values_are_counted_not_plotted(tmp_path):
    rec = RunRecord()
    for step, loss in enumerate([3.0, 2.0, NAN, NAN, 1.0]):
        finite = math.isfinite(loss)
        rec.log_step({"step": step, "loss": loss, "lr": 0.1, "grad_norm": loss,
                      "loss_scale": 1024.0, "finite": finite, "skipped": not finite})
    rec.log_event("skip", 2, reason="non-finite loss")
    rec.log_event("rollback", 4, to_step=1)
    acc = read_back(export_tensorboard(rec, tmp_path / "bad"))
    assert scalars(acc, "train/loss") == ([0, 1, 4], [3.0, 2.0, 1.0])
    assert scalars(acc, "train/nonfinite_steps") == ([0, 1, 2, 3, 4], [0, 0, 1, 2, 2])
    assert scalars(acc, "train/skipped_steps")[1] == [0, 0, 1, 2, 2]
    assert scalars(acc, "train/loss_scale")[1] == [1024.0] * 5
    assert text(acc, "events/rollback") == ["**rollback** at step 4: to_step=1"]
    assert "non-finite loss" in text(acc, "events/skip")[0]
    assert "NaN at step 2" in text(acc, "run/summary")[0]


def test_after_a_rollback_only_the_rows_that_stand_are_scalars(tmp_path):
    rec = RunRecord()
    for step, loss in [(0, 3.0), (1, 2.0), (2, 9.0), (1, 2.5), (2, 1.5)]:
        rec.log_step({"step": step, "loss": loss, "finite": True, "skipped": False})
    acc = read_back(export_tensorboard(rec, tmp_path / "rb"))
    assert scalars(acc, "train/loss") == ([0, 1, 2], [3.0, 2.5, 1.5])


def test_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r"pip install nanlab\[tensorboard\]"):
        export_tensorboard(RunRecord(), tmp_path / "x")
