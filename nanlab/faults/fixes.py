"""The cures of the SOP, as objects: each changes a run's config or acts on its model.

A fix acts on what the run really has: the LR cut divides the base LR of the optimizer
the trainer uses (also one you made), the eps fix raises the eps of every normalisation
module whatever its field is called, the init fix re-initialises layers by their type.
A fix that would change nothing in a run (turning AMP off in a run that is already
fp32, raising eps in a model whose norms are fine) is "not applicable": the fault x fix
matrix says n/a, and :func:`build_with_fixes` raises :class:`NotApplicable` with the
reason instead of pretending to measure something.

>>> from nanlab.faults.fixes import FIXES
>>> FIXES["amp_off"].configure(TrainConfig(precision="fp16")).precision
'fp32'
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from nanlab.errors import NanlabError, check_choice
from nanlab.faults.batch_check import LabelRange, batch_problems, label_range
from nanlab.faults.catalogue import SOP_STEPS
from nanlab.layers.norms import eps_field, norm_modules
from nanlab.optim import cures
from nanlab.optim.lr_lever import set_lr_factor
from nanlab.toy.model import GPT
from nanlab.train.trainer import TrainConfig, Trainer

EPS_FLOOR = 1e-5  # the eps of torch.nn.LayerNorm's default; below 1e-6 counts as tiny


class NotApplicable(NanlabError):
    """A fix that would change nothing in this run (its message says why).

    >>> import torch.nn as nn
    >>> net = Trainer(TrainConfig(progress=False), model=nn.Linear(2, 2),
    ...               batches=lambda i: torch.ones(1, 2), loss_fn=lambda m, b: m(b).sum())
    >>> build_with_fixes(lambda config: net, net.config, ["norm_eps"])
    Traceback (most recent call last):
    ...
    nanlab.faults.fixes.NotApplicable: norm_eps changes nothing in this run (...)
    """


@dataclass(frozen=True)
class Fix:
    """One cure: what it does, what it changes in the config, what it installs.

    ``change(config)`` returns the config changes (``{}``: none, it acts on the trainer;
    ``None``: the config says there is nothing to change). ``install(trainer)`` acts on
    the built trainer: it adds callbacks (returns None) or edits the model or the
    optimizer and returns what it changed, in words (``[]``: nothing to change); it raises
    :class:`NotApplicable` when it cannot act on that model or optimizer. ``sop_step`` is
    the SOP step (a key of ``SOP_STEPS``) whose finding leads to this fix; None for the
    guard's skip, which treats the symptom of any cause.

    >>> fix = get_fix("lr_div10")
    >>> trainer = Trainer(TrainConfig(lr=5e-3, progress=False))
    >>> fix.install(trainer)
    ['base LR 0.005 -> 0.0005']
    """

    name: str
    summary: str
    change: Callable[[TrainConfig], dict | None]  # config changes; None: nothing to change
    install: Callable[[Trainer], list[str] | None] = lambda trainer: None
    sop_step: str | None = None

    def __post_init__(self) -> None:
        if self.sop_step is not None:
            check_choice(f"{self.name}.sop_step", self.sop_step, SOP_STEPS)

    def configure(self, config: TrainConfig) -> TrainConfig | None:
        changes = self.change(config)
        if changes is None:
            return None
        return config.replace(**changes)

    def applies(self, config: TrainConfig,
                build: Callable[[TrainConfig], Trainer] | None = None) -> bool:
        """Whether the fix changes anything: in the config, or else (given ``build``, which
        makes the run's trainer, its fault's levers in) on the built run, decided without
        training (a fix for a fault's swapped softmax acts only where one was swapped in).

        >>> get_fix("amp_off").applies(TrainConfig()), get_fix("amp_off").applies(
        ...     TrainConfig(precision="bf16"))
        (False, True)
        """
        if self.change(config) is not None:
            return True
        if build is None:
            return False
        try:
            return bool(self.install(build(config.replace(out_dir=None, progress=False))))
        except NotApplicable:
            return False


MAX_BAD_IN_A_ROW = 100  # validate_data gives up (one clear line) after this many


def _skip_bad_batches(trainer: Trainer) -> None:
    """Check every batch before it is used and train on the next clean one instead."""
    source = trainer.batches

    def checked(index: int):
        for _ in range(MAX_BAD_IN_A_ROW):
            batch = source(index)
            problems = batch_problems(batch, label_range(trainer, batch))
            if not problems:
                return batch
            trainer.record.log_event("bad_batch", trainer.step, batch=index,
                                     problems=problems)
            trainer.skip_batches.add(index)
            trainer.data_position = index + 1
            index = trainer.next_batch_index()
        raise NanlabError(f"validate_data: {MAX_BAD_IN_A_ROW} batches in a row up to batch "
                          f"{index} fail the check (the last: {'; '.join(problems)}): the "
                          "data itself, or the label range read from the model, is wrong")
    trainer.batches = checked


def _skip_nonfinite(trainer: Trainer) -> None:
    def check(tr: Trainer, info) -> None:
        if not info.finite:
            info.skip, info.skip_reason = True, "non-finite loss or gradient"
    trainer.add_callback("on_after_backward", check)


def _divide_lr(by: float) -> Callable[[Trainer], list[str]]:
    def install(trainer: Trainer) -> list[str]:
        before = trainer.base_lr
        trainer.divide_lr(by)
        return [f"base LR {before:g} -> {trainer.base_lr:g}"]
    return install


def _raise_norm_eps(trainer: Trainer) -> list[str]:
    changes = []
    for name, m, attr in norm_modules(trainer.model):
        eps = getattr(m, attr)
        if eps < EPS_FLOOR:
            setattr(m, attr, EPS_FLOOR)
            changes.append(f"{name or type(m).__name__}.{attr} {eps:g} -> {EPS_FLOOR:g}")
    return changes


INIT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding, nn.RNNBase)


def reinit(model: nn.Module, scheme: str = "default") -> list[str]:
    """Re-initialise every Linear, Conv, Embedding and recurrent layer, by its type.

    ``scheme``: "default" is each layer's own ``reset_parameters`` (PyTorch's fan-in
    scaled init), "normal" GPT-2's normal(0, 0.02) with zero biases; a Hugging Face model
    (a ``transformers.PreTrainedModel``) uses its own ``_init_weights`` for "default".
    Any other model's ``_init_weights`` (the nanoGPT / timm idiom) is the user's own
    init, the one suspected of being bad, so it is not called. Norm layers are reset to
    weight 1, bias 0. Returns what was re-initialised, in words.

    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    >>> _ = nn.init.normal_(net[0].weight, std=100.0)
    >>> reinit(net), bool(net[0].weight.abs().max() < 1)
    (['2 Linear layers (default)'], True)
    """
    check_choice("scheme", scheme, ["default", "normal"])
    counts: dict[str, int] = {}
    own = getattr(model, "_init_weights", None) \
        if scheme == "default" and is_hf_model(model) else None
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, INIT_LAYERS):
                if callable(own):
                    own(m)
                elif scheme == "normal" and not isinstance(m, nn.RNNBase):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                    if getattr(m, "bias", None) is not None:
                        nn.init.zeros_(m.bias)
                else:
                    m.reset_parameters()
                counts[type(m).__name__] = counts.get(type(m).__name__, 0) + 1
            elif eps_field(m) is not None:
                if isinstance(getattr(m, "weight", None), torch.Tensor):
                    nn.init.ones_(m.weight)
                if isinstance(getattr(m, "bias", None), torch.Tensor):
                    nn.init.zeros_(m.bias)
    used = "Hugging Face's _init_weights" if callable(own) else scheme
    return [f"{n} {kind} layer{'s' if n > 1 else ''} ({used})" for kind, n in counts.items()]


def is_hf_model(model: nn.Module) -> bool:
    """A real ``transformers.PreTrainedModel``, checked without importing transformers
    (a model of it can only exist once it is imported).

    >>> class Mine(nn.Linear):
    ...     def _init_weights(self, module): ...
    >>> is_hf_model(Mine(2, 2))
    False
    """
    hf = sys.modules.get("transformers")
    base = getattr(hf, "PreTrainedModel", None) if hf is not None else None
    return isinstance(base, type) and isinstance(model, base)


def _reinit_foreign(trainer: Trainer) -> list[str]:
    """sane_init on a model nanlab did not make; on the toy (whose init is in its config)
    the GPT-2 recipe's zero biases, where a fault set them after the init."""
    if not isinstance(trainer.model, GPT):
        return reinit(trainer.model)
    biased = [m for m in trainer.model.modules()
              if isinstance(m, nn.Linear) and m.bias is not None and bool(m.bias.any())]
    for m in biased:
        nn.init.zeros_(m.bias)
    return [f"{len(biased)} Linear biases -> 0"] if biased else []


def _stable_softmax(trainer: Trainer) -> list[str]:
    """Torch's cross-entropy and a max-subtracting softmax in place of hand-written ones:
    every NaiveSoftmax module swapped back, the loss unwrapped."""
    from functools import partial

    from nanlab.faults.precision import NaiveSoftmax, naive_cross_entropy, swap_softmaxes
    from nanlab.toy.model import Softmax

    done = []
    n = swap_softmaxes(trainer.model, Softmax, (NaiveSoftmax,))
    if n:
        done.append(f"{n} hand-written softmax{'es' if n > 1 else ''} -> max subtracted")
    loss = trainer.loss_fn
    if isinstance(loss, partial) and loss.keywords.get("cross_entropy") is naive_cross_entropy:
        keywords = {k: v for k, v in loss.keywords.items() if k != "cross_entropy"}
        trainer.loss_fn = partial(loss.func, *loss.args, **keywords)
        done.append("hand-written cross-entropy -> F.cross_entropy")
    return done


def _log_cure(cure) -> Callable:
    """An on_step_end callback: a "cure" event on each step where ``cure`` acted."""
    seen = [cure.acted]

    def log(trainer: Trainer, info) -> None:
        if cure.acted > seen[0]:
            seen[0] = cure.acted
            trainer.record.log_event("cure", info.step, **cure.last)
    return log


def _hook_optimizer(name: str, make: Callable, needs_adam: bool) -> Callable:
    """Install an optimizer-side cure of :mod:`nanlab.optim.cures` on the trainer's optimizer
    (also one the caller made): it acts inside ``optimizer.step()``, so on every update
    and on no skipped one."""
    def install(trainer: Trainer) -> list[str]:
        reason = cures.needs_second_moment(trainer.optimizer) if needs_adam else None
        if reason:
            raise NotApplicable(f"{name} cannot act in this run: {reason}")
        cure = make().attach(trainer.optimizer)
        trainer.add_callback("on_step_end", _log_cure(cure))
        return [f"{type(cure).__name__} on {type(trainer.optimizer).__name__}.step"]
    return install


def _softcap(trainer: Trainer) -> list[str]:
    """Gemma 2's soft-caps where the model has the switch: nanlab's toy (its config did it
    already) or a Hugging Face config with the fields; any other model: NotApplicable."""
    model = trainer.model
    if not cures.softcap_switches(model):
        raise NotApplicable(
            f"softcap cannot act on {type(model).__name__}: it has no soft-capping switch (a "
            f"config with {' / '.join(cures.SOFTCAP_FIELDS)}, as Hugging Face's Gemma2Config "
            "has); add cap * tanh(logits / cap) to its forward")
    changes = cures.enable_softcapping(model)
    if not changes and getattr(model, "config", None) is not trainer.config.model:
        raise NotApplicable(f"softcap changes nothing in this run: {type(model).__name__} is "
                            f"soft-capped at {cures.ATTN_SOFTCAP:g} / {cures.FINAL_SOFTCAP:g} "
                            "or tighter already")
    return changes


REWARM_STEPS = 20


def _rewarm_after_restart(trainer: Trainer) -> list[str]:
    """In the ``REWARM_STEPS`` steps from a restart on, the LR is the scheduled one times
    (steps since the restart + 1) / REWARM_STEPS: a factor of the LR lever, so the
    schedule is left alone. Acts only on a run that restarts (``Trainer.restart_steps``)."""
    if not trainer.restart_steps:
        return []

    def ramp(tr: Trainer, info) -> None:
        since = None if tr.last_restart is None else info.step - tr.last_restart
        factor = (since + 1) / REWARM_STEPS if since is not None and 0 <= since < REWARM_STEPS \
            else 1.0
        set_lr_factor(tr.optimizer, "rewarm_lr", factor)
    trainer.add_callback("on_step_start", ramp)
    return [f"LR warmed up over {REWARM_STEPS} steps after the restart before step "
            f"{min(trainer.restart_steps)}"]


def _only(condition: bool, changes: dict) -> dict | None:
    return changes if condition else None


FIXES: dict[str, Fix] = {f.name: f for f in [
    Fix("validate_data", "check every batch (finite inputs, legal labels, something to "
        "average) and skip the bad ones", lambda c: {}, _skip_bad_batches, sop_step="data"),
    Fix("amp_off", "train in fp32", lambda c: _only(c.precision != "fp32",
                                                    {"precision": "fp32", "grad_scaler": None}),
        sop_step="amp"),
    Fix("bf16", "bf16 autocast: fp32's range, no scaler needed",
        lambda c: _only(c.precision != "bf16", {"precision": "bf16", "grad_scaler": None}),
        sop_step="amp"),
    Fix("grad_scaler", "fp16 autocast with a GradScaler (fp32 weights, scaled loss)",
        lambda c: _only(c.precision in ("fp16", "fp16-pure") and not (
            c.precision == "fp16" and c.grad_scaler is not False),
            {"precision": "fp16", "grad_scaler": True}), sop_step="amp"),
    Fix("lr_div10", "divide the learning rate by 10 (the optimizer's own param groups)",
        lambda c: {}, _divide_lr(10), sop_step="lr"),
    Fix("lr_div100", "divide the learning rate by 100 (the optimizer's own param groups)",
        lambda c: {}, _divide_lr(100), sop_step="lr"),
    Fix("warmup_cosine", "20 warmup steps, then cosine decay",
        lambda c: _only(c.warmup_steps < 20 or c.schedule != "cosine",
                        {"warmup_steps": 20, "schedule": "cosine"}), sop_step="lr"),
    Fix("grad_clip", "clip the global grad norm to 1.0",
        lambda c: _only(c.grad_clip == 0 or c.grad_clip > 1.0, {"grad_clip": 1.0}),
        sop_step="grad_norms"),
    Fix("sane_init", "the GPT-2 recipe: normal(0, 0.02) init, zero biases, pre-LN blocks "
        "with residuals",
        lambda c: _only(
            (c.model.init, c.model.init_std, c.model.use_norms, c.model.residual)
            != ("normal", 0.02, True, True),
            {"model": {"init": "normal", "init_std": 0.02, "use_norms": True,
                       "residual": True}}),
        _reinit_foreign, sop_step="init_eps"),
    Fix("modern_block", "the pre-LN block: LayerNorm, residual connections, GELU",
        lambda c: _only(
            (c.model.use_norms, c.model.residual, c.model.activation) != (True, True, "gelu"),
            {"model": {"use_norms": True, "residual": True, "activation": "gelu"}}),
        sop_step="init_eps"),
    Fix("norm_eps", "every norm's eps at least 1e-5 (Adam's eps is not touched: see "
        "grad_scaler)",
        lambda c: _only(c.model.norm_eps < EPS_FLOOR, {"model": {"norm_eps": EPS_FLOOR}}),
        _raise_norm_eps, sop_step="init_eps"),
    Fix("stable_softmax", "subtract the row max before exp (attention and loss)",
        lambda c: None, _stable_softmax, sop_step="amp"),
    Fix("qk_norm", "LayerNorm on queries and keys",
        lambda c: _only(not c.model.qk_norm, {"model": {"qk_norm": True}}), sop_step="amp"),
    Fix("z_loss", "add 1e-4 * log(Z)^2 to the loss",
        lambda c: _only(c.z_loss == 0, {"z_loss": 1e-4}), sop_step="amp"),
    Fix("resume_full_state", "on a resume, load the optimizer (Adam's m, v and step count) "
        "and the LR scheduler with the weights", lambda c: _only(bool(c.resume_skips),
                                                             {"resume_skips": ()}),
        sop_step="lr"),
    Fix("rewarm_lr", "warm the LR up again over 20 steps after a restart (when the old "
        "optimizer state cannot be loaded)", lambda c: None, _rewarm_after_restart,
        sop_step="lr"),
    Fix("beta2_095", "Adam's b2 = 0.95 (the LLM recipe): the second moment follows a "
        "gradient that returns within about 20 steps",
        lambda c: _only(c.optimizer == "adamw" and c.beta2 > 0.95, {"beta2": 0.95}),
        sop_step="grad_norms"),
    Fix("skip_nonfinite", "skip the update of any step whose loss or gradient is not "
        "finite (the guard's skip mode)", lambda c: {}, _skip_nonfinite),
    # The adaptive cures (nanlab.optim.cures, each with its source): they act inside the step.
    Fix("zclip", "ZClip: clip the grad norm when its z-score against an EMA of its mean "
        "and variance passes 2.5 (alpha 0.97; Kumar et al. 2025)", lambda c: {},
        _hook_optimizer("zclip", cures.ZClip, needs_adam=False), sop_step="grad_norms"),
    Fix("spam_clip", "SPAM: clip each gradient entry with g^2 > 5000 * Adam's v to "
        "sqrt(5000 * v) (Huang et al. 2025; no momentum reset)",
        lambda c: _only(c.optimizer == "adamw", {}),
        _hook_optimizer("spam_clip", cures.SpikeClipping, needs_adam=True),
        sop_step="grad_norms"),
    Fix("update_clip", "StableAdamW's update clipping: each tensor's step / max(1, "
        "RMS(g^2 / v)) (Wortsman et al. 2023)", lambda c: _only(c.optimizer == "adamw", {}),
        _hook_optimizer("update_clip", cures.UpdateClipping, needs_adam=True), sop_step="lr"),
    Fix("softcap", "Gemma 2's logit soft-capping, cap * tanh(x / cap): 50 on attention "
        "scores, 30 on the final logits",
        lambda c: _only((c.model.attn_logit_softcapping or math.inf) > cures.ATTN_SOFTCAP or
                        (c.model.final_logit_softcapping or math.inf) > cures.FINAL_SOFTCAP,
                        {"model": {"attn_logit_softcapping": cures.ATTN_SOFTCAP,
                                   "final_logit_softcapping": cures.FINAL_SOFTCAP}}),
        _softcap, sop_step="amp"),
]}
ADAPTIVE_CURES = ("zclip", "spam_clip", "update_clip", "softcap")  # issue 17's four


def get_fix(name: str) -> Fix:
    """The fix called ``name`` (one of ``FIXES``); a clear error names the choices.

    >>> get_fix("grad_clip").name
    'grad_clip'
    >>> sorted(FIXES)[:3]
    ['amp_off', 'beta2_095', 'bf16']
    """
    check_choice("fix", name, sorted(FIXES))
    return FIXES[name]


def build_with_fixes(build: Callable[[TrainConfig], Trainer], config: TrainConfig,
                     names) -> Trainer:
    """``build(config)`` with fixes applied: their config changes first, then what they
    install in or change on the built trainer (its model, its optimizer).

    A fix the config says nothing about may still act on the model (the eps of a norm
    nanlab did not make); one that changes neither raises :class:`NotApplicable`.

    >>> build_with_fixes(Trainer, TrainConfig(progress=False), ["amp_off"])
    Traceback (most recent call last):
    ...
    nanlab.faults.fixes.NotApplicable: amp_off changes nothing in this run (train in fp32)
    """
    fixes = [get_fix(n) for n in ([names] if isinstance(names, str) else names)]
    untouched = []
    for fix in fixes:
        changed = fix.configure(config)
        if changed is None:
            untouched.append(fix)
        else:
            config = changed
    trainer = build(config)
    if not isinstance(trainer, Trainer):
        raise NanlabError(f"build(config) must return a nanlab Trainer; got "
                          f"{type(trainer).__name__}")
    for fix in fixes:
        done = fix.install(trainer)
        if done:
            trainer.record.log_event("fix", trainer.step, fix=fix.name, changes=done)
        if fix in untouched and not done:
            raise NotApplicable(f"{fix.name} changes nothing in this run ({fix.summary})")
    return trainer


__all__ = ["ADAPTIVE_CURES", "EPS_FLOOR", "FIXES", "Fix", "LabelRange", "NotApplicable",
           "batch_problems", "build_with_fixes", "get_fix", "label_range", "reinit"]
