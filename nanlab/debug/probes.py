"""Cheap health probes of a training run, the quantities Wortsman et al. 2023 watch.

"Small-scale proxies for large-scale Transformer training instabilities" (arXiv
2309.14322) follows a few numbers per run to see an instability coming before the loss
shows it:

- the **max attention logit** ``z_ij = <q_i, k_j> / sqrt(d_h)`` (section 3.1.1, Figure 2:
  it grows at high LR without QK-layernorm; every run whose max logit passed 1e4
  diverged, section 3.3) and the **attention entropy** it drives to zero (attention
  entropy collapse, Zhai et al. 2023);
- the **output log Z**, ``log sum_j exp(y_j)`` of the final logits (section 3.1.2,
  Figure 4: without weight decay the logits drift very negative late in training;
  z-loss keeps log Z near 0);
- the **update-to-weight ratio** ``||theta_after - theta_before|| / ||theta_before||``
  per layer, how far one optimizer step moves each layer (a large LR shows here first).

Measured only every ``every`` steps, so the cost is one extra forward capture and one
copy of the parameters now and then. Works on any ``nn.Module``: attention is found by
forward hooks on named softmax modules (nanlab's toy model, or names you give) and,
for every other model, by catching ``F.scaled_dot_product_attention`` and any softmax
over the last dim of a 4-D tensor (Hugging Face "eager" attention, minGPT) with a
``TorchFunctionMode``; the logits are the model's output (a tensor, ``.logits`` or
``["logits"]``) or the output of a module you name.

>>> from nanlab.toy.model import GPT, GPTConfig
>>> from nanlab.train.trainer import Trainer, TrainConfig
>>> trainer = Trainer(TrainConfig(steps=4, progress=False))
>>> probe = ModelProbe(trainer.model, every=2).attach(trainer)
>>> _ = trainer.run()
>>> [row["step"] for row in probe.rows], sorted(probe.rows[0])[:3]
([0, 2], ['attn_entropy', 'attn_logit', 'log_z'])
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from nanlab.errors import NanlabError, check_range

_SOFTMAXES = (F.softmax, torch.softmax, torch.Tensor.softmax)


def attention_stats(logits: torch.Tensor, allowed: torch.Tensor | None = None,
                    probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(max logit, mean entropy) of attention logits ``(..., T_query, T_key)``, on the device.

    ``allowed`` (bool, broadcastable) marks the entries the softmax may use; entries that
    are -inf (a causal mask already applied) never count. The entropy is in nats, averaged
    over batch, heads and query positions: log T for a uniform row over T keys, 0 for
    a one-hot row (entropy collapse).

    >>> m, h = attention_stats(torch.zeros(1, 1, 4, 4))
    >>> float(m), round(float(h), 4) == round(math.log(4), 4)
    (0.0, True)
    """
    z = logits.detach().float()
    if allowed is not None:
        z = z.masked_fill(~allowed, float("-inf"))
    if probs is None:
        probs = torch.softmax(z, dim=-1)
    entropy = torch.special.entr(probs.detach().float()).sum(-1)  # 0 * log 0 = 0
    finite = torch.where(torch.isneginf(z), torch.full_like(z, float("nan")), z)
    return torch.nan_to_num(finite, nan=float("-inf")).amax(), entropy.mean()


def log_z(logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of ``logsumexp`` over the last dim (the vocabulary), in fp32.

    >>> round(float(log_z(torch.zeros(2, 3, 8))), 5) == round(math.log(8), 5)
    True
    """
    return torch.logsumexp(logits.detach().float(), dim=-1).mean()


def _sdpa_logits(args: Sequence, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention logits and allowed-mask of one ``F.scaled_dot_product_attention`` call."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
    call = dict(zip(names, args, strict=False)) | kwargs
    q, k = call["query"].detach().float(), call["key"].detach().float()
    if q.dim() >= 3 and k.dim() >= 3 and q.size(-3) != k.size(-3):  # grouped-query attention
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
    scale = call.get("scale") or 1.0 / math.sqrt(q.size(-1))
    z = (q @ k.transpose(-2, -1)) * scale
    allowed = None
    mask = call.get("attn_mask")
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed = mask
        else:
            z = z + mask.float()
    if call.get("is_causal"):
        L, S = z.shape[-2:]
        causal = torch.ones(L, S, dtype=torch.bool, device=z.device).tril()
        allowed = causal if allowed is None else allowed & causal
    return z, allowed


def _mha_logits(m: nn.MultiheadAttention, args: Sequence,
                kwargs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention logits and allowed-mask of one ``nn.MultiheadAttention`` call, recomputed
    from its projections (its fused kernel never shows them)."""
    names = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask")
    call = dict(zip(names, args, strict=False)) | kwargs
    q, k = call["query"].detach().float(), call["key"].detach().float()
    if q.dim() == 2:  # unbatched (L, E)
        q, k = q.unsqueeze(1), k.unsqueeze(1)
    elif m.batch_first:
        q, k = q.transpose(0, 1), k.transpose(0, 1)  # -> (L, B, E)
    E, H = m.embed_dim, m.num_heads
    if m.in_proj_weight is not None:
        wq, wk = m.in_proj_weight[:E], m.in_proj_weight[E:2 * E]
    else:
        wq, wk = m.q_proj_weight, m.k_proj_weight
    bias = m.in_proj_bias
    q = F.linear(q, wq.detach().float(), None if bias is None else bias[:E].detach().float())
    k = F.linear(k, wk.detach().float(),
                 None if bias is None else bias[E:2 * E].detach().float())
    (L, B), S = q.shape[:2], k.size(0)
    q = q.reshape(L, B, H, E // H).permute(1, 2, 0, 3)  # (B, H, L, hd)
    k = k.reshape(S, B, H, E // H).permute(1, 2, 0, 3)
    z = q @ k.transpose(-2, -1) / math.sqrt(E // H)
    allowed = None
    for mask, shape in ((call.get("attn_mask"), (L, S)), (call.get("key_padding_mask"), None)):
        if mask is None:
            continue
        mask = mask.reshape(B, 1, 1, S) if shape is None else mask.reshape(-1, L, S)
        if shape is not None and mask.size(0) == B * H:
            mask = mask.reshape(B, H, L, S)
        if mask.dtype == torch.bool:  # True = may NOT attend (the opposite of SDPA)
            allowed = ~mask if allowed is None else allowed & ~mask
        else:
            z = z + mask.float()
    if call.get("is_causal") and call.get("attn_mask") is None:
        allowed = torch.ones(L, S, dtype=torch.bool, device=z.device).tril()
    return z, allowed


class _AttentionCalls(TorchFunctionMode):
    """Catches attention done by torch functions: SDPA, and softmax over a 4-D tensor's last dim."""

    def __init__(self, sink: ModelProbe):
        super().__init__()
        self.sink = sink

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.sink._busy:  # the probe's own arithmetic
            return out
        if func is F.scaled_dot_product_attention:
            self.sink._add_attention(f"sdpa call {self.sink._calls}", *_sdpa_logits(args, kwargs))
            self.sink._calls += 1
        elif func in _SOFTMAXES and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            if dim in (-1, 3):
                self.sink._add_attention(f"softmax call {self.sink._calls}", args[0], None, out)
                self.sink._calls += 1
        return out


class ModelProbe:
    """Max attention logit, attention entropy, output log Z and per-layer update ratios.

    ``attention``: names of modules whose forward input is the attention logits (masked
    entries -inf) and whose output is the softmax, or "auto" (every ``nanlab.toy.model.Softmax``
    and ``nn.MultiheadAttention``, whose logits are recomputed from its projections, plus
    the function-level capture described in the module docstring). ``logits``: the
    name of the module that outputs the final logits, or "auto" (the model's output).

    With nanlab's Trainer: ``probe.attach(trainer)``. In your own loop::

        with probe.step(i):               # measures only when i % every == 0
            loss = loss_fn(model(x), y)
            loss.backward()
            probe.before_update()         # ends the forward capture, copies the weights
            optimizer.step()              # the ratios are read when the block ends

    >>> net = nn.Sequential(nn.Linear(4, 8))
    >>> probe = ModelProbe(net, every=1)
    >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> with probe.step(0):
    ...     net(torch.ones(2, 4)).sum().backward()
    ...     probe.before_update()
    ...     opt.step()
    >>> sorted(probe.rows[0]["update_ratio"])
    ['0']
    """

    def __init__(self, model: nn.Module, every: int = 10, attention: str | Sequence[str] = "auto",
                 logits: str = "auto"):
        if not isinstance(model, nn.Module):
            raise NanlabError(f"model={type(model).__name__} is not allowed; give an nn.Module")
        check_range("every", every, 1, integer=True)
        self.model, self.every = model, every
        modules = dict(model.named_modules())
        if attention == "auto":
            from nanlab.toy.model import Softmax

            self.attention_names = [n for n, m in modules.items()
                                    if isinstance(m, (Softmax, nn.MultiheadAttention))]
        else:
            self.attention_names = [attention] if isinstance(attention, str) else list(attention)
        if logits != "auto" and logits not in modules:
            raise NanlabError(f"logits={logits!r} is not a module of the model; give 'auto' "
                              "(the model's output) or one of its module names")
        unknown = [n for n in self.attention_names if n not in modules]
        if unknown:
            raise NanlabError(f"attention={unknown!r}: no such module(s) in the model; give "
                              "'auto' or names from model.named_modules()")
        self.capture_functions = attention == "auto"
        self.logits_name = logits
        self.rows: list[dict] = []
        self._hooks: list[Any] = []
        self._mode: _AttentionCalls | None = None
        self._snapshot: dict[str, torch.Tensor] | None = None
        self._row: dict | None = None
        self._attn: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        self._log_z: list[torch.Tensor] = []
        self._calls = 0
        self._busy = False

    # -- the forward capture ----------------------------------------------------------
    def _add_attention(self, name: str, logits: torch.Tensor, allowed: torch.Tensor | None,
                       probs: torch.Tensor | None = None) -> None:
        self._busy = True
        try:
            self._attn.append((name, *attention_stats(logits, allowed, probs)))
        finally:
            self._busy = False

    def _start_forward(self, step: int) -> None:
        self._row, self._attn, self._log_z, self._calls = {"step": step}, [], [], 0
        modules = dict(self.model.named_modules())
        for name in self.attention_names:
            def hook(module, args, kwargs, output, name=name):
                if isinstance(module, nn.MultiheadAttention):
                    self._add_attention(name, *_mha_logits(module, args, kwargs))
                else:
                    self._add_attention(name, args[0], None, output)
            self._hooks.append(modules[name].register_forward_hook(hook, with_kwargs=True))
        target = self.model if self.logits_name == "auto" else modules[self.logits_name]

        def logits_hook(module, inputs, output):
            out = output
            if not isinstance(out, torch.Tensor):
                out = getattr(out, "logits", None) if not isinstance(out, (dict, tuple, list)) \
                    else (out.get("logits") if isinstance(out, dict) else out[0])
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                self._log_z.append(log_z(out))
        self._hooks.append(target.register_forward_hook(logits_hook))
        if self.capture_functions:
            self._mode = _AttentionCalls(self)
            self._mode.__enter__()

    def _end_forward(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)

    # -- the update ---------------------------------------------------------------------
    def before_update(self) -> None:
        """End the forward capture and copy the weights (call it just before optimizer.step)."""
        if self._row is None:
            return
        self._end_forward()
        self._snapshot = {n: p.detach().clone() for n, p in self.model.named_parameters()
                          if p.requires_grad}

    def after_update(self, **extra: Any) -> dict | None:
        """Finish the measurement (one host sync), append the row to ``rows`` and return it."""
        if self._row is None:
            return None
        self._end_forward()
        row, self._row = self._row, None
        values: list[torch.Tensor] = [v for _, m, h in self._attn for v in (m, h)] + self._log_z
        groups: dict[str, list[int]] = {}
        if self._snapshot is not None:
            params = dict(self.model.named_parameters())
            for name, before in self._snapshot.items():
                group = name.rsplit(".", 1)[0] if "." in name else name
                groups.setdefault(group, []).append(len(values))
                delta = params[name].detach().float() - before.float()
                values += [delta.pow(2).sum(), before.float().pow(2).sum()]
            self._snapshot = None
        host = torch.stack([v.reshape(()).float().cpu() for v in values]).tolist() \
            if values else []
        n_attn = 2 * len(self._attn)
        row["attn_logit"] = {name: host[2 * i] for i, (name, _, _) in enumerate(self._attn)}
        entropies = host[1:n_attn:2]
        row["max_attn_logit"] = max(row["attn_logit"].values(), default=math.nan)
        row["attn_entropy"] = sum(entropies) / len(entropies) if entropies else math.nan
        logz = host[n_attn:n_attn + len(self._log_z)]
        row["log_z"] = sum(logz) / len(logz) if logz else math.nan
        ratios = {}
        for group, idx in groups.items():
            delta2 = sum(host[i] for i in idx)
            weight2 = sum(host[i + 1] for i in idx)
            ratios[group] = math.sqrt(delta2 / weight2) if weight2 > 0 else math.inf
        row["update_ratio"] = ratios
        row["max_update_ratio"] = max(ratios.values(), default=math.nan)
        row.update(extra)
        self.rows.append(row)
        return row

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Measure the step inside the block when ``step % every == 0``; see the class docstring."""
        if step % self.every == 0:
            self._start_forward(step)
        try:
            yield
        except BaseException:
            self._end_forward()
            self._row = self._snapshot = None
            raise
        self.after_update()

    # -- nanlab's Trainer -----------------------------------------------------------------
    def attach(self, trainer) -> ModelProbe:
        """Measure a nanlab ``Trainer``'s run every ``every`` steps (a skipped update too)."""
        def start(tr, info):
            if tr.step % self.every == 0:
                self._start_forward(tr.step)

        def after_backward(tr, info):
            self.before_update()

        def end(tr, info):
            self.after_update(loss=info.loss_value)

        def run_end(tr, info):
            self._end_forward()  # never leave the capture on after a crash
            self._row = self._snapshot = None

        trainer.add_callback("on_step_start", start)
        trainer.add_callback("on_after_backward", after_backward)
        trainer.add_callback("on_step_end", end)
        trainer.add_callback("on_run_end", run_end)
        return self

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one measured quantity, e.g. ``probe.series("max_attn_logit")``."""
        return [r["step"] for r in self.rows], [r[key] for r in self.rows]
