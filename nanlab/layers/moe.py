"""A small top-k mixture-of-experts MLP, written to be read, for the MoE router faults.

Each token's router logits are ``gate(x)`` (one per expert); their softmax picks the
top-k experts, and the token's output is the sum of those experts' outputs, each
weighted by its probability (top-1 is the Switch Transformer's routing, Fedus et al.
2021). Two choices keep the router stable, and they are the defaults here:

- **selective precision** (Switch Transformer, section 2.4): the router computes in
  float32 whatever the autocast dtype (``precision="fp32"``; Megatron-LM's
  ``--moe-router-dtype fp32``);
  ``precision="auto"`` leaves it to autocast, like a plain ``nn.Linear``;
- the **router z-loss** (ST-MoE, Zoph et al. 2022, its router z-loss section): ``z_loss``
  x the mean over tokens of ``logsumexp(logits)**2``, which keeps the logits small, as
  Hugging Face's ``router_z_loss_func`` (modeling_switch_transformers.py) computes it;
  here in float32 with torch's ``logsumexp`` (max subtracted).

:func:`install_moe` swaps the ``mlp`` of every block of a model (the toy's, nanoGPT's
layout) for an :class:`MoE` (the toy's own forward path is untouched: only a fault does
this), and :class:`MoELoss` adds the routers' z-loss terms to a run's loss.

>>> from nanlab.toy.model import GPT, GPTConfig
>>> model = GPT(GPTConfig())
>>> install_moe(model)
2
>>> model(torch.zeros(2, 8, dtype=torch.long)).shape
torch.Size([2, 8, 32])
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from nanlab.errors import check_choice, check_range

PRECISIONS = ("fp32", "auto")  # the router in float32, or in whatever autocast gives
INIT_SEED = 1_000_003  # the experts' and routers' init: a pure function of this seed


class Router(nn.Module):
    """Token -> (top-k expert weights, expert ids): a bias-free ``gate`` and a softmax.

    ``precision``: "fp32" computes the logits and the softmax in float32 under any
    autocast (selective precision); "auto" lets autocast pick (fp16 under fp16 autocast).
    ``z_loss``: the ST-MoE z-loss weight (0: off). After each forward, ``z_term`` holds
    the z-loss term (a tensor, or None), ``load`` the tokens each expert received, and
    :meth:`stats` the evidence a diagnosis reads (the largest logit, the largest
    logsumexp, the dtype the logits were computed in).

    >>> router = Router(8, n_experts=4, top_k=2)
    >>> weights, experts = router(torch.randn(5, 8))
    >>> weights.shape, experts.shape, int(router.load.sum())
    (torch.Size([5, 2]), torch.Size([5, 2]), 10)
    """

    def __init__(self, n_embd: int, n_experts: int = 4, top_k: int = 1,
                 precision: str = "fp32", z_loss: float = 1e-3):
        super().__init__()
        check_range("Router.n_experts", n_experts, 2, integer=True)
        check_range("Router.top_k", top_k, 1, n_experts, integer=True)
        check_choice("Router.precision", precision, PRECISIONS)
        check_range("Router.z_loss", z_loss, 0.0, 1.0)
        self.gate = nn.Linear(n_embd, n_experts, bias=False)
        self.softmax = nn.Softmax(dim=-1)  # a module, so a fault can swap in a hand-written one
        self.top_k, self.precision, self.z_loss = top_k, precision, z_loss
        self.z_term: torch.Tensor | None = None
        self.load = torch.zeros(n_experts)
        self._peaks, self._dtype = torch.zeros(2), "float32"

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.precision == "fp32":  # Switch's selective precision: input and weight in fp32
            with torch.autocast(x.device.type, enabled=False):
                return nn.functional.linear(x.float(), self.gate.weight.float())
        return self.gate(x)  # under fp16 autocast: fp16 logits

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.logits(x)  # (N, n_experts)
        probs = self.softmax(logits)
        weights, experts = probs.topk(self.top_k, dim=-1)  # (N, k) each
        lse = torch.logsumexp(logits.float(), -1)  # (N,), in fp32: max subtracted
        self.z_term = (lse ** 2).mean() if self.z_loss > 0 else None
        self.load = torch.bincount(experts.flatten(), minlength=logits.shape[-1]).detach()
        self._peaks = torch.stack([logits.detach().float().max(), lse.detach().max()])
        self._dtype = str(logits.dtype).removeprefix("torch.")
        return weights, experts

    def stats(self) -> dict:
        """The last forward's largest logit (signed: only a large positive one overflows
        exp), largest logsumexp (fp32), the logits' dtype and the tokens per expert, as
        plain numbers (one host sync).

        >>> router = Router(4, n_experts=2)
        >>> _ = router(torch.ones(3, 4))
        >>> sorted(router.stats())
        ['dtype', 'load', 'logit_max', 'logsumexp_max']
        """
        logit_max, lse_max, *load = torch.cat([self._peaks, self.load.float()]).cpu().tolist()
        return {"logit_max": logit_max, "logsumexp_max": lse_max, "dtype": self._dtype,
                "load": [int(n) for n in load]}


class Expert(nn.Sequential):
    """One expert: Linear(C, hidden), GELU, Linear(hidden, C), the toy's MLP.

    >>> Expert(8, 32)(torch.randn(3, 8)).shape
    torch.Size([3, 8])
    """

    def __init__(self, n_embd: int, hidden: int):
        super().__init__(nn.Linear(n_embd, hidden), nn.GELU(), nn.Linear(hidden, n_embd))


class MoE(nn.Module):
    """An MLP as ``n_experts`` experts behind a router (top-k of them per token).

    >>> moe = MoE(64, n_experts=4, top_k=1)
    >>> moe(torch.randn(2, 3, 64)).shape
    torch.Size([2, 3, 64])
    """

    def __init__(self, n_embd: int, n_experts: int = 4, top_k: int = 1,
                 precision: str = "fp32", z_loss: float = 1e-3, hidden: int | None = None):
        super().__init__()
        self.router = Router(n_embd, n_experts, top_k, precision, z_loss)
        self.experts = nn.ModuleList(Expert(n_embd, hidden or 4 * n_embd)
                                     for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = x.reshape(B * T, C)
        weights, experts = self.router(h)  # (N, k)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            chosen = experts == e  # (N, k): where token n chose expert e
            rows = chosen.any(-1).nonzero().squeeze(-1)
            if rows.numel() == 0:
                continue  # an expert no token chose: no work, no gradient
            gate = (weights * chosen).sum(-1)[rows, None]
            out = out.index_add(0, rows, (gate * expert(h[rows])).to(out.dtype))
        return out.view(B, T, C)


def install_moe(model: nn.Module, n_experts: int = 4, top_k: int = 1,
                precision: str = "fp32", z_loss: float = 1e-3) -> int:
    """Put an :class:`MoE` in place of the ``mlp`` of every block that has one (the toy's
    and nanoGPT's layout), its width read from the MLP's first Linear; returns how many.
    The new weights are drawn as the toy draws its own (normal(0, 0.02), zero biases)
    from a generator of their own, so the global RNG (every other draw of the run) is
    left as it was.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_layer=3))
    >>> install_moe(model, n_experts=8, top_k=2), type(model.blocks[0].mlp).__name__
    (3, 'MoE')
    """
    blocks = [b for b in model.modules() if isinstance(getattr(b, "mlp", None), nn.Module)
              and not isinstance(b.mlp, MoE)]
    g = torch.Generator().manual_seed(INIT_SEED)
    for block in blocks:
        first = next(m for m in block.mlp.modules() if isinstance(m, nn.Linear))
        with torch.random.fork_rng(devices=[]):  # nn.Linear's own init draws: undone
            moe = MoE(first.in_features, n_experts, top_k, precision, z_loss,
                      hidden=first.out_features)
        with torch.no_grad():
            for m in moe.modules():
                if isinstance(m, nn.Linear):
                    m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
                    if m.bias is not None:
                        m.bias.zero_()
        block.mlp = moe.to(first.weight.device)
    return len(blocks)


def routers(model: nn.Module) -> list[tuple[str, Router]]:
    """(name, router) of every :class:`Router` in a model.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig())
    >>> routers(model), install_moe(model), [n for n, _ in routers(model)]
    ([], 2, ['blocks.0.mlp.router', 'blocks.1.mlp.router'])
    """
    return [(n, m) for n, m in model.named_modules() if isinstance(m, Router)]


class MoELoss:
    """A loss plus each router's ``z_loss`` x its z-loss term (routers with z_loss = 0
    add nothing, not 0 x the term: an inf term would make 0 x inf = NaN).

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> from nanlab.toy.data import CountingTask
    >>> from nanlab.train.objective import lm_loss
    >>> model = GPT(GPTConfig())
    >>> _ = install_moe(model)
    >>> loss = MoELoss(lm_loss, model)(model, CountingTask()(0))
    >>> bool(loss > lm_loss(model, CountingTask()(0)))
    True
    """

    def __init__(self, loss_fn: Callable, model: nn.Module):
        self.loss_fn, self.routers = loss_fn, [r for _, r in routers(model)]

    def __call__(self, model: nn.Module, batch) -> torch.Tensor:
        loss = self.loss_fn(model, batch)
        for r in self.routers:
            if r.z_loss > 0 and r.z_term is not None:
                loss = loss + r.z_loss * r.z_term
        return loss


__all__ = ["Expert", "MoE", "MoELoss", "Router", "install_moe", "routers"]
