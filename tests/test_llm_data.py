"""The LLM data family: a token id outside the vocabulary, a shard of repeated-token junk.

The id past the vocabulary is loud where PyTorch checks it (nn.Embedding) and silent
where the model masks it by the arithmetic of Megatron-LM's vocabulary-parallel layers;
the junk shard is legal and finite everywhere, and only the per-sample loss shows who
carries its spike. Each fault is cured by its data fix and by no LR or clipping fix.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from foreign_scenarios import base, gpt2, hf_loss, lm_batch
from shared_runs import shared_diagnosis, shared_run

from nanlab import faults
from nanlab.analysis.judge import judge
from nanlab.analysis.signals import final_loss, find_spikes
from nanlab.debug.attribution import per_sample_loss
from nanlab.errors import NanlabError
from nanlab.faults.batch_check import batch_problems, label_range
from nanlab.faults.llm_data import degenerate_rows
from nanlab.faults.matrix import run_cell
from nanlab.toy.data import CountingTask
from nanlab.toy.model import GPTConfig
from nanlab.toy.vocab_parallel import VocabParallelEmbedding, vocab_parallel_cross_entropy
from nanlab.train import TrainConfig, Trainer

# test_diagnose's run (no NaN here: stopping when poisoned and checkpoints every 10 steps
# change nothing in the numbers), trained once per session
DIAGNOSED = {"checkpoint_every": 10, "stop_when_poisoned": True}


@pytest.fixture(scope="module")
def masked():
    return shared_run("oov_token_masked", **DIAGNOSED)


@pytest.fixture(scope="module")
def shard():
    return shared_run("repeated_token_shard", **DIAGNOSED)


@pytest.fixture(scope="module")
def clean_final():
    return final_loss(shared_run(None).record.losses())  # test_faults' too


def spike_height(losses, at: int) -> tuple[int, float]:
    losses = np.asarray(losses)
    peak = at + int(np.nanargmax(losses[at:at + 10]))
    return peak, float(losses[peak] / np.median(losses[at - 20:at]))


# -- the arithmetic of the vocabulary split -------------------------------------------
def test_vocab_parallel_layers_equal_plain_torch_on_legal_ids():
    torch.manual_seed(0)
    emb = VocabParallelEmbedding(32, 8, partitions=2)
    ids = torch.randint(0, 32, (4, 16))
    assert torch.equal(emb(ids), F.embedding(ids, emb.weight))
    logits = torch.randn(64, 32, requires_grad=True)
    target = torch.randint(0, 32, (64,))
    ours = vocab_parallel_cross_entropy(logits, target, 2)
    theirs = F.cross_entropy(logits, target, reduction="none")
    assert torch.allclose(ours, theirs, atol=1e-5)
    (g1,) = torch.autograd.grad(ours.sum(), logits)
    (g2,) = torch.autograd.grad(theirs.sum(), logits)
    assert torch.allclose(g1, g2, atol=1e-6)


def test_an_id_no_partition_owns_embeds_as_zero_and_scores_log_z_minus_max():
    """Megatron's masking: a zero embedding row, a predicted logit of 0 after the max is
    subtracted (loss log Z - max, finite), and a gradient that is the softmax alone."""
    torch.manual_seed(0)
    emb = VocabParallelEmbedding(32, 8, partitions=2)
    out = emb(torch.tensor([[3, 32, 40]]))
    assert out[0, 0].abs().sum() > 0 and torch.equal(out[0, 1:], torch.zeros(2, 8))
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(torch.tensor([32]), emb.weight)  # plain PyTorch is loud
    logits = torch.randn(1, 32, requires_grad=True)
    loss = vocab_parallel_cross_entropy(logits, torch.tensor([32]), 2)
    expected = torch.logsumexp(logits, -1) - logits.max()
    assert torch.isfinite(loss).all() and torch.allclose(loss, expected)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    assert torch.allclose(grad, torch.softmax(logits, -1).detach())


def test_the_split_model_trains_like_the_plain_one():
    batch = CountingTask()(0)
    losses = []
    for parts in (1, 2):
        trainer = Trainer(TrainConfig(progress=False, model={"vocab_partitions": parts}))
        losses.append(trainer.forward_backward(batch).loss_value)
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)


# -- the faults -----------------------------------------------------------------------
def test_oov_token_stops_plain_pytorch_at_its_batch():
    run = faults.run_fault("oov_token", steps=60)
    assert run.error_step == 40 and "index out of range in self" in run.error
    assert judge(run).kind == "error"


def test_oov_token_masked_spikes_without_an_error(masked):
    losses = masked.record.losses()
    assert masked.error is None and np.isfinite(losses).all()
    peak, height = spike_height(losses, 150)
    assert peak <= 154 and height > 5, (peak, height)  # measured: step 151, 6.9x
    assert [s for s in find_spikes(losses) if s >= 10][0] == 150
    assert judge(masked).kind == "spike"
    # the batch of step 150 really holds the id, and the model embeds it as zeros
    batch = masked.trainer.batches(150)
    where = batch.tokens == 32
    assert where.sum(1).min() >= 1
    wte = masked.trainer.model.wte
    assert isinstance(wte, VocabParallelEmbedding) and wte.num_embeddings == 32
    assert torch.equal(wte(batch.tokens)[where], torch.zeros(int(where.sum()), 64))


def test_repeated_token_shard_spikes_and_passes_every_batch_check(shard):
    losses = shard.record.losses()
    assert np.isfinite(losses).all()
    peak, height = spike_height(losses, 150)
    assert peak == 150 and height > 5, (peak, height)  # measured: 9.5x
    assert judge(shard).kind == "spike"
    batch = shard.trainer.batches(150)
    assert batch_problems(batch, label_range(shard.trainer, batch)) == []  # legal, finite
    junk, share = degenerate_rows(batch.tokens, batch.targets)
    assert int(junk.sum()) == 8 and float(share[junk].min()) == 1.0  # a quarter of 32


def test_per_sample_loss_puts_the_spike_on_the_junk_sequences(shard):
    trainer = shard.trainer
    batch = trainer.batches(150)
    attribution = per_sample_loss(trainer.model, batch, trainer.loss_fn,
                                  state=trainer.checkpoints.load(150)["model"])
    junk = set(np.flatnonzero(degenerate_rows(batch.tokens, batch.targets)[0].numpy()))
    culprits = attribution.culprits()
    assert {s.index for s in culprits} == junk
    assert [s.index for s in attribution.samples[:len(junk)]] == [s.index for s in culprits]
    assert attribution.share() > 0.8  # measured: 94 % of the batch's loss
    assert attribution.pattern().startswith("one token repeated")
    # an LR-made spike is spread over every sample: nothing sets a few apart
    clean = per_sample_loss(trainer.model, trainer.batches(10))
    assert clean.pattern() is None


def test_the_filter_keeps_every_clean_and_every_padded_sequence():
    task = CountingTask(vocab_size=31, pad_id=31, pad_prob=0.5)
    for step in range(50):
        b = task(step)
        assert not degenerate_rows(b.tokens, b.targets)[0].any()
        assert not degenerate_rows(CountingTask()(step).tokens)[0].any()


@pytest.mark.parametrize("name, cure, wrong", [
    ("oov_token", "validate_data", ("lr_div10", "quality_filter")),
    ("oov_token_masked", "validate_data", ("lr_div10", "quality_filter")),
    ("repeated_token_shard", "quality_filter", ("lr_div10", "grad_clip", "validate_data")),
])
def test_the_data_fix_cures_and_the_wrong_ones_do_not(name, cure, wrong, clean_final):
    assert faults.get_fault(name).cure == cure  # cured: test_faults' cure test
    for fix in wrong:
        cell = run_cell(name, fix, 200, 0, clean_final)
        assert cell.outcome == "not cured", cell
    assert run_cell(name, "amp_off", 200, 0, clean_final).outcome == "n/a"  # fp32 already


def test_diagnose_names_the_shard_from_the_per_sample_loss():
    d = shared_diagnosis("repeated_token_shard")  # test_diagnose's diagnosis
    assert (d.cause, d.detail, d.fix, d.fix_verified) == (
        "llm_data", "repeated_token_shard", "quality_filter", True), d.report()
    assert "8 of 32 samples" in d.report() and "batches 150 to 154" in d.report()


def test_diagnose_tells_the_masked_id_from_the_loud_one():
    d = shared_diagnosis("oov_token_masked")
    assert (d.cause, d.detail, d.fix) == ("llm_data", "oov_token_masked", "validate_data")
    assert "token id 32" in d.report() and "legal ids: 0 to 31" in d.report()


# -- a model nanlab did not make --------------------------------------------------------
def test_oov_token_on_a_hugging_face_gpt2_and_its_cure():
    """The id is read from GPT-2's own embedding (64 rows, a tiny config, nothing
    downloaded); validate_data reads the legal range from its nn.Embedding too."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = gpt2()
    injection = faults.inject("oov_token", model=model, batches=lm_batch, at_step=5)
    batch = injection.batches(5)
    assert int(batch["input_ids"].max()) == 64 and int(batch["labels"].max()) == 64
    with pytest.raises(IndexError, match="index out of range"):
        hf_loss(model, batch)
    trainer = Trainer(base(steps=10), model=model, batches=injection.batches, loss_fn=hf_loss)
    problems = batch_problems(batch, label_range(trainer, batch))
    assert any("input_ids: token id 64 at position" in p and "legal ids: 0 to 63" in p
               for p in problems), problems
    faults.get_fix("validate_data").install(trainer)
    trainer.run()
    assert len(trainer.record.steps) == 10
    assert [e["batch"] for e in trainer.record.events if e["kind"] == "bad_batch"] == [5]


def test_a_junk_shard_in_hugging_face_batches_and_the_filter():
    """The fault edits input_ids and labels alike (GPT-2 shifts inside the model); the
    filter drops the junk rows and per_sample_loss ranks them, on a model nanlab did not make."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = gpt2()
    injection = faults.inject("repeated_token_shard", batches=lm_batch, at_step=1, length=1)
    batch = injection.batches(1)
    junk, _ = degenerate_rows(batch["input_ids"], batch["labels"])
    assert int(junk.sum()) == 2 and torch.equal(batch["input_ids"], batch["labels"])
    assert not degenerate_rows(injection.batches(2)["input_ids"])[0].any()
    attribution = per_sample_loss(model, batch, hf_loss)
    assert {s.index for s in attribution.samples if s.top_share == 1.0} == \
        set(np.flatnonzero(junk.numpy()))
    trainer = Trainer(base(steps=3), model=model, batches=injection.batches, loss_fn=hf_loss)
    faults.get_fix("quality_filter").install(trainer)
    trainer.run()
    events = [e for e in trainer.record.events if e["kind"] == "filtered"]
    assert [(e["batch"], e["dropped"], e["of"]) for e in events] == [(1, 2, 8)]


def test_bad_values_are_one_clear_line():
    with pytest.raises(NanlabError, match=r"oov_token.fraction=2 is out of range"):
        faults.run_fault("oov_token", fraction=2)
    with pytest.raises(NanlabError, match="cannot be split into 3 equal vocabulary"):
        GPTConfig(vocab_partitions=3)
    with pytest.raises(NanlabError, match="needs a batch with an integer label tensor"):
        faults.inject("repeated_token_shard", batches=lambda i: (torch.ones(2, 3),),
                      at_step=0)  # refused at inject time, before any step
