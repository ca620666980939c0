"""The SOP's precision step for a mixture-of-experts router: logits past exp's range.

An MoE run logs each router's evidence every step (a "router" event,
:func:`nanlab.faults.moe_router.log_routers`): its largest logit, its largest
logsumexp and the dtype the logits were computed in. When a step goes non-finite and a
router's logits, computed in a 16-bit float, have passed log(finfo(dtype).max) (11.09 for
fp16), an exp of them overflows there: the router needs float32 (selective precision) or
a z-loss that keeps its logits small (:mod:`nanlab.faults.moe_router`). Asked before the
generic AMP check, which would blame fp16 and turn it all off.
"""

from __future__ import annotations

import math

import torch

from nanlab.debug.checks import Case, Outcome, register_check


def exp_limit(dtype: str) -> float:
    """The largest x whose exp a dtype holds: log(finfo(dtype).max).

    >>> round(exp_limit("float16"), 2), round(exp_limit("float32"), 1)
    (11.09, 88.7)
    """
    return math.log(torch.finfo(getattr(torch, dtype)).max)


def router_evidence(record, step: int | None) -> str | None:
    """The evidence in words when, at the failing ``step``, a router's logits in a 16-bit
    dtype had passed what exp holds in that dtype; else None.

    >>> from nanlab.faults import run_fault
    >>> run = run_fault("router_low_precision", steps=60)  # doctest: +SKIP
    >>> router_evidence(run.record, run.first_bad_step)[:40]  # doctest: +SKIP
    'step 36: blocks.0.mlp.router computes its'
    """
    if step is None:
        return None
    events = record.events_of("router", until_step=step)
    if not events:
        return None
    now = events[-1]
    for name, r in now["routers"].items():
        limit = exp_limit(r["dtype"])
        if r["dtype"] == "float32" or not r["logit_max"] > limit:
            continue
        first = next((e for e in events if e["routers"][name]["logit_max"] > limit), now)
        start = events[0]["routers"][name]["logit_max"]
        idle = sum(n == 0 for n in r["load"])
        return (f"step {now['step']}: {name} computes its logits in {r['dtype']}; its "
                f"largest logit grew from {start:.3g} (step {events[0]['step']}) to "
                f"{r['logit_max']:.4g} (logsumexp {r['logsumexp_max']:.4g}), past "
                f"log({r['dtype']} max) = {limit:.2f} from step {first['step']}: an exp of "
                f"it overflows in {r['dtype']}; tokens per expert {r['load']}"
                + (f" ({idle} expert(s) idle)" if idle else "")
                + "; fix: the router in float32 (selective precision) or a router z-loss")
    return None


__all__ = ["exp_limit", "router_evidence"]


@register_check("amp", "moe_router", rank=5)
def _check(case: Case) -> Outcome | None:
    if case.symptom != "nonfinite":
        return None
    text = router_evidence(case.run.record, case.step)
    if text is None:
        return None
    from nanlab.faults.precision import NaiveSoftmax
    from nanlab.layers.moe import routers

    model = case.run.trainer.model
    detail = "router_low_precision" if any(
        isinstance(r.softmax, NaiveSoftmax) for _, r in routers(model)) else None
    return Outcome("cause", text, cause="moe_router", detail=detail)
