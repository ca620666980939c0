"""Your own model in ten lines: a run nanlab did not make, diagnosed with a proven fix."""
import torch
import torch.nn.functional as F
from torch import nn

from nanlab.debug import diagnose
from nanlab.train import TrainConfig, Trainer


def batches(step):  # your data: a tuple, dict or dataclass of tensors for each step
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step))
    if step == 60:
        x[3, 5] = float("nan")  # one empty CSV cell, read as NaN and never imputed
    return x, x.sum(1, keepdim=True)


def build(config):  # the same run from a config, so that diagnose can replay it
    torch.manual_seed(config.seed)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    return Trainer(config, model=model, batches=batches,
                   loss_fn=lambda model, batch: F.mse_loss(model(batch[0]), batch[1]))


trainer = build(TrainConfig(steps=100, lr=3e-3, checkpoint_every=10, progress=False))
trainer.run()
print(diagnose(trainer, build=build).report())
