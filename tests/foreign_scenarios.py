"""The "any model" suite: runs on models nanlab did not make, each broken in its own way.

Each scenario is what an instructor or a user would bring: a model kind (an MLP, a CNN,
a GRU, ``torch.nn.TransformerEncoder``, Hugging Face GPT-2 and Llama built from a tiny
config), a precision, sometimes their own optimizer object, and a fault, most of them
written in the scenario's own code rather than by nanlab's injectors. ``build(config)``
makes the whole run from a TrainConfig (seeded, so a replay is the same run), as
``diagnose(trainer, build=...)`` needs. ``family`` and ``fix`` are the truth diagnose
must find and prove.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanlab import faults
from nanlab.train import TrainConfig, Trainer

IGNORE = -100


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # the model kind
    family: str  # the root cause diagnose must name
    fix: str  # the fix it must prove
    make: Callable[[TrainConfig], Trainer]
    config: TrainConfig = field(default_factory=TrainConfig)
    own_fault: bool = True  # the fault is written here, not by nanlab.faults
    own_optimizer: bool = False  # the trainer gets an optimizer object made here
    needs: str | None = None  # an optional package

    def build(self, config: TrainConfig) -> Trainer:
        torch.manual_seed(config.seed)  # the model's init, the same in every replay
        return self.make(config)

    @property
    def missing(self) -> str | None:
        """The optional package this scenario needs and this machine lacks, if any."""
        return self.needs if self.needs and importlib.util.find_spec(self.needs) is None \
            else None

    def bad_run(self) -> Trainer:
        """The user's own run, as they would start it: a crash is its symptom and stays
        in the record (``Trainer.run`` logs it before raising), so it is not re-raised."""
        trainer = self.build(self.config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' notes on a tiny config
            try:
                trainer.run()
            except Exception:  # noqa: BLE001 - the crash is in the record
                pass
        return trainer


def base(**changes) -> TrainConfig:
    fields = dict(steps=100, lr=3e-3, warmup_steps=0, checkpoint_every=10, record_every=10,
                  progress=False, seed=0)
    return TrainConfig(**{**fields, **changes})


def gen(step: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + step)


# -- an MLP regressor on sensor readings ------------------------------------------------
def sensor_batch(step: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=gen(step))
    y = x @ torch.linspace(-1, 1, 8)[:, None] + 0.5 * x[:, :1] ** 2
    return x, y + 2.0


def mse(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def mlp(width: int = 64, depth: int = 2, inputs: int = 8, outputs: int = 1) -> nn.Sequential:
    layers, d = [], inputs
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, outputs))


def missing_value(config):
    """A CSV with one empty cell at batch 30, read as NaN and never imputed."""
    def batches(step):
        x, y = sensor_batch(step)
        if step == 30:
            x[3, 5] = float("nan")
        return x, y
    return Trainer(config, model=mlp(), batches=batches, loss_fn=mse)


def stuck_sensor(config):
    """Per-batch standardisation; at batch 30 one sensor is stuck, its std is 0: 0 / 0."""
    def batches(step):
        x, y = sensor_batch(step)
        if step == 30:
            x[:, 2] = 0.7
        return (x - x.mean(0)) / x.std(0), y
    model = mlp()
    return Trainer(config, model=model, batches=batches, loss_fn=mse,
                   optimizer=torch.optim.Adam(model.parameters(), lr=config.lr))


def raw_amounts(config):
    """Transaction amounts in currency units (~2e4), fed to the network unscaled under fp16:
    the first Linear's sums pass 65504."""
    def batches(step):
        x, y = sensor_batch(step)
        return x * 2e4 + 3e4, y
    return Trainer(config, model=mlp(), batches=batches, loss_fn=mse)


def deep_bad_init(config):
    """A deep plain stack initialised with std 1 (no fan-in scaling): activations grow
    by ~sqrt(fan_in / 2) per layer."""
    model = mlp(width=64, depth=12)
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=1.0)
    return Trainer(config, model=model, batches=sensor_batch, loss_fn=mse,
                   optimizer=torch.optim.Adam(model.parameters(), lr=config.lr))


# -- a classifier: MLP and CNN ----------------------------------------------------------
def blobs(step: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(0, 4, (n,), generator=gen(step))
    x = torch.randn(n, 8, generator=gen(step)) * 0.5 + F.one_hot(y, 8).float() * 2
    return x, y


def classify(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def sgd_far_too_high(config):
    """The user's own SGD at LR 20 on a classifier: the weights blow up in a few steps, and
    at LR 2 still (so the cure is LR / 100)."""
    model = mlp(outputs=4)
    return Trainer(config, model=model, batches=blobs, loss_fn=classify,
                   optimizer=torch.optim.SGD(model.parameters(), lr=20.0))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.head = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


def bars(step: int, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """16 x 16 images of one bright row; the class is the row's position (10 classes)."""
    y = torch.randint(0, 10, (n,), generator=gen(step))
    x = 0.3 * torch.randn(n, 1, 16, 16, generator=gen(step))
    x[torch.arange(n), 0, y + 3, :] += 2.0
    return x, y


def cnn_illegal_label(config):
    """A label equal to the number of classes (an off-by-one in the label map), injected
    by nanlab into a CNN: PyTorch's cross-entropy raises on it."""
    injection = faults.inject("illegal_label", batches=bars, labels=1, at_step=25)
    return Trainer(config, model=SmallCNN(), batches=injection.batches, loss_fn=classify)


# -- a GRU tagger over padded sequences -------------------------------------------------
class GRUTagger(nn.Module):
    def __init__(self, vocab: int = 20, tags: int = 5):
        super().__init__()
        self.emb, self.gru = nn.Embedding(vocab, 32), nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, tags)

    def forward(self, tokens):
        return self.head(self.gru(self.emb(tokens))[0])


def tagged(step: int) -> dict:
    tokens = torch.randint(1, 20, (16, 12), generator=gen(step))
    return {"tokens": tokens, "tags": tokens % 5}


def tag_loss(model, batch):
    logits = model(batch["tokens"])
    return F.cross_entropy(logits.flatten(0, 1), batch["tags"].flatten(), ignore_index=IGNORE)


def all_padding_batch(config):
    """The last, short shard of an epoch is all padding: every tag is ignored, the mean
    cross-entropy is 0 / 0."""
    def batches(step):
        batch = tagged(step)
        if step == 35:
            batch["tokens"][:] = 0
            batch["tags"][:] = IGNORE
        return batch
    return Trainer(config, model=GRUTagger(), batches=batches, loss_fn=tag_loss)


# -- torch.nn.TransformerEncoder --------------------------------------------------------
class HandRMSNorm(nn.Module):
    """An RMSNorm written by hand, its eps a plain field: eps 0 on an all-zero row is
    0 / sqrt(0)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Encoder(nn.Module):
    def __init__(self, vocab: int = 16, eps: float = 1e-5):
        super().__init__()
        self.emb, self.feat = nn.Embedding(vocab, 32, padding_idx=0), nn.Linear(1, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm, self.head = HandRMSNorm(32, eps), nn.Linear(32, vocab)

    def forward(self, x, tokens):
        h = self.emb(tokens) + self.feat(x)
        return self.head(self.enc(self.norm(h)))


def sequences(step: int, pad_rows: bool = False) -> dict:
    tokens = torch.randint(1, 16, (8, 12), generator=gen(step))
    x = tokens[..., None].float() / 16
    if pad_rows:  # padded positions: token 0 (a zero embedding) and feature 0
        tokens[:, 9:] = 0
        x[:, 9:] = 0.0
    y = torch.where(tokens > 0, tokens % 15 + 1, IGNORE)
    return {"x": x, "tokens": tokens, "y": y}


def seq_loss(model, batch):
    logits = model(batch["x"], batch["tokens"])
    return F.cross_entropy(logits.flatten(0, 1), batch["y"].flatten(), ignore_index=IGNORE)


def norm_eps_zero(config):
    """A hand-written RMSNorm with eps 0 meets the all-zero rows of padded positions."""
    class NoBiasFeat(Encoder):
        def __init__(self):
            super().__init__(eps=0.0)
            self.feat = nn.Linear(1, 32, bias=False)
    return Trainer(config, model=NoBiasFeat(), loss_fn=seq_loss,
                   batches=lambda step: sequences(step, pad_rows=step >= 20))


def encoder_nan_input_bf16(config):
    """nanlab's nan_input injector on a TransformerEncoder trained in bf16 autocast."""
    injection = faults.inject("nan_input", batches=sequences, inputs="x", at_step=30)
    model = Encoder()
    return Trainer(config, model=model, batches=injection.batches, loss_fn=seq_loss,
                   optimizer=torch.optim.AdamW(model.parameters(), lr=config.lr))


# -- Hugging Face GPT-2 and Llama, from tiny configs (nothing downloaded) --------------
def counting_ids(step: int, vocab: int = 64, n: int = 8, length: int = 16) -> torch.Tensor:
    g = gen(step)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    stride = torch.randint(1, 4, (n, 1), generator=g)
    return (start + stride * torch.arange(length)) % vocab


def hf_loss(model, batch):
    return model(**batch).loss


def gpt2(vocab: int = 64):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0)  # ids inside the tiny vocabulary
    return GPT2LMHeadModel(config)


def llama(vocab: int = 64):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=32)
    return LlamaForCausalLM(config)


def lm_batch(step: int) -> dict:
    ids = counting_ids(step)
    return {"input_ids": ids, "labels": ids.clone()}


def gpt2_illegal_label(config):
    """An id past the vocabulary in the labels (a tokenizer / model mismatch), injected by
    nanlab: GPT-2's cross-entropy raises on it."""
    injection = faults.inject("illegal_label", batches=lm_batch, labels="labels", at_step=30)
    return Trainer(config, model=gpt2(), batches=injection.batches, loss_fn=hf_loss)


def gpt2_all_masked(config):
    """A batch whose labels are all -100 (every position was prompt): GPT-2's mean loss
    over no targets is 0 / 0."""
    def batches(step):
        batch = lm_batch(step)
        if step == 30:
            batch["labels"][:] = IGNORE
        return batch
    return Trainer(config, model=gpt2(), batches=batches, loss_fn=hf_loss)


def llama_adamw_lr_1_fp16(config):
    """The user's own AdamW at LR 1 on Llama, under fp16 autocast with a GradScaler."""
    model = llama()
    return Trainer(config, model=model, batches=lm_batch, loss_fn=hf_loss,
                   optimizer=torch.optim.AdamW(model.parameters(), lr=1.0))


def llama_nan_input(config):
    """nanlab's nan_input injector on Llama's input embeddings (``inputs_embeds``)."""
    model = llama()

    def embeds(step):
        ids = counting_ids(step)
        with torch.no_grad():
            return {"inputs_embeds": model.model.embed_tokens(ids).detach(),
                    "labels": ids}
    injection = faults.inject("nan_input", batches=embeds, inputs="inputs_embeds",
                              at_step=30)
    return Trainer(config, model=model, batches=injection.batches, loss_fn=hf_loss)


SCENARIOS = [
    Scenario("mlp_missing_value", "MLP regression", "dirty_data", "validate_data",
             missing_value, base()),
    Scenario("mlp_stuck_sensor", "MLP regression", "dirty_data", "validate_data",
             stuck_sensor, base(), own_optimizer=True),
    Scenario("mlp_raw_amounts_fp16", "MLP regression", "fp16_overflow", "bf16",
             raw_amounts, base(precision="fp16")),
    Scenario("mlp_deep_bad_init", "MLP regression (12 layers)", "bad_init", "sane_init",
             deep_bad_init, base(lr=1e-3), own_optimizer=True),
    Scenario("mlp_sgd_far_too_high", "MLP classifier", "learning_rate", "lr_div100",
             sgd_far_too_high, base(optimizer="sgd"), own_optimizer=True),
    Scenario("cnn_illegal_label", "CNN classifier", "dirty_data", "validate_data",
             cnn_illegal_label, base(), own_fault=False),
    Scenario("gru_all_padding", "GRU tagger", "dirty_data", "validate_data",
             all_padding_batch, base()),
    Scenario("encoder_norm_eps_zero", "TransformerEncoder", "tiny_eps", "norm_eps",
             norm_eps_zero, base()),
    Scenario("encoder_nan_input_bf16", "TransformerEncoder", "dirty_data", "validate_data",
             encoder_nan_input_bf16, base(precision="bf16"), own_fault=False,
             own_optimizer=True),
    Scenario("gpt2_illegal_label", "HF GPT-2", "dirty_data", "validate_data",
             gpt2_illegal_label, base(), own_fault=False, needs="transformers"),
    Scenario("gpt2_all_masked", "HF GPT-2", "dirty_data", "validate_data",
             gpt2_all_masked, base(), needs="transformers"),
    Scenario("llama_adamw_lr_1_fp16", "HF Llama", "learning_rate", "lr_div10",
             llama_adamw_lr_1_fp16, base(precision="fp16"), own_optimizer=True,
             needs="transformers"),
    Scenario("llama_nan_input", "HF Llama", "dirty_data", "validate_data",
             llama_nan_input, base(), own_fault=False, needs="transformers"),
]
