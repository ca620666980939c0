"""The guard as a Hugging Face TrainerCallback (``nanlab.guard.hf``, the ``nanlab[hf]`` extra).

A GPT-2 built from a tiny config (nothing downloaded) is trained by ``transformers.Trainer``
on a stream of sequences given as input embeddings, read in order; one reading of a
sequence in batch 30 is NaN (a dirty row of features). Its loss and gradients are NaN
and, unguarded, AdamW writes NaN into every weight. Guarded, the run survives and ends
within 10 % of the clean run's loss; a skip drops exactly that update (AdamW's step count
and the LR schedule one behind); stop keeps the evidence; under DDP a NaN on one rank
leads both ranks to the same decision and bit-identical weights.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from framework_checks import assert_ranks_agree, assert_readme_example_survives
from torch.utils.data import IterableDataset

from nanlab.distributed import launch
from nanlab.errors import NanlabError
from nanlab.runs.checkpoint import safe_load

pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers.Trainer needs it (the nanlab[hf] extra)
GuardCallback = pytest.importorskip("nanlab.guard.hf").GuardCallback

VOCAB, LENGTH, BS, STEPS, BAD = 64, 16, 8, 60, 30
EMBEDDINGS = torch.randn(VOCAB, 32, generator=torch.Generator().manual_seed(7))


def sequence(i: int) -> dict:
    """Sequence i: token ids counting up from a random start, as embedding rows."""
    g = torch.Generator().manual_seed(1000 + i)
    start, stride = torch.randint(0, VOCAB, (1,), generator=g), torch.randint(1, 4, (1,),
                                                                               generator=g)
    ids = (start + stride * torch.arange(LENGTH)) % VOCAB
    return {"inputs_embeds": EMBEDDINGS[ids].clone(), "labels": ids}


class Stream(IterableDataset):
    """The sequences in order (so batch k holds sequences k * BS ...); ``dirty``: sequences
    with one NaN reading."""

    def __init__(self, dirty=()):
        self.dirty = set(dirty)

    def __iter__(self):
        i = 0
        while True:
            item = sequence(i)
            if i in self.dirty:
                item["inputs_embeds"][3, 5] = float("nan")
            yield item
            i += 1


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2,
                                      n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def train(root, dirty=(), callback=None, steps=STEPS):
    """Train; returns the trainer and the model's loss on held-out sequences."""
    from transformers import Trainer, TrainingArguments
    from transformers.utils import logging

    logging.set_verbosity_error()  # the tiny config's notes; the guard's are asserted
    args = TrainingArguments(output_dir=str(root), max_steps=steps, learning_rate=3e-3,
                             per_device_train_batch_size=BS, report_to=[], use_cpu=True,
                             save_strategy="no", logging_steps=10, disable_tqdm=True, seed=0,
                             log_level="error")
    model = gpt2()
    trainer = Trainer(model=model, args=args, train_dataset=Stream(dirty),
                      callbacks=[callback] if callback else [])
    trainer.train()
    model.eval()
    held_out = [sequence(10**6 + j) for j in range(32)]
    batch = {k: torch.stack([s[k] for s in held_out]) for k in ("inputs_embeds", "labels")}
    with torch.no_grad():
        return trainer, model(**batch).loss.item()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return train(tmp_path_factory.mktemp("clean"))[1]


DIRTY = [BAD * BS + 3]


def guard_log(trainer) -> list[tuple[int, str]]:
    return [(e["step"], e["nanlab_guard"]) for e in trainer.state.log_history
            if "nanlab_guard" in e]


def test_unguarded_the_dirty_row_poisons_every_weight(tmp_path):
    trainer, held_out = train(tmp_path, DIRTY, steps=BAD + 2)
    assert math.isnan(held_out)
    assert not all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_recover_survives_and_ends_near_the_clean_loss(tmp_path, clean):
    callback = GuardCallback("recover", keep_every=10)
    trainer, held_out = train(tmp_path, DIRTY, callback)
    summary = callback.summary()
    assert (summary["rollbacks"], summary["incidents"], summary["evidence"]) == (1, 1, 1)
    # in the Trainer's own log, in its numbering (step n: after n updates)
    assert guard_log(trainer) == [(31, "rollback"), (32, "skip_batch"), (33, "skip_batch")]
    entry = next(e for e in trainer.state.log_history if e.get("nanlab_guard") == "rollback")
    assert entry["to_step"] == BAD and entry["reason"].startswith("non-finite loss")
    assert trainer.state.global_step == STEPS
    assert abs(held_out - clean) <= 0.10 * clean, (held_out, clean)


def test_skip_drops_exactly_the_bad_update(tmp_path, clean):
    callback = GuardCallback("skip")
    trainer, held_out = train(tmp_path, DIRTY, callback)
    assert callback.steps.dropped == [BAD] and guard_log(trainer) == [(BAD + 1, "skip")]
    # the optimizer really did not step (a zeroed gradient would still count a step and
    # move the weights), and the LR schedule is one step behind the trainer's counter
    adamw = trainer.optimizer.state_dict()["state"][0]
    assert int(adamw["step"]) == STEPS - 1
    assert trainer.lr_scheduler.last_epoch == STEPS - 1
    assert abs(held_out - clean) <= 0.10 * clean, (held_out, clean)


def test_stop_stops_and_keeps_the_evidence(tmp_path):
    callback = GuardCallback("stop")
    trainer, held_out = train(tmp_path, DIRTY, callback)
    assert trainer.state.global_step == BAD + 1  # the bad update attempted, not applied
    assert math.isfinite(held_out)
    (kept,) = callback.guard.evidence
    assert kept["path"].startswith(str(tmp_path / "nanlab" / "evidence"))
    evidence = safe_load(kept["path"])  # weights_only=True
    assert evidence["step"] == BAD and evidence["trigger"] == "nonfinite"
    assert torch.isnan(evidence["batch"]["inputs_embeds"]).any()  # the batch that did it
    assert set(evidence["state"]) >= {"model", "optimizer", "scheduler"}


def ranks_train(rank: int, world_size: int, mode: str) -> dict:
    """One DDP rank (spawned by nanlab.distributed.launch, which made the gloo group)."""
    import tempfile

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    # From an IterableDataset, accelerate's DataLoader reads one global batch on rank 0
    # and hands each rank its slice: rank 1 gets the second half of global batch 30.
    dirty = [BAD * BS * world_size + BS + 3]
    callback = GuardCallback(mode, keep_every=10)
    with tempfile.TemporaryDirectory() as root:
        trainer, _ = train(root, dirty, callback, steps=BAD + 5)
    return {"events": callback.steps.events, "world_size": trainer.args.world_size,
            "params": torch.cat([p.detach().flatten() for p in trainer.model.parameters()])}


@pytest.mark.slow
def test_ddp_ranks_agree_on_a_nan_one_rank_saw():
    rank0, rank1 = launch(ranks_train, 2, "recover")
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert_ranks_agree(rank0, rank1, BAD)


def test_the_readme_example_is_this_file_and_survives(tmp_path, monkeypatch, capsys):
    assert_readme_example_survives("guard_hf.py", tmp_path, monkeypatch, capsys)


def test_watching_a_clipped_grad_norm_is_refused(tmp_path):
    with pytest.raises(NanlabError, match="max_grad_norm=0"):
        train(tmp_path, callback=GuardCallback("skip", spike="skip", watch_grad_norm=True),
              steps=1)
