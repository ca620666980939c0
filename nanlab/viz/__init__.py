"""Pictures of a run: loss curves with spikes and NaN marked, grad-norm heat maps, TensorBoard.

- ``plots``:       matplotlib figures of a run record
- ``layers``:      per-layer value histograms (hooks on any model), update / weight ratio
- ``diagrams``:    float bit layouts (from torch.finfo) and the SOP as a flowchart
- ``tensorboard``: a run record exported to TensorBoard event files

>>> from nanlab.viz import plot_loss
>>> callable(plot_loss)
True
"""

from nanlab.viz.diagrams import plot_float_layouts, plot_sop_flowchart
from nanlab.viz.layers import layer_values, plot_layer_histograms, plot_update_ratio
from nanlab.viz.plots import (
    plot_activation_absmax,
    plot_compare,
    plot_grad_heatmap,
    plot_loss,
    plot_lr,
    plot_param_stats,
)
from nanlab.viz.tensorboard import export_tensorboard

__all__ = ["export_tensorboard", "layer_values", "plot_activation_absmax", "plot_compare",
           "plot_float_layouts", "plot_grad_heatmap", "plot_layer_histograms", "plot_loss",
           "plot_lr", "plot_param_stats", "plot_sop_flowchart", "plot_update_ratio"]
