"""The toy Transformer: a small decoder-only language model, written to be read.

In the style of nanoGPT and minGPT: one file, one config dataclass, tensor shapes in
comments. Attention is written out by hand (no fused kernel) so that a learner can
see ``q @ k.T``, the softmax and the place where numbers get large; each of those
steps is its own small module, so forward hooks (and ``nanlab`` tools built on them)
can name it.

The config holds the hyperparameters a real model has and the course's experiments vary:
norm eps, init scheme, depth, norms and residual connections, QK-norm, logit
soft-capping, positional encoding, activation, a padding token, and a float feature
path; ``forward`` also takes Hugging Face's ``attention_mask`` for padded batches. No field
exists only for a fault: a fault acts on the built model through the
mechanism a real run has (a swapped module, a hook, a loss wrapper; nanlab.faults).

>>> from nanlab.toy.model import GPT, GPTConfig
>>> model = GPT(GPTConfig())
>>> logits = model(torch.zeros(2, 8, dtype=torch.long))  # (B, T, vocab_size)
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.toy.vocab_parallel import VocabParallelEmbedding, vocab_ranges

MEMORY_SHARE = 0.5  # a model may take at most this share of the machine's memory


@dataclass
class GPTConfig:
    """Shape and numerics of the toy model. Defaults give the clean baseline.

    A bad value is refused with its range.

    >>> GPTConfig().n_layer, GPTConfig().norm_eps
    (2, 1e-05)
    >>> tiny = GPTConfig(norm_eps=0.0)   # the tiny-eps fault's norm eps
    >>> GPTConfig(n_embd=65)
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: GPTConfig.n_embd=65 is not allowed; it must be a multiple of n_head=4
    """

    vocab_size: int = 32
    block_size: int = 32  # longest sequence the model accepts
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    n_features: int = 1  # float channels per token, projected into the residual stream; 0 = none
    norm_eps: float = 1e-5
    init: str = "normal"  # normal(0, init_std) as in GPT-2, or xavier / kaiming
    init_std: float = 0.02
    qk_norm: bool = False  # LayerNorm on q and k before the dot product (Wortsman et al. 2023)
    # Logit soft-capping, cap * tanh(x / cap): a score can never pass the cap. Gemma 2 uses
    # 50 for the attention logits and 30 for the final logits (nanlab.optim.cures); None = off.
    # Named as in Hugging Face's Gemma2Config, so one cure sets both models the same way.
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    pos_encoding: str = "learned"  # "learned" | "sinusoidal"
    activation: str = "gelu"  # "gelu" | "relu" | "sigmoid"
    use_norms: bool = True  # False removes every LayerNorm: the deep-stack experiments
    residual: bool = True  # False makes each block replace x instead of adding to it
    embed_norm: bool = False  # LayerNorm straight after the token embedding (BLOOM-style)
    pad_id: int | None = None  # a padding token whose embedding row is fixed at zero
    # Tensor parallelism over the vocabulary, simulated (nanlab.toy.vocab_parallel): the token
    # embedding and the cross-entropy split into this many slices, each masking the ids
    # it does not own, as Megatron-LM does; an id past the vocabulary is then silent.
    vocab_partitions: int = 1

    def training_bytes(self) -> int:
        """About what training this model needs before any batch: fp32 weights, gradients
        and Adam's two moments (16 bytes a parameter), plus each attention layer's causal
        mask (one byte per position pair).

        >>> GPTConfig().training_bytes() < 10 * 2**20
        True
        """
        d, v, t = self.n_embd, self.vocab_size, self.block_size
        params = 2 * v * d + t * d + self.n_layer * (12 * d * d + 13 * d)
        return 16 * params + self.n_layer * t * t

    def _check_fits_in_memory(self) -> None:
        """Refuse, in one line, a shape that could not even be allocated here (a manifest
        edited by hand, ``--config model.n_embd=16384``), before anything is allocated."""
        try:
            memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # no sysconf: nothing to compare with
            return
        need = self.training_bytes()
        if need > MEMORY_SHARE * memory:
            raise NanlabError(
                f"GPTConfig(vocab_size={self.vocab_size}, block_size={self.block_size}, "
                f"n_layer={self.n_layer}, n_embd={self.n_embd}) needs about {need / 2**30:.0f} "
                f"GiB to train, more than this machine's {memory / 2**30:.0f} GiB allows; "
                "allowed: a toy-sized model (the defaults need a few MiB)")

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            check_range(f"GPTConfig.{name}", getattr(self, name), 1, integer=True)
        check_range("GPTConfig.n_features", self.n_features, 0, integer=True)
        if self.n_embd % self.n_head:
            raise NanlabError(
                f"GPTConfig.n_embd={self.n_embd} is not allowed; "
                f"it must be a multiple of n_head={self.n_head}"
            )
        self._check_fits_in_memory()
        check_range("GPTConfig.norm_eps", self.norm_eps, 0.0, 1.0)
        check_choice("GPTConfig.init", self.init, ["normal", "xavier", "kaiming"])
        check_range("GPTConfig.init_std", self.init_std, 0.0, 100.0)
        check_choice("GPTConfig.pos_encoding", self.pos_encoding, ["learned", "sinusoidal"])
        check_choice("GPTConfig.activation", self.activation, ["gelu", "relu", "sigmoid"])
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            cap = getattr(self, name)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                                    or not 0 < cap < math.inf):
                raise NanlabError(f"GPTConfig.{name}={cap!r} is not allowed; allowed: a number "
                                  "above 0 (Gemma 2: 50 for attention, 30 final), or None (off)")
        if self.pad_id is not None:
            check_range("GPTConfig.pad_id", self.pad_id, 0, self.vocab_size - 1, integer=True)
        check_range("GPTConfig.vocab_partitions", self.vocab_partitions, 1, integer=True)
        vocab_ranges(self.vocab_size, self.vocab_partitions)  # equal slices, or one clear line

    def to_dict(self) -> dict:
        return asdict(self)


class LayerNorm(nn.Module):
    """LayerNorm, by ``F.layer_norm`` (the model's) or written by hand (``impl="manual"``,
    the (x - mean) / sqrt(var + eps) many codebases use, for Lab 06's comparison).

    A row with zero variance in fp16: the hand-written norm's eps rounds to 0 and the
    row becomes 0 / 0 = NaN; ``F.layer_norm`` computes in fp32 inside.

    >>> x = torch.ones(1, 4, dtype=torch.float16)
    >>> bool(LayerNorm(4, eps=1e-12, impl="manual").half()(x).isnan().all())
    True
    >>> bool(LayerNorm(4, eps=1e-12, impl="torch").half()(x).isfinite().all())
    True
    """

    def __init__(self, dim: int, eps: float, impl: str = "torch"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps, self.impl = eps, impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "torch":
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        # Hand-written: every operation runs in x's dtype. In fp16, an eps below ~3e-8
        # rounds to 0, and a row with zero variance becomes 0 / sqrt(0) = 0 / 0 = NaN.
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        eps = torch.tensor(self.eps, dtype=x.dtype, device=x.device)
        return (x - mean) / torch.sqrt(var + eps) * self.weight + self.bias


def soft_cap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(x / cap): about x while |x| is well below the cap, never past it (Gemma 2).

    Smooth, unlike a clamp, so a capped logit still has a gradient; at +-inf it is +-cap.

    >>> [round(v, 3) for v in soft_cap(torch.tensor([0.5, 80000.0, float("inf")]), 50.0).tolist()]
    [0.5, 50.0, 50.0]
    """
    if cap is None:
        return x
    return cap * torch.tanh(x / cap)


class AttentionScores(nn.Module):
    """q @ k^T / sqrt(head_size): the attention logits, where fp16 overflow usually starts.

    ``attn_logit_softcapping`` (None: off) soft-caps them before the mask and the softmax,
    where Gemma 2 does; the attribute has Hugging Face's name, so a cure can set it after
    the model is built (:func:`nanlab.optim.cures.enable_softcapping`).

    ``hidden`` (broadcast to (B, nh, T, T), True at a padded key) sets those scores to
    ``torch.finfo(dtype).min``, as Hugging Face's masks do (``masking_utils.eager_mask``):
    a large negative number, not -inf, so a query whose every key is padding (the first
    positions of a left-padded row under the causal mask) gets a finite softmax instead of
    -inf - (-inf) = NaN (nanlab.faults.masked_attention).

    >>> q = torch.full((1, 1, 2, 4), 200.0)          # (B, heads, T, head_size)
    >>> AttentionScores()(q, q).flatten().tolist()   # 4 * 200 * 200 / 2
    [80000.0, 80000.0, 80000.0, 80000.0]
    >>> bool(AttentionScores()(q.half(), q.half()).isinf().all())   # above 65504 in fp16
    True
    >>> AttentionScores(softcap=50.0)(q.half(), q.half()).flatten().tolist()  # tanh(inf) = 1
    [50.0, 50.0, 50.0, 50.0]
    """

    def __init__(self, softcap: float | None = None):
        super().__init__()
        self.attn_logit_softcapping = softcap

    def forward(self, q: torch.Tensor, k: torch.Tensor,
                hidden: torch.Tensor | None = None) -> torch.Tensor:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        att = soft_cap(att, self.attn_logit_softcapping)
        if hidden is not None:  # padded keys: exp(min - max) is 0 unless the whole row is min
            att = att.masked_fill(hidden, torch.finfo(att.dtype).min)
        return att


class Softmax(nn.Module):
    """Softmax over the last dim, written out: the row max is subtracted before exp, so
    every exp is at most 1 and nothing overflows (a module of its own, so a hook or a
    fault's swap can reach it: nanlab.faults.precision.NaiveSoftmax).

    >>> Softmax()(torch.tensor([1000.0, 0.0]))
    tensor([1., 0.])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x - x.amax(-1, keepdim=True)  # masked -inf entries give exp = 0
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention written out step by step, nothing fused.

    >>> attn = CausalSelfAttention(GPTConfig())
    >>> attn(torch.randn(2, 8, 64)).shape            # (B, T, n_embd) in and out
    torch.Size([2, 8, 64])
    >>> print(inspect.getsource(CausalSelfAttention.forward))  # doctest: +SKIP
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        head_size = config.n_embd // config.n_head
        if config.qk_norm:
            self.q_norm = LayerNorm(head_size, config.norm_eps)
            self.k_norm = LayerNorm(head_size, config.norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.scores = AttentionScores(config.attn_logit_softcapping)
        self.softmax = Softmax()
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C); attention_mask (B, T): 1 at a token, 0 at padding (Hugging Face's)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # each (B, T, C)
        # split C into heads: (B, T, C) -> (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if attention_mask is None:
            att = self.scores(q, k)  # (B, nh, T, T)
        else:  # padded keys hidden from every query: (B, T) -> (B, 1, 1, T)
            att = self.scores(q, k, (attention_mask == 0)[:, None, None, :])
        att = att.masked_fill(~self.causal_mask[:T, :T], float("-inf"))  # no peeking ahead
        att = self.softmax(att)  # each row sums to 1
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        return self.c_proj(y)


ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "sigmoid": nn.Sigmoid}


class MLP(nn.Module):
    """The feed-forward half of a block: Linear(C, 4C), the activation, Linear(4C, C).

    >>> MLP(GPTConfig(activation="relu"))(torch.randn(2, 8, 64)).shape
    torch.Size([2, 8, 64])
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.act = ACTIVATIONS[config.activation]()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(ln(x)), then x + mlp(ln(x)).

    >>> block = Block(GPTConfig())
    >>> block(torch.randn(2, 8, 64)).shape
    torch.Size([2, 8, 64])
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        norm = (lambda: LayerNorm(config.n_embd, config.norm_eps)) \
            if config.use_norms else nn.Identity
        self.ln_1 = norm()
        self.attn = CausalSelfAttention(config)
        self.ln_2 = norm()
        self.mlp = MLP(config)

        self.residual = config.residual

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if not self.residual:  # a plain deep stack: every gradient passes every layer
            return self.mlp(self.ln_2(self.attn(self.ln_1(x), attention_mask)))
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.mlp(self.ln_2(x))


class SinusoidalPositions(nn.Module):
    """Fixed sin/cos positional encoding (Vaswani et al. 2017), computed on the fly.

    It is computed in the dtype of the model's weights: in a pure-fp16 model a
    position id past 65504 (absolute positions in a long stream) is already inf in
    fp16, and sin(inf) is NaN.

    >>> pe = SinusoidalPositions(8)
    >>> pe(torch.arange(3), torch.float32).shape      # (T, n_embd)
    torch.Size([3, 8])
    >>> bool(pe(torch.tensor([70000]), torch.float16).isnan().any())
    True
    """

    def __init__(self, n_embd: int):
        super().__init__()
        inv_freq = torch.exp(torch.arange(0, n_embd, 2) * (-math.log(10000.0) / n_embd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        # sin/cos are in [-1, 1], 50x the token embeddings (std 0.02): scaled down so
        # that positions do not drown the tokens in this small model.
        self.amplitude = 0.1

    def forward(self, pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        angles = pos.to(dtype)[:, None] * self.inv_freq.to(dtype)[None, :]  # (T, C/2)
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # (T, C)
        return pe * self.amplitude


class GPT(nn.Module):
    """Decoder-only Transformer: tokens (+ float features) -> next-token logits.

    >>> from nanlab.toy.data import CountingTask
    >>> model = GPT(GPTConfig())
    >>> batch = CountingTask(seed=0)(0)
    >>> model(batch.tokens, batch.features).shape    # (B, T, vocab_size)
    torch.Size([32, 32, 32])
    >>> model.num_params() > 100_000
    True
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd, padding_idx=config.pad_id) \
            if config.vocab_partitions == 1 else VocabParallelEmbedding(
                config.vocab_size, config.n_embd, config.vocab_partitions,
                padding_idx=config.pad_id)
        self.embed_norm = LayerNorm(config.n_embd, config.norm_eps) \
            if config.embed_norm else None
        if config.pos_encoding == "learned":
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
        else:
            self.wpe = SinusoidalPositions(config.n_embd)
        self.feat_proj = nn.Linear(config.n_features, config.n_embd) if config.n_features else None
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = LayerNorm(config.n_embd, config.norm_eps) \
            if config.use_norms else nn.Identity()
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        c = self.config
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if c.init == "normal":
                nn.init.normal_(module.weight, mean=0.0, std=c.init_std)
            elif c.init == "xavier":
                nn.init.xavier_normal_(module.weight)
            else:
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()  # and its gradient stays zero

    def forward(
        self,
        tokens: torch.Tensor,
        features: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (B, T) long; features (B, T, n_features) float; positions (T,) long;
        attention_mask (B, T): 1 at a token, 0 at padding (None: no padding), as in Hugging
        Face, so padded keys are hidden from every query."""
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device)
        x = self.wte(tokens)  # (B, T, C)
        if self.embed_norm is not None:
            x = self.embed_norm(x)  # a zero (padding) row has variance 0 here
        if isinstance(self.wpe, SinusoidalPositions):
            x = x + self.wpe(positions, x.dtype)  # (T, C) broadcast over B
        else:
            x = x + self.wpe(positions)
        if self.feat_proj is not None and features is not None:
            x = x + self.feat_proj(features)  # the float path: a NaN feature enters here
        for block in self.blocks:
            x = block(x) if attention_mask is None else block(x, attention_mask)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        return soft_cap(logits, self.config.final_logit_softcapping)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
