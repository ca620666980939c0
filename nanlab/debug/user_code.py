"""The verdict ``user_code``: the first NaN / inf is made in the user's own code.

When :func:`nanlab.debug.locate.locate` finds that the first non-finite value of the bad
step was made by a division, a log or a root (an op with a singularity: x / 0, log 0,
sqrt of a negative) inside a module of the user's model or in their loss, from finite
inputs, with modest gradient norms before it, then no learning rate, precision or init
made it: the data was legal and the code has no floor. The cure is a clamp there
(``degree.clamp(min=1)``, a variance floor, squeezing pixels before a logit); no fix in
the catalogue is proven for it, so none is named. An exp that overflows in fp32 counts
too (a clamp before exp), but not under fp16 / bf16, where the precision step owns it.
"""

from __future__ import annotations

import math

import numpy as np

from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.runs.record import RunRecord

SINGULAR_OPS = {  # aten op -> what to add there
    "div": "a floor on the divisor (x / d.clamp(min=eps))",
    "reciprocal": "a floor on the divisor (x / d.clamp(min=eps))",
    "log": "a clamp before the log (x.clamp(min=eps).log())",
    "log2": "a clamp before the log (x.clamp(min=eps).log())",
    "log10": "a clamp before the log (x.clamp(min=eps).log())",
    "log1p": "a clamp before the log (x.clamp(min=eps - 1).log1p())",
    "sqrt": "a floor under the root (x.clamp(min=eps).sqrt())",
    "rsqrt": "a floor under the root (x.clamp(min=eps).rsqrt())",
    "pow": "a floor on the base (x.clamp(min=eps) ** p)",
    "xlogy": "a clamp before the log (x.clamp(min=eps).log())",
}
OVERFLOW_OPS = {"exp": "a clamp before exp (x.clamp(max=80).exp())",
                "exp2": "a clamp before exp (x.clamp(max=80).exp())"}
MODEST_DECADES = 1.0  # grad norms within 10x of their early level: nothing blew up first


def grad_growth(record: RunRecord, until: int | None) -> tuple[float, int, int] | None:
    """(decades of growth, from step, to step) of the global grad norm over the finite
    steps before ``until`` (the failing step's own values left out: an overflow there is
    the symptom, not growth); None with fewer than 5 finite steps.

    >>> rec = RunRecord()
    >>> for i, g in enumerate([0.1, 0.2, 0.05, 0.3, 0.4, 0.2, float("inf")]):
    ...     rec.log_step({"step": i, "loss": 1.0, "grad_norm": g})
    >>> round(grad_growth(rec, 6)[0], 2)
    0.9
    """
    norms = record.column("grad_norm")
    norms = norms[: len(norms) if until is None else until]
    finite = np.isfinite(norms) & (norms > 0)
    if finite.sum() < 5:
        return None
    idx = np.flatnonzero(finite)
    early = idx[: max(5, len(idx) // 10)]
    base = int(early[np.argmin(norms[early])])
    later = idx[idx > base]
    if not len(later):
        return None
    peak = int(later[np.argmax(norms[later])])
    return math.log10(norms[peak] / norms[base]), base, peak


def user_op(case: Case) -> tuple[str, str, str, str] | None:
    """(module's qualified name, its type, the aten op, what to add) when the first
    non-finite value was made in the user's code by an op with a singularity, from
    finite inputs, after modest grad norms; else None. Cached in ``case.notes``."""
    if "user_op" in case.notes:
        return case.notes["user_op"]
    case.notes["user_op"] = found = _user_op(case)
    return found


def _maker(loc) -> tuple[str, str | None, str | None, str] | None:
    """(pass, module, module type, op) of the op that made the first non-finite value:
    the first op whose result held one its inputs did not, or, when that op only turned
    a -inf into +inf or NaN (``-log(0)``), the log or division that made the -inf."""
    e = loc.first_op
    made = (e.pass_name, e.module, e.module_type, e.op or "")
    if _op(made[3]) not in SINGULAR_OPS and loc.first_minus_inf is not None \
            and _op(loc.first_minus_inf[3]) in SINGULAR_OPS:
        return loc.first_minus_inf
    return made


def _op(name: str) -> str:
    return name.removeprefix("aten.").rstrip("_")


def _user_op(case: Case):
    loc = case.loc
    if loc is None or not loc.found or loc.first_op is None or loc.data_nonfinite:
        return None
    pass_name, module, module_type, op = _maker(loc)
    if pass_name not in ("forward", "loss"):
        return None
    cure = SINGULAR_OPS.get(_op(op))
    if cure is None and case.config.precision == "fp32":
        cure = OVERFLOW_OPS.get(_op(op))
    if cure is None:
        return None
    growth = grad_growth(case.run.record, case.step)
    if growth is None or growth[0] >= MODEST_DECADES:
        return None
    if pass_name == "loss" or module is None:
        fn = case.run.trainer.loss_fn
        return "", "loss", op, cure + f" in the loss ({getattr(fn, '__name__', 'loss_fn')})"
    from nanlab.debug.trace import ROOT

    return ("" if module == ROOT else module), module_type or "?", op, cure


@register_check("init_eps", "user_code", rank=90)
def check_user_code(case: Case) -> Outcome | None:
    """The last check: no registered family explained a NaN made in the user's code."""
    found = user_op(case)
    if found is None:
        return None
    name, kind, op, cure = found
    where = f"module {name or '(model)'} ({kind})" if kind != "loss" else "the loss"
    growth = grad_growth(case.run.record, case.step)
    return Outcome("cause", f"the first non-finite value is made in your code: {op} in "
                   f"{where}, from finite inputs, at step {case.step}; the grad norm grew "
                   f"{growth[0]:.1f} orders of magnitude at most before it: add {cure}",
                   cause="user_code", detail=name,
                   no_fix=f"in your code, {where}: add {cure} ({op} made the first "
                          "non-finite value)")


__all__ = ["grad_growth"]
