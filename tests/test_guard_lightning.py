"""The guard as a Lightning Callback (``nanlab.guard.lightning``, the ``nanlab[lightning]`` extra).

A small LightningModule (an MLP regressor, AdamW, a per-step linear LR decay) trains on
sensor readings; one reading of batch 30 is missing, read as NaN: its loss and gradients
are NaN and, unguarded, AdamW writes NaN into every weight. Guarded, the run survives and
ends within 10 % of the clean run's loss; a skip drops exactly that update (AdamW's step
count and the LR schedule one behind); stop keeps the evidence; under DDP a NaN on one
rank leads both ranks to the same decision and bit-identical weights.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from framework_checks import assert_ranks_agree, assert_readme_example_survives
from torch.utils.data import DataLoader, TensorDataset

from nanlab.distributed import launch
from nanlab.errors import NanlabError
from nanlab.runs.checkpoint import safe_load

L = pytest.importorskip("lightning")
GuardCallback = pytest.importorskip("nanlab.guard.lightning").GuardCallback

BS, STEPS, BAD = 16, 60, 30  # batch size, steps, the batch with the missing reading


def readings(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return x, x @ torch.linspace(-1, 1, 8)[:, None] + 0.5 * x[:, :1] ** 2


def dataset(missing: list[int], seed: int = 0) -> TensorDataset:
    """``missing``: rows whose sixth reading is missing (an empty cell read as NaN)."""
    x, y = readings(BS * STEPS, seed)
    for row in missing:
        x[row, 5] = float("nan")
    return TensorDataset(x, y)


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=3e-3)
        decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1 - k / STEPS)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


def fit(root, missing=(), callback=None, steps=STEPS, seed=0, **trainer_options):
    """Train; returns the trainer, the module, its loss on held-out readings, and the
    warnings the run gave."""
    module = Regressor()
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False,
                        callbacks=[callback] if callback else [], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(root), **{"devices": 1, **trainer_options})
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        trainer.fit(module, DataLoader(dataset(list(missing), seed), batch_size=BS))
    x, y = readings(256, seed=99)
    with torch.no_grad():
        held_out = F.mse_loss(module.net(x), y).item()
    return trainer, module, held_out, [str(w.message) for w in warned]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return fit(tmp_path_factory.mktemp("clean"))[2]


def adamw_steps(trainer, module) -> int:
    return int(trainer.optimizers[0].state[module.net[0].weight]["step"])


def test_unguarded_the_missing_reading_poisons_every_weight(tmp_path):
    _, module, held_out, _ = fit(tmp_path, missing=[BAD * BS + 3], steps=BAD + 2)
    assert math.isnan(held_out)
    assert not torch.isfinite(module.net[0].weight).all()


def test_recover_survives_and_ends_near_the_clean_loss(tmp_path, clean):
    callback = GuardCallback("recover", keep_every=10)
    trainer, _, held_out, warned = fit(tmp_path, missing=[BAD * BS + 3], callback=callback)
    assert [w for w in warned if w.startswith("nanlab guard")] == [
        "nanlab guard, step 31: rollback (non-finite loss (loss nan, grad norm nan))",
        *(f"nanlab guard, step {s}: skip_batch (recover: a batch next to a failure is not "
          "trained on)" for s in (32, 33))]
    summary = callback.summary()
    assert (summary["rollbacks"], summary["incidents"], summary["evidence"]) == (1, 1, 1)
    rollback = next(e for e in callback.guard.events if e["kind"] == "rollback")
    assert (rollback["step"], rollback["to_step"]) == (BAD, BAD)  # kept before step 30
    assert callback.steps.dropped == [BAD, BAD + 1, BAD + 2]  # the batches after it too
    assert trainer.global_step == STEPS
    assert abs(held_out - clean) <= 0.10 * clean, (held_out, clean)


def test_skip_drops_exactly_the_bad_update(tmp_path, clean):
    callback = GuardCallback("skip")
    trainer, module, held_out, _ = fit(tmp_path, missing=[BAD * BS + 3], callback=callback)
    assert callback.steps.dropped == [BAD]
    assert callback.summary()["skip"] == 1
    # the optimizer really did not step (a zeroed gradient would still count a step and
    # move the weights), and the LR schedule is one step behind the trainer's counter
    assert adamw_steps(trainer, module) == STEPS - 1
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == STEPS - 1
    assert abs(held_out - clean) <= 0.10 * clean, (held_out, clean)


def test_stop_stops_and_keeps_the_evidence(tmp_path):
    callback = GuardCallback("stop")
    trainer, module, _, _ = fit(tmp_path, missing=[BAD * BS + 3], callback=callback)
    assert trainer.global_step == BAD + 1  # the bad update attempted, not applied
    assert torch.isfinite(module.net[0].weight).all()
    (kept,) = callback.guard.evidence
    evidence = safe_load(kept["path"])  # weights_only=True
    assert kept["path"].startswith(str(tmp_path / "nanlab" / "evidence"))
    assert evidence["step"] == BAD and evidence["trigger"] == "nonfinite"
    assert torch.isnan(evidence["batch"][0]).any()  # the batch that did it
    assert set(evidence["state"]) >= {"model", "optimizer", "scheduler"}


def ranks_train(rank: int, world_size: int, mode: str) -> dict:
    """One DDP rank (spawned by nanlab.distributed.launch, which made the gloo group)."""
    import tempfile

    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(world_size))
    missing = [BAD * BS + 3] if rank == 1 else []  # each rank reads its own shard
    with tempfile.TemporaryDirectory() as root:
        callback = GuardCallback(mode, keep_every=10)
        trainer, module, _, _ = fit(root, missing, callback, BAD + 5, seed=rank,
                                    devices=world_size, strategy="ddp",
                                    use_distributed_sampler=False)
    return {"events": callback.steps.events, "step": trainer.global_step,
            "params": torch.cat([p.detach().flatten() for p in module.parameters()])}


@pytest.mark.slow
def test_ddp_ranks_agree_on_a_nan_one_rank_saw():
    rank0, rank1 = launch(ranks_train, 2, "recover")
    assert_ranks_agree(rank0, rank1, BAD)


def test_importing_nanlab_imports_neither_framework():
    code = ("import sys, nanlab, nanlab.guard, nanlab.guard.framework; "
            "print('transformers' in sys.modules, 'lightning' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_missing_framework_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "nanlab.guard.lightning")
    with pytest.raises(NanlabError, match=r"pip install 'nanlab\[lightning\]'"):
        import nanlab.guard.lightning  # noqa: F401


def test_manual_optimization_is_refused(tmp_path):
    class Manual(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

    trainer = L.Trainer(max_steps=1, accelerator="cpu", devices=1, logger=False,
                        callbacks=[GuardCallback("skip")], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path))
    with pytest.raises(NanlabError, match="automatic optimization"):
        trainer.fit(Manual(), DataLoader(dataset([]), batch_size=BS))


def test_the_readme_example_is_this_file_and_survives(tmp_path, monkeypatch, capsys):
    assert_readme_example_survives("guard_lightning.py", tmp_path, monkeypatch, capsys)
