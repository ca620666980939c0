"""The run probes (max attention logit, attention entropy, output log Z, update-to-weight
ratio) measure what they say on hand-made cases, on the toy model and on models nanlab did
not make; LR sensitivity follows Wortsman et al. 2023's definition."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from foreign_models import TinyEncoderLM

from nanlab.debug.probes import ModelProbe, attention_stats
from nanlab.debug.sensitivity import independent_decay, lr_sensitivity, lr_sweep
from nanlab.errors import NanlabError
from nanlab.train import Trainer
from nanlab.train.config import TrainConfig


class HandAttention(nn.Module):
    """Attention with fixed logits, written with F.softmax (as minGPT and HF eager attention),
    and a head whose output logits are a known constant."""

    def __init__(self, logits: torch.Tensor, vocab: int = 8, level: float = 0.0):
        super().__init__()
        self.logits, self.vocab, self.level = logits, vocab, level
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        att = F.softmax(self.logits, dim=-1)  # (B, heads, T, T)
        y = self.proj(x) + 0 * att.sum()
        return torch.full((*y.shape[:-1], self.vocab), self.level) + 0 * y.sum()


def probe_once(model, *inputs, **kwargs):
    probe = ModelProbe(model, every=1, **kwargs)
    with probe.step(0):
        model(*inputs)
        probe.before_update()
    return probe.rows[0]


def test_uniform_attention_has_entropy_log_t():
    for T in (1, 4, 16):
        row = probe_once(HandAttention(torch.zeros(2, 3, T, T)), torch.ones(2, T, 4))
        assert row["attn_entropy"] == pytest.approx(math.log(T), abs=1e-5)
        assert row["max_attn_logit"] == 0.0


def test_one_hot_attention_has_entropy_zero_and_its_max_logit():
    logits = torch.full((1, 1, 3, 3), -1e4)
    logits[..., 0] = 50.0
    row = probe_once(HandAttention(logits), torch.ones(1, 3, 4))
    assert row["attn_entropy"] == pytest.approx(0.0, abs=1e-6)
    assert row["max_attn_logit"] == 50.0


def test_masked_entries_do_not_count():
    z = torch.tensor([[[[1.0, float("-inf")], [2.0, 3.0]]]])
    m, h = attention_stats(z)
    assert float(m) == 3.0
    p = torch.softmax(torch.tensor([2.0, 3.0]), -1)
    assert float(h) == pytest.approx(float(-(p * p.log()).sum()) / 2, rel=1e-5)


def test_log_z_of_known_logits():
    # V equal logits of value c: log Z = c + log V
    for level, vocab in ((0.0, 8), (-20.0, 32), (5.0, 2)):
        row = probe_once(HandAttention(torch.zeros(1, 1, 2, 2), vocab, level), torch.ones(1, 2, 4))
        assert row["log_z"] == pytest.approx(level + math.log(vocab), abs=1e-5)


def test_update_ratio_of_a_hand_made_sgd_step():
    net = nn.Sequential(nn.Linear(3, 2))  # one layer, "0": its weight and bias together
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[3.0, 0.0, 0.0], [0.0, 4.0, 0.0]]))  # ||W|| = 5
        net[0].bias.copy_(torch.tensor([0.0, 2.0]))                           # ||b|| = 2
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    probe = ModelProbe(net, every=1)
    with probe.step(0):
        net(torch.tensor([[1.0, 2.0, 2.0]])).sum().backward()  # dW rows = x, ||dW|| = 3 sqrt 2
        probe.before_update()
        opt.step()
    expected = 0.1 * math.sqrt(2 * 9 + 2) / math.sqrt(25 + 4)   # ||lr g|| / ||theta||
    assert probe.rows[0]["update_ratio"] == {"0": pytest.approx(expected, rel=1e-6)}
    assert probe.rows[0]["max_update_ratio"] == pytest.approx(expected, rel=1e-6)


def test_steps_between_every_are_not_measured():
    net = nn.Linear(2, 2)
    probe = ModelProbe(net, every=3)
    for step in range(7):
        with probe.step(step):
            net(torch.ones(1, 2)).sum().backward()
            probe.before_update()
    assert [r["step"] for r in probe.rows] == [0, 3, 6]


def test_toy_model_max_logit_matches_the_scores_module_under_the_causal_mask():
    trainer = Trainer(TrainConfig(steps=1, progress=False, checkpoint_every=0))
    scores = []
    for block in trainer.model.blocks:
        block.attn.scores.register_forward_hook(lambda m, i, o: scores.append(o.detach()))
    probe = ModelProbe(trainer.model, every=1).attach(trainer)
    trainer.run()
    T = scores[0].size(-1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    by_hand = max(s.masked_fill(~causal, float("-inf")).amax().item() for s in scores)
    row = probe.rows[0]
    assert sorted(row["attn_logit"]) == ["blocks.0.attn.softmax", "blocks.1.attn.softmax"]
    assert row["max_attn_logit"] == pytest.approx(by_hand, rel=1e-6)
    assert 0 < row["attn_entropy"] < math.log(T)
    assert set(row["update_ratio"]) >= {"blocks.0.attn.c_attn", "lm_head", "wte"}
    assert row["loss"] == trainer.record.steps[0]["loss"]


def test_a_torch_transformer_encoder_is_probed_through_sdpa():
    torch.manual_seed(0)
    model = TinyEncoderLM().train()
    tokens = torch.randint(0, 16, (2, 6))
    row = probe_once(model, tokens[..., None].float(), tokens)
    assert len(row["attn_logit"]) == 2                    # one per encoder layer
    assert all(math.isfinite(v) for v in row["attn_logit"].values())
    assert 0 < row["attn_entropy"] <= math.log(6) + 1e-5
    assert math.isfinite(row["log_z"])


def test_multihead_attention_logits_match_its_own_weights():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)  # True = may not attend
    probe = ModelProbe(mha, every=1)
    with probe.step(0):
        _, weights = mha(x, x, x, attn_mask=causal, need_weights=True,
                         average_attn_weights=False)
        probe.before_update()
    entropy = torch.special.entr(weights).sum(-1).mean().item()
    assert probe.rows[0]["attn_entropy"] == pytest.approx(entropy, rel=1e-5)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_hugging_face_gpt2_is_probed(impl):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2,
                                     n_head=2, bos_token_id=0, eos_token_id=0,
                                     attn_implementation=impl)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (2, 10))
    probe = ModelProbe(model, every=1)
    with probe.step(0):
        logits = model(input_ids=ids).logits
        probe.before_update()
    row = probe.rows[0]
    assert len(row["attn_logit"]) == 2
    expected = torch.logsumexp(logits.detach().float(), -1).mean().item()
    assert row["log_z"] == pytest.approx(expected, rel=1e-5)
    # causal: the first query sees one key, so the mean entropy is below log T
    assert 0 < row["attn_entropy"] < math.log(10)


def test_bad_arguments_are_one_clear_error():
    net = nn.Linear(2, 2)
    with pytest.raises(NanlabError, match="every=0"):
        ModelProbe(net, every=0)
    with pytest.raises(NanlabError, match="no such module"):
        ModelProbe(net, attention=["blocks.0.attn"])
    with pytest.raises(NanlabError, match="logits='head'"):
        ModelProbe(net, logits="head")
    with pytest.raises(NanlabError, match="nn.Module"):
        ModelProbe("model")


def test_lr_sensitivity_follows_the_paper():
    # E[min(l, l0)] - l*: the worked example (4.5, 4.0, 9.0 -> capped 7.0)
    assert lr_sensitivity([4.5, 4.0, 9.0], initial_loss=7.0) == pytest.approx(7 / 6)
    assert lr_sensitivity([1.0, 1.0, 1.0], initial_loss=3.0) == 0.0
    assert lr_sensitivity([1.0, math.nan, math.inf], initial_loss=3.0) == pytest.approx(4 / 3)
    with pytest.raises(NanlabError):
        lr_sensitivity([], initial_loss=3.0)


def test_independent_decay_shrinks_by_the_schedule_not_the_lr():
    # A zero gradient leaves only the decay: theta <- theta * (1 - lr * wd) = theta * (1 - decay)
    for lr in (1e-3, 1e-1):
        p = nn.Parameter(torch.ones(3))
        opt = torch.optim.AdamW([p], lr=lr)
        independent_decay(opt, 0.01)
        p.grad = torch.zeros(3)
        opt.step()
        assert torch.allclose(p.detach(), torch.full((3,), 0.99))


def test_lr_sweep_returns_a_row_per_run_and_counts_a_nan_run_as_loss_0():
    sweep = lr_sweep({"base": {}, "qk": {"model": {"qk_norm": True}}}, lrs=[1e-2, 1e3],
                     base=TrainConfig(steps=4, batch_size=4), every=2, eval_batches=1)
    assert [(r["variant"], r["lr"]) for r in sweep.rows] == [
        ("base", 1e-2), ("base", 1e3), ("qk", 1e-2), ("qk", 1e3)]
    nan_runs = [r for r in sweep.rows if r["nonfinite"]]
    assert all(math.isnan(r["final_loss"]) for r in nan_runs)
    sens = sweep.sensitivity()
    for v in ("base", "qk"):
        losses = [r["final_loss"] for r in sweep.rows if r["variant"] == v]
        l0 = sweep.rows[0 if v == "base" else 2]["initial_loss"]
        assert sens[v] == lr_sensitivity(losses, l0)
    assert sweep.table().splitlines()[0].split()[:3] == ["variant", "lr", "final_loss"]
    assert len(sweep.probes[("base", 1e-2)]) == 2  # steps 0 and 2


def test_the_guides_example_runs_and_measures_every_tenth_step(capsys):
    page = Path(__file__).resolve().parents[1] / "docs" / "guides" / "diagnose.md"
    block = next(b for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
                 if "ModelProbe(model, every=10)" in b)
    scope: dict = {}
    exec(compile(block, str(page), "exec"), scope)
    steps, values = scope["probe"].series("max_attn_logit")
    assert steps == [0, 10, 20] and all(math.isfinite(v) for v in values)
    assert len(scope["probe"].rows[0]["attn_logit"]) == 2  # the two encoder layers
