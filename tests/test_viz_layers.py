"""The practitioners' pictures: per-layer histograms, update / weight ratio, float bit
layouts and the SOP flowchart, on nanlab's toy and on a model nanlab did not make."""

import json
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from nanlab.errors import NanlabError  # noqa: E402
from nanlab.faults import SOP_STEPS  # noqa: E402
from nanlab.runs.record import RunRecord  # noqa: E402
from nanlab.train import TrainConfig, Trainer, train  # noqa: E402
from nanlab.viz import (  # noqa: E402
    layer_values,
    plot_float_layouts,
    plot_layer_histograms,
    plot_sop_flowchart,
    plot_update_ratio,
)
from nanlab.viz.diagrams import FloatLayout, sop_questions  # noqa: E402
from nanlab.viz.layers import UPDATE_RATIO_RULE  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def mlp() -> nn.Module:
    """A model nanlab did not make: no GPT names, no nanlab config."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 1))


def mse(model, batch):
    return F.mse_loss(model(batch[0]), batch[1])


def mlp_batches(i):
    g = torch.Generator().manual_seed(i)
    x = torch.randn(32, 4, generator=g)
    return x, x.sum(1, keepdim=True)


@pytest.fixture(scope="module")
def toy_run() -> RunRecord:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(TrainConfig(steps=6, record_every=2, progress=False))
    finally:
        torch.set_num_threads(threads)


# -- layer values and histograms -------------------------------------------------------------
def test_layer_values_of_a_foreign_model_uses_its_own_names_and_leaves_grad_alone():
    net = mlp()
    values = layer_values(net, mlp_batches(0), mse)
    assert list(values.activations) == ["0", "1", "2", "3", "4"]  # forward order
    assert list(values.gradients) == ["0", "2", "4"]  # only layers with parameters
    assert all(p.grad is None for p in net.parameters())  # nothing left in .grad
    relu = values.activations["1"]
    assert (relu >= 0).all() and (relu == 0).any()  # a ReLU's output, zeros kept
    # the gradient sample is the real gradient: compare the last layer's bias
    loss = mse(net, mlp_batches(0))
    loss.backward()
    want = np.concatenate([net[4].weight.grad.flatten().numpy(), net[4].bias.grad.numpy()])
    assert np.allclose(np.sort(values.gradients["4"]), np.sort(want))
    assert math.isclose(values.loss, loss.item(), rel_tol=1e-6)


def test_layer_values_samples_big_layers_the_same_way_twice():
    net = nn.Sequential(nn.Linear(64, 512))
    batch = (torch.randn(64, 64), torch.zeros(64, 512))
    a = layer_values(net, batch, mse, max_values=1000)
    b = layer_values(net, batch, mse, max_values=1000)
    assert a.activations["0"].shape == (1000,)
    assert np.array_equal(a.activations["0"], b.activations["0"])


def test_layer_values_of_a_trainer_sees_its_next_step_and_changes_nothing():
    trainer = Trainer(TrainConfig(steps=3, progress=False))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    values = layer_values(trainer)
    assert "lm_head" in values.activations and "blocks.0.attn.c_attn" in values.gradients
    assert math.isclose(values.loss, trainer.forward_backward(trainer.batches(0)).loss_value,
                        rel_tol=1e-6)
    assert all(torch.equal(a, p) for a, p in zip(before, trainer.model.parameters(),
                                                  strict=True))


def test_layer_values_refuses_a_model_without_batch_or_loss():
    with pytest.raises(NanlabError, match="needs a batch"):
        layer_values(mlp())
    with pytest.raises(NanlabError, match="nn.Module"):
        layer_values("not a model", 1, mse)


def test_histograms_draw_a_row_per_layer_and_a_filled_histogram_per_run():
    net = mlp()
    good = layer_values(net, mlp_batches(0), mse)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(30)  # an exploding init: every layer's output grows
    bad = layer_values(net, mlp_batches(0), mse)
    fig = plot_layer_histograms({"healthy": good, "exploding": bad})
    acts, grads = fig.axes
    assert acts.get_xscale() == "log" and grads.get_xscale() == "log"
    assert [t.get_text() for t in acts.get_yticklabels()] == list(good.activations)
    assert [t.get_text() for t in grads.get_yticklabels()] == list(good.gradients)
    fills = [c for c in acts.collections if isinstance(c, PolyCollection)]
    assert len(fills) == 2 * len(good.activations)
    assert [t.get_text() for t in acts.get_legend().get_texts()] == ["healthy", "exploding"]
    notes = [t.get_text() for t in acts.texts]
    assert any(n.endswith("zero") for n in notes)  # the ReLU's zeros, written at the end


def test_histograms_note_nan_and_inf_values():
    values = layer_values(mlp(), mlp_batches(0), mse)
    values.activations["0"][:5] = np.nan
    fig = plot_layer_histograms(values)
    assert any("5 NaN/inf" in t.get_text() for t in fig.axes[0].texts)


def test_histograms_of_the_toy_keep_at_most_max_layers_rows():
    values = layer_values(Trainer(TrainConfig(progress=False)))
    fig = plot_layer_histograms(values, max_layers=5)
    assert len(fig.axes[0].get_yticks()) == 5
    with pytest.raises(NanlabError):
        plot_layer_histograms({})


# -- the update / weight ratio ---------------------------------------------------------------
def test_the_update_ratio_of_an_sgd_step_is_lr_times_grad_over_weight():
    lr = 0.1
    net = nn.Sequential(nn.Linear(3, 1, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 2.0, 2.0]]))  # ||w|| = 3
    batch = (torch.tensor([[1.0, 0.0, 0.0]]), torch.zeros(1, 1))
    loss_fn = lambda m, b: m(b[0]).sum()  # noqa: E731  gradient = the input: [1, 0, 0]
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    run = Trainer(TrainConfig(steps=1, warmup_steps=0, record_every=1, progress=False), model=net,
                  batches=lambda i: batch, loss_fn=loss_fn, optimizer=optimizer).run()
    (row,) = run.layers
    assert row["layer"] == "0" and run.steps[0]["lr"] == lr
    assert math.isclose(row["update_ratio"], lr * 1.0 / 3.0, rel_tol=1e-6)


def test_the_toy_records_a_ratio_per_layer_with_parameters(toy_run):
    names, steps, grid = toy_run.layer_matrix("update_ratio")
    assert list(steps) == [0, 2, 4] and "lm_head" in names
    assert np.isfinite(grid).all() and (grid > 0).all()
    assert not any("softmax" in n for n in names)  # no parameters, no ratio


def test_update_ratio_plot_has_log_y_the_band_and_a_line_per_layer(toy_run):
    net_run = Trainer(TrainConfig(steps=4, record_every=1, progress=False), model=mlp(),
                      batches=mlp_batches, loss_fn=mse).run()
    fig = plot_update_ratio({"toy": toy_run, "mlp": net_run})
    toy_ax, mlp_ax = fig.axes
    assert toy_ax.get_yscale() == "log"
    assert len(mlp_ax.get_lines()) >= 3  # the MLP's three Linear layers (+ the 1e-3 line)
    assert any(line.get_ydata()[0] == UPDATE_RATIO_RULE for line in mlp_ax.get_lines()
               if len(line.get_ydata()) == 2)
    assert any(p.get_label().startswith("about 1e-3") for p in mlp_ax.patches)


def test_a_skipped_step_has_ratio_zero_and_is_marked():
    def skip_all(trainer, info):
        info.skip = True
    trainer = Trainer(TrainConfig(steps=2, record_every=1, progress=False))
    trainer.add_callback("on_after_backward", skip_all)
    run = trainer.run()
    _, _, grid = run.layer_matrix("update_ratio")
    assert (grid == 0).all()
    fig = plot_update_ratio(run)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "no update (skipped step)" in labels


def test_an_old_run_folder_without_the_ratio_still_loads_and_plots(tmp_path, toy_run):
    """A folder written before update_ratio was recorded: loads, other plots work, the
    ratio plot says what is missing in one line."""
    run = train(TrainConfig(steps=3, record_every=1, progress=False, out_dir=str(tmp_path)))
    path = tmp_path / "layers.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "update_ratio"})
                            + "\n" for r in rows))
    old = RunRecord.load(tmp_path)
    assert len(old.layers) == len(run.layers) and "update_ratio" not in old.layers[0]
    from nanlab.viz import plot_grad_heatmap

    plot_grad_heatmap(old)
    with pytest.raises(NanlabError, match="update_ratio"):
        plot_update_ratio(old)


# -- diagrams --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, sign_exp_man", [(torch.float32, (1, 8, 23)),
                                                 (torch.float16, (1, 5, 10)),
                                                 (torch.bfloat16, (1, 8, 7))])
def test_float_layouts_match_torch_finfo(dtype, sign_exp_man):
    lay = FloatLayout.of(dtype)
    info = torch.finfo(dtype)
    assert tuple(n for _, n in lay.parts) == sign_exp_man
    assert (lay.max, lay.smallest_normal, lay.eps) == (info.max, info.tiny, info.eps)
    # the largest float from the layout's own bits: (2 - 2^-m) * 2^(2^(e-1) - 1)
    _, e, m = sign_exp_man
    assert lay.max == (2 - 2.0 ** -m) * 2.0 ** (2 ** (e - 1) - 1)


def test_float_layout_figure_has_one_cell_per_bit_and_the_finfo_numbers():
    fig = plot_float_layouts()
    ax = fig.axes[0]
    assert len(ax.patches) == 32 + 16 + 16
    text = " ".join(t.get_text() for t in ax.texts)
    assert "max 65504" in text and f"eps 2^-7 = {torch.finfo(torch.bfloat16).eps:.4g}" in text
    with pytest.raises(NanlabError, match="floating-point"):
        plot_float_layouts([torch.int32])


def test_sop_flowchart_follows_the_sop_order_with_a_question_per_step():
    keys = [k for k, *_ in sop_questions()]
    assert keys == list(SOP_STEPS)
    fig = plot_sop_flowchart()
    texts = [t.get_text() for t in fig.axes[0].texts]
    titles = [next(t for t in texts if t.lower().startswith(s[:12].lower()))
              for s in SOP_STEPS.values()]
    assert len(titles) == len(SOP_STEPS)
    assert texts.count("yes") == len(SOP_STEPS) and texts.count("no") == len(SOP_STEPS)
    assert any("validate_data" in t for t in texts)  # a yes points at the declared fix
