import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import LogNorm, to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nanlab.errors import NanlabError  # noqa: E402
from nanlab.runs.record import RunRecord  # noqa: E402
from nanlab.train import TrainConfig, train  # noqa: E402
from nanlab.viz import plots  # noqa: E402

NAN, INF = float("nan"), float("inf")
LAYERS = ("wte", "blocks.0.attn.c_attn", "lm_head")


@pytest.fixture(scope="module")
def failed_run() -> RunRecord:
    """A real fp16 run without a GradScaler at lr=1.0: NaN within a few steps."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures run before conftest's one-thread fixture
    try:
        return train(TrainConfig(steps=10, precision="fp16", grad_scaler=False, lr=1.0,
                                 warmup_steps=0, record_every=1, progress=False))
    finally:
        torch.set_num_threads(threads)


def make_record(losses, *, layer_values=None, every=2) -> RunRecord:
    """A hand-built record: one step row per loss, layer rows every ``every`` steps."""
    rec = RunRecord()
    for step, loss in enumerate(losses):
        finite = math.isfinite(loss)
        rec.log_step({"step": step, "batch": step, "loss": loss, "lr": 1e-3 * (step + 1),
                      "grad_norm": 1.0 if finite else loss, "loss_scale": None,
                      "finite": finite, "skipped": False})
        if step % every == 0:
            for i, layer in enumerate(LAYERS):
                value = (layer_values or {}).get((step, layer), 10.0 ** (i - 1) * (step + 1))
                rec.log_layers([{"step": step, "layer": layer, "grad_norm": value,
                                 "param_mean": 0.01 * i, "param_std": 0.02 * (i + 1),
                                 "act_absmax": value * 100}])
    return rec


def lines_labelled(fig: Figure, text: str):
    return [line for ax in fig.axes for line in ax.get_lines() if text in line.get_label()]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_find_spikes_finds_a_planted_spike_and_nothing_on_a_smooth_curve():
    rng = np.random.default_rng(0)
    smooth = 3.0 * np.exp(-np.arange(200) / 50) + 0.05
    assert plots.find_spikes(smooth) == []
    noisy = smooth * (1 + 0.05 * rng.standard_normal(200))
    spiked = noisy.copy()
    spiked[120] *= 10
    assert plots.find_spikes(spiked) == [120]
    spiked[60] = NAN  # non-finite values are not spikes and do not count as history
    assert plots.find_spikes(spiked) == [120]


def test_kept_rows_drops_the_rolled_back_branch():
    rows = [{"step": s} for s in (0, 1, 2, 3, 2, 3, 4)]
    assert plots.kept_rows(rows) == [True, True, False, False, True, True, True]


def test_describe_nonfinite():
    assert plots.describe_nonfinite({"loss": INF, "grad_norm": NAN}) == "inf"
    assert plots.describe_nonfinite({"loss": 2.0, "grad_norm": NAN}) == "NaN grad norm"


def test_plot_loss_marks_the_first_nan_of_a_real_failed_run(failed_run):
    first = failed_run.first_nonfinite_step
    assert first is not None and first < 10
    fig = plots.plot_loss(failed_run)
    assert isinstance(fig, Figure)
    (vline,) = lines_labelled(fig, "first NaN at step")
    assert vline.get_label() == f"first NaN at step {first}"
    assert list(vline.get_xdata()) == [first, first]
    (rug,) = lines_labelled(fig, "NaN loss")  # NaN losses drawn as markers at the top
    nan_steps = [r["step"] for r in failed_run.steps if math.isnan(r["loss"])]
    assert list(rug.get_xdata()) == nan_steps


def test_plot_loss_of_a_clean_curve_has_no_nan_line_and_goes_log():
    fig = plots.plot_loss(make_record(list(3.0 * np.exp(-np.arange(60) / 8))), title="clean")
    ax = fig.axes[0]
    assert not lines_labelled(fig, "first")
    assert ax.get_yscale() == "log"  # 3.0 -> 0.002 spans more than two decades
    assert ax.get_title() == "clean"
    assert plots.plot_loss(make_record([3.0, 2.0, 1.0])).axes[0].get_yscale() == "linear"


def test_plot_loss_marks_spikes_inf_skips_rollbacks_and_stops():
    losses = [3.0 - 0.05 * s for s in range(30)]
    losses[15], losses[22] = 20.0, INF
    rec = make_record(losses)
    rec.steps[5]["skipped"] = True
    rec.log_event("skip", 8, reason="spike")
    rec.log_event("rollback", 22, to_step=10)
    rec.log_event("stop", 27, reason="retries exhausted")
    fig = plots.plot_loss(rec)
    (spikes,) = lines_labelled(fig, "spike")
    assert list(spikes.get_xdata()) == [15]
    assert list(lines_labelled(fig, "first inf at step 22")[0].get_xdata()) == [22, 22]
    assert list(lines_labelled(fig, "inf loss")[0].get_xdata()) == [22]
    assert list(lines_labelled(fig, "skipped step")[0].get_xdata()) == [5, 8]
    assert lines_labelled(fig, "stop at step 27")
    ax = fig.axes[0]
    assert any("rollback" in p.get_label() for p in ax.patches)
    assert any(t.get_text() == "22 -> 10" for t in ax.texts)


def test_plot_loss_marks_a_rollback_to_the_failed_step_an_lr_cut_and_giving_up():
    rec = make_record([3.0 - 0.05 * s for s in range(30)])
    rec.log_event("rollback", 12, to_step=12)  # back to the start of the failed step
    rec.log_event("lr_cut", 12, factor=0.1)
    rec.log_event("give_up", 20, reason="max rollbacks")
    fig = plots.plot_loss(rec)
    ax = fig.axes[0]
    assert list(lines_labelled(fig, "rollback")[0].get_xdata()) == [12, 12]  # a line, not
    assert not any("rollback" in p.get_label() for p in ax.patches)          # an empty span
    assert any(t.get_text() == "LR x0.1" for t in ax.texts)
    assert lines_labelled(fig, "guard gave up at step 20")


def test_plot_compare_window_keeps_every_marker_inside_it():
    bad = make_record([3.0 - 0.05 * s for s in range(20)] + [NAN] * 20)
    clean = make_record([3.0 - 0.05 * s for s in range(40)])
    fig = plots.plot_compare({"clean": clean, "bad": bad}, steps=(5, 15))
    for ax in fig.axes:
        assert ax.get_xlim() == (5, 15)
        xs = [x for line in ax.get_lines() for x in line.get_xdata()]
        assert xs and all(5 <= x <= 15 for x in xs), sorted(set(xs))


def test_plot_loss_draws_the_rolled_back_branch_apart():
    rec = make_record([3.0, 2.9, 2.8, 2.7])
    rec.steps += [dict(r, loss=r["loss"] - 0.5) for r in rec.steps[2:]]  # steps 2, 3 again
    fig = plots.plot_loss(rec)
    (main,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "loss"]
    assert list(main.get_xdata()) == [0, 1, 2, 3]
    assert np.allclose(main.get_ydata(), [3.0, 2.9, 2.3, 2.2])
    assert lines_labelled(fig, "rolled-back branch")


def test_plot_loss_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    assert plots.plot_loss(make_record([3.0, 2.0]), ax=ax) is fig


def test_grad_heatmap_uses_a_log_scale_and_its_own_colours_for_nan_and_inf():
    rec = make_record([1.0] * 10, layer_values={(4, "wte"): NAN, (6, "lm_head"): INF})
    fig = plots.plot_grad_heatmap(rec)
    ax = fig.axes[0]
    mesh = ax.collections[0]
    assert isinstance(mesh.norm, LogNorm)
    assert mesh.cmap.get_bad() == pytest.approx(to_rgba(plots.NAN_COLOR))
    data = mesh.get_array()
    assert data.mask.sum() == 2  # the NaN and the inf cell are masked out of the colour scale
    assert len(ax.collections) == 2  # the inf overlay
    assert [t.get_text() for t in ax.get_yticklabels()] == list(LAYERS)
    assert data.shape == (3, 5)


def test_grad_heatmap_of_a_real_failed_run(failed_run):
    fig = plots.plot_grad_heatmap(failed_run)
    assert isinstance(fig.axes[0].collections[0].norm, LogNorm)
    assert "blocks.0.attn.c_attn" in [t.get_text() for t in fig.axes[0].get_yticklabels()]


def test_layer_plots_need_layer_rows_and_a_known_stat():
    rec = make_record([1.0, 0.9])
    rec.layers.clear()  # what record_every=0 leaves
    with pytest.raises(NanlabError, match="record_every"):
        plots.plot_grad_heatmap(rec)
    with pytest.raises(NanlabError, match="stat='weights'"):
        plots.plot_grad_heatmap(make_record([1.0]), stat="weights")


def test_activation_absmax_has_the_fp16_line(failed_run):
    fig = plots.plot_activation_absmax(failed_run)
    ax = fig.axes[0]
    (fp16,) = lines_labelled(fig, "fp16 max")
    assert list(fp16.get_ydata()) == [65504.0, 65504.0]
    assert ax.get_yscale() == "log"
    assert ax.get_ylim()[1] > 65504.0
    assert lines_labelled(fig, "bf16 max")
    assert lines_labelled(fig, "NaN / inf activation")


def test_param_stats_has_a_mean_and_a_std_panel():
    fig = plots.plot_param_stats(make_record([1.0] * 6))
    ax_mean, ax_std = fig.axes
    assert [line.get_label() for line in ax_mean.get_lines()] == list(LAYERS)
    assert len(ax_std.get_lines()) == len(LAYERS)
    assert np.allclose(ax_std.get_lines()[2].get_ydata(), 0.06)


def test_plot_lr_draws_the_lr_column():
    rec = make_record([1.0] * 5)
    line = plots.plot_lr(rec).axes[0].get_lines()[0]
    assert np.allclose(line.get_ydata(), rec.column("lr"))


def test_plot_compare_labels_runs_by_name_and_marks_only_the_failed_one(failed_run):
    clean = make_record(list(3.0 * np.exp(-np.arange(20) / 8)))
    fig = plots.plot_compare({"clean": clean, "fp16": failed_run}, steps=15)
    loss_ax, norm_ax = fig.axes
    labels = [line.get_label() for line in loss_ax.get_lines()]
    assert "clean" in labels and "fp16" in labels
    assert lines_labelled(fig, "fp16: first non-finite at step")
    assert not lines_labelled(fig, "clean: first")
    assert norm_ax.get_yscale() == "log"
    assert norm_ax.get_xlim() == (0, 15)
    assert len(plots.plot_compare({"clean": clean}, grad_norm=False).axes) == 1
    with pytest.raises(NanlabError):
        plots.plot_compare({})
