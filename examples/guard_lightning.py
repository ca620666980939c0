"""The guard in Lightning: a small regressor on sensor readings; one reading in batch 30
is missing, read as NaN. Unguarded, AdamW writes NaN into every weight at step 31;
GuardCallback rolls back to step 30, skips the batches around the bad one, and the run
trains on."""
import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from nanlab.guard.lightning import GuardCallback

x = torch.randn(960, 8, generator=torch.Generator().manual_seed(0))  # sensor readings
y = x @ torch.linspace(-1, 1, 8)[:, None] + 0.5 * x[:, :1] ** 2
x[30 * 16 + 3, 5] = float("nan")  # in batch 30, an empty cell read as NaN


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        features, target = batch
        loss = F.mse_loss(self.net(features), target)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


torch.manual_seed(0)
guard = GuardCallback("recover", keep_every=10)  # a snapshot in memory every 10 steps
trainer = L.Trainer(max_steps=60, accelerator="cpu", callbacks=[guard], logger=False,
                    enable_checkpointing=False, enable_progress_bar=False)
trainer.fit(Regressor(), DataLoader(TensorDataset(x, y), batch_size=16))

summary = guard.summary()
loss = trainer.callback_metrics["loss"].item()
print(f"guard: {summary['incidents']} incident, {summary['rollbacks']} rollback; "
      f"final loss {loss:.2f}, finite: {torch.isfinite(torch.tensor(loss)).item()}")
