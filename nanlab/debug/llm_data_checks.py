"""The SOP's data step for LLM data: ids past the vocabulary, and a spike carried by junk.

:func:`check_llm_data` is what :func:`nanlab.debug.diagnose.diagnose` asks after its
batch check: does the batch of the failing step hold a token id outside the model's
embedding (read from its ``nn.Embedding`` modules), and, for a finite spike, do a few
samples carry the spike and share a degenerate pattern (:func:`per_sample_loss`)?
"""

from __future__ import annotations

from nanlab.debug.attribution import per_sample_loss
from nanlab.debug.checks import Case, Outcome, register_check
from nanlab.faults.llm_data import degenerate_rows, oov_ids, token_paths
from nanlab.train.batches import tensor_paths

SHARD_LOOKAROUND = 50  # batches read on each side of the spike to find the shard's ends


def _batch_index(run, step: int) -> int:
    row = next((r for r in run.record.steps if r["step"] == step), None)
    index = row.get("batch", step) if row else run.trainer.data_position
    return index if isinstance(index, int) and not isinstance(index, bool) else step


def _has_junk(batch) -> bool:
    try:
        tpath, lpath = token_paths(batch)
    except Exception:  # noqa: BLE001 - no token ids in this batch
        return False
    found = dict(tensor_paths(batch))
    return bool(degenerate_rows(found[tpath], found[lpath] if lpath else None)[0].any())


def _shard(run, index: int) -> tuple[int, int]:
    """The first and last batch, around ``index``, in a row that hold junk sequences."""
    first = last = index
    while first > 0 and index - first < SHARD_LOOKAROUND and \
            _has_junk(run.trainer.batches(first - 1)):
        first -= 1
    while last - index < SHARD_LOOKAROUND and _has_junk(run.trainer.batches(last + 1)):
        last += 1
    return first, last


def check_llm_data(run, step: int | None, symptom: str) -> tuple[str | None, str | None]:
    """(the fault, the evidence in words), or (None, None) when the batch of ``step``
    shows neither an id past the embedding nor a spike carried by junk sequences.

    An id past the embedding is ``oov_token`` when the run crashed on it and
    ``oov_token_masked`` when it trained on (the model masked the id); a finite spike
    whose culprits (per-sample loss above 3x the median, scored with the weights of the
    last checkpoint at or before the spike) are all one token repeated, and the other
    samples are not, is ``repeated_token_shard``.

    >>> from nanlab.faults import run_fault
    >>> run = run_fault("oov_token", steps=45)
    >>> check_llm_data(run, 40, "error")[0]
    'oov_token'
    """
    if step is None:
        return None, None
    trainer = run.trainer
    index = _batch_index(run, step)
    batch = trainer.batches(index)
    bad = oov_ids(trainer, batch)
    if bad:
        name, token, at, limit = bad[0]
        kind = "oov_token" if symptom == "error" else "oov_token_masked"
        how = "the embedding lookup crashed on it" if kind == "oov_token" else \
            "no error: the model masked it (a zero embedding, a target loss of log Z - max)"
        return kind, (f"batch {index} of step {step}: {name} holds token id {token} at "
                      f"position {list(at)}, outside the embedding (num_embeddings {limit}; "
                      f"legal ids: 0 to {limit - 1}); {how}")
    if symptom != "spike":
        return None, None
    kept = [s for s in trainer.checkpoints.steps() if s <= step]
    state = trainer.checkpoints.load(kept[-1])["model"] if kept else None
    attribution = per_sample_loss(trainer.model, batch, trainer.loss_fn, state=state)
    pattern = attribution.pattern()
    if pattern is None:
        return None, None
    culprits = attribution.culprits()
    first, last = _shard(run, index)
    weights = f"the weights of step {kept[-1]}" if kept else "the final weights"
    return "repeated_token_shard", (
        f"per-sample loss of batch {index} (step {step}, {weights}): {len(culprits)} of "
        f"{len(attribution.samples)} samples carry {attribution.share():.0%} of the loss "
        f"({culprits[-1].loss:.3g} to {culprits[0].loss:.3g} against a median of "
        f"{attribution.median:.3g}), and every one is {pattern}; batches {first} to {last} "
        "hold such sequences")


__all__ = ["check_llm_data"]


@register_check("data", "llm_data", rank=10)
def _check(case: Case) -> Outcome | None:
    kind, text = check_llm_data(case.run, case.step, case.symptom)
    return Outcome("cause", text, cause="llm_data", detail=kind) if kind else None
