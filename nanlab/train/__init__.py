"""Training: the run's settings, the loss, gradient accumulation, resuming, the trainer.

- ``config``     :class:`TrainConfig`, every setting with the reason beside it
- ``objective``  the language-model loss, the LR schedule, the global grad norm
- ``accum``      gradient accumulation weighted by tokens
- ``resume``     what a restart saves and loads
- ``batches``    one walker over nested batches (tuples, dicts, dataclasses of tensors)
- ``trainer``    :class:`Trainer` and :func:`train`, for the toy model or any other

The names a lab or a script needs are importable from here:

>>> from nanlab.train import TrainConfig, Trainer
"""

from nanlab.train.config import TrainConfig
from nanlab.train.objective import global_grad_norm, lm_loss, lr_factor
from nanlab.train.trainer import (
                                  StepInfo,
                                  Trainer,
                                  default_task,
                                  resolve_device,
                                  stop_early,
                                  stop_if_poisoned,
                                  to_device,
                                  train,
)

__all__ = ["StepInfo", "TrainConfig", "Trainer", "default_task", "global_grad_norm",
           "lm_loss", "lr_factor", "resolve_device", "stop_early", "stop_if_poisoned",
           "to_device", "train"]
