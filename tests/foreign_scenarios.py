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
import math
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
    fix: str | None  # the fix it must prove (None for user_code: the cure is in it)
    make: Callable[[TrainConfig], Trainer]
    config: TrainConfig = field(default_factory=TrainConfig)
    own_fault: bool = True  # the fault is written here, not by nanlab.faults
    own_optimizer: bool = False  # the trainer gets an optimizer object made here
    needs: str | None = None  # an optional package
    # family "user_code": the module (its name in model.named_modules()) whose own forward
    # makes the first NaN / inf from finite inputs; the cure is a clamp there, fix None
    where: str | None = None

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


# -- a heteroscedastic regressor: a Gaussian NLL, below 0 once it learns -----------------
def noisy_curve(step: int, n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(2x) with noise whose std grows with |x| (0.02 .. 0.22)."""
    g = gen(step)
    x = torch.rand(n, 1, generator=g) * 4 - 2
    noise = (0.02 + 0.1 * x.abs()) * torch.randn(n, 1, generator=g)
    return x, torch.sin(2 * x) + noise


def gaussian_nll(model, batch):
    x, y = batch
    mean, raw = model(x).unbind(-1)
    return F.gaussian_nll_loss(mean, y[:, 0], F.softplus(raw))  # var > 0, floored at 1e-6


def nll_lr_typo(config):
    """A mean-and-variance regressor (Gaussian NLL, negative once it learns: healthy)
    trained by AdamW at LR 3.0 where 3e-3 was meant: the first steps throw the weights off,
    the loss jumps to ~1e12 and never learns again. At LR 0.3 it still ends above its
    first loss; LR 0.03 reaches the healthy ~-1.9 (so the cure is LR / 100). The variance
    is a softplus floored by gaussian_nll_loss: nothing in the user's code is unsafe."""
    return Trainer(config, model=mlp(width=64, depth=2, inputs=1, outputs=2),
                   batches=noisy_curve, loss_fn=gaussian_nll)


# -- a graph network: mean aggregation over neighbours ---------------------------------
class MeanConv(nn.Module):
    """GraphSAGE-mean: h_i' = relu(W_self h_i + W_nb . mean of h_j over the neighbours j
    of i); ``floor`` clamps the degree (None: the user's code, no clamp)."""

    def __init__(self, d_in: int, d_out: int, floor: float | None = None):
        super().__init__()
        self.self_lin, self.nb_lin = nn.Linear(d_in, d_out), nn.Linear(d_in, d_out)
        self.floor = floor

    def forward(self, h, adj):
        degree = adj.sum(-1, keepdim=True)
        if self.floor is not None:
            degree = degree.clamp(min=self.floor)
        return F.relu(self.self_lin(h) + self.nb_lin(adj @ h / degree))


class GraphNet(nn.Module):
    def __init__(self, floor: float | None = None):
        super().__init__()
        self.layers = nn.ModuleList([MeanConv(4, 32, floor), MeanConv(32, 32, floor)])
        self.head = nn.Linear(32, 3)

    def forward(self, x, adj):
        h = x
        for layer in self.layers:
            h = layer(h, adj)
        return self.head(h)


def graphs(step: int, n: int = 8, nodes: int = 12) -> dict:
    """Random undirected graphs (a ring plus random chords, no self-loops); a node's class
    is the argmax of its neighbours' mean feature over the first three features."""
    g = gen(step)
    x = torch.randn(n, nodes, 4, generator=g)
    upper = (torch.rand(n, nodes, nodes, generator=g) < 0.2).float().triu(1)
    ring = torch.roll(torch.eye(nodes), 1, dims=1)
    adj = ((upper + upper.transpose(1, 2) + ring + ring.T) > 0).float()
    y = (adj @ x[..., :3] / adj.sum(-1, keepdim=True)).argmax(-1)
    return {"x": x, "adj": adj, "y": y}


def graph_loss(model, batch):
    logits = model(batch["x"], batch["adj"])
    return F.cross_entropy(logits.flatten(0, 1), batch["y"].flatten())


def gnn_isolated_node(config, floor: float | None = None):
    """Mean aggregation divides by the node degree; at batch 40 one graph has an isolated
    node (degree 0, a legal graph): 0 / 0 in layers.0's forward. Isolated nodes are
    ordinary graph data, so the cure is the user's: ``degree.clamp(min=1)``."""
    def batches(step):
        batch = graphs(step)
        if step == 40:
            batch["adj"][2, 5, :] = 0.0
            batch["adj"][2, :, 5] = 0.0
            batch["y"][2, 5] = 0
        return batch
    return Trainer(config, model=GraphNet(floor), batches=batches, loss_fn=graph_loss)


# -- an encoder-decoder with key-padding masks (hand-written attention) ----------------
class MaskedAttention(nn.Module):
    """Single-head attention; ``pad`` (batch, keys) is True at padding, filled with -inf."""

    def __init__(self, d: int):
        super().__init__()
        self.q, self.kv, self.out = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)

    def forward(self, x, memory, pad=None, causal=False):
        k, v = self.kv(memory).chunk(2, -1)
        scores = self.q(x) @ k.transpose(1, 2) / k.shape[-1] ** 0.5
        if pad is not None:
            scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        if causal:
            future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return x + self.out(scores.softmax(-1) @ v)


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int = 16, d: int = 32, length: int = 12):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(vocab, d), nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(length, d) * 0.1)
        self.encoder, self.self_attn = MaskedAttention(d), MaskedAttention(d)
        self.cross = MaskedAttention(d)
        self.ffn = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, d))
        self.head = nn.Linear(d, vocab)

    def forward(self, src, tgt_in):
        pad = src == 0
        s = self.src_emb(src) + self.pos[: src.shape[1]]
        memory = self.encoder(s, s, pad)
        t = self.tgt_emb(tgt_in) + self.pos[: tgt_in.shape[1]]
        t = self.cross(self.self_attn(t, t, causal=True), memory, pad)
        return self.head(t + self.ffn(t))


def reversal_pairs(step: int, n: int = 16, length: int = 10) -> dict:
    """Source: 4-10 tokens (1..14) then padding 0; target: the source reversed, then an
    end token 15; the decoder reads the target shifted right (a start token 15)."""
    g = gen(step)
    src = torch.randint(1, 15, (n, length), generator=g)
    lengths = torch.randint(4, length + 1, (n,), generator=g)
    src[torch.arange(length) >= lengths[:, None]] = 0
    tgt = torch.full((n, length + 1), IGNORE)
    for i, k in enumerate(lengths.tolist()):
        tgt[i, :k] = src[i, :k].flip(0)
        tgt[i, k] = 15
    tgt_in = torch.cat([torch.full((n, 1), 15), tgt[:, :-1].clamp(min=0)], 1)
    return {"src": src, "tgt_in": tgt_in, "tgt": tgt}


def seq2seq_loss(model, batch):
    logits = model(batch["src"], batch["tgt_in"])
    return F.cross_entropy(logits.flatten(0, 1), batch["tgt"].flatten(), ignore_index=IGNORE)


def seq2seq_empty_source(config):
    """A parallel corpus with an empty line on the source side: at batch 40 one pair's
    source is all padding while its target is a sentence. Every key of that row is masked,
    the softmax over all -inf is 0 / 0 in the encoder. The cause is the data (a pair with
    nothing to translate is a broken example: filter or skip it), as with an all-padding
    shard; masking code that returned zeros instead would silently train on the pair."""
    def batches(step):
        batch = reversal_pairs(step)
        if step == 40:
            batch["src"][3] = 0
        return batch
    return Trainer(config, model=Seq2Seq(), batches=batches, loss_fn=seq2seq_loss)


# -- a normalising flow: RealNVP coupling layers on small images ------------------------
class Logit(nn.Module):
    """Pixels in [0, 1] to the real line, with the log-determinant. ``alpha`` squeezes the
    pixels into [alpha, 1 - alpha] first (RealNVP's 0.05); 0 leaves them as they are."""

    def __init__(self, alpha: float = 0.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = self.alpha + (1 - 2 * self.alpha) * x
        y = torch.log(x) - torch.log(1 - x)
        return y, (-torch.log(x) - torch.log(1 - x)).sum(-1)


class Coupling(nn.Module):
    """Affine coupling: half the pixels scale and shift the other half (tanh-bounded
    log-scale, as RealNVP does)."""

    def __init__(self, dim: int, flip: bool):
        super().__init__()
        self.flip = flip
        self.net = nn.Sequential(nn.Linear(dim // 2, 64), nn.ReLU(), nn.Linear(64, dim))

    def forward(self, y):
        a, b = y.chunk(2, -1)
        if self.flip:
            a, b = b, a
        log_s, t = self.net(a).chunk(2, -1)
        log_s = torch.tanh(log_s)
        b = b * log_s.exp() + t
        return (torch.cat([b, a], -1) if self.flip else torch.cat([a, b], -1)), log_s.sum(-1)


class Flow(nn.Module):
    def __init__(self, dim: int = 16, alpha: float = 0.0):
        super().__init__()
        self.logit = Logit(alpha)
        self.couplings = nn.ModuleList([Coupling(dim, i % 2 == 1) for i in range(4)])

    def forward(self, x):
        """The negative log-likelihood per pixel (in nats), negative once it learns."""
        y, logdet = self.logit(x)
        for layer in self.couplings:
            y, ld = layer(y)
            logdet = logdet + ld
        log_pz = -0.5 * (y ** 2 + math.log(2 * math.pi)).sum(-1)
        return -(log_pz + logdet).mean() / x.shape[-1]


def patches(step: int, n: int = 32) -> torch.Tensor:
    """4 x 4 grey patches (flattened): a random gradient plus noise, clipped to the
    darkest and brightest non-black, non-white 8-bit levels (1/255, 254/255)."""
    g = gen(step)
    ramp = torch.linspace(-1, 1, 4)
    angle = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    img = 0.5 + 0.35 * (angle.cos() * ramp[None, :, None] + angle.sin() * ramp[None, None, :])
    img = img + 0.05 * torch.randn(n, 4, 4, generator=g)
    return img.flatten(1).clamp(1 / 255, 254 / 255)


def flow_black_pixel(config, alpha: float = 0.0):
    """A RealNVP flow's logit preprocessing without RealNVP's alpha squeeze: at batch 40
    one patch has a pure black pixel (0, one 8-bit level below the 1/255 that ~1.5% of all
    pixels have: legal data): log(0) = -inf in the ``logit`` module's forward. The cure
    is the user's: squeeze the pixels (alpha 0.05) before the logit."""
    def batches(step):
        x = patches(step)
        if step == 40:
            x[7, 5] = 0.0
        return x
    return Trainer(config, model=Flow(alpha=alpha), batches=batches,
                   loss_fn=lambda model, x: model(x))


# -- a contrastive dual encoder (InfoNCE, CLIP-style) ----------------------------------
def views(step: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of the same latent: a linear mix (16 features) and a noisy tanh (12)."""
    g = gen(step)
    z = torch.randn(n, 8, generator=g)
    mix = torch.randn(16, 16, generator=torch.Generator().manual_seed(1))
    proj = torch.randn(8, 12, generator=torch.Generator().manual_seed(2))
    a = torch.cat([z, torch.randn(n, 8, generator=g)], 1) @ mix
    b = torch.tanh(z @ proj) + 0.1 * torch.randn(n, 12, generator=g)
    return a, b


class DualEncoder(nn.Module):
    def __init__(self, temperature: float = 0.07):
        super().__init__()
        self.a, self.b = mlp(64, 2, 16, 32), mlp(64, 2, 12, 32)
        self.temperature = temperature

    def forward(self, a, b):
        return self.a(a) @ self.b(b).T / self.temperature  # dot-product similarities


def info_nce(model, batch):
    logits = model(*batch)
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def contrastive_lr_fp16(config):
    """A dual encoder under fp16 autocast at LR 0.3: the similarity matmul passes 65504
    at step 3 and the loss is NaN from then on. The fp16 overflow is the symptom: in bf16
    and fp32 the same LR sends the loss to ~1e4-1e5 and it never learns; LR 0.03 collapses
    to log(32); LR 3e-3 learns, in fp16 too (so the cure is LR / 100, not bf16)."""
    return Trainer(config, model=DualEncoder(), batches=views, loss_fn=info_nce)


# -- a token classifier: nn.Embedding(padding_idx) into a LayerNorm with eps 0 ----------
class BagClassifier(nn.Module):
    def __init__(self, vocab: int = 32, eps: float = 0.0):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32, padding_idx=0)
        self.norm = nn.LayerNorm(32, eps=eps)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 4)

    def forward(self, tokens):
        h = self.mlp(self.norm(self.emb(tokens)))
        keep = (tokens > 0).float()[..., None]
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


def token_bags(step: int, n: int = 32, length: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """A sentence's class is which quarter of the vocabulary most of its tokens come from;
    from batch 25 on, sentences are 5-10 tokens, padded with id 0."""
    g = gen(step)
    y = torch.randint(0, 4, (n,), generator=g)
    tokens = 1 + (y[:, None] * 8 + torch.randint(0, 8, (n, length), generator=g)) % 31
    noise = torch.rand(n, length, generator=g) < 0.3
    tokens = torch.where(noise, torch.randint(1, 32, (n, length), generator=g), tokens)
    if step >= 25:
        lengths = torch.randint(5, length + 1, (n,), generator=g)
        tokens[torch.arange(length) >= lengths[:, None]] = 0
    return tokens, y


def layernorm_eps_zero(config):
    """LayerNorm(eps=0) right after an Embedding with padding_idx: a pad token's row is
    all zeros, its variance 0, 0 * (1 / sqrt(0)) = NaN once padded batches arrive."""
    return Trainer(config, model=BagClassifier(), batches=token_bags, loss_fn=classify)


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
    Scenario("nll_lr_typo", "MLP heteroscedastic regression (Gaussian NLL)",
             "learning_rate", "lr_div100", nll_lr_typo, base(lr=3.0)),
    Scenario("gnn_isolated_node", "graph network (mean aggregation)", "user_code", None,
             gnn_isolated_node, base(), where="layers.0"),
    Scenario("seq2seq_empty_source", "encoder-decoder (cross-attention)", "dirty_data",
             "validate_data", seq2seq_empty_source, base()),
    Scenario("flow_black_pixel", "normalising flow (RealNVP)", "user_code", None,
             flow_black_pixel, base(), where="logit"),
    Scenario("contrastive_lr_fp16", "contrastive dual encoder (InfoNCE)", "learning_rate",
             "lr_div100", contrastive_lr_fp16, base(lr=0.3, precision="fp16")),
    Scenario("layernorm_eps_zero", "embedding bag classifier", "tiny_eps", "norm_eps",
             layernorm_eps_zero, base()),
]
