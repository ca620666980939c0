"""Adaptive cures for loss spikes, as large runs use them, for any model and optimizer.

Gradient clipping to a fixed norm does little for AdamW (its update ignores a common
gradient scale: claim M6). These cures adapt to the run instead:

- :class:`ZClip` clips the global gradient norm when it is an outlier against an EMA of
  its own mean and variance (Kumar et al. 2025, "ZClip: Adaptive Spike Mitigation for LLM
  Pre-Training", arXiv 2504.02507; repository bluorion-com/ZClip, ``zclip/zclip.py``);
- :class:`UpdateClipping` shrinks a tensor's step when its gradient is large against
  Adam's second moment, StableAdamW's update clipping (Wortsman et al. 2023, "Stable and
  low-precision training for large-scale vision-language models", arXiv 2304.13013;
  reference code: gist mitchellnw/d42e22a0b9ec02ceaf4f7b4457f51423, ``StableAdamWUnfused``);
- :class:`SpikeClipping` clips single gradient entries that are outliers against Adam's
  second moment, SPAM's spike-aware clipping (Huang et al. 2025, "SPAM: Spike-Aware Adam
  with Momentum Reset", arXiv 2501.06842; repository TianjinYellow/SPAM-Optimizer,
  ``galore_torch/SPAM.py``);
- :func:`enable_softcapping` turns on Gemma 2's logit soft-capping, cap * tanh(x / cap),
  in a model that has the switch (nanlab's toy, Hugging Face's Gemma 2).

The three optimizer-side cures hook the optimizer's ``step`` (``attach``): they act on
the gradients the optimizer is about to use, after backward, after a GradScaler's
unscale, after any clipping, and never on a step that is skipped (a guard's skip, the
GradScaler's inf step), in your own loop as in nanlab's Trainer:

>>> model = torch.nn.Linear(4, 1)
>>> optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
>>> zclip = ZClip().attach(optimizer)
>>> for step in range(30):
...     optimizer.zero_grad()
...     model(torch.randn(8, 4)).pow(2).mean().backward()
...     optimizer.step()                     # ZClip looks at the gradients first
>>> zclip.steps_seen
30
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from nanlab.errors import NanlabError, check_range

# Gemma 2's caps: google-deepmind/gemma gemma/transformer.py (TransformerConfig.gemma2_2b,
# _9b, _27b: attn_logits_soft_cap=50.0, final_logit_softcap=30.0); Hugging Face's
# Gemma2Config has the same defaults (attn_logit_softcapping, final_logit_softcapping).
ATTN_SOFTCAP = 50.0
FINAL_SOFTCAP = 30.0
SOFTCAP_FIELDS = ("attn_logit_softcapping", "final_logit_softcapping")


class _StepHook:
    """What the optimizer-side cures share: attach to an optimizer, count what they did.

    ``acted`` counts the optimizer steps on which the cure changed something, ``last``
    says what it did on the latest of them (a dict, for a run record's event).
    """

    def __init__(self):
        self.steps_seen = 0
        self.acted = 0
        self.last: dict | None = None
        self.handles: list = []

    def attach(self, optimizer: torch.optim.Optimizer):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise NanlabError(f"{type(self).__name__}.attach needs a torch.optim.Optimizer; got "
                              f"{type(optimizer).__name__}")
        self.handles.append(optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: self.before_step(opt)))
        self.handles.append(optimizer.register_step_post_hook(
            lambda opt, args, kwargs: self.after_step(opt)))
        return self

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def before_step(self, optimizer) -> None:
        self.steps_seen += 1

    def after_step(self, optimizer) -> None:
        pass

    def _acted(self, **what) -> None:
        self.acted += 1
        self.last = {"cure": type(self).__name__, **what}


class _AdamStepHook(_StepHook):
    """A step hook that reads Adam's second moment: refused, in one line, on an optimizer
    that keeps none (update and spike clipping)."""

    def attach(self, optimizer: torch.optim.Optimizer):
        reason = needs_second_moment(optimizer)
        if reason:
            raise NanlabError(f"{type(self).__name__}: {reason}. Allowed: an Adam-family "
                              "optimizer")
        return super().attach(optimizer)


def _check_positive(name: str, value, note: str) -> None:
    """A number above 0 (``check_range`` allows the bound itself), or one line saying so."""
    check_range(name, value, 0.0)
    if value == 0:
        raise NanlabError(f"{name}=0 is not allowed; allowed: a number above 0 ({note})")


def _with_grads(optimizer):
    """(param group, parameter) for every parameter that has a gradient this step."""
    return [(g, p) for g in optimizer.param_groups for p in g["params"] if p.grad is not None]


def _second_moment(optimizer, p: torch.Tensor, cure: str) -> torch.Tensor | None:
    """Adam's running mean of g^2 for ``p`` (``exp_avg_sq``); None before the first step."""
    state = optimizer.state.get(p)
    if not state:
        return None
    if "exp_avg_sq" not in state:
        raise NanlabError(f"{cure} reads Adam's second moment (optimizer state 'exp_avg_sq'); "
                          f"{type(optimizer).__name__} keeps none. Allowed: an Adam-family "
                          "optimizer (Adam, AdamW, NAdam, RAdam)")
    return state["exp_avg_sq"]


def needs_second_moment(optimizer: torch.optim.Optimizer) -> str | None:
    """Why update / spike clipping cannot act with this optimizer, or None when it can.

    They read Adam's second moment; an optimizer without betas (SGD, Adagrad) keeps none.

    >>> needs_second_moment(torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1))
    'SGD keeps no second moment of the gradient (no betas): nothing to compare g^2 with'
    >>> print(needs_second_moment(torch.optim.AdamW(nn.Linear(2, 2).parameters())))
    None
    """
    if all("betas" in group for group in optimizer.param_groups):
        return None
    return (f"{type(optimizer).__name__} keeps no second moment of the gradient (no betas): "
            "nothing to compare g^2 with")


class ZClip(_StepHook):
    """Clip the global gradient norm when its z-score against an EMA passes ``z_thresh``.

    As in bluorion-com/ZClip (``zclip/zclip.py``, its defaults, mode "zscore" with
    clip_option "adaptive_scaling", clip_factor 1): the first ``warmup_steps`` norms
    set the mean and variance; after that, with z = (norm - mean) / (std + eps), a norm
    with z > z_thresh is clipped to mean + z_thresh * std / (z / z_thresh) (the larger
    the outlier, the harder the clip), and the EMA is updated with the clipped norm:
    mean = alpha * mean + (1 - alpha) * norm, then var = alpha * var + (1 - alpha) *
    (norm - mean)^2 with the new mean. The paper's constants: alpha 0.97, z_thresh 2.5.

    Two differences from the repository: ``max_norm`` (its max_grad_norm, a fixed clip
    on top) is off by default, so the adaptive part is measured alone (a fixed clip at
    1.0 is the grad_clip fix); and a non-finite norm is neither clipped nor averaged in
    (the repository's mean would turn NaN for good), so the statistics survive a NaN step.

    >>> w = nn.Parameter(torch.zeros(4))
    >>> zclip = ZClip(warmup_steps=3)
    >>> for norm in (1.0, 1.2, 0.8, 1.1):     # warm-up, then a normal norm: untouched
    ...     w.grad = torch.tensor([norm, 0.0, 0.0, 0.0])
    ...     _ = zclip.clip([w])
    >>> w.grad = torch.tensor([50.0, 0.0, 0.0, 0.0])  # an outlier: clipped near the mean
    >>> zclip.clip([w]) < 2.0, zclip.acted
    (True, 1)
    """

    def __init__(self, alpha: float = 0.97, z_thresh: float = 2.5, warmup_steps: int = 25,
                 eps: float = 1e-6, max_norm: float | None = None):
        super().__init__()
        check_range("ZClip.alpha", alpha, 0.0, 1.0)
        _check_positive("ZClip.z_thresh", z_thresh, "the paper's 2.5")
        check_range("ZClip.warmup_steps", warmup_steps, 1, integer=True)
        check_range("ZClip.eps", eps, 0.0)
        if max_norm is not None:
            check_range("ZClip.max_norm", max_norm, 0.0)
        self.alpha, self.z_thresh, self.warmup_steps = alpha, z_thresh, warmup_steps
        self.eps, self.max_norm = eps, max_norm
        self.warmup_norms: list[float] = []
        self.mean: float | None = None  # None until the warm-up is over
        self.var: float | None = None

    def attach(self, optimizer: torch.optim.Optimizer) -> ZClip:
        """Clip before every ``optimizer.step()``; the EMA is saved and restored with the
        optimizer's state_dict, so a checkpoint resumes (or a rollback rewinds) it too."""
        super().attach(optimizer)
        self.handles.append(optimizer.register_state_dict_post_hook(self._save))
        self.handles.append(optimizer.register_load_state_dict_pre_hook(self._load))
        return self

    def before_step(self, optimizer) -> None:
        super().before_step(optimizer)
        self.clip([p for _, p in _with_grads(optimizer)])

    def threshold(self, norm: float) -> float | None:
        """The norm to clip to (adaptive scaling), or None when ``norm`` is not an outlier."""
        std = math.sqrt(self.var)
        z = (norm - self.mean) / (std + self.eps)
        if z <= self.z_thresh:
            return None
        return self.mean + self.z_thresh * std / (z / self.z_thresh)

    def clip(self, params) -> float:
        """Clip the gradients of ``params`` in place; returns their norm after clipping."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return 0.0
        norm = float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g.detach().float()) for g in grads])))
        if not math.isfinite(norm):
            return norm  # nothing to scale by, and no poison for the statistics
        if self.mean is None:  # warm-up: collect, then start the EMA from the sample
            self.warmup_norms.append(norm)
            if len(self.warmup_norms) >= self.warmup_steps:
                n = len(self.warmup_norms)
                self.mean = sum(self.warmup_norms) / n
                self.var = sum((x - self.mean) ** 2 for x in self.warmup_norms) / n
                self.warmup_norms = []
            limit = None
        else:
            limit = self.threshold(norm)
            seen = limit if limit is not None else norm
            self.mean = self.alpha * self.mean + (1 - self.alpha) * seen
            self.var = self.alpha * self.var + (1 - self.alpha) * (seen - self.mean) ** 2
        if self.max_norm is not None:
            limit = self.max_norm if limit is None else min(limit, self.max_norm)
        if limit is None or norm <= limit:
            return norm
        scale = limit / (norm + 1e-6)  # as torch's clip_grad_norm_ and the repository
        for g in grads:
            g.mul_(scale)
        self._acted(norm=norm, clipped_to=limit)
        return limit

    def state_dict(self) -> dict:
        """The EMA and the warm-up sample, plain numbers (``weights_only`` loads them).

        >>> ZClip().state_dict()["mean"] is None
        True
        """
        return {"mean": self.mean, "var": self.var, "warmup_norms": list(self.warmup_norms),
                "steps_seen": self.steps_seen, "acted": self.acted}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var = state["mean"], state["var"]
        self.warmup_norms = list(state["warmup_norms"])
        self.steps_seen, self.acted = state["steps_seen"], state["acted"]

    def _save(self, optimizer, state_dict: dict) -> dict:
        state_dict["nanlab_zclip"] = self.state_dict()
        return state_dict

    def _load(self, optimizer, state_dict: dict) -> dict:
        saved = state_dict.pop("nanlab_zclip", None)
        if saved is not None:
            self.load_state_dict(saved)
        return state_dict


class UpdateClipping(_AdamStepHook):
    """StableAdamW's update clipping: each tensor's step is divided by max(1, RMS / d),
    RMS = sqrt(mean(g^2 / max(u, eps^2))), u = Adam's bias-corrected second moment.

    As in Wortsman et al.'s ``StableAdamWUnfused`` (arXiv 2304.13013, Algorithm 2): u
    already holds this step's g^2 (u = exp_avg_sq / (1 - beta2^t) after the optimizer
    updated it), the RMS is taken per tensor, d (``threshold``) is 1. An RMS far above 1
    means the second moment underestimates the gradient, as it does just before a loss
    spike in their runs: the step is shrunk to what Adam would take with an up-to-date u.

    It works with the optimizer you have (Adam, AdamW, NAdam, ...): the parameters are
    copied before the step and the step taken is scaled afterwards, which is the same as
    a per-tensor LR for an update proportional to the LR. That includes AdamW's decoupled
    weight decay (the reference applies it at the full LR; with weight_decay 0 they agree).
    An optimizer without Adam's second moment is refused with one line.

    >>> w = nn.Parameter(torch.ones(3))
    >>> opt = torch.optim.AdamW([w], lr=0.1, weight_decay=0.0)
    >>> clipping = UpdateClipping().attach(opt)
    >>> for g in (1e-3, 1e-3, 1.0):          # a gradient 1000x what u has seen
    ...     w.grad = torch.full((3,), g)
    ...     before = w.detach().clone()
    ...     opt.step()
    >>> clipping.acted, round(clipping.last["rms"] ** 2, 2)  # u holds 1/3 of this g^2: RMS^2 = 3
    (1, 3.0)
    """

    def __init__(self, threshold: float = 1.0):
        super().__init__()
        _check_positive("UpdateClipping.threshold", threshold, "StableAdamW's d = 1")
        self.threshold = threshold
        self._before: list[tuple[dict, torch.Tensor, torch.Tensor]] = []

    def before_step(self, optimizer) -> None:
        super().before_step(optimizer)
        self._before = [(group, p, p.detach().clone()) for group, p in _with_grads(optimizer)]

    def after_step(self, optimizer) -> None:
        before, self._before = self._before, []
        rms = []
        for group, p, _ in before:
            v = _second_moment(optimizer, p, "UpdateClipping")
            t = float(optimizer.state[p]["step"])
            u = v.float() / (1 - group["betas"][1] ** t)  # bias-corrected, as the reference
            eps = group.get("eps", 1e-8)
            g = p.grad.detach().float()
            rms.append(torch.sqrt(torch.mean(g * g / torch.clamp(u, min=eps * eps))))
        if not rms:
            return
        values = torch.stack(rms).tolist()  # one host sync per step
        clipped = []
        with torch.no_grad():
            for (_, p, old), r in zip(before, values, strict=True):
                if r > self.threshold:  # False for NaN: a NaN step is not ours to hide
                    p.copy_(old + (p - old) / (r / self.threshold))
                    clipped.append(r)
        if clipped:
            self._acted(tensors=len(clipped), rms=max(clipped))


class SpikeClipping(_AdamStepHook):
    """SPAM's spike-aware clipping: a gradient entry with g^2 > theta * v (v = Adam's
    second moment before this step) becomes sign(g) * sqrt(theta * v); the rest stay.

    As in TianjinYellow/SPAM-Optimizer (``galore_torch/SPAM.py``): theta = 5000, v is
    the raw ``exp_avg_sq`` (no bias correction), and it acts only from step
    ``warmup_steps`` = 20 on (its grad_accu_steps), while v is still filling up. SPAM's
    momentum reset (m and v zeroed every 500 steps, then a cosine LR warm-up) is not
    implemented: it is a different cure, and runs here are shorter than one period.

    >>> w = nn.Parameter(torch.zeros(4))
    >>> opt = torch.optim.AdamW([w], lr=1e-3)
    >>> spam = SpikeClipping(warmup_steps=2).attach(opt)
    >>> for step in range(3):                  # v learns g^2 ~ 1e-4
    ...     w.grad = torch.full((4,), 1e-2)
    ...     opt.step()
    >>> w.grad = torch.tensor([1e-2, 1e-2, 1e-2, 100.0])  # one entry 10,000x larger
    >>> spam.before_step(opt)
    >>> limit = (5000 * opt.state[w]["exp_avg_sq"][3]).sqrt()   # sqrt(theta * v)
    >>> bool(w.grad[3] == limit), w.grad[:3].tolist() == torch.full((3,), 1e-2).tolist()
    (True, True)
    """

    def __init__(self, threshold: float = 5000.0, warmup_steps: int = 20):
        super().__init__()
        _check_positive("SpikeClipping.threshold", threshold, "SPAM's theta = 5000")
        check_range("SpikeClipping.warmup_steps", warmup_steps, 0, integer=True)
        self.threshold, self.warmup_steps = threshold, warmup_steps

    def before_step(self, optimizer) -> None:
        super().before_step(optimizer)
        counts = []
        with torch.no_grad():
            for _, p in _with_grads(optimizer):
                v = _second_moment(optimizer, p, "SpikeClipping")
                if v is None or float(optimizer.state[p]["step"]) + 1 < self.warmup_steps:
                    continue
                g = p.grad
                limit = torch.sqrt(self.threshold * v.float())
                spike = g.float().abs() > limit  # g^2 > theta * v, without squaring g
                g.copy_(torch.where(spike, torch.sign(g.float()) * limit, g.float()).to(g.dtype))
                counts.append(spike.sum())
        if counts:
            entries = int(torch.stack(counts).sum())  # one host sync per step
            if entries:
                self._acted(entries=entries)


def softcap_switches(model: nn.Module) -> list[tuple[str, object, str]]:
    """Where a model lets logit soft-capping be set: (where, object, field) for a config
    with Hugging Face's field names (Gemma2Config) and every module that keeps a copy
    (Hugging Face's attention layers, nanlab's AttentionScores). [] when it has none.

    >>> from nanlab.toy.model import GPT, GPTConfig
    >>> [(w, f) for w, _, f in softcap_switches(GPT(GPTConfig(n_layer=1)))]
    [('config', 'attn_logit_softcapping'), ('config', 'final_logit_softcapping'), \
('blocks.0.attn.scores', 'attn_logit_softcapping')]
    >>> softcap_switches(nn.Linear(2, 2))
    []
    """
    found = []
    config = getattr(model, "config", None)
    for name in SOFTCAP_FIELDS:
        if config is not None and hasattr(config, name):
            found.append(("config", config, name))
    for where, module in model.named_modules():
        if where and hasattr(module, SOFTCAP_FIELDS[0]):
            found.append((where, module, SOFTCAP_FIELDS[0]))
    return found


def enable_softcapping(model: nn.Module, attn: float = ATTN_SOFTCAP,
                       final: float = FINAL_SOFTCAP) -> list[str]:
    """Soft-cap the attention logits at ``attn`` and the final logits at ``final``
    (Gemma 2's 50 and 30) wherever the model exposes the switch; returns what changed, in
    words ([]: it was capped that tightly already). A model without a switch is refused:
    soft-capping is a line inside its forward, which only its author can add.

    >>> from transformers import Gemma2Config, Gemma2ForCausalLM  # doctest: +SKIP
    >>> config = Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
    ...     attn_logit_softcapping=None, final_logit_softcapping=None)  # doctest: +SKIP
    >>> enable_softcapping(Gemma2ForCausalLM(config))[:2]  # doctest: +SKIP
    ['config.attn_logit_softcapping None -> 50', 'config.final_logit_softcapping None -> 30']
    >>> enable_softcapping(nn.Linear(2, 2))
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: Linear has no logit soft-capping switch (no config field ...
    """
    for name, cap in (("attn", attn), ("final", final)):
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < math.inf:
            raise NanlabError(f"enable_softcapping({name}={cap!r}) is not allowed; allowed: a "
                              "number above 0 (Gemma 2: attn=50, final=30)")
    switches = softcap_switches(model)
    if not switches:
        raise NanlabError(
            f"{type(model).__name__} has no logit soft-capping switch (no config field "
            f"{' / '.join(SOFTCAP_FIELDS)}, as Hugging Face's Gemma2Config has, and no module "
            "keeping one): add cap * tanh(logits / cap) to its forward")
    changes = []
    for where, obj, field in switches:
        cap = attn if field == SOFTCAP_FIELDS[0] else final
        now = getattr(obj, field)
        if now is None or now > cap:
            setattr(obj, field, float(cap))
            changes.append(f"{where}.{field} {now} -> {cap:g}")
    return changes


__all__ = ["ATTN_SOFTCAP", "FINAL_SOFTCAP", "SOFTCAP_FIELDS", "SpikeClipping",
           "UpdateClipping", "ZClip", "enable_softcapping", "needs_second_moment",
           "softcap_switches"]
