"""Pictures of a run: loss curves with spikes and NaN marked, grad-norm heat maps, TensorBoard.

- ``plots``:       matplotlib figures of a run record
- ``tensorboard``: a run record exported to TensorBoard event files

>>> from nanlab.viz import plot_loss
>>> callable(plot_loss)
True
"""

from nanlab.viz.plots import (
    plot_activation_absmax,
    plot_compare,
    plot_grad_heatmap,
    plot_loss,
    plot_lr,
    plot_param_stats,
)
from nanlab.viz.tensorboard import export_tensorboard

__all__ = ["export_tensorboard", "plot_activation_absmax", "plot_compare", "plot_grad_heatmap",
           "plot_loss", "plot_lr", "plot_param_stats"]
