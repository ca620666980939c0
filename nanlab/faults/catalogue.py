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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nanlab.analysis.judge import FAILURES
from nanlab.errors import NanlabError, check_choice, check_range

if TYPE_CHECKING:
    from nanlab.faults.levers import Injection

SOP_STEPS = {
    "data": "1. check the batch (non-finite inputs, illegal labels, masked targets, zero std)",
    "amp": "2. turn mixed precision off (and try bf16)",
    "lr": "3. divide the learning rate by 10",
    "grad_norms": "4. read the per-layer grad-norm history",
    "init_eps": "5. check init scale and norm eps",
}
SIGNATURES = FAILURES  # a fault's signature is what nanlab.analysis.judge says of its run


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

    ``conditions(p)`` returns the TrainConfig changes the built-in run needs: real
    hyperparameters only (fp16, an LR, a deep stack), never a switch that exists for a
    fault. ``on_toy(injection, p)`` is the fault's own act on the built-in run, through
    a lever (a swapped module, a hook, a loss wrapper, a micro-batch loop with a bug;
    ``injection.trainer`` is the built-in trainer), so the config a learner reads does
    not name the cause and the manifest's "fault" replays it. ``install(injection, p)``
    sets up the fault through the injection's levers on any run; ``foreign(injection,
    p)`` does on someone else's model what the conditions and ``on_toy`` do on the toy
    one, or is None when that makes no sense, and ``refusal`` then says why in one line.
    ``check(injection, p)`` runs first in :func:`inject`, before any change: it refuses,
    in one line, a model or batch that lacks what the fault needs, so an instructor
    learns it before training, not at the fault's step. The built-in run calls neither
    ``check`` nor ``foreign``; :func:`inject` never calls ``on_toy``.

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
    on_toy: Callable[[Injection, dict], None] = lambda inj, p: None
    install: Callable[[Injection, dict], None] = lambda inj, p: None
    foreign: Callable[[Injection, dict], None] | None = None
    refusal: str = ""  # why ``foreign`` is None: what the user must build instead
    check: Callable[[Injection, dict], None] = lambda inj, p: None

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

    >>> import math
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


def needs_batch(want_float: bool):
    """A ``check`` for a data fault: the batch of its step holds the tensor it edits (a
    float input for a NaN, integer labels for a label fault); read once, at inject time.

    Example::

        register(Fault(..., params={"at_step": AT_STEP}, check=needs_batch(want_float=True)))
    """
    return lambda inj, p: inj.check_batch(p["at_step"], want_float)
