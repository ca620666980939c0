"""Fault injectors: each documented cause of a loss spike or NaN, happening for real.

A fault never writes NaN or inf into a loss, activation, gradient or weight. It sets
up the conditions a real run would have (dirty input data, a learning rate that is
too high, fp16 arithmetic, a large init, a norm without eps) and lets the arithmetic
do the rest: the overflow, the 0 / 0 or the divergence happens inside the forward
pass, the backward pass or the optimizer step, as it does in a real run.

Each fault is a small declarative object: its parameters with defaults and allowed
ranges, a one-line summary, the mechanism, the run conditions it needs, the SOP step
that reveals it, the cure and the failure signature. They live in a registry::

    >>> from nanlab import faults
    >>> sorted(faults.FAULTS)[:3]
    ['accum_masked_micro_batch', 'accum_mean_of_means', 'adam_eps_fp16']
    >>> run = faults.run_fault("nan_input", steps=80)   # the built-in toy run  # doctest: +SKIP
    >>> run.record.first_nonfinite_step  # doctest: +SKIP
    40

On a model, optimizer and batch source that nanlab did not create, use
:func:`inject` and call ``injection.batches(step)`` once per step in your own loop::

    injection = faults.inject("high_lr", model=model, optimizer=opt, batches=get_batch)
    for step in range(n):
        batch = injection.batches(step)
        ...  # your forward, backward and optimizer step, unchanged
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from nanlab.data import IGNORE_INDEX
from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.judge import FAILURES

if TYPE_CHECKING:
    from nanlab.faults.inject import Injection

SOP_STEPS = {
    "data": "1. check the batch (non-finite inputs, illegal labels, masked targets, zero std)",
    "amp": "2. turn mixed precision off (and try bf16)",
    "lr": "3. divide the learning rate by 10",
    "grad_norms": "4. read the per-layer grad-norm history",
    "init_eps": "5. check init scale and norm eps",
}
SIGNATURES = FAILURES  # a fault's signature is what nanlab.judge says of its run


@dataclass(frozen=True)
class Param:
    """One fault parameter: its default and what is allowed.

    >>> at_step = Param(40, 0, 100_000, help="the step at which the bad batch arrives")
    >>> at_step.check("nan_input", "at_step", 12)
    12
    >>> at_step.check("nan_input", "at_step", -1)
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: nan_input.at_step=-1 is out of range; allowed: an integer ...
    """

    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    help: str = ""

    def check(self, fault: str, name: str, value: Any) -> Any:
        label = f"{fault}.{name}"
        if self.choices is not None:
            check_choice(label, value, self.choices)
        else:
            check_range(label, value, self.low, self.high, integer=isinstance(self.default, int))
        return value


# ---------------------------------------------------------------------------------------
# The faults
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    """A documented cause of a loss spike or NaN, as data plus two small functions.

    ``conditions(p)`` returns the TrainConfig changes the built-in run needs (e.g. fp16,
    a deep stack); ``install(injection, p)`` sets up the fault itself through the
    injection's levers; ``foreign(injection, p)`` does on someone else's model what the
    conditions do on the toy one (or is None when that makes no sense).

    >>> fault = get_fault("tiny_eps")
    >>> fault.family, fault.reveals, fault.cure, fault.signature
    ('tiny_eps', 'init_eps', 'norm_eps', 'nonfinite')
    >>> fault.resolve(eps=1e-12)
    {'eps': 1e-12, 'pad_prob': 0.25}
    >>> print(fault.describe())  # doctest: +ELLIPSIS
    tiny_eps (tiny_eps): LayerNorm eps = 0 meeting a zero-variance row (a padding token)
      mechanism: ...
    """

    name: str
    family: str
    summary: str
    mechanism: str
    needs: str
    reveals: str  # the SOP step that reveals it (a key of SOP_STEPS)
    cure: str | None  # the fix that cures it (nanlab.faults.fixes); None: it recovers by itself
    signature: str  # what a run with this fault shows (one of SIGNATURES)
    params: dict[str, Param] = field(default_factory=dict)
    conditions: Callable[[dict], dict] = lambda p: {}
    install: Callable[[Injection, dict], None] = lambda inj, p: None
    foreign: Callable[[Injection, dict], None] | None = None

    def resolve(self, **params) -> dict:
        """Defaults filled in and every value checked; unknown names are an error."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            allowed = ", ".join(sorted(self.params)) or "none"
            raise NanlabError(f"fault {self.name!r} has no parameter {unknown[0]!r}; "
                              f"its parameters: {allowed}")
        return {k: spec.check(self.name, k, params.get(k, spec.default))
                for k, spec in self.params.items()}

    def describe(self) -> str:
        params = ", ".join(f"{k}={v.default!r}" for k, v in self.params.items()) or "none"
        return (f"{self.name} ({self.family}): {self.summary}\n"
                f"  mechanism: {self.mechanism}\n  needs: {self.needs}\n"
                f"  revealed by: {SOP_STEPS[self.reveals]}\n  cure: {self.cure}\n"
                f"  signature: {self.signature}\n  parameters: {params}")


FAULTS: dict[str, Fault] = {}


def register(fault: Fault) -> Fault:
    """Add a fault to ``FAULTS`` (after checking its signature and SOP step); returns it.

    >>> mine = register(Fault(
    ...     "my_inf_input", "dirty_data", "every reading is inf at one step", "inf - inf = NaN",
    ...     "a float input", reveals="data", cure="validate_data", signature="nonfinite",
    ...     params={"at_step": AT_STEP},
    ...     install=lambda inj, p: inj.edit_inputs(p["at_step"], lambda x: x + math.inf)))
    >>> get_fault("my_inf_input") is mine
    True
    >>> del FAULTS["my_inf_input"]
    """
    check_choice("signature", fault.signature, SIGNATURES)
    check_choice("reveals", fault.reveals, SOP_STEPS)
    FAULTS[fault.name] = fault
    return fault


def get_fault(name: str) -> Fault:
    """The registered fault called ``name``; an unknown name gets the list of choices.

    >>> get_fault("nan_input").cure
    'validate_data'
    >>> get_fault("nan")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: fault='nan' is not allowed; choose one of 'accum_mas...
    """
    check_choice("fault", name, sorted(FAULTS))
    return FAULTS[name]


def cure_for(family: str, detail: str | None = None) -> str | None:
    """The fix that cures a fault family, read from what the registered faults declare.

    ``detail`` names one fault of the family (e.g. "no_warmup" in "learning_rate"):
    its own cure. Otherwise the cure most faults of the family declare (ties: the one
    registered first). None: the family's faults recover by themselves. So a newly
    registered fault's cure is what ``diagnose`` proves, without editing diagnose.

    >>> cure_for("dirty_data"), cure_for("learning_rate"), cure_for("learning_rate", "no_warmup")
    ('validate_data', 'lr_div10', 'warmup_cosine')
    >>> print(cure_for("learning_rate", "lr_jump"))
    None
    """
    members = [f for f in FAULTS.values() if f.family == family]
    if not members:
        check_choice("family", family, sorted({f.family for f in FAULTS.values()}))
    named = [f for f in members if f.name == detail]
    if named:
        return named[0].cure
    cures = [f.cure for f in members if f.cure is not None]
    return max(cures, key=cures.count) if cures else None


AT_STEP = Param(40, 0, 100_000, help="the step (batch index) at which the bad batch arrives")


def _poison_inputs(kind: str):
    value = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[kind]

    def fn(x: torch.Tensor) -> torch.Tensor:
        # One missing / overflowed reading in one example, as a CSV with an empty cell
        # or a sensor that reported inf would deliver it.
        x.view(-1)[0] = value
        return x
    return fn


register(Fault(
    name="nan_input", family="dirty_data",
    summary="one NaN (or inf) reading in a float input of one batch",
    mechanism="the bad value passes the input projection, attention mixes it into every "
              "later position, the loss is NaN; the backward pass makes the gradients "
              "NaN and the optimizer writes NaN into every weight it touches",
    needs="a float input path (here the standardised numeric channel); no input check",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP, "value": Param("nan", choices=("nan", "inf", "-inf"))},
    install=lambda inj, p: inj.edit_inputs(p["at_step"], _poison_inputs(p["value"])),
    foreign=lambda inj, p: None,
))


def _illegal(label: int):
    def fn(y: torch.Tensor) -> torch.Tensor:
        y.view(-1)[-1] = label  # one corrupt label in the batch
        return y
    return fn


register(Fault(
    name="illegal_label", family="dirty_data",
    summary="a label outside [0, num_classes) in one batch",
    mechanism="cross-entropy indexes the log-probabilities by the label; PyTorch checks "
              "the range and stops with 'Target ... is out of bounds' on the CPU (a "
              "device-side assert on CUDA, which kills the process); -100 is the one "
              "negative value it accepts, as 'ignore this position'",
    needs="integer class labels fed to F.cross_entropy",
    reveals="data", cure="validate_data", signature="error",
    params={"at_step": AT_STEP, "label": Param(-1, -10**9, 10**9,
                                                help="the bad label (not -100)")},
    install=lambda inj, p: inj.edit_labels(p["at_step"], _illegal(p["label"])),
    foreign=lambda inj, p: None,
))


def _mask_all(y: torch.Tensor) -> torch.Tensor:
    return torch.full_like(y, IGNORE_INDEX)  # every position is padding / prompt


register(Fault(
    name="all_masked", family="dirty_data",
    summary="a batch in which every target is masked (ignore_index)",
    mechanism="the mean over unmasked targets divides a sum of nothing by a count of "
              "zero: 0 / 0 = NaN in the loss, and NaN gradients from it",
    needs="a masked mean loss (cross_entropy with ignore_index, or sum / mask.sum())",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP},
    install=lambda inj, p: inj.edit_labels(p["at_step"], _mask_all),
    foreign=lambda inj, p: None,
))


def _stuck_sensor(inj: Injection, p: dict) -> None:
    source = inj.source
    hooks = getattr(source, "raw_hooks", None)
    if hooks is None:
        raise NanlabError("zero_std needs a batch source that standardises inside, with "
                          "raw_hooks (like nanlab.data.CountingTask)")

    def hook(step, raw):
        if step == p["at_step"]:
            raw.raw_features = torch.full_like(raw.raw_features, p["value"])  # stuck reading
        return raw
    hooks.append(hook)


register(Fault(
    name="zero_std", family="dirty_data",
    summary="a batch whose numeric column is constant, standardised by its std of 0",
    mechanism="(x - mean) / std with every x equal is 0 / 0 = NaN for the whole column",
    needs="per-batch standardisation without a floor on the std",
    reveals="data", cure="validate_data", signature="nonfinite",
    params={"at_step": AT_STEP, "value": Param(7.0, -1e6, 1e6, help="the stuck reading")},
    install=_stuck_sensor,
))

register(Fault(
    name="high_lr", family="learning_rate",
    summary="AdamW at a learning rate 40x too high, in fp16 mixed precision",
    mechanism="the oversized updates grow the attention weights until q.k passes fp16's "
              "65504: the scores overflow to inf and the softmax makes NaN. With AMP off "
              "the same run stays finite but diverges: fp16 only made the LR's damage loud",
    needs="fp16 autocast (with its GradScaler) and no clipping; in fp32 see high_lr_adam",
    reveals="lr", cure="lr_div10", signature="nonfinite",
    params={"lr": Param(0.2, 1e-6, 1e4)},
    conditions=lambda p: {"lr": p["lr"], "precision": "fp16"},
    foreign=lambda inj, p: inj.set_lr(p["lr"]),
))

register(Fault(
    name="high_lr_adam", family="learning_rate",
    summary="AdamW at a learning rate 20x too high: diverges, yet stays finite in fp32",
    mechanism="Adam's update is about lr * sign(grad), so the weights jump by about the LR "
              "every step; LayerNorm keeps the activations in range, so the loss climbs "
              "and stays high without ever overflowing",
    needs="AdamW in fp32 (under fp16 the same run turns into NaN: see the matrix)",
    reveals="lr", cure="lr_div10", signature="diverge",
    params={"lr": Param(0.1, 1e-6, 1e4)},
    conditions=lambda p: {"lr": p["lr"]},
    foreign=lambda inj, p: inj.set_lr(p["lr"]),
))

register(Fault(
    name="lr_jump", family="learning_rate",
    summary="the LR jumps 10x for one step mid-run (a scheduler glitch), then returns",
    mechanism="a burst of oversized updates knocks the model off its solution: the loss "
              "spikes; once the LR is back, the same optimizer brings it down again",
    needs="a trained model hit by a short LR burst; no clipping",
    reveals="lr", cure=None, signature="spike",
    params={"at_step": Param(100, 0, 100_000), "factor": Param(10.0, 1.0, 1e6),
            "length": Param(1, 1, 100_000)},
    install=lambda inj, p: inj.set_lr_factor(p["factor"], p["at_step"],
                                             p["at_step"] + p["length"]),
    foreign=lambda inj, p: None,
))

register(Fault(
    name="no_warmup", family="learning_rate",
    summary="a high LR that needs warmup, applied at full size from step 0",
    mechanism="the first Adam steps are full-size while the second-moment estimate is "
              "still noise: the fresh weights are thrown far off and the loss spikes",
    needs="AdamW at a LR that trains well with warmup (here 0.02) but no warmup",
    reveals="lr", cure="warmup_cosine", signature="diverge",
    params={"lr": Param(0.02, 1e-6, 1e4)},
    conditions=lambda p: {"lr": p["lr"], "warmup_steps": 0, "beta2": 0.99},
))

register(Fault(
    name="fp16_overflow", family="fp16_overflow",
    summary="a hand-written softmax cross-entropy on the fp16 logits, under fp16 autocast",
    mechanism="the loss is computed by hand in an autocast-disabled region on the fp16 logits "
              "of the lm_head matmul, without a cast to fp32, so exp and sum run in fp16 on "
              "any device, and without subtracting the max; once the model grows confident "
              "and the softmax denominator sum(exp(logits)) passes 65504 (log-sum-exp past "
              "11.09), it is inf: the loss is -log(x / inf) = inf and the backward pass makes "
              "NaN. In fp32 and bf16 (max 3.4e38) exp only overflows past 88.7",
    needs="fp16 autocast and a loss written by hand and kept out of autocast (as custom "
          "label-smoothing or distillation losses often are) without logits.float(); it "
          "strikes late, when the model has learned. Inside autocast the same loss would "
          "fire on the CPU only: CUDA autocast runs exp and sum in fp32, CPU autocast in fp16",
    reveals="amp", cure="bf16", signature="nonfinite",
    conditions=lambda p: {"precision": "fp16", "loss_impl": "naive"},
))

register(Fault(
    name="bad_init", family="bad_init",
    summary="init std 1.0 (50x GPT-2's 0.02) in a deep stack without LayerNorm",
    mechanism="each layer multiplies the activations by about std * sqrt(fan_in); by the "
              "last blocks an attention score q @ k overflows fp32 to inf, and the softmax's "
              "inf - inf makes the loss NaN at step 0, in the first forward pass",
    needs="no normalisation between layers (a plain deep stack); fp32 is enough",
    reveals="init_eps", cure="sane_init", signature="nonfinite",
    params={"init_std": Param(1.0, 0.0, 100.0), "n_layer": Param(6, 1, 64)},
    conditions=lambda p: {"model": {"init_std": p["init_std"], "n_layer": p["n_layer"],
                                    "use_norms": False}},
    foreign=lambda inj, p: inj.scale_weights(p["init_std"] / 0.02),
))

register(Fault(
    name="deep_explosion", family="deep_explosion",
    summary="a deep stack without LayerNorm whose gradients explode during training",
    mechanism="without norms every block adds to a residual stream that grows with each "
              "update; the per-layer grad norms climb by orders of magnitude over tens of "
              "steps until the arithmetic overflows. Adam's b2 = 0.99 makes its second "
              "moment slow to follow the growing gradients, so each update stays large",
    needs="a deep stack (6 blocks) without LayerNorm, AdamW at a constant 0.015 with "
          "b2 = 0.99, no clipping. Under a cosine decay at 0.02 and b2 = 0.95 the same "
          "stack explodes to a loss of about 1e3 but stays finite on some CPUs: a run "
          "on the edge depends on the summation order",
    reveals="grad_norms", cure="modern_block", signature="nonfinite",
    params={"n_layer": Param(6, 2, 64), "lr": Param(0.015, 1e-6, 10.0),
            "beta2": Param(0.99, 0.0, 0.9999, help="Adam's second-moment decay")},
    conditions=lambda p: {"lr": p["lr"], "beta2": p["beta2"], "schedule": "constant",
                          "model": {"n_layer": p["n_layer"], "use_norms": False}},
))

register(Fault(
    name="tiny_eps", family="tiny_eps",
    summary="LayerNorm eps = 0 meeting a zero-variance row (a padding token)",
    mechanism="a padding token's embedding row is all zeros; the embedding LayerNorm "
              "computes (x - mean) / sqrt(var + eps) = 0 / sqrt(0 + 0) = 0 / 0 = NaN; the "
              "NaN reaches real positions through attention, because 0 * NaN is NaN",
    needs="a norm that sees the raw embedding (BLOOM's embedding LayerNorm, or a model "
          "without absolute positions) and padded batches; fp32 is enough",
    reveals="init_eps", cure="norm_eps", signature="nonfinite",
    params={"eps": Param(0.0, 0.0, 1.0), "pad_prob": Param(0.25, 0.0, 1.0)},
    conditions=lambda p: {"pad_prob": p["pad_prob"],
                          "model": {"norm_eps": p["eps"], "embed_norm": True,
                                    "vocab_size": 33, "pad_id": 32}},
    foreign=lambda inj, p: inj.set_norm_eps(p["eps"]),
))

register(Fault(
    name="softmax_overflow", family="softmax_overflow",
    summary="a hand-written softmax, exp(x) / sum(exp(x)), on fp16 scores, under fp16 autocast",
    mechanism="the softmax runs in an autocast-disabled region on the fp16 scores of the "
              "q @ k matmul, without a cast to fp32, so exp runs in fp16 on any device; it "
              "overflows once an attention score passes ~11.09 (fp32: ~88.7) and inf / inf = "
              "NaN. Subtracting the row max first makes every exp <= 1",
    needs="a naive softmax kept out of autocast, fp16 autocast, and attention that sharpens "
          "as the model learns (LR 0.01). Inside autocast the same softmax would fire on the "
          "CPU only: CUDA autocast runs exp and sum in fp32, CPU autocast in fp16",
    reveals="amp", cure="stable_softmax", signature="nonfinite",
    params={"lr": Param(0.01, 1e-6, 10.0)},
    conditions=lambda p: {"precision": "fp16", "lr": p["lr"], "model": {"softmax": "naive"}},
))

register(Fault(
    name="position_overflow", family="fp16_overflow",
    summary="absolute positions past 65504 fed to a sinusoidal encoding in pure fp16",
    mechanism="the position id is cast to fp16 before the multiply; 70000 does not fit "
              "(max 65504) and becomes inf, and sin(inf) is NaN",
    needs="a sinusoidal encoding computed in the model's dtype, a pure-fp16 model, and "
          "a stream that keeps counting positions across windows; the bf16 cure works "
          "because bf16 autocast computes the encoding in fp32 (amp_off would too): in a "
          "pure-bf16 model 70000..70031 all round to 70144, no NaN but no position either",
    reveals="amp", cure="bf16", signature="nonfinite",
    params={"offset": Param(70_000, 0, 10**9)},
    conditions=lambda p: {"precision": "fp16-pure",
                          "model": {"pos_encoding": "sinusoidal", "pos_offset": p["offset"]}},
))

register(Fault(
    name="adam_eps_fp16", family="adam_eps_fp16",
    summary="AdamW with eps = 1e-8 and its state kept in pure fp16",
    mechanism="1e-8 is below fp16's smallest subnormal (6e-8) and rounds to 0; a tiny "
              "gradient's square underflows too, so the update m / (sqrt(v) + eps) is "
              "x / 0 = inf or 0 / 0 = NaN",
    needs="model and optimizer state in fp16 (model.half()), no fp32 master weights",
    reveals="amp", cure="grad_scaler", signature="nonfinite",
    params={"eps": Param(1e-8, 0.0, 1.0)},
    conditions=lambda p: {"precision": "fp16-pure", "adam_eps": p["eps"]},
))

RESTART_AT = Param(100, 1, 100_000, help="the step before which the job is restarted")

register(Fault(
    name="resume_fresh_optimizer", family="optimizer_state",
    summary="a job restarted mid-run resumes the weights but builds a fresh AdamW",
    mechanism="the new optimizer has m = v = 0 and step 0; Adam's bias correction makes "
              "its first update m_hat / sqrt(v_hat) = g / |g|, so every weight moves by the "
              "full LR in the direction of its gradient's sign, whatever the gradient's "
              "size, and v_hat stays a noisy estimate of a few squared gradients for the "
              "next steps: the trained weights are knocked off their solution and the loss "
              "spikes (a NaN at a high enough LR), then climbs back down",
    needs="a restart (preemption) whose resume code loads model.state_dict() but not "
          "optimizer.state_dict(), here before step 100 at the cosine LR of that step "
          "(3.1e-3); clipping cannot help: Adam's first update does not depend on the "
          "gradient's size",
    reveals="grad_norms", cure="resume_full_state", signature="spike",
    params={"at_step": RESTART_AT},
    conditions=lambda p: {"restart_at": p["at_step"], "resume_skips": ("optimizer",)},
))

register(Fault(
    name="resume_reset_schedule", family="optimizer_state",
    summary="a job restarted mid-run resumes weights and optimizer, but the LR schedule "
            "starts again at step 0",
    mechanism="the scheduler's state is not loaded, so the new LambdaLR counts from 0: "
              "warmup runs again and the LR climbs back to its peak (5e-3) on a model the "
              "cosine decay had brought to 6e-4; the full-size updates throw the nearly "
              "converged weights off and the loss spikes about 20 steps after the restart, "
              "when the LR reaches the peak",
    needs="a restart whose resume code loads the model and the optimizer but not "
          "scheduler.state_dict(), late enough that the schedule had decayed (step 130 "
          "of 200)",
    reveals="lr", cure="resume_full_state", signature="spike",
    params={"at_step": Param(130, 1, 100_000,
                             help="the step before which the job is restarted")},
    conditions=lambda p: {"restart_at": p["at_step"], "resume_skips": ("scheduler",)},
))

register(Fault(
    name="adam_unfreeze_spike", family="optimizer_state",
    summary="a layer frozen by zeroed gradients for 100 steps, unfrozen, with Adam's b2 = 0.999",
    mechanism="while the gradient is exactly 0 the optimizer still steps the layer: its "
              "step count reaches 100 with m = v = 0. Bias correction divides v by "
              "1 - b2^t, which at b2 = 0.999 and t = 100 is only 0.1, so after unfreezing "
              "v_hat is about g^2 / 100 against m_hat's g / 10: the first update is about "
              "lr * sign(g) on every weight of the layer (measured: median |dw| = 0.98 lr, "
              "0.45 lr at b2 = 0.95), and the next ones stay large while v_hat catches up; "
              "the layer wakes up with full-size steps and the loss spikes",
    needs="a freeze done by a gradient mask (the parameters stay in the optimizer), here "
          "the first MLP matrix of every block until step 100, and AdamW with b2 = 0.999 "
          "(PyTorch's default) at the toy's LR 5e-3",
    reveals="grad_norms", cure="beta2_095", signature="spike",
    params={"at_step": Param(100, 1, 100_000, help="the step at which the layer is "
                                                    "unfrozen"),
            "beta2": Param(0.999, 0.0, 0.99999, help="Adam's second-moment decay"),
            "layer": Param("mlp.c_fc", choices=("mlp.c_fc", "mlp", "attn"),
                           help="the frozen parameters (a part of their names)")},
    conditions=lambda p: {"freeze": p["layer"], "freeze_until": p["at_step"],
                          "beta2": p["beta2"]},
))

register(Fault(
    name="dead_relu", family="myth",
    summary="myth check: ReLU units that are all dead from the start",
    mechanism="a large negative bias puts every pre-activation below 0; ReLU passes no "
              "signal and no gradient, so those layers stop learning. Nothing overflows "
              "and nothing divides by zero: the loss stalls, it does not become NaN",
    needs="ReLU with a bias of -10 and a plain stack (no residual), so nothing bypasses it",
    reveals="grad_norms", cure="sane_init", signature="stall",
    params={"bias": Param(-10.0, -1e3, 0.0)},
    conditions=lambda p: {"model": {"activation": "relu", "mlp_bias_init": p["bias"],
                                    "residual": False}},
))

register(Fault(
    name="sigmoid_chain", family="myth",
    summary="myth check: a deep chain of sigmoids without residual connections",
    mechanism="sigmoid's slope is at most 1/4, so the gradient shrinks at every layer and "
              "vanishes; the early layers barely move. It stalls; it does not overflow",
    needs="sigmoid activations, a deep plain stack (no residual, no LayerNorm), Xavier init",
    reveals="grad_norms", cure="modern_block", signature="stall",
    params={"n_layer": Param(8, 2, 64)},
    conditions=lambda p: {"model": {"activation": "sigmoid", "n_layer": p["n_layer"],
                                    "residual": False, "use_norms": False,
                                    "init": "xavier"}},
))


