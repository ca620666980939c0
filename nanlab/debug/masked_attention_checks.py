"""The SOP's data step for attention masks: a query row that may attend to no key.

:func:`check_masked_attention` reads the key-padding masks of the failing step's batch
(:func:`nanlab.faults.masked_attention.padding_masks`). A row that hides every key is an
empty example (``empty_sequence``: skip it, ``validate_data``). Left padding is legal,
but under a causal mask the first positions of a padded row see only padding; when the
first non-finite value of the step is made in the forward pass (``locate``), the -inf
fill of the mask made it (``left_padding_inf_mask``: fill with finfo.min instead).
Asked before the generic batch check, which names the empty row as dirty data too.
"""

from __future__ import annotations

from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.faults.batch_check import mask_problems
from nanlab.faults.masked_attention import padding_masks

FORWARD_PASSES = ("forward",)  # where a softmax over padding makes its NaN


def _batch_index(run, step: int) -> int:
    row = next((r for r in run.record.steps if r["step"] == step), None)
    index = row.get("batch", step) if row else run.trainer.data_position
    return index if isinstance(index, int) and not isinstance(index, bool) else step


def left_padded_rows(name: str, mask) -> dict[int, int]:
    """{row: padding positions before its first token} of a mask in Hugging Face's
    convention (``attention_mask``: 1 token, 0 padding); {} for any other mask.

    >>> import torch
    >>> left_padded_rows("attention_mask", torch.tensor([[0, 0, 1], [1, 1, 1], [0, 1, 1]]))
    {0: 2, 2: 1}
    """
    if not name.lower().endswith("attention_mask") or mask.is_floating_point():
        return {}
    token = mask != 0
    lead = (~token).int().cumprod(1).sum(1)  # zeros before the first 1
    return {int(r): int(lead[r]) for r in range(len(lead)) if 0 < lead[r] < mask.shape[1]}


def check_masked_attention(run, step: int | None, symptom: str,
                           loc=None) -> tuple[str | None, str | None]:
    """(the fault, the evidence in words), or (None, None) when the batch of ``step``
    carries no key-padding mask, or one that explains nothing.

    >>> from nanlab.faults import run_fault
    >>> run = run_fault("empty_sequence", steps=42)
    >>> check_masked_attention(run, 40, "nonfinite")[0]
    'empty_sequence'
    """
    if step is None or symptom not in ("nonfinite", "error"):
        return None, None
    index = _batch_index(run, step)
    masks = padding_masks(run.trainer.batches(index))
    for _, name, mask in masks:
        dead = mask_problems(name, mask)
        if dead:
            return "empty_sequence", (f"batch {index} of step {step}: {dead[0]}: an empty "
                                      "example, which a -inf fill turns into NaN")
    if loc is None or not getattr(loc, "found", False) or loc.pass_name not in FORWARD_PASSES:
        return None, None
    for _, name, mask in masks:
        rows = left_padded_rows(name, mask)
        if rows:
            where = f" in {loc.module}" if loc.module else ""
            op = f", made by {loc.first_op.op}" if loc.first_op is not None else ""
            return "left_padding_inf_mask", (
                f"batch {index} of step {step}: {name} left-pads {len(rows)} row(s) (up to "
                f"{max(rows.values())} positions): under a causal mask their first queries "
                f"see only padding; the first non-finite value is in the forward pass"
                f"{where}{op}: a softmax over keys all filled with -inf")
    return None, None


__all__ = ["check_masked_attention", "left_padded_rows"]


@register_check("data", "masked_attention", rank=15)
def _check(case: Case) -> Outcome | None:
    kind, text = check_masked_attention(case.run, case.step, case.symptom, case.loc)
    return Outcome("cause", text, cause="masked_attention", detail=kind) if kind else None
