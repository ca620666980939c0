"""The SOP's grad-norm step for a NaN made by the backward pass alone.

A step whose loss is finite and whose grad norm is NaN, where locate's replay finds every
forward value finite and the first non-finite value made by a backward op
(:attr:`nanlab.debug.locate.Location.backward_only`), had no overflow, no dirty input
and no bad LR: a derivative was evaluated where it is infinite (log or sqrt at 0) and
multiplied by the 0 the forward pass gave it, 0 * inf = NaN. The usual source is a
single ``torch.where`` guarding a log or a root, or a hand-written L2 norm at a zero
vector (:mod:`nanlab.faults.backward_nan`). Asked before the grad-norm history, whose
growth check has nothing to read here: the norms were modest up to the NaN.
"""

from __future__ import annotations

import math

from nanlab.debug.checks import Case, Outcome, register_check


def backward_nan_evidence(run, step: int | None, loc) -> str | None:
    """The evidence in words when the first non-finite value of ``step`` was made in the
    backward pass from a finite forward pass and a finite loss; else None.

    >>> from nanlab.faults import run_fault
    >>> from nanlab.debug.locate import locate
    >>> run = run_fault("where_log_grad", steps=42, checkpoint_every=10)  # doctest: +SKIP
    >>> backward_nan_evidence(run, 40, locate(run.trainer))[:30]  # doctest: +SKIP
    'step 40: the loss is finite (1.'
    """
    if step is None or loc is None or not getattr(loc, "found", False) \
            or not loc.backward_only or loc.first_op is None or not loc.first_op.has_nan:
        return None
    if loc.first_inf is not None and loc.first_inf.seq <= loc.first_op.seq:
        return None  # an inf came first: an overflow (fp16, a large init), not 0 * inf

    row = next((r for r in run.record.steps if r["step"] == step), None)
    loss = row.get("loss") if row else loc.loss
    if loss is None or not math.isfinite(loss):
        return None
    op = loc.first_op
    made = (f"{op.op} in {op.node}, the derivative of {op.node_of()}" if op is not None
            and op.node else (op.op if op is not None else "a gradient"))
    guard = {"log": "torch.where(x > 0, torch.log(torch.where(x > 0, x, 1)), 0) (the double "
                    "where: the branch where does not select must not see 0)",
             "sqrt": "a floor under the root, or torch.linalg.vector_norm / F.normalize "
                     "(their backward is finite at a zero vector)"}
    cure = guard.get(op.node_of() if op is not None else None,
                     "keep the op's input away from its singular point in both branches")
    return (f"step {step}: the loss is finite ({loss:.4g}) and every forward value was "
            f"finite; the first non-finite value is a gradient, made by {made}: a derivative "
            f"taken where it is infinite, times the 0 the forward pass gave it; fix: {cure}")


__all__ = ["backward_nan_evidence"]


@register_check("grad_norms", "backward_nan", rank=5)
def _check(case: Case) -> Outcome | None:
    if case.symptom != "nonfinite":
        return None
    text = backward_nan_evidence(case.run, case.step, case.loc)
    if text is None:
        return None
    from nanlab.faults.backward_nan import EntropyTerm

    detail = "where_log_grad" if isinstance(case.run.trainer.loss_fn, EntropyTerm) else None
    if detail is not None:
        return Outcome("cause", text, cause="backward_nan", detail=detail)
    return Outcome("cause", text, cause="backward_nan", detail=case.loc.first_op.node_of()
                   if case.loc.first_op is not None else None,
                   no_fix="in your code: guard the op's input in both branches (" +
                          text.rsplit("fix: ", 1)[-1] + ")")
