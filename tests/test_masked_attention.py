"""The masked-attention family (issue 31): a query with no key left, on the toy and on
models nanlab did not make; the cures, a wrong fix, and diagnose naming the cause."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from foreign_models import FOREIGN, plain_loop
from foreign_scenarios import counting_ids, gpt2, hf_loss
from shared_runs import shared_diagnosis

from nanlab import faults
from nanlab.debug.diagnose import diagnose
from nanlab.errors import NanlabError
from nanlab.faults.masked_attention import InfMaskScores, left_pad, swap_scores, with_mask
from nanlab.toy.data import CountingTask
from nanlab.toy.model import GPT, GPTConfig

STEPS = 60  # the faults strike at step 40


def run(name, fixes=(), steps=STEPS):
    return faults.run_fault(name, steps=steps, fixes=list(fixes), stop_when_poisoned=True)


# -- the mechanism, on the toy model -------------------------------------------------
def test_a_finite_fill_keeps_left_padding_finite_and_inf_spreads_it_to_real_tokens():
    torch.manual_seed(0)
    model = GPT(GPTConfig())  # two layers: the second reads the first one's NaN rows
    batch = left_pad(CountingTask()(0), 0, max_pad=8)
    real = batch.attention_mask.bool()
    logits = model(batch.tokens, batch.features, attention_mask=batch.attention_mask)
    assert logits.isfinite().all()  # finfo.min: a pad query sees only padding, finitely
    plain = model(batch.tokens, batch.features)
    ones = with_mask(CountingTask()(0))
    assert torch.equal(model(ones.tokens, ones.features, attention_mask=ones.attention_mask),
                       model(ones.tokens, ones.features))  # no padding: the same numbers
    assert not torch.equal(plain, logits)  # the mask does hide the padded keys
    swap_scores(model, InfMaskScores)
    bad = model(batch.tokens, batch.features, attention_mask=batch.attention_mask)
    padded_rows = (~real).any(1)
    assert bad[padded_rows][real[padded_rows]].isnan().any()  # 0 * NaN reached real tokens
    assert bad[~padded_rows].isfinite().all()  # rows without padding are untouched


# -- on the toy run -------------------------------------------------------------------
def test_left_padding_with_an_inf_mask_fails_at_its_step_and_finite_mask_cures_it():
    bad = run("left_padding_inf_mask")
    assert bad.record.first_nonfinite_step == 40
    assert bad.record.losses()[:40].tolist() == run(None).record.losses()[:40].tolist()
    cured = run("left_padding_inf_mask", ["finite_mask"], steps=100)
    assert cured.record.first_nonfinite_step is None and cured.error is None
    clean = run(None, steps=100).record.losses()
    # measured: 0.653 against the clean 0.509 (mean of the last 10 of 100 steps); padding
    # leaves fewer targets a step, and at 200 steps the matrix judges it cured
    assert cured.record.losses()[-10:].mean() < 1.5 * clean[-10:].mean()


@pytest.mark.parametrize("fix", ["validate_data", "grad_clip", "lr_div10"])
def test_wrong_fixes_do_not_cure_left_padding(fix):
    """Left padding is legal data (no batch to skip); clipping and a smaller LR act after
    the forward pass, where the NaN is already made."""
    assert run("left_padding_inf_mask", [fix]).record.first_nonfinite_step == 40


def test_an_empty_sequence_fails_at_its_step_and_validate_data_skips_it():
    bad = run("empty_sequence").record
    assert bad.first_nonfinite_step == 40
    # the row's targets are ignored, so the loss is finite; the backward pass is not
    assert math.isfinite(bad.steps[40]["loss"]) and math.isnan(bad.steps[40]["grad_norm"])
    cured = run("empty_sequence", ["validate_data"])
    assert cured.record.first_nonfinite_step is None
    assert [(e["kind"], e["batch"]) for e in cured.record.events] == [("bad_batch", 40)]
    assert "mask every key" in cured.record.events[0]["problems"][0]
    assert run("empty_sequence", ["finite_mask"]).record.first_nonfinite_step is None
    assert run("empty_sequence", ["lr_div10"]).record.first_nonfinite_step == 40


@pytest.mark.parametrize(("name", "fix"), [("left_padding_inf_mask", "finite_mask"),
                                           ("empty_sequence", "validate_data")])
def test_diagnose_names_the_fault_and_proves_its_fix(name, fix):
    d = shared_diagnosis(name)  # test_diagnose's
    assert (d.cause, d.detail, d.fix, d.fix_verified) == ("masked_attention", name, fix, True), \
        d.report()
    assert "step 40" in d.report()


# -- on models nanlab did not make ----------------------------------------------------
def tokens_and_mask(step: int) -> dict:
    """Token ids with a PyTorch key-padding mask (True: padding): rows of 5 to 8 tokens."""
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(1, 16, (8, 8), generator=g)
    lengths = torch.randint(5, 9, (8,), generator=g)
    pad = torch.arange(8)[None, :] >= lengths[:, None]
    return {"ids": ids.masked_fill(pad, 0), "key_padding_mask": pad,
            "y": torch.where(pad, -100, ids % 15 + 1)}


class MHATagger(nn.Module):
    """nn.MultiheadAttention called directly (need_weights=True, its default)."""

    def __init__(self, need_weights: bool = True):
        super().__init__()
        self.emb = nn.Embedding(16, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head, self.need_weights = nn.Linear(16, 16), need_weights

    def forward(self, ids, key_padding_mask):
        x = self.emb(ids)
        h, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask,
                         need_weights=self.need_weights)
        return self.head(x + h)


class EncoderTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 16)

    def forward(self, ids, key_padding_mask):
        return self.head(self.enc(self.emb(ids), src_key_padding_mask=key_padding_mask))


def tag_loss(model, batch):
    logits = model(batch["ids"], batch["key_padding_mask"])
    return F.cross_entropy(logits.flatten(0, 1), batch["y"].flatten(), ignore_index=-100)


def loop(model, loss_fn, batches, steps=12, said=None, **params):
    """AdamW on ``model``, empty_sequence injected at step 5; the losses (the fault's
    warnings appended to ``said``)."""
    import warnings

    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inj = faults.inject("empty_sequence", model=model, optimizer=opt, batches=batches,
                            at_step=5, **params)
        for step in range(steps):
            loss = loss_fn(model, inj.batches(step))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    if said is not None:
        said += [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return losses


def test_empty_sequence_fires_on_multihead_attention_that_returns_its_weights():
    torch.manual_seed(0)
    said = []
    losses = loop(MHATagger(), tag_loss, tokens_and_mask, said=said)
    assert all(math.isfinite(v) for v in losses[:5]) and math.isnan(losses[5])
    assert said == []  # it fired: nothing to warn about


def test_sdpa_returns_zeros_for_an_empty_row_so_these_models_train_on_measured():
    """Measured on torch 2.13 (CPU) and transformers 5.25: SDPA returns 0 for a row with
    no key (PyTorch's _safe_softmax), nn.TransformerEncoder in training uses it, and
    Hugging Face's masks are finfo.min, eager or SDPA: no NaN, the fault stays silent.
    nn.TransformerEncoder's eval fast path still makes the NaN."""
    torch.manual_seed(0)
    said = []
    assert all(math.isfinite(v) for v in loop(EncoderTagger(), tag_loss, tokens_and_mask,
                                              said=said))
    assert len(said) == 1 and said[0].startswith("empty_sequence: the model's output stayed "
                                                 "finite at step 5")
    torch.manual_seed(0)
    assert all(math.isfinite(v) for v in loop(MHATagger(need_weights=False), tag_loss,
                                              tokens_and_mask))
    enc = EncoderTagger().eval()
    batch = tokens_and_mask(0)
    batch["key_padding_mask"][2] = True
    with torch.no_grad():
        out = enc(batch["ids"], batch["key_padding_mask"])
    assert out[2].isnan().all() and out[[0, 1, 3]].isfinite().all()

    def hf_batches(step):
        ids = counting_ids(step)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    for impl in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = gpt2()
        model.config._attn_implementation = impl
        said = []
        assert all(math.isfinite(v) for v in loop(model, hf_loss, hf_batches, steps=7,
                                                  said=said)), impl
        assert len(said) == 1 and "finite" in said[0], (impl, said)


def test_refusals_at_inject_are_one_line():
    spec = FOREIGN["encoder_lm"]  # its batch holds no mask
    with pytest.raises(NanlabError, match="carries no key-padding mask") as err:
        plain_loop(spec, "empty_sequence")
    assert "\n" not in str(err.value)
    with pytest.raises(NanlabError, match=r"empty_sequence.row=9 is out of range; allowed: 0 to 7"):
        faults.inject("empty_sequence", model=MHATagger(), batches=tokens_and_mask, row=9)
    with pytest.raises(NanlabError, match="-inf fill lives in the model's own attention code"):
        faults.inject("left_padding_inf_mask", model=MHATagger(), batches=tokens_and_mask)


def test_diagnose_names_an_empty_sequence_on_multihead_attention():
    from nanlab.train import TrainConfig, Trainer

    def build(config):
        torch.manual_seed(config.seed)
        batches = faults.inject("empty_sequence", batches=tokens_and_mask, at_step=20).batches
        return Trainer(config, model=MHATagger(), batches=batches, loss_fn=tag_loss)
    trainer = build(TrainConfig(steps=30, lr=3e-3, checkpoint_every=10, progress=False))
    trainer.run()
    d = diagnose(trainer, build=build)
    assert (d.cause, d.detail, d.fix, d.fix_verified) == (
        "masked_attention", "empty_sequence", "validate_data", True), d.report()
    assert "key_padding_mask: 1 row(s) [0] mask every key" in d.report()


def test_hugging_face_and_pad_id_masks_measured():
    """The guide's numbers: GPT-2 and Llama, eager or SDPA, fp32 or bf16, finite with an
    empty row and with left padding (finfo.min masks); TinySeq2Seq (masks from pad ids)
    with an all-pad source row: finite in training (SDPA), NaN in eval mode."""
    from foreign_models import PAD, TinySeq2Seq, seq2seq_batches, seq2seq_loss
    from foreign_scenarios import llama

    for make in (gpt2, llama):
        for impl in ("eager", "sdpa"):
            for dtype in (torch.float32, torch.bfloat16):
                torch.manual_seed(0)
                model = make()
                model.config._attn_implementation = impl
                model = model.to(dtype)
                ids = counting_ids(0)
                empty, left = torch.ones_like(ids), torch.ones_like(ids)
                empty[2] = 0
                left[:4, :4] = 0
                for mask in (empty, left):
                    labels = ids.masked_fill(mask == 0, -100)
                    out = model(input_ids=ids, attention_mask=mask, labels=labels)
                    out.loss.backward()
                    assert out.logits.isfinite().all(), (make.__name__, impl, dtype)
                    assert all(p.grad.isfinite().all() for p in model.parameters()
                               if p.grad is not None), (make.__name__, impl, dtype)
    torch.manual_seed(0)
    model, batch = TinySeq2Seq(), seq2seq_batches(10)
    batch["src"][2] = PAD
    loss = seq2seq_loss(model, batch)
    loss.backward()
    assert loss.isfinite() and all(p.grad.isfinite().all() for p in model.parameters()
                                   if p.grad is not None)
    with torch.no_grad():
        assert seq2seq_loss(model.eval(), batch).isnan()
